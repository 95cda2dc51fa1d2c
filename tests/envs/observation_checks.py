"""Observation checks shared by the env tests.

- `assert_refusals_capped`: an env that lists the refused pieces of an answer above its state (Sudoku, 2048) lists
  at most 5, then one line counting the others, so that no response pushes the state out of the observation;
- `assert_async_vector_env_cleans`: an env that echoes model text (SearchQA's queries, WebShop's searches) cleans
  lone surrogates out of its observations, which an async vector env could not send between processes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym


def assert_refusals_capped(lines: Sequence[str], info: dict[str, Any]) -> None:
    """The observation's `lines` list the first 5 of `info["refused"]` and count the rest in one line."""
    refused = [line for line in lines if line.startswith("Refused ")]
    assert len(refused) == min(5, len(info["refused"]))
    more = [line for line in lines if line.startswith("... and ")]
    assert more == ([f"... and {len(info['refused']) - 5} more refused pieces of your answer."]
                    if len(info["refused"]) > 5 else [])


def assert_async_vector_env_cleans(env_id: str, responses: Sequence[str], surrogate: str, **kwargs: Any) -> None:
    """Two copies of `env_id` in an async vector env, stepped with each response in turn: no observation holds
    the lone `surrogate` the responses carry (and none fails to cross the process boundary)."""
    venv = gym.make_vec(env_id, num_envs=2, vectorization_mode="async", **kwargs)
    try:
        venv.reset(seed=[1, 2])
        for response in responses:
            obs, *_ = venv.step([response, response])
            assert all(surrogate not in o for o in obs)
    finally:
        venv.close()
