"""Regenerate examples/rollouts_sample.jsonl (seeded): ``python examples/make_rollouts_sample.py``.

32 groups x 8 rollouts of a simulated Sokoban-like task with bimodal per-group reward variance (see
``ragen_core.apps.diagnose.simulate_bimodal_rollouts``). Try it with ``ragen diagnose examples/rollouts_sample.jsonl``.
"""

from pathlib import Path

from ragen_core.apps.diagnose import simulate_bimodal_rollouts, write_rollouts

SAMPLE = Path(__file__).with_name("rollouts_sample.jsonl")

if __name__ == "__main__":
    write_rollouts(simulate_bimodal_rollouts(n_groups=32, group_size=8, seed=0), SAMPLE)
    print(f"wrote {SAMPLE}")
