"""``model.fused_training`` off against on: the same short runs trained through the operator path and through the
fused training kernels (``ragen_core/policy/fused_train.py``), judged before the switch may become a default.

    python -m benchmarks.bench_fused_training [--quick] [--stage 1] [--seeds 8] [--first-seed 400] [--steps 20]
                                              [--config collapse_sokoban] [--workers 2] [--out DIR]

The design was fixed before the first run (docs/performance.md, "The fused training step"):

- **Primary outcomes**: greedy validation success and the held-out probe's retrieval margin right after the warm
  start (step 0), on - off paired by seed: the warm start is where the switch acts (2980 SFT steps, 72% of the
  run), and where a rounding difference has the fewest steps to be amplified. **Equivalent** when the 90%
  interval lies within +-10 points of success / +-0.15 of margin (the study's per-seed bounds), **differs** when
  the 95% interval excludes 0, else inconclusive with the detectable effect
  (:func:`ragen_core.apps.reproduce.verdicts.compare`).
- **Secondary**: the same at the end of the run (20 RL steps), where single runs of one seed spread by 12-53
  points between settings that differ only by rounding (``model.fast_forward``'s benchmark), so an inconclusive
  verdict is expected at this n.
- **Seeds**: 400-407, never used by a reported run. Sized from the rounding noise of the warm start (SD 2-4
  points of success per start at one seed, docs/performance.md; paired differences of up to 8 points SD across
  seeds in ``model.fast_forward``'s runs): at SD 8, 8 pairs give a 90% interval of about +-5.4 points, so a true
  difference within about +-4.6 points is shown equivalent.
- Also the wall time of each pair, run side by side (one per core), off / on.

**Stage 2** (``--stage 2``; its design fixed on 2026-12-07, after stage 1's verdicts and before any of its own
runs): stage 1 left ``success_0`` inconclusive (+5.2 points, 90% interval [-1.8, +12.1], paired SD 10.3, not the 8
its sizing assumed). Stage 2 repeats the design on seeds 408-431 (24 pairs, never used by a reported run) and is
judged alone: stage 1's pairs are not pooled into it, and the rule is stage 1's (both primary outcomes
equivalent, or the switch stays off). At SD 10.3, 24 pairs give a 90% interval of about +-3.6 points, so with 80%
power a true difference within about +-4.6 points is shown equivalent. Its runs are kept in ``--out`` and resume
(:func:`benchmarks.bench_fast_forward.run_one`), so the stage can span sittings; it writes
``benchmarks/results/fused_training_stage2.json``.

Each run is a fresh ``ragen train`` process (no warm-start cache, one torch thread), as in
:mod:`benchmarks.bench_fast_forward`, whose run, outcome and verdict code this reuses. Writes
``benchmarks/results/fused_training.json`` (``--quick``: one seed of 4 steps, ``fused_training_quick.json``).
"""

from __future__ import annotations

import argparse

from benchmarks.bench_fast_forward import BOUNDS, build_parser, run_ab

__all__ = ["BOUNDS", "KEY", "build_parser", "main"]

KEY = "model.fused_training"


#: Each stage's registered seeds (how many, the first) and the stem of its results file (module docstring).
STAGES = {1: (8, 400, "fused_training"), 2: (24, 408, "fused_training_stage2")}


def parser(stage: int = 1) -> argparse.ArgumentParser:
    """The command line; its defaults are stage `stage`'s registered design (module docstring)."""
    seeds, first, _ = STAGES[stage]
    p = build_parser("python -m benchmarks.bench_fused_training", __doc__.split("\n")[0], seeds, first)
    p.add_argument("--stage", type=int, choices=sorted(STAGES), default=1,
                   help="the registered stage whose seeds are the defaults (2: seeds 408-431)")
    return p


def main(argv: list[str] | None = None) -> int:
    stage = parser().parse_known_args(argv)[0].stage
    return run_ab(parser(stage), argv, KEY, STAGES[stage][2])


if __name__ == "__main__":
    raise SystemExit(main())
