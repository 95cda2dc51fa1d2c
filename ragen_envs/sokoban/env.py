"""`SokobanEnv`: RAGEN's Sokoban task as a Gymnasium env for LLM agents (text or text + image)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces

from ragen_envs.base import INVALID_NOTICE, TextAgentEnv
from ragen_envs.grid import DIRECTION_WORDS, coords, coords_chars, grid_chars, largest_fitting, moved
from ragen_envs.sokoban.generator import SokobanGenerator
from ragen_envs.sokoban.level import RAGEN_LEGEND, RAGEN_SYMBOLS, Level, parse_xsb, validate
from ragen_envs.sokoban.render import (
    BOX,
    BOX_ON_TARGET,
    FLOOR,
    PLAYER,
    PLAYER_ON_TARGET,
    TARGET,
    TILE,
    WALL,
    render_tiles,
)
from ragen_envs.sokoban.solver import ACTION_NAMES, DEFAULT_MAX_STATES, Board, push_move, solve
from ragen_envs.spaces import MAX_OBSERVATION_CHARS
from ragen_envs.validation import require_bool, require_int

OBS_FORMATS = ("grid", "coord", "grid_coord", "image")
#: The text of ``obs_format="image"``: the same words for every state, so the image is all that tells levels apart.
IMAGE_ONLY_TEXT = "The room is shown in the image."

STEP_PENALTY = -0.1
BOX_ON_TARGET_REWARD = 1.0
BOX_OFF_TARGET_PENALTY = -1.0
SOLVED_REWARD = 10.0


def room_text_bound(h: int, w: int, num_boxes: int, obs_format: str) -> int:
    """The most characters an observation of a generated `h` x `w` room with `num_boxes` boxes can take in
    `obs_format`, the no-valid-action notice line included: every coordinate at its widest, `(h-1, w-1)`.

    In every format the room's grid map counts at least once: it is what `"grid"` shows and what a room costs to
    generate and draw, so `"coord"` and `"image"` do not let `dim_room` grow without bound.
    """
    grid = grid_chars(h, w)
    coord = (len(f"Board size: {h} rows x {w} cols (zero-indexed).") + len("\nTargets: ")
             + coords_chars(h, w, num_boxes) + len("\nBoxes: ") + coords_chars(h, w, num_boxes)
             + len("\nPlayer: ") + coords_chars(h, w, 1))
    text = {"grid": grid, "coord": max(grid, coord), "grid_coord": coord + len("\nGrid Map:\n") + grid,
            "image": grid}[obs_format]
    return len(INVALID_NOTICE) + 1 + text


def check_room_fits(dim_room: tuple[int, int], num_boxes: int, obs_format: str) -> None:
    """ValueError naming `dim_room` and the largest accepted room unless every observation of a generated room
    fits MAX_OBSERVATION_CHARS (`room_text_bound`), the limit a loaded level is held to at reset.

    Checked at construction from the knobs: beyond the limit the observation is cut and the player can vanish
    from it. A room too small for `num_boxes` is left to the generator, which names that problem.
    """
    h, w = dim_room
    if (h - 2) * (w - 2) < num_boxes + 1 or room_text_bound(h, w, num_boxes, obs_format) <= MAX_OBSERVATION_CHARS:
        return
    def fits(rows: int, cols: int) -> bool:
        return room_text_bound(rows, cols, num_boxes, obs_format) <= MAX_OBSERVATION_CHARS

    square = largest_fitting(lambda n: fits(n, n), 3, MAX_OBSERVATION_CHARS)
    rows = largest_fitting(lambda n: fits(n, w), 3, MAX_OBSERVATION_CHARS)
    largest = "no room fits" if square is None else f"the largest accepted square room is ({square}, {square})"
    if rows is not None:
        largest += f", and with {w} columns at most ({rows}, {w})"
    raise ValueError(
        f"dim_room={tuple(dim_room)!r} gives text observations of up to "
        f"{room_text_bound(h, w, num_boxes, obs_format)} characters (obs_format={obs_format!r}, "
        f"num_boxes={num_boxes}), over the {MAX_OBSERVATION_CHARS}-character limit: {largest}"
    )


def check_room_pushable(dim_room: tuple[int, int]) -> None:
    """ValueError naming `dim_room` unless some box of a generated room could move: a push needs three interior
    cells in a line (player, box, the cell the box enters), so one side must be at least 5 (an interior of at most
    2x2 has no push, and the generator used to draw all of its 1000 rooms in vain before a RuntimeError)."""
    h, w = dim_room
    if max(h, w) < 5:
        raise ValueError(
            f"dim_room={(h, w)!r} leaves a {h - 2}x{w - 2} interior, where no box can be pushed: one side of "
            "dim_room must be at least 5 (the outer wall ring included)"
        )


def check_winnable(min_solution_len: int, max_actions: int | None) -> None:
    """ValueError naming `min_solution_len` when every generated level would need more moves than the budget
    `max_actions` allows: no episode could be won (a level of optimal length L takes at least L actions)."""
    if max_actions is not None and min_solution_len > max_actions:
        raise ValueError(
            f"min_solution_len={min_solution_len} exceeds max_actions={max_actions}: every generated level "
            "would need more moves than the budget, so no episode could be won; lower min_solution_len or raise "
            "max_actions (None: no budget)"
        )


class SokobanEnv(TextAgentEnv):
    """Push every box onto a target, in a room seen as text (and optionally as an image).

    ## Description

    The classic warehouse puzzle, in the form RAGEN trains LLM agents on. The player walks a room
    of walls and floor; walking into a box pushes it one cell if the cell behind it is free floor.
    Boxes cannot be pulled and two boxes cannot be pushed at once, so a careless push can make the
    level unsolvable: an irreversible multi-step planning task. Levels come from
    `SokobanGenerator` (random rooms with an exactly known optimal solution length) or are loaded
    in XSB, the format of every Sokoban level collection.

    ## Action Space

    `Text`: the model's raw response (see "Action format"). The four canonical actions are
    `Up`, `Down`, `Left`, `Right` (row - 1, row + 1, col - 1, col + 1).

    ## Observation Space

    `Text` (the state, see "Text format"); with `vision=True`, `Dict({"text": Text, "image": Box})`
    where the image is uint8 `(16 * H, 16 * W, 3)` for `dim_room = (H, W)`: 16x16 pixel sprites
    (wall, floor, target, box, box on target, player, player on target). A loaded level smaller
    than `dim_room` is drawn top-left in that frame, the rest filled with wall (so tile (r, c) is
    at pixels [16 r, 16 r + 16) x [16 c, 16 c + 16), matching the text coordinates).

    ## Text format

    `obs_format="grid_coord"` (default) - RAGEN's layout, rows top to bottom::

        Board size: 6 rows x 6 cols (zero-indexed).
        Targets: (1, 1)
        Boxes: (3, 1)
        Player: (4, 2)
        Grid Map:
        ######
        #O####
        #__###
        #X_###
        #_P_##
        ######

    `"coord"` is the first four lines, `"grid"` the grid lines alone, `"image"` (with `vision=True` only) one
    fixed sentence for every state: the text withheld, so that a policy has to read the picture. Positions are
    `(row, col)`; several positions are listed row-major, separated by ", ". Symbols (always listed in
    `info["instructions"]`): `#` wall, `_` floor, `O` target, `X` box, `√` box on target,
    `P` player, `S` player on target. Floor the player can never reach is shown as wall.
    After a response without any valid action the observation starts with a line saying that
    the state is unchanged.

    ## Action format

    RAGEN's protocol (`ragen_envs.protocol`): `<think> ... </think> <answer> Up || Left </answer>`;
    up to `max_actions_per_turn` (default 2) actions per response, separated by `||`,
    case-insensitive. Unknown pieces are dropped with a -0.1 format penalty; a response with no
    valid action leaves the state unchanged and costs the penalty.

    ## Starting State

    `reset(seed=...)` draws a room from `SokobanGenerator(dim_room, num_boxes, min_solution_len,
    max_solution_len)` using only `self.np_random`: the start is the hardest position the room
    offers with an optimal solution of `min_solution_len` to `max_solution_len` steps (by default
    at most `max_actions`, so every episode can be won within the budget).
    `reset(options={"level": xsb_text})` loads any valid XSB level of any size instead, or a `Level`
    (held to the same rules, `ragen_envs.sokoban.level.validate`); a `ValueError` names what is wrong
    with an invalid one, and a refused level leaves the env as it was.

    ## Rewards

    gym-sokoban's, per executed action: -0.1; +1 when a push puts a box onto a target; -1 when a
    push takes a box off a target; +10 more when every box is on a target. The format penalty
    (-0.1) is added once per response when it applies.

    ## Episode End

    - Termination: every box is on a target.
    - Truncation: `max_actions` actions executed (default 10, RAGEN's budget) without solving.
      Stepping after the end is a no-op (reward 0, same flags).

    ## Information

    Every `info` has the base keys (`action_is_valid`, `actions_executed`, `success`,
    `format_penalty`, `format_error`, `dropped_actions`, `actions_left`, `turn`). `reset` adds
    `instructions` (the system prompt) and `optimal_steps`: the length of a shortest solution in
    steps (exact for generated rooms; for a loaded level the solver's answer within
    `level_solver_max_states`, or None when unsolvable or over that budget).
    `env.unwrapped.to_xsb()` gives the current state in XSB, `oracle()` a shortest remaining
    solution, `oracle_step(reasoning)` the warm start's demonstration (this turn's moves of that plan
    with the cells they involve), `player_position`, `box_positions`, `target_positions` the pieces.

    ## Arguments

    ```python
    import gymnasium as gym
    import ragen_envs

    env = gym.make("ragen/Sokoban-v0", dim_room=(8, 8), num_boxes=2, max_actions=30,
                   obs_format="grid_coord", render_mode="rgb_array")
    obs, info = env.reset(seed=10000)
    obs, info = env.reset(options={"level": "#####\\n#@$.#\\n#####"})
    ```

    - `dim_room=(6, 6)`: generated room size (H, W), integers >= 3 with one of them >= 5 (a push needs three
      interior cells in a line), outer wall ring included; also the image frame. At most as large as the text
      observation allows (`room_text_bound`: (126, 126) with the default format and one box; the ValueError names
      the largest accepted room).
    - `num_boxes=1`: boxes (= targets) of generated rooms.
    - `max_actions=10`: action budget per episode (truncation); None for no budget.
    - `obs_format="grid_coord"`: `"grid"`, `"coord"`, `"grid_coord"`, or `"image"` (the text withheld; needs
      `vision=True`).
    - `min_solution_len=1`, `max_solution_len=None`: bounds on the optimal solution length of
      generated rooms, in steps (None: `max_actions`, or no bound when `max_actions` is None).
      `min_solution_len` is at most `max_actions` (a longer one makes every episode unwinnable: ValueError).
      A length that few rooms reach ends in a RuntimeError naming it after 1000 rooms or 10,000,000 states
      searched in all (about half a minute; `SokobanGenerator`), not after a quarter of an hour.
    - `level_solver_max_states=100_000`: solver budget for `optimal_steps` of loaded levels.
    - `vision=False`: add the image to the observation (`ragen/Sokoban-Vision-v0`); a bool (not "False").
    - `render_mode`: None, `"ansi"` (the text state) or `"rgb_array"` (the picture).
    - the protocol options of `TextAgentEnv`: `action_format`, `max_actions_per_turn`,
      `max_turns`, `format_penalty`.

    ## Differences from gym-sokoban and RAGEN (deliberate)

    - Levels are drawn from `self.np_random` only (gym-sokoban uses the global `random`, RAGEN
      re-seeds with `hash()`), so a seed gives the same level in every process.
    - Generated levels come with their exact optimal length and by default fit the action budget;
      gym-sokoban/RAGEN keep any reverse-played room, solvable within the budget or not.
    - Only the four push-moves (no no-op, no separate move actions); the grid edge counts as wall.
    - A text step never draws pixels (gym-sokoban renders a frame per step, reading sprite files).
    - The legend is always in the instructions (RAGEN shows it only in the grid format).
    - XSB levels of any size can be loaded; the current state is exported with `to_xsb()`.

    ## Version History

    - v0: initial version.
    """

    #: The reset options this env reads (``reset(options=...)``); any other key is refused.
    RESET_OPTIONS: ClassVar[frozenset[str] | None] = frozenset({"level"})

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi", "rgb_array"], "render_fps": 4}
    ACTIONS: ClassVar[tuple[str, ...]] = ACTION_NAMES
    ROLE: ClassVar[str] = "You are a Sokoban solver: plan your moves carefully, pushes cannot be undone."
    #: Reward of one executed action that changes nothing else (read by the trainer's format-penalty check).
    STEP_REWARD: ClassVar[float] = STEP_PENALTY

    def __init__(
        self,
        dim_room: tuple[int, int] = (6, 6),
        num_boxes: int = 1,
        max_actions: int | None = 10,
        obs_format: str = "grid_coord",
        min_solution_len: int = 1,
        max_solution_len: int | None = None,
        level_solver_max_states: int = 100_000,
        vision: bool = False,
        render_mode: str | None = None,
        **protocol_kwargs: Any,
    ):
        if not (isinstance(obs_format, str) and obs_format in OBS_FORMATS):
            raise ValueError(f"obs_format must be one of {OBS_FORMATS}, got {obs_format!r}")
        vision = require_bool("vision", vision)  # before the base's own check: the image format reads it first
        if obs_format == "image" and not vision:
            raise ValueError('obs_format="image" withholds the text, so it needs the image: use vision=True '
                             "(ragen/Sokoban-Vision-v0)")
        if not isinstance(dim_room, (tuple, list)) or len(dim_room) != 2:
            raise ValueError(f"dim_room must be a pair (H, W) of integers >= 3, got {dim_room!r}")
        # Validated before any use: int(6.9) would quietly make a 6-row room and int(None) a TypeError.
        dim_room = (require_int("dim_room[0]", dim_room[0], 3), require_int("dim_room[1]", dim_room[1], 3))
        num_boxes = require_int("num_boxes", num_boxes, 1)
        min_solution_len = require_int("min_solution_len", min_solution_len, 1)
        check_room_pushable(dim_room)
        check_room_fits(dim_room, num_boxes, obs_format)
        level_solver_max_states = require_int("level_solver_max_states", level_solver_max_states, 0)
        # The generator validates the length bounds; it needs max_actions, which the base class
        # validates, hence the order. dim_room must exist before super() (image space).
        self.dim_room = dim_room
        self.obs_format = obs_format
        self.level_solver_max_states = int(level_solver_max_states)
        super().__init__(max_actions=max_actions, vision=vision, render_mode=render_mode, **protocol_kwargs)
        if max_solution_len is None:
            max_solution_len = None if self.max_actions is None else max(self.max_actions, min_solution_len)
        self.generator = SokobanGenerator(self.dim_room, num_boxes, min_solution_len, max_solution_len)
        self.num_boxes = self.generator.num_boxes
        self._load(self.generator.generate(np.random.default_rng(0)).level)  # a valid state before reset
        # After the first level: a length no room reaches is the generator's error, the more basic one.
        check_winnable(min_solution_len, self.max_actions)
        self._optimal_steps: int | None = None

    # ------------------------------------------------------------------ level state
    def _load(self, level: Level) -> None:
        """Compile `level` into the flat state used by step and the text/picture caches."""
        h, w = level.shape
        board = Board(level.walls)
        region = level.region()
        self._level_walls = level.walls.copy()
        self._board = board
        # Floor the player can never reach is treated (and shown) as wall.
        self._floor = list(board.floor)
        for r in range(h):
            for c in range(w):
                if not region[r, c]:
                    self._floor[board.index((r, c))] = False
        self._targets = frozenset(board.index(t) for t in level.targets)
        self._boxes = board.mask(level.boxes)  # bitmask over the cells, as the solver's states
        self._player = board.index(level.player)
        self._num_boxes = len(level.boxes)
        self._on_target = sum((self._boxes >> t) & 1 for t in self._targets)
        self._dir = dict(zip(ACTION_NAMES, board.dirs))

        # Text caches: the static grid with '\n' separators, padded index -> offset in it, coordinates.
        text_pos = [-1] * board.size
        base: list[str] = []
        for r in range(h):
            for c in range(w):
                i = board.index((r, c))
                text_pos[i] = len(base)
                if not self._floor[i]:
                    base.append(RAGEN_SYMBOLS["wall"])
                elif i in self._targets:
                    base.append(RAGEN_SYMBOLS["target"])
                else:
                    base.append(RAGEN_SYMBOLS["floor"])
            base.append("\n")
        base.pop()
        self._grid_base = base
        self._text_pos = text_pos
        self._coord = {board.index((r, c)): f"({r}, {c})" for r in range(h) for c in range(w)}
        self._header = f"Board size: {h} rows x {w} cols (zero-indexed)."
        self._targets_line = "Targets: " + ", ".join(self._coord[t] for t in sorted(self._targets))

        # Picture caches: frame = dim_room when the level fits, else the level's own size.
        fh, fw = self.dim_room
        frame = (fh, fw) if (h <= fh and w <= fw) else (h, w)
        tiles = np.full(frame, WALL, dtype=np.int8)
        tile_pos = [-1] * board.size
        for r in range(h):
            for c in range(w):
                i = board.index((r, c))
                tile_pos[i] = r * frame[1] + c
                if self._floor[i]:
                    tiles[r, c] = TARGET if i in self._targets else FLOOR
        self._tiles_base = tiles
        self._tile_pos = tile_pos

    def current_level(self) -> Level:
        """The current state as a `Level` (the room as loaded, including floor outside the region)."""
        pos = self._board.position
        return Level(
            walls=self._level_walls.copy(),
            targets=frozenset(pos(t) for t in self._targets),
            boxes=frozenset(pos(b) for b in self._board.cells(self._boxes)),
            player=pos(self._player),
        )

    def to_xsb(self) -> str:
        """The current state in XSB (`reset(options={"level": env.to_xsb()})` restores it)."""
        return self.current_level().to_xsb()

    def oracle(self, max_states: int = DEFAULT_MAX_STATES) -> list[str] | None:
        """A shortest action list solving the current state (`[]` if solved), or None if unsolvable
        (or not solved within `max_states` search states)."""
        return solve(self.current_level(), max_states=max_states)

    # ------------------------------------------------------------------ the warm start's demonstrator
    def oracle_step(self, reasoning: str = "full") -> tuple[str, list[str]]:
        """The first moves of the solver's shortest plan, as many as this turn allows (the first action when it has
        none: solved, or beyond its search limit), with the reasoning of `reasoning`: ``"full"`` sentences naming
        the player, box and target cells and the move (`_move_reasoning`), or the short ``"plan"``
        (`_plan_reasoning`: fewer tokens, and it names the push the plan leads to)."""
        plan = list(self.oracle() or [])
        acts = plan[: self._actions_this_turn()] or [self.ACTIONS[0]]
        if reasoning == "plan":
            return self._plan_reasoning(plan, acts), acts
        return self._move_reasoning(acts), acts

    def random_step(self, rng: np.random.Generator) -> tuple[str, list[str]]:
        """A uniformly random move, with the full reasoning about it."""
        action = self._uniform_action(rng)
        return self._move_reasoning([action]), [action]

    def _move_reasoning(self, actions: Sequence[str]) -> str:
        """Full style: ``I am at (2, 3). Box at (3, 2), target at (3, 1). I move down to (3, 3).`` (the move of
        `actions[0]`: a walk, a push, or a move that a wall or an immovable box blocks, read off the board by the
        env's own move rule; ``Then <dir>.`` for a second action)."""
        player = tuple(int(x) for x in self.player_position)
        boxes_set = {tuple(int(x) for x in b) for b in self.box_positions}
        targets = self.target_positions
        left = sorted(boxes_set - {tuple(int(x) for x in t) for t in targets})
        parts = [f"I am at {coords([player])}.",
                 f"Box at {coords(left or boxes_set)}, target at {coords(targets)}."]
        if actions:
            nxt, word = moved(player, actions[0]), DIRECTION_WORDS[actions[0]]
            blocked = self._blocked_by(actions[0])
            if blocked == "wall":
                parts.append(f"Moving {word} walks into a wall, so I stay at {coords([player])}.")
            elif blocked == "box":
                parts.append(f"Moving {word} cannot push the box at {coords([nxt])}: a wall or a box is behind it.")
            elif nxt in boxes_set:
                parts.append(f"Moving {word} pushes the box to {coords([moved(nxt, actions[0])])}.")
            else:
                parts.append(f"I move {word} to {coords([nxt])}.")
            if len(actions) > 1:
                parts.append(f"Then {DIRECTION_WORDS.get(actions[1], actions[1])}.")
        return " ".join(parts)

    def _plan_reasoning(self, plan: Sequence[str], actions: Sequence[str]) -> str:
        """Short reasoning (``warm_start.reasoning="plan"``): the pieces, the solver's first push, the next move.

        E.g. ``Player (2, 2), box (1, 2), target (1, 4). Push Right from (1, 1). Go Left.`` ("Push now." when the
        next move is that push). Every cell is read off the current state; the push is the first push of the
        solver's shortest plan, so the text is a true (if abridged) account of why the answer is what it is.
        """
        player = tuple(int(x) for x in self.player_position)
        boxes_set = {tuple(int(x) for x in b) for b in self.box_positions}
        targets_set = {tuple(int(x) for x in t) for t in self.target_positions}
        left = sorted(boxes_set - targets_set) or sorted(boxes_set)
        free = sorted(targets_set - boxes_set) or sorted(targets_set)
        s = (f"Player {coords([player])}, box{'es' if len(left) > 1 else ''} {coords(left)}, "
             f"target{'s' if len(free) > 1 else ''} {coords(free)}.")
        push = _first_push(player, boxes_set, plan)
        if push is not None:
            s += f" Push {push[0]} from {coords([push[1]])}."
        if actions:
            if self._blocked_by(actions[0]) is not None:
                s += f" {actions[0]} is blocked."
            elif moved(player, actions[0]) in boxes_set:
                s += " Push now."
            else:
                s += f" Go {actions[0]}."
        return s

    def _blocked_by(self, action: str) -> str | None:
        """What stops `action` from the current state under the move rule (`push_move`): ``"wall"`` (a wall, or
        the grid edge, in the way), ``"box"`` (a box that cannot move: a wall or a box behind it), None (it moves)."""
        d = self._dir[action]
        if push_move(self._floor, self._floor, self._player, self._boxes, d) is not None:
            return None
        return "wall" if not self._floor[self._player + d] else "box"

    @property
    def player_position(self) -> tuple[int, int]:
        """(row, col) of the player."""
        return self._board.position(self._player)

    @property
    def box_positions(self) -> list[tuple[int, int]]:
        """(row, col) of every box, row-major."""
        return [self._board.position(b) for b in self._board.cells(self._boxes)]

    @property
    def target_positions(self) -> list[tuple[int, int]]:
        """(row, col) of every target, row-major."""
        return [self._board.position(t) for t in sorted(self._targets)]

    # ------------------------------------------------------------------ TextAgentEnv hooks
    def _reset_task(self, options: dict[str, Any]) -> dict[str, Any]:
        level = options.get("level")
        if level is None:
            item = self.generator.generate(self.np_random)
            self._load(item.level)
            self._optimal_steps = item.optimal_steps
            return {"optimal_steps": item.optimal_steps}
        if isinstance(level, str):
            level = parse_xsb(level)
        elif isinstance(level, Level):
            # A Level is held to the rules XSB text is (parse_xsb validates): one built by hand could have more
            # targets than boxes (solved with a target still empty), a piece off the grid or on a wall.
            validate(level)
        else:
            raise ValueError(f'options["level"] must be XSB text or a Level, got {type(level).__name__}')
        if level.is_solved:
            raise ValueError("the level is already solved (every box is on a target); give an unsolved level")
        h, w = level.shape
        if self.vision and (h > self.dim_room[0] or w > self.dim_room[1]):
            raise ValueError(
                f"a {h}x{w} level does not fit the {self.dim_room[0]}x{self.dim_room[1]} image frame of this "
                "vision env; make it with dim_room at least the level size"
            )
        previous = self.current_level()
        self._load(level)
        if len(self._state_text()) + len(INVALID_NOTICE) + 1 > MAX_OBSERVATION_CHARS:
            # A refused level leaves the env as it was: the episode before it plays on, not the refused room.
            self._load(previous)
            raise ValueError(
                f"a {h}x{w} level gives a text observation over {MAX_OBSERVATION_CHARS} characters"
            )
        solution = (
            solve(level, max_states=self.level_solver_max_states) if self.level_solver_max_states else None
        )
        self._optimal_steps = None if solution is None else len(solution)
        return {"optimal_steps": self._optimal_steps}

    def _execute(self, action: str) -> tuple[float, bool]:
        d = self._dir[action]
        reward = STEP_PENALTY
        moved = push_move(self._floor, self._floor, self._player, self._boxes, d)
        if moved is None:
            return reward, False  # a wall, or a box that cannot move: the step still costs
        q, boxes = moved
        if boxes != self._boxes:  # pushed the box from q to q + d
            delta = (q + d in self._targets) - (q in self._targets)
            if delta > 0:
                reward += BOX_ON_TARGET_REWARD
            elif delta < 0:
                reward += BOX_OFF_TARGET_PENALTY
            self._on_target += delta
        self._player, self._boxes = q, boxes
        if self._on_target == self._num_boxes:
            return reward + SOLVED_REWARD, True
        return reward, False

    def _is_success(self) -> bool:
        return self._on_target == self._num_boxes

    def _grid_text(self) -> str:
        chars = self._grid_base.copy()
        pos, targets = self._text_pos, self._targets
        for b in self._board.cells(self._boxes):
            chars[pos[b]] = "√" if b in targets else "X"
        chars[pos[self._player]] = "S" if self._player in targets else "P"
        return "".join(chars)

    def _state_text(self) -> str:
        fmt = self.obs_format
        if fmt == "image":
            return IMAGE_ONLY_TEXT
        if fmt == "grid":
            return self._grid_text()
        coord = self._coord
        lines = [
            self._header,
            self._targets_line,
            "Boxes: " + ", ".join(coord[b] for b in self._board.cells(self._boxes)),
            "Player: " + coord[self._player],
        ]
        if fmt == "grid_coord":
            lines.append("Grid Map:")
            lines.append(self._grid_text())
        return "\n".join(lines)

    def _task_instructions(self) -> str:
        return "\n".join(
            [
                "You are playing Sokoban. You are the player (P); push every box (X) onto a target (O).",
                "Moving into a box pushes it one cell in the same direction if the cell behind it is empty floor "
                "or a target. You cannot pull a box, push two boxes at once, or walk through walls; a blocked "
                "move leaves you in place but still counts as an action.",
                f"Symbols: {RAGEN_LEGEND}.",
                "Positions are (row, col), zero-indexed from the top-left corner: Up decreases the row, "
                "Down increases it, Left decreases the column, Right increases it.",
                "Rewards: -0.1 per action, +1 for pushing a box onto a target, -1 for pushing one off, "
                "+10 when every box is on a target.",
            ]
        )

    def _image_space(self) -> spaces.Box:
        h, w = self.dim_room
        return spaces.Box(low=0, high=255, shape=(TILE * h, TILE * w, 3), dtype=np.uint8)

    def _render_rgb(self) -> np.ndarray:
        tiles = self._tiles_base.copy()
        flat, pos, targets = tiles.reshape(-1), self._tile_pos, self._targets
        for b in self._board.cells(self._boxes):
            flat[pos[b]] = BOX_ON_TARGET if b in targets else BOX
        flat[pos[self._player]] = PLAYER_ON_TARGET if self._player in targets else PLAYER
        return render_tiles(tiles)


def _first_push(
    player: tuple[int, int], boxes: set[tuple[int, int]], plan: Sequence[str]
) -> tuple[str, tuple[int, int]] | None:
    """(direction, cell the player pushes from) of the first push of `plan`, or None if it has no push."""
    for a in plan:
        nxt = moved(player, a)
        if nxt in boxes:
            return a, player
        player = nxt
    return None
