"""The RL core's math: pure functions of tensors, no envs, models or files (torch and numpy only).

- :mod:`~ragen_core.math.filtering`: reward-variance scores and the group filters (top-p, top-k, random, ...)
- :mod:`~ragen_core.math.advantages`: GAE / GRPO / Dr.GRPO / RLOO advantages and the loss aggregation modes
- :mod:`~ragen_core.math.losses`: the clipped policy loss, KL estimators, entropy
- :mod:`~ragen_core.math.mi`: in-batch cross-scoring and the mutual-information proxies
- :mod:`~ragen_core.math.metrics`: entropy metrics and the collapse regime of a step
- :mod:`~ragen_core.math.collapse`: the collapse detector over a run's history
- :mod:`~ragen_core.math.stats`: intervals, power and minimum detectable effects

Every other layer imports these; they import nothing of the project above them (``make lint`` checks it).
"""
