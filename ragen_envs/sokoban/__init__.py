"""Sokoban for LLM agents: levels (XSB), an exact solver, a seeded generator, sprites and the env.

from ragen_envs.sokoban import SokobanEnv, parse_xsb, solve, SokobanGenerator

level = parse_xsb("#####\\n#@$.#\\n#####")
solve(level)                                  # ['Right']
SokobanGenerator((10, 10), num_boxes=3).generate(np.random.default_rng(0)).optimal_steps
"""

from ragen_envs.sokoban.env import SokobanEnv
from ragen_envs.sokoban.generator import GeneratedLevel, SokobanGenerator, generate_room, room_topology
from ragen_envs.sokoban.level import (
    RAGEN_LEGEND,
    RAGEN_SYMBOLS,
    Level,
    parse_ragen_grid,
    parse_xsb,
    to_ragen_grid,
    to_xsb,
)
from ragen_envs.sokoban.render import render_level, sprites
from ragen_envs.sokoban.solver import goal_distances, solve

__all__ = [
    "RAGEN_LEGEND",
    "RAGEN_SYMBOLS",
    "GeneratedLevel",
    "Level",
    "SokobanEnv",
    "SokobanGenerator",
    "generate_room",
    "goal_distances",
    "parse_ragen_grid",
    "parse_xsb",
    "render_level",
    "room_topology",
    "solve",
    "sprites",
    "to_ragen_grid",
    "to_xsb",
]
