"""The TRL adapter (ragen_core.integrations.trl): version gate, row removal, PR #7242 parity, env adapter, and two
CPU training steps with filtering on, whose gradients are checked against an independent computation."""

from __future__ import annotations

import copy
import inspect
import math
import os
import random

import pytest
import torch

if not os.environ.get("CI"):  # CI installs the trl extra (make test): there a missing TRL must fail, not skip
    pytest.importorskip("trl")

from ragen_core.integrations.trl.rows import group_rewards, local_kept_rows, take_rows  # noqa: E402
from ragen_core.integrations.trl.version import UnsupportedTRLVersionError, check_trl_version  # noqa: E402
from ragen_core.math.filtering import filter_groups, reward_variance  # noqa: E402

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


# ------------------------------------------------------------------------------------------------ version gate
def test_version_gate_names_the_supported_range(monkeypatch):
    monkeypatch.delenv("RAGEN2_ALLOW_UNTESTED_TRL", raising=False)
    assert check_trl_version("1.16.0") == "1.16.0"
    assert check_trl_version("1.16.3") == "1.16.3"
    for bad in ("1.15.2", "1.17.0.dev0", "2.0.0", "0.12.0"):
        with pytest.raises(UnsupportedTRLVersionError, match=r"trl>=1\.16\.0,<1\.17\.0 \(tested: 1\.16\.0\)"):
            check_trl_version(bad)
    monkeypatch.setenv("RAGEN2_ALLOW_UNTESTED_TRL", "1")
    with pytest.warns(RuntimeWarning, match="found trl==1.17.0"):
        assert check_trl_version("1.17.0") == "1.17.0"


# ------------------------------------------------------------------------------------------------ pure helpers
def test_group_rewards_weighted_nansum_and_unscorable_rows():
    rpf = torch.tensor([[1.0, 2.0], [float("nan"), 3.0], [float("nan"), float("nan")], [0.0, 0.0]])
    r = group_rewards(rpf, torch.tensor([1.0, 0.5]), 2)
    expected = torch.tensor([[2.0, 1.5], [float("nan"), 0.0]])
    assert r.shape == (2, 2)
    assert torch.equal(torch.isnan(r), torch.isnan(expected))
    assert torch.allclose(r.nan_to_num(), expected.nan_to_num())
    with pytest.raises(ValueError, match="dividing N=4"):
        group_rewards(rpf, torch.ones(2), 3)


def test_take_rows_removes_rows_and_padding_columns():
    # 4 rows, left-padded prompts [4 cols], right-padded completions [5 cols]
    pm = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1], [0, 1, 1, 1], [0, 0, 0, 1]])
    cm = torch.tensor([[1, 1, 0, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0], [1, 1, 1, 0, 0]])
    batch = {
        "prompt_ids": torch.arange(16).reshape(4, 4), "prompt_mask": pm,
        "completion_ids": torch.arange(20).reshape(4, 5), "completion_mask": cm,
        "old_per_token_logps": torch.randn(4, 5), "advantages": torch.tensor([1.0, 2.0, 3.0, 4.0]),
        "num_items_in_batch": torch.tensor(11),
    }
    rows = local_kept_rows(torch.tensor([False, True]), group_size=2, start=0, count=4)  # group 1 = rows 2, 3
    assert rows.tolist() == [2, 3]
    out, n_pad = take_rows(batch, rows)
    assert n_pad == 0
    # plain reference: rows 2 and 3; prompt columns 1.. (column 0 is padding in both); completion columns ..3
    assert torch.equal(out["prompt_ids"], batch["prompt_ids"][[2, 3]][:, 1:])
    assert torch.equal(out["completion_ids"], batch["completion_ids"][[2, 3]][:, :3])
    assert torch.equal(out["old_per_token_logps"], batch["old_per_token_logps"][[2, 3]][:, :3])
    assert out["advantages"].tolist() == [3.0, 4.0]
    # padding to a multiple: placeholders carry no loss tokens and no advantage
    out, n_pad = take_rows(batch, torch.tensor([1]), multiple=3)
    assert n_pad == 2 and out["completion_ids"].shape[0] == 3
    assert out["completion_mask"][1:].sum() == 0 and out["advantages"][1:].abs().sum() == 0
    # another process kept more rows: pad up to its count (collectives need equal sizes on every process)
    out, n_pad = take_rows(batch, torch.tensor([1]), multiple=2, min_rows=4)
    assert n_pad == 3 and out["completion_ids"].shape[0] == 4 and out["completion_mask"][1:].sum() == 0
    out, n_pad = take_rows(batch, torch.tensor([], dtype=torch.long), multiple=2, min_rows=2)
    assert n_pad == 2 and out["completion_mask"].sum() == 0
    with pytest.raises(ValueError, match="min_rows"):
        take_rows(batch, rows, multiple=2, min_rows=3)
    with pytest.raises(ValueError, match="multimodal"):
        take_rows({**batch, "pixel_values": torch.zeros(4, 3)}, rows)


# ------------------------------------------------------------------------------------ TRL PR #7242 semantics
def _pr_rule(rewards: torch.Tensor, strategy: str, top_p: float, top_k: int, include_zero: bool, eps: float):
    """The selection rule of TRL PR #7242 as its description states it, as a plain loop (kept group set)."""
    p = rewards.shape[0]
    # The sample variances (ddof 1) as floats, computed once, so both rules rank the same numbers: float rounding
    # can make two equal variances differ in the last bit, and this test is about the selection rule.
    var = reward_variance(rewards, ddof=1).tolist()
    order = sorted(range(p), key=lambda i: (-var[i], i))  # stable: ties by lower index
    if not include_zero:
        order = [i for i in order if var[i] > 0]
    if strategy == "top_k":
        return set(order[:top_k])
    target, total, kept = top_p * sum(var) - eps, 0.0, set()
    if target <= 0:
        return kept
    for i in order:
        kept.add(i)
        total += var[i]
        if total >= target:
            break
    return kept


def test_filter_matches_pr7242_where_the_rules_agree():
    rng = random.Random(0)
    compared = 0
    for _ in range(400):
        p, g = rng.randint(1, 6), rng.randint(2, 5)
        rewards = torch.tensor([[float(rng.choice([0, 0, 1, 2])) for _ in range(g)] for _ in range(p)])
        include_zero, eps = rng.random() < 0.5, rng.choice([0.0, 0.01])
        var_total = float(filter_groups(rewards).scores.sum())
        if var_total == 0:  # documented difference: an all-zero batch keeps nothing here under every strategy
            continue
        top_p, top_k = rng.choice([0.5, 0.9, 1.0]), rng.randint(1, p)
        if 0 < top_p * var_total <= eps:  # documented difference (never hit by these integer rewards)
            continue
        ours = filter_groups(rewards, "top_p", top_p, include_zero=include_zero, eps=eps)
        assert set(ours.kept.tolist()) == _pr_rule(rewards, "top_p", top_p, top_k, include_zero, eps)
        ours = filter_groups(rewards, "top_k_abs", top_k, include_zero=include_zero, eps=eps)
        assert set(ours.kept.tolist()) == _pr_rule(rewards, "top_k", top_p, top_k, include_zero, eps)
        compared += 1
    assert compared > 200
    # The documented differences, pinned: all-zero batch; NaN reward (the group is never kept, counted).
    zero = torch.zeros(3, 4)
    assert _pr_rule(zero, "top_k", 0.9, 2, True, 0.0) == {0, 1} and filter_groups(zero, "top_k_abs", 2).empty
    nan = torch.tensor([[0.0, float("nan"), 1.0, 1.0], [0.0, 1.0, 0.0, 1.0]])
    res = filter_groups(nan, "top_k_abs", 2)
    assert res.kept.tolist() == [1] and res.as_metrics()["filter/nan_groups"] == 1.0


# ------------------------------------------------------------------------------------------------ env adapter
def test_environment_adapter_plays_a_seeded_episode():
    from transformers.utils import get_json_schema

    from ragen_core.integrations.trl.env import RagenEnvironment, ragen_environment_factory, seed_dataset

    factory = ragen_environment_factory("ragen/Sokoban-v0")
    a, b = factory(), factory()
    first = a.reset(prompt=[{"role": "user", "content": ""}], seed=10000)
    assert first == b.reset(seed=10000) and "State:" in first and "`act`" in first
    assert a.get_reward() == pytest.approx(-0.1)  # no turn taken: the format penalty
    out = a.act("Up || Left")
    assert out.startswith("Reward: ")
    reward = float(out.split("\n")[0].split(": ")[1])
    assert a.get_reward() == pytest.approx(reward)
    assert a.act("<answer>Dance</answer>").startswith("Reward: -0.1")  # unknown action: the env's penalty
    # TRL exposes every public function of the class as a tool: exactly `act`, with a valid schema.
    public = {n for n, _ in inspect.getmembers(RagenEnvironment, inspect.isfunction) if not n.startswith("_")}
    assert public == {"reset", "act", "get_reward"}
    schema = get_json_schema(a.act)
    assert schema["function"]["name"] == "act" and "answer" in schema["function"]["parameters"]["properties"]
    with pytest.raises(ValueError, match="integer 'seed' column"):
        a.reset(prompt="x")
    with pytest.raises(ValueError, match="ragen/"):
        ragen_environment_factory("CartPole-v1")
    ds = seed_dataset(3)
    assert ds["seed"] == [10000, 10001, 10002] and ds[0]["prompt"][0]["role"] == "user"


# ------------------------------------------------------------------------------------------------ training
PROMPTS = ("Turn 1: State", "Up", "You have 10 actions left.")
# Rewards per prompt, by order of completion within the group. Sample variances 1/3, 1, 0: top_k_abs=1 keeps the
# second group only; the first is dropped although its advantages are non-zero.
PATTERNS = {PROMPTS[0]: [0.0, 1.0, 0.0, 1.0], PROMPTS[1]: [0.0, 0.0, 0.0, 2.0], PROMPTS[2]: [1.0, 1.0, 1.0, 1.0]}
G = 4


class _Recorder:
    """Reward function (the fixed patterns) that records every scored row, plus a callback capturing, per step,
    the model before the step and the gradient at the optimizer step."""

    __name__ = "pattern_reward"

    def __init__(self, patterns):
        self.patterns = patterns
        self.calls: list[list[tuple[str, list[int], float]]] = []
        self.before: list[dict] = []
        self.grads: list[dict] = []

    def __call__(self, prompts, completions, completion_ids, **kwargs):
        seen: dict[str, int] = {}
        rows = []
        for prompt, ids in zip(prompts, completion_ids):
            k = seen.get(prompt, 0)
            seen[prompt] = k + 1
            rows.append((prompt, list(ids), self.patterns[prompt][k]))
        self.calls.append(rows)
        return [r for _, _, r in rows]

    def callback(self):
        from transformers import TrainerCallback

        rec = self

        class Capture(TrainerCallback):
            def on_step_begin(self, args, state, control, model=None, **kw):
                rec.before.append(copy.deepcopy(model.state_dict()))

            def on_pre_optimizer_step(self, args, state, control, model=None, **kw):
                rec.grads.append({n: None if p.grad is None else p.grad.detach().clone()
                                  for n, p in model.named_parameters()})

        return Capture()


def _train(model_dir, tmp_path, patterns, steps, **config):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ragen_core.integrations.trl import RagenGRPOConfig, RagenGRPOTrainer

    torch.manual_seed(0)
    rec = _Recorder(patterns)
    args = RagenGRPOConfig(
        output_dir=str(tmp_path), per_device_train_batch_size=len(PROMPTS) * G, num_generations=G,
        max_completion_length=6, max_steps=steps, learning_rate=5e-2, logging_steps=1, save_strategy="no",
        report_to="none", use_cpu=True, seed=0, shuffle_dataset=False, max_grad_norm=1e9, disable_tqdm=True,
        dataloader_num_workers=0, bf16=False, **config,  # fp32: the gradient is compared at 1e-4
    )
    tok = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    trainer = RagenGRPOTrainer(model=model, reward_funcs=rec, args=args, processing_class=tok,
                               train_dataset=Dataset.from_dict({"prompt": list(PROMPTS)}), callbacks=[rec.callback()])
    trainer.train()
    return trainer, rec, tok


def _independent_grad(model_dir, state, tok, rows, names):
    """GRPO/DAPO gradient at ratio 1 from a plain per-row forward pass:
    grad = -(1 / sum_i |z_i|) * sum_i A_i * sum_t grad log p(z_it | x_i, z_i,<t),  A_i = (r_i - mean_g) / (std_g + 1e-4)
    over the given rows (prompt, completion ids, reward), advantages computed per prompt group."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.load_state_dict(state)
    model.train()
    by_prompt: dict[str, list[float]] = {}
    for prompt, _, r in rows:
        by_prompt.setdefault(prompt, []).append(r)
    stats = {p: (torch.tensor(v).mean(), torch.tensor(v).std()) for p, v in by_prompt.items()}
    n_tokens = sum(len(ids) for _, ids, _ in rows)
    model.zero_grad()
    for prompt, ids, r in rows:
        mean, std = stats[prompt]
        adv = float((r - mean) / (std + 1e-4))
        x = tok(text=[prompt])["input_ids"][0]
        seq = torch.tensor([x + ids])
        logp = torch.log_softmax(model(input_ids=seq).logits[0, len(x) - 1:-1], dim=-1)
        token_logp = logp.gather(1, torch.tensor(ids)[:, None]).sum()
        (-adv * token_logp / n_tokens).backward()
    return torch.cat([dict(model.named_parameters())[n].grad.reshape(-1) for n in names])


def _flat(grads, names):
    return torch.cat([grads[n].reshape(-1) for n in names])


def _close(a, b):
    return bool((a - b).abs().max() <= 1e-4 * max(a.abs().max(), b.abs().max()) + 1e-7)


@pytest.fixture(scope="module")
def trl_model_dir(make_tiny_model):
    return make_tiny_model(*PROMPTS)


def test_filtered_groups_do_not_contribute_to_the_gradient(trl_model_dir, tmp_path):
    trainer, rec, tok = _train(trl_model_dir, tmp_path / "f", PATTERNS, steps=2, rv_filter="top_k_abs",
                               rv_filter_value=1, mi_every=1)
    names = [n for n, p in trainer.model.named_parameters() if p.requires_grad]
    assert len(rec.calls) == 2 and len(rec.grads) == 2
    for step in range(2):
        rows = rec.calls[step]
        kept = [row for row in rows if row[0] == PROMPTS[1]]
        assert len(rows) == len(PROMPTS) * G and len(kept) == G
        got = _flat(rec.grads[step], names)
        want = _independent_grad(trl_model_dir, rec.before[step], tok, kept, names)
        every = _independent_grad(trl_model_dir, rec.before[step], tok, rows, names)
        assert float(got.abs().max()) > 0
        assert _close(got, want), f"step {step}: the trainer's gradient is not the kept-groups gradient"
        # The dropped first group has non-zero advantages: had it contributed, the gradient would differ.
        assert not _close(want, every)
    history = {k: v for entry in trainer.state.log_history for k, v in entry.items()}
    assert history["filter/kept_groups"] == 1.0 and history["filter/kept_rows"] == G
    assert history["filter/empty"] == 0.0 and history["filter/rv_mean"] == pytest.approx((1 / 3 + 1) / 3)
    assert math.isfinite(history["collapse/mi_est"]) and 0 <= history["collapse/retrieval_acc"] <= 1
    assert math.isfinite(history["collapse/mi_zscore_ema"])

    # Control without the filter: the same independent path reproduces TRL's all-rows gradient, so the check above
    # compares like with like and would fail if the dropped rows were in the loss.
    trainer, rec, tok = _train(trl_model_dir, tmp_path / "c", PATTERNS, steps=1)
    got = _flat(rec.grads[0], names)
    assert _close(got, _independent_grad(trl_model_dir, rec.before[0], tok, rec.calls[0], names))


def test_all_zero_batch_skips_the_update(trl_model_dir, tmp_path):
    flat = {p: [1.0] * G for p in PROMPTS}
    trainer, rec, _ = _train(trl_model_dir, tmp_path / "z", flat, steps=1, rv_filter="top_p", rv_filter_value=0.9)
    assert trainer.last_filter_result.empty
    assert all(g is None for g in rec.grads[0].values())  # no backward ran
    after = trainer.model.state_dict()
    assert all(torch.equal(after[k], v) for k, v in rec.before[0].items())
    history = {k: v for entry in trainer.state.log_history for k, v in entry.items()}
    assert history["filter/empty"] == 1.0 and history["filter/kept_rows"] == 0.0


def test_config_rejects_bad_filter_settings(tmp_path):
    from ragen_core.integrations.trl import RagenGRPOConfig, RagenGRPOTrainer

    common = dict(output_dir=str(tmp_path), report_to="none", use_cpu=True, num_generations=2,
                  per_device_train_batch_size=2)
    with pytest.raises(ValueError, match="^rv_filter must be one of"):
        RagenGRPOConfig(rv_filter="top_q", **common)
    with pytest.raises(ValueError, match=r"^rv_filter_value must be in \(0, 1\]"):
        RagenGRPOConfig(rv_filter="top_p", rv_filter_value=1.5, **common)
    with pytest.raises(ValueError, match="^rv_filter_ddof needs G > ddof"):
        RagenGRPOConfig(rv_filter="top_p", rv_filter_ddof=2, **common)
    with pytest.raises(ValueError, match="mi_every"):
        RagenGRPOConfig(mi_every=-1, **common)
    with pytest.raises(TypeError, match="RagenGRPOConfig"):
        RagenGRPOTrainer(model="unused", reward_funcs=[], args=None)


def test_environment_factory_runs_through_grpo_trainer(trl_model_dir, tmp_path):
    """TRL accepts the adapter: `act` becomes the one tool, `get_reward` a reward column, and a step runs (the
    untrained model calls no tool, so every rollout gets the format penalty: an all-zero batch, skipped)."""
    import trl
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ragen_core.integrations.trl import RagenGRPOConfig, RagenGRPOTrainer, ragen_environment_factory, seed_dataset

    tok = AutoTokenizer.from_pretrained(trl_model_dir, padding_side="left")
    # The tiny model's template has no tool calling; TRL's own Qwen2.5 template does.
    with open(os.path.join(os.path.dirname(trl.__file__), "chat_templates", "qwen2_5.jinja")) as f:
        tok.chat_template = f.read()
    args = RagenGRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=2,
                           max_completion_length=8, max_steps=1, report_to="none", use_cpu=True, bf16=False,
                           save_strategy="no", rv_filter="top_p", max_tool_calling_iterations=2, disable_tqdm=True)
    trainer = RagenGRPOTrainer(model=AutoModelForCausalLM.from_pretrained(trl_model_dir), args=args,
                               processing_class=tok, train_dataset=seed_dataset(4),
                               environment_factory=ragen_environment_factory("ragen/Sokoban-v0"))
    assert [t.__name__ for t in trainer.tools] == ["act"] and trainer.reward_func_names == ["RagenEnvironment"]
    trainer.train()
    assert trainer.last_filter_result.empty


# ------------------------------------------------------------------------------------------------ single-turn path
def test_single_turn_dataset_is_the_trainers_first_prompt(make_tiny_policy):
    """The TRL dataset's prompt, rendered by the chat template, is token for token the prompt `rollout` sends."""
    from ragen_core.integrations.trl import single_turn_dataset
    from ragen_core.rollout import RolloutSettings, make_envs, rollout

    kwargs = {"max_solution_len": 1, "max_actions_per_turn": 1, "obs_format": "coord"}
    seeds = [10000, 10001, 10002]
    for system_prompt in (False, True):
        settings = RolloutSettings(max_turns=1, max_new_tokens=8, system_prompt=system_prompt)
        policy = make_tiny_policy("Player", "Boxes", "Targets")
        batch = rollout(policy, make_envs("ragen/Sokoban-v0", len(seeds), kwargs), seeds, 1, settings,
                        generator=torch.Generator().manual_seed(0))
        rows = single_turn_dataset("ragen/Sokoban-v0", seeds, kwargs, settings=settings)
        assert rows["seed"] == seeds
        for row, traj in zip(rows, batch.trajectories):
            assert policy.encode_chat(row["prompt"], add_generation_prompt=True) == traj.turns[0].prompt_ids
            assert (row["prompt"][0]["role"] == "system") == system_prompt
    with pytest.raises(ValueError, match="non-negative"):
        single_turn_dataset("ragen/Sokoban-v0", [])


def test_env_reward_plays_each_completion_as_one_turn():
    import gymnasium as gym

    import ragen_envs  # noqa: F401
    from ragen_core.integrations.trl import EnvReward

    g = 4
    reward = EnvReward("ragen/Bandit-v0", {"high_prob": 0.5}, group_size=g, per_rollout_option="payoff_seed")
    env = gym.make("ragen/Bandit-v0", high_prob=0.5).unwrapped
    seeds = [7] * g + [8] * g
    answers = []
    for seed in (7, 8):
        env.reset(seed=seed)
        # The better (risky) arm: it pays 1 or 0 by the payoff seed, so the rollouts of a group differ.
        answers += [f"<think>x</think> <answer>{env.oracle()[0]}</answer>"] * (g - 1)
        answers.append("no answer at all")  # malformed: the format penalty
    completions = [[{"role": "assistant", "content": a}] for a in answers]
    got = reward([None] * len(answers), completions, seed=seeds)
    # Reference: a fresh env per row, reset with the row's seed and payoff seed s * G + k, stepped once.
    want = []
    for i, (seed, text) in enumerate(zip(seeds, answers)):
        ref = gym.make("ragen/Bandit-v0", high_prob=0.5)
        ref.reset(seed=seed, options={"payoff_seed": seed * g + i % g})
        want.append(float(ref.step(text)[1]))
    assert got == pytest.approx(want)
    assert got[g - 1] == pytest.approx(-0.1) and got[-1] == pytest.approx(-0.1)
    assert len(set(want[: g - 1] + want[g: 2 * g - 1])) == 2  # distinct payoff seeds: both payoffs occur
    assert len(reward.last_success) == len(answers)
    # Plain-string completions (TRL's standard format) are the same text.
    assert reward([None] * len(answers), answers, seed=seeds) == pytest.approx(want)
    with pytest.raises(ValueError, match="'seed' column"):
        reward([None], ["x"])
    with pytest.raises(ValueError, match="group_size"):
        EnvReward("ragen/Bandit-v0", per_rollout_option="payoff_seed")


def test_stop_at_makes_answer_close_an_eos_for_trl(trl_model_dir, tmp_path):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ragen_core.integrations.trl import RagenGRPOConfig, RagenGRPOTrainer, stop_at

    tok = AutoTokenizer.from_pretrained(trl_model_dir, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(trl_model_dir)
    close = tok("</answer>", add_special_tokens=False)["input_ids"]
    assert len(close) == 1
    eos = stop_at(model, tok)
    assert eos[-1] == close[0] and tok.eos_token_id in eos
    assert stop_at(model, tok) == eos  # idempotent
    args = RagenGRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=2,
                           max_completion_length=4, max_steps=1, report_to="none", use_cpu=True, bf16=False,
                           save_strategy="no", disable_tqdm=True)
    trainer = RagenGRPOTrainer(model=model, reward_funcs=lambda completions, **kw: [0.0] * len(completions),
                               args=args, processing_class=tok, train_dataset=Dataset.from_dict({"prompt": ["Up"]}))
    # TRL reads its EOS ids (generation stop and completion mask) from the model's generation config.
    assert close[0] in trainer.eos_token_ids
    with pytest.raises(ValueError, match="tokens for this tokenizer"):
        stop_at(model, tok, ["Push now and stop"])


@pytest.mark.slow
def test_filtering_under_ddp_on_two_processes(trl_model_dir, tmp_path):
    """Two CPU processes (torchrun, gloo): the kept group's rows all sit on rank 1, rank 0 keeps none. Both
    ranks must still run the same collectives (TRL gathers per-row statistics in its loss: the adapter pads every
    rank to the same row count), and the all-reduced gradient must be the kept group's gradient."""
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    worker = os.path.join(os.path.dirname(__file__), "_trl_ddp_worker.py")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TRL_EXPERIMENTAL_SILENCE": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(port), worker, str(trl_model_dir), str(tmp_path)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in (0, 1)]
    assert [r["world_size"] for r in ranks] == [2, 2]
    rows = ranks[0]["rows"] + ranks[1]["rows"]
    assert len(rows) == len(PROMPTS) * G
    kept_prompt = PROMPTS[2]  # the largest reward variance (worker's PATTERNS)
    assert all(p != kept_prompt for p, _, _ in ranks[0]["rows"])  # rank 0 holds no kept row
    assert [r["kept_groups"] for r in ranks] == [[2], [2]]
    assert math.isfinite(ranks[0]["logged"]["collapse/mi_est"])  # cross-scoring ran on both ranks alike
    assert ranks[0]["logged"]["filter/kept_rows"] == G
    tok = __import__("transformers").AutoTokenizer.from_pretrained(trl_model_dir, padding_side="left")
    names = [n for n, g in ranks[0]["grad"].items() if g is not None]
    g0, g1 = _flat(ranks[0]["grad"], names), _flat(ranks[1]["grad"], names)
    assert torch.allclose(g0, g1)  # DDP synchronised the ranks
    kept = [row for row in rows if row[0] == kept_prompt]
    want = _independent_grad(trl_model_dir, ranks[0]["before"], tok, kept, names)
    every = _independent_grad(trl_model_dir, ranks[0]["before"], tok, rows, names)
    assert float(g0.abs().max()) > 0
    assert _close(g0, want), "the all-reduced gradient is not the kept group's gradient"
    assert not _close(want, every)


TOOL_CALL = '<tool_call>\n{"name": "act", "arguments": {"answer": "Up"}}\n</tool_call>'


@pytest.mark.slow
def test_environment_factory_plays_env_turns_through_tool_calls(make_tiny_model, tmp_path):
    """Multi-turn through TRL's tool loop: a tiny model taught to answer with the tool call act("Up") has its call
    parsed by TRL, the env stepped by the adapter, the observation appended with tool_mask 0, and a next turn
    generated; the env's return is the return of replaying the executed actions."""
    import gymnasium as gym
    import trl
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer

    import ragen_envs  # noqa: F401
    from ragen_core.integrations.trl import RagenGRPOConfig, RagenGRPOTrainer, ragen_environment_factory, seed_dataset

    torch.manual_seed(0)
    model_dir = make_tiny_model(TOOL_CALL, "Turn 1: State", hidden=128)
    tok = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
    with open(os.path.join(os.path.dirname(trl.__file__), "chat_templates", "qwen2_5.jinja")) as f:
        tok.chat_template = f.read()
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    args = RagenGRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=2, num_generations=2,
                           max_completion_length=240, max_steps=1, report_to="none", use_cpu=True, bf16=False,
                           save_strategy="no", max_tool_calling_iterations=2, disable_tqdm=True, temperature=0.01,
                           gradient_checkpointing=False)
    data = seed_dataset(2)
    trainer = RagenGRPOTrainer(model=model, args=args, processing_class=tok, train_dataset=data,
                               environment_factory=ragen_environment_factory("ragen/Sokoban-v0"))
    rows = [data[0], data[0]]
    model.train()
    first = GRPOTrainer._generate_and_score_completions(trainer, rows)
    # Teach the call by teacher forcing on TRL's own first-turn prompt (the untrained model calls nothing).
    prompt = first["prompt_ids"][0][first["prompt_mask"][0].bool()].tolist()
    target = tok(TOOL_CALL + tok.eos_token, add_special_tokens=False)["input_ids"]
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(150):
        logits = model(input_ids=torch.tensor([prompt + target])).logits[0, len(prompt) - 1:-1]
        loss = torch.nn.functional.cross_entropy(logits, torch.tensor(target))
        opt.zero_grad()
        loss.backward()
        opt.step()

    out = GRPOTrainer._generate_and_score_completions(trainer, rows)
    assert out.get("tool_mask") is not None
    for i, env in enumerate(trainer.environments):
        ids, mask = out["completion_ids"][i], out["completion_mask"][i].bool()
        tool = out["tool_mask"][i].bool()
        assert env.episode_turns >= 1, tok.decode(ids[mask])
        env_text = tok.decode(ids[mask & ~tool])
        model_text = tok.decode(ids[mask & tool])
        assert "<tool_response>" in env_text and "Turn 2:" in env_text  # the observation, not trained on
        assert "Turn 2:" not in model_text and model_text.startswith(TOOL_CALL)
        # a model turn follows the observation: some trained tokens come after the first untrained one
        first_env = int((mask & ~tool).nonzero()[0])
        assert bool((mask & tool)[first_env:].any())
        replay = gym.make("ragen/Sokoban-v0", action_format="answer")
        replay.reset(seed=int(data[0]["seed"]))
        want = sum(float(replay.step("<answer>Up</answer>")[1]) for _ in range(env.episode_turns))
        assert env.get_reward() == pytest.approx(want)
