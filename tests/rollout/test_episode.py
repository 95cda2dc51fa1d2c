"""The "env as chat" episode: rollouts, the verl episode and the TRL adapter pinned bit for bit.

The ``PINNED`` hashes fingerprint what :func:`ragen_core.rollout.rollout`, the verl ``EnvEpisode`` and the TRL
``RagenEnvironment`` / ``EnvReward`` produced on fixed seeds BEFORE these three were rebuilt on one episode
abstraction (``ragen_core.episode``): token ids, masks, rewards, turn indices, texts, chat messages and images.
They were computed on commit dfe9f89 (the code before the refactor) by running this file's ``_fingerprint`` /
``_digest`` on each case; any change to the prompt layout, the reward bookkeeping or the token batch breaks them.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np
import pytest
import torch

from ragen_core.rollout import RolloutSettings, make_envs, rollout

#: Pinned on the pre-refactor code (see the module docstring). Keys: case names of the tests below. The
#: batch fingerprints were recorded anew when an episode that max_turns ends before the env does became truncated
#: (it was neither terminated nor truncated): without the truncated flag, all 25 values were the same before and after.
PINNED: dict[str, str] = {
    "sampled/ragen/FrozenLake-v0/full": "a7b01396430f3bb36c6876223dbf89c75609609bcce2497284469017a92685de",
    "sampled/ragen/FrozenLake-v0/single_turn": "2472eed48a5c2d66fe92bab27239d5f024db31196b94edc8c06d6d6b0339fc1a",
    "sampled/ragen/Sokoban-v0/full": "aa836663e0033800c1e9e044dd81f0af507e48451887419d865a53418d700b29",
    "sampled/ragen/Sokoban-v0/single_turn": "1f5e64c1d99204ef5625adeebf56ebb9935128038d2f4f91885691b7060f94d2",
    "scripted/bandit/options": "68f47287aef5e5d368d15f0fd352a3a7374cf3aa1fdf1567d53eae44f3a1f6d4",
    "scripted/ragen/FrozenLake-v0/full/last_token/False":
        "3e91338ea5cc81ff2cdef1d7c528b3bf41c27bf7b2a9f16ddc92fcfa3ae31ab1",
    "scripted/ragen/FrozenLake-v0/full/per_turn/True":
        "f8838bdd7577f74f8e56356702da8ec92e12da8b6c95186a345964f5592a737b",
    "scripted/ragen/FrozenLake-v0/single_turn/last_token/True":
        "ab5f45129c383bcf1a8d6bccef59e97b4776bdb5c3d6f8d32ff067947baa19f4",
    "scripted/ragen/FrozenLake-v0/window:1/per_turn/False":
        "2bf2b421b5ae0d9e2582461d1b88b79298a1f6dd4b9b140cd928af3009197cab",
    "scripted/ragen/Sokoban-v0/full/last_token/False":
        "de46ce9dd4896a5226a530e2931ed9bfd2d9503c4b424382c534c708019beee6",
    "scripted/ragen/Sokoban-v0/full/per_turn/True": "4388937b3407e2935f128e6535225cc519156af40565cfb850385d7e1462d865",
    "scripted/ragen/Sokoban-v0/single_turn/last_token/True":
        "65201916f0a58438cb9cbeede8a6f3c01a57ed9a362f5ed36a67562db4b81cdc",
    "scripted/ragen/Sokoban-v0/window:1/per_turn/False":
        "373e4903846fef76d23c272f45eba10c26eb7e3fc211235dc3241f550ba90e1d",
    "scripted/sokoban/env_error": "27a6838866412f3c8a853b5244c32eefbbd0a485a15ee337d65e200a8912b24a",
    "trl/tool_warm_start/0.0": "5f5a4a40f4c34816a1ec5a680363ef301e830a161c4816aa4d96677b166c002c",
    "trl/tool_warm_start/0.5": "1416f6232bdebfd0a4b0cfa1723dbf29a7d901302440144304f40d473657f490",
    "trl/env_reward": "545105489b56e194f0819202c312c736d8d799581607f3d7f675c520c2b9eb39",
    "trl/ragen/FrozenLake-v0": "acb246902972b5bb11ba79c54f96d3029e318e19db4e47576c69ba6a6d6d0767",
    "trl/ragen/Sokoban-v0": "9610cc47fee818d18668d47c9ace6c93105f9ddd806b6689e5acd739e29ace74",
    "verl/ragen/FrozenLake-v0": "76e9c757c3a50164ad16b0c207823302f9f777fa9b00ca80d358f80851294ec6",
    "verl/ragen/Sokoban-v0": "c2789a3d11370a71047da6ea201fdf834f8f1ebe3c077c3648b4e588bb7fcba1",
    "vision/sampled/full": "7ed796e0dd32fa134109156f94c7fb34aafc15b54c34499648e2ce19261ff4a3",
    "vision/sampled/window:1": "b220240c4c96ca01f69e4faf83bc804de67555b7c430d1fb6d4290538438a560",
    "vision/scripted/full": "c603c15e0c06f7d526d39bdcfcf008d8d6c0feae04ce6a718e5f983546887a83",
    "vision/scripted/window:1": "13412f0eb66bbef248511fed159869a3a73e6964d6ecdce0a35ff93a4b582fac",
}

#: Words the tiny tokenizer learns (the envs' observations and the scripted answers).
CORPUS = ("Board size rows cols Targets Boxes Player Grid Map Up Down Left Right Turn State Reward "
          "You have actions left. Janitor Trader arm pull which")


def _update(h: Any, obj: Any) -> None:
    h.update(json.dumps(obj, sort_keys=True, default=repr).encode())


def _fingerprint(batch: Any) -> str:
    """sha256 over the batch's token tensors, rewards, masks and every trajectory's turns and messages."""
    h = hashlib.sha256()
    for name in ("input_ids", "attention_mask", "loss_mask", "token_rewards", "turn_index", "row_traj",
                 "row_group", "traj_group", "returns", "turn_rewards", "success", "format_valid", "num_turns",
                 "response_length"):
        t = getattr(batch, name)
        _update(h, [name, list(t.shape), str(t.dtype)])
        h.update(t.contiguous().numpy().tobytes())
    for traj in batch.trajectories:
        _update(h, [traj.group, traj.index_in_group, traj.seed, traj.messages, traj.success, traj.terminated,
                    traj.truncated])
        for t in traj.turns:
            _update(h, [t.prompt_ids, t.response_ids, t.response_text, t.reasoning_len, t.reward, t.format_valid,
                        t.action_valid, t.finish_reason, t.env_error, len(t.images)])
            for im in t.images:
                h.update(np.ascontiguousarray(im).tobytes())
    _update(h, None if batch.images is None else [len(r) for r in batch.images])
    return h.hexdigest()


def _digest(obj: Any) -> str:
    h = hashlib.sha256()
    _update(h, obj)
    return h.hexdigest()


def _check(case: str, value: str) -> None:
    print(f"{case}: {value}")  # shown with -s: how the pinned values were produced
    assert PINNED.get(case) == value, f"{case} changed: {value}"


ANSWERS = {
    "ragen/Sokoban-v0": ["<think> push </think> <answer> Left </answer>", "garbage",
                         "<think> a </think> <answer> Up || Right </answer>", "<answer> Down </answer>",
                         "<answer>Dance</answer>", "<think> b </think> <answer> Right </answer>"],
    "ragen/FrozenLake-v0": ["<think> go </think> <answer> Up </answer>", "<answer> Left || Left </answer>",
                            "nonsense", "<think> c </think> <answer> Right </answer>", "<answer> Down </answer>",
                            "<answer> Up </answer>"],
}


def _script(answers: list[str]):
    """Responder answering turn t of episode i with ``answers[(i + 2 * t) % len(answers)]``."""
    calls: dict[int, int] = {}

    def respond(envs, idx):
        out = []
        for i in idx:
            t = calls.get(i, 0)
            calls[i] = t + 1
            out.append(answers[(i + 2 * t) % len(answers)])
        return out

    return respond


@pytest.fixture(scope="module")
def policy(make_tiny_policy):
    return make_tiny_policy(CORPUS)


@pytest.fixture(scope="module")
def vision_policy(make_tiny_policy):
    return make_tiny_policy(CORPUS, vision=True)


SAMPLED = [(env_id, context, placement)
           for env_id in ("ragen/Sokoban-v0", "ragen/FrozenLake-v0")
           for context, placement in (("single_turn", "per_turn"), ("full", "last_token"))]


@pytest.mark.parametrize(("env_id", "context", "placement"), SAMPLED)
def test_sampled_rollouts_are_pinned(policy, env_id, context, placement):
    torch.manual_seed(0)
    s = RolloutSettings(max_turns=3, context=context, max_new_tokens=12, reward_placement=placement,
                        length_limit=50)
    batch = rollout(policy, make_envs(env_id, 4), [11, 12], 2, s, generator=torch.Generator().manual_seed(5))
    _check(f"sampled/{env_id}/{context}", _fingerprint(batch))


SCRIPTED = [(env_id, context, placement, system)
            for env_id in ("ragen/Sokoban-v0", "ragen/FrozenLake-v0")
            for context, placement, system in (("single_turn", "last_token", True), ("full", "per_turn", True),
                                               ("window:1", "per_turn", False), ("full", "last_token", False))]


@pytest.mark.parametrize(("env_id", "context", "placement", "system"), SCRIPTED)
def test_scripted_rollouts_are_pinned(policy, env_id, context, placement, system):
    s = RolloutSettings(max_turns=3, context=context, reward_placement=placement, system_prompt=system)
    batch = rollout(policy, make_envs(env_id, 4), [21, 22], 2, s, responder=_script(ANSWERS[env_id]))
    _check(f"scripted/{env_id}/{context}/{placement}/{system}", _fingerprint(batch))


def test_reset_options_and_env_errors_are_pinned(policy):
    # Bandit with a per-rollout payoff seed (rollout k of seed s gets s * G + k), two turns.
    s = RolloutSettings(max_turns=2, context="full")
    opts = [{"payoff_seed": seed * 2 + k} for seed in (3, 4) for k in range(2)]
    answers = ["<answer> Janitor </answer>", "<answer> Trader </answer>", "<think> x </think> <answer> Trader"]
    batch = rollout(policy, make_envs("ragen/Bandit-v0", 4), [3, 4], 2, s, responder=_script(answers),
                    reset_options=opts)
    _check("scripted/bandit/options", _fingerprint(batch))

    # An env that raises on one answer: that episode ends with the format penalty, the others go on.
    envs = make_envs("ragen/Sokoban-v0", 4)
    real = envs[1].step

    def boom(text):
        if "Up" in text:
            raise RuntimeError("bug in the env")
        return real(text)

    envs[1].step = boom
    batch = rollout(policy, envs, [5, 6], 2, RolloutSettings(max_turns=3, context="window:2"),
                    responder=_script(ANSWERS["ragen/Sokoban-v0"]))
    _check("scripted/sokoban/env_error", _fingerprint(batch))


@pytest.mark.parametrize("context", ["full", "window:1"])
def test_vision_rollouts_are_pinned(vision_policy, context):
    s = RolloutSettings(max_turns=3, context=context, max_new_tokens=6)
    scripted = rollout(vision_policy, make_envs("ragen/Sokoban-Vision-v0", 4), [7, 8], 2, s,
                       responder=_script(ANSWERS["ragen/Sokoban-v0"]))
    _check(f"vision/scripted/{context}", _fingerprint(scripted))
    sampled = rollout(vision_policy, make_envs("ragen/Sokoban-Vision-v0", 2), [7], 2, s,
                      generator=torch.Generator().manual_seed(1))
    _check(f"vision/sampled/{context}", _fingerprint(sampled))


# ------------------------------------------------------------------------------------------- other engines
@pytest.mark.parametrize("env_id", ["ragen/Sokoban-v0", "ragen/FrozenLake-v0"])
def test_trl_environment_turn_texts_are_pinned(env_id):
    from ragen_core.integrations.trl.env import RagenEnvironment

    texts = []
    for seed, include in ((10000, True), (10001, False)):
        env = RagenEnvironment(env_id, include_instructions=include)
        texts.append(env.reset(prompt=[{"role": "user", "content": ""}], seed=seed))
        texts.append(env.get_reward())
        for answer in ("Up || Left", "Dance", "<answer>Right</answer>", "Down", "Left", "Up", "Right", "Down",
                       "Left", "Up", "Right", "Down"):
            texts.append(env.act(answer))
            texts.append(env.get_reward())
    _check(f"trl/{env_id}", _digest(texts))


def test_trl_env_reward_is_pinned():
    from ragen_core.integrations.trl.env import EnvReward

    reward = EnvReward("ragen/Bandit-v0", group_size=2, per_rollout_option="payoff_seed")
    completions = ["<answer> Trader </answer>", "<answer> Janitor </answer>", [{"role": "assistant",
                   "content": "<answer> Trader </answer>"}], "junk", "<answer> Trader </answer>"]
    # (a seed may have at most group_size rows in one call: a third row of seed 3 would take seed 4's first option)
    got = reward(None, completions, seed=[3, 3, 4, 4, 5])
    _check("trl/env_reward", _digest([got, reward.last_success]))


@pytest.mark.parametrize("env_id", ["ragen/Sokoban-v0", "ragen/FrozenLake-v0"])
def test_verl_episode_messages_are_pinned(env_id):
    from ragen_core.integrations.verl.env import EnvEpisode

    out = []
    for seed, system, max_turns in ((10003, True, 3), (10004, False, 6)):
        ep = EnvEpisode(env_id, seed, max_turns=max_turns, length_limit=77, system_prompt=system)
        out.append(ep.start())
        for text in ANSWERS[env_id]:
            user = ep.step(text)
            out.append([user, ep.turn, ep.total_reward, ep.turn_rewards, ep.done, ep.success])
            if user is None:
                break
    _check(f"verl/{env_id}", _digest(out))


# ------------------------------------------------------------------------------------------- the episode itself
def test_chat_episode_replays_direct_env_stepping():
    import gymnasium as gym

    from ragen_core.episode import ChatEpisode, user_turn_text

    env = gym.make("ragen/Sokoban-v0")
    ep = ChatEpisode(env, length_limit=33, max_turns=4)
    start = ep.reset(10003)
    ref = gym.make("ragen/Sokoban-v0")
    obs, info = ref.reset(seed=10003)
    assert start.system == info["instructions"] and start.actions_left == info["actions_left"]
    assert start.user["content"] == user_turn_text(1, obs, info["actions_left"], None, 33)
    assert start.messages() == ep.messages + [ep.user]
    answers = ["<answer>Left</answer>", "nonsense", "<answer>Up || Right</answer>", "<answer>Down</answer>"]
    for k, text in enumerate(answers):
        obs, r, term, trunc, info = ref.step(text)
        step = ep.step(text)
        assert step.reward == r and step.terminated == term and ep.turn == k + 1 and ep.success == info["success"]
        assert step.format_valid == (info["format_penalty"] == 0.0 and info["format_error"] is None)
        if term or trunc or k == 3:
            assert step.user is None and ep.done
            break
        assert step.user["content"] == user_turn_text(k + 2, obs, info["actions_left"], r, 33)
    assert answers[1] in [m["content"] for m in ep.messages]
    assert [m["role"] for m in ep.messages] == ["system"] + ["user", "assistant"] * ep.turn
    assert ep.rewards[1] == -0.1 and ep.total_reward == pytest.approx(sum(ep.rewards))  # the format penalty
    with pytest.raises(RuntimeError, match="over"):
        ep.step("x")
    ep.reset(10003)  # a reset starts a fresh chat
    assert ep.turn == 0 and not ep.done and ep.total_reward == 0.0 and ep.messages == [ep.messages[0]]


def test_chat_episode_windows_and_options():
    from ragen_core.episode import ChatEpisode

    env = make_envs("ragen/Sokoban-v0", 1)[0]
    ep = ChatEpisode(env, length_limit=10, system_prompt=False, reminder=False)
    ep.reset(5)
    assert ep.system == "" and ep.messages == [] and "Always output" not in ep.user["content"]
    assert ep.instructions  # kept for adapters that show it elsewhere (the TRL tool adapter)
    users = []
    for text in ("one", "two", "three"):  # malformed: format penalties, the episode goes on
        users.append(ep.user)
        assert ep.step(text).user is not None
    assert ep.prompt_messages(0) == ([ep.user], [])
    assert ep.prompt_messages(1)[0] == [users[2], {"role": "assistant", "content": "three"}, ep.user]
    assert ep.prompt_messages(99)[0] == [*ep.messages, ep.user]  # a window longer than the history: all of it
    assert ep.rewards == [-0.1] * 3 and ep.user["content"].startswith("Reward: -0.1\nTurn 4:")


# ------------------------------------------------------------------------------------------- env errors
def _raising(env):
    real = env.step

    def step(text):
        if "Left" in text:
            raise ValueError("the parser fell over")
        return real(text)

    env.step = step
    return env


def test_verl_episode_gives_the_format_penalty_when_the_env_raises():
    """The verl episode steps through safe_step: an env that raises on an answer ends the episode with the env's
    format penalty instead of raising into the agent loop (it used to call env.step directly)."""
    from ragen_core.integrations.verl.env import EnvEpisode

    ep = EnvEpisode("ragen/Sokoban-v0", 10003, max_turns=3)
    ep.start()
    _raising(ep.env)
    assert ep.step("<answer>Up</answer>") is not None
    assert ep.step("<answer>Left</answer>") is None  # raised inside the env: the episode is over, not the loop
    assert ep.done and not ep.success and ep.turn == 2 and ep.turn_rewards[-1] == -0.1


def test_trl_act_gives_the_format_penalty_when_the_env_raises():
    from ragen_core.integrations.trl.env import RagenEnvironment

    env = RagenEnvironment("ragen/Sokoban-v0")
    env.reset(seed=10000)
    _raising(env._env)
    out = env.act("Left")
    assert out == "Reward: -0.1\nThe episode is over (success: False)." and env.get_reward() == -0.1
    assert env.act("Up") == "The episode is over; nothing was done."


# ------------------------------------------------------------------------------------------- reset options
@pytest.mark.parametrize("g", [1, 2, 3])
def test_per_rollout_options_are_the_four_former_formulas(g):
    """One formula for every engine: the trainer's P x G rollouts, validation and warm start (G = 1), TRL."""
    from ragen_core.episode import per_rollout_options, rollout_option

    seeds = [10000, 10001, 123]
    got = per_rollout_options("payoff_seed", seeds, g)
    trainer = [{"payoff_seed": int(seeds[i // g]) * g + i % g} for i in range(len(seeds) * g)]
    assert got == trainer and len({d["payoff_seed"] for d in got}) == len(got)
    if g == 1:  # validation and warm start: the option is the seed itself
        assert got == [{"payoff_seed": s} for s in seeds]
    assert [rollout_option("payoff_seed", s, k, g) for s in seeds for k in range(g)] == got  # TRL, row by row
    assert per_rollout_options("", seeds, g) is None and rollout_option("", 5, 0, g) is None


@pytest.mark.parametrize("noise", [0.0, 0.5])
def test_tool_warm_start_episodes_are_pinned(make_tiny_model, noise):
    """The tool-calling warm start plays RagenEnvironment until it reports the episode over (its ``_done``)."""
    from transformers import AutoTokenizer

    from ragen_core.integrations.trl.env import RagenEnvironment, tool_chat_template
    from ragen_core.integrations.warm import tool_episode_tokens

    tok = AutoTokenizer.from_pretrained(make_tiny_model(CORPUS))
    template = tool_chat_template()
    out = []
    for seed in (3, 4, 5):
        env = RagenEnvironment("ragen/FrozenLake-v0", include_instructions=seed == 3)
        out.append(tool_episode_tokens(tok, env, seed, noise=noise, rng=np.random.default_rng(seed), max_calls=6,
                                       chat_template=template))
    _check(f"trl/tool_warm_start/{noise}", _digest(out))
