#!/usr/bin/env bash
# GPU part of the benchmarks, in one go, on a lent CUDA machine (about 5-8 minutes on one H200).
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
ls -l "$OUT"
exit $status
