"""FrozenLake: Gymnasium's dynamics, RAGEN's maps and symbols, vision, the oracle."""

from __future__ import annotations

import math
from functools import cache

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv as GymFrozenLake
from gymnasium.utils.env_checker import check_env

import ragen_envs  # noqa: F401  (registers the ids)
from ragen_envs.frozenlake import FrozenLakeEnv, generate_random_map, has_path, validate_desc

GYM_4X4 = ["SFFF", "FHFH", "FFFH", "HFFG"]
GYM_8X8 = ["SFFFFFFF", "FFFFFFFF", "FFFHFFFF", "FFFFFHFF", "FFFHFFFF", "FHHFFFHF", "FHFFHFHF", "FFFHFFFG"]


def answer(*actions: str) -> str:
    return f"<think>go</think><answer>{' || '.join(actions)}</answer>"


def reference_has_path(desc: list[str]) -> bool:
    """Independent check: grow the reachable set by array dilation until it stops changing."""
    grid = np.array([list(r) for r in desc])
    passable = grid != "H"
    reach = grid == "S"
    while True:
        grown = reach.copy()
        grown[1:, :] |= reach[:-1, :]
        grown[:-1, :] |= reach[1:, :]
        grown[:, 1:] |= reach[:, :-1]
        grown[:, :-1] |= reach[:, 1:]
        grown &= passable
        if (grown & (grid == "G")).any():
            return True
        if (grown == reach).all():
            return False
        reach = grown


# ---------------------------------------------------------------------------------------- dynamics
def random_maps(n: int, size: int = 4, p: float = 0.8) -> list[list[str]]:
    rng = np.random.default_rng(7)
    return [generate_random_map(rng, size, p) for _ in range(n)]


@pytest.mark.parametrize("success_rate", [1.0 / 3.0, 0.8, 1.0, 0.0])
@pytest.mark.parametrize("is_slippery", [True, False])
def test_transition_table_matches_gymnasium(success_rate: float, is_slippery: bool) -> None:
    maps = [GYM_4X4, GYM_8X8, ["SG"], ["GFS", "HFH"], *random_maps(6), *random_maps(3, size=6, p=0.7)]
    for desc in maps:
        ours = FrozenLakeEnv(desc=desc, is_slippery=is_slippery, success_rate=success_rate)
        ours.reset(seed=0)
        theirs = GymFrozenLake(desc=desc, is_slippery=is_slippery, success_rate=success_rate)
        assert set(ours.P) == set(theirs.P)
        for s in theirs.P:
            for a in range(4):
                mine, ref = ours.P[s][a], theirs.P[s][a]
                assert len(mine) == len(ref), (desc, s, a)
                for (p1, s1, r1, t1), (p2, s2, r2, t2) in zip(mine, ref):
                    assert p1 == pytest.approx(p2, abs=1e-15)
                    assert (s1, r1, bool(t1)) == (s2, r2, bool(t2)), (desc, s, a)


def test_gymnasium_default_configuration() -> None:
    # Gymnasium's default slip (success_rate unset, 1/3) against ours at success_rate=1/3.
    for desc in [GYM_4X4, GYM_8X8]:
        theirs = GymFrozenLake(desc=desc)
        ours = FrozenLakeEnv(desc=desc, success_rate=1 / 3)
        ours.reset(seed=0)
        for s in theirs.P:
            for a in range(4):
                assert [t[0] for t in ours.P[s][a]] == pytest.approx([t[0] for t in theirs.P[s][a]], abs=1e-15)
                assert [t[1:] for t in ours.P[s][a]] == [t[1:] for t in theirs.P[s][a]]


def chi2_pvalue(counts: np.ndarray, probs: np.ndarray) -> float:
    """P-value of Pearson's chi-square for df = 1 or 2 (closed forms: erfc and exp)."""
    n = counts.sum()
    expected = n * probs
    stat = float(((counts - expected) ** 2 / expected).sum())
    df = len(probs) - 1
    if df == 1:
        return math.erfc(math.sqrt(stat / 2))
    assert df == 2
    return math.exp(-stat / 2)


@pytest.mark.parametrize(
    ("desc", "action", "outcomes"),
    [
        # Centre start, Up: intended (0, 1) w.p. s, perpendicular Left (1, 0) and Right (1, 2).
        (["FFF", "FSF", "FFG"], "Up", {(0, 1): "s", (1, 0): "f", (1, 2): "f"}),
        # Corner start, Up: Up and Left hit the edge (stay), Right slips to (0, 1).
        (["SFF", "FFF", "FFG"], "Up", {(0, 0): "s+f", (0, 1): "f"}),
        # Down from the centre next to a hole on the right: the slip falls in.
        (["FFF", "FSH", "FFG"], "Down", {(2, 1): "s", (1, 0): "f", (1, 2): "f"}),
    ],
)
@pytest.mark.parametrize("success_rate", [0.8, 1 / 3])
def test_sampled_transitions_follow_the_probabilities(desc, action, outcomes, success_rate) -> None:
    fail = (1 - success_rate) / 2
    value = {"s": success_rate, "f": fail, "s+f": success_rate + fail}
    cells = list(outcomes)
    probs = np.array([value[outcomes[c]] for c in cells])
    env = FrozenLakeEnv(desc=desc, success_rate=success_rate)
    counts = np.zeros(len(cells))
    n = 3000
    for i in range(n):
        env.reset(seed=1000 + i)
        env.step(answer(action))
        counts[cells.index(env.player_position)] += 1
    assert chi2_pvalue(counts, probs) > 1e-4, (counts / n, probs)


def test_not_slippery_is_deterministic() -> None:
    env = FrozenLakeEnv(desc=["SFF", "FFF", "FFG"], is_slippery=False)
    for seed in range(20):
        env.reset(seed=seed)
        env.step(answer("Right", "Down"))
        assert env.player_position == (1, 1)


# ---------------------------------------------------------------------------------------- maps
@pytest.mark.parametrize(("size", "p"), [(4, 0.9), (4, 0.5), (2, 0.3), (7, 0.7)])
def test_random_maps_always_have_a_path(size: int, p: float) -> None:
    rng = np.random.default_rng(size * 100 + int(p * 10))
    starts, goals = set(), set()
    for _ in range(150):
        desc = generate_random_map(rng, size, p)
        assert len(desc) == size and all(len(r) == size for r in desc)
        flat = "".join(desc)
        assert set(flat) <= set("SFHG") and flat.count("S") == 1 and flat.count("G") == 1
        assert reference_has_path(desc)
        assert has_path(desc)
        starts.add(flat.index("S"))
        goals.add(flat.index("G"))
    # Random start and goal (RAGEN), not Gymnasium's fixed corners.
    assert len(starts) >= min(size * size, 10) - 1 and len(goals) >= min(size * size, 10) - 1


def test_hole_fraction_tracks_p() -> None:
    rng = np.random.default_rng(3)
    maps = [generate_random_map(rng, 8, 0.8) for _ in range(200)]
    holes = np.mean([("".join(d)).count("H") / 62 for d in maps])  # 64 cells minus S and G
    # Conditioning on a path removes a little hole mass; the unconditioned rate is 0.2.
    assert 0.15 < holes < 0.21


def test_has_path_agrees_with_reference_on_arbitrary_boards() -> None:
    rng = np.random.default_rng(11)
    agree = 0
    for _ in range(400):
        board = rng.choice(list("FH"), (4, 4), p=[0.55, 0.45])
        s, g = rng.choice(16, 2, replace=False)
        board.flat[s], board.flat[g] = "S", "G"
        desc = ["".join(r) for r in board]
        assert has_path(desc) == reference_has_path(desc), desc
        agree += has_path(desc)
    assert 50 < agree < 350  # both outcomes were exercised


def test_map_generation_is_seeded() -> None:
    a = [generate_random_map(np.random.default_rng(5)) for _ in range(2)]
    assert a[0] == a[1] == generate_random_map(5)
    env1, env2 = FrozenLakeEnv(), FrozenLakeEnv()
    maps1 = [env1.reset(seed=s)[1]["map"] for s in range(30)]
    maps2 = [env2.reset(seed=s)[1]["map"] for s in range(30)]
    assert maps1 == maps2
    assert len({tuple(m) for m in maps1}) > 20


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"size": 1}, "size"),
        ({"p": 0.0}, "p "),
        ({"p": 1.5}, "p "),
        ({"success_rate": 1.2}, "success_rate"),
        ({"desc": ["SFF", "FG"]}, "rectangular"),
        ({"desc": ["SFX", "FFG"]}, "tiles"),
        ({"desc": ["FFF", "FFG"]}, "start"),
        ({"desc": ["SFF", "FFF"]}, "goal"),
        ({"desc": "SFFG"}, "list of strings"),
        ({"max_actions": 0}, "max_actions"),
    ],
)
def test_bad_arguments_raise_value_error(kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        FrozenLakeEnv(**kwargs)


def test_generate_random_map_arguments() -> None:
    with pytest.raises(ValueError, match="rng"):
        generate_random_map(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="p "):
        generate_random_map(0, 4, 0.0)
    with pytest.raises(RuntimeError, match="no solvable"):
        generate_random_map(0, 10, 0.01, max_tries=3)
    assert validate_desc(np.asarray(GYM_4X4, dtype="c")) == GYM_4X4  # Gymnasium's own array format


# ---------------------------------------------------------------------------------------- text
def test_text_symbols_and_player_position() -> None:
    desc = ["SFH", "FFF", "HFG"]
    env = FrozenLakeEnv(desc=desc, is_slippery=False)
    obs, info = env.reset(seed=0)
    assert obs == "P_O\n___\nO_G"
    assert env.player_position == (0, 0) and info["player_position"] == (0, 0)
    obs, *_ = env.step(answer("Down"))
    assert obs == "__O\nP__\nO_G"  # the start is shown as ice
    assert env.player_position == (1, 0)
    obs, reward, terminated, _, info = env.step(answer("Down"))
    assert obs == "__O\n___\nX_G" and terminated and reward == 0.0 and not info["success"]

    env.reset(seed=0)
    env.step(answer("Down", "Right"))
    obs, reward, terminated, _, info = env.step(answer("Right", "Down"))
    assert obs == "__O\n___\nO_√"
    assert (reward, terminated, info["success"]) == (1.0, True, True)
    assert info["player_position"] == (2, 2)

    instructions = env.reset(seed=0)[1]["instructions"]
    for symbol, meaning in [("P", "player"), ("_", "frozen"), ("O", "hole"), ("G", "goal"), ("X", "player in a hole"),
                            ("√", "player on the goal")]:
        assert f"{symbol} {meaning}" in instructions
    for name in ("Left", "Down", "Right", "Up"):
        assert name in instructions


def test_position_matches_the_p_in_the_text() -> None:
    env = FrozenLakeEnv(size=5)
    rng = np.random.default_rng(0)
    for seed in range(20):
        obs, _ = env.reset(seed=seed)
        done = False
        while not done:
            rows = obs.splitlines()[-5:]
            marks = [(r, c) for r, row in enumerate(rows) for c, ch in enumerate(row) if ch in "PX√"]
            assert marks == [env.player_position]
            obs, _, term, trunc, _ = env.step(answer(str(rng.choice(["Left", "Down", "Right", "Up"]))))
            done = term or trunc


def test_bad_input_costs_the_penalty_and_keeps_the_state() -> None:
    env = FrozenLakeEnv()
    obs0, _ = env.reset(seed=3)
    pos = env.player_position
    for bad in ["", "Up", "<answer>Up</answer>", "<think></think><answer>Jump</answer>", "x" * 1_000_000,
                "<think>a</think><answer>Up</answer><answer>Up</answer>", "\x00\x1b<answer>", None, 42]:
        obs, reward, terminated, truncated, info = env.step(bad)
        assert reward == pytest.approx(-0.1)
        assert (terminated, truncated, info["action_is_valid"]) == (False, False, False)
        assert env.player_position == pos and obs.endswith(obs0)
        assert info["actions_left"] == 10


def test_action_budget_truncates() -> None:
    env = FrozenLakeEnv(desc=["SFF", "FFF", "FFG"], is_slippery=False, max_actions=3)
    env.reset(seed=0)
    _, _, term, trunc, info = env.step(answer("Up", "Left"))  # both bump the edge
    assert (term, trunc, info["actions_left"], info["action_is_effective"]) == (False, False, 1, False)
    _, _, term, trunc, info = env.step(answer("Up", "Left"))  # only one action left
    assert info["actions_executed"] == ["Up"] and (term, trunc) == (False, True)


# ---------------------------------------------------------------------------------------- vision
def test_vision_observation_in_space_and_consistent() -> None:
    env = gym.make("ragen/FrozenLake-Vision-v0", render_mode="rgb_array")
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    assert obs["image"].shape == (64, 64, 3) and obs["image"].dtype == np.uint8
    assert np.array_equal(env.render(), obs["image"])
    frames = [obs["image"]]
    for action in ["Down", "Right", "Up", "Left"] * 2:
        obs, _, term, trunc, _ = env.step(answer(action))
        assert env.observation_space.contains(obs)
        frames.append(obs["image"])
        if term or trunc:
            break
    assert any(not np.array_equal(frames[0], f) for f in frames[1:])  # the picture follows the player

    big = FrozenLakeEnv(desc=GYM_8X8, vision=True)
    assert big.observation_space["image"].shape == (128, 128, 3)
    with pytest.raises(ValueError, match="8x8"):
        big.reset(seed=0, options={"desc": GYM_4X4})


def test_sprites_distinguish_every_tile() -> None:
    env = FrozenLakeEnv(desc=["SH", "FG"], is_slippery=False, render_mode="rgb_array")
    env.reset(seed=0)

    def tile(img, r, c):
        return img[16 * r : 16 * r + 16, 16 * c : 16 * c + 16]

    img = env.render()
    player, hole, frozen, goal = tile(img, 0, 0), tile(img, 0, 1), tile(img, 1, 0), tile(img, 1, 1)
    env.step(answer("Right"))
    in_hole = tile(env.render(), 0, 1)
    env.reset(seed=0)
    env.step(answer("Down", "Right"))
    on_goal = tile(env.render(), 1, 1)
    tiles = [player, hole, frozen, goal, in_hole, on_goal]
    for i in range(len(tiles)):
        for j in range(i + 1, len(tiles)):
            assert not np.array_equal(tiles[i], tiles[j]), (i, j)


def test_text_steps_never_render_pixels(monkeypatch) -> None:
    env = FrozenLakeEnv(render_mode=None)

    def boom(self):
        raise AssertionError("a text step rendered pixels")

    monkeypatch.setattr(FrozenLakeEnv, "_render_rgb", boom)
    for seed in range(5):
        env.reset(seed=seed)
        for _ in range(5):
            env.step(answer("Down", "Right"))


@pytest.mark.parametrize("env_id", ["ragen/FrozenLake-v0", "ragen/FrozenLake-Vision-v0"])
@pytest.mark.parametrize("render_mode", [None, "ansi", "rgb_array"])
def test_check_env(env_id: str, render_mode: str | None) -> None:
    check_env(gym.make(env_id, render_mode=render_mode).unwrapped, skip_render_check=render_mode is None)


# ---------------------------------------------------------------------------------------- oracle
@cache
def expectimax_table(desc: tuple[str, ...], success_rate: float, is_slippery: bool, horizon: int) -> list[list[float]]:
    """values[h][s]: best probability of reaching G within h actions, by plain loops over Gymnasium's table."""
    P = GymFrozenLake(desc=list(desc), is_slippery=is_slippery, success_rate=success_rate).P
    flat = "".join(desc)
    values = [[1.0 if tile == "G" else 0.0 for tile in flat]]
    for _ in range(horizon):
        prev = values[-1]
        layer = []
        for s, tile in enumerate(flat):
            if tile in "GH":
                layer.append(prev[s])
            else:
                layer.append(max(sum(p * prev[nxt] for p, nxt, _r, _t in P[s][a]) for a in range(4)))
        values.append(layer)
    return values


def expectimax(desc: list[str], success_rate: float, is_slippery: bool, start: int, horizon: int) -> float:
    return expectimax_table(tuple(desc), success_rate, is_slippery, horizon)[horizon][start]


@pytest.mark.parametrize("success_rate", [0.8, 1 / 3])
def test_optimal_success_probability_matches_expectimax(success_rate: float) -> None:
    for desc in [GYM_4X4, *random_maps(4, p=0.7)]:
        start = "".join(desc).index("S")
        for horizon in (1, 3, 6, 10):
            env = FrozenLakeEnv(desc=desc, success_rate=success_rate, max_actions=horizon)
            env.reset(seed=0)
            ref = expectimax(desc, success_rate, True, start, horizon)
            assert env.optimal_success_probability() == pytest.approx(ref, abs=1e-12)
    for desc in [GYM_4X4, *random_maps(2, p=0.7)]:
        # Unbounded budget: the values converge from below; slowly on Gymnasium's 4x4 at 0.8, where the
        # best policy leans on walls and waits for a lucky slip (0.978 within 400 actions, 0.997 in the limit).
        start = "".join(desc).index("S")
        unbounded = FrozenLakeEnv(desc=desc, success_rate=success_rate, max_actions=None)
        unbounded.reset(seed=0)
        assert unbounded.optimal_success_probability() == pytest.approx(
            expectimax(desc, success_rate, True, start, 3000), abs=1e-6
        )
    # Gymnasium's 4x4 map at its default 1/3 slip has the well-known optimum of about 0.824.
    env = FrozenLakeEnv(desc=GYM_4X4, success_rate=1 / 3, max_actions=None)
    env.reset(seed=0)
    assert env.optimal_success_probability() == pytest.approx(0.8235, abs=1e-3)


def test_oracle_action_is_optimal_at_every_visited_state() -> None:
    desc = GYM_4X4
    gym_P = GymFrozenLake(desc=desc, success_rate=0.8).P
    env = FrozenLakeEnv(desc=desc, success_rate=0.8, max_actions=8)
    for seed in range(10):
        env.reset(seed=seed)
        done = False
        while not done:
            left, s = env.unwrapped._actions_left, env.s
            best = expectimax(desc, 0.8, True, s, left)
            a = ["Left", "Down", "Right", "Up"].index(env.oracle()[0])
            q = sum(p * expectimax(desc, 0.8, True, nxt, left - 1) for p, nxt, _r, _t in gym_P[s][a])
            assert q == pytest.approx(best, abs=1e-12)
            assert env.optimal_success_probability(from_current=True) == pytest.approx(best, abs=1e-12)
            _, _, term, trunc, _ = env.step(answer(env.oracle()[0]))
            done = term or trunc


def test_oracle_success_rate_matches_its_probability() -> None:
    env = FrozenLakeEnv(desc=["SFFF", "FHFH", "FFFF", "HFFG"], success_rate=0.8, max_actions=10)
    rng = np.random.default_rng(0)
    n = 400
    wins = random_wins = 0
    for seed in range(n):
        env.reset(seed=seed)
        p_opt = env.optimal_success_probability()
        done, info = False, {}
        while not done:
            _, _, term, trunc, info = env.step(f"<think>.</think><answer>{env.oracle()[0]}</answer>")
            done = term or trunc
        wins += info["success"]
        env.reset(seed=seed)
        done = False
        while not done:
            _, _, term, trunc, info = env.step(answer(str(rng.choice(["Left", "Down", "Right", "Up"]))))
            done = term or trunc
        random_wins += info["success"]
    sigma = math.sqrt(p_opt * (1 - p_opt) / n)
    assert abs(wins / n - p_opt) < 4 * sigma + 1e-9, (wins / n, p_opt)
    assert random_wins < wins


def test_deterministic_oracle_takes_a_shortest_path() -> None:
    rng = np.random.default_rng(1)
    for _ in range(20):
        desc = generate_random_map(rng, 5, 0.75)
        env = FrozenLakeEnv(desc=desc, is_slippery=False, max_actions=None)
        env.reset(seed=0)
        steps, terminated = 0, False
        while not terminated and steps < 50:  # the cap turns an idling oracle into a failure, not a hang
            _, _, terminated, _, _ = env.step(answer(env.oracle()[0]))
            steps += 1
        assert env._is_success()
        # Shortest path length by BFS over the grid (independent of the env's planner).
        grid = [list(r) for r in desc]
        start = divmod("".join(desc).index("S"), 5)
        dist, frontier = {start: 0}, [start]
        while frontier:
            r, c = frontier.pop(0)
            for nr, nc in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):
                if 0 <= nr < 5 and 0 <= nc < 5 and (nr, nc) not in dist and grid[nr][nc] != "H":
                    dist[(nr, nc)] = dist[(r, c)] + 1
                    frontier.append((nr, nc))
        goal = divmod("".join(desc).index("G"), 5)
        assert steps == dist[goal]


def test_reset_options_desc_and_several_starts() -> None:
    env = FrozenLakeEnv()
    obs, info = env.reset(seed=0, options={"desc": ["SFG"]})
    assert obs == "P_G" and info["map"] == ["SFG"]
    assert len(env.reset(seed=0)[1]["map"]) == 4  # back to random 4x4 maps
    two_starts = FrozenLakeEnv(desc=["SFS", "FGF"])
    starts = [two_starts.reset(seed=s)[1]["player_position"] for s in range(400)]
    left = starts.count((0, 0))
    assert left + starts.count((0, 2)) == 400
    assert abs(left / 400 - 0.5) < 4 * math.sqrt(0.25 / 400)  # uniform over the S tiles, as Gymnasium


@pytest.mark.parametrize("seed", range(20))
def test_coord_observation_lists_the_cells_of_the_grid(seed):
    """obs_format="coord" / "grid_coord" name exactly the cells the grid shows (parsed independently)."""
    import re

    env = gym.make("ragen/FrozenLake-v0", obs_format="grid_coord", max_actions_per_turn=1)
    obs, _ = env.reset(seed=seed)
    coord_only, _ = gym.make("ragen/FrozenLake-v0", obs_format="coord").reset(seed=seed)
    assert obs.startswith(coord_only + "\nGrid Map:\n")  # the same header, then the grid
    for _ in range(3):
        head, grid = obs.split("Grid Map:\n")
        rows = grid.split("\n")
        cells = {ch: [(r, c) for r, row in enumerate(rows) for c, x in enumerate(row) if x == ch] for ch in "PGOX√"}
        pairs = {k: [tuple(map(int, m)) for m in re.findall(r"\((\d+), (\d+)\)", line)]
                 for k, line in (ln.split(": ", 1) for ln in head.strip().split("\n")[1:])}
        player = cells["P"] or cells["X"] or cells["√"]
        assert pairs["Player"] == player
        assert sorted(pairs["Goal"]) == sorted(cells["G"] + cells["√"])
        assert sorted(pairs["Holes"]) == sorted(cells["O"] + cells["X"])
        obs, _, terminated, truncated, _ = env.step("<think>.</think><answer>Down</answer>")
        if terminated or truncated:
            break


def test_obs_format_is_validated():
    with pytest.raises(ValueError, match="obs_format"):
        gym.make("ragen/FrozenLake-v0", obs_format="pixels")
