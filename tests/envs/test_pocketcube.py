"""The pocket cube: sticker moves against hand-drawn nets, the BFS table against the known histogram and a plain
Python BFS, the exact-distance proof check, the disk cache, the env (levels, oracle, notation, text, image).

The full table is built once per test session, into a temporary cache (`fresh` fixture, about 1 s of CPU);
the env tests use the default cache (built there on first use, then read memory-mapped).
"""

from __future__ import annotations

import itertools
import unicodedata
from math import factorial

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ragen_envs  # noqa: F401  (registers the ids)
from ragen_envs.pocketcube import cube as C
from ragen_envs.pocketcube import table as T
from ragen_envs.pocketcube.env import PALETTE, STICKER_PX, PocketCubeEnv, net_text

#: The 2x2x2's distance histogram in the half-turn metric (OEIS A079761), typed in independently of the code.
HTM_COUNTS = [1, 9, 54, 321, 1847, 9992, 50136, 227536, 870072, 1887748, 623800, 2644]


def respond(*moves: str) -> str:
    return f"<think>t</think><answer>{' || '.join(moves)}</answer>"


# ----------------------------------------------------------------------------------------------- sticker model
def nets(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


def net(up: str, sides: str, down: str) -> str:
    """A net drawn by hand, face by face, in `net_text`'s layout: Up's and Down's two rows (``"W W / W W"``) and the
    two rows of the four side faces, Left, Front, Right, Back (``"O O   G G   R R   B B / O O   G G   R R   B B"``)."""
    (u1, u2), (s1, s2), (d1, d2) = (part.split(" / ") for part in (up, sides, down))
    return "\n".join(["      Up", f"      {u1}", f"      {u2}", "Left  Front Right Back", s1, s2,
                      "      Down", f"      {d1}", f"      {d2}"])


SOLVED_NET = net("W W / W W", "O O   G G   R R   B B / O O   G G   R R   B B", "Y Y / Y Y")
# Drawn by hand from the notation (a face turn moves the adjacent rows/columns of the four neighbours).
AFTER = {
    # U clockwise from above: Front's top row comes from Right, Left's from Front, ...
    "U": net("W W / W W", "G G   R R   B B   O O / O O   G G   R R   B B", "Y Y / Y Y"),
    # R: Front's right column goes up to Up, Up's to Back (Back's left column), Back's down to Down.
    "R": net("W G / W G", "O O   G Y   R R   W B / O O   G Y   R R   W B", "Y B / Y B"),
    # F: Up's bottom row goes to Right's left column, that to Down's top row, that to Left's right column.
    "F": net("W W / O O", "O Y   G G   W R   B B / O Y   G G   W R   B B", "R R / Y Y"),
    # D clockwise from below: Front's bottom row goes to Right.
    "D": net("W W / W W", "O O   G G   R R   B B / B B   O O   G G   R R", "Y Y / Y Y"),
    # L: Up's left column goes down to Front.
    "L": net("B W / B W", "O O   W G   R R   B Y / O O   W G   R R   B Y", "G Y / G Y"),
    # B: Up's top row goes to Left's left column, that to Down's bottom row, that to Right's right column.
    "B": net("R R / W W", "W O   G G   R Y   B B / W O   G G   R Y   B B", "Y Y / O O"),
}


def test_solved_net_text():
    assert nets(net_text(C.SOLVED)) == nets(SOLVED_NET)


@pytest.mark.parametrize("move", list(AFTER))
def test_each_face_turn_matches_the_hand_drawn_net(move):
    assert nets(net_text(C.apply_moves(C.SOLVED, [move]))) == nets(AFTER[move])


def test_turned_face_rotates_clockwise():
    # F then R: the Right face carries F's marks; R then turns them a quarter clockwise (seen from the right).
    state = C.apply_moves(C.SOLVED, ["F"])
    r_face = state[4:8].reshape(2, 2)
    after = C.apply_moves(state, ["R"])[4:8].reshape(2, 2)
    assert np.array_equal(after, np.rot90(r_face, -1))


@pytest.mark.parametrize("face", list(C.FACES))
def test_move_algebra(face):
    q, q3, q2 = C.MOVE_GATHERS[C.MOVE_INDEX[face]], C.MOVE_GATHERS[C.MOVE_INDEX[face + "'"]], C.MOVE_GATHERS[
        C.MOVE_INDEX[face + "2"]]
    ident = np.arange(24)
    assert sorted(q) == list(range(24))
    assert np.array_equal(q[q], q2) and np.array_equal(q[q][q], q3) and np.array_equal(q[q][q][q], ident)
    assert not np.array_equal(q2, ident)
    opposite = "URFDLB"[("URFDLB".index(face) + 3) % 6]
    o = C.MOVE_GATHERS[C.MOVE_INDEX[opposite]]
    assert np.array_equal(q[o], o[q]), "opposite faces commute"


@pytest.mark.parametrize("seq, order", [(["R", "U"], 15), (["R", "U", "R'", "U'"], 6)])
def test_known_orders_of_move_sequences(seq, order):
    state = C.SOLVED
    for k in range(1, order + 1):
        state = C.apply_moves(state, seq)
        assert np.array_equal(state, C.SOLVED) == (k == order), k


def test_rotations_form_the_24_element_group_and_canonical_form_is_unique():
    assert len({tuple(g) for g in C.ROTATION_GATHERS}) == 24
    rng = np.random.default_rng(0)
    states = C.decode(rng.integers(0, C.N_STATES, 50))
    for g in C.ROTATION_GATHERS:
        assert np.array_equal(C.canonicalize(states[:, g]), states)  # decode gives canonical states
        assert C.is_solved(C.SOLVED[g])[0] and C.encode(C.SOLVED[g])[0] == 0


def test_encode_decode_round_trip_and_lehmer_rank():
    rng = np.random.default_rng(1)
    idx = rng.integers(0, C.N_STATES, 2000)
    assert np.array_equal(C.encode(C.decode(idx)), idx)
    turned = C.decode(idx[:300])[np.arange(300)[:, None], C.ROTATION_GATHERS[rng.integers(0, 24, 300)]]
    assert [C.encode_one(s) for s in turned] == idx[:300].tolist()  # the one-state path, any orientation
    perms = np.array(list(itertools.permutations(range(7))))  # lexicographic order = rank order
    assert np.array_equal(C.perm_rank(perms), np.arange(factorial(7)))
    assert np.array_equal(C.perm_unrank(np.arange(factorial(7))), perms)


def test_opposite_turns_are_equal_up_to_rotation():
    states = C.decode(np.random.default_rng(2).integers(0, C.N_STATES, 200))
    for a, b in (("D", "U"), ("L", "R"), ("B", "F"), ("D'", "U'"), ("L2", "R2")):
        assert np.array_equal(C.encode(C.apply_moves(states, [a])), C.encode(C.apply_moves(states, [b])))


def test_coordinate_move_tables_agree_with_the_sticker_model():
    perm_moves, twist_moves = C.corner_move_tables()
    idx = np.random.default_rng(3).integers(0, C.N_STATES, 300)
    states = C.decode(idx)
    for m, name in enumerate(C.URF_MOVES):
        expected = C.encode(C.apply_moves(states, [name]))
        assert np.array_equal(perm_moves[idx // 729, m].astype(np.int64) * 729 + twist_moves[idx % 729, m], expected)


def test_bad_sticker_arrays_are_refused():
    bad = C.SOLVED.copy()
    bad[[3, 4]] = bad[[4, 3]]  # one corner's stickers swapped: a mirror-image corner, no such cubie
    with pytest.raises(ValueError, match="not a pocket-cube state"):
        C.encode(bad)
    with pytest.raises(ValueError, match="not a pocket-cube state"):
        C.encode_one(bad)
    with pytest.raises(ValueError, match="table indices"):
        C.decode([C.N_STATES])


# ----------------------------------------------------------------------------------------------- the table
@pytest.fixture(scope="session")
def fresh(tmp_path_factory):
    """(table, cache_dir): built once for the session into a temporary cache."""
    root = tmp_path_factory.mktemp("cube-cache")
    return T.distance_table(root), root


def test_histogram_is_the_known_one(fresh):
    dist, _ = fresh
    assert sum(HTM_COUNTS) == factorial(8) * 3**7 // 24 == C.N_STATES
    assert np.bincount(dist).tolist() == HTM_COUNTS
    assert list(T.KNOWN_HISTOGRAM) == HTM_COUNTS


def test_plain_bfs_over_stickers_with_all_18_moves_agrees(fresh):
    """Independent reference: BFS over sticker tuples, all 18 turns, states identified when a whole-cube
    rotation maps one onto the other (the smallest of the 24 rotated tuples), to depth 4."""
    dist, _ = fresh
    rotations = [tuple(int(i) for i in g) for g in C.ROTATION_GATHERS]
    moves = [tuple(int(i) for i in g) for g in C.MOVE_GATHERS]

    def key(s):
        return min(tuple(s[i] for i in g) for g in rotations)

    start = tuple(int(c) for c in C.SOLVED)
    seen = {key(start): start}
    frontier, counts, levels = [start], [1], [[start]]
    for _ in range(4):
        nxt = []
        for s in frontier:
            for g in moves:
                t = tuple(s[i] for i in g)
                k = key(t)
                if k not in seen:
                    seen[k] = t
                    nxt.append(t)
        counts.append(len(nxt))
        levels.append(nxt)
        frontier = nxt
    assert counts == HTM_COUNTS[:5]
    for depth, states in enumerate(levels):
        assert (dist[C.encode(np.array(states, np.uint8))] == depth).all()


def test_check_distances_accepts_the_table_and_catches_corruption(fresh):
    dist, _ = fresh
    T.check_distances(dist)
    rng = np.random.default_rng(4)
    a = int(np.flatnonzero(dist == 5)[0])
    b = int(np.flatnonzero(dist == 9)[int(rng.integers(1000))])
    swapped = dist.copy()
    swapped[[a, b]] = swapped[[b, a]]  # histogram unchanged: only the neighbour checks can see it
    with pytest.raises(ValueError, match="more than 1|no neighbour"):
        T.check_distances(swapped)
    off = dist.copy()
    off[b] = 10
    with pytest.raises(ValueError, match="histogram"):
        T.check_distances(off)
    with pytest.raises(ValueError, match="int8"):
        T.check_distances(dist.astype(np.int16))


def test_cache_files_reload_without_building_and_corrupt_files_are_rebuilt(fresh, monkeypatch):
    dist, root = fresh
    path = T.table_path(root)
    assert path.parent == root / "pocketcube" and path.stat().st_size < 3_700_000
    meta = T.table_metadata(root)
    assert meta["histogram"] == HTM_COUNTS and meta["states"] == C.N_STATES and meta["build_seconds"] > 0
    built = []
    monkeypatch.setattr(T, "build_distance_table", lambda: built.append(1) or np.array(dist))
    monkeypatch.setattr(T, "check_distances", lambda d: None)
    monkeypatch.setattr(T, "_LOADED", {})
    again = T.distance_table(root)
    assert not built and np.array_equal(again, dist) and not again.flags.writeable
    assert T.distance_table(root) is again  # in-process memo
    raw = bytearray(path.read_bytes())
    raw[-10] = (raw[-10] + 1) % 256  # one entry changed: the hash no longer matches
    path.write_bytes(bytes(raw))
    monkeypatch.setattr(T, "_LOADED", {})
    assert np.array_equal(T.distance_table(root), dist) and built == [1]
    assert T._read(path) is not None  # rewritten


def test_the_env_default_cache_holds_the_same_table(fresh):
    dist, _ = fresh
    assert np.array_equal(T.distance_table(), dist)


# ----------------------------------------------------------------------------------------------- levels + oracle
def play_oracle(env: PocketCubeEnv) -> tuple[int, float, bool]:
    """Play `oracle_step` to the end; returns (moves made, return, success)."""
    moves, total = 0, 0.0
    while True:
        _, acts = env.oracle_step()
        _, r, term, trunc, info = env.step(respond(*acts))
        moves += len(info["actions_executed"])
        total += r
        if term or trunc:
            return moves, total, info["success"]


@pytest.mark.parametrize("kwargs", [{}, {"scramble_depth": (1, 8)}, {"scramble_depth": None}])
def test_every_level_is_verified_by_the_oracle(kwargs):
    env = PocketCubeEnv(**kwargs, max_actions=None)
    for seed in range(60):
        _, info = env.reset(seed=seed)
        d = info["distance"]
        assert 1 <= d <= 11 and (kwargs.get("scramble_depth", 5) is None or d <= info["scramble_depth"])
        # the scramble reproduces the level, and solving takes exactly d moves
        assert np.array_equal(C.apply_moves(C.SOLVED, info["scramble"]), env.state)
        assert len(env.optimal_solution()) == d
        moves, total, success = play_oracle(env)
        assert success and moves == d and total == 1.0


def test_short_levels_have_no_shorter_solution():
    """Brute force for distances up to 3: no sequence of d - 1 of the 18 moves solves the level."""
    env = PocketCubeEnv(scramble_depth=3, max_actions=None)
    checked = 0
    for seed in range(40):
        _, info = env.reset(seed=seed)
        d = info["distance"]
        if d > 3:
            continue
        for seq in itertools.product(C.MOVE_NAMES, repeat=d - 1):
            assert not C.is_solved(C.apply_moves(env.state, list(seq)))[0], seq
        checked += 1
    assert checked >= 10


def test_distance_knob_and_its_errors(monkeypatch):
    env = PocketCubeEnv(scramble_depth=6, distance=4)
    assert {env.reset(seed=s)[1]["distance"] for s in range(20)} == {4}
    hard = PocketCubeEnv(scramble_depth=None, distance=11)
    assert {hard.reset(seed=s)[1]["distance"] for s in range(5)} == {11}
    for bad in ({"scramble_depth": -1}, {"distance": 12}, {"scramble_depth": 3, "distance": (4, 6)},
                {"obs_format": "grid"}, {"scramble_depth": True}):
        with pytest.raises(ValueError):
            PocketCubeEnv(**bad)
    rare = PocketCubeEnv(scramble_depth=11, distance=11)
    monkeypatch.setattr(rare, "MAX_DRAWS", 3)
    with pytest.raises(RuntimeError, match="scramble_depth=None"):
        rare.reset(seed=0)


def test_same_seed_same_level_and_scrambles_avoid_repeating_a_face():
    env = PocketCubeEnv(scramble_depth=(3, 9))
    a, b = env.reset(seed=5)[1]["scramble"], env.reset(seed=5)[1]["scramble"]
    assert a == b
    for seed in range(50):
        scramble = env.reset(seed=seed)[1]["scramble"]
        assert 3 <= len(scramble) <= 9 and all(m[0] in "URF" for m in scramble)
        assert all(x[0] != y[0] for x, y in zip(scramble, scramble[1:]))


# ----------------------------------------------------------------------------------------------- env behaviour
def test_scramble_option_notation_and_aliases():
    env = PocketCubeEnv(max_actions=None)
    _, info = env.reset(options={"scramble": "R U2 F'"})
    assert info["scramble"] == ["R", "U2", "F'"] and info["distance"] == 3
    with pytest.raises(ValueError, match="'Q'"):
        env.reset(options={"scramble": "R Q"})
    for answer, executed in (("f", ["F"]), ("F\u2019", ["F'"]), ("f\u2032", ["F'"]), ("U2'", ["U2"])):
        env.reset(options={"scramble": "R U2 F'"})
        info = env.step(respond(answer))[4]
        assert info["actions_executed"] == executed and info["format_penalty"] == 0.0, answer
    for bad in ("R U", "x", "Rw", "R3", "F1", "R\u00b2", "U 2", "RR"):
        env.reset(options={"scramble": "R U2 F'"})
        before = env.state.copy()
        _, r, _, _, info = env.step(respond(bad))
        assert info["actions_executed"] == [] and r == pytest.approx(-0.1), bad
        assert np.array_equal(env.state, before)


#: The documented prime rule, restated here: the ASCII apostrophe, U+2019 (typographic apostrophe), U+2032 (prime).
PRIMES = ("'", "\u2019", "\u2032")
#: Apostrophe-like characters that are not primes: modifier letters prime and apostrophe, acute accent, backtick,
#: double prime, left single quotation mark, fullwidth apostrophe, reversed prime, quotation mark.
NOT_PRIMES = ("\u02b9", "\u02bc", "\u00b4", "`", "\u2033", "\u2018", "\uff07", "\u2035", '"')


def _executed(piece: str) -> list[str]:
    env = _NOTATION_ENV
    env.reset(options={"scramble": "R U2 F'"})
    return env.step(respond(piece))[4]["actions_executed"]


_NOTATION_ENV = PocketCubeEnv(max_actions=None)


@pytest.mark.parametrize("face", list(C.FACES))
def test_every_prime_mark_follows_one_rule_also_on_half_turns(face):
    """U' U’ U′ are U'; U2 with one prime mark before or after the 2 is U2, for every mark alike (U’2 and U′2,
    U2’ and U2′ once differed); two marks, or a mark that is not a prime, are no turn."""
    for case in (face, face.lower()):
        for mark in PRIMES:
            assert _executed(case + mark) == [face + "'"], (case, mark)
            assert _executed(case + "2" + mark) == [face + "2"], (case, mark)
            assert _executed(case + mark + "2") == [face + "2"], (case, mark)
            for second in PRIMES:
                for bad in (case + mark + second, case + "2" + mark + second, case + mark + "2" + second):
                    assert _executed(bad) == [], bad
        for mark in NOT_PRIMES:
            for bad in (case + mark, case + "2" + mark, case + mark + "2"):
                assert _executed(bad) == [], bad


@given(mark=st.characters(), face=st.sampled_from(list(C.FACES)))
@settings(max_examples=300, deadline=None)
def test_a_face_and_one_character_is_a_turn_only_by_the_documented_rule(mark, face):
    """Any one character after a face letter: a prime gives X', "2" gives X2, whitespace (stripped, control
    characters being read as spaces by the protocol) leaves X; every other character makes the piece no turn."""
    if mark in PRIMES:
        expected = [face + "'"]
    elif mark == "2":
        expected = [face + "2"]
    elif mark.isspace() or unicodedata.category(mark) == "Cc":
        expected = [face]
    else:
        expected = []
    assert _executed(face + mark) == expected, ascii(mark)


def test_solving_in_another_orientation_counts():
    env = PocketCubeEnv(max_actions=None)
    _, info = env.reset(options={"scramble": "D"})
    assert info["distance"] == 1
    _, r, term, _, info = env.step(respond("U'"))  # D U' is a whole-cube rotation
    assert r == 1.0 and term and info["success"] and not np.array_equal(env.state, C.SOLVED)


def test_plan_stops_at_the_solve_and_budget_truncates():
    env = PocketCubeEnv(max_actions=3)
    env.reset(options={"scramble": "R"})
    _, r, term, _, info = env.step(respond("R'", "U"))
    assert term and r == 1.0 and info["actions_executed"] == ["R'"]
    env.reset(options={"scramble": "R U F"})
    _, r, term, trunc, info = env.step(respond("U", "U'"))
    assert not info["action_is_effective"] and info["actions_left"] == 1 and info["distance"] == 3
    _, r, term, trunc, info = env.step(respond("F'"))
    assert trunc and not term and r == 0.0 and info["distance"] == 2


def test_faces_format_and_instructions():
    env = PocketCubeEnv(obs_format="faces")
    obs, info = env.reset(options={"scramble": "U"})
    assert obs.splitlines()[2] == "Front: R R / G G" and obs.splitlines()[0] == "Up: W W / W W"
    for word in ("clockwise", "W white", "any orientation", "R'", "F2", "<answer>"):
        assert word in info["instructions"]


def test_vision_image_shows_the_text_net():
    env = gym.make("ragen/PocketCube-Vision-v0")
    obs, _ = env.reset(seed=3)
    image = obs["image"]
    assert image.shape == (96, 128, 3) and image.dtype == np.uint8
    assert env.observation_space.contains(obs)
    letters = {tuple(int(v) for v in rgb): C.COLOR_LETTERS[k] for k, rgb in enumerate(PALETTE[:6])}
    lines = obs["text"].splitlines()
    rows_of_text = {0: [lines[1], lines[2]], 1: [lines[4], lines[5]], 2: [lines[7], lines[8]]}
    half = STICKER_PX // 2
    for band, text_rows in rows_of_text.items():
        for r, line in enumerate(text_rows):
            for col in range(8):
                at = 6 * (col // 2) + 2 * (col % 2)  # a face is 6 characters wide, its letters 2 apart
                ch = line[at] if at < len(line) else " "
                pixel = tuple(int(v) for v in image[(2 * band + r) * STICKER_PX + half, col * STICKER_PX + half])
                if ch == " ":
                    assert pixel == tuple(PALETTE[6]), (band, r, col)
                else:
                    assert letters[pixel] == ch, (band, r, col)
    assert tuple(image[0, 0]) == tuple(PALETTE[6])


def test_oracle_step_feeds_the_warm_start_demonstrator():
    sft = pytest.importorskip("ragen_core.training.sft")
    env = gym.make("ragen/PocketCube-v0")
    env.reset(seed=11)
    text, acts = env.unwrapped.oracle_step()
    assert 1 <= len(acts) <= 2 and "from solved" in text
    response = sft.oracle_response(env)
    info = env.step(response)[4]
    assert info["actions_executed"] == acts and info["format_penalty"] == 0.0


def test_every_refused_piece_gets_a_reason_and_accepted_ones_are_turns():
    import gymnasium as gym

    env = gym.make("ragen/PocketCube-v0")
    env.reset(seed=0)
    u = env.unwrapped
    for piece, why in (("U3", "'3' after the face"), ("X", "not a face"), ("U''", "more than one prime"),
                       ("R U", "several turns"), ("U\u02bc", "not a prime mark"), ("U22", "more than one 2"),
                       ("", "empty piece")):
        assert u._match_action(piece) is None
        assert why in u.explain_refusal(piece), piece
