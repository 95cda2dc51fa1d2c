"""Multi-turn group rollouts: P groups x G rollouts, the RAGEN prompt layout, a token batch for training.

One call of :func:`rollout` plays ``P * G`` episodes in lock-step (docs/protocol.md):

- all G rollouts of group i are reset with the same seed ``seeds[i]`` (same initial state), so that group
  statistics (GRPO baselines, reward variance for SNR-aware filtering) compare answers to one input;
- every turn, the prompts of all unfinished episodes are generated in one batched ``policy.generate`` call and
  the responses are sent to the envs (stepped one after another: the envs are cheap, generation is not);
  an episode stops when the env terminates or truncates, or after ``max_turns`` turns;
- each episode is a :class:`ragen_core.episode.ChatEpisode` (the env as a chat, shared with the verl and TRL
  adapters): system message = the env's ``info["instructions"]``; each user turn holds ``Reward: r`` (the
  previous turn's reward, from turn 2 on), ``Turn k:``, ``State:`` + observation, ``You have N actions left.``
  and the format reminder with the length limit; every response goes through ``safe_step``. This module adds
  the tokens: prompts, generation, and the training batch.

Context modes and the rows of the batch:

- ``"full"``: the turn-k prompt is the turn-(k-1) prompt + its response tokens + the chat-template tokens that
  close that turn and open turn k (computed from the policy's own chat template, see :func:`turn_bridge`).
  Generation therefore sees exactly the tokens that training scores, and one trajectory is one row.
- ``"window:N"`` / ``"single_turn"``: the turn-k prompt is re-encoded from the system message, the last N
  (user, assistant) pairs (N = 0 for single turn) and user turn k; each turn is its own row.

In both layouts ``loss_mask`` is 1 exactly on generated tokens: prompt, env observation and template tokens are
never trained on. Rewards: ``"last_token"`` puts the episode return on the last generated token of the
trajectory; ``"per_turn"`` puts each turn's reward on that turn's last generated token. A turn whose response is
empty (the model's first token ended it) has no token of its own: its reward goes on the last generated token
before it (in the windowed layouts, on an earlier row); only a reward with no generated token before it in its
trajectory stays on a prompt token, where no loss reads it.

For the MI diagnostics (docs/science.md section 2) every turn keeps its input X (the prompt ids) and the reasoning
span Z (the response tokens through ``</think>``, or the whole response when it has none).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import torch

from ragen_core.episode import ChatEpisode, EpisodeStart, escape_control_tokens, escape_image_token, seed_list
from ragen_core.limits import MAX_BATCH, MAX_TURNS
from ragen_envs.validation import require_bool, require_float, require_int

__all__ = [
    "parse_context",
    "REWARD_PLACEMENTS",
    "RolloutOptions",
    "RolloutSettings",
    "Turn",
    "Trajectory",
    "RolloutBatch",
    "Responder",
    "rollout",
    "build_batch",
    "final_action_flag",
    "per_turn_metrics",
    "turn_bridge",
    "reasoning_prefix_length",
    "make_envs",
    "chat_episode",
    "reset_episode",
    "control_tokens",
    "seed_list",
]

#: A scripted responder (warm start, tests): (envs, indices of active episodes) -> one response text each.
Responder = Callable[[Sequence[Any], Sequence[int]], Sequence[str]]

_SENTINELS = ("A", "B")

#: Where the rewards go in the token batch (module docstring).
REWARD_PLACEMENTS = ("last_token", "per_turn")
#: The spans :meth:`RolloutBatch.mi_inputs` takes as the trace Z (the ``mi.span`` config key's values).
MI_SPANS = ("reasoning", "response")


def parse_context(context: str) -> int | None:
    """Context mode -> number of previous turns shown (None = full history, 0 = single turn).

    Accepted: "full", "single_turn", "window:N" with N >= 1 (anything else, a non-string included, is a ValueError).
    """
    if not isinstance(context, str):
        raise ValueError(f"context must be 'full', 'single_turn' or 'window:N' with N >= 1; got {context!r}")
    if context == "full":
        return None
    if context == "single_turn":
        return 0
    if context.startswith("window:"):
        try:
            n = int(context.split(":", 1)[1])
        except ValueError:
            n = -1
        if n >= 1:
            return n
    raise ValueError(f"context must be 'full', 'single_turn' or 'window:N' with N >= 1; got {context!r}")


@dataclass
class RolloutOptions:
    """The rollout options a run's config sets: the one definition of the fields that the ``[rollout]`` config
    section (``ragen_core.training.config.RolloutConfig``, which adds the batch sizes) and :class:`RolloutSettings`
    (which adds the per-call options) share. :meth:`check` validates them for both."""

    max_turns: int = 5
    #: "full" (whole history), "window:N" (last N turns), "single_turn" (current state only).
    context: str = "full"
    max_new_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    #: "last_token" (the episode return on the last generated token) or "per_turn" (:data:`REWARD_PLACEMENTS`).
    reward_placement: str = "last_token"
    #: Length limit stated in the reminder (tokens); 0 = max_new_tokens.
    length_limit: int = 0
    #: Send the env's ``info["instructions"]`` as the system message (False: no system message; the first user
    #: turn opens the conversation, e.g. for a tiny model that learns the format from the warm start: the tiny
    #: CPU configs turn it off, since a model that small cannot read ~300 tokens of rules, and trains about twice
    #: as fast on the shorter sequences).
    system_prompt: bool = True

    def check(self) -> None:
        """Raise ValueError naming the first option out of range or of the wrong type (the message starts with the
        field's name): bools and floats are not counts, strings are not numbers, a switch is True or False.
        ``max_turns`` is at most :data:`ragen_core.limits.MAX_TURNS` (a rollout sizes a table and its metrics by
        it); ``max_new_tokens``' bound is the model's positions, checked where the model is known
        (:mod:`ragen_core.limits`)."""
        for name in ("max_turns", "max_new_tokens"):
            require_int(name, getattr(self, name), low=1)
        if self.max_turns > MAX_TURNS:
            raise ValueError(f"max_turns must be at most {MAX_TURNS} (the envs' own turn cap); got {self.max_turns}")
        parse_context(self.context)
        if not _finite_number(self.temperature) or not self.temperature > 0:
            raise ValueError(f"temperature must be a finite number > 0; got {self.temperature!r}")
        if not _finite_number(self.top_p) or not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be a number in (0, 1]; got {self.top_p!r}")
        if self.reward_placement not in REWARD_PLACEMENTS:
            raise ValueError(f"reward_placement must be one of {', '.join(REWARD_PLACEMENTS)}; "
                             f"got {self.reward_placement!r}")
        require_int("length_limit", self.length_limit, low=0)
        require_bool("system_prompt", self.system_prompt)


def _finite_number(value: object) -> bool:
    """A finite real number, not a bool and not a string (:func:`ragen_envs.validation.require_float`'s rule)."""
    try:
        require_float("value", value)
    except ValueError:
        return False
    return True


@dataclass
class RolloutSettings(RolloutOptions):
    """Per-call rollout options: the :class:`RolloutOptions` of the ``[rollout]`` config section plus the options
    a call chooses (the batch sizes are arguments of :func:`rollout`)."""

    #: Argmax decoding (validation sets it from ``eval.greedy``).
    greedy: bool = False
    #: Stop strings (config runs use this default).
    stop: tuple[str, ...] = ("</answer>",)

    @classmethod
    def from_config(cls, rollout_cfg: RolloutOptions, **overrides: Any) -> RolloutSettings:
        """Settings from a ``[rollout]`` config section (``ragen_core.training.config.RolloutConfig``, a
        :class:`RolloutOptions`): every option read from it, the per-call fields at their defaults; ``overrides``
        win."""
        options = {f.name: getattr(rollout_cfg, f.name) for f in fields(RolloutOptions)}
        return cls(**{**options, **overrides})

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """:meth:`RolloutOptions.check`, and `greedy` a bool and `stop` one string or a list of strings."""
        super().check()
        require_bool("greedy", self.greedy)
        stop = self.stop
        if not (isinstance(stop, str) or (isinstance(stop, (list, tuple)) and all(isinstance(x, str) for x in stop))):
            raise ValueError(f"stop must be a string or a list of strings (the stop strings); got {stop!r}")


@dataclass
class Turn:
    """One assistant turn of one episode."""

    prompt_ids: list[int]
    response_ids: list[int]
    #: Sampling log-probs of `response_ids` (0 for scripted responses).
    response_logprobs: list[float]
    response_text: str
    #: Number of leading response tokens that form the reasoning span Z (through `</think>`).
    reasoning_len: int
    reward: float
    format_valid: bool
    action_valid: bool
    finish_reason: str
    #: Images of the prompt (vision envs), in order of occurrence.
    images: list[np.ndarray] = field(default_factory=list)
    #: The exception `env.step` raised on this response ("TypeName: message"), None when it returned normally.
    env_error: str | None = None
    #: Whether the turn ran a final action (an answer that ends the task, e.g. SearchQA's ``finish[...]``), as
    #: the env's ``is_final_action`` says (:func:`final_action_flag`); None when the env does not tell final
    #: actions from tool calls (every action acts on the task).
    final_action: bool | None = None


@dataclass
class Trajectory:
    """One episode: group index, its seed, the turns, and the outcome (`terminated`: the env ended it; `truncated`:
    the env cut it, or ``max_turns`` did before the env ended it)."""

    group: int
    index_in_group: int
    seed: int
    turns: list[Turn] = field(default_factory=list)
    messages: list[dict[str, str]] = field(default_factory=list)
    success: bool = False
    terminated: bool = False
    truncated: bool = False

    @property
    def episode_return(self) -> float:
        return float(sum(t.reward for t in self.turns))

    @property
    def format_valid_rate(self) -> float:
        return float(np.mean([t.format_valid for t in self.turns])) if self.turns else 0.0

    @property
    def response_tokens(self) -> int:
        return int(sum(len(t.response_ids) for t in self.turns))


@dataclass
class RolloutBatch:
    """A padded token batch of P * G trajectories (group-major: trajectory ``i * G + k``).

    Row tensors (R rows = trajectories in "full" context, turns otherwise), right-padded to T:

    - ``input_ids`` ``[R, T]`` long, ``attention_mask`` ``[R, T]`` (1 = real token);
    - ``loss_mask`` ``[R, T]``: 1 on generated (assistant) tokens only;
    - ``old_logprobs`` ``[R, T]``: sampling log-probs at generated tokens, 0 elsewhere;
    - ``token_rewards`` ``[R, T]``: rewards placed per ``reward_placement``;
    - ``turn_index`` ``[R, T]`` long: turn number (0-based) of each generated token, -1 elsewhere;
    - ``row_traj`` ``[R]``: trajectory of each row; ``row_group`` ``[R]``: its group.

    Trajectory tensors (N = P * G): ``traj_group`` ``[N]``, ``returns`` ``[N]`` (sum of turn rewards),
    ``turn_rewards`` ``[N, max_turns]`` (NaN after the last turn), ``success`` ``[N]`` bool,
    ``format_valid`` ``[N]`` (share of format-valid turns), ``num_turns`` ``[N]``, ``response_length`` ``[N]``
    (generated tokens). ``images``: per row, the images of its sequence (vision), else None.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    loss_mask: torch.Tensor
    old_logprobs: torch.Tensor
    token_rewards: torch.Tensor
    turn_index: torch.Tensor
    row_traj: torch.Tensor
    row_group: torch.Tensor
    traj_group: torch.Tensor
    returns: torch.Tensor
    turn_rewards: torch.Tensor
    success: torch.Tensor
    format_valid: torch.Tensor
    num_turns: torch.Tensor
    response_length: torch.Tensor
    groups: int
    group_size: int
    trajectories: list[Trajectory]
    images: list[list[np.ndarray]] | None = None

    @property
    def rewards_pg(self) -> torch.Tensor:
        """Episode returns as ``[P, G]`` (for filtering and group advantages)."""
        return self.returns.reshape(self.groups, self.group_size)

    def row_tensors(self) -> dict[str, torch.Tensor]:
        """The ``[R, ...]`` tensors by name (what :func:`ragen_core.math.filtering.compact` operates on)."""
        return {
            "input_ids": self.input_ids,
            "attention_mask": self.attention_mask,
            "loss_mask": self.loss_mask,
            "old_logprobs": self.old_logprobs,
            "token_rewards": self.token_rewards,
            "turn_index": self.turn_index,
            "row_traj": self.row_traj,
            "row_group": self.row_group,
        }

    def mi_inputs(self, span: str = "reasoning", turn: int = 0) -> tuple[list[list[int]], list[list[list[int]]]]:
        """(X, Z) for cross-scoring at turn `turn`: P prompts (of rollout 0 of each group) and P x G traces.

        At turn 0 all G rollouts of a group share their prompt (same seed, same initial state). Z is the
        reasoning span (``span="reasoning"``) or the whole response; an empty span falls back to the response.
        Trajectories without that turn contribute an empty trace. `span` must be "reasoning" or "response" and
        `turn` an integer >= 0 (ValueError otherwise: "reasonings" used to give the whole responses, and -1 the last
        turn, without a word).
        """
        if span not in MI_SPANS:
            raise ValueError(f"span must be one of {', '.join(MI_SPANS)}; got {span!r}")
        turn = require_int("turn", turn, low=0)
        prompts: list[list[int]] = []
        traces: list[list[list[int]]] = []
        for i in range(self.groups):
            group = self.trajectories[i * self.group_size : (i + 1) * self.group_size]
            prompts.append(list(group[0].turns[turn].prompt_ids) if len(group[0].turns) > turn else [])
            row = []
            for traj in group:
                if len(traj.turns) <= turn:
                    row.append([])
                    continue
                t = traj.turns[turn]
                n = t.reasoning_len if span == "reasoning" and t.reasoning_len > 0 else len(t.response_ids)
                row.append(list(t.response_ids[:n]))
            traces.append(row)
        return prompts, traces

    def summary(self) -> dict[str, float]:
        """Per-batch rollout metrics (namespaced `rollout/`).

        ``rollout/response_capped`` is the share of turns whose response hit ``max_new_tokens`` (finish reason
        "length"): a truncated response has no closing ``</answer>`` and costs the format penalty, so a high
        value means the token budget, not the policy, is failing the format.

        Per-turn figures of multi-turn episodes: ``rollout/num_turns`` (turns per episode, mean) and the metrics
        of :func:`per_turn_metrics`: ``rollout/invalid_action``, ``rollout/tool_use`` (envs with final actions
        only), ``rollout/reward_turn`` and ``rollout/reward_share_turn{k}`` for k = 1..max_turns.
        """
        turns = [t for traj in self.trajectories for t in traj.turns]
        capped = sum(t.finish_reason == "length" for t in turns) / max(len(turns), 1)
        return {
            **per_turn_metrics(self.trajectories, int(self.turn_rewards.shape[1])),
            "rollout/response_capped": float(capped),
            "rollout/env_errors": float(sum(t.env_error is not None for t in turns)),
            "rollout/success": float(self.success.float().mean()),
            "rollout/return": float(self.returns.mean()),
            "rollout/return_std": float(self.returns.std(unbiased=False)),
            "rollout/format_valid": float(self.format_valid.mean()),
            "rollout/response_length": float(self.response_length.float().mean()),
            "rollout/tokens_per_turn": float(self.response_length.sum() / max(int(self.num_turns.sum()), 1)),
            "rollout/num_turns": float(self.num_turns.float().mean()),
            "rollout/trajectories": float(len(self.trajectories)),
            "rollout/rows": float(self.input_ids.shape[0]),
            "rollout/seq_len": float(self.attention_mask.sum(dim=1).float().mean()),
        }


# ---------------------------------------------------------------------------------------------- per-turn figures
def final_action_flag(env: Any, info: dict[str, Any]) -> bool | None:
    """Whether a step ran a final action: True when the env's optional ``is_final_action(action) -> bool`` holds
    for one of the actions it executed (``info["actions_executed"]``; SearchQA's ``finish[...]``, WebShop's
    ``click[Buy Now]``), False when it holds for none (a tool call, or nothing valid ran), None when the env has
    no such method (it does not tell answers from tool calls: every action acts on the task)."""
    judge = getattr(getattr(env, "unwrapped", env), "is_final_action", None)
    if not callable(judge):
        return None
    return any(bool(judge(a)) for a in info.get("actions_executed") or [])


def per_turn_metrics(trajectories: Sequence[Trajectory], max_turns: int) -> dict[str, float]:
    """Where in multi-turn episodes things happen (`rollout/` metrics of :meth:`RolloutBatch.summary`).

    - ``rollout/invalid_action``: share of all turns whose action was invalid (``action_valid`` False: nothing
      ran, because the answer was malformed or named no action the env accepts);
    - ``rollout/tool_use``: share of episodes whose first turn ran a valid action that is not final (a tool
      call, e.g. a search or a click, before any answer). Only for envs that say which actions are final
      (``is_final_action``; :attr:`Turn.final_action` not None); absent otherwise, where every action acts on
      the task and there is no tool to use;
    - ``rollout/reward_share_turn{k}`` for k = 1..`max_turns`: share of the batch's positive reward (each
      turn's reward clipped at 0 from below, summed over all episodes) earned on turn k;
    - ``rollout/reward_turn``: the mean turn (1-based) on which positive reward is earned, each turn weighted by
      its positive reward (1.0 when all of it comes on the first turn).

    The reward figures are NaN when the batch earned no positive reward (``metrics.jsonl`` writes null).
    """
    turns = [t for traj in trajectories for t in traj.turns]
    out = {"rollout/invalid_action": sum(not t.action_valid for t in turns) / max(len(turns), 1)}
    declared = [traj.turns[0] for traj in trajectories if traj.turns and traj.turns[0].final_action is not None]
    if declared:
        out["rollout/tool_use"] = sum(t.action_valid and not t.final_action for t in declared) / len(declared)
    positive = [[max(float(t.reward), 0.0) for t in traj.turns] for traj in trajectories]
    total = sum(sum(p) for p in positive)
    for k in range(max_turns):
        earned = sum(p[k] for p in positive if len(p) > k)
        out[f"rollout/reward_share_turn{k + 1}"] = earned / total if total > 0 else float("nan")
    weighted = sum((k + 1) * r for p in positive for k, r in enumerate(p))
    out["rollout/reward_turn"] = weighted / total if total > 0 else float("nan")
    return out


# ---------------------------------------------------------------------------------------------- prompt layout
def turn_bridge(policy: Any, user_message: dict[str, str]) -> list[int]:
    """Template tokens between the end of an assistant response and the start of the next response.

    Renders ``[user, assistant(s), user_message]`` twice with two different one-character assistant contents
    and returns the longest common token suffix: the end-of-turn marker, the next user message and the
    assistant header. Works for any chat template that renders the assistant content verbatim.
    """
    renders = [
        policy.encode_chat([{"role": "user", "content": "x"}, {"role": "assistant", "content": s}, user_message],
                           add_generation_prompt=True)
        for s in _SENTINELS
    ]
    a, b = renders
    n = 0
    while n < min(len(a), len(b)) and a[len(a) - 1 - n] == b[len(b) - 1 - n]:
        n += 1
    return list(a[len(a) - n :])


def reasoning_prefix_length(tokenizer: Any, response_ids: Sequence[int], marker: str = "</think>") -> int:
    """Smallest k such that ``decode(response_ids[:k])`` contains `marker` (0 if it never does).

    Binary search over prefixes (containment is monotone in k): O(log n) decodes.
    """
    ids = list(response_ids)
    if not ids or marker not in tokenizer.decode(ids, skip_special_tokens=True):
        return 0
    lo, hi = 1, len(ids)
    while lo < hi:
        mid = (lo + hi) // 2
        if marker in tokenizer.decode(ids[:mid], skip_special_tokens=True):
            hi = mid
        else:
            lo = mid + 1
    return lo


def make_envs(env_id: str, n: int, kwargs: dict[str, Any] | None = None) -> list[Any]:
    """`n` independent envs from `gym.make(env_id, **kwargs)` (importing ragen_envs registers the ids)."""
    import gymnasium as gym

    import ragen_envs  # noqa: F401  (registers the ragen/ ids)

    return [gym.make(env_id, **dict(kwargs or {})) for _ in range(n)]


def chat_episode(env: Any, settings: RolloutSettings | None = None, *,
                 image_token: str | None = None, control_tokens: Sequence[str] = ()) -> ChatEpisode:
    """A :class:`ragen_core.episode.ChatEpisode` of `env` laid out as `settings` say (length limit stated in the
    reminder, system prompt, ``max_turns``), escaping `image_token` and `control_tokens` in its texts
    (:func:`control_tokens` gives a policy's)."""
    s = settings or RolloutSettings()
    return ChatEpisode(env, length_limit=s.length_limit or s.max_new_tokens, system_prompt=s.system_prompt,
                       max_turns=s.max_turns, image_token=image_token, control_tokens=control_tokens)


def reset_episode(env: Any, seed: int, settings: RolloutSettings | None = None, *,
                  options: dict[str, Any] | None = None, image_token: str | None = None,
                  control_tokens: Sequence[str] = ()) -> EpisodeStart:
    """Reset `env` with `seed` (and reset `options`) and build the episode's first prompt as :func:`rollout` does
    (pass the policy's ``control_tokens(policy)`` for the very prompt text it sends).

    Other engines (the TRL adapter's single-turn dataset) call this so that their prompts are token for token the
    ones this package's trainer sends.
    """
    return chat_episode(env, settings, image_token=image_token, control_tokens=control_tokens).reset(seed, options)


def control_tokens(policy: Any) -> tuple[str, ...]:
    """The control tokens of `policy`'s tokenizer: its special tokens (``all_special_tokens`` and the added tokens
    marked special, e.g. ``<|im_start|>``), which :func:`rollout` escapes where a text spells them
    (:func:`ragen_core.episode.escape_control_tokens`); empty for a policy without such a tokenizer."""
    tok = getattr(policy, "tokenizer", None)
    names = set(getattr(tok, "all_special_tokens", None) or [])
    for added in (getattr(tok, "added_tokens_decoder", None) or {}).values():
        if getattr(added, "special", False):
            names.add(str(added.content))
    return tuple(sorted(str(n) for n in names))


# ---------------------------------------------------------------------------------------------- the rollout
def rollout(
    policy: Any,
    envs: Sequence[Any],
    seeds: Sequence[int],
    group_size: int,
    settings: RolloutSettings | None = None,
    *,
    generator: torch.Generator | None = None,
    responder: Responder | None = None,
    reset_options: Sequence[dict[str, Any] | None] | None = None,
    on_turn: Callable[[int], None] | None = None,
) -> RolloutBatch:
    """Play ``len(seeds)`` groups of `group_size` episodes and return the training batch.

    Args:
        policy: a :class:`ragen_core.policy.base.Policy` (``encode_chat``, ``generate``, ``tokenizer``).
        envs: at least ``P * G`` envs (gymnasium envs of this package); env ``i * G + k`` plays rollout k of
            group i.
        seeds: P reset seeds, one per group: integers >= 0 (numpy integers and integer tensors too).
        group_size: G, an integer >= 1.
        settings: a :class:`RolloutSettings`: turns, context mode, sampling (defaults: 5 turns, full context,
            temperature 1); checked again here, so a field changed after construction is checked too.
        generator: torch generator of the sampler (reproducible rollouts).
        responder: scripted responses instead of the policy's (warm start, tests); see :data:`Responder`. It
            must return one str per active episode (ValueError for another count, TypeError for a non-str).
        reset_options: optional per-episode `options` for `env.reset`: None or a dict each (exactly P * G entries;
            ``ragen_core.episode.per_rollout_options`` builds them from ``env.per_rollout_option``).
        on_turn: called with the turn number (1-based) after each turn, which plays every episode still running
            (a progress bar; at most ``settings.max_turns`` calls, fewer when every episode ends early).

    Returns:
        :class:`RolloutBatch`.

    Raises:
        ValueError / TypeError naming the argument (before any env is reset) for a count, a seed or settings that
        are not what is listed above, or more than :data:`ragen_core.limits.MAX_BATCH` episodes (P * G).
    """
    s, seeds, g, options = _check_rollout_args(settings, seeds, group_size, reset_options)
    window = parse_context(s.context)
    p = len(seeds)
    n = p * g
    if p < 1:
        raise ValueError(f"need at least one group and group_size >= 1; got {p} groups of {g}")
    if n > MAX_BATCH:  # ragen_core.limits: the most episodes one batch (one batched generate) can hold
        raise ValueError(f"len(seeds) x group_size must be at most {MAX_BATCH} episodes (one batch); got {p} x {g}")
    if len(envs) < n:
        raise ValueError(f"need {n} envs for {p} groups x {g} rollouts; got {len(envs)}")
    _check_distinct_envs(envs, n)
    if options is not None and len(options) != n:
        raise ValueError(f"reset_options must have one entry per episode (P * G = {n}), got {len(options)}")
    image_token = getattr(policy, "image_token", None)
    controls = control_tokens(policy)

    trajs = [Trajectory(group=i // g, index_in_group=i % g, seed=seeds[i // g]) for i in range(n)]
    episodes = [chat_episode(envs[i], s, image_token=image_token, control_tokens=controls) for i in range(n)]
    for i, ep in enumerate(episodes):
        ep.reset(seeds[i // g], options[i] if options is not None else None)

    for turn in range(s.max_turns):  # every episode ends within max_turns (ChatEpisode counts them)
        idx = [i for i in range(n) if not episodes[i].done]
        if not idx:
            break
        prompts = [_next_prompt(policy, episodes[i], trajs[i], window) for i in idx]
        gens = _respond(policy, s, [envs[i] for i in idx], idx, [ids for ids, _ in prompts], [im for _, im in prompts],
                        generator, responder)
        for (ids, images), i, (text, rid, rlp, finish) in zip(prompts, idx, gens, strict=True):
            step = episodes[i].step(text)
            trajs[i].turns.append(Turn(
                prompt_ids=ids,
                response_ids=rid,
                response_logprobs=rlp,
                response_text=text,
                reasoning_len=reasoning_prefix_length(policy.tokenizer, rid),
                reward=step.reward,
                format_valid=step.format_valid,
                action_valid=step.action_valid,
                finish_reason=finish,
                images=images,
                env_error=step.env_error,
                final_action=final_action_flag(envs[i], step.info),
            ))
        if on_turn is not None:
            on_turn(turn + 1)

    for traj, ep in zip(trajs, episodes):
        traj.messages = ep.messages
        traj.success, traj.terminated, traj.truncated = ep.success, ep.terminated, ep.truncated
    return build_batch(trajs, p, g, s, pad_id=pad_token_id(policy.tokenizer), full_context=window is None,
                       max_turns=s.max_turns)


def _check_rollout_args(settings: Any, seeds: Any, group_size: Any, reset_options: Any
                        ) -> tuple[RolloutSettings, list[int], int, list[Any] | None]:
    """:func:`rollout`'s settings (checked), seeds (as ints), group size and reset options (as a list), or a
    ValueError / TypeError naming the argument: a float count or seed used to be truncated without a word."""
    if settings is not None and not isinstance(settings, RolloutSettings):
        raise TypeError(f"settings must be None or a RolloutSettings (RolloutSettings.from_config(cfg.rollout) "
                        f"builds one from a [rollout] section), got {type(settings).__name__}")
    s = settings or RolloutSettings()
    s.check()
    seeds = seed_list("seeds", seeds)
    g = require_int("group_size", group_size, low=1)
    if reset_options is None:
        return s, seeds, g, None
    if isinstance(reset_options, (str, bytes, Mapping)) or not isinstance(reset_options, Iterable):
        raise TypeError(f"reset_options must be None or a list of P * G reset options (None or a dict each), got "
                        f"{type(reset_options).__name__} {reset_options!r:.60}")
    options = list(reset_options)
    for i, o in enumerate(options):
        if o is not None and not isinstance(o, Mapping):
            raise TypeError(f"reset_options[{i}] must be None or a dict of reset options, got {type(o).__name__} "
                            f"{o!r:.40}")
    return s, seeds, g, options


def _check_distinct_envs(envs: Sequence[Any], n: int) -> None:
    """ValueError naming the first of the `n` envs that is an earlier one (the same object, or a wrapper around the
    same env): the episodes are stepped in lock-step, so one env shared by two of them plays both games on one
    board (``[env] * 4`` used to give four interleaved, silently wrong trajectories)."""
    seen: dict[int, int] = {}
    for j in range(n):
        key = id(getattr(envs[j], "unwrapped", envs[j]))
        if key in seen:
            raise ValueError(f"envs must be {n} distinct envs, one per episode (they are stepped in lock-step); "
                             f"envs[{j}] is envs[{seen[key]}] (make_envs(env_id, n) builds independent ones)")
        seen[key] = j


def _next_prompt(policy: Any, ep: ChatEpisode, traj: Trajectory,
                 window: int | None) -> tuple[list[int], list[np.ndarray]]:
    """Token ids and images of `ep`'s next prompt (module docstring: context modes).

    Full context (``window=None``): turn 1 renders [system,] user; turn k extends turn k-1's prompt + response by
    the template bridge to the pending user turn, and the images accumulate. Otherwise the prompt is re-rendered
    from the last `window` turns' text.
    """
    if window is None and traj.turns:
        last = traj.turns[-1]
        ids = list(last.prompt_ids) + list(last.response_ids) + turn_bridge(policy, ep.user)
        return ids, list(last.images) + ep.user_images
    msgs, images = ep.prompt_messages(window or 0)
    return list(policy.encode_chat(msgs, add_generation_prompt=True)), images


def _respond(policy: Any, s: RolloutSettings, envs: Sequence[Any], idx: Sequence[int], prompts: list[list[int]],
             images: list[list[np.ndarray]], generator: torch.Generator | None,
             responder: Responder | None) -> list[tuple[str, list[int], list[float], str]]:
    """One (text, response ids, sampling log-probs, finish reason) per prompt: the responder's texts (log-probs 0,
    finish "stop") or one batched ``policy.generate`` call."""
    if responder is not None:
        texts = responder(envs, idx)
        if isinstance(texts, (str, bytes)) or not isinstance(texts, Iterable):
            raise TypeError(f"responder must return a list of str texts (one per active episode), got "
                            f"{type(texts).__name__} {texts!r:.40}")
        texts = list(texts)
        if len(texts) != len(idx):
            raise ValueError(f"responder must return one text per active episode ({len(idx)}), got {len(texts)}")
        out = []
        controls = control_tokens(policy)
        for j, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"responder must return str texts; entry {j} is {type(text).__name__} {text!r:.40}")
            # A literal image placeholder in a scripted text would encode as the image token with no image behind
            # it (the batch is then refused in training), and a spelled control token as the control token (a
            # trained end-of-turn id inside the response); the episode escapes its own texts the same way.
            safe = escape_control_tokens(escape_image_token(text, getattr(policy, "image_token", None)), controls)
            rid = list(policy.tokenizer(safe, add_special_tokens=False)["input_ids"])
            out.append((text, rid, [0.0] * len(rid), "stop"))
        return out
    gens = policy.generate(
        prompts,
        max_new_tokens=s.max_new_tokens,
        temperature=s.temperature,
        top_p=s.top_p,
        stop=s.stop,
        generator=generator,
        images=images if any(len(im) for im in images) else None,
        greedy=s.greedy,
    )
    return [(o.text, list(o.response_ids), list(o.response_logprobs), o.finish_reason) for o in gens]


def _reward_slots(rows: Sequence[dict[str, Any]], trajs: Sequence[Trajectory]
                  ) -> tuple[dict[int, list[tuple[int, int]]], dict[int, tuple[int, int]]]:
    """Where rewards go (:func:`build_batch`): per trajectory, the (row, column) of each turn's reward, and the
    (row, column) of its last generated token (absent when it generated none).

    A turn's reward goes on its last generated token; a turn with an empty response has none, so its reward goes on
    the last generated token before it, in an earlier turn and, in the windowed layouts, an earlier row (the loss
    and the critic read rewards only where the loss mask is 1: the turn's own last prompt token, where it used to
    go, dropped it from every return). A trajectory with no generated token up to that turn keeps it on that
    prompt token: no generated token precedes the reward, so no return-to-go holds it.
    """
    slots: dict[int, list[tuple[int, int]]] = {}
    last: dict[int, tuple[int, int]] = {}
    for ri, row in enumerate(rows):
        t_idx = row["traj"]
        for end, k in zip(row["ends"], row["turns"]):
            if trajs[t_idx].turns[k].response_ids:
                last[t_idx] = (ri, end)
            slots.setdefault(t_idx, []).append(last.get(t_idx, (ri, max(end, 0))))
    return slots, last


def pad_token_id(tokenizer: Any) -> int:
    """The tokenizer's pad token id, else its end-of-sequence id, else 0 (the padding of batch tensors)."""
    pad = getattr(tokenizer, "pad_token_id", None)
    if pad is None:
        pad = getattr(tokenizer, "eos_token_id", None)
    return int(pad) if pad is not None else 0


# ---------------------------------------------------------------------------------------------- tensors
def build_batch(
    trajs: Sequence[Trajectory],
    groups: int,
    group_size: int,
    settings: RolloutSettings,
    *,
    pad_id: int,
    full_context: bool,
    max_turns: int,
) -> RolloutBatch:
    """Lay trajectories out as padded rows (see :class:`RolloutBatch` and the module docstring).

    Full context: row = last prompt + last response, where every earlier response sits inside the last
    prompt at known offsets (the prompt of turn k+1 extends prompt k + response k by construction).
    Otherwise: one row per turn, prompt + response.
    """
    rows: list[dict[str, Any]] = []
    for t_idx, traj in enumerate(trajs):
        if not traj.turns:
            raise ValueError(f"trajectory {t_idx} has no turn (max_turns >= 1 guarantees one)")
        if full_context:
            last = traj.turns[-1]
            ids = list(last.prompt_ids) + list(last.response_ids)
            loss = [0] * len(ids)
            lp = [0.0] * len(ids)
            turn_of = [-1] * len(ids)
            ends = []
            for k, turn in enumerate(traj.turns):
                start = len(turn.prompt_ids)
                if ids[start : start + len(turn.response_ids)] != list(turn.response_ids):
                    raise AssertionError("full-context prompts must extend the previous turn's tokens")
                for off in range(len(turn.response_ids)):
                    loss[start + off] = 1
                    lp[start + off] = turn.response_logprobs[off]
                    turn_of[start + off] = k
                ends.append(start + len(turn.response_ids) - 1)
            rows.append(dict(ids=ids, loss=loss, lp=lp, turn_of=turn_of, ends=ends, traj=t_idx,
                             turns=list(range(len(traj.turns))), images=list(last.images)))
        else:
            for k, turn in enumerate(traj.turns):
                start = len(turn.prompt_ids)
                ids = list(turn.prompt_ids) + list(turn.response_ids)
                loss = [0] * start + [1] * len(turn.response_ids)
                lp = [0.0] * start + list(turn.response_logprobs)
                turn_of = [-1] * start + [k] * len(turn.response_ids)
                rows.append(dict(ids=ids, loss=loss, lp=lp, turn_of=turn_of, ends=[start + len(turn.response_ids) - 1],
                                 traj=t_idx, turns=[k], images=list(turn.images)))

    r = len(rows)
    t_max = max(len(row["ids"]) for row in rows)
    input_ids = torch.full((r, t_max), pad_id, dtype=torch.long)
    attention = torch.zeros(r, t_max, dtype=torch.long)
    loss_mask = torch.zeros(r, t_max, dtype=torch.long)
    old_lp = torch.zeros(r, t_max, dtype=torch.float32)
    token_rewards = torch.zeros(r, t_max, dtype=torch.float32)
    turn_index = torch.full((r, t_max), -1, dtype=torch.long)
    row_traj = torch.tensor([row["traj"] for row in rows], dtype=torch.long)
    last_row_of_traj: dict[int, int] = {}
    for ri, row in enumerate(rows):
        m = len(row["ids"])
        input_ids[ri, :m] = torch.tensor(row["ids"], dtype=torch.long)
        attention[ri, :m] = 1
        loss_mask[ri, :m] = torch.tensor(row["loss"], dtype=torch.long)
        old_lp[ri, :m] = torch.tensor(row["lp"], dtype=torch.float32)
        turn_index[ri, :m] = torch.tensor(row["turn_of"], dtype=torch.long)
        last_row_of_traj[row["traj"]] = ri
    slots, last_generated = _reward_slots(rows, trajs)
    if settings.reward_placement == "per_turn":
        for t_idx, traj in enumerate(trajs):
            for (ri, col), turn in zip(slots[t_idx], traj.turns):
                token_rewards[ri, col] += turn.reward
    if settings.reward_placement == "last_token":
        for t_idx, traj in enumerate(trajs):
            ri = last_row_of_traj[t_idx]
            ri, end = last_generated.get(t_idx, (ri, int(attention[ri].sum()) - 1))
            token_rewards[ri, end] += traj.episode_return

    n = len(trajs)
    turn_rewards = torch.full((n, max_turns), float("nan"), dtype=torch.float32)
    for t_idx, traj in enumerate(trajs):
        for k, turn in enumerate(traj.turns[:max_turns]):
            turn_rewards[t_idx, k] = turn.reward
    has_images = any(row["images"] for row in rows)
    return RolloutBatch(
        input_ids=input_ids,
        attention_mask=attention,
        loss_mask=loss_mask,
        old_logprobs=old_lp,
        token_rewards=token_rewards,
        turn_index=turn_index,
        row_traj=row_traj,
        row_group=torch.tensor([trajs[row["traj"]].group for row in rows], dtype=torch.long),
        traj_group=torch.tensor([traj.group for traj in trajs], dtype=torch.long),
        returns=torch.tensor([traj.episode_return for traj in trajs], dtype=torch.float32),
        turn_rewards=turn_rewards,
        success=torch.tensor([traj.success for traj in trajs], dtype=torch.bool),
        format_valid=torch.tensor([traj.format_valid_rate for traj in trajs], dtype=torch.float32),
        num_turns=torch.tensor([len(traj.turns) for traj in trajs], dtype=torch.long),
        response_length=torch.tensor([traj.response_tokens for traj in trajs], dtype=torch.long),
        groups=groups,
        group_size=group_size,
        trajectories=list(trajs),
        images=[row["images"] for row in rows] if has_images else None,
    )
