"""Reward integrity and reset options of the grid and puzzle envs (Sokoban, FrozenLake, 2048, Sudoku, Bandit).

The first part holds the defects a QA pass found, each test failing on the code before its fix:

- Sokoban: a `Level` object given as `options["level"]` skipped the XSB rules (a level with more targets than
  boxes paid the solve reward with a target empty; a player off the grid was an IndexError), and a level refused
  for its size had already replaced the running episode's room.
- Bandit: a refused `payoff_seed` had already drawn new arm names, so the old low arm's name was then paid as the
  high arm; arm names that no answer can match as shown (control characters, characters beyond the BMP) made an
  arm that could never be pulled.
- Sudoku: an `options["puzzle"]` built against the exact search kept reset busy for longer than any caller
  waits (now a ValueError past a search budget); the docstring's own example puzzle had no solution; the flat
  string form of a board was refused though the error offered it.

The second part records attempts of a reviewer that were already refused (no code change needed): action names
in other cases, scripts and spellings, numbers as actions, several answers, hidden actions, seeds at the bounds,
stepping and rendering after the end.
"""

from __future__ import annotations

import ast
import copy
import re
import time

import numpy as np
import pytest

from ragen_envs.bandit import BanditEnv
from ragen_envs.frozenlake.env import FrozenLakeEnv
from ragen_envs.game2048.env import Game2048Env
from ragen_envs.protocol import FORMAT_PENALTY
from ragen_envs.sokoban.env import SokobanEnv
from ragen_envs.sokoban.level import Level, parse_xsb
from ragen_envs.sudoku.env import PUZZLE_MAX_SEARCH_NODES, SudokuEnv, parse_board
from ragen_envs.sudoku.solver import SearchBudgetExceeded, count_solutions, random_solution


def T(answer: str) -> str:
    return f"<think>t</think><answer>{answer}</answer>"


# ------------------------------------------------------------------------------------------------ Sokoban
ONE_PUSH = "#####\n#@$.#\n#####"


@pytest.mark.parametrize(("level", "words"), [
    # one box, two targets: "solved" by one push with a target still empty (reward 10.9 before)
    (Level(np.zeros((3, 5), bool), frozenset({(1, 3), (0, 0)}), frozenset({(1, 2)}), (1, 1)), "targets"),
    # the player off the grid (an IndexError deep in numpy before)
    (Level(np.zeros((3, 5), bool), frozenset({(1, 3)}), frozenset({(1, 2)}), (5, 9)), "outside"),
    # the player standing on the box (the box was hidden under the player)
    (Level(np.zeros((3, 5), bool), frozenset({(1, 3)}), frozenset({(1, 2)}), (1, 2)), "stands on a box"),
    # a box in a wall
    (Level(np.array([[0, 0, 1, 0, 0]] * 3, bool), frozenset({(1, 3)}), frozenset({(1, 2)}), (1, 1)), "wall"),
])
def test_a_level_object_is_held_to_the_rules_of_xsb_text(level, words):
    env = SokobanEnv()
    with pytest.raises(ValueError, match=words):
        env.reset(seed=0, options={"level": level})


def test_a_valid_level_object_still_loads_and_plays():
    env = SokobanEnv()
    env.reset(seed=0, options={"level": parse_xsb(ONE_PUSH)})
    _, reward, terminated, _, info = env.step(T("Right"))
    assert terminated and info["success"] and reward == pytest.approx(10.9)


def test_a_sokoban_level_refused_for_its_size_leaves_the_episode_as_it_was():
    env = SokobanEnv()
    env.reset(seed=1)
    env.step(T("Left"))
    twin = copy.deepcopy(env)
    rows = ["#" * 130] + ["#@$." + "_" * 125 + "#"] + ["#" + "_" * 128 + "#"] * 125 + ["#" * 130]
    with pytest.raises(ValueError, match="over 16384 characters"):
        env.reset(options={"level": "\n".join(rows)})
    assert env.to_xsb() == twin.to_xsb()
    for answer in ("Up", "Down || Right", "Left"):
        a, b = env.step(T(answer)), twin.step(T(answer))
        assert a[:4] == b[:4]


# ------------------------------------------------------------------------------------------------ Bandit
def test_a_refused_payoff_seed_leaves_the_arms_and_their_payoffs_as_they_were():
    env = BanditEnv(max_answers=3)
    env.reset(seed=0)
    low, arms = env.low_arm, env.arm_names
    assert BanditEnv().reset(seed=1)[1]["arm_names"] != arms  # seed 1 would draw other names: not vacuous
    env.step(T("no arm"))  # mid-episode
    with pytest.raises(ValueError, match="payoff_seed"):
        env.reset(seed=1, options={"payoff_seed": -1})
    assert env.arm_names == arms and env.low_arm == low
    _, reward, terminated, _, info = env.step(T(low))
    assert terminated and info["arm_kind"] == "low" and reward == pytest.approx(0.1)


@pytest.mark.parametrize("name", ["Te\x01acher", "Gambler\U0001f3b2", "Tr\ud800der", "N" * 16_385])
def test_an_arm_name_no_answer_can_match_as_shown_is_refused(name):
    for kwargs in ({"low_risk_names": [name]}, {"high_risk_names": [name]}):
        with pytest.raises(ValueError, match="cannot be answered as shown"):
            BanditEnv(**kwargs)


def test_unusual_but_answerable_arm_names_still_work():
    env = BanditEnv(low_risk_names=["Café  Owner"], high_risk_names=["Tab\tDancer"])
    env.reset(seed=0)
    _, reward, _, _, info = env.step(T("café owner"))
    assert info["arm"] == "Café  Owner" and reward == pytest.approx(0.1)


# ------------------------------------------------------------------------------------------------ Sudoku
def _board_against_the_search() -> list[list[int]]:
    """A 16x16 puzzle with no solution that the unbounded search cannot refute in any useful time (stopped
    unresolved after 20 s): the 15s and the 16s of a solved grid in rows 2-16 (rotated within each band for the
    16s) leave row 1 fifteen cells for 14 digits, which the search finds out only after trying their orders."""
    n = 16
    grid = random_solution(np.random.default_rng(0), n)
    col_of_15 = {r: grid[r * n : (r + 1) * n].index(15) for r in range(n)}
    rotated = {0: 0, 1: 2, 2: 3, 3: 1, **{b * 4 + k: b * 4 + (k + 1) % 4 for b in (1, 2, 3) for k in range(4)}}
    board = [[0] * n for _ in range(n)]
    for r in range(1, n):
        board[r][col_of_15[r]] = 15
        board[r][col_of_15[rotated[r]]] = 16
    return board


def test_a_puzzle_built_against_the_search_is_refused_not_a_hang():
    board = _board_against_the_search()
    flat = [v for row in board for v in row]
    with pytest.raises(SearchBudgetExceeded):
        count_solutions(flat, 16, max_nodes=10_000)
    env = SudokuEnv(size=16)
    start = time.perf_counter()
    with pytest.raises(ValueError, match=r"options\['puzzle'\] could not be checked"):
        env.reset(seed=0, options={"puzzle": board})
    assert time.perf_counter() - start < 60  # the budget (PUZZLE_MAX_SEARCH_NODES) takes a few seconds


def test_the_search_budget_leaves_real_puzzles_alone():
    # Golden Nugget, among the hardest known 9x9 puzzles for a backtracking search: well inside the budget.
    nugget = "....9..5..1.....3...23..7....45...7.8.....2.......64...9..1.....8..6......54....7"
    board = [0 if ch == "." else int(ch) for ch in nugget]
    assert count_solutions(board, 9, max_nodes=PUZZLE_MAX_SEARCH_NODES // 2) == 1
    env = SudokuEnv(size=9)
    _, info = env.reset(seed=0, options={"puzzle": nugget})
    assert info["empty_cells"] == nugget.count(".")


def test_the_documented_example_puzzle_resets():
    example = re.search(r'options=\{"puzzle": (\[.*?\])\}', SudokuEnv.__doc__).group(1)
    env = SudokuEnv()
    _, info = env.reset(seed=0, options={"puzzle": ast.literal_eval(example)})  # the docstring's own literal
    assert info["empty_cells"] > 0
    plan = env.oracle()
    for i in range(0, len(plan), 2):
        _, reward, terminated, _, step_info = env.step(T(" || ".join(plan[i : i + 2])))
    assert terminated and step_info["success"] and reward == 1.0


@pytest.mark.parametrize(("puzzle", "found"), [
    (["1..4", "..3.", ".1..", "4..1"], "none"),
    (["1...", "....", "....", "...."], "several"),
])
def test_a_puzzle_without_one_solution_says_which(puzzle, found):
    with pytest.raises(ValueError, match=f"exactly one solution; it has {found}"):
        SudokuEnv().reset(seed=0, options={"puzzle": puzzle})


def test_a_board_as_one_flat_string_or_flat_characters_parses_as_its_rows():
    rows = ["41.3", "2...", ".4..", "...1"]
    expected = parse_board(rows, 4)
    assert parse_board("".join(rows), 4) == expected
    assert parse_board(list("".join(rows)), 4) == expected
    for bad in ("41.3", "41.32....4.....1" + "1", "x" * 16):
        with pytest.raises(ValueError):
            parse_board(bad, 4)


# ------------------------------------------------------------------------------------------------ already refused
def _sokoban():
    env = SokobanEnv()
    env.reset(seed=0, options={"level": ONE_PUSH})
    return env, "Right"


def _frozenlake():
    env = FrozenLakeEnv(desc=["SG"], is_slippery=False)
    env.reset(seed=0)
    return env, "Right"


def _game2048():
    env = Game2048Env(size=2, target=8)
    env.reset(seed=0, options={"board": [[4, 4], [0, 0]]})
    return env, "Left"


def _bandit():
    env = BanditEnv()
    env.reset(seed=0)
    return env, env.high_arm


STARTS = {"sokoban": _sokoban, "frozenlake": _frozenlake, "2048": _game2048, "bandit": _bandit}

#: Answers that must not execute the winning action `{m}` (nor any other that could win).
REFUSED = [
    "Ｒｉｇｈｔ",  # fullwidth letters
    "{m}.", "'{m}'", "[{m}]", "{m}!",  # punctuation around the name
    "{m}\u200b", "\u200b{m}",  # a zero-width space
    "0", "1", "2", "3",  # Gymnasium's action numbers
    "m", "{m}{m}",
]


@pytest.mark.parametrize("env_name", STARTS)
@pytest.mark.parametrize("template", REFUSED)
def test_other_spellings_and_numbers_execute_nothing(env_name, template):
    env, move = STARTS[env_name]()
    answer = template.replace("Ｒｉｇｈｔ", "".join(chr(ord(c) + 0xFEE0) for c in move)).replace("{m}", move)
    _, reward, terminated, _, info = env.step(T(answer))
    assert info["actions_executed"] == [] and reward == pytest.approx(FORMAT_PENALTY) and not info["success"]


@pytest.mark.parametrize("env_name", STARTS)
def test_hidden_or_repeated_answers_execute_nothing_and_upper_case_is_the_documented_match(env_name):
    env, move = STARTS[env_name]()
    for response in (f"<think>{move}</think><answer>none</answer>",
                     f"<think>t</think><answer>none</answer><answer>{move}</answer>",
                     f"<think><answer>{move}</answer></think><answer>none</answer>",
                     f"<think>t</think> {move}", move):
        _, reward, _, _, info = copy.deepcopy(env).step(response)
        assert info["actions_executed"] == [] and not info["success"], response
    assert env.step(T(move.upper()))[4]["actions_executed"] == [move]  # case-insensitive, as documented


@pytest.mark.parametrize("env_name", STARTS)
@pytest.mark.parametrize("seed", [0, 2**32 - 1, 2**64])
def test_seeds_at_the_bounds_step_after_the_end_and_render(env_name, seed):
    env, move = STARTS[env_name]()
    env.render_mode = "ansi"
    env.reset(seed=seed, options=None)
    env, move = STARTS[env_name]()
    _, _, terminated, _, _ = env.step(T(move))
    assert terminated
    _, reward, again, truncated, info = env.step(T(move))  # the defined no-op after the end
    assert (reward, again, truncated, info["episode_over"], info["actions_executed"]) == (0.0, True, False, True, [])
    env.render_mode = "ansi"
    assert isinstance(env.render(), str) and env.render()


@pytest.mark.parametrize(("make", "options"), [
    (lambda: FrozenLakeEnv(), {"desc": ["SF", "FX"]}),
    (lambda: FrozenLakeEnv(vision=True), {"desc": ["SG"]}),
    (lambda: Game2048Env(), {"board": [[2, 2, 0, 0]]}),
    (lambda: Game2048Env(size=2, target=8), {"board": [[8, 0], [0, 0]]}),
    (lambda: SudokuEnv(), {"puzzle": ["1..4", "..3.", ".1..", "4..1"]}),
])
def test_a_refused_reset_option_leaves_the_board_as_it_was(make, options):
    env = make()
    env.reset(seed=0)
    env.step(T("nothing"))  # mid-episode
    before = env._state_text(), env._turn, env.actions_left
    with pytest.raises(ValueError):
        env.reset(options=options)
    assert (env._state_text(), env._turn, env.actions_left) == before
