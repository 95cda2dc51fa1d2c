"""One env episode as a chat: the prompt layout, the env step and the per-episode bookkeeping (docs/protocol.md).

Every engine that plays a ``ragen/`` env against a language model does the same thing: reset the env with the
group's seed, show the model RAGEN's user turn, hand its raw response to the env (which parses it itself), and
turn the env's answer into the next user turn. :class:`ChatEpisode` is that loop for one episode, text only;
the engines add their own tokens around it:

- ``ragen_core.rollout.rollout`` plays ``P * G`` episodes in lock-step and lays their tokens out for training;
- ``ragen_core.integrations.verl.env.EnvEpisode`` is the text side of the verl agent loop;
- ``ragen_core.integrations.trl.env.RagenEnvironment`` is TRL's environment interface (one tool call per turn).

The chat (``messages``): an optional system message (the env's ``info["instructions"]``), then for each turn
the user message of :func:`user_turn_text` and the model's response as the assistant message. A user turn holds
``Reward: r`` (the previous turn's reward, from turn 2 on), ``Turn k:``, ``State:`` + the observation,
``You have N actions left.`` (envs with an action budget) and the format reminder with the length limit.

Every step goes through :func:`safe_step`: a malformed answer costs the env's own format penalty (the env's
parser decides), and an env that raises on model text ends the episode with that penalty instead of crashing
the engine. :func:`per_rollout_options` is the one formula for per-rollout reset options (the Bandit's
``payoff_seed``: rollouts that share a seed still draw independent payoffs).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ragen_core.limits import FLOAT32_MAX
from ragen_envs import contract
from ragen_envs.protocol import RESPONSE_FORMAT
from ragen_envs.validation import require_bool, require_int

__all__ = [
    "ChatEpisode",
    "EpisodeStart",
    "EpisodeStep",
    "user_turn_text",
    "response_format",
    "observation_text",
    "observation_problem",
    "env_name",
    "escape_image_token",
    "escape_control_tokens",
    "system_messages",
    "safe_step",
    "rollout_option",
    "per_rollout_options",
    "seed_list",
]


# ---------------------------------------------------------------------------------------------- prompt layout
def user_turn_text(
    turn: int,
    observation: str,
    actions_left: int | None,
    prev_reward: float | None,
    length_limit: int,
    response_format: str | None = RESPONSE_FORMAT,
) -> str:
    """The user message of turn `turn` (1-based) in RAGEN's layout (docs/protocol.md).

    ``prev_reward=None`` omits the ``Reward:`` line (turn 1), ``actions_left=None`` the action budget, and
    ``response_format=None`` the format reminder (the TRL tool adapter, whose tool call carries the answer).
    """
    lines = []
    if prev_reward is not None:
        lines.append(f"Reward: {prev_reward:g}")
    lines.append(f"Turn {turn}:")
    lines.append(f"State:\n{observation}")
    if actions_left is not None:
        lines.append(f"You have {actions_left} actions left.")
    if response_format is not None:
        lines.append(f"Always output: {response_format} with no extra text. Strictly follow this format. "
                     f"Max response length: {length_limit} tokens.")
    return "\n".join(lines)


def response_format(env: Any) -> str:
    """The format reminder for the env's ``action_format`` ("tagged", the default; "answer"; "plain")."""
    fmt = contract.action_format(env)
    if fmt == "answer":
        return "<answer> [your answer] </answer>"
    if fmt == "plain":
        return "[your answer]"
    return RESPONSE_FORMAT


def escape_image_token(text: str, image_token: str | None) -> str:
    """`text` with every literal `image_token` broken by a zero-width space (U+200B after its first character; a
    one-character token becomes U+FFFD), so that the only placeholders in a prompt are the ones placed for images.

    The policy turns each placeholder into image tokens; one spelled out in an env's text or in a model's response
    (``<image>`` written with ordinary tokens, then re-rendered in a windowed context) would stand for an image that
    is not there, and the policy refuses the whole batch. Text without the placeholder is returned as it is.
    """
    if not image_token or image_token not in text:
        return text
    broken = image_token[0] + "\u200b" + image_token[1:] if len(image_token) > 1 else "\ufffd"
    return text.replace(image_token, broken)


def escape_control_tokens(text: str, tokens: Sequence[str]) -> str:
    """`text` with every literal control token of `tokens` (a tokenizer's special tokens: ``<|im_end|>``,
    ``<|im_start|>``, ``<|endoftext|>``, ...) broken by a zero-width space after its first character, as
    :func:`escape_image_token` breaks the image placeholder; tokens of one character are left alone (breaking them
    would change ordinary text).

    A chat template renders a message's content by tokenizing it, and a tokenizer turns a special token spelled in
    text into the control token itself: an observation, instructions or a response holding ``<|im_end|>\n
    <|im_start|>user`` would close its turn early and open a forged one in the prompt (and a scripted response would
    train on the end-of-turn id). Text without any of them is returned as it is.
    """
    for token in sorted(tokens, key=len, reverse=True):
        if len(token) > 1 and token in text:
            text = text.replace(token, token[0] + "\u200b" + token[1:])
    return text


def observation_problem(obs: Any) -> str | None:
    """None when `obs` is an observation a language model can be shown: text (``str``) or a vision observation
    ``{"text": str, "image": uint8 HxWx3}`` (docs/envs.md); else what it is instead, for an error message.

    Nothing else is converted: ``str()`` of a dict without ``"text"`` used to show the model an empty state, of a
    numpy array with more than 1000 entries numpy's cut ``[0 1 2 ... 1999]``, of bytes ``b'...'`` and of None the
    word ``None``, each without a word to the user.
    """
    if isinstance(obs, str):
        return None
    if isinstance(obs, Mapping):
        if isinstance(obs.get("text"), str):
            return None
        keys = ", ".join(repr(k) for k in list(obs)[:6])
        return (f"a dict without a 'text' string (keys: {keys or 'none'})" if "text" not in obs else
                f"a dict whose 'text' is {type(obs['text']).__name__}, not str")
    if isinstance(obs, np.ndarray):
        return f"a numpy array of shape {obs.shape}"
    return f"{type(obs).__name__} {obs!r:.40}"


def observation_text(obs: Any, image_token: str | None,
                     control_tokens: Sequence[str] = ()) -> tuple[str, np.ndarray | None]:
    """Text of an observation and its image; the image is placed in the text with the policy's image
    placeholder (vision policies), or dropped for text-only policies (``image_token=None``). A placeholder
    or a control token inside the env's own text is escaped (:func:`escape_image_token`,
    :func:`escape_control_tokens`). An observation that is neither text nor ``{"text": str, ...}`` is a TypeError
    (:func:`observation_problem`)."""
    problem = observation_problem(obs)
    if problem is not None:
        raise TypeError(f"the observation must be text (str) or {{'text': str, 'image': uint8 HxWx3}}; got {problem}")
    if isinstance(obs, Mapping):
        text, image = escape_image_token(obs["text"], image_token), obs.get("image")
        text = escape_control_tokens(text, control_tokens)
        if image is None or image_token is None:
            return text, None
        return f"{image_token}\n{text}", _own_copy(image)
    return escape_control_tokens(escape_image_token(str(obs), image_token), control_tokens), None


def _own_copy(image: Any) -> Any:
    """A copy of an observation's image that the env cannot change later: an env may draw every frame into one buffer
    and return it each step (Gymnasium allows it), which turned every earlier turn's stored image into the latest
    frame, in the prompts the policy saw and in the batch it trained on."""
    if isinstance(image, np.ndarray):
        return image.copy()
    copy = getattr(image, "clone", None) or getattr(image, "copy", None)  # a torch tensor, a PIL image
    return copy() if callable(copy) else image


def env_name(env: Any) -> str:
    """What an error message calls `env`: its registered id (``env.spec.id``, set by ``gym.make``), else its
    class name."""
    return str(getattr(getattr(env, "spec", None), "id", None) or type(contract.unwrapped(env)).__name__)


def system_messages(system: str) -> list[dict[str, str]]:
    """The conversation's opening: one system message, or none when the system prompt is off (empty)."""
    return [{"role": "system", "content": system}] if system else []


def safe_step(env: Any, text: str) -> tuple[Any, float, bool, bool, dict[str, Any]]:
    """``env.step(text)``, except that an exception ends the episode instead of the rollout.

    Envs must not raise on model text; one that does anyway (a bug, or a hostile answer that found one) must not
    stop a training run. The turn gets the env's format penalty as its reward, ``info["env_error"]`` names the
    exception, the episode terminates, and ``rollout/env_errors`` counts it. The env is reset by the next rollout.

    A step that returns instead what the Gymnasium API rules out is the same kind of env bug and is contained the
    same way (``info["env_error"]`` starts ``ValueError: env.step returned``): not a 5-tuple ``(observation, reward,
    terminated, truncated, info)`` (an old-gym 4-tuple used to be an unpacking error deep inside the episode), a
    reward that is not a finite number (a NaN used to reach the batch's returns without a word), or an ``info``
    that is not a dict.
    """
    try:
        return _checked_step(env.step(text))
    except Exception as exc:  # any env bug is contained here, by design
        penalty = contract.format_penalty(env)  # the env's, else the contract's default (-0.1)
        info = {"env_error": f"{type(exc).__name__}: {exc}"[:500], "format_penalty": penalty,
                "format_error": "env_error", "success": False, "action_is_valid": False}
        return "", penalty, True, False, info


def _checked_step(result: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
    """`result` of ``env.step`` unchanged, or a ValueError saying which part breaks the Gymnasium step API
    (:func:`safe_step`)."""
    if not isinstance(result, tuple) or len(result) != 5:
        got = f"a {len(result)}-tuple" if isinstance(result, tuple) else f"{type(result).__name__} {result!r:.40}"
        raise ValueError(f"env.step returned {got}; expected (observation, reward, terminated, truncated, info)")
    reward, info = result[1], result[4]
    try:  # a number: Python's, numpy's or a 0-d tensor; not a string that float() would read
        value = float(reward) if not isinstance(reward, (str, bytes)) else math.nan
    except (TypeError, ValueError):
        value = math.nan
    if not math.isfinite(value):
        raise ValueError(f"env.step returned the reward {reward!r:.40}; expected a finite number")
    if abs(value) > FLOAT32_MAX:  # the batch holds rewards in float32: it would read inf there
        raise ValueError(f"env.step returned the reward {reward!r:.40}; expected a number within float32's range "
                         f"(|reward| <= {FLOAT32_MAX:.4g})")
    if not isinstance(info, Mapping):
        raise ValueError(f"env.step returned info {type(info).__name__} {info!r:.40}; expected a dict")
    return result


# ---------------------------------------------------------------------------------------------- reset options
def rollout_option(option: str, seed: int, k: int, group_size: int) -> dict[str, int] | None:
    """Reset options of rollout `k` of the group with seed `seed`: ``{option: seed * G + k}``; None without option.

    The G rollouts of a group share the reset seed (same initial state); a per-rollout option (``env.
    per_rollout_option``, e.g. the Bandit's ``payoff_seed``) gives each its own integer, distinct across groups
    and rollouts while ``0 <= k < G``. Validation and warm-start rollouts use ``G = 1``: the option is the seed.
    `seed` and `k` must be integers >= 0 and `group_size` one >= 1 (ValueError naming it: 1.7 is not truncated).
    """
    if not option:
        return None
    seed, k = require_int("seed", seed, low=0), require_int("k", k, low=0)
    return {option: seed * require_int("group_size", group_size, low=1) + k}


def per_rollout_options(option: str, seeds: Sequence[int], group_size: int) -> list[dict[str, int]] | None:
    """:func:`rollout_option` for ``P`` groups x ``G`` rollouts, group-major (rollout ``i * G + k``, the order of
    ``ragen_core.rollout.rollout``'s envs): a list of ``P * G`` dicts, or None without option."""
    if not option:
        return None
    group_size = require_int("group_size", group_size, low=1)
    return [rollout_option(option, s, k, group_size) for s in seed_list("seeds", seeds) for k in range(group_size)]


def seed_list(name: str, seeds: Any) -> list[int]:
    """`seeds` (a list, tuple, 1-D numpy array or integer tensor of seeds) as a list of Python ints >= 0.

    TypeError for a single value or a string in place of the list; ValueError naming ``name[i]`` for an entry that
    is not an integer >= 0 (a float, a bool, a negative number: a seed of 1.7 is a mistake, not seed 1).
    """
    if getattr(seeds, "ndim", None) == 1 and callable(getattr(seeds, "tolist", None)):  # numpy array, torch tensor
        seeds = seeds.tolist()
    if isinstance(seeds, (str, bytes, Mapping)) or not isinstance(seeds, Iterable):
        raise TypeError(f"{name} must be a list of integer seeds (one per group), got {type(seeds).__name__} "
                        f"{seeds!r:.40}")
    return [require_int(f"{name}[{i}]", x, low=0) for i, x in enumerate(seeds)]


# ---------------------------------------------------------------------------------------------- the episode
@dataclass
class EpisodeStart:
    """The opening of one episode: what :func:`ragen_core.rollout.rollout` sends as the first prompt.

    Attributes:
        system: the system message text ("" when the system prompt is off).
        user: the first user message ``{"role": "user", "content": ...}`` (:func:`user_turn_text` of turn 1).
        images: the first observation's image (vision envs with a vision policy), else empty.
        actions_left: the env's action budget (None when it has none).
        response_format: the format reminder of the env's ``action_format``.
    """

    system: str
    user: dict[str, str]
    images: list[np.ndarray]
    actions_left: int | None
    response_format: str

    def messages(self) -> list[dict[str, str]]:
        """The first prompt as chat messages: [system,] user."""
        return [*system_messages(self.system), self.user]


@dataclass
class EpisodeStep:
    """What one :meth:`ChatEpisode.step` returned: the env's outcome and the next user message.

    ``user`` is None when the episode is over (terminated, truncated, or ``max_turns`` played).
    """

    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]
    user: dict[str, str] | None

    @property
    def format_valid(self) -> bool:
        """The env charged no format penalty and reported no format error."""
        penalty = float(self.info.get("format_penalty", 0.0) or 0.0)
        return penalty == 0.0 and self.info.get("format_error") is None

    @property
    def action_valid(self) -> bool:
        """The env ran the answer's action: its ``info["action_is_valid"]``; True when the env does not report it
        (a plain Gymnasium env took the text as its action: it refused nothing it says), False when it raised."""
        return bool(self.info.get("action_is_valid", True))

    @property
    def env_error(self) -> str | None:
        """The exception ``env.step`` raised on this response ("TypeName: message"), None when it returned."""
        return self.info.get("env_error")


class ChatEpisode:
    """One env episode played as a chat (module docstring): :meth:`reset`, then :meth:`step` per response.

    Args:
        env: a gymnasium env of this package (or anything with ``reset(seed, options)`` / ``step(text)``).
        length_limit: the "Max response length" stated in the format reminder, in tokens.
        system_prompt: send the env's instructions as the system message (False: the first user turn opens).
        max_turns: most assistant turns (None: until the env ends the episode).
        image_token: the policy's image placeholder (vision policies); None drops images.
        control_tokens: the policy's control tokens (its tokenizer's special tokens), escaped wherever they are
            spelled in the text of a prompt (:func:`escape_control_tokens`); empty: none is.
        reminder: end each user turn with the format reminder (False: the TRL tool adapter).

    `length_limit` must be an integer >= 0, `max_turns` None or an integer >= 1, `system_prompt` and `reminder`
    True or False (ValueError naming the argument otherwise), `control_tokens` a list of str (TypeError).

    State after :meth:`reset` (updated by every :meth:`step`):
        ``system``, ``instructions``: the system message text ("" when off) and the env's instructions;
        ``user``, ``user_images``: the pending user message (None once the episode is over) and its images;
        ``history``: ``(user message, response, user images)`` per played turn;
        ``messages``: the chat so far ([system,] user, assistant, user, assistant, ...; no pending user);
        ``rewards``, ``total_reward``, ``turn``: per-turn rewards, their running sum, turns played;
        ``done``, ``success``, ``terminated``, ``truncated``: the outcome of the last step; ``truncated`` is also
        True when ``max_turns`` ends the episode before the env does (Gymnasium's TimeLimit convention: the episode
        was cut, not finished), so an episode that is ``done`` is always terminated or truncated.
    """

    def __init__(self, env: Any, *, length_limit: int, system_prompt: bool = True, max_turns: int | None = None,
                 image_token: str | None = None, reminder: bool = True,
                 control_tokens: Sequence[str] = ()) -> None:
        self.env = env
        self.length_limit = require_int("length_limit", length_limit, low=0)
        self.system_prompt = require_bool("system_prompt", system_prompt)
        self.max_turns = require_int("max_turns", max_turns, low=1, allow_none=True)
        self.image_token = image_token
        if isinstance(control_tokens, (str, bytes)) or not all(isinstance(t, str) for t in control_tokens):
            raise TypeError(f"control_tokens must be a list of str tokens, got {control_tokens!r:.60}")
        self.control_tokens = tuple(control_tokens)
        self.reminder = require_bool("reminder", reminder)
        self._clear()

    def _clear(self) -> None:
        self.system = ""
        self.instructions = ""
        self.observation: Any = None
        self.user: dict[str, str] | None = None
        self.user_images: list[np.ndarray] = []
        self.history: list[tuple[dict[str, str], str, list[np.ndarray]]] = []
        self.messages: list[dict[str, str]] = []
        self.rewards: list[float] = []
        self.total_reward = 0.0
        self.actions_left: int | None = None
        self.response_format = RESPONSE_FORMAT
        self.done = False
        self.success = False
        self.terminated = False
        self.truncated = False

    @property
    def turn(self) -> int:
        """Assistant turns played so far."""
        return len(self.rewards)

    def _escape(self, text: str) -> str:
        """`text` as prompt text: no image placeholder and no control token that the text itself spells."""
        return escape_control_tokens(escape_image_token(text, self.image_token), self.control_tokens)

    def _user(self, turn: int, text: str, prev_reward: float | None) -> dict[str, str]:
        fmt = self.response_format if self.reminder else None
        return {"role": "user",
                "content": user_turn_text(turn, text, self.actions_left, prev_reward, self.length_limit, fmt)}

    def reset(self, seed: int, options: dict[str, Any] | None = None) -> EpisodeStart:
        """Reset the env with `seed` (an integer >= 0) and reset `options` (None or a dict); returns the opening
        (system message, first user turn)."""
        seed = require_int("seed", seed, low=0)
        if options is not None and not isinstance(options, Mapping):
            raise TypeError(f"options must be None or a dict of reset options, got {type(options).__name__}")
        self._clear()
        try:
            result = self.env.reset(seed=seed, options=options)
        except Exception as exc:  # the env's own error, kept as it is; the note says which env raised it
            exc.add_note(f"raised by {env_name(self.env)}.reset(seed={seed}, options={options!r:.60})")
            raise
        obs, info = self._checked_reset(result)
        self.observation = obs
        text, image = self._observation_text(obs, "reset")
        self.actions_left = info.get("actions_left")
        self.response_format = response_format(self.env)
        self.instructions = str(info.get("instructions", ""))
        self.system = self._escape(self.instructions) if self.system_prompt else ""
        self.user = self._user(1, text, None)
        self.user_images = [image] if image is not None else []
        self.messages = system_messages(self.system)
        return EpisodeStart(system=self.system, user=self.user, images=list(self.user_images),
                            actions_left=self.actions_left, response_format=self.response_format)

    def _checked_reset(self, result: Any) -> tuple[Any, Mapping[str, Any]]:
        """``env.reset``'s `result` as (observation, info), or a ValueError naming the env and what the Gymnasium
        API ``(observation, info)`` got instead (an old-gym reset that returns the observation alone used to be
        "too many values to unpack", an info that is not a dict an AttributeError)."""
        if not isinstance(result, tuple) or len(result) != 2:
            got = f"a {len(result)}-tuple" if isinstance(result, tuple) else f"{type(result).__name__} {result!r:.40}"
            raise ValueError(f"{env_name(self.env)}: reset returned {got}; expected (observation, info)")
        if not isinstance(result[1], Mapping):
            raise ValueError(f"{env_name(self.env)}: reset returned info {type(result[1]).__name__} "
                             f"{result[1]!r:.40}; expected a dict")
        return result

    def _observation_text(self, obs: Any, where: str) -> tuple[str, np.ndarray | None]:
        """:func:`observation_text` of `obs`, whose TypeError names the env and the call that returned it."""
        problem = observation_problem(obs)
        if problem is not None:
            raise TypeError(f"{env_name(self.env)}: {where} returned an observation the model cannot be shown: "
                            f"{problem}; an observation must be text (str) or {{'text': str, 'image': uint8 HxWx3}}")
        return observation_text(obs, self.image_token, self.control_tokens)

    def prompt_messages(self, window: int) -> tuple[list[dict[str, str]], list[np.ndarray]]:
        """The next prompt re-rendered from text: [system,] the last `window` (user, assistant) pairs (0: none) and
        the pending user turn, with the images of those user turns in order."""
        if self.user is None:
            raise RuntimeError("the episode is over; it has no next prompt")
        kept = self.history[len(self.history) - window :] if window > 0 else []
        msgs = system_messages(self.system)
        images: list[np.ndarray] = []
        for user, assistant, user_images in kept:
            # The response is re-rendered from its text: a placeholder the model spelled out is not an image.
            msgs += [user, {"role": "assistant", "content": self._escape(assistant)}]
            images += user_images
        msgs.append(self.user)
        images += self.user_images
        return msgs, images

    def step(self, response: str) -> EpisodeStep:
        """Play one model response (raw text, parsed by the env) through :func:`safe_step`; a `response` that is
        not a str is a TypeError (the env would otherwise turn it into a format error)."""
        if self.done or self.user is None:
            raise RuntimeError("the episode is over; reset it (or start a new one)")
        if not isinstance(response, str):
            raise TypeError(f"response must be a str (the model's text), got {type(response).__name__} "
                            f"{response!r:.40}")
        obs, reward, terminated, truncated, info = safe_step(self.env, response)
        reward = float(reward)
        ends = bool(terminated or truncated) or (self.max_turns is not None and self.turn + 1 >= self.max_turns)
        # The next user turn shows this observation; the last one is shown to no one, whatever it is (None, an
        # array), so it is not read. Checked before any state changes: a refused step leaves the episode as it was.
        shown = None if ends else self._observation_text(obs, "step")
        self.observation = obs
        self.rewards.append(reward)
        self.total_reward += reward
        self.history.append((self.user, response, self.user_images))
        self.messages += [self.user, {"role": "assistant", "content": response}]
        self.success = bool(info.get("success", False))
        capped = ends and not (terminated or truncated)  # max_turns cut it, as a TimeLimit wrapper would
        self.terminated, self.truncated = bool(terminated), bool(truncated) or capped
        self.actions_left = info.get("actions_left", self.actions_left)
        self.done = ends
        if shown is None:
            self.user, self.user_images = None, []
        else:
            text, image = shown
            self.user = self._user(self.turn + 1, text, reward)
            self.user_images = [image] if image is not None else []
        return EpisodeStep(reward=reward, terminated=self.terminated, truncated=self.truncated, info=info,
                           user=self.user)
