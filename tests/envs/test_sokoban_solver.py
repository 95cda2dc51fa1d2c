"""The Sokoban solver against an independent brute-force search written here."""

from collections import deque

import numpy as np
import pytest

from ragen_envs.sokoban.level import Level, parse_xsb
from ragen_envs.sokoban.solver import Board, goal_distances, push_move, solve

MOVES = {"Up": (-1, 0), "Down": (1, 0), "Left": (0, -1), "Right": (0, 1)}


def ref_step(walls, player, boxes, action):
    """Plain push rules on (row, col) tuples; the grid edge blocks like a wall."""
    h, w = walls.shape
    dr, dc = MOVES[action]

    def free(cell):
        r, c = cell
        return 0 <= r < h and 0 <= c < w and not walls[r, c]

    nxt = (player[0] + dr, player[1] + dc)
    if not free(nxt):
        return player, boxes
    if nxt in boxes:
        beyond = (nxt[0] + dr, nxt[1] + dc)
        if not free(beyond) or beyond in boxes:
            return player, boxes
        boxes = (boxes - {nxt}) | {beyond}
    return nxt, boxes


def brute_force_length(level: Level):
    """Shortest solution length by exhaustive BFS with no pruning at all, or None."""
    start = (level.player, level.boxes)
    dist = {start: 0}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        if state[1] == level.targets:
            return dist[state]
        for action in MOVES:
            nxt = ref_step(level.walls, state[0], state[1], action)
            if nxt not in dist:
                dist[nxt] = dist[state] + 1
                queue.append(nxt)
    return None


def replay_solves(level: Level, actions) -> bool:
    player, boxes = level.player, level.boxes
    for a in actions:
        player, boxes = ref_step(level.walls, player, boxes, a)
    return boxes == level.targets


HAND_LEVELS = [
    "#####\n#@$.#\n#####",
    "@$.",
    "######\n#    #\n# $$ #\n#@.. #\n######",
    "#######\n#.  ..#\n# $$$ #\n#  @  #\n#######",
    "######\n#.@  #\n# $# #\n#    #\n######",
    "#####\n#.$@#\n#####",  # box must go left, player is right of it: pushing left works
    "#####\n#@.$#\n#####",  # box against the wall: unsolvable
    "######\n#@ $ #\n#.####\n######",  # box must be pushed round a corner it cannot pass: unsolvable
    "#######\n#@ $ .#\n# $   #\n#.    #\n#######",
]


@pytest.mark.parametrize("text", HAND_LEVELS)
def test_optimal_on_hand_levels(text):
    level = parse_xsb(text)
    ref = brute_force_length(level)
    got = solve(text)
    if ref is None:
        assert got is None
    else:
        assert got is not None and len(got) == ref
        assert replay_solves(level, got)


def random_small_level(rng, h=5, w=5, boxes=2):
    walls = rng.random((h, w)) < 0.12
    free = np.flatnonzero(~walls)
    if len(free) < 2 * boxes + 1:
        return None
    cells = rng.choice(free, size=2 * boxes + 1, replace=False)
    pos = [(int(i) // w, int(i) % w) for i in cells]
    # Targets may coincide with boxes in XSB only as '*'; here they are distinct cells.
    level = Level(walls, frozenset(pos[:boxes]), frozenset(pos[boxes : 2 * boxes]), pos[-1])
    try:
        from ragen_envs.sokoban.level import validate

        validate(level)
    except ValueError:
        return None
    return level


def test_optimal_on_random_small_levels():
    rng = np.random.default_rng(1234)
    checked = solvable = 0
    while checked < 80:
        level = random_small_level(rng, boxes=1 + checked % 2)
        if level is None:
            continue
        checked += 1
        ref = brute_force_length(level)
        got = solve(level)
        if ref is None:
            assert got is None, level.to_xsb()
        else:
            solvable += 1
            assert got is not None and len(got) == ref, level.to_xsb()
            assert replay_solves(level, got)
    assert solvable >= 10  # the sample must exercise the solvable branch


def test_already_solved_and_budget():
    assert solve("#####\n#@* #\n#####") == []
    hard = "#######\n#.  ..#\n# $$$ #\n#  @  #\n#######"
    assert solve(hard) is not None
    assert solve(hard, max_states=5) is None


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "10"])
def test_bad_budget(bad):
    with pytest.raises(ValueError, match="max_states"):
        solve("#####\n#@$.#\n#####", max_states=bad)


def test_bad_level_type():
    with pytest.raises(ValueError, match="XSB text"):
        solve(42)  # type: ignore[arg-type]


def test_goal_distance_layers_match_brute_force():
    level = parse_xsb("######\n#    #\n# $$ #\n#@.. #\n######")
    layers = goal_distances(level.walls, level.targets)
    assert layers.complete
    rng = np.random.default_rng(0)
    for d in range(1, len(layers.layers), 3):
        layer = layers.layers[d]
        for i in rng.choice(len(layer), size=min(5, len(layer)), replace=False):
            state = layers.level(level.walls, level.targets, layer[int(i)])
            assert brute_force_length(state) == d
    # The start position of the level is somewhere in the layers, at its optimal distance.
    d0 = brute_force_length(level)
    board = layers.board
    code = (board.mask(level.boxes) << board.player_bits) | board.index(level.player)
    assert code in layers.layers[d0]


def test_push_move_is_the_one_rule():
    """Walk, push, and the three blocked cases (wall, box against a wall, two boxes in a row)."""
    lv = parse_xsb("#######\n#@ $$.#\n#. $ .#\n#######")
    board = Board(lv.walls)
    up, down, left, right = board.dirs
    boxes = board.mask(lv.boxes)
    p = board.index(lv.player)
    assert push_move(board.floor, board.floor, p, boxes, up) is None  # wall
    assert push_move(board.floor, board.floor, p, boxes, down) == (p + down, boxes)  # walk
    q = p + right
    assert push_move(board.floor, board.floor, q, boxes, right) is None  # two boxes in a row
    moved = push_move(board.floor, board.floor, q + down, boxes, right)
    assert moved == (q + down + right, boxes ^ (1 << (q + down + right)) ^ (1 << (q + down + 2 * right)))
    dead = [False] * board.size  # a box may only go where box_floor allows (the solver's live cells)
    assert push_move(board.floor, dead, q + down, boxes, right) is None
    assert push_move(board.floor, dead, q + down, boxes, up) == (q, boxes)  # walking ignores box_floor
