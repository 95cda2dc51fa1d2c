"""The seeded Sokoban generator: determinism, solvability, exact optimal lengths, knobs."""

import random

import numpy as np
import pytest

from ragen_envs.sokoban.generator import SokobanGenerator, generate_room, room_topology
from ragen_envs.sokoban.solver import solve


def test_same_seed_same_levels():
    gen = SokobanGenerator((8, 8), 2)
    a = [gen.generate(np.random.default_rng(7)) for _ in range(3)]
    b = [gen.generate(np.random.default_rng(7)) for _ in range(3)]
    assert [x.level.to_xsb() for x in a] == [x.level.to_xsb() for x in b]
    rng1, rng2 = np.random.default_rng(11), np.random.default_rng(11)
    seq1 = [gen.generate(rng1).level.to_xsb() for _ in range(5)]
    seq2 = [gen.generate(rng2).level.to_xsb() for _ in range(5)]
    assert seq1 == seq2
    assert len(set(seq1)) > 1  # successive draws differ


def test_global_random_state_untouched():
    np.random.seed(5)
    random.seed(5)
    expected_np, expected_py = np.random.random(), random.random()
    np.random.seed(5)
    random.seed(5)
    generate_room(np.random.default_rng(0), (8, 8), 2)
    assert np.random.random() == expected_np
    assert random.random() == expected_py


@pytest.mark.parametrize(
    ("dims", "boxes", "count"),
    [((6, 6), 1, 40), ((8, 8), 2, 10), ((7, 9), 2, 5), ((10, 10), 3, 3)],
)
def test_levels_solvable_with_exact_optimal_steps(dims, boxes, count):
    gen = SokobanGenerator(dims, boxes)
    rng = np.random.default_rng(2024)
    for _ in range(count):
        item = gen.generate(rng)
        lv = item.level
        assert lv.shape == dims
        assert len(lv.boxes) == len(lv.targets) == boxes
        assert lv.walls[[0, -1], :].all() and lv.walls[:, [0, -1]].all()
        solution = solve(lv)
        assert solution is not None, lv.to_xsb()
        assert len(solution) == item.optimal_steps, lv.to_xsb()
        assert item.optimal_steps >= 1


@pytest.mark.parametrize(("lo", "hi"), [(1, 3), (4, 6), (8, 8)])
def test_solution_length_bounds(lo, hi):
    gen = SokobanGenerator((6, 6), 1, min_solution_len=lo, max_solution_len=hi)
    rng = np.random.default_rng(lo * 100 + hi)
    for _ in range(15):
        item = gen.generate(rng)
        assert lo <= item.optimal_steps <= hi
        assert len(solve(item.level)) == item.optimal_steps


def test_impossible_length_raises_runtime_error():
    gen = SokobanGenerator((4, 4), 1, min_solution_len=50, max_tries=5)
    with pytest.raises(RuntimeError, match="min_solution_len"):
        gen.generate(np.random.default_rng(0))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"dim_room": (2, 6)},
        {"dim_room": 6},
        {"dim_room": (4, 4), "num_boxes": 4},
        {"num_boxes": 0},
        {"min_solution_len": 0},
        {"min_solution_len": 5, "max_solution_len": 4},
        {"p_change_directions": 1.5},
        {"max_tries": 0},
    ],
)
def test_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        SokobanGenerator(**kwargs)


def test_rng_must_be_a_generator():
    with pytest.raises(ValueError, match="numpy.random.Generator"):
        SokobanGenerator().generate(0)  # type: ignore[arg-type]


def test_topology_is_closed_and_connected():
    rng = np.random.default_rng(3)
    for _ in range(20):
        walls = room_topology(rng, (10, 10), 34)
        assert walls[[0, -1], :].all() and walls[:, [0, -1]].all()
        floor = np.argwhere(~walls)
        assert len(floor) > 0
        # One 4-connected component (the random walk carves a connected area).
        seen = {tuple(floor[0])}
        stack = [tuple(floor[0])]
        while stack:
            r, c = stack.pop()
            for n in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):
                if not walls[n] and n not in seen:
                    seen.add(n)
                    stack.append(n)
        assert len(seen) == len(floor)
