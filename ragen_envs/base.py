"""`TextAgentEnv`: the Gymnasium base class of every env in the suite.

An env of this package is played by an LLM: the action is the model's raw response string,
the observation is text (or, for vision variants, `{"text": str, "image": uint8 HxWx3}`).
The base class owns everything the envs share:

- the spaces (`spaces.Text` over a Unicode charset, see `ragen_envs.spaces`);
- parsing the response with `ragen_envs.protocol.parse_response` and charging the format penalty;
- the per-episode action budget (`max_actions`) and turn limits (`max_turns`, which truncates,
  and `turn_limit`, which terminates; see below);
- `info` conventions: every `info` has `action_is_valid`, `actions_executed`, `success`,
  `format_penalty`, `format_error`, `dropped_actions`, `actions_left` and `turn`; `reset()` adds
  `instructions` (the system-prompt text: rules, legend, action vocabulary, format, budget);
- rendering: `render_mode="ansi"` returns the text state, `"rgb_array"` the picture (grid envs).

A subclass implements the task through five hooks:

    _reset_task(options) -> dict          new episode from self.np_random; returns extra info
    _execute(action) -> (reward, terminated)   apply one canonical action
    _state_text() -> str                  the text observation of the current state
    _task_instructions() -> str           rules, legend and vocabulary (the format part is added here)
    _is_success() -> bool

declares the reset options `_reset_task` reads (any other key is refused by `reset`, before `np_random` is reseeded):

    RESET_OPTIONS = frozenset({"level"})  every registered env declares its own (tests/envs/test_reset_options.py)

and optionally:

    _begin_step()                         first thing of every step() (the no-op step after the end
                                          included): clear per-turn state, note the state before the turn
    _step_info(info) -> dict              extra info keys of this step, given the base info (which has
                                          `episode_over=True` on the no-op step after the end)
    _on_turn_limit()                      the turn limit has just ended the episode (mark a forfeit)
    _match_action(piece) -> str | None    map one answer piece to a canonical action
    _answer_example() -> str              the example answer of the instructions
    _observation_text(notice) -> str      the observation's text when it shows more than the state
                                          (e.g. a turn counter)
    _render_rgb(), _image_space()         the picture (required for vision variants)

The RL core (`ragen_core`), the apps and the benchmarks read an env through a fixed set of public names, the
env-trainer contract. Every name is declared on this class with its docstring (who reads it, when) and a default;
the core reads them from `env.unwrapped`, with `getattr` and the same defaults where a name is optional (so that
an object that is not a TextAgentEnv reads the same; the defaults and their readers are in `ragen_envs.contract`):

    action_format                         (attribute) "tagged", "answer" or "plain": the answer format
    format_penalty_value                  (attribute) the reward of a malformed answer (<= 0)
    max_actions_per_turn, actions_left    (attributes) actions per turn; actions the budget has left (or None)
    vision                                (attribute) whether an observation carries a picture
    ACTIONS                               the fixed action vocabulary; () for free-form answers
    STEP_REWARD                           a per-action cost (Sokoban's -0.1), or None
    explain_refusal(piece) -> str         why a piece of an answer was dropped (`ragen play`)
    oracle() -> list[str] | None          the oracle's answers from here (default: NotImplementedError)
    oracle_step(reasoning) -> (str, [str])   the warm start's demonstrator (default: NotImplementedError)
    random_step(rng) -> (str, [str])      the random policy's turn (default: `I try <action>.`)
    noise_answer(kind, rng) -> str        what a noisy demonstrator answers instead (default: from the actions)
    random_action                         `random_action(rng) -> str`, or None (the default): no such hook
    is_final_action                       `is_final_action(action) -> bool`, or None (the default): no tool

`oracle()` gives the whole plan where the env is deterministic and the plan is known (Sokoban, Sudoku,
PocketCube), else the next answer alone, `[answer]` (FrozenLake, Bandit, 2048, Countdown, MetaMathQA, SearchQA,
WebShop, Code); `[]` when nothing is left to do (solved, no legal move) and None when the oracle has no answer
(no solution found, no reference); each answer in the env's own action text (what goes inside `<answer>`).
How to add an env, and what the warm start needs of it: docs/architecture.md, "Adding an env".

A subclass never overrides `step()`, `reset()` or `_observation()`. Two limits end an episode:

- `max_turns` (and the action budget `max_actions`) *truncate*: a time limit put on a task that
  could go on (Sokoban, FrozenLake). `max_turns=None` (the default) means `default_max_turns`:
  2 x `max_actions`, or 10,000 turns without a budget, or none where `turn_limit` is set, so that
  an episode always ends, even when no answer is ever valid;
- `turn_limit` *terminates*: the task itself allows that many turns (answers, attempts,
  submissions), so no reward can follow the last one and a critic must not bootstrap from it.
  Envs expose it under their own argument names (`max_answers`, `max_turns`) and pass it on.

One step: `_begin_step()`; parse the response; run each valid action with `_execute` until one
terminates or the budget is spent; add the format penalty; if the episode goes on and `turn_limit`
turns are used, terminate it and call `_on_turn_limit()`; truncate on `max_actions` / `max_turns`;
build the info (base keys, then `_step_info`); observe (with a notice when nothing ran).

Every text observation leaves through one gate, `ragen_envs.spaces.fit_observation`: characters
outside the observation charset (NUL, lone surrogates, characters beyond the BMP) become U+FFFD and
over-long text is cut, so whatever an env echoes (a search query, a clicked element, a data set's
text) the observation is always in `observation_space` (Gymnasium's async vector envs fail on the
first observation that is not). The response itself is cleaned by the parser before any env sees
it (control characters, lone surrogates; `ragen_envs.protocol`).

Stepping a finished episode again is a defined no-op (reward 0, the same flags, nothing executed),
so a batched rollout may keep stepping envs that are already done.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from ragen_envs import contract, protocol
from ragen_envs.spaces import MAX_RESPONSE_CHARS, action_space, fit_observation, observation_space
from ragen_envs.validation import require_bool, require_float, require_int

INVALID_NOTICE = "Your answer had no valid action; the state is unchanged."
#: Refused answer pieces an observation lists one per line (`listed_refusals`); the rest are only counted.
MAX_LISTED_REFUSALS = 5
#: The default `max_turns` of an env with neither a task turn limit nor an action budget (`default_max_turns`).
UNBUDGETED_MAX_TURNS = 10_000
#: The default `max_turns` of an env with an action budget is this many times the budget (`default_max_turns`).
TURNS_PER_BUDGETED_ACTION = 2


def default_max_turns(max_actions: int | None, turn_limit: int | None) -> int | None:
    """The turn limit (a truncation) of an env built with ``max_turns=None``: every episode must end, also for a
    policy whose every answer is invalid (an answer that executes nothing spends no action of the budget, so the
    budget alone never ends such an episode, and Gymnasium users get no `TimeLimit`: no id registers
    `max_episode_steps`).

    - With a task turn limit (`turn_limit`): None. That limit already terminates every episode.
    - With an action budget: ``2 * max_actions``. Each turn that executes anything spends at least one action, so
      valid play ends within `max_actions` turns by the budget itself; the turn limit only has to end the turns
      that execute nothing, and the factor 2 leaves a policy as many of those as the budget has actions before it
      cuts in (a limit of exactly `max_actions` would cut a policy that fumbled one answer before it could spend
      its budget, and would bind on the last turn of configs/pocketcube_tiny.toml, whose `rollout.max_turns`
      equals its `max_actions`, 2). Every shipped config plays fewer turns than ``2 * max_actions`` (its
      `rollout.max_turns` is below it; tests/envs/test_episode_end_defaults.py checks each configs/*.toml), so the
      default never changes a training run: the rollout's own limit always ends the episode first.
    - Without a budget (``max_actions=None``, e.g. 2048's default): UNBUDGETED_MAX_TURNS (10,000). Then the task
      alone decides how long valid play lasts (2048 ends by itself, after about a thousand moves for the 2048
      tile); the cap sits far above that and above any rollout's `max_turns`, and only guarantees an end.

    Pass `max_turns=` explicitly for another limit (a large one for practically none).
    """
    if turn_limit is not None:
        return None
    if max_actions is not None:
        return TURNS_PER_BUDGETED_ACTION * max_actions
    return UNBUDGETED_MAX_TURNS


def listed_refusals(lines: list[str], limit: int = MAX_LISTED_REFUSALS) -> list[str]:
    """The first `limit` refusal lines, then one line counting the others.

    Every answer piece can be refused, and a 16,384-character response holds thousands of pieces
    (`"x||" * 300` is 300): one line each pushed the state out of the observation, which is cut at
    MAX_OBSERVATION_CHARS. Capped, the lines above the state stay a few hundred characters whatever
    the response; `info["refused"]` keeps every refusal.
    """
    if len(lines) <= limit:
        return list(lines)
    return [*lines[:limit], f"... and {len(lines) - limit} more refused pieces of your answer."]


class TextAgentEnv(gym.Env):
    """Base class: LLM response in, text (or text + image) out. See the module docstring."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 4}

    #: Canonical action names (used by the default matcher and the instructions); () for free-form answers. Also
    #: read by `ragen play` (its example action) and by the defaults of `random_step` and `noise_answer`.
    ACTIONS: ClassVar[tuple[str, ...]] = ()
    #: Extra accepted spellings, alias -> canonical name.
    ACTION_ALIASES: ClassVar[dict[str, str]] = {}
    #: The keys of ``reset(options=...)`` this env reads; any other key is a ValueError naming it (a misspelt option
    #: was silently ignored: ``{"levle": ...}`` played a random level). None: not declared, every key passes (every
    #: registered env declares its own: tests/envs/test_reset_options.py).
    RESET_OPTIONS: ClassVar[frozenset[str] | None] = None
    #: First line of the instructions.
    ROLE: ClassVar[str] = "You are an agent solving a task step by step."

    # ------------------------------------------------------------------ the env-trainer contract: attributes
    # (the methods are below, under "the env-trainer contract: methods"; the module docstring lists them all)
    #: Reward of one executed action that changes nothing else (a per-action cost: Sokoban's -0.1), or None (the
    #: default): actions cost nothing. Read before a run by `ragen_core.training.trainer.format_penalty_warning`:
    #: a format penalty above STEP_REWARD x max_actions_per_turn makes a malformed answer the cheaper failure.
    STEP_REWARD: ClassVar[float | None] = None
    #: The optional hook ``random_action(rng: np.random.Generator) -> str``: one valid but uninformed action in the
    #: env's own text, drawn from `rng` only, for an env without a fixed `ACTIONS` list (Sudoku's placements,
    #: MetaMathQA, Code, SearchQA, WebShop). None (the default): no such hook; random actions come from `ACTIONS`.
    #: Read with ``callable(getattr(env.unwrapped, "random_action", None))`` by `ragen play` (the example action of
    #: its banner, after each reset) and by the defaults of `random_step` and `noise_answer` (the warm start).
    random_action: ClassVar[Callable[[np.random.Generator], str] | None] = None
    #: The optional hook ``is_final_action(action: str) -> bool`` of an env with a tool: whether an action is the
    #: final answer (SearchQA's ``finish[...]``, WebShop's ``click[Buy Now]``) rather than a tool call. None (the
    #: default): the env has no tool, every action acts on the task. Read after every step of a rollout, on the
    #: actions it executed, by `ragen_core.rollout.final_action_flag` (the figure ``rollout/tool_use``).
    is_final_action: ClassVar[Callable[[str], bool] | None] = None
    #: The answer format ("tagged": <think> then <answer>; "answer"; "plain"; `action_format=`). Read by
    #: `ragen_core.episode.response_format` for the format reminder of every prompt.
    action_format: protocol.ActionFormat
    #: The reward of a malformed answer or an invalid action (<= 0; `format_penalty=`). Read by
    #: `ragen_core.episode.safe_step` (the reward of a turn whose step raised) and by the trainer's format-penalty
    #: check (see `STEP_REWARD`).
    format_penalty_value: float
    #: The most actions one answer may hold (`max_actions_per_turn=`). Read by the trainer's format-penalty check,
    #: `ragen play` (its example action) and the demonstrators (`oracle_step`: this turn's actions).
    max_actions_per_turn: int
    #: Whether an observation is ``{"text": str, "image": uint8 HxWx3}`` (`vision=`); read by the integrations,
    #: which pass text only.
    vision: bool

    def __init__(
        self,
        *,
        action_format: protocol.ActionFormat = contract.ACTION_FORMAT,
        max_actions_per_turn: int = contract.MAX_ACTIONS_PER_TURN,
        max_actions: int | None = None,
        max_turns: int | None = None,
        turn_limit: int | None = None,
        format_penalty: float = contract.FORMAT_PENALTY,
        render_mode: str | None = None,
        vision: bool = contract.VISION,
        split_actions: bool = True,
    ):
        if action_format not in protocol.ACTION_FORMATS:
            raise ValueError(f"action_format must be one of {protocol.ACTION_FORMATS}, got {action_format!r}")
        max_actions_per_turn = require_int("max_actions_per_turn", max_actions_per_turn, 1)
        max_actions = require_int("max_actions", max_actions, 1, allow_none=True)
        max_turns = require_int("max_turns", max_turns, 1, allow_none=True)
        turn_limit = require_int("turn_limit", turn_limit, 1, allow_none=True)
        if max_turns is None:
            max_turns = default_max_turns(max_actions, turn_limit)
        format_penalty = require_float("format_penalty", format_penalty, high=0.0)
        vision = require_bool("vision", vision)
        split_actions = require_bool("split_actions", split_actions)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']} or None, got {render_mode!r}")
        self.action_format = action_format
        self.max_actions_per_turn = max_actions_per_turn
        self.max_actions = max_actions
        self.max_turns = max_turns
        self.turn_limit = turn_limit
        self.format_penalty_value = format_penalty
        self.render_mode = render_mode
        self.vision = vision
        self.split_actions = split_actions
        self._matcher = protocol.vocabulary_matcher(self.ACTIONS, self.ACTION_ALIASES)

        self.action_space = action_space()
        text_space = observation_space()
        if self.vision:
            self.observation_space = spaces.Dict({"text": text_space, "image": self._image_space()})
        else:
            self.observation_space = text_space

        self._actions_left: int | None = self.max_actions
        self._turn = 0
        self._terminated = False
        self._truncated = False
        self._last_text = ""

    @property
    def actions_left(self) -> int | None:
        """Actions the episode's budget still allows (`info["actions_left"]`); None when there is no budget."""
        return self._actions_left

    def _actions_this_turn(self) -> int:
        """How many actions one answer can run now: `max_actions_per_turn`, no more than the budget has left, at
        least 1 (what a demonstrator's `oracle_step` puts in one answer)."""
        if self._actions_left is None:
            return self.max_actions_per_turn
        return max(1, min(self.max_actions_per_turn, self._actions_left))

    def _checked_options(self, options: Any) -> dict[str, Any]:
        """`options` of :meth:`reset` as a dict: None is {}; anything but a mapping with string keys is a TypeError,
        a key this env does not read (:attr:`RESET_OPTIONS`) a ValueError naming it and the keys it reads."""
        if options is None:
            return {}
        if not isinstance(options, Mapping) or not all(isinstance(k, str) for k in options):
            raise TypeError(f"options must be a dict of reset options with string keys (or None), got "
                            f"{type(options).__name__} {options!r:.60}")
        for key in sorted(options):
            hint = self.unknown_reset_option(key)
            if hint is not None:
                raise ValueError(f"{type(self).__name__} has no reset option {key!r}{hint}")
        return dict(options)

    @classmethod
    def unknown_reset_option(cls, key: str) -> str | None:
        """None when this env reads the reset option `key` (or declares no :attr:`RESET_OPTIONS`); else the end of
        the refusal: the closest accepted key and the keys it reads (``" (did you mean 'level'?); the options it
        reads: level"``). Also asked by ``ragen train`` of ``env.per_rollout_option``, before any env is made."""
        accepted = cls.RESET_OPTIONS
        if accepted is None or key in accepted:
            return None
        import difflib

        near = difflib.get_close_matches(key, sorted(accepted), n=1)
        return (f"{f' (did you mean {near[0]!r}?)' if near else ''}; the options it reads: "
                f"{', '.join(sorted(accepted)) or 'none'}")

    # ------------------------------------------------------------------ hooks for subclasses
    def _reset_task(self, options: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def _execute(self, action: str) -> tuple[float, bool]:
        raise NotImplementedError

    def _state_text(self) -> str:
        raise NotImplementedError

    def _task_instructions(self) -> str:
        raise NotImplementedError

    def _is_success(self) -> bool:
        raise NotImplementedError

    def _render_rgb(self) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} has no picture; use render_mode='ansi'")

    def _image_space(self) -> spaces.Box:
        raise NotImplementedError(f"{type(self).__name__} has no vision variant")

    def _begin_step(self) -> None:
        """Called first in every `step()`, the no-op step after the end included (default: nothing)."""

    def _step_info(self, info: dict[str, Any]) -> dict[str, Any]:
        """Extra info keys of this step, given the base info (default: none)."""
        return {}

    def _on_turn_limit(self) -> None:
        """Called when `turn_limit` has just terminated the episode (default: nothing)."""

    def _match_action(self, piece: str) -> str | None:
        """Map one answer piece to a canonical action (default: the ACTIONS vocabulary)."""
        return self._matcher(piece)

    def _answer_example(self) -> str:
        """An example answer for the instructions."""
        if not self.ACTIONS:
            return "your answer"
        return f" {protocol.ACTION_SEPARATOR} ".join(self.ACTIONS[: min(2, self.max_actions_per_turn)])

    # ------------------------------------------------------------------ the env-trainer contract: methods
    def explain_refusal(self, piece: str) -> str:
        """Why an answer piece was dropped, in one clause, for people: `ragen play` prints it after each step for
        every piece of `info["dropped_actions"]` (the observation the model sees is unchanged). Envs with a notation
        of their own override it (PocketCube)."""
        if not piece.strip():
            return "an empty piece (two || in a row, or || at an end)"
        if self.ACTIONS:
            return f"not one of this game's actions ({', '.join(self.ACTIONS)}; case-insensitive)"
        return "not an action this game accepts"

    def oracle(self) -> list[str] | None:
        """The oracle's answers from the current state, each in the env's own action text (what goes inside
        `<answer>`): the whole plan where the env is deterministic and the plan is known, else `[next answer]`;
        `[]` when nothing is left to do, None when the oracle has no answer (module docstring).

        Called on the current state (after `reset()`) by the env's own `oracle_step` (most envs build their
        demonstration on it), by tests and benchmarks; the core reaches it through `oracle_step`.
        Default: NotImplementedError (the env has no oracle)."""
        raise NotImplementedError(f"{type(self).__name__} has no oracle (it does not define oracle())")

    def oracle_step(self, reasoning: str = "full") -> tuple[str, list[str]]:
        """The demonstrator's turn: (a short reasoning read off the current state, this turn's oracle action(s)).

        The reasoning names what the state shows (cells, numbers, the fact looked up) so that it depends on the
        input; the actions are the oracle's for this turn, at most `max_actions_per_turn` and no more than the
        budget has left, each in the env's own action text. `reasoning` is the style the warm start asks for
        (`warm_start.reasoning`: ``"full"`` sentences or the short ``"plan"``); an env with one style ignores it.

        Called once per turn, on the current state, by `ragen_core.training.sft` (every scripted turn of
        `warm_start.policy = "oracle"`, and the templates of a partly input-dependent demonstrator) and by the
        oracle agent of `ragen_core.apps.env_demo` and the benchmarks (its actions only). Its text must be a function of
        the state (the same state gives the same text). Default: NotImplementedError (the env has no
        demonstrator; the warm start then says to use `warm_start.policy = "random"`)."""
        raise NotImplementedError(f"{type(self).__name__} defines no oracle_step() hook")

    def random_step(self, rng: np.random.Generator) -> tuple[str, list[str]]:
        """The random policy's turn: (reasoning, [one uniformly random valid action]), every draw from `rng`.

        Called once per turn by `ragen_core.training.sft` for `warm_start.policy = "random"` (it teaches the
        format, not the task). Default: ``I try <action>.`` with the action from `random_action(rng)` where the
        env has that hook and no `ACTIONS`, else a uniform draw of `ACTIONS` (ValueError when it has neither). Envs
        that can say something about the state override it (Sokoban, FrozenLake, Bandit)."""
        action = self._uniform_action(rng)
        return f"I try {action}.", [action]

    def noise_answer(self, kind: str, rng: np.random.Generator) -> str:
        """What a noisy demonstrator answers instead of the oracle's action (`warm_start.action_noise`).

        `kind` (`warm_start.noise_action`): ``"first"``, a habit that ignores the state; ``"random"``, a uniformly
        random valid answer drawn from `rng`. Called by `ragen_core.training.sft.oracle_response`, once per
        replaced action, on the turns the noise draw hits. Default: the first of `ACTIONS`, or a draw as
        `random_step`'s; a ValueError naming the env when it has no `ACTIONS` to take the first of (or none to
        draw from). Envs with another vocabulary override it (Bandit's arms, Countdown's expressions)."""
        if kind == "first":
            if not self.ACTIONS:
                if callable(self.random_action):
                    raise ValueError(f"{type(self).__name__} has no fixed action list (ACTIONS), hence no first action "
                                     "for noise_action='first'; use noise_action='random' (its random_action hook)")
                raise ValueError(f"{type(self).__name__} has no action vocabulary (ACTIONS) and no "
                                 "random_action(rng) hook to draw actions from")
            return self.ACTIONS[0]
        return self._uniform_action(rng)

    def _uniform_action(self, rng: np.random.Generator) -> str:
        """One random action: `random_action(rng)` for an env with that hook and no `ACTIONS`, else a uniform draw
        of `ACTIONS` (envs with a list keep drawing from it, so that their warm starts replay exactly)."""
        if not self.ACTIONS and callable(self.random_action):
            return str(self.random_action(rng))
        if not self.ACTIONS:
            raise ValueError(f"{type(self).__name__} has no action vocabulary (ACTIONS) and no random_action(rng) "
                             "hook to draw random actions from")
        return str(self.ACTIONS[int(rng.integers(len(self.ACTIONS)))])

    # ------------------------------------------------------------------ shared behaviour
    def instructions(self) -> str:
        """The system-prompt text: role, task rules, action vocabulary, response format, budget."""
        lines = [self.ROLE, self._task_instructions().strip(), ""]
        if self.ACTIONS:
            lines.append(f"Valid actions: {', '.join(self.ACTIONS)} (case-insensitive).")
        fmt = {
            "tagged": f"Answer in the format: {protocol.RESPONSE_FORMAT}",
            "answer": "Answer in the format: <answer> [your answer] </answer> (a <think> block before it is optional)",
            "plain": "Answer with the action itself; <answer> tags are optional.",
        }[self.action_format]
        lines.append(fmt)
        if self.split_actions and self.max_actions_per_turn > 1:
            lines.append(
                f"You can give up to {self.max_actions_per_turn} actions per turn, separated by "
                f'"{protocol.ACTION_SEPARATOR}", e.g. <answer> {self._answer_example()} </answer>.'
            )
        else:
            lines.append(f"Example: <answer> {self._answer_example()} </answer>")
        if self.max_actions is not None:
            lines.append(f"You can make up to {self.max_actions} actions in total.")
        lines.append(
            f"A missing or malformed answer, or an invalid action, costs {self.format_penalty_value:g}; "
            "if no action is valid the state does not change."
        )
        return "\n".join(lines)

    def _observation_text(self, notice: str | None) -> str:
        """The text of the observation: the notice (if any) above the state text."""
        text = self._state_text()
        return f"{notice}\n{text}" if notice else text

    def _observation(self, notice: str | None = None) -> Any:
        # The one exit of every observation (module docstring): subclasses shape the text with
        # `_observation_text`, never by overriding this method.
        text = fit_observation(self._observation_text(notice))
        self._last_text = text
        if self.vision:
            return {"text": text, "image": self._render_rgb()}
        return text

    def _info(self, **step_fields: Any) -> dict[str, Any]:
        info = {
            "action_is_valid": False,
            "actions_executed": [],
            "success": bool(self._is_success()),
            "format_penalty": 0.0,
            "format_error": None,
            "dropped_actions": [],
            "actions_left": self._actions_left,
            "turn": self._turn,
        }
        info.update(step_fields)
        return info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        options = self._checked_options(options)  # before the RNG is reseeded: a refused reset changes nothing
        super().reset(seed=seed)
        extra = self._reset_task(options)
        self._actions_left = self.max_actions
        self._turn = 0
        self._terminated = False
        self._truncated = False
        info = self._info(instructions=self.instructions(), **(extra or {}))
        return self._observation(), info

    def step(self, action: Any):
        self._begin_step()
        if self._terminated or self._truncated:
            # Defined no-op after the end of an episode (see the module docstring).
            info = self._info(episode_over=True)
            info.update(self._step_info(info))
            return self._observation(), 0.0, self._terminated, self._truncated, info

        parsed = protocol.parse_response(
            action,
            self._match_action,
            action_format=self.action_format,
            max_actions=self.max_actions_per_turn,
            max_chars=MAX_RESPONSE_CHARS,
            split_actions=self.split_actions,
        )
        self._turn += 1
        reward = 0.0
        executed: list[str] = []
        for act in parsed.actions:
            if self._terminated or self._actions_left == 0:
                break
            r, terminated = self._execute(act)
            reward += float(r)
            executed.append(act)
            self._terminated = bool(terminated)
            if self._actions_left is not None:
                self._actions_left -= 1

        penalty = self.format_penalty_value if parsed.format_penalty else 0.0
        reward += penalty
        if not self._terminated and self.turn_limit is not None and self._turn >= self.turn_limit:
            self._terminated = True
            self._on_turn_limit()
        out_of_actions = self._actions_left == 0
        out_of_turns = self.max_turns is not None and self._turn >= self.max_turns
        self._truncated = (not self._terminated) and (out_of_actions or out_of_turns)

        info = self._info(
            action_is_valid=bool(executed),
            actions_executed=executed,
            format_penalty=penalty,
            format_error=parsed.format_error,
            dropped_actions=list(parsed.dropped),
            response_truncated=parsed.truncated,
        )
        info.update(self._step_info(info))
        obs = self._observation(None if executed else INVALID_NOTICE)
        return obs, reward, self._terminated, self._truncated, info

    def render(self):
        if self.render_mode == "ansi":
            return fit_observation(self._state_text())
        if self.render_mode == "rgb_array":
            return self._render_rgb()
        return None
