"""What users run: the ``ragen`` command line and the programs behind its subcommands.

- :mod:`~ragen_core.apps.cli`: ``ragen`` (train, diagnose, reproduce, play, demo, envs, configs, verify, bench)
- :mod:`~ragen_core.apps.demo` (``make demo``), :mod:`~ragen_core.apps.env_demo`, :mod:`~ragen_core.apps.play`,
  :mod:`~ragen_core.apps.diagnose`, :mod:`ragen_core.apps.reproduce` (the paper's findings at small scale)

The top layer: nothing else in the project imports it.
"""
