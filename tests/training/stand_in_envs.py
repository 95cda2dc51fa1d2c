"""The stand-in env of the trainer tests: the observation is ``value N`` (N drawn from the seed), any text is a
valid action (``action_format="plain"``), and each test module's subclass sets the turns and the reward.

Imported by the test modules of this folder (pytest puts it on ``sys.path``); not a test module itself.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from ragen_envs.base import TextAgentEnv


class ValueEnv(TextAgentEnv):
    """`TURNS` turns of ``value N`` (N in [0, n_levels)) and `INSTRUCTIONS`; subclasses define ``_execute``."""

    ACTIONS = ("go",)
    TURNS = 1
    INSTRUCTIONS = "Say go."

    def __init__(self, n_levels: int = 100, **kw: Any):
        super().__init__(action_format="plain", max_turns=self.TURNS, **kw)
        self.n_levels = n_levels

    def _reset_task(self, options):
        self.value = int(self.np_random.integers(0, self.n_levels))
        return {}

    def _state_text(self):
        return f"value {self.value}"

    def _task_instructions(self):
        return self.INSTRUCTIONS

    def _is_success(self):
        return False


def register(env_id: str, env_class: type) -> str:
    """Register `env_class` as `env_id` (once per process); returns `env_id`."""
    if env_id not in gym.registry:
        gym.register(id=env_id, entry_point=env_class)
    return env_id


class ParityEnv(ValueEnv):
    """Two-turn stand-in env: the reward of a turn is 1 if the response has an even number of characters, or 1
    always with ``constant=True`` (then no group ever has reward variance).

    Sampled responses of a random model have random parity, so group rewards vary and filtering has work to do;
    a seed-dependent observation gives every group its own prompt.
    """

    TURNS = 2
    INSTRUCTIONS = "Say anything."

    def __init__(self, constant: bool = False, **kw: Any):
        super().__init__(**kw)
        self.constant = constant

    def _execute(self, action):
        return 0.0, False

    def step(self, action):
        obs, _, terminated, truncated, info = super().step(action)
        reward = 1.0 if self.constant or len(str(action)) % 2 == 0 else 0.0
        info["success"] = reward > 0
        return obs, reward, terminated, truncated, info
