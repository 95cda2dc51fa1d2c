"""2048 as a multi-turn text task; see `Game2048Env`."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from ragen_envs import protocol
from ragen_envs.base import TextAgentEnv, listed_refusals
from ragen_envs.game2048.oracle import MAX_ORACLE_DEPTH, best_move, max_oracle_depth, search_leaves
from ragen_envs.game2048.rules import DIRECTIONS, legal_moves, move, spawn
from ragen_envs.validation import require_int

#: The largest tile a board holds: the int64 board cannot store 2^63, and a merge of two 2^62 tiles would make it.
MAX_TILE = 2**62


def check_board(board: Any, size: int) -> np.ndarray:
    """A size x size board of 0 (empty) and tile values 2, 4, 8, ... up to MAX_TILE as int64; ValueError otherwise
    (a larger tile would overflow the int64 board: an OverflowError, or a negative tile after a merge)."""
    try:
        arr = np.array(board, dtype=object)
    except (TypeError, ValueError):
        arr = None
    if arr is None or arr.shape != (size, size):
        raise ValueError(f"board must be {size} rows of {size} tiles, got {board!r}")
    out = np.zeros((size, size), np.int64)
    for (r, c), v in np.ndenumerate(arr):
        ok = isinstance(v, (int, np.integer)) and not isinstance(v, bool) and (
            v == 0 or (2 <= v <= MAX_TILE and v & (v - 1) == 0))
        if not ok:
            raise ValueError(f"board tiles must be 0 or powers of two from 2 to 2**62, got {v!r} at row {r}, "
                             f"column {c}")
        out[r, c] = int(v)
    return out


def check_oracle_depth(oracle_depth: object, size: int) -> int:
    """`oracle_depth` as an int in [1, max_oracle_depth(size)], else ValueError naming it, the accepted range
    and, for a depth the board is too large for, how many boards a move that search would score."""
    top = max_oracle_depth(size)
    if isinstance(oracle_depth, int) and not isinstance(oracle_depth, bool) and top < oracle_depth <= MAX_ORACLE_DEPTH:
        raise ValueError(
            f"oracle_depth={oracle_depth} is too deep for a {size}x{size} board: its search scores up to "
            f"{search_leaves(size, oracle_depth):,} boards a move (seconds to hours); use oracle_depth in [1, {top}]"
        )
    return require_int("oracle_depth", oracle_depth, 1, top)


class Game2048Env(TextAgentEnv):
    """Slide and merge tiles to build the target tile (2048 by default), acting through text.

    ## Description
    The standard 2048 (`ragen_envs.game2048.rules`): a move (Up, Down, Left, Right) slides every tile as
    far as it goes; two equal tiles that meet merge into their sum, and a merged tile does not merge again
    in the same move (`[2, 2, 2, 2]` left is `[4, 4, 0, 0]`, `[4, 4, 8, 0]` is `[8, 8, 0, 0]`). After every
    move that changes the board a new tile appears in a uniformly random empty cell: 2 with probability 0.9,
    4 with 0.1. The game starts with two such tiles on an empty `size` x `size` board. All draws come from
    `self.np_random`. The target is reachable in principle (it is at most 2^(size^2 + 1), the largest tile a
    board can hold); the expectimax oracle reaches 2048 on 4x4 in most games (`best_move`; the benchmark
    reports its rate).

    Where we differ from RAGEN's 2048 env: text actions under this suite's protocol (up to 2 moves per turn);
    reward = the merged values, RAGEN's raw score (RAGEN trains on 0.1 log2(1 + score) by default; use a
    reward wrapper for that); success = the target tile appears (RAGEN marks success only on the terminal
    board and only for 2048), and the episode then ends; a move that changes nothing is refused with the
    format penalty (RAGEN's -0.1 as well) before anything runs; the target and board size are arguments.

    ## Action Space
    `Text(max_length=16384)`: the model's raw response. Canonical actions "Up", "Down", "Left", "Right",
    matched case-insensitively.

    ## Action format
    `<think> ... </think> <answer> Left || Up </answer>`: up to `max_actions_per_turn` (2) moves per turn,
    separated by `||`. A move that would change nothing on the board as you see it, with the moves before
    it in the same answer applied (new tiles are not known yet), is refused: dropped, format penalty -0.1.
    A move that only a new tile of the same turn blocks is skipped without penalty (`info["blocked"]`).

    ## Observation Space
    `Text(max_length=16384, min_length=1)`.

    ## Text format
    One line per row, top row first, tiles right-aligned, `.` for an empty cell; then the score, the target
    and the moves that change the board. A 4x4 example:

            .    .    2    .
            .    4    .    .
            .    .    .    .
            2    .    .    .
        Score: 0. Target: 2048.
        Moves that change the board: Up, Down, Left, Right.

    Refusals and the "no valid action" notice come first, when there are any, the board always last: at most 5
    refusals are listed (then "... and N more refused pieces of your answer."; `info["refused"]` has them all).

    ## Starting State
    Two tiles (each 2 w.p. 0.9, else 4) in random cells of an empty board.

    ## Rewards
    The sum of the tiles made by merges in the turn's moves (the game's score), plus the format penalty
    (-0.1) for a malformed answer or any refused move.

    ## Episode End
    - Termination: a tile reaches `target` (success), or no move changes the board (game over).
    - Truncation: the action budget `max_actions` (default None: unlimited) or `max_turns`.

    ## Information
    The base keys, plus `board` (rows of tiles), `score` and `max_tile` at reset and in every step; in `step`
    `refused` (`{"action", "reason"}` per refused piece), `blocked` (moves skipped because a new tile of the
    same turn left them nothing to do), `spawned` (`[row, col, value]` per new tile) and
    `action_is_effective` (the board changed).

    Oracle: `oracle()` ([the expectimax move], `oracle_depth` moves deep), `oracle_step()` (one move
    and a sentence about its merges and the empty cells it leaves).

    ## Arguments
    ```python
    import gymnasium as gym
    import ragen_envs

    env = gym.make("ragen/2048-v0", size=4, target=2048)
    env = gym.make("ragen/2048-v0", size=3, target=64, max_actions=60)
    env.reset(seed=0, options={"board": [[2, 2, 0], [0, 4, 0], [0, 0, 0]]})   # start from a given board
    # (refused when it already holds the target, which would start solved, or has no legal move)
    ```
    * `size=4`: the side of the board (2 to 8).
    * `target=2048`: the tile that wins; a power of two, at least 8, at most 2^(size^2 + 1) and 2^62 (the board
      is int64).
    * `max_actions=None`: the move budget (None: unlimited; the game ends by itself).
    * `oracle_depth=2`: expectimax depth of the oracle, 1 to 4 as far as the board allows a search of at most
      200,000 boards a move (`ragen_envs.game2048.oracle.max_oracle_depth`): 4 on 2x2, 3 on 3x3 to 5x5, 2 on
      6x6 to 8x8 (4x4 at depth 4 took half a minute a move, 8x8 at depth 4 hours).
    * `render_mode=None` (`"ansi"`), and the protocol options of `TextAgentEnv`: `action_format`,
      `max_actions_per_turn` (2), `max_turns`, `format_penalty`.

    ## Version History
    * v0: initial version.
    """

    #: The reset options this env reads (``reset(options=...)``); any other key is refused.
    RESET_OPTIONS: ClassVar[frozenset[str] | None] = frozenset({"board"})

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 4}
    ACTIONS: ClassVar[tuple[str, ...]] = DIRECTIONS
    ROLE: ClassVar[str] = "You are playing the game 2048."

    def __init__(
        self,
        size: int = 4,
        target: int = 2048,
        max_actions: int | None = None,
        oracle_depth: int = 2,
        *,
        render_mode: str | None = None,
        action_format: protocol.ActionFormat = "tagged",
        max_actions_per_turn: int = 2,
        max_turns: int | None = None,
        format_penalty: float = protocol.FORMAT_PENALTY,
    ):
        self.size = require_int("size", size, 2, 8)
        # At most 2^(size^2 + 1), the largest tile a board can make, and MAX_TILE, the largest an int64 board holds.
        self.target = require_int("target", target, 8, min(2 ** (self.size**2 + 1), MAX_TILE))
        if self.target & (self.target - 1):
            raise ValueError(f"target must be a power of two, got {target!r}")
        self.oracle_depth = check_oracle_depth(oracle_depth, self.size)
        super().__init__(
            action_format=action_format,
            max_actions_per_turn=max_actions_per_turn,
            max_actions=max_actions,
            max_turns=max_turns,
            format_penalty=format_penalty,
            render_mode=render_mode,
        )
        self.board = np.zeros((self.size, self.size), np.int64)
        self.score = 0
        self._ready = False
        self._shadow = self.board
        self._before = self.board
        self._refused: list[dict[str, str]] = []
        self._blocked: list[str] = []
        self._spawned: list[list[int]] = []

    # ------------------------------------------------------------------ hooks
    def _reset_task(self, options: dict[str, Any]) -> dict[str, Any]:
        if options.get("board") is not None:
            board = check_board(options["board"], self.size)
            if board.max() >= self.target:
                raise ValueError(f"options['board'] already holds the target {self.target}")
            if not legal_moves(board):
                raise ValueError("options['board'] has no legal move")
            self.board = board
        else:
            self.board = np.zeros((self.size, self.size), np.int64)
            spawn(self.board, self.np_random)
            spawn(self.board, self.np_random)
        self.score = 0
        self._ready = True
        self._begin_step()
        return self._board_info()

    def _board_info(self) -> dict[str, Any]:
        return {"board": self.board.tolist(), "score": self.score, "max_tile": int(self.board.max())}

    def _begin_step(self) -> None:
        self._shadow = self.board.copy()
        self._before = self.board.copy()
        self._refused = []
        self._blocked = []
        self._spawned = []

    def _match_action(self, piece: str) -> str | None:
        # The vocabulary, then the rule that a move must change the board the model sees (with the moves
        # before it in this answer applied, `_shadow`; the new tiles of this turn are unknown to it).
        name = self._matcher(piece)
        if name is None:
            self._refused.append({"action": piece, "reason": "not one of Up, Down, Left, Right"})
            return None
        if not self._ready:
            return None
        new, _, changed = move(self._shadow, name)
        if not changed:
            self._refused.append({"action": name, "reason": "it changes nothing"})
            return None
        self._shadow = new
        return name

    def _execute(self, action: str) -> tuple[float, bool]:
        new, gained, changed = move(self.board, action)
        if not changed:  # a new tile of this turn blocked it; the model could not know (no penalty)
            self._blocked.append(action)
            return 0.0, False
        self.board = new
        self.score += gained
        cell = spawn(self.board, self.np_random)
        if cell is not None:
            self._spawned.append(list(cell))
        done = self._is_success() or not legal_moves(self.board)
        return float(gained), done

    def _is_success(self) -> bool:
        return self._ready and int(self.board.max()) >= self.target

    def _step_info(self, info: dict[str, Any]) -> dict[str, Any]:
        return {
            **self._board_info(),
            "refused": [dict(r) for r in self._refused],
            "blocked": list(self._blocked),
            "spawned": [list(s) for s in self._spawned],
            "action_is_effective": not np.array_equal(self.board, self._before),
        }

    # ------------------------------------------------------------------ text
    def _state_text(self) -> str:
        if not self._ready:
            return "The board is not set up yet; call reset()."
        width = max(4, len(str(self.target)))
        rows = [" ".join(str(v).rjust(width) if v else ".".rjust(width) for v in row) for row in self.board.tolist()]
        moves = legal_moves(self.board)
        rows.append(f"Score: {self.score}. Target: {self.target}.")
        rows.append("Moves that change the board: " + (", ".join(moves) if moves else "none (game over)") + ".")
        return "\n".join(rows)

    def _observation_text(self, notice: str | None) -> str:
        # Only canonical move names are echoed; other answer pieces are summarised, never repeated. The board
        # comes last and the refusal lines are capped (`listed_refusals`; the skipped moves are at most the
        # turn's moves), so no response can push the board or the notice out of the observation.
        parts = listed_refusals([
            f"Refused {r['action']}: {r['reason']}." if r["action"] in DIRECTIONS
            else f"Refused a piece of your answer: {r['reason']}."
            for r in self._refused
        ])
        parts += [f"{m} was skipped: the new tile left it nothing to move." for m in self._blocked]
        if notice:
            parts.append(notice)
        parts.append(self._state_text())
        return "\n".join(parts)

    def _task_instructions(self) -> str:
        return (
            f"Build a {self.target} tile on the {self.size}x{self.size} board. A move (Up, Down, Left, Right) "
            "slides every tile as far as it goes in that direction; two equal tiles that meet merge into one "
            "with their sum, and a merged tile does not merge again in the same move. After each move a new "
            "tile (2, sometimes 4) appears in a random empty cell.\n"
            "A move that changes nothing is refused. The reward of a move is the sum of the tiles it makes by "
            f"merging. The game ends when a {self.target} tile appears (success) or no move changes the board."
        )

    # ------------------------------------------------------------------ oracle
    def oracle(self) -> list[str]:
        """[the expectimax move] (`oracle_depth` deep) from the current board; `[]` when no move is legal."""
        if not self._ready:
            raise RuntimeError("call reset() before asking the oracle")
        action = best_move(self.board, self.oracle_depth)
        return [] if action is None else [action]

    def oracle_step(self, reasoning: str = "full") -> tuple[str, list[str]]:
        """(reasoning, [the oracle's move]): one move per turn (the next board depends on the new tile), with
        what it merges, its score and the empty cells it leaves, computed from the board."""
        moves = self.oracle()
        if not moves:
            return "No move changes the board.", []
        action = moves[0]
        new, gained, _ = move(self.board, action)
        empty = int((new == 0).sum())
        merges = f"merges for +{gained}" if gained else "merges nothing"
        return f"{action} {merges} and leaves {empty} empty cells; max tile {int(new.max())}.", [action]
