"""``model.fused_training`` off against on: the same short runs trained through the operator path and through the
fused training kernels (``ragen_core/policy/fused_train.py``), judged before the switch may become a default.

    python -m benchmarks.bench_fused_training [--quick] [--seeds 8] [--first-seed 400] [--steps 20]
                                              [--config collapse_sokoban] [--workers 2]

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

Each run is a fresh ``ragen train`` process (no warm-start cache, one torch thread), as in
:mod:`benchmarks.bench_fast_forward`, whose run, outcome and verdict code this reuses. Writes
``benchmarks/results/fused_training.json`` (``--quick``: one seed of 4 steps, ``fused_training_quick.json``).
"""

from __future__ import annotations

import argparse

from benchmarks.bench_fast_forward import BOUNDS, build_parser, run_ab

__all__ = ["BOUNDS", "KEY", "build_parser", "main"]

KEY = "model.fused_training"


def parser() -> argparse.ArgumentParser:
    """The command line; its defaults are the registered design (module docstring)."""
    return build_parser("python -m benchmarks.bench_fused_training", __doc__.split("\n")[0], 8, 400)


def main(argv: list[str] | None = None) -> int:
    return run_ab(parser(), argv, KEY, "fused_training")


if __name__ == "__main__":
    raise SystemExit(main())
