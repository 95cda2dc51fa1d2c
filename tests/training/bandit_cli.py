"""Shared scaffolding of the `ragen train` command-line tests: tiny runs of the real Bandit env through
`ragen_core.apps.train.main` (not a test module)."""

from __future__ import annotations

from pathlib import Path

#: The words a tiny model needs to play Bandit (its tokenizer is trained on them).
BANDIT_CORPUS = "Bandit arm teacher engineer gambler Choose one arm <answer> </answer>"


def bandit_args(model_dir: Path, *extra: str, steps: int = 2) -> list[str]:
    """Overrides of a `steps`-step tiny Bandit run (validated every `steps` steps, a 4-episode warm start), then
    `extra`."""
    return [f"model.path={model_dir}", "env.id=ragen/Bandit-v0", "rollout.groups=2", "rollout.group_size=2",
            "rollout.max_turns=1", "rollout.max_new_tokens=8", "rollout.system_prompt=false", f"run.steps={steps}",
            "run.device=cpu", "run.progress=false", "algo.name=grpo", "algo.lr=1e-3", "algo.mini_batch_size=4",
            "algo.micro_batch_size=4", "eval.episodes=2", f"eval.every={steps}", "mi.every=0",
            "warm_start.sft_episodes=4", "warm_start.epochs=1", "warm_start.batch_size=4", *extra]


def base_config_file(folder: Path) -> Path:
    """A one-key config file in `folder` (run.seed = 3)."""
    path = folder / "base.toml"
    path.write_text("# a test config\n[run]\nseed = 3\n")
    return path
