"""Do the benchmarks time what their tables name? Each test runs a benchmark's own function on a tiny input and
checks what it timed or counted against an independent count (no timing thresholds except where a sleep makes the
difference a hundredfold)."""

from __future__ import annotations

import time

import gymnasium as gym
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from benchmarks import bench_envs as be
from benchmarks import bench_filtering as bf
from benchmarks import bench_mi as bmi
from benchmarks import bench_rollout as br
from benchmarks.micro import bench_micro as bm

RESET_SLEEP_S = 0.02


class SlowResetEnv(gym.Env):
    """A text env whose reset sleeps RESET_SLEEP_S and whose step is instant and ends the episode (as Bandit's)."""

    ACTIONS = ("go",)
    observation_space = gym.spaces.Text(64)
    action_space = gym.spaces.Text(64)

    resets = 0  # every reset of every instance, counted where it happens

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        SlowResetEnv.resets += 1
        time.sleep(RESET_SLEEP_S)
        return "room", {}

    def step(self, action):
        return "room", 0.0, True, False, {"action_is_valid": True}


SLOW_ID = "qa/SlowResetBench-v0"
if SLOW_ID not in gym.registry:
    gym.register(id=SLOW_ID, entry_point=SlowResetEnv)


# ---------------------------------------------------------------------------------------------- filtering
def _shared_prompt_rows(p: int, g: int, prompt: int, responses: list[int]) -> dict[str, torch.Tensor]:
    """Group-major right-padded rows whose G rollouts share their group's prompt, as a rollout batch's do."""
    gen = torch.Generator().manual_seed(0)
    r, t = p * g, prompt + max(responses)
    ids, att, loss = (torch.zeros(r, t, dtype=torch.long) for _ in range(3))
    old = torch.zeros(r, t)
    for i in range(p):
        shared = torch.randint(5, 200, (prompt,), generator=gen)
        for k in range(g):
            b, n = i * g + k, responses[(i * g + k) % len(responses)]
            ids[b, :prompt] = shared
            ids[b, prompt:prompt + n] = torch.randint(5, 200, (n,), generator=gen)
            att[b, :prompt + n] = 1
            loss[b, prompt:prompt + n] = 1
            old[b, prompt:prompt + n] = -torch.rand(n, generator=gen) - 1.0
    return {"input_ids": ids, "attention_mask": att, "loss_mask": loss, "old_logprobs": old,
            "row_traj": torch.arange(r), "row_group": torch.arange(p).repeat_interleave(g)}


def _flops(fn) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


@pytest.fixture(scope="module")
def tiny_policy():
    from ragen_core.policy import load_policy

    policy = load_policy("tiny")
    policy.model.train()
    return policy


def test_filtering_step_does_the_trainers_forward(tiny_policy):
    """The timed step's arithmetic is the trainer's: forward_logprobs scored at the loss positions (the lean forward
    then skips prompt logits and computes a group's shared prompt once), not at every position (3x the work here)."""
    rows = _shared_prompt_rows(3, 2, 40, [5, 7, 3])
    rewards = torch.tensor([[0.0, 1.0], [1.0, 1.0], [0.0, 0.0]])
    steps = {name: bf.apply_variant(rows, rewards, bf.VARIANTS[name])[0]
             for name in ("none", "top_p0.9_masked", "top_p0.9_removed")}

    def trainer_forward():  # as Trainer._update calls it: score_mask = its loss mask
        r = steps["none"]
        out = tiny_policy.forward_logprobs(r["input_ids"], r["attention_mask"], with_entropy=True,
                                           score_mask=r["loss_mask"] != 0)
        (out.logprobs.sum() + out.entropy.sum()).backward()

    expected = _flops(trainer_forward)
    measured = {name: _flops(lambda r=r: bf.loss_backward(tiny_policy, r)) for name, r in steps.items()}
    assert measured["none"] == expected
    # Masking saves nothing (its dropped rows are still computed); removing saves the dropped groups' work.
    assert measured["top_p0.9_masked"] == measured["none"]
    assert 0 < measured["top_p0.9_removed"] < measured["none"]


# ---------------------------------------------------------------------------------------------- envs
def test_text_step_rate_times_env_step_alone():
    """A reset after every step (Bandit's case, FrozenLake's every few steps) is not in the steps/s: the rate of an
    instant step stays far above the 1 / RESET_SLEEP_S = 50/s it had when resets were counted."""
    out = be.bench_other_envs(0.3, env_ids=(SLOW_ID,))[SLOW_ID]
    assert out["items"] == out["resets"] >= 3  # every step ended its episode
    assert out["rate"] > 20 / RESET_SLEEP_S
    assert out["reset_rate"] <= 1 / RESET_SLEEP_S
    row = be.build_rows({f"generation {d[0]}x{d[1]}/{b}": {"rate": 1.0, "generation_only_rate": 1.0,
                                                          "mean_optimal_steps": 1.0} for d, b in be.GEN_CONFIGS}
                        | {"text step": {"rate": 1.0}, "rgb_array render": {"rate": 1.0}},
                        {SLOW_ID: out}, None)[-1]
    assert row["unit"] == "steps/s" and "resets not timed" in row["notes"]


def test_step_rate_counts_steps_and_resets_of_a_real_env():
    from ragen_envs.frozenlake import FrozenLakeEnv

    env = FrozenLakeEnv()
    moves = [f"<think>t</think><answer>{a}</answer>" for a in env.ACTIONS]
    out = be.step_rate(env, lambda obs, i: moves[i % len(moves)], 0.0, min_steps=60)
    assert out["items"] == 60 and out["resets"] >= 1 and out["rate"] > 0 and out["reset_rate"] > 0


# ---------------------------------------------------------------------------------------------- MI
def test_mi_paths_are_timed_interleaved_and_checked():
    calls: list[str] = []
    res = bmi.interleaved_medians({"kv": lambda: calls.append("kv"), "naive": lambda: calls.append("naive")}, 3)
    assert calls == ["kv", "naive", "naive", "kv", "kv", "naive"]
    assert all(len(r[2]) == 3 for r in res.values())
    lengths = torch.full((2, 2), 4)
    ref = torch.zeros(2, 2, 2, dtype=torch.float64)
    assert bmi.check_agreement("naive", ref + 1e-6, ref, lengths) == pytest.approx(1e-6)
    with pytest.raises(ValueError, match="naive: L differs"):
        bmi.check_agreement("naive", ref + 0.1, ref, lengths)
    with pytest.raises(ValueError, match="naive: L differs"):
        bmi.check_agreement("naive", ref + float("nan"), ref, lengths)


def test_mi_benchmark_on_a_tiny_model_agrees_and_counts_positions():
    torch.set_num_threads(1)
    out = bmi.bench_cross_score(p=2, g=2, prompt_len=8, response_len=4, hidden=32, layers=1, vocab=64, repeats=2,
                                batch_tokens=4096, per_pair=True, device="cpu")
    m = out["methods"]
    assert len(m["kv_reuse"]["seconds_per_round"]) == len(m["naive_batched"]["seconds_per_round"]) == 2
    assert m["naive_per_pair"]["forward_calls"] == 2 * 2 * 2  # one per (trace, prompt) pair
    assert m["kv_reuse"]["positions"] == 2 * 8 + 2 * 2 * 2 * 4  # P prompts once + P*P*G*|z| trace positions
    assert max(m["naive_batched"]["max_abs_diff_vs_kv"], m["naive_per_pair"]["max_abs_diff_vs_kv"]) < 1e-3


# ---------------------------------------------------------------------------------------------- rollout
def test_rollout_quick_form_runs_the_multi_turn_path(tiny_policy):
    def turns(config: str) -> int:
        return int(config.split(":")[1])

    assert turns(br.QUICK_CONFIG) == turns(br.FULL_CONFIG) == 2
    res = br.measure(tiny_policy, 1, 2, 2, 4, 1, torch.device("cpu"))
    run = res["runs"][0]
    assert run["turns"] > run["episodes"]  # some episode played its second turn
    assert 0 < run["generated_tokens"] <= 4 * run["turns"]


# ---------------------------------------------------------------------------------------------- micro
def test_micro_env_step_times_the_step_and_not_the_reset():
    env = gym.make(SLOW_ID)
    setup, step, teardown, state = bm.env_step_bench(env)
    resets_in_step, times = 0, []
    for _ in range(5):
        setup()
        before = SlowResetEnv.resets
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
        resets_in_step += SlowResetEnv.resets - before
        teardown()
    assert state["steps"] == state["valid"] == 5 and state["resets"] == 5  # a reset before every step, untimed
    assert resets_in_step == 0
    # The fastest step, not the slowest: one instant step that the loaded machine paused (another process on the
    # core, a garbage collection) is not a timed reset; a reset inside the step sleeps in every one of them.
    assert min(times) < RESET_SLEEP_S / 2
