"""A warm-started model and tokenizer for use outside ``ragen train`` (TRL, verl, your own loop).

An untrained model (the project's tiny one included) almost never writes a well-formed answer, so every reward
of a group is the format penalty, the group has no reward variance, and a variance filter keeps nothing (under
TRL: ``filter/empty`` 1, no gradient). ``ragen train`` therefore starts with a supervised warm start on scripted
demonstrations (``[warm_start]``, :mod:`ragen_core.training.sft`). This module runs the same warm start on its own:

- :func:`warm_start`: a shipped config (``"countdown_tiny"``) or a config file, plus ``section.key=value``
  overrides, loads ``model.path`` (``"tiny"``: the offline tiny model, built on first use) and runs its
  ``[warm_start]`` exactly as ``ragen train`` does (:func:`ragen_core.training.warm_cache.cached_warm_start`, so
  ``warm_start.cache_dir`` caches it). The model then answers in RAGEN's layout
  (``<think> ... </think> <answer> ... </answer>``): the single-turn TRL path
  (``single_turn_dataset`` + ``EnvReward``) and ``ragen train`` itself.
- :func:`warm_start_tools`: the same demonstrator (:func:`ragen_core.training.sft.oracle_response`: the env's oracle,
  with
  optional action noise), but each turn written as a *tool call* in a tool-calling chat template (TRL's Qwen2.5
  template by default, :func:`ragen_core.integrations.trl.env.use_tool_chat_template`) and each episode played
  through :class:`ragen_core.integrations.trl.env.RagenEnvironment`, token for token as TRL's tool loop
  (``GRPOTrainer(environment_factory=...)``) lays it out; fine-tuned with :func:`ragen_core.training.sft.sft_train`.

Both return a :class:`WarmStarted`, which unpacks as ``model, tokenizer = warm_start(...)``. The tokenizer is a
copy with ``padding_side="left"`` (what TRL's generation batches need); the model is in eval mode on the device.
"""

from __future__ import annotations

import copy
import json
import math
import numbers
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

__all__ = ["WarmStarted", "warm_start", "warm_start_tools", "tool_episode_tokens", "tool_turn_ids",
           "play_tool_episodes"]


@dataclass
class WarmStarted:
    """A warm-started model: ``model, tokenizer = result`` (the rest are attributes).

    Attributes:
        model: the ``transformers`` causal LM (``policy.model``), eval mode.
        tokenizer: a copy of the policy's tokenizer with ``padding_side="left"``.
        policy: the :class:`ragen_core.policy.HFPolicy` holding both (``ragen_core.rollout`` and
            ``ragen_core.training.trainer.validation_rollout`` take it; it shares the model's weights).
        metrics: the warm start's ``sft/*`` and ``perf/*`` numbers (``sft/loss_first``, ``sft/loss_last``,
            ``sft/mean_token_prob``, ``sft/episodes``, ``sft/script_success``, ...).
        config: the resolved ``TrainConfig`` (:func:`warm_start`) or None (:func:`warm_start_tools`).
    """

    model: Any
    tokenizer: Any
    policy: Any
    metrics: dict[str, float] = field(default_factory=dict)
    config: Any = None

    def __iter__(self) -> Iterator[Any]:
        return iter((self.model, self.tokenizer))


def _left_padded(tokenizer: Any) -> Any:
    tok = copy.copy(tokenizer)
    tok.padding_side = "left"  # TRL generates from left-padded prompt batches
    return tok


def _override_list(overrides: Any) -> list[str]:
    """`overrides` as a list of ``section.key=value`` strings; TypeError for a lone string or a non-string entry."""
    if isinstance(overrides, (str, bytes)) or not isinstance(overrides, Sequence):
        raise TypeError(f"overrides must be a list of 'section.key=value' strings; got {type(overrides).__name__} "
                        f"{overrides!r:.60} (wrap a single override in a list)")
    for i, item in enumerate(overrides):
        if not isinstance(item, str):
            raise TypeError(f"overrides[{i}] must be a 'section.key=value' string; got {type(item).__name__} "
                            f"{item!r:.40}")
    return list(overrides)


def _max_calls(value: Any) -> int | None:
    """A tool-call budget: None (until the episode ends) or an integer >= 1 (ValueError naming it otherwise)."""
    from ragen_envs.validation import require_int

    return require_int("max_calls", value, low=1, allow_none=True)


def warm_start(config: str | Path = "countdown_tiny", overrides: Sequence[str] = (), *,
               cache_dir: str | Path | None = None, device: str | None = None,
               progress: bool = False) -> WarmStarted:
    """The model of `config` after its ``[warm_start]``, as ``ragen train`` would start RL from it.

    Args:
        config: a shipped preset name (``"countdown_tiny"``, ``"bandit_tiny"``, ...; ``ragen configs`` lists
            them) or a TOML file.
        overrides: ``section.key=value`` strings, as on the ``ragen train`` command line (e.g.
            ``["warm_start.sft_episodes=500", "warm_start.epochs=1"]`` for a quicker, weaker warm start).
        cache_dir: a folder caching the warm-started weights by everything the warm start reads
            (``warm_start.cache_dir``; a second call with the same inputs loads instead of training). None: the
            config's value (no cache in the shipped configs).
        device: ``"cpu"``, ``"cuda"``, ``"auto"``; None: the config's ``run.device``.
        progress: progress bars for the demonstrations and the SFT steps (stderr).

    Returns:
        :class:`WarmStarted` (``model, tokenizer = warm_start(...)``). With ``warm_start.sft_episodes = 0`` the
        model is returned untrained.

    Raises:
        ragen_core.training.config.ConfigError: an unknown preset, a bad key or value (one line naming it).
        TypeError: `overrides` is not a list of strings (a lone string would be read character by character).
    """
    from ragen_core.policy import load_policy
    from ragen_core.training.config import ConfigError, load_config
    from ragen_core.training.presets import resolve_config
    from ragen_core.training.trainer import policy_path, resolve_device
    from ragen_core.training.warm_cache import cached_warm_start

    extra = _override_list(overrides)
    try:
        path, _ = resolve_config(str(config))
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if cache_dir is not None:
        extra.append(f"warm_start.cache_dir={json.dumps(str(cache_dir))}")
    if device is not None:
        extra.append(f"run.device={json.dumps(str(device))}")
    extra.append(f"run.progress={'true' if progress else 'false'}")
    cfg = load_config(path, extra)
    dev = resolve_device(cfg.run.device)
    policy = load_policy(policy_path(cfg), device=dev, dtype=cfg.model.dtype)
    metrics: dict[str, float] = {}
    if cfg.warm_start.sft_episodes > 0:
        metrics = cached_warm_start(policy, cfg, device=dev)
    policy.model.eval()
    return WarmStarted(policy.model, _left_padded(policy.tokenizer), policy, metrics, cfg)


# ------------------------------------------------------------------------------------------------ tool calling
_DEMO = re.compile(r"<think>(.*?)</think>\s*<answer>(.*?)</answer>", re.DOTALL)
#: The assistant's closing message once the episode is over (no tool call: TRL's loop stops there).
FINAL_MESSAGE = "The episode is over."


def _tool_call(answer: str) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": "act", "arguments": {"answer": answer}}}]


def tool_turn_ids(tokenizer: Any, message: Mapping[str, Any], tools: Sequence[Any],
                  chat_template: str | None = None) -> list[int]:
    """The token ids a model generates for one assistant `message` under `tokenizer`'s chat template.

    That is the rendered ``[user, message]`` minus the rendered ``[user]`` with the generation prompt, up to and
    including the first EOS token after it: under Qwen2.5, ``content\\n<tool_call>\\n{json}\\n</tool_call>`` +
    ``<|im_end|>``. TRL's generation stops at that EOS and parses the text before it.
    """
    user = [{"role": "user", "content": "x"}]
    kw = {"tools": list(tools) or None, "chat_template": chat_template, "tokenize": False}
    head = tokenizer.apply_chat_template(user, add_generation_prompt=True, **kw)
    full = tokenizer.apply_chat_template([*user, dict(message)], add_generation_prompt=False, **kw)
    if not full.startswith(head):
        raise ValueError("the chat template does not render the assistant turn after its generation prompt; "
                         "use a prefix-preserving template (use_tool_chat_template)")
    text = full[len(head):]
    eos = tokenizer.eos_token
    cut = text.find(eos)
    if cut < 0:
        raise ValueError(f"the chat template ends an assistant turn without the EOS token {eos!r}")
    return tokenizer(text[: cut + len(eos)], add_special_tokens=False)["input_ids"]


def _tool_suffix_ids(tokenizer: Any, tool_messages: list[dict[str, Any]], chat_template: str | None) -> list[int]:
    """The ids TRL appends after an executed tool call (TRL 1.16's ``_get_tool_suffix_ids``): the tool results
    and the next generation prompt, rendered after a dummy tool-calling turn and cut after its EOS."""
    dummy = [{"role": "user", "content": "dummy"},
             {"role": "assistant", "content": "",
              "tool_calls": [{"type": "function", "function": {"name": tool_messages[0]["name"], "arguments": {}}}]}]
    kw = {"tokenize": True, "chat_template": chat_template, "return_dict": False}
    prefix = list(tokenizer.apply_chat_template(dummy, add_generation_prompt=False, **kw))
    full = list(tokenizer.apply_chat_template(dummy + tool_messages, add_generation_prompt=True, **kw))
    eos = [i for i, t in enumerate(prefix) if t == tokenizer.eos_token_id]
    if eos:
        prefix = prefix[: eos[-1] + 1]
    if full[: len(prefix)] != prefix:
        raise ValueError("the chat template is not prefix-preserving (use_tool_chat_template)")
    return full[len(prefix):]


def tool_episode_tokens(tokenizer: Any, environment: Any, seed: int, *, prompt: str = "",
                        noise: float = 0.0, noise_action: str = "random", rng: Any = None,
                        max_calls: int | None = None, chat_template: str | None = None, reasoning: bool = True
                        ) -> tuple[list[int], list[int], dict[str, Any]]:
    """One demonstration episode in TRL's tool-loop layout: ``(input_ids, loss_mask, info)``.

    The layout is what ``GRPOTrainer(environment_factory=...)`` builds (TRL 1.16): the prompt ``[user: prompt +
    environment.reset(seed=seed)]`` rendered with the ``act`` tool and the generation prompt; then per turn the
    assistant's generated ids (:func:`tool_turn_ids`: reasoning + ``act`` call + EOS; ``loss_mask`` 1) and the
    tool result with the next generation prompt (``loss_mask`` 0, TRL's ``tool_mask``); after the last call
    (the episode over, or `max_calls` reached, TRL's ``max_tool_calling_iterations``) a closing message without a
    call (:data:`FINAL_MESSAGE`), since TRL generates once more after every executed call.

    The reasoning and the answer of each turn are :func:`ragen_core.training.sft.oracle_response`'s (the env's oracle;
    `noise`, `noise_action`, `rng` as there); with ``reasoning=False`` the message holds the call only (far
    fewer tokens to learn: a tiny model calls the tool reliably after a few dozen episodes). `environment` is a
    :class:`ragen_core.integrations.trl.env.RagenEnvironment`; `info` holds the episode's ``return``,
    ``turns`` and ``success``.
    """
    import numpy as np
    from transformers.utils import get_json_schema

    from ragen_core.training.sft import oracle_response
    from ragen_envs.validation import require_int

    seed = require_int("seed", seed, low=0)
    max_calls = _max_calls(max_calls)
    gen = rng if rng is not None else np.random.default_rng(seed)
    tools = [get_json_schema(environment.act)]  # the schema TRL renders for the env's `act` tool
    text = environment.reset(seed=seed)
    ids = list(tokenizer.apply_chat_template([{"role": "user", "content": prompt + text}], tools=tools,
                                             add_generation_prompt=True, tokenize=True, return_dict=False,
                                             chat_template=chat_template))
    mask = [0] * len(ids)
    calls = 0
    env = environment._env  # the adapter's gym env: the oracle reads its state
    while not environment.episode_done and (max_calls is None or calls < max_calls):
        demo = _DEMO.search(oracle_response(env, noise=noise, noise_action=noise_action, rng=gen))
        if demo is None:  # oracle_response always writes both blocks; a guard for envs with their own hook
            raise ValueError(f"{type(env).__name__}: the demonstrator wrote no <think>/<answer> blocks")
        thought, answer = demo.group(1).strip(), demo.group(2).strip()
        content = f"<think> {thought} </think>" if reasoning else ""
        turn = tool_turn_ids(tokenizer, {"role": "assistant", "content": content, "tool_calls": _tool_call(answer)},
                             tools, chat_template)
        result = environment.act(answer)
        suffix = _tool_suffix_ids(tokenizer, [{"role": "tool", "name": "act", "content": str(result)}],
                                  chat_template)
        ids += turn + suffix
        mask += [1] * len(turn) + [0] * len(suffix)
        calls += 1
    closing = tool_turn_ids(tokenizer, {"role": "assistant", "content": FINAL_MESSAGE}, tools, chat_template)
    ids += closing
    mask += [1] * len(closing)
    info = {"return": environment.get_reward(), "turns": calls, "success": bool(environment.episode_success)}
    return ids, mask, info


def warm_start_tools(env_id: str = "ragen/FrozenLake-v0", env_kwargs: Mapping[str, Any] | None = None, *,
                     episodes: int = 400, epochs: int = 2, lr: float = 1e-3, batch_size: int = 8,
                     seed: int = 777, noise: float = 0.0, noise_action: str = "random",
                     max_calls: int | None = None, model: str | Path = "tiny", template: str = "qwen2_5",
                     include_instructions: bool = True, reasoning: bool = True, device: str = "cpu",
                     schedule: str = "linear", progress: bool = False) -> WarmStarted:
    """A model taught to play `env_id` through tool calls, for ``GRPOTrainer(environment_factory=...)``.

    Loads `model` (``"tiny"``: the offline tiny model), swaps in TRL's tool-calling chat template `template`
    (:func:`ragen_core.integrations.trl.env.use_tool_chat_template`), plays `episodes` demonstration episodes
    with seeds ``seed, seed + 1, ...`` (:func:`tool_episode_tokens`: the oracle's reasoning in the message, its
    answer in an ``act`` call, `noise` of the answers replaced by `noise_action`) and fine-tunes on the
    assistant tokens with :func:`ragen_core.training.sft.sft_train` (mean NLL over them; `epochs`, `lr`, `batch_size`,
    `schedule` as there). Keep the seeds apart from the training (10000 on) and evaluation seeds.

    Args:
        env_kwargs: ``gym.make`` keyword arguments (``action_format="answer"`` is the adapter's default).
        max_calls: the tool calls per episode (TRL's ``max_tool_calling_iterations``), an integer >= 1; None:
            until the episode ends (the env's action budget).
        episodes, epochs, batch_size: integers >= 1; `seed` an integer >= 0; `lr` a finite number >= 0 (checked
            before anything loads: a ValueError naming the argument).
        include_instructions: as :class:`RagenEnvironment` (use the same value in the factory).
        reasoning: write the oracle's reasoning before each call (False: the call only; see
            :func:`tool_episode_tokens`).

    Returns:
        :class:`WarmStarted`; its tokenizer carries the tool-calling template, so pass it to the trainer as
        ``processing_class``. ``metrics`` adds ``sft/script_success`` and ``sft/script_return`` (the
        demonstrator's) and ``sft/tokens``.
    """
    import numpy as np
    import torch

    from ragen_core.integrations.trl.env import RagenEnvironment, use_tool_chat_template
    from ragen_core.policy import load_policy
    from ragen_core.training.sft import sft_train
    from ragen_core.training.trainer import resolve_device
    from ragen_envs.validation import require_int

    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise ValueError(f"episodes must be a positive integer; got {episodes!r}")
    # Checked before the model loads and the demonstrations are played (sft_train would fail only after both).
    epochs, batch_size = require_int("epochs", epochs, low=1), require_int("batch_size", batch_size, low=1)
    seed, max_calls = require_int("seed", seed, low=0), _max_calls(max_calls)
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real) or not math.isfinite(lr) or lr < 0:
        raise ValueError(f"lr must be a finite number >= 0; got {lr!r}")
    t0 = time.perf_counter()
    dev = resolve_device(device)
    policy = load_policy(model, device=dev)
    tokenizer = use_tool_chat_template(_left_padded(policy.tokenizer), template)
    environment = RagenEnvironment(env_id, env_kwargs, include_instructions=include_instructions)
    rng = np.random.default_rng(seed)
    rows, masks, success, returns = [], [], [], []
    for k in range(episodes):
        ids, mask, info = tool_episode_tokens(tokenizer, environment, seed + k, noise=noise,
                                              noise_action=noise_action, rng=rng, max_calls=max_calls,
                                              reasoning=reasoning)
        rows.append(ids)
        masks.append(mask)
        success.append(info["success"])
        returns.append(info["return"])
    width = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    input_ids = torch.full((len(rows), width), pad, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    loss_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (ids, mask) in enumerate(zip(rows, masks)):  # right padding: the layout sft_train slices
        input_ids[i, : len(ids)] = torch.tensor(ids)
        attention[i, : len(ids)] = 1
        loss_mask[i, : len(ids)] = torch.tensor(mask)
    t_collect = time.perf_counter() - t0
    batch = SimpleNamespace(input_ids=input_ids, attention_mask=attention, loss_mask=loss_mask, images=None)
    gen = torch.Generator().manual_seed(seed)
    metrics = sft_train(policy, batch, epochs=epochs, lr=lr, batch_size=batch_size, generator=gen, device=dev,
                        schedule=schedule, progress=progress)
    metrics.update({"sft/episodes": float(episodes), "sft/script_success": float(np.mean(success)),
                    "sft/script_return": float(np.mean(returns)), "sft/tokens": float(loss_mask.sum()),
                    "perf/sft_collect_s": t_collect, "perf/sft_s": time.perf_counter() - t0})
    policy.model.eval()
    return WarmStarted(policy.model, tokenizer, policy, metrics, None)


_TOOL_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)


def _parse_act(text: str) -> str | None:
    """The ``answer`` argument of the first ``act`` call in a generated Qwen2.5-style turn, else None."""
    m = _TOOL_CALL.search(text)
    if m is None:
        return None
    try:
        call = json.loads(m.group(1))
    except ValueError:
        return None
    args = call.get("arguments") if isinstance(call, dict) else None
    if call.get("name") != "act" or not isinstance(args, dict) or "answer" not in args:
        return None
    return str(args["answer"])


def play_tool_episodes(model: Any, tokenizer: Any, env_id: str, seeds: Sequence[int],
                       env_kwargs: Mapping[str, Any] | None = None, *, max_calls: int = 5,
                       max_new_tokens: int = 96, include_instructions: bool = True,
                       prompt: str = "") -> dict[str, float]:
    """Play one episode per seed through the ``act`` tool, as TRL's tool loop does, and average the outcome.

    Per round, every live episode generates one turn (batched, left-padded, greedy) from its token
    history (the layout of :func:`tool_episode_tokens`); an ``act`` call in the turn (``<tool_call>`` JSON, the
    Qwen2.5 format) is executed on its :class:`RagenEnvironment`, and the tool result and the next generation
    prompt are appended; an episode stops at a turn without a valid call, when it is over, or after `max_calls`
    calls. Returns ``success`` and ``return`` (means of ``get_reward()``: the format penalty without any call),
    ``calls`` (mean executed calls) and ``episodes``. `seeds` are integers >= 0, `max_calls` and `max_new_tokens`
    integers >= 1 (ValueError naming them otherwise).
    """
    import torch
    from transformers.utils import get_json_schema

    from ragen_core.episode import seed_list
    from ragen_core.integrations.trl.env import RagenEnvironment
    from ragen_envs.validation import require_int

    seeds = seed_list("seeds", seeds)  # 1.5 is a mistake, not seed 1
    if not seeds:
        raise ValueError("seeds must name at least one episode")
    max_calls = require_int("max_calls", max_calls, low=1)
    max_new_tokens = require_int("max_new_tokens", max_new_tokens, low=1)
    envs = [RagenEnvironment(env_id, env_kwargs, include_instructions=include_instructions) for _ in seeds]
    tools = [get_json_schema(envs[0].act)]
    hist = [list(tokenizer.apply_chat_template([{"role": "user", "content": prompt + e.reset(seed=s)}],
                                               tools=tools, add_generation_prompt=True, tokenize=True,
                                               return_dict=False)) for e, s in zip(envs, seeds)]
    calls = [0] * len(seeds)
    live = list(range(len(seeds)))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    eos = tokenizer.eos_token_id
    dev = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        while live:
            width = max(len(hist[i]) for i in live)
            ids = torch.full((len(live), width), pad, dtype=torch.long)
            att = torch.zeros((len(live), width), dtype=torch.long)
            for r, i in enumerate(live):  # left padding: every row's next token is generated at the same column
                ids[r, width - len(hist[i]):] = torch.tensor(hist[i])
                att[r, width - len(hist[i]):] = 1
            with torch.no_grad():
                out = model.generate(input_ids=ids.to(dev), attention_mask=att.to(dev), do_sample=False,
                                     max_new_tokens=max_new_tokens, eos_token_id=eos, pad_token_id=pad)
            nxt = []
            for r, i in enumerate(live):
                gen = out[r, width:].tolist()
                if eos in gen:
                    gen = gen[: gen.index(eos) + 1]
                answer = _parse_act(tokenizer.decode([t for t in gen if t != eos], skip_special_tokens=False))
                if answer is None:
                    continue
                result = envs[i].act(answer)
                calls[i] += 1
                if envs[i].episode_done or calls[i] >= max_calls:
                    continue
                hist[i] += gen + _tool_suffix_ids(tokenizer, [{"role": "tool", "name": "act",
                                                              "content": str(result)}], None)
                nxt.append(i)
            live = nxt
    finally:
        model.train(was_training)
    rewards = [e.get_reward() for e in envs]
    return {"success": sum(bool(e.episode_success) for e in envs) / len(envs), "return": sum(rewards) / len(rewards),
            "calls": sum(calls) / len(calls), "episodes": float(len(envs))}
