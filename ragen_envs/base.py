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

An env that knows how to solve its task from the current state says so through one public method,

    oracle() -> list[str] | None          the oracle's answers from here, in order, each in the
                                          env's own action text (what goes inside `<answer>`)

the whole plan where the env is deterministic and the plan is known (Sokoban, Sudoku, PocketCube),
else the next answer alone, `[answer]` (FrozenLake, Bandit, 2048, Countdown, MetaMathQA, SearchQA,
WebShop, Code); `[]` when nothing is left to do (solved, no legal move) and None when the oracle has
no answer (no solution found, no reference). The older names (`oracle_actions`, `oracle_action`,
`oracle_arm`, `oracle_answer`) stay as aliases in their old return forms.

Three optional public methods serve training (docs/protocol.md):

    oracle_step() -> (reasoning, [actions])   this turn's oracle action(s) with a short reasoning
                                              read off the state (the warm start's demonstrator)
    random_action(rng) -> str                 one valid but uninformed action, drawn from `rng`, for
                                              an env without a fixed `ACTIONS` list
    is_final_action(action) -> bool           for an env with a tool: whether an action is the final
                                              answer (SearchQA's finish, WebShop's Buy Now) rather
                                              than a tool call (the rollout's `rollout/tool_use`)

A subclass never overrides `step()`, `reset()` or `_observation()`. Two limits end an episode:

- `max_turns` (and the action budget `max_actions`) *truncate*: a time limit put on a task that
  could go on (Sokoban, FrozenLake);
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

from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from ragen_envs import protocol
from ragen_envs.spaces import MAX_RESPONSE_CHARS, action_space, fit_observation, observation_space
from ragen_envs.validation import require_int

INVALID_NOTICE = "Your answer had no valid action; the state is unchanged."
#: Refused answer pieces an observation lists one per line (`listed_refusals`); the rest are only counted.
MAX_LISTED_REFUSALS = 5


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

    #: Canonical action names (used by the default matcher and the instructions).
    ACTIONS: ClassVar[tuple[str, ...]] = ()
    #: Extra accepted spellings, alias -> canonical name.
    ACTION_ALIASES: ClassVar[dict[str, str]] = {}
    #: First line of the instructions.
    ROLE: ClassVar[str] = "You are an agent solving a task step by step."

    def __init__(
        self,
        *,
        action_format: protocol.ActionFormat = "tagged",
        max_actions_per_turn: int = 2,
        max_actions: int | None = None,
        max_turns: int | None = None,
        turn_limit: int | None = None,
        format_penalty: float = protocol.FORMAT_PENALTY,
        render_mode: str | None = None,
        vision: bool = False,
        split_actions: bool = True,
    ):
        if action_format not in protocol.ACTION_FORMATS:
            raise ValueError(f"action_format must be one of {protocol.ACTION_FORMATS}, got {action_format!r}")
        max_actions_per_turn = require_int("max_actions_per_turn", max_actions_per_turn, 1)
        max_actions = require_int("max_actions", max_actions, 1, allow_none=True)
        max_turns = require_int("max_turns", max_turns, 1, allow_none=True)
        turn_limit = require_int("turn_limit", turn_limit, 1, allow_none=True)
        if format_penalty > 0:
            raise ValueError(f"format_penalty must be <= 0 (a penalty), got {format_penalty}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']} or None, got {render_mode!r}")
        self.action_format = action_format
        self.max_actions_per_turn = max_actions_per_turn
        self.max_actions = max_actions
        self.max_turns = max_turns
        self.turn_limit = turn_limit
        self.format_penalty_value = float(format_penalty)
        self.render_mode = render_mode
        self.vision = bool(vision)
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

    def explain_refusal(self, piece: str) -> str:
        """Why an answer piece was dropped, in one clause (for people: `ragen play` shows it; the observation the
        model sees is unchanged). Envs with a notation of their own override it (PocketCube)."""
        if not piece.strip():
            return "an empty piece (two || in a row, or || at an end)"
        if self.ACTIONS:
            return f"not one of this game's actions ({', '.join(self.ACTIONS)}; case-insensitive)"
        return "not an action this game accepts"

    def _answer_example(self) -> str:
        """An example answer for the instructions."""
        if not self.ACTIONS:
            return "your answer"
        return f" {protocol.ACTION_SEPARATOR} ".join(self.ACTIONS[: min(2, self.max_actions_per_turn)])

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
        super().reset(seed=seed)
        extra = self._reset_task(dict(options or {}))
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
