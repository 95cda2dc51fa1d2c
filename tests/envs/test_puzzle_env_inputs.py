"""The puzzle envs (Sokoban, FrozenLake, PocketCube, Sudoku, 2048) refuse what they cannot play honestly.

1. A start that is already solved: it would pay the solve reward for nothing (PocketCube: "U || U'" on a solved cube)
   or never end (Sudoku with every cell given). Refused at `gym.make` (a knob) or at reset (an option).
2. A grid too large for the text observation (16,384 characters): the observation was cut and the player vanished
   from it; FrozenLake's oracle also built a dense nS x 4 x nS matrix (O(size^4) memory). Refused at `gym.make` from
   the knobs; the largest accepted size works, with the player in its observation.
3. Knob values of the wrong type or range: a ValueError naming the knob, never a silent coercion (`int(6.9)`,
   `bool("False")`) or an unnamed TypeError from deep inside.

Every expectation is written out here (counts of cells, the observation limit's arithmetic, the rules of each
puzzle), never read back from the code under test.
"""

from __future__ import annotations

import re
import time
import tracemalloc

import gymnasium as gym
import numpy as np
import pytest

import ragen_envs  # noqa: F401  (registers the ids)
from ragen_envs.frozenlake.env import build_transition_table, transition_matrix

#: The observation limit (ragen_envs.spaces.MAX_OBSERVATION_CHARS) and the notice line above the state after an
#: answer without a valid action, written out rather than imported.
LIMIT = 16_384
NOTICE = "Your answer had no valid action; the state is unchanged."
CUT = "[... truncated]"


def T(s: str) -> str:
    return f"<think>x</think><answer>{s}</answer>"


def _text(obs) -> str:
    return obs["text"] if isinstance(obs, dict) else obs


# ============================================================================ 1. already-solved starts are refused
def _sokoban_unsolved(env, obs) -> bool:
    """Some box is not on a target, read off the coordinate lines."""
    lines = dict(line.split(": ", 1) for line in _text(obs).splitlines()[1:4])
    return set(lines["Boxes"].split("), (")) != set(lines["Targets"].split("), ("))


def _lake_unsolved(env, obs) -> bool:
    return "P" in _text(obs) and "√" not in _text(obs)  # the player on ice, not on the goal


def _cube_unsolved(env, obs) -> bool:
    """A quarter turn and its inverse leave the cube as it was: on an unsolved cube that pays nothing."""
    _, reward, terminated, _, _ = env.step(T("U || U'"))
    return reward == 0.0 and not terminated


def _sudoku_unsolved(env, obs) -> bool:
    return int(re.search(r"Empty cells: (\d+)", obs).group(1)) >= 1 and "." in obs


def _2048_unsolved(env, obs) -> bool:
    tiles = [int(v) for v in re.findall(r"\b\d+\b", obs.split("Score:")[0])]
    return max(tiles) < env.unwrapped.target


BOUNDARY_STARTS = [
    # The hardest-to-keep-unsolved settings each env accepts: one step from solved where that exists.
    ("ragen/Sokoban-v0", {"min_solution_len": 1, "max_solution_len": 1}, _sokoban_unsolved),
    ("ragen/FrozenLake-v0", {"size": 2}, _lake_unsolved),
    ("ragen/PocketCube-v0", {"distance": 1}, _cube_unsolved),
    ("ragen/PocketCube-v0", {"scramble_depth": None, "distance": 1}, _cube_unsolved),
    ("ragen/PocketCube-v0", {"scramble_depth": (0, 2)}, _cube_unsolved),
    ("ragen/Sudoku-v0", {"givens": 15}, _sudoku_unsolved),
    ("ragen/Sudoku-v0", {"size": 9, "givens": 80}, _sudoku_unsolved),
    ("ragen/2048-v0", {"size": 2, "target": 8}, _2048_unsolved),
]


@pytest.mark.parametrize(("env_id", "kwargs", "unsolved"), BOUNDARY_STARTS,
                         ids=[f"{e}-{k}" for e, k, _ in BOUNDARY_STARTS])
def test_every_accepted_start_is_unsolved(env_id, kwargs, unsolved):
    env = gym.make(env_id, **kwargs)
    for seed in range(8):
        obs, info = env.reset(seed=seed)
        assert info["success"] is False, (env_id, kwargs, seed)
        assert unsolved(env, obs), (env_id, kwargs, seed)


@pytest.mark.parametrize(("env_id", "kwargs"), [
    ("ragen/PocketCube-v0", {"distance": 1}), ("ragen/Sudoku-v0", {"givens": 15}),
    ("ragen/Sudoku-v0", {"size": 9, "givens": 80}),
])
def test_one_move_from_solved_is_a_real_level(env_id, kwargs):
    # The closest accepted start: exactly one move to go, and that move earns the solve reward of 1.
    env = gym.make(env_id, **kwargs)
    env.reset(seed=3)
    _, reward, terminated, _, info = env.step(T(env.unwrapped.oracle()[0]))
    assert (reward, terminated, info["success"]) == (1.0, True, True)


SOLVED_4X4 = [[1, 2, 3, 4], [3, 4, 1, 2], [2, 1, 4, 3], [4, 3, 2, 1]]

REFUSED_STARTS = [
    # (env_id, gym.make kwargs, reset options or None, words the ValueError must hold)
    ("ragen/PocketCube-v0", {"distance": 0}, None, ["distance", "1 <= low"]),
    ("ragen/PocketCube-v0", {"scramble_depth": None, "distance": 0}, None, ["distance", "1 <= low"]),
    ("ragen/PocketCube-v0", {"distance": (0, 3)}, None, ["distance", "1 <= low"]),
    ("ragen/PocketCube-v0", {}, {"scramble": "R R'"}, ["scramble", "solved"]),
    ("ragen/PocketCube-v0", {}, {"scramble": "U U U U"}, ["scramble", "solved"]),
    ("ragen/PocketCube-v0", {}, {"scramble": "F2 F2"}, ["scramble", "solved"]),
    ("ragen/PocketCube-v0", {}, {"scramble": ""}, ["scramble", "solved"]),
    ("ragen/PocketCube-v0", {}, {"scramble": []}, ["scramble", "solved"]),
    ("ragen/Sudoku-v0", {"givens": 16}, None, ["givens", "[4, 15]"]),
    ("ragen/Sudoku-v0", {"size": 9, "givens": 81}, None, ["givens", "[23, 80]"]),
    ("ragen/Sudoku-v0", {}, {"puzzle": SOLVED_4X4}, ["puzzle", "no empty cell"]),
    ("ragen/Sokoban-v0", {}, {"level": "#####\n#@*#\n#####"}, ["already solved"]),
    ("ragen/Sokoban-v0", {"min_solution_len": 0}, None, ["min_solution_len", ">= 1"]),
    ("ragen/2048-v0", {"size": 2, "target": 8}, {"board": [[8, 0], [0, 2]]}, ["board", "target"]),
    # FrozenLake: a cell is one tile, so a start is never the goal; a map without a start is refused.
    ("ragen/FrozenLake-v0", {"desc": ["GF", "FF"]}, None, ["start"]),
    ("ragen/FrozenLake-v0", {}, {"desc": ["GF", "FF"]}, ["start"]),
]


@pytest.mark.parametrize(("env_id", "kwargs", "options", "words"), REFUSED_STARTS,
                         ids=[f"{e}-{k}-{o}" for e, k, o, _ in REFUSED_STARTS])
def test_an_already_solved_start_is_refused(env_id, kwargs, options, words):
    with pytest.raises(ValueError) as exc:
        env = gym.make(env_id, **kwargs)
        env.reset(seed=0, options=options)
    for word in words:
        assert word in str(exc.value), (word, str(exc.value))


# ============================================================================ 2. grids must fit the observation
def _largest_grid_side() -> int:
    """The largest n whose n x n grid (n rows of n symbols, newline-separated) fits with the notice line above it."""
    n = 1
    while (n + 1) * (n + 2) - 1 + len(NOTICE) + 1 <= LIMIT:
        n += 1
    return n


def _assert_whole(text: str, player: str) -> None:
    assert CUT not in text and len(text) <= LIMIT
    assert player in text


def test_the_largest_frozenlake_grid_is_shown_whole_and_one_more_is_refused():
    n = _largest_grid_side()
    assert n == 127  # 127 * 128 - 1 + 57 = 16312 <= 16384 < 128 * 129 - 1
    env = gym.make("ragen/FrozenLake-v0", size=n)
    obs, _ = env.reset(seed=0)
    rows = obs.splitlines()
    assert len(rows) == n and all(len(r) == n for r in rows) and obs.count("P") == 1
    after = env.step("no answer")[0]
    assert after.startswith(NOTICE)
    _assert_whole(after, "P")
    with pytest.raises(ValueError, match=r"size=128 .*at most 127"):
        gym.make("ragen/FrozenLake-v0", size=n + 1)


@pytest.mark.parametrize("size", [150, 200, 10_000, 10**9])
def test_oversized_lakes_are_refused_at_once(size):
    start = time.perf_counter()
    with pytest.raises(ValueError, match=f"size={size} .*at most 127"):
        gym.make("ragen/FrozenLake-v0", size=size)
    assert time.perf_counter() - start < 2.0


@pytest.mark.parametrize("obs_format", ["coord", "grid_coord"])
def test_coordinate_formats_fit_a_lake_of_holes_at_their_largest_size(obs_format):
    # The coordinate formats list every hole, and with p < 1 every cell but start and goal can be one.
    with pytest.raises(ValueError) as exc:
        gym.make("ragen/FrozenLake-v0", size=127, obs_format=obs_format)
    largest = int(re.search(r"size must be at most (\d+)", str(exc.value)).group(1))
    assert 30 <= largest < 127
    env = gym.make("ragen/FrozenLake-v0", size=largest, obs_format=obs_format)
    holes = ["S" + "H" * (largest - 1)] + ["H" * largest] * (largest - 2) + ["H" * (largest - 1) + "G"]
    obs, _ = env.reset(seed=0, options={"desc": holes})
    after = env.step("no answer")[0]
    _assert_whole(after, "Player: (0, 0)")
    assert after.count("), (") + 1 >= largest * largest - 2  # every hole listed
    with pytest.raises(ValueError, match=f"size={largest + 1} "):
        gym.make("ragen/FrozenLake-v0", size=largest + 1, obs_format=obs_format)
    # Without holes (p = 1) the grid alone bounds the coordinate format.
    assert gym.make("ragen/FrozenLake-v0", size=largest + 1, obs_format=obs_format, p=1.0) is not None


def test_a_frozenlake_map_too_large_to_show_is_refused_as_knob_and_as_option():
    big = ["S" + "F" * 199] + ["F" * 200] * 198 + ["F" * 199 + "G"]
    with pytest.raises(ValueError, match=r"^desc: a 200x200 map"):
        gym.make("ragen/FrozenLake-v0", desc=big)
    with pytest.raises(ValueError, match=r"^options\['desc'\]: a 200x200 map"):
        gym.make("ragen/FrozenLake-v0").reset(seed=0, options={"desc": big})


def test_the_largest_sokoban_room_is_shown_whole_and_one_more_is_refused():
    # "grid": the grid alone, as for FrozenLake. "grid_coord" (the default) adds five lines (about 115 characters
    # for a 126-row room with one box), which takes one row and column off.
    n = _largest_grid_side()
    env = gym.make("ragen/Sokoban-v0", dim_room=(n, n), obs_format="grid")
    env.reset(seed=0)
    _assert_whole(env.step("no answer")[0], "P")
    with pytest.raises(ValueError, match=r"dim_room=\(128, 128\) .*\(127, 127\)"):
        gym.make("ragen/Sokoban-v0", dim_room=(n + 1, n + 1), obs_format="grid")

    env = gym.make("ragen/Sokoban-v0", dim_room=(n - 1, n - 1))
    obs, _ = env.reset(seed=0)
    grid = obs.split("Grid Map:\n")[1]
    assert len(grid.splitlines()) == n - 1 and ("P" in grid or "S" in grid)
    player = re.search(r"Player: \(\d+, \d+\)", obs).group(0)
    _assert_whole(env.step("no answer")[0], player)
    with pytest.raises(ValueError, match=r"dim_room=\(127, 127\) .*largest accepted square room is \(126, 126\)"):
        gym.make("ragen/Sokoban-v0", dim_room=(n, n))


@pytest.mark.parametrize("obs_format", ["grid", "coord", "grid_coord"])
@pytest.mark.parametrize("dim_room", [(200, 200), (10_000, 10_000), (6, 5000)])
def test_oversized_sokoban_rooms_are_refused_at_once_in_every_format(obs_format, dim_room):
    # "coord" shows no grid, but a room too large to draw would still take minutes to generate.
    start = time.perf_counter()
    with pytest.raises(ValueError, match=r"dim_room=.*largest accepted"):
        gym.make("ragen/Sokoban-v0", dim_room=dim_room, obs_format=obs_format)
    assert time.perf_counter() - start < 2.0


def test_the_frozenlake_oracle_needs_no_dense_matrix():
    # The dense nS x 4 x nS float matrix of a 40x40 lake is 1600 * 4 * 1600 * 8 bytes = 82 MB; the sparse form
    # holds at most 3 successors per (state, action).
    env = gym.make("ragen/FrozenLake-v0", size=40)
    env.reset(seed=0)
    tracemalloc.start()
    try:
        action = env.unwrapped.oracle()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert action[0] in ("Left", "Down", "Right", "Up")
    assert peak < 16 * 2**20, f"{peak / 2**20:.0f} MB"


def test_the_frozenlake_oracle_at_the_largest_size_is_quick_and_small():
    env = gym.make("ragen/FrozenLake-v0", size=127)
    env.reset(seed=1)
    tracemalloc.start()
    start = time.perf_counter()
    try:
        action = env.unwrapped.oracle()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert action[0] in ("Left", "Down", "Right", "Up")
    assert peak < 64 * 2**20 and time.perf_counter() - start < 30  # dense: 16129^2 * 32 bytes = 8.3 GB


@pytest.mark.parametrize("slippery", [True, False])
def test_sparse_transitions_give_the_dense_expectations(slippery):
    from ragen_envs.frozenlake.env import SparseTransitions

    rng = np.random.default_rng(7)
    desc = ["".join(row) for row in rng.choice(list("FFFH"), size=(9, 11))]
    desc[0] = "S" + desc[0][1:]
    desc[-1] = desc[-1][:-1] + "G"
    table = build_transition_table(desc, slippery, 0.7)
    dense, sparse = transition_matrix(table), SparseTransitions.from_table(table)
    for _ in range(5):
        V = rng.random(len(table))
        np.testing.assert_allclose(sparse @ V, dense @ V, rtol=0, atol=1e-15)
        np.testing.assert_allclose(sparse[17] @ V, dense[17] @ V, rtol=0, atol=1e-15)


# ============================================================================ 3. knob types and ranges
NAN = float("nan")

BAD_KNOBS = [
    # Sokoban
    ("ragen/Sokoban-v0", {"dim_room": (6.9, "6")}, "dim_room"),
    ("ragen/Sokoban-v0", {"dim_room": ("6", 6)}, "dim_room"),
    ("ragen/Sokoban-v0", {"dim_room": (6, 6.0)}, "dim_room"),
    ("ragen/Sokoban-v0", {"dim_room": (True, 6)}, "dim_room"),
    ("ragen/Sokoban-v0", {"dim_room": (2, 6)}, "dim_room"),
    ("ragen/Sokoban-v0", {"dim_room": 6}, "dim_room"),
    ("ragen/Sokoban-v0", {"dim_room": (6, 6, 6)}, "dim_room"),
    ("ragen/Sokoban-v0", {"dim_room": None}, "dim_room"),
    ("ragen/Sokoban-v0", {"num_boxes": 1.0}, "num_boxes"),
    ("ragen/Sokoban-v0", {"num_boxes": "1"}, "num_boxes"),
    ("ragen/Sokoban-v0", {"num_boxes": True}, "num_boxes"),
    ("ragen/Sokoban-v0", {"num_boxes": 0}, "num_boxes"),
    ("ragen/Sokoban-v0", {"num_boxes": None}, "num_boxes"),
    ("ragen/Sokoban-v0", {"obs_format": "Grid"}, "obs_format"),
    ("ragen/Sokoban-v0", {"obs_format": ["grid"]}, "obs_format"),
    ("ragen/Sokoban-v0", {"obs_format": None}, "obs_format"),
    ("ragen/Sokoban-v0", {"min_solution_len": None}, "min_solution_len"),
    ("ragen/Sokoban-v0", {"min_solution_len": 1.5}, "min_solution_len"),
    ("ragen/Sokoban-v0", {"min_solution_len": "1"}, "min_solution_len"),
    ("ragen/Sokoban-v0", {"min_solution_len": True}, "min_solution_len"),
    ("ragen/Sokoban-v0", {"max_solution_len": 10.0}, "max_solution_len"),
    ("ragen/Sokoban-v0", {"max_solution_len": "10"}, "max_solution_len"),
    ("ragen/Sokoban-v0", {"max_solution_len": True}, "max_solution_len"),
    ("ragen/Sokoban-v0", {"min_solution_len": 3, "max_solution_len": 2}, "max_solution_len"),
    ("ragen/Sokoban-v0", {"level_solver_max_states": -1}, "level_solver_max_states"),
    ("ragen/Sokoban-v0", {"level_solver_max_states": 1e5}, "level_solver_max_states"),
    ("ragen/Sokoban-v0", {"level_solver_max_states": "100"}, "level_solver_max_states"),
    ("ragen/Sokoban-v0", {"level_solver_max_states": None}, "level_solver_max_states"),
    ("ragen/Sokoban-v0", {"vision": "False"}, "vision"),
    ("ragen/Sokoban-v0", {"vision": "no"}, "vision"),
    ("ragen/Sokoban-v0", {"vision": 1}, "vision"),
    ("ragen/Sokoban-v0", {"vision": None}, "vision"),
    ("ragen/Sokoban-Vision-v0", {"vision": "True"}, "vision"),
    # FrozenLake
    ("ragen/FrozenLake-v0", {"desc": "SFFG"}, "desc"),
    ("ragen/FrozenLake-v0", {"desc": 5}, "desc"),
    ("ragen/FrozenLake-v0", {"desc": [1, 2]}, "desc"),
    ("ragen/FrozenLake-v0", {"desc": ["SF", "F"]}, "desc"),
    ("ragen/FrozenLake-v0", {"desc": ["SX", "FG"]}, "desc"),
    ("ragen/FrozenLake-v0", {"size": 4.0}, "size"),
    ("ragen/FrozenLake-v0", {"size": "4"}, "size"),
    ("ragen/FrozenLake-v0", {"size": True}, "size"),
    ("ragen/FrozenLake-v0", {"size": 1}, "size"),
    ("ragen/FrozenLake-v0", {"size": None}, "size"),
    ("ragen/FrozenLake-v0", {"p": True}, "p"),
    ("ragen/FrozenLake-v0", {"p": "0.9"}, "p"),
    ("ragen/FrozenLake-v0", {"p": NAN}, "p"),
    ("ragen/FrozenLake-v0", {"p": 0}, "p"),
    ("ragen/FrozenLake-v0", {"p": 1.5}, "p"),
    ("ragen/FrozenLake-v0", {"p": None}, "p"),
    ("ragen/FrozenLake-v0", {"is_slippery": "no"}, "is_slippery"),
    ("ragen/FrozenLake-v0", {"is_slippery": "False"}, "is_slippery"),
    ("ragen/FrozenLake-v0", {"is_slippery": 0}, "is_slippery"),
    ("ragen/FrozenLake-v0", {"is_slippery": 1}, "is_slippery"),
    ("ragen/FrozenLake-v0", {"is_slippery": None}, "is_slippery"),
    ("ragen/FrozenLake-v0", {"success_rate": True}, "success_rate"),
    ("ragen/FrozenLake-v0", {"success_rate": "0.8"}, "success_rate"),
    ("ragen/FrozenLake-v0", {"success_rate": NAN}, "success_rate"),
    ("ragen/FrozenLake-v0", {"success_rate": -0.1}, "success_rate"),
    ("ragen/FrozenLake-v0", {"success_rate": 1.5}, "success_rate"),
    ("ragen/FrozenLake-v0", {"success_rate": None}, "success_rate"),
    ("ragen/FrozenLake-v0", {"obs_format": "image"}, "obs_format"),
    ("ragen/FrozenLake-v0", {"obs_format": None}, "obs_format"),
    ("ragen/FrozenLake-v0", {"vision": "False"}, "vision"),
    ("ragen/FrozenLake-v0", {"vision": "no"}, "vision"),
    ("ragen/FrozenLake-v0", {"vision": 0}, "vision"),
    # PocketCube
    ("ragen/PocketCube-v0", {"scramble_depth": 5.0}, "scramble_depth"),
    ("ragen/PocketCube-v0", {"scramble_depth": "5"}, "scramble_depth"),
    ("ragen/PocketCube-v0", {"scramble_depth": True}, "scramble_depth"),
    ("ragen/PocketCube-v0", {"scramble_depth": -1}, "scramble_depth"),
    ("ragen/PocketCube-v0", {"scramble_depth": 1001}, "scramble_depth"),
    ("ragen/PocketCube-v0", {"scramble_depth": (5, 3)}, "scramble_depth"),
    ("ragen/PocketCube-v0", {"scramble_depth": (3,)}, "scramble_depth"),
    ("ragen/PocketCube-v0", {"distance": 12}, "distance"),
    ("ragen/PocketCube-v0", {"distance": 1.0}, "distance"),
    ("ragen/PocketCube-v0", {"distance": "1"}, "distance"),
    ("ragen/PocketCube-v0", {"distance": True}, "distance"),
    ("ragen/PocketCube-v0", {"distance": (3, 2)}, "distance"),
    ("ragen/PocketCube-v0", {"distance": None}, "distance"),
    ("ragen/PocketCube-v0", {"scramble_depth": 3, "distance": (4, 6)}, "distance"),
    ("ragen/PocketCube-v0", {"obs_format": "grid"}, "obs_format"),
    ("ragen/PocketCube-v0", {"obs_format": None}, "obs_format"),
    ("ragen/PocketCube-v0", {"cache_dir": 5}, "cache_dir"),
    ("ragen/PocketCube-v0", {"cache_dir": ""}, "cache_dir"),
    ("ragen/PocketCube-v0", {"cache_dir": b"/tmp"}, "cache_dir"),
    ("ragen/PocketCube-v0", {"cache_dir": ["/tmp"]}, "cache_dir"),
    ("ragen/PocketCube-v0", {"vision": "False"}, "vision"),
    ("ragen/PocketCube-v0", {"vision": 1}, "vision"),
    # Sudoku
    ("ragen/Sudoku-v0", {"size": 5}, "size"),
    ("ragen/Sudoku-v0", {"size": 16.0}, "size"),
    ("ragen/Sudoku-v0", {"size": "4"}, "size"),
    ("ragen/Sudoku-v0", {"size": True}, "size"),
    ("ragen/Sudoku-v0", {"size": None}, "size"),
    ("ragen/Sudoku-v0", {"difficulty": "EASY"}, "difficulty"),
    ("ragen/Sudoku-v0", {"difficulty": None}, "difficulty"),
    ("ragen/Sudoku-v0", {"givens": 3}, "givens"),
    ("ragen/Sudoku-v0", {"givens": 10.0}, "givens"),
    ("ragen/Sudoku-v0", {"givens": "10"}, "givens"),
    ("ragen/Sudoku-v0", {"givens": True}, "givens"),
    ("ragen/Sudoku-v0", {"technique": "naked"}, "technique"),
    ("ragen/Sudoku-v0", {"technique": None}, "technique"),
    ("ragen/Sudoku-v0", {"max_actions": "all"}, "max_actions"),
    ("ragen/Sudoku-v0", {"max_actions": 0}, "max_actions"),
    ("ragen/Sudoku-v0", {"max_actions": 16.0}, "max_actions"),
    # 2048
    ("ragen/2048-v0", {"size": 1}, "size"),
    ("ragen/2048-v0", {"size": 9}, "size"),
    ("ragen/2048-v0", {"size": 4.0}, "size"),
    ("ragen/2048-v0", {"size": "4"}, "size"),
    ("ragen/2048-v0", {"size": True}, "size"),
    ("ragen/2048-v0", {"target": 12}, "target"),
    ("ragen/2048-v0", {"target": 4}, "target"),
    ("ragen/2048-v0", {"target": 2048.0}, "target"),
    ("ragen/2048-v0", {"target": "2048"}, "target"),
    ("ragen/2048-v0", {"target": None}, "target"),
    ("ragen/2048-v0", {"size": 2, "target": 64}, "target"),  # above 2^(2*2+1) = 32, the largest 2x2 tile
    ("ragen/2048-v0", {"size": 8, "target": 2**63}, "target"),  # beyond what an int64 board holds
    ("ragen/2048-v0", {"oracle_depth": 0}, "oracle_depth"),
    ("ragen/2048-v0", {"oracle_depth": 5}, "oracle_depth"),
    ("ragen/2048-v0", {"oracle_depth": 2.0}, "oracle_depth"),
    ("ragen/2048-v0", {"oracle_depth": True}, "oracle_depth"),
]


@pytest.mark.parametrize(("env_id", "kwargs", "name"), BAD_KNOBS, ids=[f"{e}-{k}" for e, k, _ in BAD_KNOBS])
def test_a_bad_knob_value_is_a_value_error_naming_the_knob(env_id, kwargs, name):
    with pytest.raises(ValueError) as exc:
        gym.make(env_id, **kwargs)
    message = str(exc.value)
    assert name in message, message


def test_a_file_is_no_cache_dir(tmp_path):
    path = tmp_path / "table"
    path.write_text("not a folder")
    with pytest.raises(ValueError, match="cache_dir"):
        gym.make("ragen/PocketCube-v0", cache_dir=path)


def test_a_missing_cache_dir_is_created_on_first_use_as_documented(tmp_path):
    root = tmp_path / "a" / "b"
    env = gym.make("ragen/PocketCube-v0", cache_dir=str(root))
    assert not root.exists()  # gym.make stays cheap: nothing is read or written yet
    env.reset(seed=0)
    assert (root / "pocketcube").is_dir()


@pytest.mark.parametrize(("env_id", "kwargs", "check"), [
    # Values of the right kind in other spellings still pass, unchanged: numpy scalars, ints for floats, lists.
    ("ragen/Sokoban-v0", {"dim_room": [np.int64(7), 6], "num_boxes": np.int32(1)},
     lambda u: u.dim_room == (7, 6) and type(u.dim_room[0]) is int),
    ("ragen/FrozenLake-v0", {"success_rate": 1, "p": np.float32(0.5), "is_slippery": np.bool_(False)},
     lambda u: u.success_rate == 1.0 and u.is_slippery is False and u.p == 0.5),
    ("ragen/FrozenLake-v0", {"vision": np.bool_(True)}, lambda u: u.vision is True),
    ("ragen/PocketCube-v0", {"scramble_depth": [np.int64(2), 4], "distance": np.int64(2)},
     lambda u: u.scramble_range == (2, 4) and u.distance_range == (2, 2)),
    ("ragen/Sudoku-v0", {"size": np.int64(4), "givens": np.int64(12), "max_actions": None},
     lambda u: (u.n, u.num_givens, u.max_actions) == (4, 12, None)),
    ("ragen/2048-v0", {"size": 3, "target": 64}, lambda u: (u.size, u.target) == (3, 64)),
])
def test_good_values_in_other_spellings_still_pass(env_id, kwargs, check):
    env = gym.make(env_id, **kwargs)
    assert check(env.unwrapped)
    env.reset(seed=0)


BAD_OPTIONS = [
    ("ragen/PocketCube-v0", {"scramble": 5}, "scramble"),
    ("ragen/PocketCube-v0", {"scramble": {"R": 1}}, "scramble"),
    ("ragen/PocketCube-v0", {"scramble": ["R", 5]}, "5"),
    ("ragen/Sokoban-v0", {"level": 5}, "level"),
    ("ragen/FrozenLake-v0", {"desc": 5}, "desc"),
    ("ragen/Sudoku-v0", {"puzzle": 5}, "board"),
    ("ragen/2048-v0", {"board": [[2**70, 0, 0, 0]] + [[0] * 4] * 3}, "tiles"),
    ("ragen/2048-v0", {"board": [[True, 2, 0, 0]] + [[0] * 4] * 3}, "tiles"),
    ("ragen/2048-v0", {"board": [[2.0, 2, 0, 0]] + [[0] * 4] * 3}, "tiles"),
]


@pytest.mark.parametrize(("env_id", "options", "word"), BAD_OPTIONS, ids=[f"{e}-{o}" for e, o, _ in BAD_OPTIONS])
def test_a_bad_reset_option_is_a_value_error(env_id, options, word):
    env = gym.make(env_id)
    with pytest.raises(ValueError, match=re.escape(word)):
        env.reset(seed=0, options=options)
