"""Trainer: a 2-step smoke test per algorithm, filtering on vs off, empty-step handling, resume equality,
advantages over multi-row trajectories, config errors."""

from __future__ import annotations

import json
import math

import pytest
import torch
from stand_in_envs import ParityEnv, register

from ragen_core.apps.train import main
from ragen_core.policy import HFPolicy
from ragen_core.training.algorithms import ALGORITHMS, compute_advantages, traj_token_view
from ragen_core.training.config import ConfigError, TrainConfig, apply_overrides, dump_toml, load_config
from ragen_core.training.metrics import unknown_keys
from ragen_core.training.trainer import Trainer, select_groups_rows

ENV_ID = "test/Parity-v0"


register(ENV_ID, ParityEnv)


@pytest.fixture(scope="module")
def model_dir(make_tiny_model):
    return make_tiny_model("value 12 Say anything. go")


def make_cfg(*overrides: str) -> TrainConfig:
    base = [f"env.id={ENV_ID}", "rollout.groups=3", "rollout.group_size=4", "rollout.max_turns=2",
            "rollout.max_new_tokens=6", "run.steps=2", "run.progress=false", "run.device=cpu", "algo.lr=1e-3",
            "algo.mini_batch_size=8", "algo.micro_batch_size=4", "eval.episodes=4", "eval.every=2", "mi.every=2",
            "filter.value=0.5"]
    return load_config(None, base + list(overrides))


def train(model_dir, run_dir, *overrides: str, resume: bool = False):
    policy = HFPolicy.from_pretrained(model_dir)
    trainer = Trainer(make_cfg(*overrides), run_dir, policy=policy, resume=resume)
    return trainer, trainer.fit()


@pytest.mark.parametrize("algo", list(ALGORITHMS))
def test_two_step_smoke_per_algorithm(model_dir, tmp_path, algo):
    extra = ["algo.dynamic_sampling=true", "algo.max_refill_rounds=1"] if algo == "dapo" else []
    trainer, history = train(model_dir, tmp_path, f"algo.name={algo}", *extra)
    steps = [r for r in history if r["step"] >= 1 and "rollout/success" in r]
    assert [r["step"] for r in steps] == [1, 2]
    last = steps[-1]
    for key in ("rollout/return", "rollout/format_valid", "rollout/response_length", "filter/kept_fraction",
                "filter/rv_mean", "perf/rollout_s", "perf/step_s", "val/success", "collapse/mi_est",
                "collapse/mi_zscore_ema", "collapse/cond_entropy_est", "collapse/regime", "collapse/regime_resolved",
                "collapse/mi_seq_p_value"):
        assert key in last, key
    p = int(last["collapse/n_prompts"]) if "collapse/n_prompts" in last else None
    assert last["collapse/regime_resolved"] in (0.0, 1.0)
    assert 0 < last["collapse/mi_seq_p_value"] <= 1
    if p is not None and p < 4:  # too few relabellings to tell anything from chance
        assert last["collapse/regime_resolved"] == 0.0 and last["collapse/mi_seq_p_value"] >= 1 / math.factorial(p)
    updated = [r for r in steps if r.get("filter/skipped") == 0.0]
    assert updated, "at least one step must update"
    for r in updated:
        for key in ("loss/policy", "loss/entropy", "loss/grad_norm", "loss/clip_fraction", "collapse/token_entropy"):
            assert key in r and r[key] is not None and r[key] == r[key], key
    assert ("loss/value" in updated[0]) == ALGORITHMS[algo].critic
    assert (trainer.critic is not None) == ALGORITHMS[algo].critic
    assert trainer.loss_agg_mode == {"dr_grpo": "seq-mean-token-sum-norm"}.get(algo, "token-mean")
    assert f"algorithm `{algo}`: {ALGORITHMS[algo].summary}" in (tmp_path / "summary.md").read_text()
    for name in ("config.toml", "metrics.jsonl", "summary.md", "success.png", "entropy_mi.png", "filter.png",
                 "checkpoints/latest.pt"):
        assert (tmp_path / name).is_file(), name
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert lines == history
    assert unknown_keys(history) == set()  # every key is in the metrics schema


def test_filtering_on_vs_off_changes_the_kept_batch(model_dir, tmp_path):
    _, on = train(model_dir, tmp_path / "on", "algo.name=grpo", "filter.value=0.3", "run.seed=3")
    _, off = train(model_dir, tmp_path / "off", "algo.name=grpo", "filter.enabled=false", "run.seed=3")
    on_steps = [r for r in on if "rollout/return" in r]
    off_steps = [r for r in off if "rollout/return" in r]
    # Same seeds and same model: the first rollout batch is identical...
    assert on_steps[0]["rollout/return"] == off_steps[0]["rollout/return"]
    assert on_steps[0]["filter/rv_mean"] == pytest.approx(off_steps[0]["filter/rv_mean"])
    # ...but with filtering fewer groups (and rows, and tokens) reach the update, and the metrics say so.
    assert off_steps[0]["filter/kept_fraction"] == 1.0
    assert on_steps[0]["filter/kept_fraction"] < 1.0
    assert on_steps[0]["filter/rows_kept"] < off_steps[0]["filter/rows_kept"]
    # The same filter/ keys on and off (both steps updated).
    assert {k for k in on_steps[0] if k.startswith("filter/")} == {k for k in off_steps[0] if k.startswith("filter/")}
    assert on_steps[0]["perf/tokens_trained"] < off_steps[0]["perf/tokens_trained"]


def test_select_groups_rows_physically_removes_rows():
    rows = {
        "input_ids": torch.arange(24).reshape(6, 4),
        "attention_mask": torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 1], [1, 0, 0, 0],
                                        [1, 1, 0, 0]]),
        "row_group": torch.tensor([0, 0, 1, 1, 2, 2]),
        "row_traj": torch.tensor([0, 1, 2, 3, 4, 5]),
    }
    out = select_groups_rows(rows, torch.tensor([2, 0]))
    assert out["row_group"].tolist() == [0, 0, 2, 2]  # batch order kept (turn order within a trajectory)
    assert out["input_ids"].shape == (4, 3)  # the column only group 1 used is cut
    assert out["input_ids"][:, 0].tolist() == [0, 4, 16, 20]


def test_empty_batches_are_skipped_and_stop_the_run(model_dir, tmp_path):
    _, history = train(model_dir, tmp_path, "algo.name=grpo", "env.kwargs.constant=true", "run.steps=5",
                       "filter.max_empty_steps=2", "eval.every=0")
    steps = [r for r in history if "rollout/return" in r]
    assert len(steps) == 2  # stopped after 2 consecutive empty steps
    assert all(r["filter/skipped"] == 1.0 and r["filter/kept_fraction"] == 0.0 for r in steps)
    assert steps[-1]["filter/empty_total"] == 2.0 and "loss/policy" not in steps[-1]
    assert "consecutive empty steps" in (tmp_path / "summary.md").read_text()


def test_resume_equals_straight_run(model_dir, tmp_path):
    args = ("algo.name=ppo", "run.steps=4", "mi.every=2", "eval.every=2", "run.seed=5")
    _, straight = train(model_dir, tmp_path / "a", *args)
    train(model_dir, tmp_path / "b", *args, "run.steps=2")
    # Resume with the full step count (as `ragen train --resume DIR run.steps=4` does).
    _, resumed = train(model_dir, tmp_path / "b", *args, resume=True)

    def strip(hist):
        return [{k: v for k, v in r.items() if not k.startswith("perf/")} for r in hist]

    assert len(straight) == len(resumed)
    for a, b in zip(strip(straight), strip(resumed)):
        assert a.keys() == b.keys()
        for k in a:
            if isinstance(a[k], float):
                assert b[k] == pytest.approx(a[k], rel=1e-5, abs=1e-6), (a["step"], k)
            else:
                assert a[k] == b[k], (a["step"], k)


def test_two_runs_of_one_config_checkpoint_the_same_rng_states(model_dir, tmp_path):
    # torch >= 2.13 seeds its global generator at random at start-up; the trainer seeds it from run.seed, so a
    # policy that draws from it (dropout, a user's sampler) repeats too. Drawing in between shows the reseed.
    args = ("algo.name=grpo", "run.steps=1", "mi.every=0", "eval.every=0", "run.seed=7")
    train(model_dir, tmp_path / "a", *args)
    torch.rand(1000)
    train(model_dir, tmp_path / "b", *args)
    first, second = (torch.load(tmp_path / d / "checkpoints" / "latest.pt", weights_only=False)["rng"] for d in "ab")
    for name in ("sample", "update", "filter", "torch"):
        assert torch.equal(first[name], second[name]), name


def test_kl_reference_is_used_when_enabled(model_dir, tmp_path):
    trainer, history = train(model_dir, tmp_path, "algo.name=grpo", "algo.kl_coef=0.1", "filter.enabled=false",
                             "run.steps=1", "eval.every=0", "mi.every=0")
    assert trainer.ref_policy is not None
    step = [r for r in history if "rollout/return" in r][0]
    assert "loss/kl" in step and step["loss/kl"] >= 0  # the reference equals the policy before the update


def test_gae_advantages_over_multi_row_trajectories():
    # Trajectory 0 spans rows 0 and 1 (windowed context), trajectory 1 is row 2.
    loss_mask = torch.tensor([[0, 1, 1, 0], [0, 0, 1, 1], [0, 1, 1, 1]])
    rewards = torch.zeros(3, 4)
    rewards[0, 2] = 0.5  # per-turn reward of turn 1
    rewards[1, 3] = 2.0
    rewards[2, 3] = 1.0
    values = torch.tensor([[0, 0.1, 0.2, 0], [0, 0, 0.3, 0.4], [0, 0.5, 0.6, 0.7]])
    rows = {"loss_mask": loss_mask, "token_rewards": rewards, "row_traj": torch.tensor([0, 0, 1])}
    adv, ret = compute_advantages("ppo", rows, torch.zeros(1, 2), values=values, gamma=0.9, lam=0.8)
    # Reference: plain GAE loop over each trajectory's generated tokens in order ...
    raw: dict[tuple[int, int], float] = {}
    for traj_rows in ([0, 1], [2]):
        r_seq, v_seq, pos = [], [], []
        for r in traj_rows:
            for c in range(4):
                if loss_mask[r, c]:
                    r_seq.append(float(rewards[r, c]))
                    v_seq.append(float(values[r, c]))
                    pos.append((r, c))
        a_next, v_next, expected = 0.0, 0.0, []
        for t in reversed(range(len(r_seq))):
            delta = r_seq[t] + 0.9 * v_next - v_seq[t]
            a_next = delta + 0.9 * 0.8 * a_next
            v_next = v_seq[t]
            expected.append(a_next)
        expected.reverse()
        raw.update(zip(pos, expected))
    # ... then whitened over all generated tokens of the batch (population std), as verl does; returns are not.
    mean = sum(raw.values()) / len(raw)
    std = (sum((a - mean) ** 2 for a in raw.values()) / len(raw)) ** 0.5
    for (r, c), a in raw.items():
        assert float(adv[r, c]) == pytest.approx((a - mean) / std, abs=1e-5)
        assert float(ret[r, c]) == pytest.approx(a + float(values[r, c]), abs=1e-6)
    assert (adv[loss_mask == 0] == 0).all()
    assert float(adv[loss_mask != 0].mean()) == pytest.approx(0.0, abs=1e-6)
    r_idx, c_idx, m, ids = traj_token_view(rows["row_traj"], loss_mask)
    assert ids.tolist() == [0, 1] and m.sum(1).tolist() == [4, 3]


def test_group_advantages_broadcast_to_rows():
    rows = {"loss_mask": torch.tensor([[0, 1], [1, 1], [0, 1], [1, 0]]), "row_traj": torch.tensor([0, 1, 2, 3]),
            "token_rewards": torch.zeros(4, 2)}
    returns = torch.tensor([[1.0, 0.0], [2.0, 2.0]])
    adv, _ = compute_advantages("grpo", rows, returns)
    s = torch.tensor([1.0, 0.0]).std()
    assert adv[0, 1] == pytest.approx(0.5 / (s + 1e-6)) and adv[1, 0] == pytest.approx(-0.5 / (s + 1e-6))
    assert (adv[2:] == 0).all()  # zero-variance group
    adv, _ = compute_advantages("dr_grpo", rows, returns)
    assert adv[0, 1] == pytest.approx(0.5) and adv[0, 0] == 0


def test_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="algo.lrr"):
        apply_overrides(TrainConfig(), ["algo.lrr=1"])
    with pytest.raises(ConfigError, match="unknown config section 'algorithm'"):
        apply_overrides(TrainConfig(), ["algorithm.lr=1"])
    with pytest.raises(ConfigError, match="rollout.groups must be an integer"):
        apply_overrides(TrainConfig(), ["rollout.groups=2.5"])
    with pytest.raises(ConfigError, match="key=value"):
        apply_overrides(TrainConfig(), ["algo.lr"])
    with pytest.raises(ConfigError, match="algo.name"):
        load_config(None, ["algo.name=sac"])
    with pytest.raises(ConfigError, match="filter.value"):
        load_config(None, ["filter.value=0"])
    bad = tmp_path / "bad.toml"
    bad.write_text("[rollout]\ngroup_sise = 4\n")
    with pytest.raises(ConfigError, match="rollout.group_sise"):
        load_config(bad)
    # Round trip of the resolved config, with overrides of every type.
    cfg = load_config(None, ["algo.lr=2e-6", "run.name=x", "filter.enabled=false", "env.kwargs.size=6"])
    f = tmp_path / "c.toml"
    f.write_text(dump_toml(cfg))
    assert load_config(f) == cfg and cfg.algo.lr == 2e-6 and cfg.env.kwargs == {"size": 6}
    # The CLI entry point reports the key and exits with 2.
    assert main([str(bad)]) == 2
    assert main([]) == 2


def test_the_algorithm_table_rejects_what_an_entry_forbids():
    # Dynamic sampling is DAPO's: another algorithm that names it is an error, not a silent no-op.
    with pytest.raises(ConfigError, match=r"algo.dynamic_sampling .* algo.name=grpo .*allowed with: dapo"):
        load_config(None, ["algo.name=grpo", "algo.dynamic_sampling=true"])
    # dr_grpo and dapo fix their loss aggregation: naming another one is an error, not silently overridden.
    with pytest.raises(ConfigError, match="algo.loss_agg_mode is fixed to seq-mean-token-sum-norm"):
        load_config(None, ["algo.name=dr_grpo", "algo.loss_agg_mode=token-mean"])
    with pytest.raises(ConfigError, match="algo.loss_agg_mode is fixed to token-mean by algo.name=dapo"):
        load_config(None, ["algo.name=dapo", "algo.loss_agg_mode=seq-mean-token-mean"])
    with pytest.raises(ConfigError, match="rollout.group_size must be >= 2 for algo.name=rloo"):
        load_config(None, ["algo.name=rloo", "rollout.group_size=1"])
    with pytest.raises(ConfigError, match="algo.loss_agg_mode must be one of"):
        load_config(None, ["algo.loss_agg_mode=mean"])
    # What the entries allow: the fixed mode named explicitly, a free mode for grpo, dapo with dynamic sampling.
    load_config(None, ["algo.name=dr_grpo", "algo.loss_agg_mode=seq-mean-token-sum-norm"])
    load_config(None, ["algo.name=grpo", "algo.loss_agg_mode=seq-mean-token-mean"])
    load_config(None, ["algo.name=dapo", "algo.dynamic_sampling=true"])
    # Every estimator the core offers is accepted (the config imports the core's lists).
    load_config(None, ["algo.kl_estimator=low_var_kl"])


def test_dapo_differs_from_grpo_only_as_its_entry_says():
    grpo, dapo = ALGORITHMS["grpo"], ALGORITHMS["dapo"]
    assert grpo.group_advantage is dapo.group_advantage and not grpo.critic and not dapo.critic
    assert (grpo.fixed_loss_agg, dapo.fixed_loss_agg) == (False, True)
    assert (grpo.dynamic_sampling, dapo.dynamic_sampling) == (False, True)
    cfg = load_config(None, ["algo.name=dapo"])
    assert "dynamic sampling off" in dapo.describe(cfg.algo) and "(fixed)" in dapo.describe(cfg.algo)


def test_rloo_trains_with_leave_one_out_advantages(model_dir, tmp_path):
    trainer, history = train(model_dir, tmp_path, "algo.name=rloo", "filter.enabled=false", "run.steps=1",
                             "eval.every=0", "mi.every=0")
    step = [r for r in history if "rollout/return" in r][0]
    assert step["filter/skipped"] == 0.0 and step["loss/updates"] >= 1 and "loss/value" not in step
    assert trainer.critic is None
    # The advantage is the table entry's: R - mean of the other G - 1 returns, on every generated token.
    rows = {"loss_mask": torch.tensor([[1, 1], [0, 1], [1, 0], [1, 1]]), "row_traj": torch.arange(4),
            "token_rewards": torch.zeros(4, 2)}
    adv, ret = compute_advantages("rloo", rows, torch.tensor([[1.0, 0.0, 0.0, 1.0]]))
    assert ret is None
    assert adv[:, 0].tolist() == pytest.approx([2 / 3, 0.0, -2 / 3, 2 / 3])


def test_shipped_configs_load():
    from pathlib import Path

    configs = sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.toml"))
    assert len(configs) >= 5
    for path in configs:
        load_config(path)


def test_target_kl_stops_a_steps_updates_early(model_dir, tmp_path):
    # Four mini-batches per step, two epochs, a large lr: without the early stop all 8 updates run; with a
    # tiny target the step stops after the first update (the ratio is 1 on the first mini-batch only).
    common = ["algo.name=grpo", "algo.lr=0.05", "algo.epochs=2", "algo.mini_batch_size=3", "algo.micro_batch_size=3",
              "filter.enabled=false", "run.steps=1", "eval.every=0", "mi.every=0", "rollout.context=single_turn"]
    _, free = train(model_dir, tmp_path / "free", *common)
    _, capped = train(model_dir, tmp_path / "capped", *common, "algo.target_kl=1e-9")
    free_step = [r for r in free if "loss/updates" in r][0]
    capped_step = [r for r in capped if "loss/updates" in r][0]
    assert free_step["loss/kl_early_stop"] == 0.0 and free_step["loss/updates"] >= 4
    assert capped_step["loss/kl_early_stop"] == 1.0 and capped_step["loss/updates"] == 1.0


def test_linear_lr_schedule_anneals_policy_and_critic(model_dir, tmp_path):
    # 3 steps at lr 1e-3: CleanRL's annealing gives 1e-3 x (1, 2/3, 1/3); the critic follows the same fraction.
    cfg = make_cfg("algo.name=ppo", "algo.lr=1e-3", "model.critic_lr=3e-3", "algo.lr_schedule=linear",
                   "filter.enabled=false", "run.steps=3", "eval.every=0", "mi.every=0")
    trainer = Trainer(cfg, tmp_path / "run", policy=HFPolicy.from_pretrained(model_dir))
    seen = []
    for _ in range(3):
        row = trainer.train_step()
        seen.append((row["loss/lr"], trainer.optimizer.param_groups[0]["lr"],
                     trainer.critic_optimizer.param_groups[0]["lr"]))
    for (logged, policy_lr, critic_lr), frac in zip(seen, (1.0, 2 / 3, 1 / 3)):
        assert logged == pytest.approx(1e-3 * frac) and policy_lr == pytest.approx(1e-3 * frac)
        assert critic_lr == pytest.approx(3e-3 * frac)


def test_lr_schedule_is_checked():
    with pytest.raises(ConfigError, match="algo.lr_schedule"):
        load_config("configs/sokoban_tiny.toml", ["algo.lr_schedule=cosine"])


def test_trajectory_mean_aggregation_removes_the_net_push(model_dir, tmp_path):
    cfg = make_cfg("algo.name=grpo", "algo.loss_agg_mode=traj-mean-token-mean", "filter.enabled=false",
                   "eval.every=0", "mi.every=0")
    trainer = Trainer(cfg, tmp_path / "run", policy=HFPolicy.from_pretrained(model_dir))
    row = trainer.train_step()
    # Every group is kept whole, so GRPO's zero-mean advantages weigh to zero per trajectory.
    assert row["loss/weighted_advantage_mean"] == pytest.approx(0.0, abs=1e-5)
    assert row["loss/updates"] >= 1
    with pytest.raises(ConfigError, match="algo.loss_agg_mode"):
        make_cfg("algo.name=dr_grpo", "algo.loss_agg_mode=traj-mean-token-mean")


#: The update's numbers on fixed seeds, recorded on the code before `Trainer.update` was split into parts (a
#: refactor must leave them unchanged): per variant, the sum over both steps of every loss/* metric, rounded to 9
#: significant digits, and the sum of the final policy weights. Produced by `_update_fingerprint` below on one
#: torch thread, on transformers' forward with the old-log-prob pass always run (the code they were recorded on):
#: the pins hold exactly there (REFERENCE_PATH), and within float rounding on the lean forward. The loss/ metrics
#: (policy, total, kl, entropy, approx_kl, value) were recorded anew when each mini-batch's value became its
#: micro-batches weighted as the backward weights them (they were an unweighted mean over micro-batches, which moved
#: with algo.micro_batch_size); the update itself did not change: "weights" and every other key kept their pins.
UPDATE_VARIANTS = {
    "ppo": ("algo.name=ppo", "algo.epochs=2"),
    "grpo_kl_early_stop": ("algo.name=grpo", "algo.kl_coef=0.05", "algo.target_kl=0.0001", "algo.epochs=2"),
    "dr_grpo": ("algo.name=dr_grpo",),
    "grpo_traj_mean": ("algo.name=grpo", 'algo.loss_agg_mode="traj-mean-token-mean"', "algo.entropy_coef=0.01"),
}


def _update_fingerprint(model_dir, run_dir, overrides) -> dict[str, str]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        trainer, history = train(model_dir, run_dir, "run.seed=5", "filter.enabled=false", *overrides)
    finally:
        torch.set_num_threads(before)
    sums: dict[str, float] = {}
    for row in history:
        for k, v in row.items():
            if k.startswith("loss/") and v is not None:
                sums[k] = sums.get(k, 0.0) + float(v)
    sums["weights"] = float(sum(p.detach().double().sum() for p in trainer.model.parameters()))
    return {k: f"{v:.9g}" for k, v in sorted(sums.items())}


UPDATE_FINGERPRINTS: dict[str, dict[str, str]] = {
    "ppo": {
        "loss/advantage_mean": "-1.32784659e-07", "loss/advantage_std": "2.00000012",
        "loss/approx_kl": "0.0104622908", "loss/clip_fraction": "0", "loss/critic_grad_norm": "3.86124694",
        "loss/dual_clip_fraction": "0", "loss/entropy": "12.3666418", "loss/grad_norm": "1.98965693",
        "loss/kl_early_stop": "0", "loss/lr": "0.002", "loss/policy": "0.135690946", "loss/total": "0.123324288",
        "loss/updates": "8", "loss/value": "1.85495056", "loss/value_clip_fraction": "0", "weights": "170.983193",
    },
    "grpo_kl_early_stop": {
        "loss/advantage_mean": "0.0150375691", "loss/advantage_std": "1.59650791", "loss/approx_kl": "0.00714417171",
        "loss/clip_fraction": "0", "loss/dual_clip_fraction": "0", "loss/entropy": "12.3668596",
        "loss/grad_norm": "1.45430642", "loss/kl": "0.00118258866", "loss/kl_early_stop": "2", "loss/lr": "0.002",
        "loss/policy": "-0.019378512", "loss/total": "-0.031686259", "loss/updates": "4", "weights": "167.13445",
    },
    "dr_grpo": {
        "loss/advantage_mean": "-0.0206766911", "loss/advantage_std": "1.20451817",
        "loss/approx_kl": "8.90766096e-05", "loss/clip_fraction": "0", "loss/dual_clip_fraction": "0",
        "loss/entropy": "12.3668857", "loss/grad_norm": "1.18044491", "loss/kl_early_stop": "0", "loss/lr": "0.002",
        "loss/policy": "0.073961895", "loss/total": "0.0615950152", "loss/updates": "4", "weights": "167.584002",
    },
    "grpo_traj_mean": {
        "loss/advantage_mean": "-0.0348375506", "loss/advantage_std": "1.7401886", "loss/approx_kl": "4.28237181e-05",
        "loss/clip_fraction": "0", "loss/dual_clip_fraction": "0", "loss/entropy": "12.3668629",
        "loss/grad_norm": "1.75867447", "loss/kl_early_stop": "0", "loss/lr": "0.002", "loss/policy": "0.0850761806",
        "loss/total": "-0.0385924378", "loss/updates": "4", "loss/weighted_advantage_mean": "-1.24487576e-09",
        "weights": "167.548453",
    },
}


#: The code path the pins were recorded on: transformers' forward, the old-log-prob pass always run.
REFERENCE_PATH = ("model.fast_forward=false", "algo.old_logprobs_from_update=false")


@pytest.mark.parametrize("path", ["reference", "default"])
@pytest.mark.parametrize("variant", list(UPDATE_VARIANTS))
def test_update_numbers_are_pinned(model_dir, tmp_path, variant, path):
    """The reference path gives the pinned numbers to the last bits the CPU's BLAS kernels decide: every sum within
    1e-6 relative (the numbers were pinned on one CPU; on another, e.g. AMD against Intel, the same float32
    computation reduces in another order, seen as 6e-7 relative on loss/policy). The default path (the lean
    forward; old log-probs from the update's own forward where that is exact) gives them to float rounding: every
    sum within 1e-5 relative (absolute 1e-6 for sums near 0, such as the approx-KL, which the skipped pass makes
    exactly 0 instead of rounding noise)."""
    reference = path == "reference"
    got = _update_fingerprint(model_dir, tmp_path, (*UPDATE_VARIANTS[variant], *(REFERENCE_PATH if reference else ())))
    pinned = UPDATE_FINGERPRINTS[variant]
    assert set(got) == set(pinned)
    if reference:
        for key, value in pinned.items():
            assert float(got[key]) == pytest.approx(float(value), rel=1e-6, abs=1e-7), key
        return
    for key, value in pinned.items():
        assert float(got[key]) == pytest.approx(float(value), rel=1e-5, abs=1e-6), key


def test_a_run_of_zero_steps_validates_once(model_dir, tmp_path):
    """run.steps=0 (a warm start and its measurements only): the step-0 validation is also the run's last."""
    # With a probe, the probe's row is the last one logged at step 0 (the case that validated twice).
    _, history = train(model_dir, tmp_path, "algo.name=grpo", "run.steps=0", "mi.probe_prompts=2",
                       "mi.probe_group_size=2")
    assert "probe/retrieval_margin" in history[-1]
    assert sum("val/success" in r for r in history) == 1
    lines = (tmp_path / "val_outcomes.jsonl").read_text().splitlines()
    assert len({json.loads(x)["step"] for x in lines}) == 1
