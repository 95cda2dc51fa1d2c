"""The text spaces print a short description (Gymnasium's Text repr would print the whole charset)."""

from __future__ import annotations

import gymnasium as gym
import pytest

import ragen_envs  # noqa: F401
from ragen_envs.spaces import MAX_OBSERVATION_CHARS, observation_space

RAGEN_IDS = sorted(i for i in gym.registry if i.startswith("ragen/"))


@pytest.mark.parametrize("env_id", RAGEN_IDS)
def test_every_env_space_prints_in_a_few_lines(env_id):
    env = gym.make(env_id)
    try:
        for space in (env.observation_space, env.action_space):
            text = repr(space)
            assert len(text) < 400, (env_id, len(text))
            assert "code points" in text  # the text part describes its charset instead of listing it
    finally:
        env.close()


def test_the_text_repr_names_the_lengths_and_the_charset_range():
    space = observation_space()
    assert repr(space) == (f"UnicodeText(1, {MAX_OBSERVATION_CHARS}, charset=<{len(space.character_set)} code points, "
                           f"U+{ord(min(space.character_set)):04X}..U+{ord(max(space.character_set)):04X}>)")
    assert str(space) == repr(space)
