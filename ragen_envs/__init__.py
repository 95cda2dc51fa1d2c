"""ragen_envs: a Gymnasium suite of multi-turn text and vision tasks for LLM agents.

Importing the package registers every env under the `ragen/` namespace:

    import gymnasium as gym
    import ragen_envs

    env = gym.make("ragen/Sokoban-v0")
    obs, info = env.reset(seed=0)
    print(info["instructions"])
    obs, reward, terminated, truncated, info = env.step("<think>...</think><answer>Up</answer>")

`ragen_envs.registration.ENV_SPECS` lists the ids with one-line descriptions (`ragen envs` prints them).
"""

from ragen_envs.protocol import FORMAT_PENALTY, ParsedResponse, parse_response, vocabulary_matcher
from ragen_envs.registration import ENV_SPECS, env_ids, register_all

register_all()

__all__ = [
    "ENV_SPECS",
    "FORMAT_PENALTY",
    "ParsedResponse",
    "env_ids",
    "parse_response",
    "register_all",
    "vocabulary_matcher",
]
