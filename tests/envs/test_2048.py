"""2048: the merge rules against a plain independent reference, the spawn distribution, the env and its oracle."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from observation_checks import assert_refusals_capped

import ragen_envs  # noqa: F401  (registers the ids)
from ragen_envs.game2048 import Game2048Env, best_move, legal_moves, move, slide_row_left, spawn
from ragen_envs.game2048.oracle import apply_move, to_exponents
from ragen_envs.protocol import FORMAT_PENALTY

EXAMPLES = 200
TILES = st.sampled_from([0, 0, 0, 2, 2, 4, 4, 8, 16, 32, 64, 128, 1024, 2048])


def reference_line(line: list[int]) -> tuple[list[int], int]:
    """Move a line towards index 0, written differently from the rules module: walk the cells once, keep
    the last placed tile and whether it came from a merge (a merged tile never merges again)."""
    out: list[int] = []
    merged_last = False
    score = 0
    for value in line:
        if value == 0:
            continue
        if out and out[-1] == value and not merged_last:
            out[-1] *= 2
            score += out[-1]
            merged_last = True
        else:
            out.append(value)
            merged_last = False
    return out + [0] * (len(line) - len(out)), score


def reference_move(board: np.ndarray, direction: str) -> tuple[np.ndarray, int]:
    """Rotate the board so that the move goes left (np.rot90), move each row, rotate back."""
    turns = {"Left": 0, "Up": 1, "Right": 2, "Down": 3}[direction]  # counter-clockwise quarter turns
    rotated = np.rot90(board, turns)
    rows = [reference_line(list(r)) for r in rotated.tolist()]
    out = np.rot90(np.array([r for r, _ in rows], dtype=np.int64), -turns)
    return out, sum(s for _, s in rows)


@pytest.mark.parametrize(
    "row, expected, score",
    [
        ([2, 2, 2, 2], [4, 4, 0, 0], 8),
        ([4, 4, 8, 0], [8, 8, 0, 0], 8),  # no double merge
        ([2, 2, 2, 0], [4, 2, 0, 0], 4),
        ([0, 2, 0, 2], [4, 0, 0, 0], 4),
        ([2, 0, 0, 4], [2, 4, 0, 0], 0),
        ([8, 8, 16, 16], [16, 32, 0, 0], 48),
        ([2, 4, 8, 16], [2, 4, 8, 16], 0),
        ([0, 0, 0, 0], [0, 0, 0, 0], 0),
    ],
)
def test_known_rows(row, expected, score):
    assert slide_row_left(row) == (expected, score)
    assert reference_line(row) == (expected, score)


@given(st.lists(TILES, min_size=2, max_size=8))
@settings(max_examples=EXAMPLES, deadline=None)
def test_rows_match_the_reference(row):
    assert slide_row_left(row) == reference_line(row)
    new, _ = slide_row_left(row)
    assert sum(new) == sum(row)  # merging keeps the total
    exps = tuple(int(v).bit_length() - 1 if v else 0 for v in row)
    ours_exp, score_exp = apply_move((exps,), "Left")  # the oracle's exponent rules agree too
    assert [1 << e if e else 0 for e in ours_exp[0]] == new and score_exp == reference_line(row)[1]


@given(st.integers(2, 6).flatmap(lambda n: st.lists(TILES, min_size=n * n, max_size=n * n)), st.sampled_from(
    ["Up", "Down", "Left", "Right"]))
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_moves_match_the_reference_in_every_direction(cells, direction):
    n = int(len(cells) ** 0.5)
    board = np.array(cells, dtype=np.int64).reshape(n, n)
    expected, score = reference_move(board, direction)
    new, gained, changed = move(board, direction)
    assert np.array_equal(new, expected) and gained == score
    assert changed == (not np.array_equal(expected, board))
    assert (direction in legal_moves(board)) == changed
    exp_new, exp_score = apply_move(to_exponents(board), direction)
    assert exp_new == to_exponents(expected) and exp_score == score


def test_directions_are_the_screen_directions():
    board = np.array([[0, 0], [2, 0]])
    assert move(board, "Up")[0].tolist() == [[2, 0], [0, 0]]
    assert move(board, "Right")[0].tolist() == [[0, 0], [0, 2]]
    assert not move(board, "Down")[2] and not move(board, "Left")[2]


def test_spawn_is_uniform_over_empty_cells_and_a_four_one_time_in_ten():
    rng = np.random.default_rng(0)
    board = np.array([[2, 0, 0], [0, 4, 0], [0, 0, 8]], dtype=np.int64)
    trials = 6000
    cells, fours = {}, 0
    for _ in range(trials):
        b = board.copy()
        r, c, v = spawn(b, rng)
        assert board[r, c] == 0 and b[r, c] == v and (b != board).sum() == 1
        cells[(r, c)] = cells.get((r, c), 0) + 1
        fours += v == 4
    assert len(cells) == 6
    # binomial 5-sigma bounds: each cell 1/6, a four 0.1
    sd_cell = (trials * (1 / 6) * (5 / 6)) ** 0.5
    assert all(abs(k - trials / 6) < 5 * sd_cell for k in cells.values())
    assert abs(fours - 0.1 * trials) < 5 * (trials * 0.09) ** 0.5
    full = np.full((2, 2), 2)
    assert spawn(full, rng) is None


def _respond(*actions: str) -> str:
    return "<think>t</think><answer>" + " || ".join(actions) + "</answer>"


def test_reset_has_two_tiles_and_is_seeded():
    env = Game2048Env()
    _, info = env.reset(seed=3)
    board = np.array(info["board"])
    assert (board > 0).sum() == 2 and set(board[board > 0]) <= {2, 4}
    again = Game2048Env()
    again.reset(seed=3)
    assert np.array_equal(again.board, board)
    for move_name in ["Left", "Up", "Right", "Down"] * 5:
        a = env.step(_respond(move_name))
        b = again.step(_respond(move_name))
        assert a[0] == b[0] and a[1] == b[1]


def test_reward_is_the_merged_values_and_a_tile_appears():
    env = Game2048Env(size=4, target=2048)
    board = [[2, 2, 4, 4], [8, 0, 8, 0], [0, 0, 0, 0], [2, 0, 0, 0]]
    env.reset(seed=0, options={"board": board})
    _, reward, term, _, info = env.step(_respond("Left"))
    expected, score = reference_move(np.array(board), "Left")
    assert reward == score == 4 + 8 + 16 and info["score"] == score
    after = np.array(info["board"])
    diff = after != expected
    assert diff.sum() == 1 and expected[diff][0] == 0 and after[diff][0] in (2, 4)
    assert info["spawned"] == [[*map(int, np.argwhere(diff)[0]), int(after[diff][0])]]
    assert not term and info["action_is_effective"]


def test_a_move_that_changes_nothing_is_refused_with_the_penalty():
    env = Game2048Env(size=3, target=64)
    env.reset(seed=0, options={"board": [[2, 4, 8], [0, 0, 0], [0, 0, 0]]})
    before = env.board.copy()
    obs, reward, term, trunc, info = env.step(_respond("Up"))
    assert reward == pytest.approx(FORMAT_PENALTY) and not info["action_is_valid"] and not info["spawned"]
    assert np.array_equal(env.board, before) and info["refused"][0]["reason"] == "it changes nothing"
    assert "Refused Up" in obs and "unchanged" in obs
    # the second of two moves is judged on the board the first leaves (before the new tile)
    _, reward, _, _, info = env.step(_respond("Down", "Down"))
    assert info["actions_executed"] == ["Down"] and reward == pytest.approx(FORMAT_PENALTY)


def test_a_move_blocked_only_by_the_new_tile_is_skipped_without_penalty():
    # Left fills the top row up to its last cell, where the new tile must appear; Right changes the board
    # the model sees ([2, 4, .] -> [., 2, 4]) but not [2, 4, 2] (a new 2). The game goes on (2 over 2 in
    # the last column). Seeds whose new tile is a 2 (9 in 10) show the skip.
    env = Game2048Env(size=3, target=512)
    for seed in range(20):
        env.reset(seed=seed, options={"board": [[0, 2, 4], [8, 16, 2], [64, 128, 256]]})
        _, reward, term, _, info = env.step(_respond("Left", "Right"))
        assert info["spawned"][0][:2] == [0, 2] and not term
        if info["spawned"][0][2] == 2:
            assert info["blocked"] == ["Right"] and info["actions_executed"] == ["Left", "Right"]
            assert reward == 0.0 and info["format_penalty"] == 0.0 and len(info["spawned"]) == 1
            return
    pytest.fail("no seed in 20 spawned a 2")


def test_reaching_the_target_is_success_and_ends_the_episode():
    env = Game2048Env(size=3, target=64)
    env.reset(seed=0, options={"board": [[32, 32, 0], [0, 0, 0], [0, 2, 0]]})
    _, reward, term, _, info = env.step(_respond("Left", "Right"))
    assert info["success"] and term and reward == 64 and info["actions_executed"] == ["Left"]
    assert info["max_tile"] == 64


def test_a_full_board_without_merges_is_game_over():
    env = Game2048Env(size=2, target=32)
    env.reset(seed=1, options={"board": [[2, 4], [8, 0]]})
    # any move fills the board; with [2, 4], [8, x] there is no merge unless x equals a neighbour
    for seed in range(50):
        env.reset(seed=seed, options={"board": [[2, 4], [0, 8]]})
        _, _, term, _, info = env.step(_respond("Left"))
        board = np.array(info["board"])
        assert term == (not legal_moves(board))
        if term:
            assert not info["success"]
            return
    pytest.fail("no seed ended the game")


@pytest.mark.parametrize("bad", [dict(size=1), dict(size=9), dict(target=100), dict(target=4), dict(size=2, target=64),
                                 dict(oracle_depth=0), dict(max_actions=0)])
def test_bad_arguments_are_value_errors(bad):
    with pytest.raises(ValueError):
        Game2048Env(**bad)


@pytest.mark.parametrize("board", [[[2, 3, 0], [0] * 3, [0] * 3], [[2, 0], [0, 0]], [[64, 0, 0], [0] * 3, [0] * 3],
                                   [[2, 4, 2], [4, 2, 4], [2, 4, 2]], [[2.0, 0, 0], [0] * 3, [0] * 3]])
def test_bad_boards_are_value_errors(board):
    with pytest.raises(ValueError):
        Game2048Env(size=3, target=64).reset(options={"board": board})


def test_the_oracle_plays_well():
    """The depth-2 expectimax reaches 128 on a 4x4 board in both of 2 seeded games, and always names a
    legal move; the rewards add up to the game's score."""
    env = Game2048Env(size=4, target=128)
    for seed in range(2):
        env.reset(seed=seed)
        done, total = False, 0.0
        while not done:
            reasoning, actions = env.oracle_step()
            assert actions[0] in legal_moves(env.board) and actions[0] in reasoning
            _, reward, term, trunc, info = env.step(_respond(*actions))
            total += reward
            done = term or trunc
        assert info["success"] and total == info["score"], seed


def test_best_move_prefers_the_merge_that_keeps_the_corner():
    board = np.array([[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 2], [0, 0, 1024, 1024]])
    assert best_move(board, 1) in ("Right", "Left")
    assert best_move(np.array([[2, 4], [4, 2]]), 2) is None


def test_text_observation():
    env = gym.make("ragen/2048-v0", size=3, target=64)
    env.reset(seed=0, options={"board": [[2, 0, 0], [0, 4, 0], [0, 0, 0]]})
    obs = env.unwrapped._state_text()
    lines = obs.splitlines()
    assert lines[0].split() == ["2", ".", "."] and lines[1].split() == [".", "4", "."]
    assert lines[3] == "Score: 0. Target: 64." and lines[4] == "Moves that change the board: Up, Down, Left, Right."


# ----------------------------------------------------------------------------------------------- hostile answers
def _board_in_text(text: str, size: int) -> np.ndarray | None:
    """The board an observation shows, read back from the `size` lines above its "Score:" line without the
    env's renderer (tiles or "." separated by spaces); None when they are not there."""
    lines = text.splitlines()
    score = [i for i, line in enumerate(lines) if line.startswith("Score: ")]
    if len(score) != 1 or score[0] < size:
        return None
    rows = [line.split() for line in lines[score[0] - size : score[0]]]
    if any(len(row) != size or not all(t == "." or t.isdigit() for t in row) for row in rows):
        return None
    return np.array([[0 if t == "." else int(t) for t in row] for row in rows], dtype=np.int64)


_HOSTILE_PIECES = st.sampled_from(["x", "", "lorem ipsum dolor", "Up", "Down", "Left", "Right", "up!", "U", "merge"])


@given(seed=st.integers(0, 50), pieces=st.lists(_HOSTILE_PIECES, min_size=1, max_size=30), repeat=st.integers(1, 600))
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_the_board_and_the_notice_survive_any_number_of_refused_pieces(seed, pieces, repeat):
    """Thousands of refused pieces (up to the response limit) list at most 5 refusals and a count; the board
    read back from the observation is the env's board, the score line follows it, and when nothing ran the
    notice stands right above the board."""
    env = Game2048Env()
    env.reset(seed=seed)
    obs, _, _, _, info = env.step(_respond(*(pieces * repeat)))
    lines = obs.splitlines()
    board = _board_in_text(obs, 4)
    assert board is not None and np.array_equal(board, env.board), obs[-400:]
    assert lines[-2] == f"Score: {env.score}. Target: 2048." and lines[-1].startswith("Moves that change the board:")
    assert_refusals_capped(lines, info)
    if not info["actions_executed"]:
        assert lines[-7] == "Your answer had no valid action; the state is unchanged."
    assert len(obs) < 1_000


def test_x_pipes_300_times_keeps_the_board_and_the_notice():
    """The reported response: 300 refused pieces once left 16,384 characters of refusals and no board."""
    env = Game2048Env()
    env.reset(seed=0)
    start = env.board.copy()
    obs, reward, _, _, info = env.step(_respond("x||" * 300))
    assert len(info["refused"]) == 300 and reward == pytest.approx(FORMAT_PENALTY)
    assert np.array_equal(_board_in_text(obs, 4), start)
    assert "Your answer had no valid action; the state is unchanged." in obs
    assert "... and 295 more refused pieces of your answer." in obs
