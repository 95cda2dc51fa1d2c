"""The 2x2x2 pocket cube: stickers, face turns, whole-cube rotations and the coordinates of the distance table.

Geometry (derived, not typed in: every turn and rotation below is computed from 3-D rotation matrices, so
no sticker cycle is written by hand). Axes: x to the Right face, y to the Up face, z to the Front face.
A sticker is `(c, n)`: the cubie's centre `c` in {-1, 1}^3 and the outward normal `n` of its face.

Stickers are numbered `face * 4 + row * 2 + col` with the faces in the order `FACES = "URFDLB"` and each face
read row by row as drawn in the net (`ragen_envs.pocketcube.env`):

    face  up in the net   right in the net      face  up in the net   right in the net
    U     towards B       towards R             D     towards F       towards R
    R     towards U       towards B             L     towards U       towards F
    F     towards U       towards R             B     towards U       towards L

A state is a uint8 array of 24 colour ids (the colour of sticker i), or `[N, 24]` for a batch; colour k is
the colour of face `FACES[k]` when solved (`COLOR_LETTERS`: U white, R red, F green, D yellow, L orange,
B blue: the Western scheme). Applying a turn is a gather: `state[..., MOVE_GATHERS[m]]`.

Turns: `X` turns face X a quarter turn clockwise as seen looking at that face from outside (a rotation by
-90 degrees about its outward normal), `X'` counter-clockwise, `X2` a half turn: 18 moves, each one move of the
half-turn metric.

Coordinates of the table (the standard corner coordinates, with the DBL corner fixed). Whole-cube rotations
are quotiented out by turning the cube so that the Down-Back-Left cubie (yellow, blue, orange) sits at DBL
with yellow down (`canonicalize`). U, R and F turns never move that corner, and D, L, B turns equal U, R, F
turns combined with a whole-cube rotation (`U D'` is the rotation y, so `D` is `U` up to rotation), so U/R/F
alone reach every state and give the same distances. The remaining state is the permutation of the other 7
corners (7! = 5040) and the twists of 6 of them (3^6 = 729; the 7th follows, total twist = 0 mod 3):
`index = perm_rank * 729 + twist`, 3,674,160 states, index 0 solved. A corner's twist is which of its three
stickers (clockwise from the U/D sticker of its slot) carries its white or yellow colour.
"""

from __future__ import annotations

import itertools
from math import factorial

import numpy as np

FACES = "URFDLB"
#: Letter of each colour id (the solved colour of FACES[k]): white, red, green, yellow, orange, blue.
COLOR_LETTERS = "WRGYOB"
COLOR_NAMES = ("white", "red", "green", "yellow", "orange", "blue")
FACE_WORDS = {"U": "Up", "R": "Right", "F": "Front", "D": "Down", "L": "Left", "B": "Back"}

_NORMAL = {"U": (0, 1, 0), "R": (1, 0, 0), "F": (0, 0, 1), "D": (0, -1, 0), "L": (-1, 0, 0), "B": (0, 0, -1)}
# (up, right) of each face as drawn in the net, as 3-D directions (module docstring table).
_FRAME = {
    "U": ((0, 0, -1), (1, 0, 0)),
    "R": ((0, 1, 0), (0, 0, -1)),
    "F": ((0, 1, 0), (1, 0, 0)),
    "D": ((0, 0, 1), (1, 0, 0)),
    "L": ((0, 1, 0), (0, 0, 1)),
    "B": ((0, 1, 0), (-1, 0, 0)),
}

#: The 18 moves, in the order of the env's action list (and the oracle's tie-break: U, R, F before D, L, B).
MOVE_NAMES: tuple[str, ...] = tuple(f + s for f in "URFDLB" for s in ("", "'", "2"))
#: The 9 moves of the table's BFS (the DBL corner stays in place).
URF_MOVES: tuple[str, ...] = MOVE_NAMES[:9]
#: Quarter turns of each suffix: X clockwise (1), X' counter-clockwise (3 = -1), X2 (2).
_QUARTERS = {"": 1, "'": 3, "2": 2}

#: Corner slots: URF, UFL, ULB, UBR, DFR, DLF, DRB and DBL (the fixed one, last).
CORNER_NAMES = ("URF", "UFL", "ULB", "UBR", "DFR", "DLF", "DRB", "DBL")
N_PERM = factorial(7)  # 5040
N_TWIST = 3**6  # 729
N_STATES = N_PERM * N_TWIST  # 3,674,160


def _stickers() -> np.ndarray:
    """[24, 2, 3] int: (cubie centre c, outward normal n) of every sticker, in sticker-index order."""
    out = np.zeros((24, 2, 3), np.int64)
    for f, face in enumerate(FACES):
        n = np.array(_NORMAL[face])
        up, right = (np.array(v) for v in _FRAME[face])
        for row in range(2):
            for col in range(2):
                out[f * 4 + row * 2 + col] = (n + (2 * col - 1) * right + (1 - 2 * row) * up, n)
    return out


STICKERS = _stickers()
_INDEX = {(tuple(c), tuple(n)): i for i, (c, n) in enumerate(STICKERS)}
#: The solved state: sticker i has the colour of its face.
SOLVED = (np.arange(24) // 4).astype(np.uint8)


def _gather(rotation: np.ndarray, moves: np.ndarray) -> np.ndarray:
    """The gather g (new = old[g]) of rotating the stickers selected by the boolean mask `moves`."""
    g = np.arange(24)
    for i in np.flatnonzero(moves):
        c, n = STICKERS[i]
        g[_INDEX[(tuple(rotation @ c), tuple(rotation @ n))]] = i  # sticker i lands on that slot
    return g


def _quarter_turn(face: str) -> np.ndarray:
    """Gather of the clockwise quarter turn of `face`: R = n n^T - [n]_x (Rodrigues at -90 degrees)."""
    n = np.array(_NORMAL[face])
    cross = np.array([[0, -n[2], n[1]], [n[2], 0, -n[0]], [-n[1], n[0], 0]])
    rot = np.outer(n, n) - cross
    axis = int(np.flatnonzero(n)[0])
    return _gather(rot, STICKERS[:, 0, axis] == n[axis])


def _power(g: np.ndarray, k: int) -> np.ndarray:
    out = np.arange(24)
    for _ in range(k):
        out = out[g]  # apply `out` then g: state[out][g] = state[out[g]]
    return out


#: [18, 24] gathers of the moves of MOVE_NAMES.
MOVE_GATHERS = np.stack([_power(_quarter_turn(name[0]), _QUARTERS[name[1:]]) for name in MOVE_NAMES])
MOVE_INDEX = {name: i for i, name in enumerate(MOVE_NAMES)}


def _rotations() -> np.ndarray:
    """[24, 24] gathers of the 24 whole-cube rotations (signed permutation matrices of determinant 1)."""
    out = []
    for perm in itertools.permutations(range(3)):
        for signs in itertools.product((1, -1), repeat=3):
            m = np.zeros((3, 3), np.int64)
            for r, (c, s) in enumerate(zip(perm, signs)):
                m[r, c] = s
            if round(np.linalg.det(m)) == 1:
                out.append(_gather(m, np.ones(24, bool)))
    return np.stack(out)


ROTATION_GATHERS = _rotations()


def _corner_facelets() -> np.ndarray:
    """[8, 3] sticker indices of each corner slot, the U/D sticker first, then clockwise seen from outside."""
    out = np.zeros((8, 3), np.int64)
    for k, name in enumerate(CORNER_NAMES):
        c = np.array([(1 if "R" in name else -1), (1 if "U" in name else -1), (1 if "F" in name else -1)])
        normals = [np.array([0, c[1], 0]), np.array([c[0], 0, 0]), np.array([0, 0, c[2]])]
        # Clockwise seen from outside the corner <=> det[n0, n1, n2] = -1 (at URF: U, R, F).
        if round(np.linalg.det(np.stack(normals))) != -1:
            normals[1], normals[2] = normals[2], normals[1]
        out[k] = [_INDEX[(tuple(c), tuple(n))] for n in normals]
    return out


CORNER_FACELETS = _corner_facelets()
#: [8, 3] colours of each cubie (named by its home slot) in its slot's sticker order.
CUBIE_COLORS = SOLVED[CORNER_FACELETS]
_UD_COLORS = (FACES.index("U"), FACES.index("D"))
# Colour triple (U/D colour first, then clockwise) -> cubie id; -1 for triples no cubie has.
_CUBIE_OF_CODE = np.full(216, -1, np.int64)
_CUBIE_OF_CODE[CUBIE_COLORS[:, 0] * 36 + CUBIE_COLORS[:, 1] * 6 + CUBIE_COLORS[:, 2]] = np.arange(8)
_FACT7 = np.array([factorial(6 - i) for i in range(7)], np.int64)
_POW3 = 3 ** np.arange(5, -1, -1)


def corners(states: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(cubies, twists), each [N, 8]: the cubie in every corner slot and its twist (0, 1, 2).

    Raises ValueError for sticker arrays that are not a cube's corners (a colour triple no cubie has)."""
    states = np.atleast_2d(np.asarray(states))
    cols = states[:, CORNER_FACELETS].astype(np.int64)  # [N, 8, 3]
    is_ud = (cols == _UD_COLORS[0]) | (cols == _UD_COLORS[1])
    twist = np.argmax(is_ud, axis=2)
    k = (twist[..., None] + np.arange(3)) % 3
    rolled = np.take_along_axis(cols, k, axis=2)
    cubies = _CUBIE_OF_CODE[rolled[..., 0] * 36 + rolled[..., 1] * 6 + rolled[..., 2]]
    if (is_ud.sum(axis=2) != 1).any() or (cubies < 0).any():
        raise ValueError("not a pocket-cube state: some corner has no matching cubie")
    return cubies, twist


def perm_rank(perms: np.ndarray) -> np.ndarray:
    """Lehmer rank [N] of permutations [N, 7] of 0..6 (identity -> 0)."""
    perms = np.asarray(perms)
    later = np.triu(np.ones((7, 7), bool), 1)  # later[i, j]: j > i
    smaller = (perms[:, None, :] < perms[:, :, None]) & later
    return smaller.sum(axis=2) @ _FACT7


def perm_unrank(ranks: np.ndarray) -> np.ndarray:
    """Inverse of `perm_rank`: [N] ranks -> [N, 7] permutations."""
    ranks = np.asarray(ranks, np.int64).copy()
    n = len(ranks)
    used = np.zeros((n, 7), bool)
    out = np.zeros((n, 7), np.int64)
    for i in range(7):
        digit, ranks = np.divmod(ranks, _FACT7[i])
        free_count = np.cumsum(~used, axis=1)
        pick = np.argmax((free_count == (digit[:, None] + 1)) & ~used, axis=1)
        out[:, i] = pick
        used[np.arange(n), pick] = True
    return out


def twist_digits(index: np.ndarray) -> np.ndarray:
    """[N] twist coordinates -> [N, 7] twists (the 7th makes the total 0 mod 3)."""
    index = np.asarray(index, np.int64)
    digits = (index[:, None] // _POW3) % 3
    return np.concatenate([digits, (-digits.sum(axis=1, keepdims=True)) % 3], axis=1)


def _rotation_homing_dbl() -> np.ndarray:
    """[8, 3] rotation index that brings the DBL cubie home (yellow down) from slot s with its yellow sticker at
    position k of that slot's stickers; -1 where no rotation does (such a sticker layout is not a cube)."""
    out = np.full((8, 3), -1, np.int64)
    for r, g in enumerate(ROTATION_GATHERS):
        # The rotation sends each sticker i to the slot g^-1(i); find where it sends the DBL cubie's stickers.
        inverse = np.argsort(g)
        for s in range(8):
            for k in range(3):
                if (inverse[CORNER_FACELETS[s][(k + np.arange(3)) % 3]] == CORNER_FACELETS[7]).all():
                    out[s, k] = r
    assert (out >= 0).all() and len(set(out.ravel().tolist())) == 24
    return out


_HOME_DBL = _rotation_homing_dbl()
_DBL_MASK = int(sum(1 << int(c) for c in CUBIE_COLORS[7]))


def canonicalize(states: np.ndarray) -> np.ndarray:
    """The same cube(s) turned as a whole so that the DBL cubie is home with yellow down: [N, 24] -> [N, 24].

    Exactly one of the 24 rotations does it (`_HOME_DBL`, looked up from where the DBL cubie is and how it is
    twisted); two states differ by a rotation iff their canonical forms agree.
    """
    states = np.atleast_2d(np.asarray(states))
    cols = states[:, CORNER_FACELETS].astype(np.int64)  # [N, 8, 3]
    masks = (1 << cols).sum(axis=2)
    is_dbl = masks == _DBL_MASK
    if (is_dbl.sum(axis=1) != 1).any():
        raise ValueError("not a pocket-cube state: it needs exactly one yellow-blue-orange corner")
    rows = np.arange(len(states))
    slot = np.argmax(is_dbl, axis=1)
    twist = np.argmax(cols[rows, slot] == FACES.index("D"), axis=1)
    return states[rows[:, None], ROTATION_GATHERS[_HOME_DBL[slot, twist]]]


def encode(states: np.ndarray) -> np.ndarray:
    """Table index [N] of state(s) [N, 24] (any orientation of the whole cube; solved -> 0)."""
    cubies, twists = corners(canonicalize(states))
    return perm_rank(cubies[:, :7]) * N_TWIST + twists[:, :6] @ _POW3


# Plain-Python tables of `encode_one` (one state: list operations beat a dozen small numpy calls).
_CF = [[int(i) for i in row] for row in CORNER_FACELETS]
_ROT = [[int(i) for i in g] for g in ROTATION_GATHERS]
_HOME = [[int(r) for r in row] for row in _HOME_DBL]
_CUBIE_TWIST = {}  # colour triple of a slot, in sticker order -> (cubie, twist)
for _cubie, _colors in enumerate(CUBIE_COLORS.tolist()):
    for _twist in range(3):
        _CUBIE_TWIST[tuple(_colors[(k - _twist) % 3] for k in range(3))] = (_cubie, _twist)
_YELLOW = FACES.index("D")
_DBL_SET = frozenset(CUBIE_COLORS[7].tolist())
_FACT = [int(f) for f in _FACT7]


def encode_one(state) -> int:
    """`encode` of one state (a sequence of 24 colour ids), in plain Python: the same index, about 5x faster."""
    s = [int(c) for c in state]
    rotation = None
    for slot, (a, b, c) in enumerate(_CF):
        if {s[a], s[b], s[c]} == _DBL_SET:
            rotation = _HOME[slot][(s[a], s[b], s[c]).index(_YELLOW)]
            break
    if rotation is None:
        raise ValueError("not a pocket-cube state: it needs exactly one yellow-blue-orange corner")
    s = [s[i] for i in _ROT[rotation]]
    cubies, index = [], 0
    for slot in range(7):
        a, b, c = _CF[slot]
        found = _CUBIE_TWIST.get((s[a], s[b], s[c]))
        if found is None:
            raise ValueError("not a pocket-cube state: some corner has no matching cubie")
        cubies.append(found[0])
        if slot < 6:
            index = index * 3 + found[1]
    rank = 0
    for i in range(7):
        rank += sum(1 for j in range(i + 1, 7) if cubies[j] < cubies[i]) * _FACT[i]
    return rank * N_TWIST + index


def decode(index: np.ndarray) -> np.ndarray:
    """The canonical state(s) [N, 24] (DBL home, yellow down) of table index(es) [N]."""
    index = np.atleast_1d(np.asarray(index, np.int64))
    if ((index < 0) | (index >= N_STATES)).any():
        raise ValueError(f"table indices must be in [0, {N_STATES})")
    perms = perm_unrank(index // N_TWIST)
    twists = twist_digits(index % N_TWIST)
    out = np.tile(SOLVED, (len(index), 1))
    rows = np.arange(len(index))[:, None]
    for slot in range(7):
        k = (twists[:, slot : slot + 1] + np.arange(3)) % 3  # sticker k of the slot gets colour 0, 1, 2
        out[rows, CORNER_FACELETS[slot][k]] = CUBIE_COLORS[perms[:, slot]]
    return out


def corner_move_tables() -> tuple[np.ndarray, np.ndarray]:
    """(perm_moves [5040, 9], twist_moves [729, 9]) of the URF moves on the coordinates.

    Each move's action on the corners is read off the sticker model: after the move, slot i holds the cubie
    from slot src[i], twisted by t[i]; so perm'[i] = perm[src[i]] and twist'[i] = (twist[src[i]] + t[i]) % 3.
    """
    perms = perm_unrank(np.arange(N_PERM))
    twists = twist_digits(np.arange(N_TWIST))
    perm_moves = np.zeros((N_PERM, 9), np.int32)
    twist_moves = np.zeros((N_TWIST, 9), np.int32)
    for m, name in enumerate(URF_MOVES):
        src, t = corners(SOLVED[MOVE_GATHERS[MOVE_INDEX[name]]])
        src, t = src[0], t[0]
        assert src[7] == 7 and t[7] == 0, "URF moves keep the DBL corner"
        perm_moves[:, m] = perm_rank(perms[:, src[:7]])
        twist_moves[:, m] = ((twists[:, src[:7]] + t[:7]) % 3)[:, :6] @ _POW3
    return perm_moves, twist_moves


def apply_moves(state: np.ndarray, moves: list[str] | tuple[str, ...]) -> np.ndarray:
    """`state` after the canonical move names `moves`, in order."""
    out = np.asarray(state)
    for name in moves:
        out = out[..., MOVE_GATHERS[MOVE_INDEX[name]]]
    return out


def inverse_move(name: str) -> str:
    """U -> U', U' -> U, U2 -> U2."""
    return name[0] + {"": "'", "'": "", "2": "2"}[name[1:]]


def is_solved(states: np.ndarray) -> np.ndarray:
    """[N] bool: every face shows one colour (in any orientation of the whole cube)."""
    faces = np.atleast_2d(np.asarray(states)).reshape(-1, 6, 4)
    return (faces == faces[:, :, :1]).all(axis=(1, 2))
