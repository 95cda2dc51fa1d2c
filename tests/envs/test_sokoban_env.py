"""SokobanEnv: dynamics and rewards, text formats, XSB round trip, budget, rendering, vision."""

import numpy as np
import pytest

from ragen_envs.base import INVALID_NOTICE
from ragen_envs.sokoban import env as env_module
from ragen_envs.sokoban.env import SokobanEnv
from ragen_envs.sokoban.level import parse_xsb
from ragen_envs.sokoban.render import TILE, sprites
from ragen_envs.sokoban.solver import solve


def answer(*actions: str) -> str:
    return f"<think>plan</think><answer>{' || '.join(actions)}</answer>"


def make(level: str, **kwargs) -> SokobanEnv:
    kwargs.setdefault("max_actions", None)
    env = SokobanEnv(**kwargs)
    env.reset(seed=0, options={"level": level})
    return env


# --------------------------------------------------------------------- dynamics and rewards
def test_walk_and_bump():
    env = make("#####\n#@ .#\n#  $#\n#####")
    _, r, term, trunc, info = env.step(answer("Right"))
    assert env.player_position == (1, 2) and r == pytest.approx(-0.1) and not term and not trunc
    assert info["actions_executed"] == ["Right"] and info["action_is_valid"]
    _, r, *_ = env.step(answer("Up"))  # wall
    assert env.player_position == (1, 2) and r == pytest.approx(-0.1)


def test_push_onto_target_solves():
    env = make("######\n#@$ .#\n######")
    _, r, term, _, info = env.step(answer("Right"))
    assert r == pytest.approx(-0.1) and not term and env.box_positions == [(1, 3)]
    _, r, term, trunc, info = env.step(answer("Right"))
    assert r == pytest.approx(-0.1 + 1 + 10) and term and not trunc and info["success"]
    assert env.to_xsb() == "######\n#  @*#\n######"
    # After the end, stepping is a no-op.
    _, r, term, _, info = env.step(answer("Left"))
    assert r == 0.0 and term and info["actions_executed"] == []


def test_push_off_target_and_target_to_target():
    env = make("#######\n#@*.  #\n#  $  #\n#######")
    _, r, *_ = env.step(answer("Right"))  # box moves from target (1,2) to target (1,3): no change
    assert r == pytest.approx(-0.1)
    _, r, *_ = env.step(answer("Right"))  # off the target onto floor (1,4)
    assert r == pytest.approx(-0.1 - 1)
    assert env.player_position == (1, 3)
    assert env.to_xsb() == "#######\n# .+$ #\n#  $  #\n#######"


def test_blocked_pushes():
    env = make("######\n#@$$.#\n#  . #\n######")
    before = env.to_xsb()
    _, r, *_ = env.step(answer("Right"))  # two boxes in a row: no push, no move
    assert env.to_xsb() == before and r == pytest.approx(-0.1)
    env = make("#####\n# .$@\n#####")  # the player stands on the grid edge
    _, r, *_ = env.step(answer("Left"))
    assert env.box_positions == [(1, 2)] and r == pytest.approx(-0.1 + 1 + 10)
    env = make("####\n#.@$\n####")  # box at the grid edge: the edge is a wall
    _, r, *_ = env.step(answer("Right"))
    assert env.box_positions == [(1, 3)] and env.player_position == (1, 2)


def ref_step(walls, player, boxes, targets, action):
    """Independent rule + reward reference (gym-sokoban's rewards)."""
    h, w = walls.shape
    dr, dc = {"Up": (-1, 0), "Down": (1, 0), "Left": (0, -1), "Right": (0, 1)}[action]

    def free(p):
        return 0 <= p[0] < h and 0 <= p[1] < w and not walls[p]

    reward = -0.1
    nxt = (player[0] + dr, player[1] + dc)
    if not free(nxt):
        return player, boxes, reward
    if nxt in boxes:
        beyond = (nxt[0] + dr, nxt[1] + dc)
        if not free(beyond) or beyond in boxes:
            return player, boxes, reward
        on_before = len(boxes & targets)
        boxes = (boxes - {nxt}) | {beyond}
        on_after = len(boxes & targets)
        reward += (on_after > on_before) * 1.0 - (on_after < on_before) * 1.0
        if boxes == targets:
            reward += 10
    return nxt, boxes, reward


def test_random_play_matches_reference():
    env = SokobanEnv(dim_room=(8, 8), num_boxes=2, max_actions=None)
    rng = np.random.default_rng(0)
    for episode in range(6):
        env.reset(seed=episode)
        lv = env.current_level()
        player, boxes = lv.player, lv.boxes
        for _ in range(60):
            action = ["Up", "Down", "Left", "Right"][int(rng.integers(4))]
            player, boxes, ref_r = ref_step(lv.walls, player, boxes, lv.targets, action)
            _, r, term, _, _ = env.step(answer(action))
            assert r == pytest.approx(ref_r)
            assert env.player_position == player and set(env.box_positions) == boxes
            assert term == (boxes == lv.targets)
            if term:
                break


# --------------------------------------------------------------------- observations
LEVEL = "######\n#.####\n#  ###\n#$ ###\n# @ ##\n######"
GRID = "######\n#O####\n#__###\n#X_###\n#_P_##\n######"
COORD = "Board size: 6 rows x 6 cols (zero-indexed).\nTargets: (1, 1)\nBoxes: (3, 1)\nPlayer: (4, 2)"


@pytest.mark.parametrize(
    ("fmt", "expected"),
    [("grid", GRID), ("coord", COORD), ("grid_coord", COORD + "\nGrid Map:\n" + GRID)],
)
def test_obs_formats(fmt, expected):
    env = SokobanEnv(obs_format=fmt)
    obs, info = env.reset(options={"level": LEVEL})
    assert obs == expected
    for symbol in (
        "#: wall",
        "_: empty floor",
        "O: target",
        "X: box",
        "√: box on target",
        "P: player",
        "S: player",
    ):
        assert symbol in info["instructions"]
    assert env.observation_space.contains(obs)


def test_grid_symbols_on_targets():
    env = make("#######\n#+$ * #\n# $.  #\n#######", obs_format="grid")
    assert env._state_text() == "#######\n#SX_√_#\n#_XO__#\n#######"


def test_to_xsb_round_trip_and_restore():
    env = SokobanEnv(dim_room=(8, 8), num_boxes=2, max_actions=None)
    obs, _ = env.reset(seed=3)
    xsb = env.to_xsb()
    assert parse_xsb(xsb).to_xsb() == xsb
    for a in ["Up", "Left", "Down", "Down", "Right"]:
        obs, *_ = env.step(answer(a))
    xsb = env.to_xsb()
    other = SokobanEnv(dim_room=(8, 8), num_boxes=2, max_actions=None)
    obs2, _ = other.reset(options={"level": xsb})
    assert obs2 == obs.removeprefix(INVALID_NOTICE + "\n") and other.to_xsb() == xsb


def test_invalid_responses_leave_state_unchanged():
    env = make(LEVEL, max_actions=10)
    before = env.to_xsb()
    for bad in [
        "",
        "Up",
        "<answer>Up</answer>",
        "<think></think><answer>Jump</answer>",
        "\x00" * 50,
        "<think>",
    ]:
        obs, r, term, trunc, info = env.step(bad)
        assert env.to_xsb() == before
        assert r == pytest.approx(-0.1) and not info["action_is_valid"] and not term and not trunc
        assert obs.startswith(INVALID_NOTICE)
    assert info["actions_left"] == 10


def test_truncation_at_budget():
    env = make(LEVEL, max_actions=3)
    _, _, term, trunc, info = env.step(answer("Up", "Up"))  # (4, 2) -> (3, 2) -> (2, 2)
    assert not trunc and info["actions_left"] == 1
    _, _, term, trunc, info = env.step(answer("Up", "Up"))  # only one action left: the second is not run
    assert trunc and not term and info["actions_executed"] == ["Up"] and info["actions_left"] == 0
    _, r, _, trunc, _ = env.step(answer("Left"))
    assert trunc and r == 0.0


def test_default_budget_and_generated_levels_fit_it():
    env = SokobanEnv()
    assert env.max_actions == 10
    for seed in range(5):
        _, info = env.reset(seed=seed)
        assert 1 <= info["optimal_steps"] <= 10
        assert len(env.oracle()) == info["optimal_steps"]


def test_seed_determinism():
    a, b = SokobanEnv(), SokobanEnv()
    assert a.reset(seed=123)[0] == b.reset(seed=123)[0]
    assert a.to_xsb() == b.to_xsb()


def test_oracle_plays_to_success():
    env = SokobanEnv(dim_room=(8, 8), num_boxes=2, max_actions=60)
    _, info = env.reset(seed=10000)
    lv = env.current_level()
    plan = env.oracle()
    assert len(plan) == info["optimal_steps"]
    total, done = 0.0, False
    for i in range(0, len(plan), 2):
        _, r, done, trunc, info = env.step(answer(*plan[i : i + 2]))
        total += r
    assert done and info["success"]
    player, boxes, expected = lv.player, lv.boxes, 0.0
    for a in plan:
        player, boxes, r = ref_step(lv.walls, player, boxes, lv.targets, a)
        expected += r
    assert total == pytest.approx(expected) and boxes == lv.targets
    assert env.oracle() == []


def test_loaded_level_optimal_steps_and_errors():
    env = SokobanEnv()
    _, info = env.reset(options={"level": "#######\n#@ $ .#\n#######"})
    assert info["optimal_steps"] == len(solve("#######\n#@ $ .#\n#######")) == 3
    _, info = env.reset(options={"level": "#####\n#@.$#\n#####"})
    assert info["optimal_steps"] is None  # unsolvable
    with pytest.raises(ValueError, match="no player"):
        env.reset(options={"level": "#####\n# $.#\n#####"})
    with pytest.raises(ValueError, match="already solved"):
        env.reset(options={"level": "#####\n#@* #\n#####"})
    with pytest.raises(ValueError, match="XSB text or a Level"):
        env.reset(options={"level": 5})


@pytest.mark.parametrize(
    "kwargs", [{"obs_format": "pixels"}, {"dim_room": 6}, {"max_actions": 0}, {"level_solver_max_states": -1}]
)
def test_bad_constructor_arguments(kwargs):
    with pytest.raises(ValueError):
        SokobanEnv(**kwargs)


# --------------------------------------------------------------------- rendering and vision
def test_render_modes():
    env = SokobanEnv(render_mode="rgb_array")
    env.reset(seed=0)
    img = env.render()
    assert img.shape == (96, 96, 3) and img.dtype == np.uint8
    ansi = SokobanEnv(render_mode="ansi")
    obs, _ = ansi.reset(seed=0)
    assert ansi.render() == obs
    assert SokobanEnv.metadata["render_modes"] == ["ansi", "rgb_array"]


def test_picture_tiles():
    env = make("#####\n#@$.#\n#####", dim_room=(3, 5), render_mode="rgb_array")
    img = env.render()
    s = sprites()
    tile = lambda r, c: img[r * TILE : (r + 1) * TILE, c * TILE : (c + 1) * TILE]  # noqa: E731
    assert np.array_equal(tile(0, 0), s[0])  # wall
    assert np.array_equal(tile(1, 1), s[5])  # player
    assert np.array_equal(tile(1, 2), s[4])  # box
    assert np.array_equal(tile(1, 3), s[2])  # target
    env.step(answer("Right"))
    img = env.render()
    assert np.array_equal(img[16:32, 48:64], s[3])  # box on target


def test_small_level_padded_large_level_own_size():
    env = make("#####\n#@$.#\n#####", render_mode="rgb_array")  # default dim_room 6x6
    img = env.render()
    assert img.shape == (96, 96, 3)
    assert np.array_equal(img[80:96, 80:96], sprites()[0])  # padding is wall
    big = make("#########\n#@ $   .#\n#########", render_mode="rgb_array")
    assert big.render().shape == (3 * 16, 9 * 16, 3)


def test_vision_observation():
    env = SokobanEnv(vision=True)
    obs, _ = env.reset(seed=1)
    assert set(obs) == {"text", "image"} and obs["image"].shape == (96, 96, 3)
    assert env.observation_space.contains(obs)
    obs, _ = env.reset(options={"level": "#####\n#@$.#\n#####"})
    assert env.observation_space.contains(obs)
    obs, *_ = env.step(answer("Right"))
    assert env.observation_space.contains(obs)
    with pytest.raises(ValueError, match="does not fit"):
        env.reset(options={"level": "#########\n#@ $   .#\n#########"})


def test_image_format_withholds_the_text_and_keeps_the_picture():
    """obs_format="image": the same text for every level and step, the image still tells them apart; a text-only
    env refuses it (it would show nothing about the state)."""
    env = SokobanEnv(vision=True, obs_format="image")
    a, _ = env.reset(seed=1)
    b, _ = env.reset(seed=2)
    assert a["text"] == b["text"] and not np.array_equal(a["image"], b["image"])
    assert "(" not in a["text"] and "#" not in a["text"]  # no coordinate, no grid
    moved, *_ = env.step(answer("Right"))
    assert moved["text"] == a["text"]
    oracle = SokobanEnv(vision=True)  # the picture is the one the other formats show
    assert np.array_equal(oracle.reset(seed=2)[0]["image"], b["image"])
    with pytest.raises(ValueError, match="vision=True"):
        SokobanEnv(obs_format="image")


def test_text_step_never_renders(monkeypatch):
    env = SokobanEnv(max_actions=None)
    env.reset(seed=0)

    def boom(*args, **kwargs):
        raise AssertionError("a text step drew pixels")

    monkeypatch.setattr(env_module, "render_tiles", boom)
    for a in ["Up", "Down", "Left", "Right"]:
        env.step(answer(a))
