"""The collapse testbed's knobs that let the paper's mechanism act (docs/collapse.md, section 3):

- an answer that follows the reasoning (``warm_start.template_answer = "reference"``);
- regularisers that act alone when no group has reward variance (``filter.empty_step = "regularise"``);
- a dose that is a dose (``algo.optimizer = "sgd"``) and the gradient split into its parts (``algo.grad_parts``);
- the probe's per-token entropy of the template and the state-derived traces.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from stand_in_envs import ParityEnv, register

from ragen_core.policy import HFPolicy
from ragen_core.rollout import make_envs
from ragen_core.training.config import ConfigError, load_config
from ragen_core.training.probe import entropy_by_mode
from ragen_core.training.sft import oracle_response, template_parts
from ragen_core.training.trainer import GradParts, Trainer

ENV_ID = "test/KnobParity-v0"


register(ENV_ID, ParityEnv)


@pytest.fixture(scope="module")
def model_dir(make_tiny_model):
    return make_tiny_model("value 12 Say anything. go")


def make_cfg(*overrides: str):
    base = [f"env.id={ENV_ID}", "rollout.groups=3", "rollout.group_size=4", "rollout.max_turns=2",
            "rollout.max_new_tokens=6", "run.steps=2", "run.progress=false", "run.device=cpu", "algo.lr=1e-2",
            "algo.name=grpo", "algo.mini_batch_size=8", "algo.micro_batch_size=4", "eval.every=0", "mi.every=0",
            "filter.max_empty_steps=0", "algo.grad_clip=0"]
    return load_config(None, base + list(overrides))


def run(model_dir, run_dir, *overrides: str):
    policy = HFPolicy.from_pretrained(model_dir)
    before = [p.detach().clone() for p in policy.model.parameters()]
    trainer = Trainer(make_cfg(*overrides), run_dir, policy=policy)
    history = [r for r in trainer.fit() if "rollout/return" in r]
    moved = math.sqrt(sum(float((p.detach() - b).square().sum())
                          for p, b in zip(policy.model.parameters(), before)))
    return history, moved


# ------------------------------------------------------------------ regularisers that act alone
def test_zero_variance_steps_are_skipped_by_default(model_dir, tmp_path):
    history, moved = run(model_dir, tmp_path, "env.kwargs.constant=true")
    assert [r["filter/skipped"] for r in history] == [1.0, 1.0]
    assert "filter/regulariser_only" not in history[0]  # the default's metrics are as before
    assert moved == 0.0


def test_regularise_trains_every_group_on_the_regularisers_alone(model_dir, tmp_path):
    history, moved = run(model_dir, tmp_path, "env.kwargs.constant=true", "filter.empty_step=regularise",
                         "algo.entropy_coef=0.01")
    assert [r["filter/skipped"] for r in history] == [0.0, 0.0]
    assert [r["filter/regulariser_only"] for r in history] == [1.0, 1.0]
    assert [r["filter/regulariser_only_total"] for r in history] == [1.0, 2.0]
    assert all(r["filter/rows_kept"] == r["filter/rows_total"] for r in history)  # every group trained on
    assert all(r["loss/advantage_mean"] == 0.0 and r["loss/advantage_std"] == 0.0 for r in history)
    assert moved > 0.0  # the entropy bonus moved the weights


def test_regularise_without_a_regulariser_leaves_the_weights(model_dir, tmp_path):
    # The task term is exactly zero on such a step: with no entropy bonus and no KL nothing may move.
    for optimizer in ("adamw", "sgd"):
        history, moved = run(model_dir, tmp_path / optimizer, "env.kwargs.constant=true",
                             "filter.empty_step=regularise", "algo.entropy_coef=0", f"algo.optimizer={optimizer}")
        assert [r["filter/regulariser_only"] for r in history] == [1.0, 1.0]
        assert moved == 0.0, optimizer


def test_regularise_leaves_steps_with_variance_alone(model_dir, tmp_path):
    a, _ = run(model_dir, tmp_path / "a", "run.seed=3")
    b, _ = run(model_dir, tmp_path / "b", "run.seed=3", "filter.empty_step=regularise")
    assert all(r["filter/regulariser_only"] == 0.0 for r in b)
    for ra, rb in zip(a, b):
        for key in ("rollout/return", "filter/kept_groups", "loss/policy", "loss/entropy", "loss/grad_norm"):
            assert ra.get(key) == rb.get(key), key


# ------------------------------------------------------------------ a dose that is a dose
def _one_regulariser_step(model_dir, run_dir, coef: float, optimizer: str) -> dict[str, float]:
    history, _ = run(model_dir, run_dir, "env.kwargs.constant=true", "filter.empty_step=regularise",
                     f"algo.entropy_coef={coef}", f"algo.optimizer={optimizer}", "algo.grad_parts=true",
                     "run.steps=1", "run.seed=5", "algo.mini_batch_size=64",  # one optimiser step
                     "algo.lr=10")  # updates far above float32 rounding of the weights
    return history[0]


def test_sgd_makes_the_entropy_coefficient_a_dose_and_adam_does_not(model_dir, tmp_path):
    sgd = [_one_regulariser_step(model_dir, tmp_path / f"sgd{c}", c, "sgd") for c in (0.001, 0.01)]
    adam = [_one_regulariser_step(model_dir, tmp_path / f"adam{c}", c, "adamw") for c in (0.001, 0.01)]
    for pair in (sgd, adam):  # the same batch: the entropy part's gradient is 10x
        assert pair[1]["loss/grad_norm_entropy"] == pytest.approx(10 * pair[0]["loss/grad_norm_entropy"], rel=1e-4)
        assert pair[0]["loss/grad_norm_task"] == 0.0
    # Plain SGD: the update is lr x gradient, 10x the coefficient is 10x the step.
    assert sgd[1]["loss/update_norm"] == pytest.approx(10 * sgd[0]["loss/update_norm"], rel=1e-3)
    assert sgd[0]["loss/update_norm"] == pytest.approx(10 * sgd[0]["loss/grad_norm_entropy"], rel=1e-3)
    # Adam's first step is about lr x sign(gradient) for every parameter whose gradient is well above adam_eps:
    # 10x the coefficient moves the weights far less than 10x (about 1.6x here, where many of these tiny gradients
    # are near eps = 1e-8).
    assert adam[1]["loss/update_norm"] < 3 * adam[0]["loss/update_norm"]


def test_grad_parts_sum_to_the_joint_gradient():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3))
    x = torch.randn(4, 5)

    def losses():
        out = model(x)
        return out[:, 0].mean(), -0.3 * out.softmax(-1).log().mean(), 0.2 * out[:, 2].square().mean()

    task, ent, kl = losses()
    (0.5 * (task + ent + kl)).backward()
    joint = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    parts = GradParts(model)
    task, ent, kl = losses()
    parts.backward(0.5, task=task, entropy=ent, kl=kl)
    for p, g in zip(model.parameters(), joint):
        assert torch.allclose(p.grad, g, atol=1e-6)
    # Each part's norm against its own backward pass, one part at a time (a plain loop over the parameters).
    norms = parts.norms()
    for name, key in GradParts.NAMES:
        model.zero_grad(set_to_none=True)
        loss = dict(zip(("task", "entropy", "kl"), losses()))[name]
        (0.5 * loss).backward()
        expected = math.sqrt(sum(float(p.grad.square().sum()) for p in model.parameters()))
        assert norms[key] == pytest.approx(expected, rel=1e-5), name


def test_grad_parts_change_no_metric_but_add_the_parts(model_dir, tmp_path):
    off, _ = run(model_dir, tmp_path / "off", "run.seed=4", "run.steps=1")
    on, _ = run(model_dir, tmp_path / "on", "run.seed=4", "run.steps=1", "algo.grad_parts=true")
    assert on[0]["loss/grad_norm"] == pytest.approx(off[0]["loss/grad_norm"], rel=1e-5)
    # Equal to rounding, not bit for bit: the second mini-batch's loss follows an update whose gradient was summed
    # part by part, which rounds differently from one joint backward on some CPUs (seen without AVX-512).
    assert on[0]["loss/policy"] == pytest.approx(off[0]["loss/policy"], rel=1e-5)
    for key in ("loss/grad_norm_task", "loss/grad_norm_entropy", "loss/update_norm"):
        assert key in on[0] and key not in off[0]
    assert "loss/grad_norm_kl" not in on[0]  # KL off


# ------------------------------------------------------------------ an answer that follows the reasoning
_FL = "ragen/FrozenLake-v0"
_FL_KW = {"max_actions_per_turn": 1, "obs_format": "coord", "is_slippery": False}
_WORD_TO_ACTION = {"up": "Up", "down": "Down", "left": "Left", "right": "Right"}


def _answer(response: str) -> list[str]:
    m = re.search(r"<answer>(.*?)</answer>", response)
    assert m, response
    return [a.strip() for a in m.group(1).split("||")]


def _implied(reasoning: str) -> str:
    """The move a FrozenLake reasoning names ("... Moving down goes to ..."), read off the text itself."""
    m = re.search(r"Moving (\w+) goes to", reasoning)
    assert m, reasoning
    return _WORD_TO_ACTION[m.group(1)]


def test_reference_answer_is_the_move_the_template_names():
    family = [template_parts(_FL, _FL_KW, seed=s) for s in range(700, 716)]
    texts, actions = [t for t, _ in family], [a for _, a in family]
    assert len(set(texts)) > 8  # a family, not one text
    env = make_envs(_FL, 1, _FL_KW)[0]
    rng = np.random.default_rng(0)
    seen = set()
    for seed in range(40):
        env.reset(seed=seed)
        response = oracle_response(env, dependence=0.0, template=texts, template_answer="reference",
                                   template_actions=actions, rng=rng, noise=1.0, noise_action="first")
        reasoning = re.search(r"<think>(.*?)</think>", response).group(1).strip()
        assert reasoning in texts
        seen.add(reasoning)
        assert _answer(response) == [_implied(reasoning)]  # the answer follows the written reasoning, never noise
    assert len(seen) > 4


def test_state_reasoning_answers_the_right_move_and_templates_pay_by_chance():
    family = [template_parts(_FL, _FL_KW, seed=s) for s in range(700, 716)]
    texts, actions = [t for t, _ in family], [a for _, a in family]
    env = make_envs(_FL, 1, _FL_KW)[0]
    rng = np.random.default_rng(1)
    agree_template = agree_state = 0
    n = 60
    for seed in range(n):
        env.reset(seed=seed)
        right = env.unwrapped.oracle()
        state = oracle_response(env, dependence=1.0, template=texts, template_answer="reference",
                                template_actions=actions, rng=rng)
        agree_state += _answer(state) == right
        templ = oracle_response(env, dependence=0.0, template=texts, template_answer="reference",
                                template_actions=actions, rng=rng)
        agree_template += _answer(templ) == right
    assert agree_state == n  # reasoning about the state earns the right move
    assert agree_template < 0.7 * n  # a template's move is right only where it happens to coincide


def test_reference_needs_one_action_list_per_template():
    env = make_envs(_FL, 1, _FL_KW)[0]
    env.reset(seed=0)
    with pytest.raises(ValueError, match="template_actions"):
        oracle_response(env, dependence=0.5, template=["a", "b"], template_answer="reference",
                        template_actions=[["Up"]])


# ------------------------------------------------------------------ entropy of the two modes
def test_entropy_by_mode_is_token_weighted_per_mode():
    sums = torch.tensor([1.0, 2.0, 3.0, 10.0], dtype=torch.float64)
    counts = torch.tensor([2.0, 2.0, 4.0, 5.0], dtype=torch.float64)
    is_template = [True, False, True, False]
    has_reasoning = [True, True, True, False]  # the last trace wrote no <think>: in neither mode
    t, s = entropy_by_mode(sums, counts, is_template, has_reasoning)
    assert t == pytest.approx((1.0 + 3.0) / (2.0 + 4.0))
    assert s == pytest.approx(2.0 / 2.0)
    t, s = entropy_by_mode(sums, counts, [False] * 4, [True] * 4)
    assert math.isnan(t) and s == pytest.approx(16.0 / 13.0)


# ------------------------------------------------------------------ config
def test_knob_values_are_checked():
    cfg = load_config(None, ['warm_start.template_answer="reference"', "warm_start.template_levels=16",
                             "filter.empty_step=regularise", "algo.optimizer=sgd", "algo.grad_parts=true"])
    assert (cfg.warm_start.template_answer, cfg.filter.empty_step, cfg.algo.optimizer) == (
        "reference", "regularise", "sgd")
    for bad, key in (("warm_start.template_answer=mirror", "warm_start.template_answer"),
                     ("filter.empty_step=train", "filter.empty_step"), ("algo.optimizer=adam", "algo.optimizer")):
        with pytest.raises(ConfigError, match=key):
            load_config(None, [bad])


def test_scripted_mode_entropies_score_each_mode_of_the_demonstrator(model_dir):
    from ragen_core.training.probe import scripted_mode_entropies

    cfg = load_config(None, [f"env.id={_FL}", "env.kwargs.obs_format=coord", "env.kwargs.is_slippery=false",
                             "env.kwargs.max_actions_per_turn=1", "rollout.max_new_tokens=64",
                             "warm_start.reasoning_dependence=0.5", "warm_start.template_levels=4",
                             'warm_start.template_answer="reference"', "warm_start.filler_words=2"])
    policy = HFPolicy.from_pretrained(model_dir)
    out = scripted_mode_entropies(policy, cfg, n_prompts=3)
    assert out["templates"] == 4.0
    # An untrained model: near-uniform next-token distributions over its whole vocabulary, in both modes.
    vocab = math.log(len(policy.tokenizer))
    for mode in ("state", "template"):
        assert 0.5 * vocab < out[mode] <= vocab + 1e-6, mode
    with pytest.raises(ValueError, match="no template"):
        scripted_mode_entropies(policy, load_config(None, [f"env.id={_FL}"]), n_prompts=2)
