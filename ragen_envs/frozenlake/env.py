"""FrozenLake as a multi-turn text (or text + image) task; see `FrozenLakeEnv`."""

from __future__ import annotations

from functools import cache
from itertools import accumulate
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces

from ragen_envs import protocol
from ragen_envs.base import INVALID_NOTICE, TextAgentEnv
from ragen_envs.frozenlake.maps import check_random_map_args, generate_random_map, validate_desc
from ragen_envs.grid import DIRECTION_WORDS, coords, coords_chars, grid_chars, largest_fitting, moved
from ragen_envs.spaces import MAX_OBSERVATION_CHARS
from ragen_envs.validation import require_bool, require_float

LEFT, DOWN, RIGHT, UP = 0, 1, 2, 3
ACTION_NAMES: tuple[str, ...] = ("Left", "Down", "Right", "Up")

#: One transition: (probability, next_state, reward, terminated), as in Gymnasium's `P[s][a]`.
Transition = tuple[float, int, float, bool]
TransitionTable = dict[int, dict[int, list[Transition]]]

TILE_PX = 16
#: Text observation layouts (`obs_format`), as Sokoban's: the grid, the cells as coordinates, or both.
OBS_FORMATS: tuple[str, ...] = ("grid", "coord", "grid_coord")
# Tile ids shared by the text and the picture: the map's own tile, +3 when the player stands on it.
_FROZEN, _HOLE, _GOAL = 0, 1, 2
_PLAYER_OFFSET = 3
#: RAGEN's text symbols, indexed by tile id: frozen, hole, goal, player, player in hole, player on goal.
TEXT_SYMBOLS: tuple[str, ...] = ("_", "O", "G", "P", "X", "√")
LEGEND = "P player, _ frozen ice, O hole, G goal, X player in a hole, √ player on the goal"

# Value iteration stops when no state's value moves by more than this (probabilities).
_VALUE_TOL = 1e-13
_MAX_SWEEPS = 1_000_000
# Actions whose success probabilities differ by less than this are ties for the oracle.
_TIE_TOL = 1e-9
# Discount of the tie-break value: among equally likely actions the oracle prefers reaching the
# goal sooner, which stops it from idling against a wall when the budget allows it.
_TIE_BREAK_DISCOUNT = 0.9
#: Largest map (in cells) whose oracle uses the dense (nS, 4, nS) matrix (2 MB at 256); larger ones are sparse.
_DENSE_MAX_STATES = 256


def build_transition_table(
    desc: list[str], is_slippery: bool = True, success_rate: float = 1.0 / 3.0
) -> TransitionTable:
    """Gymnasium's FrozenLake transition table for a map, `P[s][a] -> [(prob, s', reward, terminated)]`.

    States are `s = row * ncol + col`; actions 0 Left, 1 Down, 2 Right, 3 Up. From a hole or a goal
    every action is the absorbing `(1.0, s, 0, True)`. Otherwise, when slippery, the entries are for
    the moves `(a - 1) % 4, a, (a + 1) % 4` (the two perpendicular moves and the intended one) with
    probabilities `(1 - success_rate) / 2, success_rate, (1 - success_rate) / 2`, in that order and
    unmerged (a state may appear twice, e.g. against a wall), exactly as Gymnasium builds it;
    when not slippery, the single entry `(1.0, ...)` of the intended move. A move into the edge
    stays in place. Reward 1 on entering a goal tile, else 0; `terminated` on entering G or H.
    """
    nrow, ncol = len(desc), len(desc[0])
    fail = (1.0 - success_rate) / 2.0

    def move(row: int, col: int, a: int) -> tuple[int, float, bool]:
        if a == LEFT:
            col = max(col - 1, 0)
        elif a == DOWN:
            row = min(row + 1, nrow - 1)
        elif a == RIGHT:
            col = min(col + 1, ncol - 1)
        else:
            row = max(row - 1, 0)
        tile = desc[row][col]
        return row * ncol + col, (1.0 if tile == "G" else 0.0), tile in "GH"

    table: TransitionTable = {}
    for row in range(nrow):
        for col in range(ncol):
            s = row * ncol + col
            table[s] = {}
            for a in range(4):
                if desc[row][col] in "GH":
                    table[s][a] = [(1.0, s, 0.0, True)]
                elif is_slippery:
                    table[s][a] = [
                        (success_rate if b == a else fail, *move(row, col, b)) for b in ((a - 1) % 4, a, (a + 1) % 4)
                    ]
                else:
                    table[s][a] = [(1.0, *move(row, col, a))]
    return table


def transition_matrix(table: TransitionTable) -> np.ndarray:
    """The table as an array `T[s, a, s']` of shape (nS, 4, nS), duplicate entries summed.

    O(nS^2) memory (8 GB for a 127x127 lake): for small maps and checks; the oracle uses `SparseTransitions`."""
    n = len(table)
    T = np.zeros((n, 4, n))
    for s, row in table.items():
        for a, transitions in row.items():
            for prob, nxt, _reward, _term in transitions:
                T[s, a, nxt] += prob
    return T


class SparseTransitions:
    """A transition table as arrays (`from_table`): `T @ V` and `T[s] @ V` as for the dense
    `transition_matrix(table)`, in O(nS) memory.

    `next[k, s, a]`, `prob[k, s, a]`: the k-th distinct successor of (s, a), in increasing order, with its summed
    probability (entries of `P[s][a]` that reach the same state merged in table order, as the dense matrix sums
    them; shorter rows padded with probability 0). Every (s, a) has at most 3 successors, so a lake of any
    accepted size costs a few MB where the dense (nS, 4, nS) matrix costs nS^2 * 32 bytes.
    """

    def __init__(self, next: np.ndarray, prob: np.ndarray):
        self.next, self.prob = next, prob

    @classmethod
    def from_table(cls, table: TransitionTable) -> SparseTransitions:
        rows = [[_merged(table[s][a]) for a in range(4)] for s in range(len(table))]
        width = max(len(m) for row in rows for m in row)
        nxt, prob = np.zeros((width, len(rows), 4), np.int64), np.zeros((width, len(rows), 4))
        for s, row in enumerate(rows):
            for a, merged in enumerate(row):
                for k, (t, p) in enumerate(sorted(merged.items())):
                    nxt[k, s, a], prob[k, s, a] = t, p
        return cls(nxt, prob)

    def __getitem__(self, s: int) -> SparseTransitions:
        """State `s` alone: `T[s] @ V` is (4,), as for the dense matrix."""
        return SparseTransitions(self.next[:, s], self.prob[:, s])

    def __matmul__(self, V: np.ndarray) -> np.ndarray:
        """The expected `V` of the next state: (nS, 4) for every state and action, (4,) for one state's row."""
        out = self.prob[0] * V[self.next[0]]
        for prob, nxt in zip(self.prob[1:], self.next[1:]):  # one successor slot at a time: no (k, nS, 4) temporary
            out += prob * V[nxt]
        return out


def _merged(transitions: list[Transition]) -> dict[int, float]:
    """next state -> probability, duplicate entries summed in table order."""
    out: dict[int, float] = {}
    for prob, nxt, _reward, _term in transitions:
        out[nxt] = out.get(nxt, 0.0) + prob
    return out


def goal_values(
    T: np.ndarray, goal: np.ndarray, hole: np.ndarray, horizon: int | None, discount: float = 1.0
) -> np.ndarray:
    """Optimal (discounted) probability of reaching a goal tile, by value iteration.

    V_0 = 1[goal];  V_k(s) = 1[s goal] if s is G, 0 if s is H, else discount * max_a sum_s' T[s,a,s'] V_{k-1}(s').
    With `horizon=k` this is the probability of reaching the goal within k actions under the best
    (time-dependent) policy; with `horizon=None` the sweeps run until the values stop changing
    (the infinite-horizon optimum, reached from below).

    Args:
        T: (nS, 4, nS) transition probabilities, or a `SparseTransitions` (anything with `T @ V` of shape (nS, 4)).
            goal, hole: (nS,) boolean masks.
        horizon: number of actions, or None for unbounded.
    Returns:
        (nS,) values V_horizon.
    """
    terminal = goal | hole
    base = goal.astype(float)
    V = base.copy()
    sweeps = _MAX_SWEEPS if horizon is None else horizon
    for _ in range(sweeps):
        new = np.where(terminal, base, discount * (T @ V).max(axis=1))
        done = horizon is None and np.max(np.abs(new - V)) < _VALUE_TOL
        V = new
        if done:
            break
    return V


def lake_text_bound(nrow: int, ncol: int, goals: int, holes: int, obs_format: str) -> int:
    """The most characters an observation of an `nrow` x `ncol` lake with `goals` goal and `holes` hole tiles can
    take in `obs_format`, the no-valid-action notice line included (every coordinate at its widest).

    The grid counts in every format (as for Sokoban's rooms), so `"coord"` does not let a lake grow without bound.
    """
    grid = grid_chars(nrow, ncol)
    coord = (len(f"Board size: {nrow} rows x {ncol} cols (zero-indexed).") + len("\nGoal: ")
             + coords_chars(nrow, ncol, goals) + len("\nHoles: ") + max(coords_chars(nrow, ncol, holes), len("none"))
             + len("\nPlayer: ") + coords_chars(nrow, ncol, 1))
    text = {"grid": grid, "coord": max(grid, coord), "grid_coord": coord + len("\nGrid Map:\n") + grid}[obs_format]
    return len(INVALID_NOTICE) + 1 + text


def _random_lake_bound(size: int, p: float, obs_format: str) -> int:
    """`lake_text_bound` of a random map: one goal, and every other cell but the start a hole unless p == 1
    (any number of holes can be drawn when p < 1, so the check holds for every map the knobs allow)."""
    return lake_text_bound(size, size, 1, 0 if p == 1.0 else size * size - 2, obs_format)


def check_lake_size(size: int, p: float, obs_format: str) -> None:
    """ValueError naming `size` and the largest accepted one unless every random map's observation fits
    MAX_OBSERVATION_CHARS: beyond it the observation is cut and the player can vanish from it."""
    bound = _random_lake_bound(size, p, obs_format)
    if bound <= MAX_OBSERVATION_CHARS:
        return
    largest = largest_fitting(lambda n: _random_lake_bound(n, p, obs_format) <= MAX_OBSERVATION_CHARS, 2,
                              MAX_OBSERVATION_CHARS)
    raise ValueError(
        f"size={size} gives text observations of up to {bound} characters (obs_format={obs_format!r}, p={p}), over "
        f"the {MAX_OBSERVATION_CHARS}-character limit: size must be at most {largest} with these settings"
        + ("" if p == 1.0 or obs_format == "grid" else " (the coordinate formats list every hole; p=1 has none)")
    )


def check_desc_fits(desc: list[str], obs_format: str, name: str) -> None:
    """ValueError naming `name` unless every observation of the map `desc` fits MAX_OBSERVATION_CHARS."""
    text = "".join(desc)
    bound = lake_text_bound(len(desc), len(desc[0]), text.count("G"), text.count("H"), obs_format)
    if bound > MAX_OBSERVATION_CHARS:
        raise ValueError(
            f"{name}: a {len(desc)}x{len(desc[0])} map gives text observations of up to {bound} characters "
            f"(obs_format={obs_format!r}), over the {MAX_OBSERVATION_CHARS}-character limit; use a smaller map"
        )


@cache
def _sprites() -> np.ndarray:
    """The six 16x16 RGB tiles (frozen, hole, goal, player, player in hole, player on goal), drawn once."""
    y, x = np.mgrid[0:TILE_PX, 0:TILE_PX]
    c = (TILE_PX - 1) / 2.0

    def disk(radius: float, cy: float = c, cx: float = c) -> np.ndarray:
        return (y - cy) ** 2 + (x - cx) ** 2 <= radius**2

    ice = np.empty((TILE_PX, TILE_PX, 3), np.uint8)
    ice[:] = (198, 228, 246)
    ice[(x + y) % 7 == 0] = (232, 245, 252)  # light streaks: reads as ice, not a flat fill
    ice[0, :] = ice[:, 0] = (160, 200, 228)  # grid lines between tiles

    hole = ice.copy()
    hole[disk(6.5)] = (40, 70, 110)
    hole[disk(5.0)] = (12, 24, 48)

    goal = ice.copy()
    goal[(np.abs(y - c) + np.abs(x - c)) <= 6] = (236, 190, 40)  # a gold diamond
    goal[(np.abs(y - c) + np.abs(x - c)) <= 3] = (255, 236, 130)

    def with_player(tile: np.ndarray, body: tuple[int, int, int]) -> np.ndarray:
        out = tile.copy()
        out[disk(5.0, cy=c + 1.5)] = (40, 20, 20)
        out[disk(4.0, cy=c + 1.5)] = body
        out[disk(2.5, cy=3.0)] = (250, 215, 180)  # head
        return out

    tiles = [ice, hole, goal, with_player(ice, (210, 50, 50)), with_player(hole, (120, 60, 140)),
             with_player(goal, (40, 160, 70))]
    sprites = np.stack(tiles)
    sprites.setflags(write=False)
    return sprites


class FrozenLakeEnv(TextAgentEnv):
    """Cross a slippery frozen lake to the goal without falling into a hole, acting through text.

    ## Description
    Gymnasium's FrozenLake played by an LLM, in RAGEN's setting: each episode draws a random
    `size` x `size` lake (default 4x4, each tile frozen with probability `p` = 0.9) with a random
    start and a random goal, always joined by a path (`ragen_envs.frozenlake.generate_random_map`),
    unless a fixed map is given with `desc`. The player moves Left/Down/Right/Up; on slippery ice
    a move goes in the intended direction with probability `success_rate` (default 0.8, RAGEN's
    config) and to each perpendicular direction with probability `(1 - success_rate) / 2`.
    The dynamics are data: `env.unwrapped.P[s][a]` is a list of `(prob, next_state, reward,
    terminated)` built exactly as Gymnasium's table (`build_transition_table`), with
    `s = row * ncol + col`.

    Where we differ from Gymnasium: a random map per reset with random start and goal (RAGEN),
    `success_rate` 0.8 instead of 1/3, text in and out, an action budget (`max_actions`, 10),
    `desc` stored as a list of strings (Gymnasium keeps a bytes array), no "human" render mode.
    Where we differ from RAGEN: all draws come from `self.np_random` (RAGEN seeds global state
    and retries with `hash()`-derived seeds), the symbol legend is always in the instructions,
    and `success_rate` is an argument of the env (the RAGEN env.py we read passes only
    `is_slippery` to Gymnasium, so its slip is whatever Gymnasium's default is).

    ## Action Space
    `Text(max_length=16384)`: the model's raw response. Canonical actions "Left", "Down",
    "Right", "Up" (Gymnasium's 0, 1, 2, 3), matched case-insensitively.

    ## Action format
    `<think> ... </think> <answer> Up || Right </answer>`: up to `max_actions_per_turn` (2)
    actions per turn separated by `||` (see `ragen_envs.protocol`). `action_format="plain"`
    accepts bare action names.

    ## Observation Space
    `Text(max_length=16384, min_length=1)` holding the grid; with `vision=True`,
    `Dict({"text": Text, "image": Box(0, 255, (16 * nrow, 16 * ncol, 3), uint8)})`, the image
    shape fixed by the map size (`len(desc)` x `len(desc[0])`, or `size` x `size`).

    ## Text format
    `obs_format="grid"` (default, RAGEN's): one line per row, top row first (Up moves to the row above), RAGEN's
    symbols:
    `P` player, `_` frozen ice (the start is shown as ice), `O` hole, `G` goal, `X` player in a
    hole, `√` player on the goal. A 4x4 example:

        _P__
        _O__
        ___O
        O__G

    `obs_format="coord"` lists the cells instead (positions are `(row, col)`, zero-indexed from the top-left
    corner; `Holes: none` when there is none), and `"grid_coord"` adds `Grid Map:` and the grid below, as
    Sokoban's formats do:

        Board size: 4 rows x 4 cols (zero-indexed).
        Goal: (3, 3)
        Holes: (1, 1), (2, 3), (3, 0)
        Player: (0, 1)

    After a turn without a valid action the text starts with a notice that the state is unchanged.

    ## Starting State
    The player stands on the start tile (uniformly among the `S` tiles of a fixed map with several).

    ## Rewards
    1 for reaching the goal, 0 otherwise (Gymnasium's schedule), plus the format penalty (-0.1)
    for a malformed answer or any dropped action.

    ## Episode End
    - Termination: the player falls into a hole or reaches the goal.
    - Truncation: the action budget `max_actions` (10) is spent, or `max_turns` is reached.

    ## Information
    The base keys (`action_is_valid`, `actions_executed`, `success`, `format_penalty`,
    `format_error`, `dropped_actions`, `actions_left`, `turn`; `instructions` at reset), plus
    `player_position` (row, col), `map` (the current map, Gymnasium's format) at reset, and in
    `step` `prob` (the probability of the last sampled transition, Gymnasium's key; None when no
    action ran) and `action_is_effective` (the position changed during the turn, RAGEN's key).

    Oracles (for demos and tests): `oracle()` is [the action with the highest probability of
    reaching the goal within the remaining budget] (value iteration over `P`, ties broken towards
    reaching it sooner), `optimal_success_probability()` that probability from the episode's start;
    `oracle_step()` is the warm start's demonstration (that action, with the player, the goal and the
    cell it aims at).

    ## Arguments
    ```python
    import gymnasium as gym
    import ragen_envs

    env = gym.make("ragen/FrozenLake-v0", size=4, p=0.9, is_slippery=True, success_rate=0.8, max_actions=10)
    env = gym.make("ragen/FrozenLake-v0", desc=["SFFF", "FHFH", "FFFH", "HFFG"], success_rate=1 / 3)
    env = gym.make("ragen/FrozenLake-Vision-v0")  # vision=True
    ```
    * `desc=None`: a fixed map in Gymnasium's format (rows over S/F/H/G); None draws a new random
      map at every reset. `reset(options={"desc": rows})` plays one episode on the given map.
    * `size=4`, `p=0.9`: side length and frozen-tile probability of random maps (ignored with `desc`). Every
      observation must fit the 16,384-character limit (`lake_text_bound`), so `size` is at most 127 in the
      `"grid"` format; the coordinate formats list every hole and any number can be drawn when p < 1, so there
      it is at most 40 (`"coord"`) or 38 (`"grid_coord"`). The ValueError names the largest accepted size. A
      `desc` (or `options["desc"]`) is held to the same limit.
    * `is_slippery=True` (a bool), `success_rate=0.8` (a number in [0, 1]): as Gymnasium's; `is_slippery=False`
      is deterministic.
    * `max_actions=10`: actions per episode (None: unlimited).
    * `obs_format="grid"`: `"grid"`, `"coord"` or `"grid_coord"` (see Text format).
    * `vision=False`, `render_mode=None` ("ansi" or "rgb_array"), and the protocol options of
      `TextAgentEnv`: `action_format`, `max_actions_per_turn`, `max_turns`, `format_penalty`.

    ## Version History
    * v0: initial version (Gymnasium FrozenLake-v1 dynamics with `success_rate`, RAGEN's task); `obs_format`
      added (default unchanged).
    """

    #: The reset options this env reads (``reset(options=...)``); any other key is refused.
    RESET_OPTIONS: ClassVar[frozenset[str] | None] = frozenset({"desc"})

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi", "rgb_array"], "render_fps": 4}
    ACTIONS: ClassVar[tuple[str, ...]] = ACTION_NAMES
    ROLE: ClassVar[str] = "You are solving the FrozenLake puzzle."

    def __init__(
        self,
        desc: list[str] | None = None,
        size: int = 4,
        p: float = 0.9,
        is_slippery: bool = True,
        success_rate: float = 0.8,
        max_actions: int | None = 10,
        *,
        vision: bool = False,
        render_mode: str | None = None,
        action_format: protocol.ActionFormat = "tagged",
        max_actions_per_turn: int = 2,
        max_turns: int | None = None,
        format_penalty: float = protocol.FORMAT_PENALTY,
        obs_format: str = "grid",
    ):
        self.size, self.p = check_random_map_args(size, p)
        success_rate = require_float("success_rate", success_rate, 0.0, 1.0)  # not True, "0.8" or NaN
        if not (isinstance(obs_format, str) and obs_format in OBS_FORMATS):
            raise ValueError(f"obs_format must be one of {OBS_FORMATS}, got {obs_format!r}")
        self.obs_format = obs_format
        self.fixed_desc = None if desc is None else validate_desc(desc)
        if self.fixed_desc is None:
            check_lake_size(self.size, self.p, obs_format)
        else:
            check_desc_fits(self.fixed_desc, obs_format, "desc")
        self.is_slippery = require_bool("is_slippery", is_slippery)  # bool("no") would be slippery ice
        self.success_rate = success_rate
        # The image space is fixed at construction, so the map shape must be known before the base init.
        self.nrow, self.ncol = (
            (len(self.fixed_desc), len(self.fixed_desc[0])) if self.fixed_desc else (self.size, self.size)
        )
        super().__init__(
            action_format=action_format,
            max_actions_per_turn=max_actions_per_turn,
            max_actions=max_actions,
            max_turns=max_turns,
            format_penalty=format_penalty,
            render_mode=render_mode,
            vision=vision,
        )
        self.desc: list[str] = []
        self.P: TransitionTable = {}
        self.s = 0
        self.start_state = 0
        self._tile_ids = np.zeros((self.nrow, self.ncol), np.int64)
        self._text_rows: list[str] = []
        self._cumulative: dict[int, dict[int, tuple[float, ...]]] = {}
        self._T: np.ndarray | SparseTransitions | None = None
        self._last_prob: float | None = None
        self._s_before = 0

    # ------------------------------------------------------------------ map and dynamics
    def _load_map(self, desc: list[str]) -> None:
        if desc == self.desc:
            return  # a fixed map: the tables of the last episode still hold
        self.desc = list(desc)
        self.nrow, self.ncol = len(desc), len(desc[0])
        self.P = build_transition_table(desc, self.is_slippery, self.success_rate)
        self._T = None  # the transition arrays are only built for the oracle
        letters = np.array([list(row) for row in desc])
        self._tile_ids = np.select([letters == "H", letters == "G"], [_HOLE, _GOAL], _FROZEN)
        self._text_rows = ["".join(TEXT_SYMBOLS[i] for i in row) for row in self._tile_ids]
        # Cumulative probabilities per (s, a), so a step samples without building arrays.
        self._cumulative = {
            s: {a: tuple(accumulate(t[0] for t in transitions)) for a, transitions in row.items()}
            for s, row in self.P.items()
        }

    @property
    def player_position(self) -> tuple[int, int]:
        """(row, col) of the player, zero-indexed from the top-left corner."""
        row, col = divmod(int(self.s), self.ncol)
        return row, col

    def _reset_task(self, options: dict[str, Any]) -> dict[str, Any]:
        if options.get("desc") is not None:
            desc = validate_desc(options["desc"])
            check_desc_fits(desc, self.obs_format, "options['desc']")
            if self.vision and (len(desc), len(desc[0])) != (self.nrow, self.ncol):
                raise ValueError(
                    f"options['desc'] must be {self.nrow}x{self.ncol} for this vision env (its image space is "
                    f"fixed), got {len(desc)}x{len(desc[0])}"
                )
        elif self.fixed_desc is not None:
            desc = self.fixed_desc
        else:
            desc = generate_random_map(self.np_random, self.size, self.p)
        self._load_map(desc)
        starts = [i for i, tile in enumerate("".join(desc)) if tile == "S"]
        # One draw even for a single start, as Gymnasium's categorical sample does.
        self.s = self.start_state = starts[int(self.np_random.integers(len(starts)))]
        self._last_prob = None
        return {"map": list(desc), "player_position": self.player_position}

    def _match_action(self, piece: str) -> str | None:
        # Before reset() there is no lake to move on: nothing is an action (as in Code, SearchQA and Sudoku), so a
        # step then is the defined "no valid action" step, not a KeyError from the empty transition table.
        if not self.P:
            return None
        return super()._match_action(piece)

    def _execute(self, action: str) -> tuple[float, bool]:
        a = ACTION_NAMES.index(action)
        transitions = self.P[self.s][a]
        # Gymnasium's categorical_sample: one uniform draw, the first entry whose cumulative probability
        # exceeds it (entry 0 if rounding leaves the total just below the draw, like its argmax).
        u = self.np_random.random()
        i = next((k for k, c in enumerate(self._cumulative[self.s][a]) if c > u), 0)
        prob, self.s, reward, terminated = transitions[i]
        self._last_prob = float(prob)
        return reward, terminated

    def _begin_step(self) -> None:
        self._s_before = self.s
        self._last_prob = None

    def _step_info(self, info: dict[str, Any]) -> dict[str, Any]:
        return {
            "player_position": self.player_position,
            "prob": self._last_prob,
            "action_is_effective": self.s != self._s_before,
        }

    def _is_success(self) -> bool:
        return bool(self.desc) and self.desc[self.player_position[0]][self.player_position[1]] == "G"

    # ------------------------------------------------------------------ text and pixels
    def _current_tile_ids(self) -> np.ndarray:
        ids = self._tile_ids.copy()
        ids[self.player_position] += _PLAYER_OFFSET
        return ids

    def _state_text(self) -> str:
        if not self.desc:
            return "The lake is not set up yet; call reset()."
        r, c = self.player_position
        rows = list(self._text_rows)
        rows[r] = rows[r][:c] + TEXT_SYMBOLS[self._tile_ids[r, c] + _PLAYER_OFFSET] + rows[r][c + 1 :]
        grid = "\n".join(rows)
        if self.obs_format == "grid":
            return grid
        holes = [f"({i}, {j})" for i, j in zip(*np.nonzero(self._tile_ids == _HOLE))]
        goals = [f"({i}, {j})" for i, j in zip(*np.nonzero(self._tile_ids == _GOAL))]
        lines = [f"Board size: {self.nrow} rows x {self.ncol} cols (zero-indexed).",
                 "Goal: " + ", ".join(goals),
                 "Holes: " + (", ".join(holes) or "none"),
                 f"Player: ({r}, {c})"]
        if self.obs_format == "grid_coord":
            lines += ["Grid Map:", grid]
        return "\n".join(lines)

    def _task_instructions(self) -> str:
        if self.is_slippery:
            side = (1.0 - self.success_rate) / 2.0
            ice = (
                f"The ice is slippery: each move goes in the intended direction with probability "
                f"{self.success_rate:.3g}, and to each of the two perpendicular directions with probability {side:.3g}."
            )
        else:
            ice = "The ice is not slippery: every move goes in the intended direction."
        return (
            "Walk across the frozen lake to the goal G without falling into a hole O.\n"
            f"{ice}\n"
            "Moving into the edge of the lake leaves you where you are. The game ends when you reach the goal "
            "(reward 1) or fall into a hole (reward 0).\n"
            "The grid is shown row by row, top row first: Up moves to the row above, Left to the column on the left.\n"
            f"Symbols: {LEGEND}."
        )

    def _image_space(self) -> spaces.Box:
        return spaces.Box(0, 255, (TILE_PX * self.nrow, TILE_PX * self.ncol, 3), np.uint8)

    def _render_rgb(self) -> np.ndarray:
        """The lake as uint8 (16 nrow, 16 ncol, 3): one pre-drawn sprite per tile."""
        tiles = _sprites()[self._current_tile_ids()]  # (nrow, ncol, 16, 16, 3)
        return np.ascontiguousarray(tiles.transpose(0, 2, 1, 3, 4).reshape(self.nrow * TILE_PX, self.ncol * TILE_PX, 3))

    # ------------------------------------------------------------------ oracle
    def _masks(self) -> tuple[np.ndarray, np.ndarray]:
        flat = self._tile_ids.ravel()
        return flat == _GOAL, flat == _HOLE

    def _matrix(self) -> np.ndarray | SparseTransitions:
        """`P` for the value iteration, built on first use per map: the dense `transition_matrix` up to
        `_DENSE_MAX_STATES` states, `SparseTransitions` beyond (the dense one is O(nS^2): 8 GB at 127x127, the
        largest accepted lake). Small maps keep the dense product so that the oracle's choice between exactly
        tied actions, which its float rounding decides, stays what it always was."""
        if self._T is None:
            n = len(self.P)
            self._T = transition_matrix(self.P) if n <= _DENSE_MAX_STATES else SparseTransitions.from_table(self.P)
        return self._T

    def optimal_success_probability(self, *, from_current: bool = False) -> float:
        """Probability that the best policy reaches the goal within the action budget.

        Args:
            from_current: False (default): from the episode's start with the full `max_actions`;
                True: from the current position with the actions left.
        Returns:
            V_h(s) of `goal_values` with h the budget (unbounded when `max_actions` is None).
        """
        if not self.desc:
            raise RuntimeError("call reset() before asking for the optimal success probability")
        goal, hole = self._masks()
        horizon = self._actions_left if from_current else self.max_actions
        state = self.s if from_current else self.start_state
        return float(goal_values(self._matrix(), goal, hole, horizon)[state])

    def oracle(self) -> list[str]:
        """[the action name] that maximises the probability of reaching the goal in the remaining budget.

        Q(s, a) = sum_s' P(s' | s, a) V_{h-1}(s') with h the actions left (unbounded without a budget);
        among actions within 1e-9 of the best, the one with the highest discounted (0.9) value wins,
        i.e. the one that reaches the goal sooner, so the oracle never idles when it has slack.
        """
        if not self.desc:
            raise RuntimeError("call reset() before asking the oracle")
        goal, hole = self._masks()
        T = self._matrix()
        left = self._actions_left
        horizon = None if left is None else max(left - 1, 0)
        q = T[self.s] @ goal_values(T, goal, hole, horizon)
        q_soon = T[self.s] @ goal_values(T, goal, hole, horizon, discount=_TIE_BREAK_DISCOUNT)
        candidates = np.flatnonzero(q >= q.max() - _TIE_TOL)
        return [ACTION_NAMES[int(candidates[np.argmax(q_soon[candidates])])]]

    # ------------------------------------------------------------------ the warm start's demonstrator
    def oracle_step(self, reasoning: str = "full") -> tuple[str, list[str]]:
        """(reasoning, [the oracle's action]): one move per turn (the next state depends on the slip)."""
        action = self.oracle()[0]
        return self._move_reasoning(action), [action]

    def random_step(self, rng: np.random.Generator) -> tuple[str, list[str]]:
        """A uniformly random move, with the same reasoning about it."""
        action = self._uniform_action(rng)
        return self._move_reasoning(action), [action]

    def _move_reasoning(self, action: str) -> str:
        """``I am at (r, c) and the goal is at (r, c). Moving <dir> goes to (r, c) and avoids the holes.`` (the cell
        the move aims at, before any slip)."""
        pos = tuple(int(x) for x in self.player_position)
        goal = [(r, c) for r, row in enumerate(self.desc) for c, ch in enumerate(row) if ch == "G"]
        return (f"I am at {coords([pos])} and the goal is at {coords(goal)}. "
                f"Moving {DIRECTION_WORDS.get(action, action)} goes to {coords([moved(pos, action)])} "
                "and avoids the holes.")
