"""FrozenLake for LLM agents: Gymnasium's dynamics (with `success_rate`), RAGEN's text symbols.

    from ragen_envs.frozenlake import FrozenLakeEnv, generate_random_map

    env = FrozenLakeEnv(desc=generate_random_map(0, size=4, p=0.9), success_rate=0.8)
"""

from ragen_envs.frozenlake.env import FrozenLakeEnv, build_transition_table
from ragen_envs.frozenlake.maps import generate_random_map, has_path, validate_desc

__all__ = ["FrozenLakeEnv", "build_transition_table", "generate_random_map", "has_path", "validate_desc"]
