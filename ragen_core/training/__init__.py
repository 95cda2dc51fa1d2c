"""The small-scale trainer: config, algorithm table, training loop, checkpoints, run log and warm start.

- :mod:`~ragen_core.training.config`: the strict sectioned TOML config (``TrainConfig``)
- :mod:`~ragen_core.training.algorithms`: PPO / GRPO / Dr.GRPO / DAPO / RLOO as rows of one table
- :mod:`~ragen_core.training.trainer`: ``Trainer`` (rollout -> filter -> advantages -> update), run by
  ``ragen train`` (:mod:`ragen_core.apps.train`) or from Python (docs/train.md, "From Python");
  :mod:`~ragen_core.training.metrics`: every logged metric key
- :mod:`~ragen_core.training.checkpoint`, :mod:`~ragen_core.training.report`: resumable state, metrics and plots
- :mod:`~ragen_core.training.sft`, :mod:`~ragen_core.training.demonstrators`,
  :mod:`~ragen_core.training.warm_cache`: the supervised warm start on scripted demonstrations
- :mod:`~ragen_core.training.probe`: the held-out MI probe; :mod:`~ragen_core.training.presets`: shipped configs

It builds on :mod:`ragen_core.rollout` / :mod:`ragen_core.episode`, :mod:`ragen_core.policy` and
:mod:`ragen_core.math`, and never imports the apps or the integrations.
"""
