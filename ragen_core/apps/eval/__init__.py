"""``ragen eval``: any model on any env, in process or through any OpenAI-compatible server (docs/eval.md).

    ragen eval MODEL [--envs ID,ID...|suite] [--episodes N] [--seed S] [--group-size G] [--out DIR]
    ragen eval --base-url URL --model-name NAME [--api-key-env VAR] [--workers W] ...
    ragen eval --resume DIR

Each env is played by the episode code of training (``ragen_core.episode.ChatEpisode``: the same system prompt,
observations, turn limits, parsing and rewards), so an evaluation's success and a run's validation success mean the
same thing. The modules, each importing only those listed before it:

- :mod:`~ragen_core.apps.eval.plan`: the env ids, each env's settings (:class:`EnvPlan`), the evaluation seeds;
- :mod:`~ragen_core.apps.eval.records`: ``episodes.jsonl`` (append-only, keyed by env, seed and sample);
- :mod:`~ragen_core.apps.eval.local`: the in-process path (batched ``rollout()``, as validation runs);
- :mod:`~ragen_core.apps.eval.server`: the server path (``AsyncOpenAI``, retries, timeouts, ``--workers``);
- :mod:`~ragen_core.apps.eval.summary`: ``summary.json`` / ``.md`` / ``.png`` (Wilson intervals, the reward-variance
  pre-check, the MI proxies);
- :mod:`~ragen_core.apps.eval.spec`: ``eval.json``, what an evaluation is (read back by ``--resume``);
- :mod:`~ragen_core.apps.eval.run`: one evaluation from its spec to its files; :mod:`~ragen_core.apps.eval.cli`:
  the command line.
"""

from ragen_core.apps.eval.cli import build_parser, main

__all__ = ["build_parser", "main"]
