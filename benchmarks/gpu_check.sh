#!/usr/bin/env bash
# GPU part of the benchmarks, in one go, on a lent CUDA machine (about 10-15 minutes on one H200).
#
#   bash benchmarks/gpu_check.sh            # from the repository root; results under $OUT (default ./gpu-results)
#   bash benchmarks/gpu_check.sh --vendor   # on the dev machine: copy the pure-Python deps the GPU machine may
#                                           # lack (gymnasium, ...) from .venv into build/gpu-vendor (carry it)
#
# Uses the machine's own python (CUDA torch + transformers), not our CPU venv: the repo is put on PYTHONPATH, and
# build/gpu-vendor is appended only when gymnasium is not importable there. Writes:
#   $OUT/filtering_gpu.json  bench_filtering on cuda: tiny and large models, Sokoban and FrozenLake, 8x16 and 4x8,
#                            all variants, 5 interleaved rounds after 2 warm-up rounds, torch.cuda.max_memory_allocated
#   $OUT/rollout_gpu.json    bench_rollout on cuda (8x16, 3 turns x 48 tokens; 4x8, 2 x 32)
#   $OUT/sokoban_25m*        configs/sokoban_tiny.toml trained on cuda with a 25 M-parameter tiny model: the run
#                            folder, tokens/s (generated and trained) and the validation curve (never run yet)
#   $OUT/env.txt             nvidia-smi, python and package versions
#   $OUT/*.log               each step's output
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY=${PYTHON:-python3}

if [[ "${1:-}" == "--vendor" ]]; then
    SITE=$(ls -d "$ROOT"/.venv/lib/python3*/site-packages | head -1)
    mkdir -p build/gpu-vendor
    for pkg in gymnasium farama_notifications cloudpickle; do
        cp -r "$SITE/$pkg" build/gpu-vendor/ 2>/dev/null || echo "warning: $pkg not found in $SITE"
    done
    du -sh build/gpu-vendor
    exit 0
fi

OUT=${OUT:-$ROOT/gpu-results}
mkdir -p "$OUT"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export TOKENIZERS_PARALLELISM=false
# The tiny models are built on first use (tokenizer + weights, ~15 s each); keep them out of $OUT.
export RAGEN2_CACHE=${RAGEN2_CACHE:-/tmp/ragen2-cache}
if ! "$PY" -c "import gymnasium" 2>/dev/null; then
    if [[ -d build/gpu-vendor ]]; then
        export PYTHONPATH="$PYTHONPATH:$ROOT/build/gpu-vendor"
    else
        echo "gymnasium is not importable and build/gpu-vendor is missing: run 'bash benchmarks/gpu_check.sh --vendor'"
        echo "on the dev machine and carry build/gpu-vendor" | tee "$OUT/error.txt"
        exit 2
    fi
fi

{
    nvidia-smi || true
    "$PY" - <<'PYEOF'
import platform, torch, transformers
print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda,
      "transformers", transformers.__version__, "device", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
PYEOF
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "CUDA is not available to $PY" | tee "$OUT/error.txt"
    exit 2
fi

status=0
timeout 330 "$PY" -m benchmarks.bench_filtering --device cuda --threads 4 \
    --envs sokoban,frozenlake --models tiny,large --sizes 8x16,4x8 --large-sizes 8x16,4x8 \
    --large-env sokoban --large-all-variants --max-new-tokens 32 --warmup 2 --repeats 5 --large-repeats 5 \
    --out "$OUT/filtering_gpu.json" 2>&1 | tee "$OUT/filtering.log" || status=1
timeout 150 "$PY" -m benchmarks.bench_rollout --device cuda --threads 4 \
    --configs "8x16:3:48;4x8:2:32" --repeats 3 --out "$OUT/rollout_gpu.json" 2>&1 | tee "$OUT/rollout.log" || status=1
# Sokoban learning on CUDA with a larger tiny model (hidden 512, 8 layers: about 25 M parameters): the shipped
# config, its warm start and 60 GRPO steps; tokens/s and the validation curve from its metrics.jsonl.
MODEL=$("$PY" -c "from ragen_core.policy import default_tiny_model_dir as d; print(d(hidden=512, layers=8, heads=8, kv_heads=4))")
timeout 420 "$PY" -m ragen_core.apps.train configs/sokoban_tiny.toml "model.path=\"$MODEL\"" run.device=cuda \
    run.max_minutes=6 run.progress=false --run-dir "$OUT/sokoban_25m" 2>&1 | tail -30 | tee "$OUT/sokoban_25m.log" || status=1
"$PY" - "$OUT/sokoban_25m" <<'PYEOF' | tee "$OUT/sokoban_25m_summary.json"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl") if l.strip()]
steps = [r for r in rows if "perf/rollout_s" in r]
gen = sum(r["rollout/response_length"] * r["rollout/trajectories"] for r in steps)
print(json.dumps({
    "generated_tokens_per_s": gen / max(sum(r["perf/rollout_s"] for r in steps), 1e-9),
    "trained_tokens_per_s": sum(r.get("perf/tokens_trained", 0) for r in steps)
                            / max(sum(r["perf/update_s"] + r["perf/score_s"] for r in steps), 1e-9),
    "validation_curve": [[r["step"], r["val/success"]] for r in rows if r.get("val/success") is not None],
    "warm_start_s": next((r["perf/sft_s"] for r in rows if "perf/sft_s" in r), None),
}, indent=1))
PYEOF
ls -l "$OUT"
exit $status
