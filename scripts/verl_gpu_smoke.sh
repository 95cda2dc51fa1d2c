#!/usr/bin/env bash
# GPU smoke test of the verl adapter (docs/scale_out.md, section verl), for one lent GPU machine; run from the repo root.
#
#   bash scripts/verl_gpu_smoke.sh                 # stages 0-2; stage 3 only with MODEL_PATH set
#   MODEL_PATH=/local/Qwen2.5-0.5B-Instruct bash scripts/verl_gpu_smoke.sh
#
# Stage 0: report what is installed (torch/CUDA, verl, vllm, ray, TransferQueue, pandas/pyarrow).
# Stage 1: the adapter's tensor code on the GPU (scripts/verl/gpu_checks.py; needs torch + transformers only).
# Stage 2: the adapter tests (tests/integrations/test_integration_verl.py, tests/integrations/test_verl_glue.py; the verl tests skip without
# verl 0.9).
# Stage 3: two PPO steps of Sokoban with verl (trainer ragen_snr_sync, estimator ragen_snr, agent loop
#          ragen_env_agent, vLLM rollout); needs verl 0.9 with vllm, ray, TransferQueue and local weights at
#          MODEL_PATH (such a machine may reach no network: nothing is downloaded here).
# Each stage prints PASS/FAIL/SKIP; the exit status is non-zero if a stage that ran failed.
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
OUT=${OUT:-/tmp/ragen_verl_smoke}
mkdir -p "$OUT"
status=0
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

echo "== stage 0: environment"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || echo "no nvidia-smi"
$PY - <<'PY'
import importlib.metadata as md
for name in ("torch", "transformers", "verl", "vllm", "sglang", "ray", "TransferQueue", "tensordict", "pandas",
             "pyarrow", "flash-attn", "gymnasium"):
    try:
        print(f"  {name:14s} {md.version(name)}")
    except md.PackageNotFoundError:
        print(f"  {name:14s} MISSING")
PY

echo "== stage 1: adapter tensors on the GPU"
if $PY scripts/verl/gpu_checks.py; then echo "PASS stage 1"; else echo "FAIL stage 1"; status=1; fi

echo "== stage 2: adapter tests"
if $PY -m pytest -q -p no:cacheprovider tests/integrations/test_integration_verl.py tests/integrations/test_verl_glue.py; then echo "PASS stage 2"; else
  echo "FAIL stage 2"; status=1; fi

echo "== stage 3: two verl PPO steps on Sokoban"
missing=$($PY - <<'PY'
import importlib.util as u
print(" ".join(m for m in ("verl", "vllm", "ray", "transfer_queue", "pandas", "pyarrow") if u.find_spec(m) is None))
PY
)
if [ -n "$missing" ] || [ -z "${MODEL_PATH:-}" ]; then
  echo "SKIP stage 3: missing modules [${missing}], MODEL_PATH='${MODEL_PATH:-}' (both are needed)"
  exit $status
fi
$PY scripts/verl/make_env_data.py "$OUT/data" --train 64 --val 8 || { echo "FAIL stage 3 (data)"; exit 1; }
timeout "${STAGE3_TIMEOUT:-420}" $PY -m verl.trainer.main_ppo \
  trainer.use_v1=True trainer.v1.trainer_mode=ragen_snr_sync \
  +ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=ragen_core.integrations.verl.register \
  algorithm.adv_estimator=ragen_snr \
  +algorithm.ragen_filter.strategy=top_p +algorithm.ragen_filter.value=0.9 \
  +algorithm.ragen_mi.every=1 +algorithm.ragen_mi.max_groups=4 \
  data.train_files="$OUT/data/train.parquet" data.val_files="$OUT/data/val.parquet" \
  data.train_batch_size=8 data.max_prompt_length=1024 data.max_response_length=1024 \
  actor_rollout_ref.model.path="$MODEL_PATH" \
  actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.n=4 \
  actor_rollout_ref.rollout.gpu_memory_utilization=0.4 actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
  actor_rollout_ref.rollout.agent.agent_loop_config_path=scripts/verl/agent_loop.yaml \
  actor_rollout_ref.rollout.agent.default_agent_loop=ragen_env_agent \
  actor_rollout_ref.actor.ppo_mini_batch_size=8 actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 \
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8 \
  actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8 \
  trainer.n_gpus_per_node=1 trainer.nnodes=1 trainer.total_training_steps=2 \
  trainer.val_before_train=False trainer.test_freq=-1 trainer.save_freq=-1 trainer.logger='[console]' \
  2>&1 | tee "$OUT/stage3.log"
rc=${PIPESTATUS[0]}
if [ "$rc" -eq 0 ] && grep -q "ragen_filter/kept_groups" "$OUT/stage3.log"; then echo "PASS stage 3"; else
  echo "FAIL stage 3 (exit $rc; log in $OUT/stage3.log)"; status=1; fi
exit $status
