"""What a study's warm process imports once, before it forks each run from itself (`ragen reproduce`'s local runs).

A run started as a fresh ``python -m ragen_core.apps.train`` spends 4-5 s importing torch, transformers and the
trainer, and 0.5 s importing matplotlib for its plots, before its first step: 13 runs a seed, about a core-minute
per seed. :func:`ragen_core.apps.reproduce.runner.execute_run` with ``warm=True`` forks each run from a process
that imported this module (Python's ``forkserver``, started with one torch thread), so the imports happen once per
study. Importing it also builds (once per machine, about 15 s) and loads the compiled decoding step
(:mod:`ragen_core.policy.native`), so that every forked run finds it loaded. Nothing else is computed and no
thread pool is started before the fork.
"""

import matplotlib

matplotlib.use("Agg")  # what the run's plots select anyway (ragen_core.training.report.write_plots)

import matplotlib.pyplot  # noqa: E402, F401

import ragen_core.apps.train  # noqa: E402, F401
from ragen_core.policy.native import native_decode_step  # noqa: E402

native_decode_step()  # None where it cannot be built: the runs then decode with the Python step (same numbers)
