"""Sudoku as a multi-turn text task; see `SudokuEnv`."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from ragen_envs import protocol
from ragen_envs.base import TextAgentEnv, listed_refusals
from ragen_envs.sudoku.generator import DIFFICULTY_GIVENS, TECHNIQUES, check_givens, generate_puzzle
from ragen_envs.sudoku.solver import (
    SearchBudgetExceeded,
    box_side,
    candidates,
    count_solutions,
    is_solved,
    peers,
    solve,
)

#: One placement: R<row>C<col>=<digit>, 1-indexed, ASCII letters in either case, spaces between the parts.
#: ASCII digits only (re.ASCII: "٣" or "３" are not 3) and no leading zeros, so each placement has one spelling
#: up to case and spaces; at most two digits, so a long digit string is refused without converting it.
ACTION_PATTERN = re.compile(r"r\s*([1-9][0-9]?)\s*c\s*([1-9][0-9]?)\s*=\s*(0|[1-9][0-9]?)", re.ASCII | re.IGNORECASE)
DIFFICULTIES = ("easy", "medium", "hard")
SOLVED_REWARD = 1.0
#: Search positions the exact solver may visit to check an `options["puzzle"]` (uniqueness, then the solution):
#: the hardest known 9x9 puzzles need about 125,000, a few seconds' worth is allowed; beyond it the puzzle is
#: refused (a ValueError) instead of reset hanging on a puzzle built against the search.
PUZZLE_MAX_SEARCH_NODES = 500_000


def parse_board(board: Any, n: int) -> list[int]:
    """A board given as n rows of n digits (lists, or strings with `.`/`0` for empty cells), or a flat sequence
    of n * n digits (a list, or one string such as `"41.32..."`), as a flat row-major list; ValueError on any
    other shape or digit."""
    if isinstance(board, str):
        board = [row for row in board.split() if row]
        if len(board) == 1 and len(board[0]) == n * n:  # the flat form as one string, "41.32..." (n * n digits)
            board = list(board[0])
    rows = list(board) if isinstance(board, (list, tuple, np.ndarray)) else None
    flat: list[Any] | None = None
    if rows is not None and len(rows) == n:
        flat = []
        for row in rows:
            # A list keeps its items as given: np.asarray would turn [True, 0] into [1, 0] before the check below.
            cells = (list(row.replace(".", "0")) if isinstance(row, str)
                     else list(row) if isinstance(row, (list, tuple)) else list(np.asarray(row).ravel()))
            if len(cells) != n:
                flat = None
                break
            flat.extend(cells)
    elif rows is not None and len(rows) == n * n:
        flat = list(board) if isinstance(board, (list, tuple)) else list(np.asarray(rows).ravel())
    if flat is None:
        raise ValueError(f"a {n}x{n} board must be {n} rows of {n} digits (or {n * n} digits), got {board!r}")
    out = []
    for v in flat:
        if isinstance(v, str) and v == ".":  # the empty cell of the string forms, also as a single character
            v = "0"
        try:
            d = int(v)
        except (TypeError, ValueError, OverflowError):  # OverflowError: int(float("inf"))
            raise ValueError(f"board cells must be digits 0..{n} (0 or '.' empty), got {v!r}") from None
        # int() truncates: 2.5, np.float32(2.5) or Fraction(5, 2) would become a given 2, and True a given 1.
        inexact = not isinstance(v, str) and (isinstance(v, (bool, np.bool_)) or v != d)
        if not 0 <= d <= n or inexact:
            raise ValueError(f"board cells must be digits 0..{n} (0 or '.' empty), got {v!r}")
        out.append(d)
    return out


def _unique_solution(puzzle: list[int], n: int) -> list[int]:
    """The solution of `options["puzzle"]`; ValueError when it has none or several, or when the exact search
    cannot tell within PUZZLE_MAX_SEARCH_NODES positions (without the bound, a 16x16 puzzle built against the
    search kept reset busy for longer than any caller waits)."""
    try:
        count = count_solutions(puzzle, n, max_nodes=PUZZLE_MAX_SEARCH_NODES)
        solution = solve(puzzle, n, max_nodes=PUZZLE_MAX_SEARCH_NODES) if count == 1 else None
    except SearchBudgetExceeded:
        raise ValueError(
            f"options['puzzle'] could not be checked for a unique solution within {PUZZLE_MAX_SEARCH_NODES:,} "
            "search positions of the exact solver; give a puzzle with more givens"
        ) from None
    if solution is None:
        found = "none" if count == 0 else "several"
        raise ValueError(f"options['puzzle'] must have exactly one solution; it has {found}")
    return solution


class SudokuEnv(TextAgentEnv):
    """Fill a Sudoku grid, one placement at a time, through text.

    ## Description
    An n x n Sudoku (n = 4 or 9, boxes of sqrt(n) x sqrt(n); 16 works but generates slowly): fill every
    empty cell with a digit 1..n so that each row, column and box holds every digit once. Each episode
    draws a puzzle from `self.np_random` (`ragen_envs.sudoku.generate_puzzle`): a random full grid is dug
    down to exactly `givens` filled cells, and every emptied cell is kept empty only if the puzzle still has
    a **unique** solution, checked by an exact solver (`count_solutions(puzzle) == 1`). Difficulty is the
    number of givens (`difficulty` names RAGEN's clue counts, `givens` sets it directly) and, optionally,
    the technique: `technique="singles"` keeps only puzzles that naked and hidden singles alone solve.

    Where we differ from RAGEN's Sudoku env: the Gymnasium API and this suite's protocol (tagged answers,
    up to 2 placements per turn, the format penalty for a refused placement instead of reward 0); one
    action form `R3C5=7` (RAGEN parses `3,5,7` and `place 7 at row 3 col 5` loosely, e.g. the first free
    digit anywhere in the text is the value); a placement that breaks a rule is refused and the board is
    unchanged (RAGEN counts it as a valid, ineffective step); your own digits can be overwritten or erased
    (`=0`); all draws come from `self.np_random` (RAGEN seeds Python's global `random`); the puzzle is
    dug to exactly `givens` cells or regenerated (RAGEN may return a puzzle with more clues than asked);
    9x9 hard is 26 givens (RAGEN's 24 needs many grids per puzzle).

    ## Action Space
    `Text(max_length=16384)`: the model's raw response. An action is one placement `R<row>C<col>=<digit>`.

    ## Action format
    `<think> ... </think> <answer> R1C2=3 || R4C1=2 </answer>`: up to `max_actions_per_turn` (2)
    placements per turn, separated by `||`. Rows and columns are numbered from 1 (top row, left column);
    `R`, `C` in either case, spaces between the parts allowed (`r1 c2 = 3`); ASCII digits only, no leading
    zeros. `=0` erases a digit you placed. A placement is refused (dropped, format penalty -0.1, board
    unchanged) when it is not of this form, is out of range, targets a given cell, repeats the cell's
    digit, erases an empty cell, or puts a digit that its row, column or box already holds (counting the
    placements before it in the same answer). The refusals are listed in the next observation.

    ## Observation Space
    `Text(max_length=16384, min_length=1)`.

    ## Text format
    A header with the column numbers, then one line per row (`R1` on top), `.` for an empty cell, `|` and
    a dashed line between boxes, then the number of empty cells. A 4x4 example:

            C1 C2   C3 C4
        R1   1  .  |  .  4
        R2   .  .  |  3  .
            ------+------
        R3   .  1  |  .  .
        R4   4  .  |  .  1
        Empty cells: 10

    Refusals and the "no valid action" notice come first, when there are any, the grid always last: at most 5
    refusals are listed (then "... and N more refused pieces of your answer."; `info["refused"]` has them all).

    ## Starting State
    The puzzle: `givens` filled cells, the rest empty (at least one: a puzzle with no empty cell, as a knob or
    as `options["puzzle"]`, is refused, since its start would already be solved). An `options["puzzle"]` must
    have exactly one solution, which the exact solver confirms within `PUZZLE_MAX_SEARCH_NODES` (500,000) search
    positions (about 2 s of search at 9x9, 7 s at 16x16; the hardest known 9x9 puzzles need a quarter of that);
    else a ValueError says which of these failed.

    ## Rewards
    1 on the placement that completes a solved grid (which, the solution being unique, is the solution);
    0 for every other placement; the format penalty (-0.1) for a malformed answer or any refused placement.

    ## Episode End
    - Termination: the grid is solved.
    - Truncation: the action budget `max_actions` is spent (default: n * n, every cell once with room to
      correct), or `max_turns` is reached.

    ## Information
    The base keys, plus `puzzle` (rows of digits, 0 empty), `givens`, `technique` and `empty_cells` at
    reset; in `step` `empty_cells`, `refused` (a list of `{"action", "reason"}`, the answer pieces refused
    this turn, in order) and `action_is_effective` (the board changed).

    Oracles: `solution` (the unique solution, rows), `oracle()` (placements that solve the board
    from the current state, wrong digits corrected first), `oracle_step()` (this turn's placements and a
    short reasoning: the digits the cell sees, or the unit where the digit has one place). `random_action(rng)`
    draws a random placement the rules allow (Sudoku has no fixed `ACTIONS` list; warm starts use it for random
    and noisy demonstrations).

    ## Arguments
    ```python
    import gymnasium as gym
    import ragen_envs

    env = gym.make("ragen/Sudoku-v0", size=4, difficulty="easy")      # 10 givens
    env = gym.make("ragen/Sudoku-v0", size=9, givens=30, technique="singles", max_actions=100)
    env.reset(seed=0, options={"puzzle": ["41.3", "2...", ".4..", "...1"]})   # a given puzzle (unique)
    ```
    * `size=4`: the side n (4, 9 or 16).
    * `difficulty="easy"`: `"easy"`, `"medium"` or `"hard"`: 10 / 8 / 6 givens at 4x4, 36 / 30 / 26 at 9x9,
      160 / 140 / 128 at 16x16. `givens=None`: the number of filled cells (overrides `difficulty`), an int
      from 4 / 23 / 128 up to n * n - 1 (a puzzle with every cell given is already solved).
    * `technique="any"`: `"any"` (unique solution) or `"singles"` (also solvable by singles alone).
    * `max_actions="auto"`: the placement budget; `"auto"` is n * n, None unlimited.
    * `render_mode=None` (`"ansi"`), and the protocol options of `TextAgentEnv`: `action_format`,
      `max_actions_per_turn` (2), `max_turns`, `format_penalty`.

    ## Version History
    * v0: initial version.
    """

    #: The reset options this env reads (``reset(options=...)``); any other key is refused.
    RESET_OPTIONS: ClassVar[frozenset[str] | None] = frozenset({"puzzle"})

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 4}
    ROLE: ClassVar[str] = "You are solving a Sudoku puzzle."

    def __init__(
        self,
        size: int = 4,
        difficulty: str = "easy",
        givens: int | None = None,
        technique: str = "any",
        max_actions: int | str | None = "auto",
        *,
        render_mode: str | None = None,
        action_format: protocol.ActionFormat = "tagged",
        max_actions_per_turn: int = 2,
        max_turns: int | None = None,
        format_penalty: float = protocol.FORMAT_PENALTY,
    ):
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size not in DIFFICULTY_GIVENS:
            raise ValueError(f"size must be one of the ints {sorted(DIFFICULTY_GIVENS)}, got {size!r}")
        self.n = int(size)
        self.b = box_side(self.n)
        if not (isinstance(difficulty, str) and difficulty in DIFFICULTIES):
            raise ValueError(f"difficulty must be one of {DIFFICULTIES}, got {difficulty!r}")
        if not (isinstance(technique, str) and technique in TECHNIQUES):
            raise ValueError(f"technique must be one of {TECHNIQUES}, got {technique!r}")
        self.difficulty = difficulty
        self.technique = technique
        self.num_givens = check_givens(self.n, DIFFICULTY_GIVENS[self.n][difficulty] if givens is None else givens)
        if isinstance(max_actions, str):  # the base names only the int form; "auto" is this env's own
            if max_actions != "auto":
                raise ValueError(f'max_actions must be "auto", None or an integer >= 1, got {max_actions!r}')
            max_actions = self.n * self.n
        super().__init__(
            action_format=action_format,
            max_actions_per_turn=max_actions_per_turn,
            max_actions=max_actions,  # type: ignore[arg-type]  (validated by the base)
            max_turns=max_turns,
            format_penalty=format_penalty,
            render_mode=render_mode,
        )
        self.puzzle: list[int] = []
        self._solution: list[int] = []
        self.board: list[int] = []
        self._given: list[bool] = []
        self._shadow: list[int] = []
        self._refused: list[dict[str, str]] = []
        self._before: list[int] = []

    # ------------------------------------------------------------------ hooks
    def _reset_task(self, options: dict[str, Any]) -> dict[str, Any]:
        if options.get("puzzle") is not None:
            puzzle = parse_board(options["puzzle"], self.n)
            if 0 not in puzzle:
                raise ValueError("options['puzzle'] has no empty cell: it is already solved (or broken); give a "
                                 "puzzle with at least one empty cell")
            solution = _unique_solution(puzzle, self.n)
        else:
            puzzle, solution = generate_puzzle(self.np_random, self.n, self.num_givens, self.technique)
        self.puzzle, self._solution = list(puzzle), list(solution)
        self.board = list(puzzle)
        self._given = [v != 0 for v in puzzle]
        self._shadow = list(puzzle)
        self._refused = []
        self._before = list(puzzle)
        return {
            "puzzle": self._rows(self.puzzle),
            "givens": sum(self._given),
            "technique": self.technique,
            "empty_cells": self.board.count(0),
        }

    def _begin_step(self) -> None:
        self._shadow = list(self.board)
        self._refused = []
        self._before = list(self.board)

    def _refuse(self, piece: str, reason: str) -> None:
        self._refused.append({"action": piece, "reason": reason})

    def _match_action(self, piece: str) -> str | None:
        # Validated against the board as the earlier placements of this answer leave it (`_shadow`), so a
        # matched placement never clashes when it runs; everything else is refused here, before anything runs.
        if not self.board:
            return None
        m = ACTION_PATTERN.fullmatch(piece.strip())
        if m is None:
            self._refuse(piece, "not of the form R<row>C<col>=<digit>")
            return None
        r, c, v = (int(g) for g in m.groups())
        name = f"R{r}C{c}={v}"
        n = self.n
        if not (r <= n and c <= n and v <= n):
            self._refuse(name, f"rows, columns and digits go from 1 to {n}")
            return None
        i = (r - 1) * n + (c - 1)
        if self._given[i]:
            self._refuse(name, f"R{r}C{c} is a given cell ({self.puzzle[i]})")
            return None
        if v == 0 and self._shadow[i] == 0:
            self._refuse(name, f"R{r}C{c} is already empty")
            return None
        if v != 0 and self._shadow[i] == v:
            self._refuse(name, f"R{r}C{c} already holds {v}")
            return None
        if v != 0:
            for j in peers(n)[i]:
                if self._shadow[j] == v:
                    self._refuse(name, f"{v} is already at {self._cell(j)}, in the same {self._unit(i, j)}")
                    return None
        self._shadow[i] = v
        return name

    def _execute(self, action: str) -> tuple[float, bool]:
        m = ACTION_PATTERN.fullmatch(action)
        assert m is not None  # only canonical names from _match_action get here
        r, c, v = (int(g) for g in m.groups())
        self.board[(r - 1) * self.n + (c - 1)] = v
        solved = self._is_success()
        return (SOLVED_REWARD if solved else 0.0), solved

    def _is_success(self) -> bool:
        # Judged by the rules, not by comparing with the stored solution: a complete valid grid that keeps
        # every given is the unique solution (the tests check that it equals `solution`).
        return (
            bool(self.board)
            and all(self.board[i] == self.puzzle[i] for i in range(self.n * self.n) if self._given[i])
            and is_solved(self.board, self.n)
        )

    def _step_info(self, info: dict[str, Any]) -> dict[str, Any]:
        return {
            "empty_cells": self.board.count(0),
            "refused": [dict(r) for r in self._refused],
            "action_is_effective": self.board != self._before,
        }

    # ------------------------------------------------------------------ text
    def _cell(self, i: int) -> str:
        r, c = divmod(i, self.n)
        return f"R{r + 1}C{c + 1}"

    def _unit(self, i: int, j: int) -> str:
        (ri, ci), (rj, cj) = divmod(i, self.n), divmod(j, self.n)
        return "row" if ri == rj else ("column" if ci == cj else "box")

    def _rows(self, flat: Sequence[int]) -> list[list[int]]:
        return [list(flat[r * self.n : (r + 1) * self.n]) for r in range(self.n)]

    def _state_text(self) -> str:
        if not self.board:
            return "The puzzle is not set up yet; call reset()."
        n, b = self.n, self.b
        w = len(str(n)) + 1  # column width: "C1".."C9", "C16"
        label = len(f"R{n}") + 1

        def line(cells: list[str]) -> str:
            groups = [" ".join(x.rjust(w) for x in cells[k : k + b]) for k in range(0, n, b)]
            return " | ".join(groups)

        header = " " * label + line([f"C{c + 1}" for c in range(n)])
        separator = " " * label + "".join("+" if ch == "|" else "-" for ch in line([""] * n))
        lines = [header]
        for r in range(n):
            if r and r % b == 0:
                lines.append(separator)
            cells = [str(v) if v else "." for v in self.board[r * n : (r + 1) * n]]
            lines.append(f"R{r + 1}".ljust(label) + line(cells))
        lines.append(f"Empty cells: {self.board.count(0)}")
        return "\n".join(lines)

    def _observation_text(self, notice: str | None) -> str:
        # The board comes last and the lines above it are capped (`listed_refusals`), so no response can push
        # the board or the notice out of the observation.
        parts = listed_refusals([self._refusal_line(r) for r in self._refused])
        if notice:
            parts.append(notice)
        parts.append(self._state_text())
        return "\n".join(parts)

    @staticmethod
    def _refusal_line(refusal: dict[str, str]) -> str:
        """One refusal; only a well-formed placement is echoed, any other piece is summarised, never repeated."""
        if refusal["action"] and ACTION_PATTERN.fullmatch(refusal["action"]):
            return f"Refused {refusal['action']}: {refusal['reason']}."
        return f"Refused a piece of your answer: {refusal['reason']}."

    def _task_instructions(self) -> str:
        n, b = self.n, self.b
        return (
            f"Fill the {n}x{n} grid so that every row, every column and every {b}x{b} box holds each digit "
            f"1-{n} exactly once. Empty cells are shown as '.'; the digits shown at the start are given and "
            "cannot be changed.\n"
            "An action places one digit: R<row>C<col>=<digit>, rows numbered 1 (top) to "
            f"{n}, columns 1 (left) to {n}, e.g. R2C3=4. R<row>C<col>=0 erases a digit you placed; you may also "
            "overwrite your own digits.\n"
            "A placement that is malformed, out of range, on a given cell, or that puts a digit already in its "
            "row, column or box is refused: the grid does not change.\n"
            f"Reward: {SOLVED_REWARD:g} when the grid is solved, 0 otherwise."
        )

    def _answer_example(self) -> str:
        examples = ["R1C2=3", "R4C1=2"]
        return f" {protocol.ACTION_SEPARATOR} ".join(examples[: min(2, self.max_actions_per_turn)])

    # ------------------------------------------------------------------ oracle
    @property
    def solution(self) -> list[list[int]]:
        """The unique solution of the episode's puzzle, as rows."""
        if not self._solution:
            raise RuntimeError("call reset() before asking for the solution")
        return self._rows(self._solution)

    def _plan(self) -> list[tuple[str, str]]:
        """(placement, reasoning) pairs that solve the board from the current state.

        Wrong digits are replaced first when the right digit fits, else erased (two wrong digits may block
        each other); empty cells are filled by naked singles first (the cell with the fewest candidates),
        then hidden singles, then from the solution, each on the board the earlier placements leave.
        """
        if not self._solution:
            raise RuntimeError("call reset() before asking the oracle")
        n = self.n
        board = list(self.board)
        plan: list[tuple[str, str]] = []
        p = peers(n)
        while board != self._solution:
            wrong = [i for i in range(n * n) if board[i] and board[i] != self._solution[i]]
            step = None
            for i in wrong:
                s = self._solution[i]
                if all(board[j] != s for j in p[i]):
                    step = (i, s, f"{self._cell(i)} should be {s}, not {board[i]}.")
                    break
            if step is None and wrong:
                i = wrong[0]
                step = (i, 0, f"{self._cell(i)} = {board[i]} is wrong; erase it.")
            if step is None:
                step = self._next_fill(board)
            i, v, why = step
            board[i] = v
            plan.append((f"{self._cell(i)}={v}", why))
        return plan

    def _next_fill(self, board: list[int]) -> tuple[int, int, str]:
        n = self.n
        empty = [i for i in range(n * n) if board[i] == 0]
        cands = {i: candidates(board, n, i) for i in empty}
        i = min(empty, key=lambda k: (len(cands[k]), k))
        if len(cands[i]) == 1:
            seen = sorted({board[j] for j in peers(n)[i] if board[j]})
            return i, cands[i][0], f"{self._cell(i)} sees {' '.join(map(str, seen))}, so {cands[i][0]}."
        b = self.b
        units = [("row", lambda k, r=r: k // n == r) for r in range(n)]
        units += [("column", lambda k, c=c: k % n == c) for c in range(n)]
        units += [("box", lambda k, q=q: (k // n // b) * b + (k % n) // b == q) for q in range(n)]
        for kind, member in units:
            for d in range(1, n + 1):
                spots = [k for k in empty if member(k) and d in cands[k]]
                if len(spots) == 1 and self._solution[spots[0]] == d:
                    k = spots[0]
                    return k, d, f"{d} fits only {self._cell(k)} in its {kind}."
        return i, self._solution[i], f"{self._cell(i)} is {self._solution[i]}."

    def noise_answer(self, kind: str, rng: np.random.Generator) -> str:
        """What a noisy demonstrator places instead of the oracle (`warm_start.noise_action`).

        ``"first"``, a habit that ignores what the reasoning read off the grid: the oracle's cell with the smallest
        digit that its row, column and box already hold (`R1C3=2` where the reasoning says "R1C3 sees 2 3 4, so
        1."), a placement the env refuses (-0.1, the board unchanged), so that the episode goes on; when the cell
        sees no digit, the smallest digit that is not its solution's. ``"random"``: a random placement the rules
        allow (`random_action`)."""
        if kind != "first":
            return super().noise_answer(kind, rng)
        plan = self._plan()
        if not plan:
            raise RuntimeError("the grid is solved: there is no placement to replace")
        m = ACTION_PATTERN.fullmatch(plan[0][0])
        assert m is not None  # the oracle writes R<row>C<col>=<digit>
        r, c, _ = (int(g) for g in m.groups())
        i = (r - 1) * self.n + (c - 1)
        seen = sorted({self.board[j] for j in peers(self.n)[i] if self.board[j]})
        digit = seen[0] if seen else min(d for d in range(1, self.n + 1) if d != self._solution[i])
        return f"{self._cell(i)}={digit}"

    def random_action(self, rng: np.random.Generator) -> str:
        """A uniformly random placement that the env accepts on the current board (the random-action hook).

        Sudoku has no fixed list of actions (`ACTIONS`); this is its "random valid action", the analogue of a
        random direction in the grid games: an empty cell drawn uniformly among those with at least one digit
        that its row, column and box do not hold yet, then one of those digits uniformly, e.g. `R2C3=4`. It
        follows the rules but not the solution, so it is often wrong (right by chance when the cell has one
        candidate). When no empty cell has a candidate (earlier wrong digits block every one), it erases one
        of your own digits, drawn uniformly (`R2C3=0`), which is always accepted. Draws come only from `rng`.
        """
        if not self.board:
            raise RuntimeError("call reset() before asking for a random action")
        n = self.n
        open_cells = []
        for i in range(n * n):
            cands = candidates(self.board, n, i) if self.board[i] == 0 else []
            if cands:
                open_cells.append((i, cands))
        if open_cells:
            i, cands = open_cells[int(rng.integers(len(open_cells)))]
            return f"{self._cell(i)}={cands[int(rng.integers(len(cands)))]}"
        own = [i for i in range(n * n) if not self._given[i] and self.board[i] != 0]
        # Not empty: with no open cell the board has empty cells only if own digits block them, or none at all
        # (the grid is full and has at least one non-given cell, since a puzzle has fewer givens than cells).
        return f"{self._cell(own[int(rng.integers(len(own)))])}=0"

    def oracle(self) -> list[str]:
        """Placements (`R<row>C<col>=<digit>`) that solve the grid from the current state, in order."""
        return [a for a, _ in self._plan()]

    def oracle_step(self, reasoning: str = "full") -> tuple[str, list[str]]:
        """(reasoning, placements) for this turn: the oracle's next `max_actions_per_turn` placements (fewer when
        the budget is nearly spent) and one short sentence per placement, derived from the board."""
        plan = self._plan()[: self._actions_this_turn()]
        if not plan:
            return "The grid is solved.", []
        return " ".join(why for _, why in plan), [a for a, _ in plan]
