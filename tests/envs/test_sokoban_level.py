"""XSB parsing, validation and serialisation of Sokoban levels."""

import numpy as np
import pytest

from ragen_envs.sokoban.level import Level, parse_ragen_grid, parse_xsb, to_ragen_grid, to_xsb

SIMPLE = "#####\n#@$.#\n#####"


def test_parse_positions():
    lv = parse_xsb("######\n#@ $.#\n# *  #\n######")
    assert lv.shape == (4, 6)
    assert lv.player == (1, 1)
    assert lv.boxes == frozenset({(1, 3), (2, 2)})
    assert lv.targets == frozenset({(1, 4), (2, 2)})
    assert lv.walls[0].all() and lv.walls[:, 0].all() and not lv.walls[1, 1]
    assert lv.walls.sum() == 6 + 6 + 2 + 2


def test_parse_each_symbol():
    lv = parse_xsb("#######\n#+$ * #\n#     #\n#######")
    assert lv.player == (1, 1)
    assert lv.targets == frozenset({(1, 1), (1, 4)})
    assert lv.boxes == frozenset({(1, 2), (1, 4)})
    assert not lv.is_solved


@pytest.mark.parametrize(
    "text",
    [
        SIMPLE,
        "#######\n#+$ * #\n#     #\n#######",
        "    #####\n    #   #\n    #$  #\n  ###  $##\n  #  $ $ #\n### # ## #   ######\n#   # ## #####  ..#\n"
        "# $  $          ..#\n##### ### #@##  ..#\n    #     #########\n    #######",
        "@$.",  # no walls at all: the grid edge is the wall
    ],
)
def test_xsb_round_trip(text):
    assert to_xsb(parse_xsb(text)) == text
    assert parse_xsb(text).to_xsb() == text


def test_ragged_lines_and_floor_variants():
    lv = parse_xsb("####\n#@$.#\n#####")
    assert lv.shape == (3, 5)
    assert not lv.walls[0, 4]  # padded with floor
    assert to_xsb(parse_xsb("#-@$._#")) == "# @$. #"
    assert parse_xsb("\n\n#####\n#@$.#\n#####\n\n").shape == (3, 5)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "empty level"),
        ("   \n  ", "empty level"),
        ("#####\n# $.#\n#####", "no player"),
        ("######\n#@$.@#\n######", "2 players, at (1, 1), (1, 4)"),
        ("#####\n#@$ #\n#####", "1 boxes but 0 targets"),
        ("######\n#@$$.#\n######", "2 boxes but 1 targets"),
        ("#####\n#@  #\n#####", "no box"),
        ("#####\n#@$x#\n#####", "unknown character 'x' at (1, 3)"),
        ("#####\n#@#$#\n#.###", "box at (1, 3) is walled off"),
        ("#####\n#@$##\n###.#", "target at (2, 3) is walled off"),
    ],
)
def test_validation_errors(text, fragment):
    with pytest.raises(ValueError) as err:
        parse_xsb(text)
    assert fragment in str(err.value)


def test_non_string_rejected():
    with pytest.raises(ValueError, match="must be a str"):
        parse_xsb(b"#####")  # type: ignore[arg-type]


def test_box_on_target_walled_off_is_allowed():
    # A finished box in a sealed pocket cannot matter: it is already placed.
    lv = parse_xsb("######\n#@$.#*\n######")
    assert (1, 5) in lv.boxes and (1, 5) in lv.targets


def test_validate_direct_level():
    walls = np.zeros((1, 3), dtype=bool)
    with pytest.raises(ValueError, match="stands on a box"):
        from ragen_envs.sokoban.level import validate

        validate(Level(walls, frozenset({(0, 2)}), frozenset({(0, 0)}), (0, 0)))


def test_ragen_grid_symbols():
    lv = parse_xsb("#######\n#+$ * #\n#     #\n#######")
    assert to_ragen_grid(lv) == "#######\n#SX_√_#\n#_____#\n#######"
    assert to_xsb(parse_ragen_grid(to_ragen_grid(lv))) == to_xsb(lv)
    lv2 = parse_xsb("  ####\n  #@$.#\n  #####")
    # Floor outside the player's region is shown as wall to the model.
    assert to_ragen_grid(lv2) == "#######\n###PXO#\n#######"
    assert to_xsb(lv2) == "  ####\n  #@$.#\n  #####"
    with pytest.raises(ValueError, match="unknown character 'Z' at \\(0, 1\\)"):
        parse_ragen_grid("#Z")
