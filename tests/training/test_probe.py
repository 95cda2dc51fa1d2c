"""The held-out MI probe (ragen_core.training.probe): its estimator against an exact MI, its prompts, its place in
training."""

from __future__ import annotations

import math

import pytest
import torch

transformers = pytest.importorskip("transformers")

from stand_in_envs import ValueEnv, register  # noqa: E402

from ragen_core.math.mi import cross_score, mi_proxies  # noqa: E402
from ragen_core.policy import HFPolicy  # noqa: E402
from ragen_core.rollout import RolloutSettings  # noqa: E402
from ragen_core.training.config import ConfigError, load_config  # noqa: E402
from ragen_core.training.probe import build_probe, cadence_due, probe_due  # noqa: E402
from ragen_core.training.trainer import Trainer  # noqa: E402

ENV_ID = "test/Levels-v0"


class LevelsEnv(ValueEnv):
    """One-turn stand-in env: the observation is a level number in [0, n_levels); reward 1 for an even-length
    answer, so group rewards vary."""

    INSTRUCTIONS = "Say anything."

    def _execute(self, action):
        return (1.0 if len(action) % 2 == 0 else 0.0), True


register(ENV_ID, LevelsEnv)


# ------------------------------------------------------------------------------------------------------------
# The estimator the probe uses (cross_score + mi_proxies) against the exact MI of a small tabular channel
# ------------------------------------------------------------------------------------------------------------

VOCAB = 23


def _tiny_lm() -> torch.nn.Module:
    cfg = transformers.Qwen2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64)
    with torch.random.fork_rng():
        torch.manual_seed(1)
        model = transformers.Qwen2ForCausalLM(cfg).eval()
        with torch.no_grad():  # sharpen the output so the channel carries a clear amount of information
            model.lm_head.weight.mul_(8.0)
    return model


def test_probe_estimator_is_unbiased_for_the_exact_mi_of_a_tabular_channel():
    # One-token traces: p(z | x_j) is the model's next-token distribution after prompt j, a [P, V] table, so
    # I_P = sum_j (1/P) KL(p(.|x_j) || mean_j p(.|x_j)) is exact by enumeration, and with the scorer equal to the
    # sampler E[MI-Seq-Est] = I_P (docs/science.md section 2).
    model = _tiny_lm()
    prompts = [torch.tensor(x) for x in ([1, 2, 3], [4, 5], [6, 7, 8, 9], [10, 11, 12])]
    with torch.no_grad():
        table = torch.stack([torch.softmax(model(p[None]).logits[0, -1].double(), -1) for p in prompts])  # [P, V]
    marginal = table.mean(0)
    exact = float((table * (table.log() - marginal.log())).sum(1).mean())
    assert exact > 0.2  # a channel with real input dependence
    g = 600
    gen = torch.Generator().manual_seed(0)
    traces = [[[int(t)] for t in torch.multinomial(table[i].float(), g, replacement=True, generator=gen)]
              for i in range(len(prompts))]
    L, lengths = cross_score(model, prompts, traces, return_lengths=True)
    stats = mi_proxies(L, lengths)
    # per-trace terms and their standard error, as an independent plain-loop restatement of the estimator
    terms = [float(L[i, k, i] - (torch.logsumexp(L[i, k], 0) - math.log(len(prompts))))
             for i in range(len(prompts)) for k in range(g)]
    mean = sum(terms) / len(terms)
    se = math.sqrt(sum((t - mean) ** 2 for t in terms) / (len(terms) - 1) / len(terms))
    assert stats["mi_seq_est"] == pytest.approx(mean, abs=1e-9)
    assert abs(mean - exact) < 4 * se, (mean, exact, se)
    assert stats["mi_seq_est"] <= stats["mi_upper_bound"]


# ------------------------------------------------------------------------------------------------------------
# Probe prompts
# ------------------------------------------------------------------------------------------------------------


def test_probe_prompts_are_distinct_and_repeatable():
    settings = RolloutSettings(max_turns=1, system_prompt=False)
    a = build_probe(ENV_ID, {"n_levels": 40}, 16, 2, 5000, settings)
    b = build_probe(ENV_ID, {"n_levels": 40}, 16, 2, 5000, settings)
    assert a.seeds == b.seeds and len(a.seeds) == 16 and len(a.envs) == 32
    values = []
    env = a.envs[0]
    for s in a.seeds:
        env.reset(seed=s)
        values.append(env.unwrapped.value)
    assert len(set(values)) == 16  # duplicated levels were skipped


def test_too_few_distinct_levels_is_a_clear_error():
    with pytest.raises(ValueError, match="only 3 distinct levels"):
        build_probe(ENV_ID, {"n_levels": 3}, 8, 2, 5000, RolloutSettings(max_turns=1))


# ------------------------------------------------------------------------------------------------------------
# In training
# ------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model_dir(make_tiny_model):
    return make_tiny_model("value 12 Say anything. go")


def _cfg(*overrides: str):
    base = [f"env.id={ENV_ID}", "rollout.groups=3", "rollout.group_size=2", "rollout.max_turns=1",
            "rollout.max_new_tokens=6", "rollout.system_prompt=false", "run.steps=2", "run.progress=false",
            "algo.name=grpo", "algo.lr=1e-3", "algo.mini_batch_size=8", "algo.micro_batch_size=4",
            "eval.episodes=4", "eval.every=2", "mi.every=1", "run.seed=5"]
    return load_config(None, base + list(overrides))


def _fit(model_dir, run_dir, *overrides):
    return Trainer(_cfg(*overrides), run_dir, policy=HFPolicy.from_pretrained(model_dir)).fit()


def test_probe_logs_at_step_0_and_every_k_with_chance_and_ceiling_and_leaves_training_unchanged(model_dir, tmp_path):
    on = _fit(model_dir, tmp_path / "on", "mi.probe_prompts=6", "mi.probe_group_size=2", "mi.probe_every=2")
    off = _fit(model_dir, tmp_path / "off")
    probe_rows = [r for r in on if "probe/retrieval_acc" in r]
    assert [r["step"] for r in probe_rows] == [0, 2]
    first = probe_rows[0]
    assert first["probe/n_prompts"] == 6 and first["probe/group_size"] == 2
    assert first["probe/retrieval_chance"] == pytest.approx(1 / 6)
    assert first["probe/recall_at_2_chance"] == pytest.approx(2 / 6)
    assert first["probe/mi_upper_bound"] == pytest.approx(math.log(6))
    acc, chance = first["probe/retrieval_acc"], first["probe/retrieval_chance"]
    assert first["probe/retrieval_margin"] == pytest.approx((acc - chance) / (1 - chance))
    assert first["probe/token_entropy"] > 0 and first["perf/probe_s"] >= 0
    # the probe samples from its own generator: the training run is the same with and without it
    keys = ("rollout/return", "loss/policy", "filter/rv_mean")
    train_on = [{k: r.get(k) for k in keys} for r in on if "rollout/return" in r]
    train_off = [{k: r.get(k) for k in keys} for r in off if "rollout/return" in r]
    assert train_on == train_off
    summary = (tmp_path / "on" / "summary.md").read_text()
    assert "Held-out MI probe (6 prompts x 2 samples" in summary and "Collapse check" in summary
    assert -1.0 <= first["probe/pmi_return_corr"] <= 1.0
    mean_corr = sum(r["probe/pmi_return_corr"] for r in probe_rows) / len(probe_rows)
    assert f"mean over 2 probe measurements: {mean_corr:+.3f}" in summary
    assert (tmp_path / "on" / "probe.png").is_file()


@pytest.mark.parametrize(("steps", "every", "until", "expected"), [
    (60, 10, 0, [0, 10, 20, 30, 40, 50, 60]),  # no limit: the cadence
    (60, 10, 15, [0, 10, 60]),                  # the study's learning arms: the early window and the end
    (60, 10, 10, [0, 10, 60]),                  # the limit itself is inside the window
    (12, 10, 15, [0, 10, 12]),                  # the end off the cadence is probed with a limit
    (12, 10, 0, [0, 10]),                       # ... and not without one (as before mi.probe_until)
    (3, 1, 100, [0, 1, 2, 3]),                  # a limit past the run changes nothing
])
def test_probe_due_by_hand(steps, every, until, expected):
    assert [s for s in range(steps + 1) if probe_due(s, steps, every, until)] == expected


def test_probe_until_probes_the_early_window_and_the_end_and_leaves_training_unchanged(model_dir, tmp_path):
    probe = ("mi.probe_prompts=4", "mi.probe_group_size=2", "mi.probe_every=2", "run.steps=3", "eval.every=3")
    limited = _fit(model_dir, tmp_path / "limited", *probe, "mi.probe_until=1")
    full = _fit(model_dir, tmp_path / "full", *probe)
    steps = [r["step"] for r in limited if "probe/retrieval_margin" in r]
    assert steps == [0, 3]  # step 2 is past the window; the end (3, off the cadence) is probed
    assert [r["step"] for r in full if "probe/retrieval_margin" in r] == [0, 2]
    # the same probe at the same step measures the same thing, and training is the same
    first = {k: v for k, v in limited[0].items() if k.startswith("probe/")}
    assert first == {k: v for k, v in full[0].items() if k.startswith("probe/")}
    keys = ("rollout/return", "loss/policy", "filter/rv_mean")
    assert [{k: r.get(k) for k in keys} for r in limited if "rollout/return" in r] == [
        {k: r.get(k) for k in keys} for r in full if "rollout/return" in r]


@pytest.mark.parametrize(("step", "every", "until", "due"), [
    (0, 5, 0, True), (5, 5, 0, True), (7, 5, 0, False), (60, 5, 0, True),  # no limit: the cadence
    (10, 5, 10, True), (15, 5, 10, False), (60, 5, 10, False),            # a limit: nothing past it
    (0, 0, 0, False), (5, 0, 10, False),                                   # every 0: never
])
def test_cadence_due_by_hand(step, every, until, due):
    assert cadence_due(step, every, until) is due


def test_mi_and_eval_until_measure_the_window_and_the_end_and_leave_training_unchanged(model_dir, tmp_path):
    timing = ("run.steps=4", "mi.every=1", "eval.every=1")
    limited = _fit(model_dir, tmp_path / "limited", *timing, "mi.until=2", "eval.until=1")
    full = _fit(model_dir, tmp_path / "full", *timing)
    mi_key, val_key = "collapse/mi_zscore_ema", "val/success"
    assert [r["step"] for r in full if mi_key in r] == [1, 2, 3, 4]
    assert [r["step"] for r in limited if mi_key in r] == [1, 2]  # nothing past mi.until
    assert [r["step"] for r in full if val_key in r] == [0, 1, 2, 3, 4]
    assert [r["step"] for r in limited if val_key in r] == [0, 1, 4]  # the window and the run's end
    # the window's measurements are the unlimited run's (the EMA included), and training is the same
    for step in (1, 2):
        lim = next(r for r in limited if r["step"] == step and mi_key in r)
        ful = next(r for r in full if r["step"] == step and mi_key in r)
        assert {k: v for k, v in lim.items() if k.startswith("collapse/")} == {
            k: v for k, v in ful.items() if k.startswith("collapse/")}
    assert [r[val_key] for r in limited if val_key in r] == [r[val_key] for r in full if r["step"] in (0, 1, 4)
                                                              and val_key in r]
    keys = ("rollout/return", "loss/policy", "filter/rv_mean")
    assert [{k: r.get(k) for k in keys} for r in limited if "rollout/return" in r] == [
        {k: r.get(k) for k in keys} for r in full if "rollout/return" in r]


def test_probe_until_measures_the_end_of_a_run_that_stops_early(model_dir, tmp_path):
    # run.max_minutes tiny: the run stops after step 1, off the cadence (every 2): the end is probed all the same
    rows = _fit(model_dir, tmp_path / "stopped", "mi.probe_prompts=4", "mi.probe_group_size=2", "mi.probe_every=2",
                "mi.probe_until=1", "run.steps=3", "run.max_minutes=1e-9")
    assert [r["step"] for r in rows if "probe/retrieval_margin" in r] == [0, 1]
    assert rows[-1]["step"] == 1 and "probe/retrieval_margin" in rows[-1] and "val/success" in rows[-1]


def test_probe_seeds_must_be_held_out(model_dir, tmp_path):
    policy = HFPolicy.from_pretrained(model_dir)
    with pytest.raises(ConfigError, match="mi.probe_seed.*train seed"):  # its candidates reach the train stream
        Trainer(_cfg("mi.probe_prompts=8", "mi.probe_seed=9990"), tmp_path / "a", policy=policy)
    with pytest.raises(ConfigError, match="mi.probe_seed.*validation"):
        Trainer(_cfg("mi.probe_prompts=8", "mi.probe_seed=120"), tmp_path / "b", policy=policy)
    with pytest.raises(ConfigError, match="mi.probe_seed.*warm-start"):
        Trainer(_cfg("mi.probe_prompts=8", "mi.probe_seed=770", "warm_start.sft_episodes=10"), tmp_path / "c",
                policy=policy)
    with pytest.raises(ConfigError, match="mi.probe_prompts"):
        _cfg("mi.probe_prompts=1")
    # the same overlap rule for the warm start against validation (seeds 123..126 here), probe off
    with pytest.raises(ConfigError, match="warm_start.seed.*overlap the validation"):
        Trainer(_cfg("warm_start.seed=120", "warm_start.sft_episodes=10"), tmp_path / "d", policy=policy)
    Trainer(_cfg("warm_start.seed=127", "warm_start.sft_episodes=10", "warm_start.policy=random",
                 "mi.probe_prompts=4", "mi.probe_seed=140"),
            tmp_path / "e", policy=policy)  # adjacent ranges do not overlap (random: this env has no oracle)


def test_pmi_return_association_matches_a_plain_loop_and_reads_the_direction():
    from ragen_core.training.probe import pmi_return_association

    g = torch.Generator().manual_seed(0)
    P, G = 5, 4
    L = torch.randn(P, G, P, generator=g, dtype=torch.float64) * 3
    r = torch.randint(0, 2, (P, G), generator=g).double()
    pmi = [[L[i, k, i].item() - math.log(sum(math.exp(L[i, k, j].item()) for j in range(P)) / P) for k in range(G)]
           for i in range(P)]
    num = den_p = den_r = 0.0
    for i in range(P):
        mp, mr = sum(pmi[i]) / G, sum(r[i].tolist()) / G
        for k in range(G):
            num += (pmi[i][k] - mp) * (r[i, k].item() - mr)
            den_p += (pmi[i][k] - mp) ** 2
            den_r += (r[i, k].item() - mr) ** 2
    cov, corr = pmi_return_association(L, r.flatten())
    assert cov == pytest.approx(num / (P * G), rel=1e-12)
    assert corr == pytest.approx(num / math.sqrt(den_p * den_r), rel=1e-12)
    # direction: in every group the trace that names its prompt (own score high) is the one that pays ...
    L2 = torch.zeros(P, G, P, dtype=torch.float64)
    for i in range(P):
        L2[i, 0, i] = 5.0  # trace 0 of each prompt is input-dependent, the others are a template (flat scores)
    paid_dependent = torch.zeros(P, G, dtype=torch.float64)
    paid_dependent[:, 0] = 1.0
    assert pmi_return_association(L2, paid_dependent)[1] == pytest.approx(1.0)
    # ... or the one that does not pay
    assert pmi_return_association(L2, 1.0 - paid_dependent)[1] == pytest.approx(-1.0)
    # no reward variance within any group: no direction, defined as 0 (not NaN)
    assert pmi_return_association(L2, torch.ones(P, G)) == (0.0, 0.0)
    with pytest.raises(ValueError, match="P, G, P"):
        pmi_return_association(torch.zeros(3, 2, 4), torch.zeros(3, 2))
