"""The torch thread count a run computes with: `run.threads = 0` (auto) means one count per process whatever an
earlier Trainer set, and a resume records the count in force and the CPU in ``resume_log.jsonl``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ragen_core.training.report import RESUME_LOG, record_resume

#: Builds two Trainers in one fresh process, as two notebook cells would: the first at an explicit count, the second
#: with `run.threads = 0` for a model above the one-thread size (the tiny model stands in for one: the bound is
#: lowered to 0). Prints the count in force after each and what the second recorded.
SCRIPT = """
import json, sys
import torch
from ragen_core.policy import HFPolicy
from ragen_core.training import trainer
from ragen_core.training.config import load_config

model, out, first = sys.argv[1], sys.argv[2], int(sys.argv[3])
base = ["env.id=ragen/Sokoban-v0", "env.kwargs.max_actions_per_turn=1", "rollout.groups=1", "rollout.group_size=2",
        "eval.episodes=1", "run.device=cpu", "run.progress=false"]
policy = HFPolicy.from_pretrained(model)
trainer.AUTO_ONE_THREAD_PARAMETERS = 0
trainer.Trainer(load_config(None, [*base, f"run.threads={first}"]), out + "/first", policy=policy)
after_first = torch.get_num_threads()
second = trainer.Trainer(load_config(None, base), out + "/second", policy=policy)
print(json.dumps({"after_first": after_first, "auto": torch.get_num_threads(), "recorded": second.threads}))
"""


def _fresh_torch_threads(env: dict[str, str]) -> int:
    """torch's default thread count, read in a fresh interpreter that imports nothing else."""
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"], env=env,
                         check=True, capture_output=True, text=True)
    return int(out.stdout)


def test_auto_threads_are_torchs_default_whatever_an_earlier_trainer_set(make_tiny_model, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    default = _fresh_torch_threads(env)
    first = default + 1  # another count than the default on any machine
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(make_tiny_model("Player Boxes Targets")),
                          str(tmp_path), str(first)], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    counts = json.loads(out.stdout.strip().splitlines()[-1])
    assert counts == {"after_first": first, "auto": default, "recorded": default}


@pytest.fixture
def threads():
    """Set torch's thread count in a test; the process's count is restored after it."""
    before = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(before)


def _cpuinfo_model() -> str | None:
    """The first ``model name`` line of /proc/cpuinfo, read here independently of the code under test."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    return next((line.partition(":")[2].strip() for line in text.splitlines() if line.startswith("model name")),
                None)


def test_each_resume_records_the_thread_count_in_force_and_the_cpu(tmp_path, threads):
    threads(3)
    record_resume(tmp_path, 2, {"run.threads": (1, 3)})
    threads(2)
    record_resume(tmp_path, 4, {})
    entries = [json.loads(line) for line in (tmp_path / RESUME_LOG).read_text().splitlines()]
    assert [(e["step"], e["torch_threads"]) for e in entries] == [(2, 3), (4, 2)]
    assert [e["cpu"] for e in entries] == [_cpuinfo_model()] * 2
