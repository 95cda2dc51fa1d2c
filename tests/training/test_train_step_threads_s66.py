"""A bare `Trainer.train_step()` computes with its own run's torch thread count, as `fit()` does, whatever another
Trainer of the process set since (two notebook cells: one trainer built, another built after it at another count,
then the first one stepped)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

#: Builds trainer A at run.threads=1, then trainer B at run.threads=2 (which sets 2 for the process), then takes a
#: step of A and prints the count in force during A's step (read inside the step through its rollout) and after it.
SCRIPT = """
import json, sys
import torch
from ragen_core.policy import HFPolicy
from ragen_core.training import trainer as T
from ragen_core.training.config import load_config

model, out = sys.argv[1], sys.argv[2]
base = ["env.id=ragen/Sokoban-v0", "env.kwargs.max_actions_per_turn=1", "rollout.groups=1", "rollout.group_size=2",
        "rollout.max_new_tokens=4", "eval.every=0", "run.device=cpu", "run.progress=false"]
policy = HFPolicy.from_pretrained(model)
a = T.Trainer(load_config(None, [*base, "run.threads=1"]), out + "/a", policy=policy)
b = T.Trainer(load_config(None, [*base, "run.threads=2"]), out + "/b", policy=policy)
seen = []
real = T.rollout
def spy(*args, **kwargs):
    seen.append(torch.get_num_threads())
    return real(*args, **kwargs)
T.rollout = spy
a.train_step()
print(json.dumps({"after_b": b.threads, "during_a_step": seen[0], "a": a.threads}))
"""


def test_a_bare_train_step_uses_its_own_thread_count(make_tiny_model, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(make_tiny_model("Player Boxes Targets")), str(tmp_path)],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"after_b": 2, "during_a_step": 1, "a": 1}
