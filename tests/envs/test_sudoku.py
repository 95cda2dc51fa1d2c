"""Sudoku: the exact solver against brute-force enumeration, the unique-solution generator, the env's rules."""

from __future__ import annotations

import itertools
import re

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from observation_checks import assert_refusals_capped

import ragen_envs  # noqa: F401  (registers the ids)
from ragen_envs.protocol import FORMAT_PENALTY
from ragen_envs.sudoku import SudokuEnv, count_solutions, generate_puzzle, is_solved, singles_solve, solve
from ragen_envs.sudoku.generator import DIFFICULTY_GIVENS

EXAMPLES = 200


def _plain_valid(grid: list[int], n: int) -> bool:
    """A complete grid is valid: rows, columns and boxes are permutations of 1..n (a plain loop)."""
    b = int(n**0.5)
    rows = [grid[r * n : (r + 1) * n] for r in range(n)]
    units = rows + [[rows[r][c] for r in range(n)] for c in range(n)]
    corners = [(br, bc) for br in range(0, n, b) for bc in range(0, n, b)]
    units += [[rows[br + i][bc + j] for i in range(b) for j in range(b)] for br, bc in corners]
    return all(sorted(u) == list(range(1, n + 1)) for u in units)


def _all_4x4_grids() -> list[tuple[int, ...]]:
    """Every solved 4x4 grid, by brute force over the 24^4 choices of row permutations."""
    perms = list(itertools.permutations(range(1, 5)))
    grids = []
    for rows in itertools.product(perms, repeat=4):
        flat = [v for row in rows for v in row]
        if _plain_valid(flat, 4):
            grids.append(tuple(flat))
    return grids


GRIDS_4 = _all_4x4_grids()


def _brute_count(board: list[int]) -> int:
    return sum(all(b == 0 or b == g for b, g in zip(board, grid)) for grid in GRIDS_4)


def test_there_are_288_solved_4x4_grids():
    assert len(GRIDS_4) == 288  # the known count
    assert all(is_solved(list(g), 4) for g in GRIDS_4)


# Mostly empty cells, so that boards are often sparse, solvable or clash only in a box.
_CELL = st.one_of(st.just(0), st.just(0), st.just(0), st.integers(1, 4))


@given(st.lists(_CELL, min_size=16, max_size=16))
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_count_solutions_matches_brute_force_on_random_4x4_boards(board):
    """Random digits (often clashing) on random cells: the solver's count equals the enumeration's."""
    expected = _brute_count(board)
    assert count_solutions(board, 4, limit=1000) == expected
    assert count_solutions(board, 4) == min(expected, 2)
    solution = solve(board, 4)
    if expected == 0:
        assert solution is None
    else:
        assert tuple(solution) in GRIDS_4 and all(b in (0, s) for b, s in zip(board, solution))


def test_givens_that_clash_only_in_a_box_have_no_solution():
    board = [0] * 16
    board[0], board[5] = 1, 1  # R1C1 and R2C2: same box, different row and column
    assert _brute_count(board) == 0 and count_solutions(board, 4) == 0 and solve(board, 4) is None


@given(st.integers(0, 287), st.lists(st.booleans(), min_size=16, max_size=16))
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_count_solutions_on_masks_of_solved_grids(index, keep):
    """Boards dug out of a real grid always have >= 1 solution; the count is the enumeration's."""
    board = [v if k else 0 for v, k in zip(GRIDS_4[index], keep)]
    assert count_solutions(board, 4, limit=1000) == _brute_count(board) >= 1


@pytest.mark.parametrize("givens", [4, 6, 8, 10])
@pytest.mark.parametrize("technique", ["any", "singles"])
def test_generated_4x4_puzzles_are_unique_by_brute_force(givens, technique):
    rng = np.random.default_rng(givens)
    for _ in range(15):
        puzzle, solution = generate_puzzle(rng, 4, givens, technique)
        assert sum(v != 0 for v in puzzle) == givens
        assert all(p in (0, s) for p, s in zip(puzzle, solution)) and _plain_valid(solution, 4)
        assert _brute_count(puzzle) == 1  # unique, checked without the solver
        if technique == "singles":
            assert singles_solve(puzzle, 4) == solution


def test_generated_9x9_puzzles_are_unique_and_seeded():
    for givens, technique in ((36, "any"), (30, "singles")):
        puzzle, solution = generate_puzzle(np.random.default_rng(1), 9, givens, technique)
        assert sum(v != 0 for v in puzzle) == givens and _plain_valid(solution, 9)
        assert count_solutions(puzzle, 9) == 1 and solve(puzzle, 9) == solution
        assert generate_puzzle(np.random.default_rng(1), 9, givens, technique) == (puzzle, solution)
    # two blanks in one row of a solved grid: one completion; the empty board: the count stops at the limit
    board = list(solve([0] * 81, 9))
    board[0] = board[1] = 0
    assert count_solutions(board, 9) == 1
    assert count_solutions([0] * 81, 9) == 2 and count_solutions([0] * 81, 9, limit=5) == 5


def test_singles_solver_refuses_a_puzzle_that_needs_guessing():
    # An empty 4x4 board has 288 solutions: singles make no progress, and must not claim a solution.
    assert singles_solve([0] * 16, 4) is None


@pytest.mark.parametrize("bad", [dict(size=5), dict(size=4, givens=3), dict(size=9, givens=10), dict(givens=17),
                                 dict(difficulty="extreme"), dict(technique="x-wing"), dict(max_actions=0),
                                 dict(size=True)])
def test_bad_arguments_are_value_errors(bad):
    with pytest.raises(ValueError):
        SudokuEnv(**bad)


def _respond(*actions: str) -> str:
    return "<think>t</think><answer>" + " || ".join(actions) + "</answer>"


@pytest.mark.parametrize("kwargs", [{}, dict(difficulty="hard"), dict(size=9, givens=40, max_actions=None)])
def test_the_oracle_solves_every_level(kwargs):
    env = SudokuEnv(**kwargs)
    for seed in range(6 if kwargs.get("size") != 9 else 2):
        _, info = env.reset(seed=seed)
        givens = DIFFICULTY_GIVENS[env.n][env.difficulty] if "givens" not in kwargs else kwargs["givens"]
        assert info["givens"] == givens and info["empty_cells"] == env.n**2 - givens
        total, done = 0.0, False
        while not done:
            _, actions = env.oracle_step()
            _, r, term, trunc, info = env.step(_respond(*actions))
            total += r
            done = term or trunc
        assert term and info["success"] and total == 1.0
        assert env.board == [v for row in env.solution for v in row]


def _fresh(seed=0, **kw) -> SudokuEnv:
    env = SudokuEnv(**kw)
    env.reset(seed=seed)
    return env


def _empty_and_given(env: SudokuEnv) -> tuple[int, int]:
    empty = env.board.index(0)
    given = next(i for i, v in enumerate(env.puzzle) if v)
    return empty, given


def _name(env, i, v):
    r, c = divmod(i, env.n)
    return f"R{r + 1}C{c + 1}={v}"


def test_action_spellings():
    env = _fresh()
    i, _ = _empty_and_given(env)
    r, c = divmod(i, 4)
    right = env._solution[i]
    for spelling in (f"R{r + 1}C{c + 1}={right}", f"r{r + 1}c{c + 1}={right}", f" R{r + 1} C{c + 1} = {right} ",
                     f"r{r + 1}C{c + 1} ={right}"):
        env._begin_step()
        assert env._match_action(spelling) == f"R{r + 1}C{c + 1}={right}", spelling
    for bad in (f"R0{r + 1}C{c + 1}={right}", f"R{r + 1}C{c + 1}=0{right}", f"R{r + 1}C{c + 1}={chr(0x660 + right)}",
                f"R{r + 1}C{c + 1}={chr(0xFF10 + right)}", f"R{r + 1},C{c + 1}={right}", f"({r + 1},{c + 1})={right}",
                f"{r + 1},{c + 1},{right}", f"place {right} at row {r + 1} col {c + 1}", f"R{r + 1}C{c + 1}:{right}",
                f"R{r + 1}C{c + 1}={right}.", f"R{r + 1}C{c + 1}={right}{right}", f"Row{r + 1}Col{c + 1}={right}"):
        env._begin_step()
        assert env._match_action(bad) is None, bad


def test_refused_placements_cost_the_penalty_and_leave_the_board_unchanged():
    env = _fresh(seed=3)
    empty, given = _empty_and_given(env)
    r, c = divmod(empty, 4)
    row_digits = {env.board[r * 4 + k] for k in range(4)} - {0}
    clash = min(row_digits)
    cases = [
        _name(env, given, env.puzzle[given] % 4 + 1),  # a given cell
        _name(env, given, env.puzzle[given]),  # a given cell, its own digit
        "R5C1=1", "R1C5=1", "R1C1=5",  # out of range
        _name(env, empty, clash),  # clash in the row
        _name(env, empty, 0),  # erase an empty cell
    ]
    for action in cases:
        before = list(env.board)
        obs, reward, term, trunc, info = env.step(_respond(action))
        assert reward == pytest.approx(FORMAT_PENALTY) and not info["action_is_valid"], action
        assert env.board == before and not info["action_is_effective"] and info["refused"], action
        assert "Refused" in obs and "unchanged" in obs


def test_a_clash_within_one_answer_is_refused_and_the_first_placement_stays():
    env = _fresh(seed=5)
    empties = [i for i, v in enumerate(env.board) if v == 0]
    # two empty cells of one row, the same digit in both
    a, b = next((a, b) for a in empties for b in empties if a < b and a // 4 == b // 4)
    digit = env._solution[a]
    _, reward, _, _, info = env.step(_respond(_name(env, a, digit), _name(env, b, digit)))
    assert reward == pytest.approx(FORMAT_PENALTY)
    assert info["actions_executed"] == [_name(env, a, digit)] and env.board[a] == digit and env.board[b] == 0
    assert "same row" in info["refused"][0]["reason"]


def test_overwrite_and_erase_own_digits_but_success_only_for_the_solution():
    env = _fresh(seed=2, difficulty="hard")
    empties = [i for i, v in enumerate(env.board) if v == 0]
    # find a wrong digit that does not clash at some empty cell
    from ragen_envs.sudoku.solver import candidates

    i, wrong = next((i, d) for i in empties for d in candidates(env.board, 4, i) if d != env._solution[i])
    _, reward, _, _, info = env.step(_respond(_name(env, i, wrong)))
    assert reward == 0.0 and env.board[i] == wrong and info["action_is_valid"]
    _, reward, _, _, info = env.step(_respond(_name(env, i, 0)))
    assert reward == 0.0 and env.board[i] == 0
    env.step(_respond(_name(env, i, wrong)))
    # the oracle corrects the wrong digit and still solves the puzzle
    plan = env.oracle()
    cell = _name(env, i, 0).split("=")[0]
    assert any(a.split("=")[0] == cell for a in plan)
    total = 0.0
    for action in plan:
        _, r, term, _, info = env.step(_respond(action))
        total += r
    assert term and info["success"] and total == 1.0


def test_success_is_judged_by_the_rules():
    env = _fresh(seed=4)
    env.board = list(env._solution)
    assert env._is_success()
    env.board[env.board.index(env._solution[0])] = 0
    assert not env._is_success()
    # a valid complete grid that changes a given is not success (impossible through actions; checked anyway)
    other = next(g for g in GRIDS_4 if list(g) != env._solution)
    env.board = list(other)
    assert not env._is_success()


def test_options_puzzle_and_bad_puzzles():
    env = SudokuEnv()
    grid = GRIDS_4[17]
    puzzle, _ = generate_puzzle(np.random.default_rng(9), 4, 6)
    rows = ["".join(str(v) if v else "." for v in puzzle[r * 4 : (r + 1) * 4]) for r in range(4)]
    obs, info = env.reset(seed=0, options={"puzzle": rows})
    assert env.puzzle == puzzle and info["givens"] == 6
    with pytest.raises(ValueError, match="exactly one solution"):
        env.reset(options={"puzzle": [0] * 16})
    with pytest.raises(ValueError):
        env.reset(options={"puzzle": ["12", "34"]})
    with pytest.raises(ValueError):
        env.reset(options={"puzzle": [list(grid[:4]), list(grid[4:8]), list(grid[8:12]), [1, 2, 3, 9]]})


def test_text_observation_and_registration():
    env = gym.make("ragen/Sudoku-v0")
    obs, info = env.reset(seed=0)
    lines = obs.splitlines()
    assert lines[0].split() == ["C1", "C2", "|", "C3", "C4"] and lines[1].startswith("R1")
    assert lines[-1] == f"Empty cells: {info['empty_cells']}" and "R<row>C<col>=<digit>" in info["instructions"]
    env9 = gym.make("ragen/Sudoku-v0", size=9, givens=40)
    obs9, _ = env9.reset(seed=0)
    assert obs9.splitlines()[0].split()[:4] == ["C1", "C2", "C3", "|"] and obs9.count("R9") == 1


def _plain_candidates(board: list[int], n: int, i: int) -> list[int]:
    """Digits cell i may take: those absent from its row, column and box (plain loops, not the solver's peers)."""
    b = int(n**0.5)
    r, c = divmod(i, n)
    seen = {board[r * n + k] for k in range(n)} | {board[k * n + c] for k in range(n)}
    br, bc = r - r % b, c - c % b
    seen |= {board[(br + x) * n + bc + y] for x in range(b) for y in range(b)}
    return [d for d in range(1, n + 1) if d not in seen]


def _accepted(env: SudokuEnv, action: str) -> bool:
    """Whether `action` is accepted on env's current board (stepped on a twin with the same puzzle and board, so
    env is untouched; a deepcopy of the env takes seconds)."""
    twin = SudokuEnv(size=env.n)
    twin.reset(options={"puzzle": env._rows(env.puzzle)})
    twin.board = list(env.board)
    _, _, _, _, info = twin.step(_respond(action))
    return bool(info["action_is_valid"]) and not info["refused"] and info["actions_executed"] == [action]


def test_random_action_is_uniform_over_open_cells_then_their_candidates():
    env = _fresh(seed=7, difficulty="hard")  # 10 empty cells, most with several candidates
    open_cells = {i: _plain_candidates(env.board, 4, i) for i, v in enumerate(env.board) if v == 0}
    open_cells = {i: c for i, c in open_cells.items() if c}
    expected = {_name(env, i, d): 1 / (len(open_cells) * len(c)) for i, c in open_cells.items() for d in c}
    assert len(expected) > len(open_cells)  # some cell has a choice of digits, so the two stages are tested
    rng, draws = np.random.default_rng(0), 8000
    counts: dict[str, int] = {}
    for _ in range(draws):
        a = env.random_action(rng)
        counts[a] = counts.get(a, 0) + 1
    assert set(counts) == set(expected)
    for a, p in expected.items():  # each count within 5 binomial standard deviations of draws * p
        assert abs(counts[a] - draws * p) < 5 * (draws * p * (1 - p)) ** 0.5, (a, counts[a], draws * p)
    assert all(_accepted(env, a) for a in expected)
    with pytest.raises(RuntimeError, match="reset"):
        SudokuEnv().random_action(rng)


def test_random_action_erases_an_own_digit_when_no_empty_cell_can_take_one():
    # A full board (the solution) and a blocked one (own, rule-abiding digits that leave an empty cell with no
    # candidate): the random action erases one of the player's digits, uniformly, and the env accepts it.
    env = _fresh(seed=1, difficulty="hard")
    rng = np.random.default_rng(3)
    blocked = None
    for seed in range(200):  # random rule-abiding fills until one gets stuck with empty cells left
        board, fill = list(env.puzzle), np.random.default_rng(seed)
        while True:
            spots = [(i, c) for i, v in enumerate(board) if v == 0 for c in [_plain_candidates(board, 4, i)] if c]
            if not spots:
                break
            i, c = spots[int(fill.integers(len(spots)))]
            board[i] = c[int(fill.integers(len(c)))]
        if 0 in board:
            blocked = board
            break
    assert blocked is not None
    for board in (list(env._solution), blocked):
        env.board = list(board)
        own = [i for i in range(16) if not env._given[i] and board[i]]
        counts = {_name(env, i, 0): 0 for i in own}
        for _ in range(100 * len(own)):
            a = env.random_action(rng)
            counts[a] += 1  # KeyError if it is anything but erasing an own digit
        assert min(counts.values()) > 50  # each of the len(own) erasures near 100 draws (p = 1/len(own))
        assert all(_accepted(env, a) for a in counts)


# ----------------------------------------------------------------------------------------------- hostile answers
def _grid_in_text(text: str, n: int) -> list[int] | None:
    """The grid an observation shows, read back from its row lines (`R3   .  1  |  .  .`) without the env's
    renderer; None unless rows R1..Rn each appear once with n cells."""
    rows: dict[int, list[int]] = {}
    for line in text.splitlines():
        m = re.match(r"R(\d+)\s(.*)$", line)
        if m:
            cells = re.findall(r"\d+|\.", m.group(2))
            if int(m.group(1)) in rows or len(cells) != n:
                return None
            rows[int(m.group(1))] = [0 if c == "." else int(c) for c in cells]
    if sorted(rows) != list(range(1, n + 1)):
        return None
    return [v for r in range(1, n + 1) for v in rows[r]]


_HOSTILE_PIECES = st.sampled_from(
    ["x", "", "lorem ipsum dolor", "R9C9=9", "R1C1=0", "R0C1=1", "r1c1=1", "solve", "R1C1==1", "R1C2=3"]
)


@given(seed=st.integers(0, 50), pieces=st.lists(_HOSTILE_PIECES, min_size=1, max_size=30),
       repeat=st.integers(1, 600), oracle_first=st.booleans())
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_the_grid_and_the_notice_survive_any_number_of_refused_pieces(seed, pieces, repeat, oracle_first):
    """Thousands of refused pieces (up to the response limit) list at most 5 refusals and a count; the grid read
    back from the observation is the env's board, the last line counts its empty cells, and when nothing ran
    the notice stands right above the grid."""
    env = _fresh(seed=seed)
    answer = " || ".join(pieces * repeat)
    if oracle_first:
        answer = f"{env.oracle()[0]} || {answer}"
    obs, _, _, _, info = env.step(f"<think>t</think><answer>{answer}</answer>")
    lines = obs.splitlines()
    assert _grid_in_text(obs, 4) == env.board
    assert lines[-1] == f"Empty cells: {env.board.count(0)}"
    assert_refusals_capped(lines, info)
    if not info["actions_executed"]:
        header = next(i for i, line in enumerate(lines) if line.split()[:1] == ["C1"])
        assert lines[header - 1] == "Your answer had no valid action; the state is unchanged."
    assert len(obs) < 1_000


def test_x_pipes_300_times_keeps_the_grid_and_the_notice():
    """The reported response: 300 refused pieces once left 16,384 characters of refusals and no grid."""
    env = _fresh(seed=0)
    obs, reward, _, _, info = env.step("<think>t</think><answer>" + "x||" * 300 + "</answer>")
    assert len(info["refused"]) == 300 and reward == pytest.approx(FORMAT_PENALTY)
    assert _grid_in_text(obs, 4) == env.board == list(env.puzzle)
    assert "Your answer had no valid action; the state is unchanged." in obs
    assert "... and 295 more refused pieces of your answer." in obs
