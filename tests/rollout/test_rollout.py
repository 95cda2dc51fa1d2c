"""Rollout bookkeeping against hand-built episodes: masks, reward placement, group seeding, context modes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from ragen_core.episode import user_turn_text
from ragen_core.rollout import (
    RolloutSettings,
    reasoning_prefix_length,
    rollout,
    turn_bridge,
)
from ragen_envs.base import TextAgentEnv


class CountEnv(TextAgentEnv):
    """Hand-built env: a counter starting at a seed-dependent value; Inc adds 1 (reward 1), Stop ends (0.5)."""

    ACTIONS = ("Inc", "Stop")

    def __init__(self, **kw: Any):
        super().__init__(max_actions_per_turn=1, max_actions=10, **kw)

    def _reset_task(self, options):
        self.n = int(self.np_random.integers(0, 1000))
        self.start = self.n
        return {}

    def _execute(self, action):
        if action == "Inc":
            self.n += 1
            return 1.0, False
        return 0.5, True

    def _state_text(self):
        return f"n = {self.n}"

    def _task_instructions(self):
        return "Count up, then stop."

    def _is_success(self):
        return self.n - self.start >= 2


@pytest.fixture(scope="module")
def policy(make_tiny_policy):
    return make_tiny_policy("n = 5 Inc Stop Count up, then stop.")


def script(plan):
    """Responder answering turn t of episode i with plan(i, t)."""
    calls = {}

    def respond(envs, idx):
        out = []
        for i in idx:
            t = calls.get(i, 0)
            calls[i] = t + 1
            a = plan(i, t)
            out.append(f"<think> step {t} of {i} </think> <answer> {a} </answer>" if a else "garbage")
        return out

    return respond


def test_group_seeding_same_initial_state(policy):
    envs = [CountEnv() for _ in range(6)]
    batch = rollout(policy, envs, [3, 4], 3, RolloutSettings(max_turns=1), responder=script(lambda i, t: "Stop"))
    starts = [e.start for e in envs]
    assert starts[0] == starts[1] == starts[2] and starts[3] == starts[4] == starts[5]
    assert starts[0] != starts[3]
    assert batch.traj_group.tolist() == [0, 0, 0, 1, 1, 1]
    # Turn-1 prompts are identical within a group (same seed -> same instructions and observation).
    p = [t.turns[0].prompt_ids for t in batch.trajectories]
    assert p[0] == p[1] == p[2] and p[0] != p[3]


def test_full_context_masks_and_tokens_match_independent_encoding(policy):
    envs = [CountEnv() for _ in range(2)]
    # Episode 0: Inc, garbage (format error), Stop. Episode 1: Stop at once.
    plan = {0: ["Inc", None, "Stop"], 1: ["Stop"]}
    batch = rollout(policy, envs, [7], 2, RolloutSettings(max_turns=5), responder=script(lambda i, t: plan[i][t]))
    assert batch.input_ids.shape[0] == 2  # one row per trajectory in full context
    traj = batch.trajectories[0]
    assert [t.reward for t in traj.turns] == [1.0, -0.1, 0.5]
    assert [t.format_valid for t in traj.turns] == [True, False, True]
    row = batch.input_ids[0][batch.attention_mask[0] == 1].tolist()
    # Independent reconstruction: the chat template over the whole conversation (all but the last response)
    # plus the last response's tokens.
    msgs = traj.messages
    expected = policy.encode_chat(msgs[:-1], add_generation_prompt=True) + traj.turns[-1].response_ids
    assert row == expected
    # The loss mask selects exactly the responses, in order.
    trained = batch.input_ids[0][batch.loss_mask[0] == 1].tolist()
    assert trained == sum((t.response_ids for t in traj.turns), [])
    masked_text = policy.decode(batch.input_ids[0][(batch.loss_mask[0] == 0) & (batch.attention_mask[0] == 1)])
    assert "Turn 2:" in masked_text and "Reward: 1" in masked_text and "Reward: -0.1" in masked_text
    assert "n = " in masked_text and "You have 9 actions left." in masked_text
    assert batch.num_turns.tolist() == [3, 1]
    assert batch.returns.tolist() == pytest.approx([1.4, 0.5])
    assert batch.success.tolist() == [False, False]
    assert batch.format_valid.tolist() == pytest.approx([2 / 3, 1.0])
    assert torch.isnan(batch.turn_rewards[1, 1:]).all()
    assert batch.response_length.tolist() == [sum(len(t.response_ids) for t in traj.turns),
                                              len(batch.trajectories[1].turns[0].response_ids)]
    # Old log-probs only where the loss mask is on (scripted responses carry 0).
    assert (batch.old_logprobs[batch.loss_mask == 0] == 0).all()


@pytest.mark.parametrize("placement", ["last_token", "per_turn"])
def test_reward_placement(policy, placement):
    envs = [CountEnv() for _ in range(2)]
    plan = {0: ["Inc", "Inc", "Stop"], 1: ["Inc", "Stop"]}
    batch = rollout(policy, envs, [1], 2, RolloutSettings(max_turns=5, reward_placement=placement),
                    responder=script(lambda i, t: plan[i][t]))
    for r, traj in enumerate(batch.trajectories):
        lm = batch.loss_mask[r]
        pos = lm.nonzero().flatten().tolist()
        nonzero = batch.token_rewards[r].nonzero().flatten().tolist()
        if placement == "last_token":
            assert nonzero == [pos[-1]]
            assert float(batch.token_rewards[r, pos[-1]]) == pytest.approx(traj.episode_return)
        else:
            ends = []
            for k in range(len(traj.turns)):
                ends.append(int((batch.turn_index[r] == k).nonzero().flatten()[-1]))
            assert nonzero == ends
            assert batch.token_rewards[r, ends].tolist() == pytest.approx([t.reward for t in traj.turns])
        # Rewards only ever sit on trained tokens.
        assert (batch.token_rewards[r][lm == 0] == 0).all()


def test_single_turn_and_window_contexts(policy):
    plan = lambda i, t: ["Inc", "Inc", "Stop"][t]  # noqa: E731
    envs = [CountEnv()]
    single = rollout(policy, envs, [5], 1, RolloutSettings(context="single_turn"), responder=script(plan))
    assert single.input_ids.shape[0] == 3  # one row per turn
    assert single.row_traj.tolist() == [0, 0, 0]
    traj = single.trajectories[0]
    for k, turn in enumerate(traj.turns):
        text = policy.decode(turn.prompt_ids)
        assert f"Turn {k + 1}:" in text and f"Turn {k}:" not in text
        assert "step 0 of 0" not in text  # no previous response in a single-turn prompt
        row = single.input_ids[k][single.attention_mask[k] == 1].tolist()
        assert row == turn.prompt_ids + turn.response_ids
        assert single.input_ids[k][single.loss_mask[k] == 1].tolist() == turn.response_ids

    window = rollout(policy, [CountEnv()], [5], 1, RolloutSettings(context="window:1"), responder=script(plan))
    t3 = policy.decode(window.trajectories[0].turns[2].prompt_ids)
    assert "step 1 of 0" in t3 and "step 0 of 0" not in t3 and "Turn 2:" in t3 and "Turn 1:" not in t3


def test_max_turns_and_finished_episodes(policy):
    envs = [CountEnv() for _ in range(2)]
    batch = rollout(policy, envs, [2], 2, RolloutSettings(max_turns=2),
                    responder=script(lambda i, t: "Stop" if i == 1 else "Inc"))
    assert batch.num_turns.tolist() == [2, 1]
    assert batch.trajectories[0].terminated is False and batch.trajectories[1].terminated is True


def test_mi_inputs_and_reasoning_span(policy):
    envs = [CountEnv() for _ in range(4)]
    batch = rollout(policy, envs, [1, 2], 2, RolloutSettings(max_turns=1), responder=script(lambda i, t: "Stop"))
    prompts, traces = batch.mi_inputs()
    assert len(prompts) == 2 and [len(r) for r in traces] == [2, 2]
    for i in range(2):
        for k in range(2):
            z = policy.decode(traces[i][k])
            assert z.rstrip().endswith("</think>") and "<answer>" not in z
    tok = policy.tokenizer
    ids = tok("<think> a b </think> <answer> x </answer>", add_special_tokens=False)["input_ids"]
    k = reasoning_prefix_length(tok, ids)
    assert "</think>" in tok.decode(ids[:k]) and "</think>" not in tok.decode(ids[: k - 1])
    assert reasoning_prefix_length(tok, tok("no tags", add_special_tokens=False)["input_ids"]) == 0


def test_generated_rollout_logprobs_and_bridge(policy):
    envs = [CountEnv() for _ in range(4)]
    gen = torch.Generator().manual_seed(0)
    s = RolloutSettings(max_turns=2, max_new_tokens=8)
    batch = rollout(policy, envs, [1, 2], 2, s, generator=gen)
    again = rollout(policy, envs, [1, 2], 2, s, generator=torch.Generator().manual_seed(0))
    assert torch.equal(batch.input_ids, again.input_ids)  # seeded: reproducible
    for r in range(batch.input_ids.shape[0]):
        m = batch.loss_mask[r] == 1
        assert (batch.old_logprobs[r][m] <= 0).all()
        assert int(m.sum()) == batch.response_length[r]
    # The bridge starts with the end-of-turn marker and ends with the assistant header.
    br = policy.tokenizer.convert_ids_to_tokens(turn_bridge(policy, {"role": "user", "content": "hi"}))
    assert br[0] == "<|im_end|>" and br[-2:] == policy.tokenizer.convert_ids_to_tokens(
        policy.tokenizer("assistant\n", add_special_tokens=False)["input_ids"])[-2:]


def test_user_turn_layout():
    text = user_turn_text(2, "grid", 8, -0.1, 100)
    lines = text.splitlines()
    assert lines[0] == "Reward: -0.1" and lines[1] == "Turn 2:" and lines[2] == "State:" and lines[3] == "grid"
    assert "You have 8 actions left." in text and "Max response length: 100 tokens." in text
    assert ("Reward" not in user_turn_text(1, "g", None, None, 10)
            and "actions left" not in user_turn_text(1, "g", None, None, 10))


def test_settings_validation():
    with pytest.raises(ValueError, match="context"):
        RolloutSettings(context="window:0")
    with pytest.raises(ValueError, match="reward_placement"):
        RolloutSettings(reward_placement="first")
    with pytest.raises(ValueError, match="envs"):
        rollout(None, [CountEnv()], [1], 2, RolloutSettings())


def test_seeds_reproduce_with_numpy_only():
    # The stand-in env draws from its seeded generator only (the group-seeding tests rely on it).
    a, b = CountEnv(), CountEnv()
    a.reset(seed=11)
    b.reset(seed=11)
    np.random.seed(0)  # global state must not matter
    c = CountEnv()
    c.reset(seed=11)
    assert a.n == b.n == c.n


class CrashEnv(CountEnv):
    """CountEnv whose step raises on the answer "Boom" (an env bug a model answer can reach)."""

    def step(self, action):
        if "Boom" in str(action):
            raise RecursionError("maximum recursion depth exceeded")
        return super().step(action)


def test_an_exception_in_env_step_ends_that_episode_not_the_rollout(policy):
    envs = [CrashEnv() for _ in range(4)]
    # Episode 1 answers Boom at its second turn; the others count up.
    plan = {0: ["Inc", "Inc", "Stop"], 1: ["Inc", "Boom", "Inc"], 2: ["Inc", "Inc", "Stop"], 3: ["Inc", "Inc", "Stop"]}
    batch = rollout(policy, envs, [1, 2], 2, RolloutSettings(max_turns=3), responder=script(lambda i, t: plan[i][t]))
    crashed = batch.trajectories[1]
    assert len(crashed.turns) == 2 and crashed.terminated and not crashed.success
    assert crashed.turns[-1].env_error.startswith("RecursionError")
    assert crashed.turns[-1].reward == pytest.approx(-0.1) and not crashed.turns[-1].format_valid
    assert crashed.episode_return == pytest.approx(1.0 - 0.1)
    for k in (0, 2, 3):
        assert batch.trajectories[k].success and len(batch.trajectories[k].turns) == 3
        assert all(t.env_error is None for t in batch.trajectories[k].turns)
    assert batch.summary()["rollout/env_errors"] == 1.0


def test_system_prompt_can_be_left_out_and_capped_responses_are_counted(policy):
    envs = [CountEnv() for _ in range(2)]
    with_sys = rollout(policy, envs, [1], 2, RolloutSettings(max_turns=1), responder=script(lambda i, t: "Inc"))
    without = rollout(policy, envs, [1], 2, RolloutSettings(max_turns=1, system_prompt=False),
                      responder=script(lambda i, t: "Inc"))
    text_with = policy.tokenizer.decode(with_sys.trajectories[0].turns[0].prompt_ids)
    text_without = policy.tokenizer.decode(without.trajectories[0].turns[0].prompt_ids)
    assert "Count up, then stop." in text_with and "Count up, then stop." not in text_without
    assert text_without.startswith("<|im_start|>user\nTurn 1:")
    assert [m["role"] for m in without.trajectories[0].messages] == ["user", "assistant"]
    # Sampled responses of an untrained model run to the token budget: every turn is counted as capped.
    gen = rollout(policy, envs, [1], 2, RolloutSettings(max_turns=1, max_new_tokens=3, stop=()),
                  generator=torch.Generator().manual_seed(0))
    full_length = [len(t.response_ids) == 3 for tr in gen.trajectories for t in tr.turns]
    assert any(full_length)
    assert gen.summary()["rollout/response_capped"] == pytest.approx(sum(full_length) / len(full_length))
    assert with_sys.summary()["rollout/response_capped"] == 0.0


def test_rollout_options_are_defined_once():
    """The [rollout] config section and RolloutSettings share one definition of the options (RolloutOptions): the
    config adds the batch sizes, the settings the per-call options, and from_config carries every option."""
    from dataclasses import fields, replace

    from ragen_core.rollout import RolloutOptions
    from ragen_core.training.config import RolloutConfig

    options = [f.name for f in fields(RolloutOptions)]
    assert [f.name for f in fields(RolloutConfig)] == [*options, "groups", "group_size"]
    assert [f.name for f in fields(RolloutSettings)] == [*options, "greedy", "stop"]
    cfg = replace(RolloutConfig(), max_turns=3, context="window:2", max_new_tokens=17, temperature=0.5, top_p=0.9,
                  reward_placement="per_turn", length_limit=40, system_prompt=False)
    s = RolloutSettings.from_config(cfg, greedy=True)
    for name in options:
        assert getattr(s, name) == getattr(cfg, name) != getattr(RolloutOptions(), name), name
    assert s.greedy and s.stop == RolloutSettings().stop
    assert RolloutSettings.from_config(cfg, max_turns=9).max_turns == 9  # overrides win


@pytest.mark.parametrize("key, value", [("max_turns", 0), ("max_new_tokens", 0), ("max_turns", 2.0),
                                        ("temperature", 0.0), ("top_p", 1.5), ("context", "window:0"),
                                        ("reward_placement", "first")])
def test_settings_and_config_reject_the_same_options(key, value):
    from ragen_core.training.config import ConfigError, load_config

    with pytest.raises(ValueError, match=f"^{key} "):
        RolloutSettings(**{key: value})
    with pytest.raises(ConfigError, match=f"^rollout.{key} "):
        load_config(None, [f"rollout.{key}={value!r}".replace("'", '"')])
