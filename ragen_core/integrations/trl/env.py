"""Any ``ragen/`` env as a TRL environment (``GRPOTrainer(environment_factory=...)``, TRL 1.16).

TRL's environment interface (``trl.GRPOTrainer``, argument ``environment_factory``): a zero-argument factory
returns an object with

- ``reset(**row) -> str | None``: called once per rollout with the dataset row; the string is appended to the
  last user message of the prompt;
- public methods, exposed to the model as *tools* (their name, type hints and Google-style docstring become
  the tool schema); TRL runs the tool-calling loop, appending each tool result to the conversation, until the
  model answers without a tool call or ``max_tool_calling_iterations`` is reached;
- ``get_reward() -> float`` (optional): the rollout's reward, read once when the rollout ends (logged under the
  class name, weight 1, next to any ``reward_funcs``).

:class:`RagenEnvironment` maps one ``ragen/`` episode onto it: ``reset`` seeds the env from the row's ``seed``
column (the G rollouts of a group share their row, hence their seed and initial state: docs/protocol.md), the
single tool ``act(answer)`` is one env turn, ``get_reward`` the episode return. The model's reasoning lives in
its message and the tool call carries the answer, so the env is built with ``action_format="answer"`` (the
``<think>`` block is optional) unless ``env_kwargs`` says otherwise; an ``answer`` without ``<answer>`` tags is
wrapped in them, so ``act("Up || Left")`` is the turn ``<answer>Up || Left</answer>``. Each rollout is the
trainer's own episode (``ragen_core.episode.ChatEpisode``, without the format reminder): parsing, the format
penalty and the action budget are the env's own (``ragen_envs.protocol``), and an env that raises on an answer
ends the episode with its format penalty (``safe_step``) instead of stopping the trainer.

Single-turn episodes need no tool calling: :func:`single_turn_dataset` writes each seed's first prompt exactly as
this package's trainer renders it (``ragen_core.rollout.reset_episode``) and :class:`EnvReward` is a plain TRL
reward function that plays each completion as the episode's one turn. Any causal LM works (no tool-calling chat
template, no response schema), and TRL's rollouts are then the trainer's rollouts with ``max_turns = 1``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ragen_core.episode import ChatEpisode, rollout_option, safe_step, seed_list
from ragen_core.integrations._views import read_only
from ragen_core.policy.base import stop_strings
from ragen_envs import contract
from ragen_envs.validation import require_int

__all__ = ["RagenEnvironment", "ragen_environment_factory", "seed_dataset", "TOOL_HINT", "EnvReward",
           "single_turn_dataset", "stop_at", "tool_chat_template", "use_tool_chat_template"]

#: Appended to the first observation: how to play through the tool.
TOOL_HINT = (
    "Think step by step, then call the `act` tool with your answer: one or more actions separated by ||. "
    "Call it once per turn until the episode is over."
)
_ANSWER_TAG = re.compile("<answer>", re.IGNORECASE | re.ASCII)
#: `get_reward` of a rollout that never called `act`, for an env that declares no `format_penalty_value` (an env
#: outside the contract: every ragen/ env declares one, read through `ragen_envs.contract.format_penalty`). 0.0 is
#: this adapter's value since it was written; `safe_step` (an env that raises) uses the contract's -0.1 instead.
UNDECLARED_FORMAT_PENALTY = 0.0


class RagenEnvironment:
    """One ``ragen/`` episode behind TRL's environment interface (see the module docstring).

    Args:
        env_id: a registered id such as ``"ragen/Sokoban-v0"`` (text envs only; vision variants raise).
        env_kwargs: keyword arguments of ``gym.make`` (default ``{"action_format": "answer"}``, merged).
        seed_key: the dataset column holding each row's integer episode seed.
        include_instructions: prepend the env's instructions (rules, actions, budget) to the first observation.

    Only ``reset``, ``act`` and ``get_reward`` are public: TRL turns every other public method into a tool.
    """

    def __init__(
        self,
        env_id: str,
        env_kwargs: Mapping[str, Any] | None = None,
        seed_key: str = "seed",
        include_instructions: bool = True,
    ) -> None:
        import gymnasium as gym

        import ragen_envs  # noqa: F401  (registers the ragen/ ids)

        if not isinstance(env_id, str) or not env_id.startswith("ragen/"):
            raise ValueError(f"env_id must be a registered 'ragen/...' id; got {env_id!r}")
        self._env_id = env_id
        self._env = gym.make(env_id, **{"action_format": "answer", **dict(env_kwargs or {})}).unwrapped
        if contract.vision(self._env):
            raise ValueError(f"{env_id} is a vision variant; the TRL adapter passes text observations only")
        self._seed_key = seed_key
        self._include_instructions = bool(include_instructions)
        # The same chat episode as the trainer's rollout, without the format reminder (the tool call carries the
        # answer) and without a turn limit (TRL's max_tool_calling_iterations bounds the turns).
        self._episode = ChatEpisode(self._env, length_limit=0, system_prompt=False, reminder=False)

    # ------------------------------------------------------------------------------------------ TRL hooks
    def reset(self, **row: Any) -> str:
        """Start the episode of one rollout from its dataset row; returns the first observation text."""
        seed = row.get(self._seed_key)
        if isinstance(seed, np.integer):
            seed = int(seed)
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(
                f"each dataset row needs a non-negative integer {self._seed_key!r} column (the episode seed, shared "
                f"by the G rollouts of a group); got {seed!r}. Build one with seed_dataset(n)."
            )
        start = self._episode.reset(seed)
        if not isinstance(self._episode.observation, str):
            raise ValueError(f"{self._env_id} returned a {type(self._episode.observation).__name__} observation; "
                             "text envs only")
        parts = [self._episode.instructions] if self._include_instructions else []
        parts.append(start.user["content"])
        parts.append(TOOL_HINT)
        return "\n\n".join(parts)

    def act(self, answer: str) -> str:
        """Take one turn in the environment.

        Args:
            answer: One or more action names separated by "||", for example "Up || Left".

        Returns:
            The reward of this turn and the next state, or a notice that the episode is over.
        """
        if self._episode.done or self._episode.user is None:
            return "The episode is over; nothing was done."
        text = str(answer)
        if not _ANSWER_TAG.search(text):
            text = f"<answer>{text}</answer>"
        step = self._episode.step(text)  # safe_step: an env that raises ends the episode with the format penalty
        if step.user is not None:
            return step.user["content"]  # "Reward: r", then the next turn
        return f"Reward: {step.reward:g}\nThe episode is over (success: {self._episode.success})."

    def get_reward(self) -> float:
        """Episode return; a rollout that never called ``act`` gets the env's format penalty (no valid answer)."""
        if self._episode.turn == 0:
            return contract.format_penalty(self._env, default=UNDECLARED_FORMAT_PENALTY)
        return self._episode.total_reward

    # ------------------------------------------------------------------------------------------ episode state
    # Properties, not methods: TRL offers an environment's public *functions* as tools (it lists them with
    # ``inspect.getmembers(type(env), inspect.isfunction)``), and a property is not one, so these stay out of
    # the tool list while the tool-calling warm start (ragen_core.integrations.warm) and users can read them.
    episode_done = read_only("_episode.done", "Whether the current episode has ended (terminated or truncated).")
    episode_success = read_only("_episode.success",
                                'Whether the current episode ended in success (the env\'s ``info["success"]``).')
    episode_turns = read_only("_episode.turn", "Turns (``act`` calls that reached the env) played in the current "
                              "episode.")


def ragen_environment_factory(env_id: str, **options: Any) -> Callable[[], RagenEnvironment]:
    """``environment_factory`` for TRL: a zero-argument callable building one :class:`RagenEnvironment`.

    ``options`` are :class:`RagenEnvironment`'s keyword arguments. The env is built once here so that a bad id
    or bad ``env_kwargs`` fail now, with the env's own message, rather than inside the trainer.
    """
    from ragen_core.integrations.trl.version import check_trl_version

    check_trl_version()
    RagenEnvironment(env_id, **options)

    def factory() -> RagenEnvironment:
        return RagenEnvironment(env_id, **options)

    return factory


def seed_dataset(n: int, start: int = 10000, prompt: str = "", seed_key: str = "seed") -> Any:
    """A ``datasets.Dataset`` of ``n`` conversational rows ``{"prompt": [user message], seed_key: start + i}``.

    Training seeds start at 10000 and validation seeds at 123 in this project (docs/protocol.md). The user
    message holds ``prompt``; the env's observation is appended to it by TRL at ``reset``.
    """
    from datasets import Dataset

    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer (number of rows); got {n!r}")
    if isinstance(start, bool) or not isinstance(start, int) or start < 0:
        raise ValueError(f"start must be a non-negative integer seed; got {start!r}")
    return Dataset.from_dict(
        {"prompt": [[{"role": "user", "content": prompt}] for _ in range(n)], seed_key: list(range(start, start + n))}
    )


def single_turn_dataset(env_id: str, seeds: Any, env_kwargs: Mapping[str, Any] | None = None, *,
                        settings: Any = None, seed_key: str = "seed") -> Any:
    """A ``datasets.Dataset`` with one row per seed: ``{"prompt": messages, seed_key: seed}``.

    ``messages`` is the first prompt of that seed's episode as ``ragen_core.rollout.rollout`` sends it
    (``reset_episode``: RAGEN's turn layout, the format reminder, the system prompt when
    ``settings.system_prompt``), so a model warm-started by this package sees the same tokens under TRL.

    Args:
        env_id: a registered text env id.
        seeds: the episode seeds, in order (TRL with ``shuffle_dataset=False`` consumes them in this order): a
            non-empty list of integers >= 0 (ValueError naming the entry otherwise: 1.7 is not seed 1).
        env_kwargs: ``gym.make`` keyword arguments (the env's own defaults otherwise).
        settings: a ``ragen_core.rollout.RolloutSettings`` (its ``system_prompt`` and length limit), default one.
    """
    from datasets import Dataset

    from ragen_core.rollout import make_envs, reset_episode

    seeds = seed_list("seeds", seeds)
    if not seeds:
        raise ValueError(f"seeds must be a non-empty list of non-negative integers; got {seeds!r}")
    env = make_envs(env_id, 1, env_kwargs)[0]
    prompts = []
    for seed in seeds:
        start = reset_episode(env, seed, settings)
        if start.images:
            raise ValueError(f"{env_id} has image observations; the TRL adapter passes text only")
        prompts.append(start.messages())
    return Dataset.from_dict({"prompt": prompts, seed_key: seeds})


class EnvReward:
    """A TRL reward function that plays each completion as the one turn of its row's episode.

    ``reward(prompts, completions, **columns) -> list[float]``: the env is reset with the row's ``seed_key``
    column (integers >= 0; a ValueError names any other entry, before any env is stepped) and stepped once with
    the completion text; the reward is that step's (for a single-turn episode, the episode return), with the env's
    format penalty for malformed answers and when the env raises (``ragen_core.episode.safe_step``).
    ``last_success`` holds each row's ``info["success"]`` of the last call.

    A completion is a string (TRL's standard format) or a list of messages (conversational: the assistant
    messages' text, whose content may be a string, None or a list of ``{"type": "text", "text": ...}`` parts);
    ``prompts`` (when given) and the seeds need one entry per completion. Anything else raises a TypeError or
    ValueError naming the argument before any env is stepped.

    Args:
        env_id, env_kwargs: the env, as for ``gym.make``.
        group_size: G (TRL's ``num_generations``), None or an integer >= 1; needed with ``per_rollout_option``.
        per_rollout_option: a reset option that gets a distinct integer per rollout of a group, as the trainer's
            ``env.per_rollout_option`` (the Bandit's ``payoff_seed``): rollout k of seed s gets ``s * G + k``,
            where k counts the rows of seed s within one call. TRL passes a generation batch's rows grouped
            (its sampler repeats each prompt G times in a row); on several processes each process scores its own
            slice, so use it with one process or with G rows per process. A call where a seed has more than G
            rows raises ValueError: its rollout k = G would get the option of seed s + 1's first rollout.
        seed_key: the dataset column with the episode seed.
    """

    def __init__(self, env_id: str, env_kwargs: Mapping[str, Any] | None = None, *, group_size: int | None = None,
                 per_rollout_option: str | None = None, seed_key: str = "seed") -> None:
        from ragen_core.rollout import make_envs

        if per_rollout_option and group_size is None:
            raise ValueError(f"per_rollout_option needs group_size = G (a positive integer); got {group_size!r}")
        group_size = require_int("group_size", group_size, low=1, allow_none=True)
        self.__name__ = "env_reward"  # TRL names the reward column after it
        self._env = make_envs(env_id, 1, env_kwargs)[0]
        self._group_size = group_size
        self._option = per_rollout_option
        self._seed_key = seed_key
        self.last_success: list[bool] = []

    def __call__(self, prompts: list[Any], completions: list[Any], **columns: Any) -> list[float]:
        if isinstance(completions, (str, bytes, Mapping)) or not isinstance(completions, Sequence):
            raise TypeError("completions must be a list of completions (strings, or lists of messages), one per "
                            f"row; got {type(completions).__name__} {completions!r:.40}")
        if prompts is not None and len(prompts) != len(completions):
            raise ValueError(f"prompts and completions must have the same length; got {len(prompts)} and "
                             f"{len(completions)} (one prompt per completion)")
        texts = [_completion_text(c, f"completions[{i}]") for i, c in enumerate(completions)]
        seeds = columns.get(self._seed_key)
        if seeds is None or len(seeds) != len(completions):
            raise ValueError(f"every row needs a {self._seed_key!r} column (single_turn_dataset writes one)")
        seeds = seed_list(self._seed_key, seeds)
        if self._option:
            self._check_rollout_counts(seeds)
        counts: dict[int, int] = {}
        rewards, success = [], []
        for seed, text in zip(seeds, texts):
            k = counts.get(seed, 0)
            counts[seed] = k + 1
            self._env.reset(seed=seed, options=rollout_option(self._option or "", seed, k, self._group_size or 1))
            _, reward, _, _, info = safe_step(self._env, text)
            rewards.append(float(reward))
            success.append(bool(info.get("success", False)))
        self.last_success = success
        return rewards

    def _check_rollout_counts(self, seeds: list[int]) -> None:
        """Refuse a call where a seed has more than G rows: its rollout k = G would get the reset option s * G + G,
        the option of the first rollout of seed s + 1, and the two would silently share their draws."""
        counts: dict[int, int] = {}
        for seed in seeds:
            counts[seed] = counts.get(seed, 0) + 1
        over = {s: c for s, c in counts.items() if c > self._group_size}
        if over:
            seed, count = next(iter(over.items()))
            raise ValueError(
                f"seed {seed} has {count} rows in this call, more than group_size={self._group_size}: its per-rollout "
                f"{self._option!r} options s * G + k would reach those of seed {seed + 1}. Set group_size to TRL's "
                "num_generations, and give each prompt group its own seed"
            )


def _completion_text(completion: Any, name: str = "completion") -> str:
    """The text of a TRL completion: a string (standard format) or a list of messages (conversational).

    Of a message list, the assistant messages' contents are joined; a content is a string, None (a message that
    only calls a tool) or a list of content parts, whose ``{"type": "text", "text": ...}`` parts are joined (other
    parts, images, carry no text). Anything else raises TypeError naming `name`.
    """
    if isinstance(completion, str):
        return completion
    if not isinstance(completion, list):
        raise TypeError(f"{name} must be a string or a list of messages; got {type(completion).__name__}")
    texts = []
    for j, message in enumerate(completion):
        if not isinstance(message, Mapping):
            raise TypeError(f"{name}[{j}] must be a message dict {{'role': ..., 'content': ...}}; got "
                            f"{type(message).__name__} {message!r:.40}")
        if message.get("role") == "assistant":
            texts.append(_content_text(message.get("content"), f"{name}[{j}]['content']"))
    return "".join(texts)


def _content_text(content: Any, name: str) -> str:
    """A message content as text: a string, None (no text) or a list of content parts (their text parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(part, Mapping) for part in content):
        return "".join(str(part.get("text") or "") for part in content if part.get("type") == "text")
    raise TypeError(f"{name} must be a string, None or a list of content parts ({{'type': 'text', 'text': ...}}); "
                    f"got {type(content).__name__} {content!r:.40}")


def stop_at(model: Any, tokenizer: Any, stops: Any = ("</answer>",)) -> list[int]:
    """Make TRL's transformers generation stop after any of `stops`, as ``ragen train`` does (``rollout.stop``).

    TRL ends a completion at the first of its EOS ids, read from ``model.generation_config.eos_token_id`` plus
    the tokenizer's EOS, and masks everything after it; each stop string must therefore be one token of
    `tokenizer` (the tiny model's ``</answer>`` is). Its id is added to the model's generation config, so
    generation and TRL's completion mask both end there; the stop token itself stays in the completion (and in
    the loss), as it does in ``ragen train``. Call before building the trainer. Returns the EOS ids.
    With vLLM generation use ``generation_kwargs={"stop": [...]}`` instead (vLLM's own stop strings).

    A model that never learned to stop would otherwise run on past ``</answer>`` to ``max_completion_length``
    and every answer would fail the env's format check.
    """
    ids = []
    for stop in stop_strings(stops):  # one string is one stop string, not its characters
        tokens = tokenizer(stop, add_special_tokens=False)["input_ids"]
        if len(tokens) != 1:
            raise ValueError(
                f"stop string {stop!r} is {len(tokens)} tokens for this tokenizer; TRL's transformers generation "
                f"stops on token ids only (with vLLM pass generation_kwargs={{'stop': [{stop!r}]}})"
            )
        ids.append(tokens[0])
    current = model.generation_config.eos_token_id
    current = [] if current is None else [current] if isinstance(current, int) else list(current)
    eos = list(dict.fromkeys([*current, tokenizer.eos_token_id, *ids]))
    model.generation_config.eos_token_id = eos
    return eos


def tool_chat_template(name: str = "qwen2_5") -> str:
    """The text of one of the chat templates TRL ships (``trl/chat_templates/<name>.jinja``).

    ``"qwen2_5"`` (default) is Qwen2.5-Instruct's template: it renders the tools' JSON schemas in the system
    message, an assistant tool call as ``<tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>`` and a tool
    result as a ``<tool_response>`` block, and TRL knows how to parse its tool calls (``add_response_schema``).
    """
    import os

    import trl

    if not isinstance(name, str) or not name or "/" in name or "\\" in name or name.startswith("."):
        raise ValueError(f"template name must be a plain file name such as 'qwen2_5'; got {name!r}")
    folder = os.path.join(os.path.dirname(trl.__file__), "chat_templates")
    path = os.path.join(folder, f"{name}.jinja")
    if not os.path.isfile(path):
        names = sorted(f[: -len(".jinja")] for f in os.listdir(folder) if f.endswith(".jinja"))
        raise ValueError(f"TRL {trl.__version__} ships no chat template {name!r}; it has: {', '.join(names)}")
    with open(path, encoding="utf-8") as f:
        return f.read()


def use_tool_chat_template(tokenizer: Any, name: str = "qwen2_5") -> Any:
    """Give `tokenizer` a tool-calling chat template (:func:`tool_chat_template`); returns the tokenizer.

    ``GRPOTrainer(environment_factory=...)`` refuses a tokenizer whose chat template cannot render tool calls
    ("The provided chat template does not support tool calling"), which the tiny model's (and many base
    models') is. Qwen2.5/Qwen3 instruct tokenizers need no swap. The template's special markers must be the
    tokenizer's: Qwen2.5's uses ``<|im_start|>`` / ``<|im_end|>`` (the tiny model's EOS), so it fits the tiny
    model and Qwen-family tokenizers. Call before building the trainer; a model warm-started under another
    template has never seen this layout (``ragen_core.integrations.warm.warm_start_tools`` trains under this one).
    """
    tokenizer.chat_template = tool_chat_template(name)
    return tokenizer
