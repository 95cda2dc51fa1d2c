"""The game rules of the envs against independent references written here: plain loops, exhaustive search,
Gymnasium's own FrozenLake, Python's own arithmetic. Also the demonstrators' reasoning, which must state what
the env's rules do (a demonstration that names a cell off the map, or a move that a wall blocks, teaches a
falsehood)."""

from __future__ import annotations

import ast
import re
from collections import deque
from fractions import Fraction
from functools import cache

import numpy as np
import pytest
from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv as GymFrozenLake

from ragen_envs.countdown.expression import ExpressionError, parse_expression
from ragen_envs.countdown.solver import CountdownSolver
from ragen_envs.frozenlake import FrozenLakeEnv
from ragen_envs.game2048.rules import DIRECTIONS, legal_moves
from ragen_envs.pocketcube import cube as C
from ragen_envs.pocketcube.env import PocketCubeEnv
from ragen_envs.sokoban.env import SokobanEnv
from ragen_envs.sokoban.generator import SokobanGenerator
from ragen_envs.sudoku.env import SudokuEnv, parse_board

OFFSETS = {"Up": (-1, 0), "Down": (1, 0), "Left": (0, -1), "Right": (0, 1)}
CELL = re.compile(r"\((-?\d+), (-?\d+)\)")


def answer(*actions: str) -> str:
    return f"<think>plan</think><answer>{' || '.join(actions)}</answer>"


# ============================================================================ Sokoban
def plain_sokoban_step(walls, player, boxes, action):
    """The rule as a plain loop over tuples: walk onto floor; push one box onto free floor; else stay."""
    h, w = walls.shape
    dr, dc = OFFSETS[action]

    def floor(cell):
        return 0 <= cell[0] < h and 0 <= cell[1] < w and not walls[cell]

    nxt = (player[0] + dr, player[1] + dc)
    if not floor(nxt):
        return player, boxes
    if nxt in boxes:
        beyond = (nxt[0] + dr, nxt[1] + dc)
        if not floor(beyond) or beyond in boxes:
            return player, boxes
        return nxt, (boxes - {nxt}) | {beyond}
    return nxt, boxes


def plain_bfs_length(level) -> int | None:
    """Fewest steps to put every box on a target: breadth-first over (player, boxes), no pruning at all."""
    start = (level.player, frozenset(level.boxes))
    seen = {start}
    frontier = deque([(start, 0)])
    while frontier:
        (player, boxes), d = frontier.popleft()
        if boxes == level.targets:
            return d
        for action in OFFSETS:
            nxt = plain_sokoban_step(level.walls, player, boxes, action)
            if nxt not in seen:
                seen.add(nxt)
                frontier.append((nxt, d + 1))
    return None


@pytest.mark.parametrize(("dims", "boxes", "count"), [((5, 5), 1, 12), ((6, 6), 1, 12), ((6, 6), 2, 6)])
def test_generated_levels_have_the_stated_optimal_length_by_plain_bfs(dims, boxes, count):
    gen = SokobanGenerator(dims, boxes)
    rng = np.random.default_rng(31)
    for _ in range(count):
        item = gen.generate(rng)
        assert plain_bfs_length(item.level) == item.optimal_steps, item.level.to_xsb()


def read_grid(text: str) -> dict:
    """The pieces of a RAGEN grid, read character by character (independent of the env's own parser)."""
    walls, targets, boxes, players = set(), set(), set(), []
    for r, line in enumerate(text.split("\n")):
        for c, ch in enumerate(line):
            if ch == "#":
                walls.add((r, c))
            if ch in "O√S":
                targets.add((r, c))
            if ch in "X√":
                boxes.add((r, c))
            if ch in "PS":
                players.append((r, c))
    return {"walls": walls, "targets": targets, "boxes": boxes, "players": players}


def read_coords(line: str, label: str) -> set[tuple[int, int]]:
    assert line.startswith(label + ": "), line
    return {(int(r), int(c)) for r, c in CELL.findall(line)}


def test_random_play_the_text_shows_the_state_and_the_reward_only_pays_a_real_solution():
    """After every step of random play: the grid and the coordinate lines of the observation, read back, are the
    state of a plain-loop simulation; +10 comes exactly on the step that puts the last box on a target."""
    env = SokobanEnv(dim_room=(7, 7), num_boxes=2, max_actions=None)
    rng = np.random.default_rng(3)
    for seed in range(8):
        obs, _ = env.reset(seed=seed)
        level = env.current_level()
        player, boxes = level.player, frozenset(level.boxes)
        region = level.region()
        for _ in range(80):
            action = list(OFFSETS)[int(rng.integers(4))]
            player, new_boxes = plain_sokoban_step(level.walls, player, boxes, action)
            on = len(new_boxes & level.targets) - len(boxes & level.targets)
            solved = new_boxes == level.targets
            boxes = new_boxes
            obs, reward, term, trunc, _ = env.step(answer(action))
            assert reward == pytest.approx(-0.1 + on + 10.0 * solved)
            assert term == solved and not trunc
            lines = obs.split("\n")
            assert lines[0] == "Board size: 7 rows x 7 cols (zero-indexed)."
            assert read_coords(lines[1], "Targets") == set(level.targets)
            assert read_coords(lines[2], "Boxes") == set(boxes)
            assert read_coords(lines[3], "Player") == {player}
            assert lines[4] == "Grid Map:"
            grid = read_grid("\n".join(lines[5:]))
            assert grid["players"] == [player] and grid["boxes"] == set(boxes)
            assert grid["targets"] == set(level.targets)
            shown_wall = {(r, c) for r in range(7) for c in range(7) if level.walls[r, c] or not region[r, c]}
            assert grid["walls"] == shown_wall - set(boxes) - {player} - set(level.targets)
            if term:
                break


def test_pushing_two_boxes_into_a_wall_or_off_a_target_follows_the_rules():
    env = SokobanEnv(max_actions=None)
    env.reset(options={"level": "#######\n#@$$ .#\n#  *  #\n#    .#\n#######"})
    _, r, _, _, _ = env.step(answer("Right"))  # two boxes in a row: nothing moves
    assert r == pytest.approx(-0.1) and env.player_position == (1, 1) and (1, 2) in env.box_positions
    env.reset(options={"level": "#####\n#@$##\n# *.#\n#####"})
    _, r, _, _, _ = env.step(answer("Right"))  # box against a wall
    assert r == pytest.approx(-0.1) and env.player_position == (1, 1)
    env.step(answer("Down"))
    _, r, term, _, _ = env.step(answer("Right"))  # from one target onto the next: -1 + 1, not solved
    assert r == pytest.approx(-0.1) and not term and set(env.box_positions) == {(1, 2), (2, 3)}


def check_sokoban_reasoning(env: SokobanEnv, text: str, action: str) -> bool:
    """What the full reasoning says about `action` is what the env's step then does; returns the episode's end."""
    before, boxes_before = env.player_position, set(env.box_positions)
    _, _, term, trunc, _ = env.step(answer(action))
    after, boxes_after = env.player_position, set(env.box_positions)
    for r, c in CELL.findall(text):
        assert 0 <= int(r) < env.current_level().shape[0] and 0 <= int(c) < env.current_level().shape[1], text
    word = action.lower()
    if f"I move {word} to " in text:
        target = CELL.findall(text.split(f"I move {word} to ")[1])[0]
        assert after == tuple(map(int, target)) and boxes_after == boxes_before, text
    elif f"Moving {word} pushes the box to " in text:
        target = tuple(map(int, CELL.findall(text.split("pushes the box to ")[1])[0]))
        assert after != before and target in boxes_after - boxes_before, text
    else:
        assert "walks into a wall" in text or "cannot push the box" in text, text
        assert after == before and boxes_after == boxes_before, text
    return term or trunc


def test_sokoban_demonstrations_say_what_the_move_does():
    env = SokobanEnv(dim_room=(6, 6), num_boxes=1, max_actions=None)
    rng = np.random.default_rng(0)
    blocked = 0
    for seed in range(25):
        env.reset(seed=seed)
        for _ in range(6):
            text, acts = env.random_step(rng)
            blocked += "walks into a wall" in text or "cannot push" in text
            if check_sokoban_reasoning(env, text, acts[0]):
                break
    assert blocked > 10  # the blocked case was exercised
    env.reset(options={"level": "####\n#@$.\n####"})
    text = env._move_reasoning(["Up"])
    assert "walks into a wall" in text and "(0, 1)" not in text
    env.reset(options={"level": "#####\n#@$$.\n#  .#\n#####"})
    assert "cannot push the box at (1, 2)" in env._move_reasoning(["Right"])
    assert "Right is blocked." in env._plan_reasoning([], ["Right"])


# ============================================================================ FrozenLake
@pytest.mark.parametrize(("slippery", "success_rate"), [(True, 0.8), (True, 1 / 3), (False, 0.8)])
def test_frozenlake_trajectories_equal_gymnasiums_own_env(slippery, success_rate):
    """Same map, same start, same random stream: every step of ours equals Gymnasium's FrozenLake step."""
    rng = np.random.default_rng(11)
    for episode in range(30):
        env = FrozenLakeEnv(size=5, p=0.8, is_slippery=slippery, success_rate=success_rate, max_actions=None,
                            max_actions_per_turn=1)
        env.reset(seed=episode)
        gym_env = GymFrozenLake(desc=env.desc, is_slippery=slippery, success_rate=success_rate)
        gym_env.reset(seed=0)
        gym_env.s = env.s
        gym_env.np_random.bit_generator.state = env.np_random.bit_generator.state
        for _ in range(40):
            a = int(rng.integers(4))
            gs, greward, gterm, _, ginfo = gym_env.step(a)
            _, reward, term, _, info = env.step(answer(("Left", "Down", "Right", "Up")[a]))
            assert (env.s, reward, term) == (gs, greward, gterm)
            assert info["prob"] == pytest.approx(ginfo["prob"])
            if term:
                assert info["success"] == (env.desc[gs // env.ncol][gs % env.ncol] == "G")
                break


# ============================================================================ 2048
def plain_can_move(board: np.ndarray) -> bool:
    """A move exists iff a cell is empty or two neighbours are equal."""
    n = board.shape[0]
    return bool((board == 0).any()) or any(
        board[r, c] == board[r2, c2]
        for r in range(n) for c in range(n) for r2, c2 in ((r + 1, c), (r, c + 1)) if r2 < n and c2 < n
    )


def test_2048_game_over_detection_matches_the_plain_rule():
    rng = np.random.default_rng(4)
    over = 0
    for _ in range(400):
        n = int(rng.integers(2, 5))
        board = 2 ** rng.integers(0, 4, size=(n, n))
        board[rng.random((n, n)) < 0.05] = 0
        board[board == 1] = 0 if rng.random() < 0.3 else 2
        moves = legal_moves(board)
        assert bool(moves) == plain_can_move(board), board
        assert set(moves) <= set(DIRECTIONS)
        over += not moves
    assert over > 5


# ============================================================================ Pocket cube
def dbl_corner_home(state: np.ndarray) -> bool:
    return bool((state[C.CORNER_FACELETS[7]] == C.SOLVED[C.CORNER_FACELETS[7]]).all())


@pytest.mark.parametrize("scramble", ["R U F'", "U2 R", "D", "L U", "B2 R'", "R D'"])
def test_pocket_cube_instructions_claim_the_dbl_corner_in_place_only_when_it_is(scramble):
    env = PocketCubeEnv()
    _, info = env.reset(seed=0, options={"scramble": scramble})
    claims = "starts in place" in info["instructions"]
    assert claims == dbl_corner_home(env.state), (scramble, claims)
    _, info = env.reset(seed=0)  # a drawn level: U, R, F only, and the note is back
    assert "starts in place" in info["instructions"] and dbl_corner_home(env.state)


# ============================================================================ Sudoku
def plain_sudoku_ok(grid: list[list[int]]) -> bool:
    n = len(grid)
    b = int(n**0.5)
    units = [row for row in grid] + [[grid[r][c] for r in range(n)] for c in range(n)]
    corners = [(br, bc) for br in range(0, n, b) for bc in range(0, n, b)]
    units += [[grid[br + i][bc + j] for i in range(b) for j in range(b)] for br, bc in corners]
    return all(sorted(u) == list(range(1, n + 1)) for u in units)


def test_sudoku_solutions_pass_a_plain_checker_and_keep_the_givens():
    for seed in range(6):
        env = SudokuEnv(size=4 if seed % 2 else 9, difficulty="easy")
        env.reset(seed=seed)
        sol = env.solution
        assert plain_sudoku_ok(sol)
        assert all(p in (0, s) for p, s in zip(env.puzzle, sum(sol, [])))


@pytest.mark.parametrize("bad", [2.5, np.float32(1.5), True, np.True_, Fraction(5, 2), float("inf"), float("nan")])
@pytest.mark.parametrize("form", ["rows", "flat", "array"])
def test_a_puzzle_cell_that_is_no_whole_digit_is_refused_not_truncated(bad, form):
    board = [[bad, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
    if form == "flat":
        board = sum(board, [])
    elif form == "array":
        board = np.array(board, dtype=object)
    with pytest.raises(ValueError, match="board cells must be digits"):
        parse_board(board, 4)


def test_whole_numbers_of_any_type_still_parse():
    for v in (2, 2.0, np.int64(2), np.float64(2.0), Fraction(4, 2), "2"):
        assert parse_board([[v, 0, 0, 0]] + [[0] * 4] * 3, 4)[0] == 2


# ============================================================================ Countdown
def python_value(text: str) -> Fraction:
    """Python's own evaluation of the same arithmetic, exact: each integer literal becomes a Fraction."""
    tree = ast.parse(text, mode="eval")

    class Exact(ast.NodeTransformer):
        def visit_Constant(self, node):
            return ast.Call(ast.Name("Fraction", ast.Load()), [node], [])

    tree = ast.fix_missing_locations(Exact().visit(tree))
    return eval(compile(tree, "<expr>", "eval"), {"Fraction": Fraction, "__builtins__": {}})


def random_expression(rng: np.random.Generator, depth: int) -> str:
    if depth == 0 or rng.random() < 0.25:
        return str(int(rng.integers(0, 12)))
    left, right = random_expression(rng, depth - 1), random_expression(rng, depth - 1)
    text = f"{left} {'+-*/'[int(rng.integers(4))]} {right}"
    if rng.random() < 0.15:
        text = f"-({text})"
    return f"({text})" if rng.random() < 0.6 else text


def test_countdown_parser_agrees_with_pythons_exact_arithmetic():
    rng = np.random.default_rng(8)
    zero_div = 0
    for _ in range(1500):
        text = random_expression(rng, 4)
        try:
            expected = python_value(text)
        except ZeroDivisionError:
            zero_div += 1
            with pytest.raises(ExpressionError, match="division by zero"):
                parse_expression(text)
            continue
        parsed = parse_expression(text)
        assert parsed.value == expected, text
        assert list(parsed.numbers) == [int(x) for x in re.findall(r"\d+", text)], text
    assert zero_div > 20
    # Float arithmetic would get these wrong; the env's exact rationals do not.
    assert parse_expression("8 / (3 - 8 / 3)").value == 24 and 8 / (3 - 8 / 3) != 24
    assert parse_expression("(1 / 3) * 3").value == 1


@cache
def brute_values(key: tuple[Fraction, ...]) -> frozenset[Fraction]:
    """Every value of an expression using each number of `key` exactly once (combine any two, repeat)."""
    if len(key) == 1:
        return frozenset(key)
    out: set[Fraction] = set()
    for i in range(len(key)):
        for j in range(i + 1, len(key)):
            a, b = key[i], key[j]
            rest = [key[k] for k in range(len(key)) if k not in (i, j)]
            for v in [a + b, a - b, b - a, a * b] + ([a / b] if b else []) + ([b / a] if a else []):
                out |= brute_values(tuple(sorted(rest + [v])))
    return frozenset(out)


def test_countdown_solver_claims_match_brute_force_on_five_numbers_with_zeros_and_repeats():
    rng = np.random.default_rng(21)
    unsolvable = 0
    for _ in range(6):
        nums = [int(x) for x in rng.integers(0, 6, size=5)]
        reachable = brute_values(tuple(sorted(Fraction(n) for n in nums)))
        solver = CountdownSolver(nums)
        for target in range(0, 70):
            expr = solver.solve(target)
            assert (expr is not None) == (Fraction(target) in reachable), (nums, target)
            if expr is None:
                unsolvable += 1
            else:
                value = python_value(expr)
                assert value == target and sorted(int(x) for x in re.findall(r"\d+", expr)) == sorted(nums)
    assert unsolvable > 20
