"""What users run: the ``ragen`` command line and the programs behind its subcommands.

- :mod:`~ragen_core.apps.cli`: ``ragen`` (one table, ``COMMANDS``: each command a module with ``main(argv, prog)``)
- the commands: :mod:`~ragen_core.apps.train`, :mod:`~ragen_core.apps.diagnose`, :mod:`ragen_core.apps.reproduce`
  (the paper's findings at small scale), :mod:`~ragen_core.apps.play`, :mod:`~ragen_core.apps.envs`,
  :mod:`~ragen_core.apps.configs`, :mod:`~ragen_core.apps.bench`; ``verify`` is ``theory_checks``
- :mod:`~ragen_core.apps.install` (the train extra, the checkout), :mod:`~ragen_core.apps.demo` (``make demo``),
  :mod:`~ragen_core.apps.env_demo`

The top layer: nothing else in the project imports it.
"""
