"""The 2x2x2 pocket cube as a multi-turn text (or text + image) task; see `PocketCubeEnv`."""

from __future__ import annotations

import os
from functools import cache
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces

from ragen_envs import protocol
from ragen_envs.base import TextAgentEnv
from ragen_envs.pocketcube import cube as C
from ragen_envs.pocketcube.table import GODS_NUMBER, KNOWN_HISTOGRAM, distance_table
from ragen_envs.validation import require_int_range

#: Text layouts (`obs_format`): the unfolded net, or one line per face.
OBS_FORMATS: tuple[str, ...] = ("net", "faces")
#: Net cells: (face, row of faces, column of faces) in the cross layout (Up over Front, Down under it).
NET_CELLS: tuple[tuple[str, int, int], ...] = (
    ("U", 0, 1), ("L", 1, 0), ("F", 1, 1), ("R", 1, 2), ("B", 1, 3), ("D", 2, 1),
)
#: Faces in the order of the "faces" format (RAGEN's listing order).
FACES_FORMAT_ORDER = "ULFRBD"
LEGEND = "W white, Y yellow, G green, B blue, R red, O orange"
STICKER_PX = 16
#: RGB of the colour ids (white, red, green, yellow, orange, blue), then the background and the sticker borders.
PALETTE = np.array(
    [(255, 255, 255), (200, 24, 40), (0, 155, 72), (255, 213, 0), (255, 110, 0), (0, 70, 173), (48, 48, 48), (0, 0, 0)],
    np.uint8,
)
_BACKGROUND, _BORDER = 24, 25  # pixel codes beyond the 24 stickers
_COL_WIDTH = 6  # characters per face column of the text net ("Front " is the widest label)
# Random-state levels: when the accepted distances hold fewer than this fraction of all states, draw from a list
# of them (at most 5% of 3.7M indices) instead of redrawing uniform states until one fits.
_POOL_FRACTION = 0.05


def _sticker(face: str, row: int, col: int) -> int:
    return C.FACES.index(face) * 4 + row * 2 + col


def _check_cache_dir(cache_dir: object) -> str | os.PathLike | None:
    """`cache_dir` if it is None or a non-empty path (str or os.PathLike) that is not an existing file, else
    ValueError naming it. A missing folder is fine: the table's first use creates it, parents included, like any
    cache root (`ragen_envs.pocketcube.table`); an existing file could never hold the cache."""
    if cache_dir is None:
        return None
    if not isinstance(cache_dir, (str, os.PathLike)) or not os.fspath(cache_dir):
        raise ValueError(f"cache_dir must be None or a folder path (str or os.PathLike), got {cache_dir!r}")
    if os.path.exists(cache_dir) and not os.path.isdir(cache_dir):
        raise ValueError(f"cache_dir must be a folder (created on first use if missing), but {cache_dir!r} is a file")
    return cache_dir


@cache
def _pixel_codes() -> np.ndarray:
    """[6 * 16, 8 * 16] int: the sticker index shown at each pixel of the net image, or background/border."""
    codes = np.full((6 * STICKER_PX, 8 * STICKER_PX), _BACKGROUND, np.int64)
    for face, fr, fc in NET_CELLS:
        for row in range(2):
            for col in range(2):
                y, x = (2 * fr + row) * STICKER_PX, (2 * fc + col) * STICKER_PX
                codes[y : y + STICKER_PX, x : x + STICKER_PX] = _BORDER
                codes[y + 1 : y + STICKER_PX - 1, x + 1 : x + STICKER_PX - 1] = _sticker(face, row, col)
    codes.setflags(write=False)
    return codes


@cache
def _net_template() -> tuple[str, np.ndarray]:
    """(format string with one {} per sticker, the sticker index of each {} in order) of `net_text`."""
    order: list[int] = []

    def row(face: str, r: int) -> str:
        order.extend((_sticker(face, r, 0), _sticker(face, r, 1)))
        return "{} {}"

    pad = " " * _COL_WIDTH
    lines = [pad + "Up", pad + row("U", 0), pad + row("U", 1)]
    lines.append("".join(f"{C.FACE_WORDS[f]:<{_COL_WIDTH}}" for f in "LFRB").rstrip())
    for r in range(2):  # "{} {}" stands for 3 characters ("W W"): pad each face to the column width
        lines.append("".join(row(f, r) + " " * (_COL_WIDTH - 3) for f in "LFRB").rstrip())
    lines += [pad + "Down", pad + row("D", 0), pad + row("D", 1)]
    return "\n".join(lines), np.array(order)


_LETTERS = np.array(list(C.COLOR_LETTERS))


def net_text(state: np.ndarray) -> str:
    """The net of a state: face labels above each face, two rows of colour letters per face (see the env)."""
    template, order = _net_template()
    return template.format(*_LETTERS[np.asarray(state)[order]].tolist())


def faces_text(state: np.ndarray) -> str:
    """One line per face, `Up: W W / W W` (top row / bottom row as drawn in the net)."""
    out = []
    for face in FACES_FORMAT_ORDER:
        s = [C.COLOR_LETTERS[int(state[_sticker(face, r, c)])] for r in range(2) for c in range(2)]
        out.append(f"{C.FACE_WORDS[face]}: {s[0]} {s[1]} / {s[2]} {s[3]}")
    return "\n".join(out)


def parse_scramble(moves: str | list[str] | tuple[str, ...]) -> list[str]:
    """Canonical move names of a scramble given as "R U2 F'" or a list (or tuple) of moves; ValueError naming a
    bad move, or the accepted form when `moves` is neither (`5` is no scramble, and `list(5)` a TypeError)."""
    if not isinstance(moves, (str, list, tuple)):
        raise ValueError(f"scramble must be a string of moves (\"R U2 F'\") or a list of them, got {moves!r}")
    pieces = moves.split() if isinstance(moves, str) else list(moves)
    out = []
    for piece in pieces:
        name = _MATCH(piece) if isinstance(piece, str) else None
        if name is None:
            raise ValueError(f"unknown move {piece!r} in the scramble; moves are {', '.join(C.MOVE_NAMES)}")
        out.append(name)
    return out


#: The characters read as the prime of X' (counter-clockwise): the ASCII apostrophe and the two that text tools
#: put in its place, the typographic apostrophe U+2019 (autocorrect) and the prime sign U+2032 (math notation).
#: No other character is a prime (the modifier letters U+02B9 / U+02BC, the acute accent, backtick, double prime).
PRIME_MARKS: tuple[str, ...] = ("'", "\u2019", "\u2032")


def _notation_aliases() -> dict[str, str]:
    """Every accepted spelling other than the canonical names, built from one rule per face X and prime mark p:
    `Xp` is X'; `X2p` and `Xp2` are X2 (a half turn is the same either way round, so a prime on it, which cubers
    write to show the turning direction, changes nothing). Exactly one mark and at most one 2, nothing else."""
    aliases: dict[str, str] = {}
    for face in C.FACES:
        for mark in PRIME_MARKS:
            if mark != "'":
                aliases[face + mark] = face + "'"
            aliases[face + "2" + mark] = face + "2"
            aliases[face + mark + "2"] = face + "2"
    return aliases


#: Extra spellings (`_notation_aliases`): any prime mark for ', and X2 with one prime mark before or after the 2.
ACTION_ALIASES: dict[str, str] = _notation_aliases()
_MATCH = protocol.vocabulary_matcher(C.MOVE_NAMES, ACTION_ALIASES)


class PocketCubeEnv(TextAgentEnv):
    """Solve a scrambled 2x2x2 Rubik's cube (the pocket cube) with face turns written in standard notation.

    ## Description
    The cube has 8 corner cubies and no centres. Each episode scrambles it with `scramble_depth` random face
    turns from `self.np_random` (U, R and F turns, no two in a row on the same face: the WCA's 2x2 scramble
    moves, so the Down-Back-Left corner stays where it is), or, with `scramble_depth=None`, draws a uniformly
    random state (the WCA's random-state scramble). A level is redrawn until its exact optimal distance lies
    in `distance` (default 1-11: never the solved cube). The agent turns faces until every face shows one
    colour. The exact optimal distance of every state (fewest turns, a half turn counting one) comes from a
    table of all 3,674,160 states built once by breadth-first search and cached on disk
    (`ragen_envs.pocketcube.table`): it is reported in `info["distance"]` at reset and after every turn, and
    the oracle follows it.

    Where we differ from RAGEN's 2x2 cube env (`RubiksCube2x2Env`): the 18 face turns of the half-turn
    metric (RAGEN: the 12 quarter turns U, U', D, D', L, L', R, R', F, F', B, B' as numbered actions);
    scrambles without consecutive turns of one face and levels conditioned on their exact distance (RAGEN's
    uniform random turns may cancel, so its "depth 5" levels include easier ones and even the solved cube);
    the exact optimal distance and an optimal oracle; draws only from `self.np_random` (RAGEN seeds global
    state); the net as text (RAGEN lists the faces; `obs_format="faces"` gives that listing); the protocol's
    format penalty; a budget of 20 actions (RAGEN's 20 steps) spent in turns of up to `max_actions_per_turn`
    actions. Success is RAGEN's: every face one colour, in any orientation of the whole cube.
    Where we differ from Gymnasium: no pocket cube there; the action is text.

    ## Action Space
    `Text(max_length=16384)`: the model's raw response. Canonical actions, one face turn each:
    U, U', U2, R, R', R2, F, F', F2, D, D', D2, L, L', L2, B, B', B2. `X` turns face X (Up, Right,
    Front, Down, Left, Back) a quarter turn clockwise as seen looking at that face, `X'` counter-clockwise,
    `X2` a half turn. Matched ASCII-case-insensitively (the protocol's rule: `r` is read as R; the
    speedcubing meaning of lower-case letters, wide turns, is a whole-cube rotation on a 2x2 and is not an
    action). A prime is any of `'`, `’` (U+2019, typographic apostrophe) and `′` (U+2032, prime sign):
    `U’` and `U′` are U'. A half turn may carry one prime mark before or after the 2 (`U2'`, `U'2`, `U2’`,
    `U′2`, ...): it is U2, the same turn either way round. No other character is a prime (`ʹ`, `ʼ`, `´`, `` ` ``,
    `″` are not), and two marks (`U''`, `U2''`) are not a turn.
    Whole-cube rotations (x, y, z), slice and wide turns are not actions.

    ## Action format
    `<think> ... </think> <answer> R || U' </answer>`: up to `max_actions_per_turn` (2) turns per response,
    separated by `||` (`ragen_envs.protocol`). `R U'` in one piece is not an action (a dropped piece: format
    penalty, nothing turns).

    ## Observation Space
    `Text(max_length=16384, min_length=1)`; with `vision=True`,
    `Dict({"text": Text, "image": Box(0, 255, (96, 128, 3), uint8)})`: the net drawn with 16 px stickers
    (6 sticker rows x 8 sticker columns, the same layout as the text, a dark background around the cross).

    ## Text format
    `obs_format="net"` (default): the unfolded cube, a face label above each face and its 2x2 colour letters
    (W white, Y yellow, G green, B blue, R red, O orange). The Up face is drawn above Front, with its top row
    next to Back; Left, Front, Right, Back go round the cube (each with its top row next to Up: Back's left
    column touches Right); Down is below Front, its top row next to Front. The solved cube in the starting
    orientation:

              Up
              W W
              W W
        Left  Front Right Back
        O O   G G   R R   B B
        O O   G G   R R   B B
              Down
              Y Y
              Y Y

    `obs_format="faces"`: one line per face in the order Up, Left, Front, Right, Back, Down, e.g.
    `Front: G G / G G` (top row / bottom row, each face seen as in the net). After a turn without a valid
    action the text starts with a notice that the state is unchanged.

    ## Starting State
    A scrambled cube, never solved, with the Down-Back-Left corner (yellow, blue, orange) in place when the
    scramble turns only U, R, F (always: move scrambles and random-state scrambles alike).
    `reset(options={"scramble": "R U2 F'"})` plays the given scramble instead (any of the 18 moves, a string
    or a list; ValueError naming a bad move, or a scramble that leaves the cube solved, such as "R R'").

    ## Rewards
    1 on the turn that solves the cube, 0 otherwise, plus the format penalty (-0.1) for a malformed answer
    or any dropped action.

    ## Episode End
    - Termination: the cube is solved (every face one colour, in any orientation).
    - Truncation: the action budget `max_actions` (20) is spent, or `max_turns` is reached.

    ## Information
    The base keys (`action_is_valid`, `actions_executed`, `success`, `format_penalty`, `format_error`,
    `dropped_actions`, `actions_left`, `turn`; `instructions` at reset), plus `distance` (the exact optimal
    number of turns left), at reset `scramble` (move names that produce the level from the solved cube;
    for a random-state level the inverse of an optimal solution) and `scramble_depth` (its length), and in
    `step` `action_is_effective` (the cube differs from before the turn; `U || U'` is not effective).

    Oracle: `optimal_solution()` is a shortest solution from the current state (it follows the table: each
    move goes one closer; ties go to the first move in the action order, so it uses U, R and F only);
    `oracle_step()` returns `(reasoning, moves for this turn)` for demonstrations (`ragen_core.training.sft`);
    `distance` is the current exact distance.

    ## Arguments
    ```python
    import gymnasium as gym
    import ragen_envs

    env = gym.make("ragen/PocketCube-v0", scramble_depth=5, max_actions=20)
    env = gym.make("ragen/PocketCube-v0", scramble_depth=None, distance=(8, 11))  # hard random states
    env = gym.make("ragen/PocketCube-Vision-v0")  # vision=True
    ```
    * `scramble_depth=5`: turns per scramble, an int or an inclusive (low, high) range drawn per level
      (RAGEN's default 5); None: a uniformly random state.
    * `distance=(1, 11)`: accepted exact optimal distances, an int or an inclusive range within 1..11 (0, the
      solved cube, is no level: it would pay the solve reward for a turn and back); levels outside are
      redrawn (at most 10,000 draws, then RuntimeError: ask for reachable distances, e.g. use
      `scramble_depth=None` for distance 11).
    * `max_actions=20`: face turns per episode (None: unlimited).
    * `obs_format="net"`: `"net"` or `"faces"` (see Text format).
    * `cache_dir=None`: root of the table cache (default `$RAGEN2_CACHE` or `~/.cache/ragen2`), a str or
      os.PathLike folder. Like the default root it is created (parents included) when the table is first needed
      (the first reset), so a mistyped path makes a new folder rather than an error; a file there is refused.
    * `vision=False`, `render_mode=None` ("ansi" or "rgb_array"), and the protocol options of
      `TextAgentEnv`: `action_format`, `max_actions_per_turn`, `max_turns`, `format_penalty`.

    ## Version History
    * v0: initial version.
    """

    #: The reset options this env reads (``reset(options=...)``); any other key is refused.
    RESET_OPTIONS: ClassVar[frozenset[str] | None] = frozenset({"scramble"})

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi", "rgb_array"], "render_fps": 4}
    ACTIONS: ClassVar[tuple[str, ...]] = C.MOVE_NAMES
    ACTION_ALIASES: ClassVar[dict[str, str]] = ACTION_ALIASES
    ROLE: ClassVar[str] = "You are solving a 2x2x2 Rubik's cube (pocket cube)."
    #: Redraws of a level whose distance is outside `distance` before giving up.
    MAX_DRAWS: ClassVar[int] = 10_000

    def __init__(
        self,
        scramble_depth: int | tuple[int, int] | None = 5,
        distance: int | tuple[int, int] = (1, GODS_NUMBER),
        max_actions: int | None = 20,
        *,
        obs_format: str = "net",
        cache_dir: str | os.PathLike | None = None,
        vision: bool = False,
        render_mode: str | None = None,
        action_format: protocol.ActionFormat = "tagged",
        max_actions_per_turn: int = 2,
        max_turns: int | None = None,
        format_penalty: float = protocol.FORMAT_PENALTY,
    ):
        self.scramble_range = None if scramble_depth is None else require_int_range(
            "scramble_depth", scramble_depth, 0, 1000
        )
        # From 1: a level at distance 0 is the solved cube, which would pay the solve reward for any turn and back.
        self.distance_range = require_int_range("distance", distance, 1, GODS_NUMBER)
        if self.scramble_range is not None and self.distance_range[0] > self.scramble_range[1]:
            raise ValueError(
                f"distance {self.distance_range} cannot be reached by scrambles of at most {self.scramble_range[1]} "
                "turns (a scramble of k turns is at most k from solved)"
            )
        if obs_format not in OBS_FORMATS:
            raise ValueError(f"obs_format must be one of {OBS_FORMATS}, got {obs_format!r}")
        self.obs_format = obs_format
        self.cache_dir = _check_cache_dir(cache_dir)
        super().__init__(
            action_format=action_format,
            max_actions_per_turn=max_actions_per_turn,
            max_actions=max_actions,
            max_turns=max_turns,
            format_penalty=format_penalty,
            render_mode=render_mode,
            vision=vision,
        )
        self.state = C.SOLVED.copy()
        self.scramble: list[str] = []
        self._distance: int | None = 0
        self._dist_table: np.ndarray | None = None
        self._before: np.ndarray | None = None
        self._random_state_pool: np.ndarray | None = None

    # ------------------------------------------------------------------ table and oracle
    def _table(self) -> np.ndarray:
        if self._dist_table is None:  # loaded on first use (gym.make stays cheap), then kept
            self._dist_table = distance_table(self.cache_dir)
        return self._dist_table

    def _distances_of(self, states: np.ndarray) -> np.ndarray:
        if states.ndim == 1:
            return np.array([self._table()[C.encode_one(states)]], np.int64)
        return self._table()[C.encode(states)].astype(np.int64)

    @property
    def distance(self) -> int:
        """The exact optimal number of face turns that solve the current state (0 when solved)."""
        if self._distance is None:  # a turn invalidates it; looked up once per observation, not per action
            self._distance = int(self._distances_of(self.state)[0])
        return self._distance

    def optimal_solution(self) -> list[str]:
        """A shortest solution from the current state: each move goes one closer in the table (first such move
        in the action order, hence only U, R, F turns). Its length is `distance`."""
        table, state, d, out = self._table(), self.state, self.distance, []
        while d > 0:
            # A move one closer exists (the table is exact: check_distances); the first is among U, R, F, which
            # alone reach every state, so the loop tries at most 9 moves.
            for name, gather in zip(C.MOVE_NAMES, C.MOVE_GATHERS):
                after = state[gather]
                if table[C.encode_one(after)] == d - 1:
                    out.append(name)
                    break
            state, d = after, d - 1
        return out

    def explain_refusal(self, piece: str) -> str:
        """Why `piece` is no face turn: the first thing in it that breaks the notation (a turn is a face letter U,
        R, F, D, L or B, then nothing, one prime mark (' ’ ′), a 2, or a 2 with one prime mark)."""
        text = piece.strip()
        if not text:
            return "an empty piece (two || in a row, or || at an end)"
        if len(text.split()) > 1:
            return "several turns in one piece: separate turns with ||"
        if text[0].upper() not in C.FACES:
            return f"{text[0]!r} is not a face: a turn starts with U, R, F, D, L or B"
        rest = text[1:]
        marks = [c for c in rest if c in PRIME_MARKS]
        others = [c for c in rest if c not in PRIME_MARKS and c != "2"]
        if others:
            c = others[0]
            if c in "\u02b9\u02bc\u00b4`\u2033\"":
                return f"{c!r} is not a prime mark: write ' (or \u2019, \u2032)"
            return f"{c!r} after the face is not part of a turn: write X, X', X2 or X2'"
        if len(marks) > 1:
            return "more than one prime mark: X' is written with one"
        if rest.count("2") > 1:
            return "more than one 2: a half turn is X2"
        return f"not one of the 18 face turns ({', '.join(C.MOVE_NAMES)})"

    def oracle(self) -> list[str]:
        """The oracle's moves: `optimal_solution()` (`[]` when solved)."""
        return self.optimal_solution()

    def oracle_step(self, reasoning: str = "full") -> tuple[str, list[str]]:
        """(reasoning, the oracle's moves for this turn): the first moves of `optimal_solution()`, as many as a
        turn and the budget allow. The reasoning names the distance and the whole shortest solution."""
        plan = self.optimal_solution()
        if not plan:
            return "The cube is already solved.", [C.MOVE_NAMES[0]]
        acts = plan[: self._actions_this_turn()]
        text = (
            f"The cube is {len(plan)} turn{'s' if len(plan) != 1 else ''} from solved. "
            f"A shortest solution is {' '.join(plan)}, so I turn {' '.join(acts)}."
        )
        return text, acts

    # ------------------------------------------------------------------ episode
    def _draw_level(self) -> tuple[np.ndarray, list[str]]:
        rng = self.np_random
        if self.scramble_range is None:
            lo, hi = self.distance_range
            if sum(KNOWN_HISTOGRAM[lo : hi + 1]) >= _POOL_FRACTION * C.N_STATES:
                index = int(rng.integers(C.N_STATES))  # uniform; _reset_task redraws the few outside the range
            else:  # a rare distance: draw uniformly among the (few) states that have it
                if self._random_state_pool is None:
                    table = self._table()
                    self._random_state_pool = np.flatnonzero((table >= lo) & (table <= hi))
                index = int(self._random_state_pool[int(rng.integers(len(self._random_state_pool)))])
            state = C.decode(index)[0]
            self.state, self._distance = state, int(self._table()[index])
            moves = [C.inverse_move(m) for m in reversed(self.optimal_solution())]
            return state, moves
        lo, hi = self.scramble_range
        depth = int(rng.integers(lo, hi + 1))
        moves: list[str] = []
        last = -1
        for _ in range(depth):
            face = int(rng.integers(2))
            face = face + (face >= last) if last >= 0 else int(rng.integers(3))  # not the last turn's face
            moves.append(C.URF_MOVES[3 * face + int(rng.integers(3))])
            last = face
        return C.apply_moves(C.SOLVED, moves), moves

    def _reset_task(self, options: dict[str, Any]) -> dict[str, Any]:
        if options.get("scramble") is not None:
            moves = parse_scramble(options["scramble"])
            state = C.apply_moves(C.SOLVED, moves).astype(np.uint8)
            if C.is_solved(state)[0]:  # "R R'", "U U U U", "": no level
                raise ValueError(
                    f"options['scramble'] {' '.join(moves)!r} leaves the cube solved; give a scramble that does not "
                    "(a solved start would pay the solve reward for turning a face and back)"
                )
            self.state, self._distance = state, None
        else:
            lo, hi = self.distance_range
            for _ in range(self.MAX_DRAWS):
                state, moves = self._draw_level()
                d = int(self._distances_of(state)[0])
                if lo <= d <= hi:
                    self.state, self._distance = np.array(state, np.uint8), d
                    break
            else:
                raise RuntimeError(
                    f"no level at distance {self.distance_range} in {self.MAX_DRAWS} scrambles of "
                    f"{self.scramble_range} turns; use scramble_depth=None for far states"
                )
        self.scramble = list(moves)
        return {"distance": self.distance, "scramble": list(moves), "scramble_depth": len(moves)}

    def _begin_step(self) -> None:
        self._before = self.state

    def _execute(self, action: str) -> tuple[float, bool]:
        self.state = self.state[C.MOVE_GATHERS[C.MOVE_INDEX[action]]]
        self._distance = None
        solved = self._is_success()
        return (1.0 if solved else 0.0), solved

    def _step_info(self, info: dict[str, Any]) -> dict[str, Any]:
        changed = self._before is not None and not np.array_equal(self._before, self.state)
        return {"distance": self.distance, "action_is_effective": bool(changed)}

    def _is_success(self) -> bool:
        faces = self.state.reshape(6, 4)
        return bool((faces == faces[:, :1]).all())  # C.is_solved for one state, without the batch reshaping

    # ------------------------------------------------------------------ text and pixels
    def _answer_example(self) -> str:
        return f" {protocol.ACTION_SEPARATOR} ".join(("R", "U'")[: min(2, self.max_actions_per_turn)])

    def _state_text(self) -> str:
        return net_text(self.state) if self.obs_format == "net" else faces_text(self.state)

    def _task_instructions(self) -> str:
        layout = (
            "The cube is shown as an unfolded net: Up above Front, then Left, Front, Right, Back around the "
            "cube, Down below Front. Each face is 2x2 colour letters as you see it from outside; Up's top row "
            "is next to Back, Down's top row next to Front, and the side faces have their top row next to Up."
            if self.obs_format == "net"
            else "The cube is listed face by face (top row / bottom row), each face as you see it from outside "
            "with Up at its top (Up: Back at its top; Down: Front at its top)."
        )
        return (
            "Turn the faces of the scrambled 2x2x2 cube until every face shows a single colour (any orientation "
            "of the whole cube counts as solved; solving it gives reward 1).\n"
            f"{layout}\nColours: {LEGEND}.\n"
            "Moves: U (Up), D (Down), R (Right), L (Left), F (Front), B (Back). A letter alone turns that face "
            "a quarter turn clockwise as seen looking straight at that face; with ' (e.g. R') counter-clockwise; "
            "with 2 (e.g. F2) a half turn. Each counts as one action."
            + self._scramble_note()
        )

    def _scramble_note(self) -> str:
        """The hint that the Down-Back-Left corner starts in place, only when this episode's scramble keeps it there:
        drawn levels use U, R, F alone, but `options["scramble"]` may turn D, L or B, which moves that corner."""
        if any(m[0] not in "URF" for m in self.scramble):
            return ""
        return "\nScrambles use only U, R and F, so the Down-Back-Left corner (yellow, blue, orange) starts in place."

    def _image_space(self) -> spaces.Box:
        return spaces.Box(0, 255, (6 * STICKER_PX, 8 * STICKER_PX, 3), np.uint8)

    def _render_rgb(self) -> np.ndarray:
        """The net as uint8 (96, 128, 3): one palette gather (sticker colours, then background and border)."""
        colors = np.concatenate([self.state.astype(np.int64), [6, 7]])
        return PALETTE[colors[_pixel_codes()]]


__all__ = ["KNOWN_HISTOGRAM", "OBS_FORMATS", "PocketCubeEnv", "faces_text", "net_text", "parse_scramble"]
