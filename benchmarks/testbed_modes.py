"""The two modes of a testbed's warm start, measured: is the input-agnostic mode the policy's lowest-entropy mode?

    python -m benchmarks.testbed_modes RUN_DIR [RUN_DIR ...]

For each run folder (a ``ragen train`` run of a config with ``warm_start.reasoning_dependence`` < 1; ``run.steps=0``
is enough), loads the weights of its latest checkpoint and reports the policy's per-token entropy along the
demonstrator's state-derived reasoning and along its templates, teacher-forced on 32 probe prompts
(:func:`ragen_core.training.probe.scripted_mode_entropies`), beside the step-0 probe's numbers from the run's
``metrics.jsonl`` (its sampled traces classified by exact template match). Writes
``benchmarks/results/testbed_modes.json`` (one record per run folder, merged with the file's other records).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch

RESULTS = Path(__file__).resolve().parent / "results"
PROBE_KEYS = ("probe/retrieval_margin", "probe/token_entropy", "probe/template_share", "probe/token_entropy_template",
              "probe/token_entropy_state", "val/success")


def measure(run_dir: Path) -> dict[str, Any]:
    from ragen_core.policy import load_policy
    from ragen_core.training.checkpoint import load_checkpoint
    from ragen_core.training.config import load_config
    from ragen_core.training.probe import scripted_mode_entropies
    from ragen_core.training.trainer import policy_path

    cfg = load_config(run_dir / "config.toml")
    state = load_checkpoint(run_dir)
    policy = load_policy(policy_path(cfg), device=torch.device("cpu"))
    policy.model.load_state_dict(state["model"])
    policy.model.eval()
    modes = scripted_mode_entropies(policy, cfg)
    step0: dict[str, float] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row.get("step") == 0:
            step0.update({k: row[k] for k in PROBE_KEYS if k in row})
    ws = cfg.warm_start
    return {"run": run_dir.name, "env": cfg.env.id, "seed": cfg.run.seed, "step": int(state["step"]),
            "template_levels": ws.template_levels, "template_answer": ws.template_answer,
            "distinct_templates": int(modes["templates"]), "teacher_forced_entropy_state": modes["state"],
            "teacher_forced_entropy_template": modes["template"], "step0": step0}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, default=RESULTS / "testbed_modes.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    records = json.loads(args.out.read_text()) if args.out.is_file() else {}
    for run in args.runs:
        rec = measure(run)
        records[f"{rec['env']}|levels={rec['template_levels']}|seed={rec['seed']}"] = rec
        print(json.dumps(rec))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(records, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
