"""Difficulty knobs swept to their extremes: bounded generation, valid and solvable instances, one-line errors.

Each env's knobs were tried at their documented extremes, just past them and in between. What this file pins:

- Sokoban: a room whose interior has no push (one side < 5) and a `min_solution_len` above the action budget are
  refused at once; the generator's searches of one level share a state budget (it used to run 1000 rooms of up
  to 200,000 states each: a quarter of an hour before its error).
- FrozenLake: a random map's path test runs without writing out the rejected draws (size 127 with few frozen
  tiles took about 25 s a reset), with the same maps as before.
- Countdown: numbers beyond what an answer can write (10^12 - 1) are refused (such an instance could never pay),
  and the rejection loop has a solver work budget (mostly unsolvable 6-number configs ran for hours).
- Sudoku: 9x9 needs at least 23 givens (22 failed 200 grids in about 4% of resets, half a minute each).
- 2048: `oracle_depth` is bounded by the board (4x4 at depth 4 took half a minute a move).

Every solvability claim is checked by an independent search written here (BFS, brute force, backtracking).
"""

from __future__ import annotations

import hashlib
from collections import deque
from fractions import Fraction
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import tomllib

import ragen_envs  # noqa: F401  (registers the ids)
import ragen_envs.frozenlake.maps as maps
from ragen_envs.countdown.generator import CountdownConfig, generate_countdown
from ragen_envs.sokoban.generator import SokobanGenerator

ROOT = Path(__file__).resolve().parents[2]


def _answer(text: str) -> str:
    return f"<think>t</think><answer>{text}</answer>"


# ------------------------------------------------------------------------------------ shipped settings unchanged
def _obs_bytes(obs) -> bytes:
    if isinstance(obs, dict):
        return obs["text"].encode() + np.ascontiguousarray(obs["image"]).tobytes()
    return obs.encode()


def _fingerprint(env_id: str, kwargs: dict, seeds=(0, 1, 2), steps: int = 4) -> str:
    """sha256 (first 16 hex digits) of three seeded episodes: each reset's observation, then up to `steps` turns
    of a seeded random policy (the env's actions, its `random_action`, or its oracle's answer half the time),
    each turn's observation, reward and end flags. Code-v0 is fingerprinted by its resets (its steps run a
    sandbox)."""
    h = hashlib.sha256()
    env = gym.make(env_id, **kwargs)
    u = env.unwrapped
    for seed in seeds:
        obs, _ = env.reset(seed=seed)
        h.update(_obs_bytes(obs))
        rng = np.random.default_rng(seed)
        if env_id == "ragen/Code-v0":
            continue
        for _ in range(steps):
            if getattr(u, "ACTIONS", ()):
                act = str(u.ACTIONS[int(rng.integers(len(u.ACTIONS)))])
            elif callable(getattr(u, "random_action", None)):
                act = u.random_action(rng)
            else:
                oracle = u.oracle() or ["1"]
                act = oracle[0] if rng.random() < 0.5 else "1 + 2"
            obs, reward, term, trunc, _ = env.step(_answer(act))
            h.update(_obs_bytes(obs) + repr((round(float(reward), 9), term, trunc)).encode())
            if term or trunc:
                break
    env.close()
    return h.hexdigest()[:16]


#: Recorded from the code before the knob fixes, for each shipped config's [env] (configs/*.toml).
SHIPPED = {
    "bandit_tiny": "d3916fda94c1f387",
    "code_tiny": "25354e5754d2c8c6",
    "collapse_frozenlake": "e04e7297ea2bea7f",
    "collapse_sokoban": "bd788f6a8c4f8a03",
    "countdown_tiny": "1ede2689a0931358",
    "frozenlake_qwen2.5-3b": "2f2917829d421a44",
    "frozenlake_tiny": "e04e7297ea2bea7f",
    "game2048_tiny": "a1d9f4049cd2e8eb",
    "math_tiny": "c2f881c57f585181",
    "mechanism_frozenlake": "e04e7297ea2bea7f",
    "mechanism_sokoban": "bd788f6a8c4f8a03",
    "pocketcube_tiny": "e8b8bb33b2252a04",
    "searchqa_tiny": "558dc689c49a2dd2",
    "sokoban_qwen2.5-0.5b": "0ba60b5c6c597537",
    "sokoban_qwen2.5-3b": "0ba60b5c6c597537",
    "sokoban_tiny": "bd788f6a8c4f8a03",
    "sokoban_vision_tiny": "05fb4b69b6abaf5f",
    "sudoku_tiny": "1bf2c937b76ded7c",
    "webshop_tiny": "f10ff4f19d46785d",
}

#: Recorded from the code before the knob fixes: the defaults of the changed envs, and settings near each change
#: (FrozenLake's faster path test, Countdown's work budget, Sudoku above its new floor, 2048 at depth 3).
OTHER_SETTINGS = {
    ("ragen/Sokoban-v0", ()): "0ba60b5c6c597537",
    ("ragen/FrozenLake-v0", ()): "2f2917829d421a44",
    ("ragen/Countdown-v0", ()): "7931ac822b2d050c",
    ("ragen/Sudoku-v0", ()): "3ab50fe3b1fff63a",
    ("ragen/2048-v0", ()): "6f30f600d76477b2",
    ("ragen/FrozenLake-v0", (("size", 30), ("p", 0.3))): "d551c3c52122d385",
    ("ragen/FrozenLake-v0", (("size", 12), ("p", 0.5), ("obs_format", "coord"))): "f9e69cf80e4fa959",
    ("ragen/Countdown-v0", (("num_count", 3), ("target_range", (900, 1000)))): "d1a54b7d06e39949",
    ("ragen/Countdown-v0", (("num_count", (3, 6)),)): "09e001502553d534",
    ("ragen/Sudoku-v0", (("size", 9), ("givens", 24))): "089ace08427db77c",
    ("ragen/Sokoban-v0", (("dim_room", (8, 8)), ("num_boxes", 2), ("max_actions", 30))): "33b337391e7fd7eb",
    ("ragen/2048-v0", (("size", 4), ("oracle_depth", 3))): "6f30f600d76477b2",
}


def _shipped_env(name: str) -> tuple[str, dict]:
    env = tomllib.loads((ROOT / "configs" / f"{name}.toml").read_text())["env"]
    return env["id"], dict(env.get("kwargs", {}))


def test_every_shipped_config_is_fingerprinted():
    assert {p.stem for p in (ROOT / "configs").glob("*.toml")} == set(SHIPPED)


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_config_envs_play_as_before(name):
    assert _fingerprint(*_shipped_env(name)) == SHIPPED[name]


@pytest.mark.parametrize("env_id, kwargs", list(OTHER_SETTINGS), ids=str)
def test_default_and_nearby_settings_play_as_before(env_id, kwargs):
    assert _fingerprint(env_id, dict(kwargs)) == OTHER_SETTINGS[(env_id, kwargs)]


# ------------------------------------------------------------------------------------------------ Sokoban
_MOVES = {"Up": (-1, 0), "Down": (1, 0), "Left": (0, -1), "Right": (0, 1)}


def _sokoban_bfs(walls: np.ndarray, boxes, targets, player, limit: int = 40) -> int | None:
    """Shortest number of moves that puts every box on a target (independent BFS over (player, boxes))."""
    targets = frozenset(targets)
    start = (tuple(player), frozenset(map(tuple, boxes)))
    seen, frontier = {start}, deque([(start, 0)])
    while frontier:
        (p, bx), d = frontier.popleft()
        if bx == targets:
            return d
        if d == limit:
            continue
        for dr, dc in _MOVES.values():
            q = (p[0] + dr, p[1] + dc)
            if walls[q]:
                continue
            nb = bx
            if q in bx:
                beyond = (q[0] + dr, q[1] + dc)
                if walls[beyond] or beyond in bx:
                    continue
                nb = (bx - {q}) | {beyond}
            state = (q, nb)
            if state not in seen:
                seen.add(state)
                frontier.append((state, d + 1))
    return None


@pytest.mark.parametrize("dim_room", [(3, 3), (3, 4), (4, 3), (4, 4)])
def test_sokoban_rooms_without_any_push_are_refused_at_once(dim_room):
    # Independent proof that nothing there is solvable: every 1-box placement in the interior, by BFS.
    h, w = dim_room
    walls = np.ones((h, w), bool)
    walls[1:-1, 1:-1] = False
    cells = [(r, c) for r in range(1, h - 1) for c in range(1, w - 1)]
    assert all(_sokoban_bfs(walls, [b], [t], p) is None
               for p in cells for b in cells for t in cells if len({p, b, t}) == 3)
    with pytest.raises(ValueError, match=r"dim_room=.*no box can be pushed.*at least 5"):
        gym.make("ragen/Sokoban-v0", dim_room=dim_room)


@pytest.mark.parametrize("dim_room", [(3, 5), (5, 3), (4, 5)])
def test_sokoban_smallest_pushable_rooms_are_generated_with_their_exact_length(dim_room):
    env = gym.make("ragen/Sokoban-v0", dim_room=dim_room)
    for seed in range(3):
        _, info = env.reset(seed=seed)
        level = env.unwrapped.current_level()
        assert _sokoban_bfs(level.walls, level.boxes, level.targets, level.player) == info["optimal_steps"] >= 1


def test_sokoban_min_solution_len_above_the_budget_is_refused():
    # Before: min_solution_len=11 with the default budget of 10 made rooms of exactly 11 steps, never winnable.
    with pytest.raises(ValueError, match=r"min_solution_len=11 exceeds max_actions=10"):
        gym.make("ragen/Sokoban-v0", min_solution_len=11)
    with pytest.raises(ValueError, match=r"min_solution_len=7 exceeds max_actions=6"):
        gym.make("ragen/Sokoban-v0", min_solution_len=7, max_solution_len=9, max_actions=6)
    gym.make("ragen/Sokoban-v0", min_solution_len=11, max_actions=None)  # no budget: nothing to exceed


@pytest.mark.parametrize("kwargs", [{"min_solution_len": 10}, {"num_boxes": 3}, {"dim_room": (8, 8), "num_boxes": 2}])
def test_sokoban_levels_at_hard_settings_are_solvable_within_the_budget(kwargs):
    env = gym.make("ragen/Sokoban-v0", **kwargs)
    u = env.unwrapped
    for seed in range(2):
        _, info = env.reset(seed=seed)
        level = u.current_level()
        shortest = _sokoban_bfs(level.walls, level.boxes, level.targets, level.player, limit=u.max_actions)
        assert shortest == info["optimal_steps"] <= u.max_actions
        assert kwargs.get("min_solution_len", 1) <= shortest
        reward = terminated = 0
        for move in u.oracle():
            _, reward, terminated, _, info = env.step(_answer(move))
        assert terminated and info["success"] and reward > 10


def test_sokoban_generator_stops_at_its_state_budget():
    import ragen_envs.sokoban.generator as gen_mod

    searched = []
    real = gen_mod.goal_distances

    def counting(*args, **kwargs):
        dist = real(*args, **kwargs)
        searched.append(sum(len(layer) for layer in dist.layers))
        return dist

    gen = SokobanGenerator((10, 10), 2, min_solution_len=500, max_total_states=30_000)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(gen_mod, "goal_distances", counting)
        with pytest.raises(RuntimeError, match=r"500 steps in \d+ tries \(\d+ states searched, over the budget"):
            gen.generate(np.random.default_rng(0))
    assert len(searched) < 1000 and sum(searched[:-1]) < 30_000 <= sum(searched)
    with pytest.raises(ValueError, match="max_total_states"):
        SokobanGenerator((6, 6), 1, max_total_states=0)


# ------------------------------------------------------------------------------------------------ FrozenLake
def _reference_map(rng: np.random.Generator, size: int, p: float, max_tries: int = 100_000) -> list[str]:
    """The documented rejection sampler, written out plainly (every draw as a map, then its path test)."""
    for _ in range(max_tries):
        board = np.where(rng.random((size, size)) >= p, "H", "F")
        start = tuple(int(x) for x in rng.integers(size, size=2))
        goal = tuple(int(x) for x in rng.integers(size, size=2))
        if start == goal:
            continue
        board[start], board[goal] = "S", "G"
        desc = ["".join(row) for row in board]
        if _lake_path(desc) is not None:
            return desc
    raise AssertionError("reference found no map")


def _lake_path(desc: list[str]) -> int | None:
    """Shortest number of moves from S to G over non-hole tiles (BFS), None when there is none."""
    n, m = len(desc), len(desc[0])
    start = next((r, c) for r in range(n) for c in range(m) if desc[r][c] == "S")
    dist, frontier = {start: 0}, deque([start])
    while frontier:
        r, c = frontier.popleft()
        if desc[r][c] == "G":
            return dist[(r, c)]
        for q in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):
            if 0 <= q[0] < n and 0 <= q[1] < m and q not in dist and desc[q[0]][q[1]] != "H":
                dist[q] = dist[(r, c)] + 1
                frontier.append(q)
    return None


@pytest.mark.parametrize("size, p", [(2, 0.05), (4, 0.9), (4, 0.3), (9, 0.55), (30, 0.3), (60, 0.2)])
def test_frozenlake_random_maps_are_the_documented_sampler_s_and_solvable(size, p):
    for seed in range(3):
        got = maps.generate_random_map(np.random.default_rng(seed), size, p)
        assert got == _reference_map(np.random.default_rng(seed), size, p)
        assert "".join(got).count("S") == 1 and _lake_path(got) is not None


def test_frozenlake_rejected_draws_are_not_written_out_as_maps():
    # Before: every rejected draw was written out as strings and searched from scratch (size 127, p=0.05: about
    # 4,700 draws, 25 s a reset). The counter sees each map the path test was given.
    calls = []
    real = maps.has_path
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(maps, "has_path", lambda desc: calls.append(1) or real(desc))
        desc = maps.generate_random_map(np.random.default_rng(0), 60, 0.2)
    assert len(calls) <= 1 and _lake_path(desc) is not None


def test_frozenlake_oracle_reaches_the_goal_at_size_extremes():
    for size, p in [(2, 0.05), (8, 0.6)]:
        env = gym.make("ragen/FrozenLake-v0", size=size, p=p, is_slippery=False, max_actions=None,
                       max_actions_per_turn=1)
        for seed in range(3):
            env.reset(seed=seed)
            reward = info = None
            for _ in range(size * size):
                _, reward, terminated, truncated, info = env.step(_answer(env.unwrapped.oracle()[0]))
                if terminated or truncated:
                    break
            assert info["success"] and reward >= 1.0, (size, p, seed)


# ------------------------------------------------------------------------------------------------ Countdown
def _brute_force(nums: list[Fraction]) -> set[Fraction]:
    """Every value an expression over all of `nums` can take (pairwise reduction, exhaustive)."""
    if len(nums) == 1:
        return {nums[0]}
    out: set[Fraction] = set()
    for i in range(len(nums)):
        for j in range(len(nums)):
            if i == j:
                continue
            a, b = nums[i], nums[j]
            rest = [nums[k] for k in range(len(nums)) if k not in (i, j)]
            for v in {a + b, a - b, a * b, *([a / b] if b else [])}:
                out |= _brute_force([*rest, v])
    return out


@pytest.mark.parametrize("num_range", [(1, 10**12), (5, 10**13), (10**12, 10**12 + 5)])
def test_countdown_numbers_an_answer_cannot_write_are_refused(num_range):
    # Before: accepted, and an instance holding 10^12 could never pay: an answer writes at most 12 digits.
    with pytest.raises(ValueError, match=r"num_range .*<= 999999999999"):
        gym.make("ragen/Countdown-v0", num_range=num_range)


def test_countdown_instances_at_the_largest_numbers_pay_the_oracle_answer():
    env = gym.make("ragen/Countdown-v0", num_count=3, num_range=(10**12 - 3, 10**12 - 1), target_range=(0, 3))
    for seed in range(3):
        _, info = env.reset(seed=seed)
        assert Fraction(info["target"]) in _brute_force([Fraction(n) for n in info["nums"]])
        _, reward, _, _, info = env.step(_answer(env.unwrapped.oracle()[0]))
        assert reward == 1.0 and info["success"]


@pytest.mark.parametrize("kwargs", [{"num_count": 3, "num_range": (1, 4), "target_range": (1, 16)},
                                    {"num_count": 4, "num_range": (1, 1), "target_range": (0, 4)},
                                    {"num_count": 3, "num_range": (1, 100), "target_range": (900, 1000)}])
def test_countdown_generated_instances_are_solvable_by_brute_force(kwargs):
    rng = np.random.default_rng(0)
    for _ in range(3):
        item = generate_countdown(rng, CountdownConfig(**kwargs))
        assert Fraction(item["target"]) in _brute_force([Fraction(n) for n in item["nums"]])


def test_countdown_rejection_loop_stops_at_its_work_budget():
    # Six numbers of at most 3 reach 500-600 only when nearly all are 3s, yet the bound 2^5 * 3^6 sends every draw
    # to the solver: about 0.1 s a draw, and 20,000 draws (half an hour) before the error.
    config = CountdownConfig(num_count=6, num_range=(1, 3), target_range=(500, 600), max_work=20_000)
    with pytest.raises(ValueError, match=r"instance in \d+ draws \(solver work \d+, over max_work"):
        generate_countdown(np.random.default_rng(0), config)
    with pytest.raises(ValueError, match="max_work"):
        CountdownConfig(max_work=0)


# ------------------------------------------------------------------------------------------------ Sudoku
def _count_sudoku(board: list[int], n: int, cap: int = 2) -> int:
    """Number of completions of `board` (flat, 0 empty), stopping at `cap` (plain backtracking, fewest options)."""
    b = int(round(n**0.5))

    def options(i):
        r, c = divmod(i, n)
        used = {board[r * n + k] for k in range(n)} | {board[k * n + c] for k in range(n)}
        br, bc = r - r % b, c - c % b
        used |= {board[(br + dr) * n + bc + dc] for dr in range(b) for dc in range(b)}
        return [v for v in range(1, n + 1) if v not in used]

    empties = [i for i, v in enumerate(board) if v == 0]
    if not empties:
        return 1
    i = min(empties, key=lambda k: len(options(k)))
    total = 0
    for v in options(i):
        board[i] = v
        total += _count_sudoku(board, n, cap - total)
        board[i] = 0
        if total >= cap:
            break
    return total


def test_sudoku_9x9_below_23_givens_is_refused():
    # Before: 22 was accepted and failed its 200 grids in about 4% of resets (technique="singles").
    with pytest.raises(ValueError, match=r"givens must be an integer in \[23, 80\] for a 9x9 board, got 22"):
        gym.make("ragen/Sudoku-v0", size=9, givens=22)


@pytest.mark.parametrize("size, givens", [(4, 4), (4, 15), (9, 23)])
def test_sudoku_puzzles_at_the_givens_extremes_are_unique_and_the_oracle_solves_them(size, givens):
    env = gym.make("ragen/Sudoku-v0", size=size, givens=givens, max_actions=None, max_actions_per_turn=1)
    for seed in range(2):
        env.reset(seed=seed)
        u = env.unwrapped
        assert sum(v != 0 for v in u.puzzle) == givens
        assert _count_sudoku(list(u.puzzle), size) == 1
        reward = info = None
        for placement in u.oracle():
            _, reward, terminated, _, info = env.step(_answer(placement))
        assert terminated and info["success"] and reward == 1.0


# ------------------------------------------------------------------------------------------------ 2048
@pytest.mark.parametrize("size, depth, top", [(4, 4, 3), (3, 4, 3), (6, 3, 2), (8, 3, 2), (8, 4, 2)])
def test_2048_oracle_depth_too_deep_for_the_board_is_refused(size, depth, top):
    # Before: accepted; 4x4 at depth 4 took half a minute a move, 8x8 at depth 4 did not finish in a minute.
    with pytest.raises(ValueError, match=rf"oracle_depth={depth} is too deep for a {size}x{size} board.*\[1, {top}\]"):
        gym.make("ragen/2048-v0", size=size, target=8, oracle_depth=depth)


def test_2048_small_board_keeps_depth_4_and_its_oracle_wins():
    env = gym.make("ragen/2048-v0", size=2, target=8, oracle_depth=4, max_actions_per_turn=1)
    env.reset(seed=0)
    info = {}
    for _ in range(200):
        _, _, terminated, truncated, info = env.step(_answer(env.unwrapped.oracle()[0]))
        if terminated or truncated:
            break
    assert info["success"] and max(max(row) for row in info["board"]) >= 8
