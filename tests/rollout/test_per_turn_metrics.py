"""Per-turn figures of multi-turn rollouts (`ragen_core.rollout.per_turn_metrics`, in `RolloutBatch.summary()`).

Hand-built trajectories with the expected figures worked out by hand in the comments, a plain-loop reference over
random trajectories, and a scripted SearchQA rollout in which the tool use is known by construction.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest

import ragen_envs  # noqa: F401  (registers the ids)
from ragen_core.rollout import (
    RolloutSettings,
    Trajectory,
    Turn,
    final_action_flag,
    per_turn_metrics,
    rollout,
)


def turn(reward: float, valid: bool = True, final: bool | None = None) -> Turn:
    return Turn(prompt_ids=[1], response_ids=[2], response_logprobs=[0.0], response_text="", reasoning_len=0,
                reward=reward, format_valid=valid, action_valid=valid, finish_reason="stop", final_action=final)


def traj(*turns: Turn) -> Trajectory:
    return Trajectory(group=0, index_in_group=0, seed=0, turns=list(turns))


def test_hand_built_tool_episodes():
    trajs = [
        traj(turn(0.0, final=False), turn(1.0, final=True)),  # searched, then answered right on turn 2
        traj(turn(0.5, final=True)),  # answered at once, half right
        traj(turn(-0.1, valid=False, final=False), turn(0.0, final=False), turn(1.0, final=True)),  # invalid first
        traj(turn(0.0, final=False), turn(-0.1, valid=False, final=False), turn(0.0, final=True)),  # wrong answer
    ]
    m = per_turn_metrics(trajs, max_turns=3)
    # 9 turns, 2 invalid.
    assert m["rollout/invalid_action"] == pytest.approx(2 / 9)
    # First turns: tool call, answer, invalid, tool call -> 2 of 4 used the tool before answering.
    assert m["rollout/tool_use"] == pytest.approx(2 / 4)
    # Positive reward: 0.5 on turn 1, 1.0 on turn 2, 1.0 on turn 3; total 2.5.
    assert m["rollout/reward_share_turn1"] == pytest.approx(0.5 / 2.5)
    assert m["rollout/reward_share_turn2"] == pytest.approx(1.0 / 2.5)
    assert m["rollout/reward_share_turn3"] == pytest.approx(1.0 / 2.5)
    assert m["rollout/reward_turn"] == pytest.approx((1 * 0.5 + 2 * 1.0 + 3 * 1.0) / 2.5)


def test_envs_without_final_actions_report_no_tool_use_and_no_reward_gives_nan():
    trajs = [traj(turn(-0.1, valid=False), turn(0.0)), traj(turn(0.0))]
    m = per_turn_metrics(trajs, max_turns=2)
    assert "rollout/tool_use" not in m
    assert m["rollout/invalid_action"] == pytest.approx(1 / 3)
    assert all(math.isnan(m[k]) for k in ("rollout/reward_turn", "rollout/reward_share_turn1",
                                           "rollout/reward_share_turn2"))


def test_single_turn_rewards_all_land_on_turn_one():
    m = per_turn_metrics([traj(turn(1.0)), traj(turn(0.25)), traj(turn(0.0))], max_turns=1)
    assert m["rollout/reward_share_turn1"] == 1.0 and m["rollout/reward_turn"] == 1.0
    assert m["rollout/invalid_action"] == 0.0


def _reference(trajs: list[Trajectory], max_turns: int) -> dict[str, float]:
    """The definitions of the docstring as plain counting loops, over a turn-major table."""
    n_turns = n_invalid = 0
    earned = [0.0] * max_turns
    for tr in trajs:
        for k in range(len(tr.turns)):
            n_turns += 1
            if not tr.turns[k].action_valid:
                n_invalid += 1
            if tr.turns[k].reward > 0:
                earned[k] += tr.turns[k].reward
    out = {"rollout/invalid_action": n_invalid / n_turns}
    firsts = [tr.turns[0] for tr in trajs]
    if firsts[0].final_action is not None:
        tool = 0
        for t in firsts:
            if t.action_valid and t.final_action is False:
                tool += 1
        out["rollout/tool_use"] = tool / len(firsts)
    total = sum(earned)
    for k in range(max_turns):
        out[f"rollout/reward_share_turn{k + 1}"] = earned[k] / total
    mean_turn = 0.0
    for k in range(max_turns):
        mean_turn += (k + 1) * earned[k] / total
    out["rollout/reward_turn"] = mean_turn
    return out


@pytest.mark.parametrize("seed", range(5))
def test_random_trajectories_match_the_plain_loop(seed):
    rng = np.random.default_rng(seed)
    max_turns = 4
    declared = bool(seed % 2)
    trajs = []
    for _ in range(12):
        turns = [turn(float(rng.choice([-0.1, 0.0, 0.3, 1.0])), valid=bool(rng.random() < 0.7),
                      final=bool(rng.random() < 0.4) if declared else None)
                 for _ in range(int(rng.integers(1, max_turns + 1)))]
        trajs.append(traj(*turns))
    trajs.append(traj(turn(1.0, final=True if declared else None)))  # some positive reward in every batch
    got, want = per_turn_metrics(trajs, max_turns), _reference(trajs, max_turns)
    assert got.keys() == want.keys()
    for k in want:
        assert got[k] == pytest.approx(want[k]), k


def test_final_action_flag_reads_the_executed_actions():
    """None for an env without is_final_action, else whether one executed action is final."""
    shop = gym.make("ragen/WebShop-v0", num_products=40)
    assert final_action_flag(shop, {"actions_executed": ["click[Buy Now]"]}) is True
    assert final_action_flag(shop, {"actions_executed": ["search[mug]"]}) is False
    assert final_action_flag(shop, {"actions_executed": []}) is False
    assert final_action_flag(gym.make("ragen/MetaMathQA-v0"), {"actions_executed": ["3"]}) is None


@pytest.fixture(scope="module")
def policy(make_tiny_policy):
    return make_tiny_policy("Question: search finish Search results")


def test_a_scripted_searchqa_rollout_reports_its_tool_use(policy):
    """Episodes 0 and 2 search first and then answer right; episode 1 answers at once (wrong); episode 3 writes
    garbage, searches, then answers right on its last turn: tool use 2/4, invalid 1 of 8 turns, reward 1 on
    turn 2 (twice) and on turn 3 (once)."""
    envs = [gym.make("ragen/SearchQA-v0", hops=1, num_entities=12, distractors=1, top_k=2, max_turns=3)
            for _ in range(4)]
    calls: dict[int, int] = {}

    def respond(active, idx):
        out = []
        for env, i in zip(active, idx):
            t = calls.get(i, 0)
            calls[i] = t + 1
            u = env.unwrapped
            if i == 1:
                out.append("<think> x </think> <answer> finish[nobody] </answer>")
            elif i == 3 and t == 0:
                out.append("no answer at all")
            else:
                out.append(f"<think> x </think> <answer> {u.oracle_step()[1][0]} </answer>")
        return out

    batch = rollout(policy, envs, [0, 1], 2, RolloutSettings(max_turns=3), responder=respond)
    flags = [[t.final_action for t in tr.turns] for tr in batch.trajectories]
    assert flags == [[False, True], [True], [False, True], [False, False, True]]
    assert [tr.success for tr in batch.trajectories] == [True, False, True, True]
    m = batch.summary()
    assert m["rollout/tool_use"] == pytest.approx(2 / 4)
    assert m["rollout/invalid_action"] == pytest.approx(1 / 8)
    assert m["rollout/num_turns"] == pytest.approx(8 / 4)
    assert m["rollout/reward_share_turn1"] == 0.0
    assert m["rollout/reward_share_turn2"] == pytest.approx(2 / 3)
    assert m["rollout/reward_share_turn3"] == pytest.approx(1 / 3)
    assert m["rollout/reward_turn"] == pytest.approx((2 + 2 + 3) / 3)
