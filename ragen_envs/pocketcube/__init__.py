"""The 2x2x2 pocket cube for LLM agents: face turns, an exact distance table (BFS, cached on disk), the env.

    from ragen_envs.pocketcube import PocketCubeEnv, distance_table, encode

    env = PocketCubeEnv(scramble_depth=5)
    table = distance_table()        # int8 [3,674,160]: exact optimal distances, built once and cached
"""

from ragen_envs.pocketcube.cube import (
    COLOR_LETTERS,
    MOVE_NAMES,
    N_STATES,
    SOLVED,
    apply_moves,
    canonicalize,
    decode,
    encode,
    is_solved,
)
from ragen_envs.pocketcube.env import PocketCubeEnv, faces_text, net_text, parse_scramble
from ragen_envs.pocketcube.table import (
    GODS_NUMBER,
    KNOWN_HISTOGRAM,
    build_distance_table,
    check_distances,
    distance_table,
    table_metadata,
    table_path,
)

__all__ = [
    "COLOR_LETTERS",
    "GODS_NUMBER",
    "KNOWN_HISTOGRAM",
    "MOVE_NAMES",
    "N_STATES",
    "SOLVED",
    "PocketCubeEnv",
    "apply_moves",
    "build_distance_table",
    "canonicalize",
    "check_distances",
    "decode",
    "distance_table",
    "encode",
    "faces_text",
    "is_solved",
    "net_text",
    "parse_scramble",
    "table_metadata",
    "table_path",
]
