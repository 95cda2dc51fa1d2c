"""Deep copies of the envs' text spaces (what Gymnasium's vector envs make of them, one per sub-env) share the
read-only charset tables instead of copying 63,000 entries each, and keep the semantics of a deep copy: an equal
space with its own random generator in the original's state."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import batch_space

import ragen_envs  # noqa: F401  (registers the ids)
from ragen_envs.spaces import UNICODE_CHARSET, action_space, observation_space


def test_a_deep_copy_shares_the_charset_tables_and_owns_its_generator():
    space = observation_space()
    space.seed(7)
    twin = copy.deepcopy(space)
    # the tables (frozenset, tuple, dict, str) are shared: building them is what cost 85 ms a copy
    for name in ("_char_set", "_char_list", "_char_index", "_char_str"):
        assert getattr(twin, name) is getattr(space, name), name
    assert twin == space and (twin.min_length, twin.max_length) == (space.min_length, space.max_length)
    # its own generator, in the original's state: the same draws, and drawing from one leaves the other alone
    assert twin.np_random is not space.np_random
    assert space.sample() == twin.sample()
    a = observation_space()
    a.seed(3)
    b = copy.deepcopy(a)
    a.sample()  # advance only the original
    fresh = observation_space()
    fresh.seed(3)
    assert b.sample() == fresh.sample()  # the copy's stream is where the original's was at the copy


def test_a_deep_copy_in_a_memo_is_copied_once():
    space = action_space()
    pair = copy.deepcopy([space, space])
    assert pair[0] is pair[1] and pair[0] is not space


def test_batched_spaces_share_tables_and_draw_independently():
    space = observation_space()
    space.seed(0)
    batched = batch_space(space, 4)
    subs = batched.spaces
    assert all(s._char_index is space._char_index for s in subs)
    draws = [s.sample() for s in subs]
    assert len(set(draws)) == 4  # each sub-space was re-seeded by Gymnasium: different streams
    assert all(s.contains(d) for s, d in zip(subs, draws))
    assert len(space.character_set) == len(UNICODE_CHARSET)


def test_a_sync_vector_env_of_text_envs_steps():
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("ragen/Bandit-v0") for _ in range(3)])
    obs, _ = envs.reset(seed=[0, 1, 2])
    assert len(obs) == 3 and all(isinstance(o, str) and o for o in obs)
    obs, reward, term, trunc, _ = envs.step(["<answer>A</answer>"] * 3)
    assert np.asarray(reward).shape == (3,)
    envs.close()
