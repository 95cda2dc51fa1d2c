"""One process of a 2-process CPU (gloo) run of RagenGRPOTrainer; started by torchrun from
tests/integrations/test_integration_trl.py::test_filtering_under_ddp_on_two_processes (not collected by pytest itself).

    torchrun --nproc_per_node 2 tests/integrations/_trl_ddp_worker.py MODEL_DIR OUT_DIR

Trains one step on three prompts x G = 4 with fixed rewards, top_k_abs = 1 (one kept group) and the MI proxies
logged, and writes, per
rank, the model before the step, the rows this process scored (prompt, completion ids, reward) and the gradient at
the optimizer step (after DDP's all-reduce) to OUT_DIR/rank{R}.pt.
"""

from __future__ import annotations

import copy
import os
import sys

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

from ragen_core.integrations.trl import RagenGRPOConfig, RagenGRPOTrainer

PROMPTS = ("Turn 1: State", "Up", "You have 10 actions left.")
# Variances 1/3, 0, 1: top_k_abs = 1 keeps the last group, whose rows all lie on rank 1 (rows 8-11 of 12), so
# rank 0 keeps nothing and must still take part in the backward pass.
PATTERNS = {PROMPTS[0]: [0.0, 1.0, 0.0, 1.0], PROMPTS[1]: [1.0, 1.0, 1.0, 1.0], PROMPTS[2]: [0.0, 0.0, 0.0, 2.0]}
G = 4


def main(model_dir: str, out_dir: str) -> None:
    rank = int(os.environ.get("RANK", "0"))
    record: dict = {"rows": [], "before": None, "grad": None}

    def reward(prompts, completions, completion_ids, **kwargs):
        seen: dict[str, int] = {}
        out = []
        # TRL hands each process a slice of whole rows in order; the k-th row of a prompt in this slice is its
        # (offset + k)-th rollout, where the offset counts that prompt's rows on lower ranks.
        offset = {p: 0 for p in PROMPTS}
        if rank == 1:
            offset[PROMPTS[1]] = 2  # rows 4-5 of group 1 are on rank 0
        for prompt, ids in zip(prompts, completion_ids):
            k = offset[prompt] + seen.get(prompt, 0)
            seen[prompt] = seen.get(prompt, 0) + 1
            out.append(PATTERNS[prompt][k])
            record["rows"].append((prompt, list(ids), PATTERNS[prompt][k]))
        return out

    reward.__name__ = "pattern_reward"

    class Capture(TrainerCallback):
        def on_step_begin(self, args, state, control, model=None, **kw):
            record["before"] = copy.deepcopy(model.state_dict())

        def on_pre_optimizer_step(self, args, state, control, model=None, **kw):
            record["grad"] = {n: None if p.grad is None else p.grad.detach().clone()
                              for n, p in model.named_parameters()}

    torch.manual_seed(0)
    args = RagenGRPOConfig(
        output_dir=out_dir, per_device_train_batch_size=len(PROMPTS) * G // 2, num_generations=G,
        max_completion_length=6, max_steps=1, learning_rate=5e-2, logging_steps=1, save_strategy="no",
        report_to="none", use_cpu=True, seed=0, shuffle_dataset=False, max_grad_norm=1e9, disable_tqdm=True,
        dataloader_num_workers=0, bf16=False, rv_filter="top_k_abs", rv_filter_value=1, mi_every=1,
        gradient_checkpointing=False, ddp_backend="gloo",
    )
    tok = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    trainer = RagenGRPOTrainer(model=model, reward_funcs=reward, args=args, processing_class=tok,
                               train_dataset=Dataset.from_dict({"prompt": list(PROMPTS)}), callbacks=[Capture()])
    trainer.train()
    record["kept_groups"] = trainer.last_filter_result.kept.tolist()
    record["world_size"] = trainer.accelerator.num_processes
    record["logged"] = {k: v for entry in trainer.state.log_history for k, v in entry.items()}
    # Model state keys carry no DDP prefix here: the callback receives the unwrapped model.
    torch.save(record, os.path.join(out_dir, f"rank{rank}.pt"))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
