"""Random Sokoban rooms with a known optimal solution length.

Generation, for one room (`SokobanGenerator.generate`):

1. Floor plan: gym-sokoban's random walk (`num_gen_steps = 1.7 * (H + W)` steps, direction change
   with probability 0.35, one of five 3x3 masks carved around each position, outer ring kept wall).
2. Targets: `num_boxes` distinct floor cells, uniformly.
3. Exact backward search (`solver.goal_distances`) from every solved state: layer d holds every
   state whose shortest solution takes exactly d steps. All of them are solvable by construction.
4. Start state: the deepest layer d* = min(max_solution_len, deepest layer) is used if
   d* >= min_solution_len (else a new room is drawn); among its states those whose optimal first
   step is a push (the player next to a box, as gym-sokoban's reverse play leaves it) are preferred;
   one is drawn uniformly.

So `optimal_steps` is exact, not an upper bound from a replayed path, and the difficulty is the
hardest the room allows within the bounds. Differences from gym-sokoban: every draw comes from the
`np.random.Generator` passed in (never `random`/`np.random`), a room that cannot reach the requested
length is redrawn instead of raising, and the search is breadth-first and exhaustive rather than a
300-deep depth-first search scored by box displacement.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ragen_envs.sokoban.level import Level
from ragen_envs.sokoban.solver import goal_distances
from ragen_envs.validation import require_int

# gym-sokoban's carving masks (a cross of three cells in five shapes).
_MASKS = np.array(
    [
        [[0, 0, 0], [1, 1, 1], [0, 0, 0]],
        [[0, 1, 0], [0, 1, 0], [0, 1, 0]],
        [[0, 0, 0], [1, 1, 0], [0, 1, 0]],
        [[0, 0, 0], [1, 1, 0], [1, 1, 0]],
        [[0, 0, 0], [0, 1, 1], [0, 1, 0]],
    ],
    dtype=bool,
)
_DIRECTIONS = ((1, 0), (0, 1), (-1, 0), (0, -1))


@dataclass(frozen=True)
class GeneratedLevel:
    """A generated start position and the length of its shortest solution, in env steps."""

    level: Level
    optimal_steps: int


def room_topology(
    rng: np.random.Generator, dim_room: tuple[int, int], num_steps: int, p_change_directions: float = 0.35
) -> np.ndarray:
    """gym-sokoban's random-walk floor plan. Returns walls, bool (H, W), with the outer ring all wall."""
    h, w = dim_room
    change = rng.random(num_steps) < p_change_directions
    new_dir = rng.integers(4, size=num_steps)
    mask_ids = rng.integers(len(_MASKS), size=num_steps)
    floor = np.zeros((h + 2, w + 2), dtype=bool)  # one spare ring so every 3x3 mask fits
    dr, dc = _DIRECTIONS[int(rng.integers(4))]
    r, c = int(rng.integers(1, h - 1)), int(rng.integers(1, w - 1))
    for i in range(num_steps):
        if change[i]:
            dr, dc = _DIRECTIONS[new_dir[i]]
        r = min(max(r + dr, 1), h - 2)
        c = min(max(c + dc, 1), w - 2)
        floor[r : r + 3, c : c + 3] |= _MASKS[mask_ids[i]]
    floor = floor[1:-1, 1:-1]
    floor[[0, -1], :] = False
    floor[:, [0, -1]] = False
    return ~floor


class SokobanGenerator:
    """Seeded Sokoban rooms with exact optimal solution lengths (module docstring for the method).

    Args:
        dim_room: (H, W) of the room including its outer wall ring, each >= 3.
        num_boxes: boxes (= targets), >= 1; the interior must hold them plus the player.
        min_solution_len: shortest accepted optimal solution, in steps (>= 1).
        max_solution_len: longest accepted optimal solution, in steps (None: no limit but the search
            budget). The level drawn is the deepest the room allows within [min, max].
        p_change_directions: random-walk direction change probability (gym-sokoban: 0.35).
        num_gen_steps: random-walk length (None: int(1.7 * (H + W)), as gym-sokoban).
        max_tries: rooms drawn before giving up with RuntimeError.
        max_states: budget of the backward search per room (states); layers beyond it are not used.
        max_total_states: budget of the backward searches of one `generate` call, all its rooms together
            (states; default 10,000,000, about half a minute): then RuntimeError, as after `max_tries` rooms.
            Rooms of 20x20 and more with several boxes search up to `max_states` each, so `max_tries` alone
            let a `min_solution_len` that few rooms reach run for a quarter of an hour before the error.

    Example:
        >>> gen = SokobanGenerator(dim_room=(10, 10), num_boxes=3)
        >>> item = gen.generate(np.random.default_rng(0))
        >>> item.optimal_steps == len(solve(item.level))   # doctest: +SKIP
    """

    def __init__(
        self,
        dim_room: tuple[int, int] = (6, 6),
        num_boxes: int = 1,
        min_solution_len: int = 1,
        max_solution_len: int | None = None,
        *,
        p_change_directions: float = 0.35,
        num_gen_steps: int | None = None,
        max_tries: int = 1000,
        max_states: int = 200_000,
        max_total_states: int = 10_000_000,
    ):
        if not isinstance(dim_room, (tuple, list)) or len(dim_room) != 2:
            raise ValueError(f"dim_room must be a pair (H, W) of integers >= 3, got {dim_room!r}")
        h = require_int("dim_room[0]", dim_room[0], 3)
        w = require_int("dim_room[1]", dim_room[1], 3)
        self.dim_room = (h, w)
        self.num_boxes = require_int("num_boxes", num_boxes, 1)
        if (h - 2) * (w - 2) < self.num_boxes + 1:
            raise ValueError(
                f"a {h}x{w} room has {(h - 2) * (w - 2)} interior cells, too few for {self.num_boxes} boxes "
                "and the player; use a larger dim_room or fewer boxes"
            )
        self.min_solution_len = require_int("min_solution_len", min_solution_len, 1)
        if max_solution_len is not None:
            max_solution_len = require_int("max_solution_len", max_solution_len, self.min_solution_len)
        self.max_solution_len = max_solution_len
        if not 0.0 <= float(p_change_directions) <= 1.0:
            raise ValueError(f"p_change_directions must be in [0, 1], got {p_change_directions!r}")
        self.p_change_directions = float(p_change_directions)
        if num_gen_steps is None:
            num_gen_steps = int(1.7 * (h + w))
        self.num_gen_steps = require_int("num_gen_steps", num_gen_steps, 1)
        self.max_tries = require_int("max_tries", max_tries, 1)
        self.max_states = require_int("max_states", max_states, 1)
        self.max_total_states = require_int("max_total_states", max_total_states, 1)

    def generate(self, rng: np.random.Generator) -> GeneratedLevel:
        """Draw one level; every random draw comes from `rng`.

        Raises:
            ValueError: `rng` is not a `np.random.Generator`.
            RuntimeError: no room reached `min_solution_len` within `max_tries` rooms or `max_total_states`
                searched states.
        """
        if not isinstance(rng, np.random.Generator):
            raise ValueError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
        deepest_seen = 0
        searched = 0
        tries = 0
        while tries < self.max_tries and searched < self.max_total_states:
            tries += 1
            walls = room_topology(rng, self.dim_room, self.num_gen_steps, self.p_change_directions)
            floor_cells = np.flatnonzero(~walls)
            if len(floor_cells) < self.num_boxes + 1:
                continue
            w = walls.shape[1]
            chosen = rng.choice(floor_cells, size=self.num_boxes, replace=False)
            targets = frozenset((int(i) // w, int(i) % w) for i in np.sort(chosen))
            dist = goal_distances(walls, targets, max_depth=self.max_solution_len, max_states=self.max_states)
            depth = len(dist.layers) - 1
            deepest_seen = max(deepest_seen, depth)
            searched += sum(len(layer) for layer in dist.layers)
            if depth < self.min_solution_len:
                continue
            layer, pulled = dist.layers[depth], dist.pulled[depth]
            candidates = [s for s, f in zip(layer, pulled) if f] or layer
            state = candidates[int(rng.integers(len(candidates)))]
            return GeneratedLevel(level=dist.level(walls, targets, state), optimal_steps=depth)
        budget = f" in {self.max_tries} tries"
        if searched >= self.max_total_states:  # the state budget ended the search before max_tries rooms
            budget = f" in {tries} tries ({searched} states searched, over the budget of {self.max_total_states})"
        raise RuntimeError(
            f"no {self.dim_room[0]}x{self.dim_room[1]} room with {self.num_boxes} boxes reached an optimal "
            f"solution of {self.min_solution_len} steps{budget} (deepest: {deepest_seen}); "
            "lower min_solution_len or enlarge the room"
        )


def generate_room(
    rng: np.random.Generator,
    dim_room: tuple[int, int] = (6, 6),
    num_boxes: int = 1,
    min_solution_len: int = 1,
    max_solution_len: int | None = None,
    **kwargs,
) -> GeneratedLevel:
    """One level from `SokobanGenerator(dim_room, num_boxes, min_solution_len, max_solution_len, **kwargs)`."""
    return SokobanGenerator(dim_room, num_boxes, min_solution_len, max_solution_len, **kwargs).generate(rng)
