"""QA of the held-out MI probe and the warm start's demonstrators, as an outside reviewer tries them.

- the probe's numbers against an independent reference: the same traces re-sampled, cross-scored pair by pair with
  :func:`ragen_core.math.mi.cross_score_naive` and the documented formulas written as plain loops;
- its settings at their bounds (2 prompts, as many as the env has distinct levels, one more than that) and an env
  whose observations repeat across seeds;
- an env that shows images: refused by name before anything runs (it used to pass the build and crash deep in the
  first measurement, after cross-scoring the traces without their images);
- the demonstrators' knobs against what the docs say (the share of noisy answers is q within its binomial interval,
  the template is one text whatever the input, a family's templates are drawn uniformly, a template that pays
  carries no noise), and hooks that answer out of contract (a bare string of actions used to be split into one
  action per character);
- determinism: demonstrations and probe prompts byte-identical in two processes with different hash seeds.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

from stand_in_envs import ValueEnv, register  # noqa: E402

from ragen_core.math.mi import cross_score_naive  # noqa: E402
from ragen_core.policy import HFPolicy  # noqa: E402
from ragen_core.rollout import RolloutSettings, make_envs, rollout  # noqa: E402
from ragen_core.training.config import ConfigError, load_config  # noqa: E402
from ragen_core.training.probe import build_probe, probe_metrics, reasoning_text  # noqa: E402
from ragen_core.training.sft import FILLER_WORDS, demonstrator_template_parts, oracle_response  # noqa: E402
from ragen_core.training.trainer import Trainer  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ENV_ID = "test/ProbeQA-v0"
HOOK_ENV_ID = "test/DemoQA-v0"


class LevelsEnv(ValueEnv):
    """One-turn stand-in env: the observation is a level number in [0, n_levels)."""

    INSTRUCTIONS = "Say anything."

    def _execute(self, action):
        return (1.0 if len(action) % 2 == 0 else 0.0), True


class HookEnv(LevelsEnv):
    """A stand-in env with a demonstrator: the oracle answers "go" on even levels and "stop" on odd ones, and a
    noisy answer is the sentinel "noise" (so every replaced answer can be counted)."""

    ACTIONS = ("go", "stop")

    def oracle_step(self, reasoning: str = "full"):
        return f"the value is {self.value}", ["stop" if self.value % 2 else "go"]

    def noise_answer(self, kind, rng):
        return "noise"


register(ENV_ID, LevelsEnv)
register(HOOK_ENV_ID, HookEnv)

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def _answer(response: str) -> str:
    return _ANSWER.search(response).group(1).strip()


# ------------------------------------------------------------------------------------------------------------
# The probe's numbers against an independent reference
# ------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def policy(make_tiny_model):
    return HFPolicy.from_pretrained(make_tiny_model("value 12 Say anything. go"))


@torch.no_grad()
def _naive_token_entropy(model, batch, lengths, temperature):
    """Mean next-token entropy (nats) over the first lengths[i, k] response tokens of every trajectory, each
    trajectory re-encoded alone (no padding, no mask, no cache)."""
    total, count = 0.0, 0
    flat = lengths.flatten().tolist()
    for t, traj in enumerate(batch.trajectories):
        turn = traj.turns[0]
        x, z = list(turn.prompt_ids), list(turn.response_ids)
        logits = model(input_ids=torch.tensor([x + z]), use_cache=False).logits[0].double() / temperature
        for pos in range(int(flat[t])):
            logp = torch.log_softmax(logits[len(x) - 1 + pos], dim=-1)
            total += float(-(logp.exp() * logp).sum())
            count += 1
    return total / count


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_probe_numbers_match_a_naive_reference(policy, temperature):
    settings = RolloutSettings(max_turns=1, max_new_tokens=10, system_prompt=False, temperature=temperature)
    probe = build_probe(ENV_ID, {"n_levels": 50}, 3, 3, 5000, settings)
    out = probe_metrics(policy, probe, sample_seed=11)
    # the same traces: the probe's sampler is seeded by sample_seed alone
    batch = rollout(policy, probe.envs, probe.seeds, probe.group_size, probe.settings,
                    generator=torch.Generator().manual_seed(11), reset_options=probe.reset_options)
    prompts, traces = batch.mi_inputs(span="reasoning")
    assert all(z for row in traces for z in row)  # no stand-in token needed for this check
    L = cross_score_naive(policy.model, prompts, traces)
    P, G = 3, 3
    n = [[len(traces[i][k]) for k in range(G)] for i in range(P)]
    own = [[float(L[i, k, i]) for k in range(G)] for i in range(P)]
    lse = [[math.log(sum(math.exp(float(L[i, k, j])) for j in range(P)) / P) for k in range(G)] for i in range(P)]
    pairs = [(i, k) for i in range(P) for k in range(G)]
    ranks = {(i, k): sorted(range(P), key=lambda j: -float(L[i, k, j])) for i, k in pairs}
    assert all(float(L[i, k, ranks[i, k][0]]) > float(L[i, k, ranks[i, k][1]]) for i, k in pairs)  # no ties
    acc = sum(ranks[i, k][0] == i for i, k in pairs) / len(pairs)
    recall2 = sum(i in ranks[i, k][:2] for i, k in pairs) / len(pairs)
    mi_seq = sum(own[i][k] - lse[i][k] for i, k in pairs) / len(pairs)
    mi_tok = sum((own[i][k] - lse[i][k]) / n[i][k] for i, k in pairs) / len(pairs)
    ref = {
        "probe/retrieval_acc": acc,
        "probe/retrieval_chance": 1 / P,
        "probe/retrieval_margin": (acc - 1 / P) / (1 - 1 / P),
        "probe/recall_at_2": recall2,
        "probe/recall_at_2_chance": 2 / P,
        "probe/mi_seq_est": mi_seq,
        "probe/mi_upper_bound": math.log(P),
        "probe/mi_seq_norm": mi_seq / math.log(P),
        "probe/mi_est": mi_tok,
        "probe/cond_entropy_seq_est": -sum(own[i][k] for i, k in pairs) / len(pairs),
        "probe/cond_entropy_est": -sum(own[i][k] / n[i][k] for i, k in pairs) / len(pairs),
        "probe/reasoning_tokens": sum(n[i][k] for i, k in pairs) / len(pairs),
        "probe/return": float(np.mean([t.episode_return for t in batch.trajectories])),
        "probe/token_entropy": _naive_token_entropy(policy.model, batch, torch.tensor(n), temperature),
        "probe/n_prompts": P,
        "probe/group_size": G,
        "probe/empty_traces": 0.0,
    }
    for key, want in ref.items():
        assert out[key] == pytest.approx(want, rel=1e-4, abs=1e-4), key


# ------------------------------------------------------------------------------------------------------------
# Probe settings at their bounds, and envs whose levels repeat
# ------------------------------------------------------------------------------------------------------------


def _first_values(seeds):
    env = make_envs(ENV_ID, 1, {"n_levels": 6})[0]
    out = []
    for s in seeds:
        env.reset(seed=s)
        out.append(env.unwrapped.value)
    return out


def test_probe_prompts_at_their_bounds_and_too_few_levels_name_the_numbers():
    settings = RolloutSettings(max_turns=1)
    two = build_probe(ENV_ID, {"n_levels": 6}, 2, 1, 5000, settings)
    assert len(two.seeds) == 2 and len(set(_first_values(two.seeds))) == 2
    every = build_probe(ENV_ID, {"n_levels": 6}, 6, 2, 5000, settings)  # as many prompts as the env has levels
    assert sorted(_first_values(every.seeds)) == list(range(6)) and len(every.envs) == 12
    # the kept seeds are the first occurrence of each level, in order: the repeats in between were skipped
    window = list(range(5000, every.seeds[-1] + 1))
    seen, firsts = set(), []
    for s, v in zip(window, _first_values(window)):
        if v not in seen:
            seen.add(v)
            firsts.append(s)
    assert every.seeds == firsts and len(window) > 6
    with pytest.raises(ValueError, match=r"only 6 distinct levels among seeds 5000\.\.5027 of test/ProbeQA-v0; "
                                         r"lower mi.probe_prompts \(asked for 7\)"):
        build_probe(ENV_ID, {"n_levels": 6}, 7, 2, 5000, settings)
    for n_prompts, group_size in ((1, 2), (2, 0), (2.5, 2), (True, 2), (3, 1.0)):
        with pytest.raises(ValueError, match="a probe needs >= 2 prompts and >= 1 sample each"):
            build_probe(ENV_ID, {"n_levels": 6}, n_prompts, group_size, 5000, settings)


def test_a_probe_on_repeating_levels_has_distinct_prompts_and_chance_one_over_n(policy):
    settings = RolloutSettings(max_turns=1, max_new_tokens=4, system_prompt=False)
    probe = build_probe(ENV_ID, {"n_levels": 5}, 5, 1, 5000, settings)
    out = probe_metrics(policy, probe, sample_seed=3)
    assert out["probe/retrieval_chance"] == pytest.approx(1 / 5)  # no duplicate prompt raised the chance level
    assert out["probe/recall_at_2_chance"] == pytest.approx(2 / 5)
    assert out["probe/mi_upper_bound"] == pytest.approx(math.log(5))


# ------------------------------------------------------------------------------------------------------------
# An env that shows images: refused by name
# ------------------------------------------------------------------------------------------------------------

VISION_KW = {"obs_format": "coord", "max_solution_len": 2, "max_actions_per_turn": 1}


@pytest.mark.parametrize("obs_format", ["coord", "image"])
def test_a_probe_of_an_env_with_images_is_refused_by_name(obs_format):
    # before: "coord" built and crashed deep in the first measurement (the entropy pass had no images for the
    # prompts' image tokens) after cross-scoring the traces without their images; "image" was refused as "only 1
    # distinct levels" (numpy's repr of two different pictures is the same summary)
    with pytest.raises(ValueError, match=r"ragen/Sokoban-Vision-v0 shows images.*set mi.probe_prompts = 0"):
        build_probe("ragen/Sokoban-Vision-v0", {**VISION_KW, "obs_format": obs_format}, 4, 2, 5000,
                    RolloutSettings(max_turns=1))


def test_the_trainer_refuses_a_vision_probe_before_the_run_folder_exists(policy, tmp_path):
    cfg = load_config(None, ["env.id=ragen/Sokoban-Vision-v0", "env.kwargs.obs_format=coord",
                             "env.kwargs.max_solution_len=2", "env.kwargs.max_actions_per_turn=1",
                             "rollout.max_turns=1", "run.progress=false",
                             "mi.probe_prompts=4", "mi.probe_group_size=2"])
    with pytest.raises(ConfigError, match=r"mi.probe_prompts: ragen/Sokoban-Vision-v0 shows images"):
        Trainer(cfg, tmp_path / "run", policy=policy)
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------------------------------------------------
# The demonstrators' knobs do what the docs say
# ------------------------------------------------------------------------------------------------------------


def _hook_env(seed: int = 0):
    env = make_envs(HOOK_ENV_ID, 1, {"n_levels": 100})[0]
    env.reset(seed=seed)
    return env


def _within_binomial(hits: int, n: int, p: float, z: float = 4.0) -> bool:
    return abs(hits - n * p) <= z * math.sqrt(n * p * (1 - p))


@pytest.mark.parametrize("noise", [0.0, 0.3, 1.0])
def test_the_share_of_noisy_answers_is_the_noise_level(noise):
    env, rng, n = _hook_env(), np.random.default_rng(0), 3000
    answers = [_answer(oracle_response(env, noise=noise, rng=rng)) for _ in range(n)]
    noisy = answers.count("noise")
    assert noisy + answers.count(_answer(oracle_response(env))) == n  # every answer is the oracle's or the noise
    if noise in (0.0, 1.0):
        assert noisy == n * noise  # exactly: never / always
    else:
        assert _within_binomial(noisy, n, noise), (noisy, n * noise)


def test_a_template_is_one_text_for_every_input_and_state_reasoning_depends_on_it():
    cfg = load_config(None, ["env.id=ragen/FrozenLake-v0", "env.kwargs.obs_format=coord",
                             "env.kwargs.is_slippery=false", "env.kwargs.max_actions_per_turn=1",
                             "warm_start.reasoning_dependence=0.5"])
    [(template, _)] = demonstrator_template_parts(cfg)
    envs = make_envs(cfg.env.id, 12, cfg.env.kwargs)
    observations = [e.reset(seed=s)[0] for s, e in enumerate(envs)]
    rng = np.random.default_rng(0)
    templated = [oracle_response(e, dependence=0.0, template=template, rng=rng) for e in envs]
    assert {reasoning_text(r) for r in templated} == {" ".join(template.split())}
    filled = [oracle_response(e, dependence=0.0, template=template, rng=rng, filler_words=3) for e in envs]
    assert {reasoning_text(r, FILLER_WORDS, 3) for r in filled} == {" ".join(template.split())}
    assert len({reasoning_text(r) for r in filled}) > 1  # the filler words vary, the template does not
    state = [reasoning_text(oracle_response(e, rng=rng)) for e in envs]
    assert len(set(state)) == len(set(observations)) > 1  # one reasoning per distinct level


def test_a_template_family_is_drawn_uniformly_and_a_paying_template_carries_no_noise():
    env, rng, n = _hook_env(), np.random.default_rng(1), 4000
    family = ["alpha text", "beta text", "gamma text", "delta text"]
    texts = [reasoning_text(oracle_response(env, dependence=0.0, template=family, rng=rng)) for _ in range(n)]
    for t in family:
        assert _within_binomial(texts.count(t), n, 1 / len(family)), (t, texts.count(t))
    # q = 0.5, noise 1, the template pays: template traces answer the oracle's move, state traces the noise
    out = [oracle_response(env, noise=1.0, dependence=0.5, template=family, template_answer="oracle", rng=rng)
           for _ in range(n)]
    is_template = [reasoning_text(r) in family for r in out]
    assert _within_binomial(sum(is_template), n, 0.5)
    assert all((_answer(r) == "noise") != t for r, t in zip(out, is_template))


# ------------------------------------------------------------------------------------------------------------
# Hooks that answer out of their contract
# ------------------------------------------------------------------------------------------------------------


class BareStringEnv(HookEnv):
    def oracle_step(self, reasoning: str = "full"):
        return "the value is known", "stop"  # a string where the list of actions belongs


class NotAPairEnv(HookEnv):
    def oracle_step(self, reasoning: str = "full"):
        return "the value is known"


class NoneReasoningEnv(HookEnv):
    def random_step(self, rng):
        return None, ["go"]


class ListNoiseEnv(HookEnv):
    def noise_answer(self, kind, rng):
        return ["go"]


def test_a_hook_out_of_contract_is_a_clear_error_not_a_corrupt_demonstration():
    # before: BareStringEnv's answer was "s || t || o || p" (one action per character), NoneReasoningEnv's reasoning
    # the text "None", ListNoiseEnv's answer "['go']", NotAPairEnv a ValueError from tuple unpacking
    cases = [(BareStringEnv, lambda e: oracle_response(e), r"BareStringEnv.oracle_step\(\) must return its actions "
                                                           r"as a list of strings.*got str 'stop'"),
             (NotAPairEnv, lambda e: oracle_response(e), r"NotAPairEnv.oracle_step\(\) must return a pair"),
             (NoneReasoningEnv, lambda e: _random(e), r"NoneReasoningEnv.random_step\(\) must return its reasoning as "
                                                      r"a string; got NoneType"),
             (ListNoiseEnv, lambda e: oracle_response(e, noise=1.0, rng=np.random.default_rng(0)),
              r"ListNoiseEnv.noise_answer\(\) must return the answer as a string; got list")]
    for cls, call, message in cases:
        env = cls(n_levels=10)
        env.reset(seed=0)
        with pytest.raises(ValueError, match=message):
            call(env)


def _random(env):
    from ragen_core.training.sft import random_response

    return random_response(env, np.random.default_rng(0))


# ------------------------------------------------------------------------------------------------------------
# Determinism across processes
# ------------------------------------------------------------------------------------------------------------

_DIGEST_SCRIPT = r"""
import hashlib
import numpy as np
from ragen_core.rollout import RolloutSettings, make_envs
from ragen_core.training.config import load_config
from ragen_core.training.probe import build_probe
from ragen_core.training.sft import demonstrator_template_parts, scripted_responder

h = hashlib.sha256()
for path in ("configs/mechanism_sokoban.toml", "configs/collapse_frozenlake.toml"):
    cfg = load_config(path, ["warm_start.template_levels=3"])
    ws = cfg.warm_start
    parts = demonstrator_template_parts(cfg)
    envs = make_envs(cfg.env.id, 16, cfg.env.kwargs)
    for i, env in enumerate(envs):
        env.reset(seed=ws.seed + i)
    responder = scripted_responder("oracle", np.random.default_rng(ws.seed), ws.reasoning, 0.6, "random",
                                   ws.reasoning_dependence, [t for t, _ in parts], ws.template_answer,
                                   ws.filler_words, [a for _, a in parts])
    for text in responder(envs, list(range(len(envs)))):
        h.update(text.encode() + b"\x1e")
    probe = build_probe(cfg.env.id, cfg.env.kwargs, 32, 1, cfg.mi.probe_seed,
                        RolloutSettings.from_config(cfg.rollout), cfg.env.per_rollout_option)
    h.update(repr(probe.seeds).encode())
    for seed, env in zip(probe.seeds, probe.envs):
        h.update(env.reset(seed=seed)[0].encode() + b"\x1e")
print(h.hexdigest())
"""


def test_demonstrations_and_probe_prompts_are_byte_identical_in_two_processes():
    digests = []
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        done = subprocess.run([sys.executable, "-c", _DIGEST_SCRIPT], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        digests.append(done.stdout.strip().splitlines()[-1])
    assert digests[0] == digests[1] and len(digests[0]) == 64


def test_template_reference_levels_are_a_held_out_stream_of_their_own():
    """The template demonstrator writes its reasoning about the `template_levels` seeds just below warm_start.seed:
    more levels than seeds below repeated seed 0 silently, and those levels could overlap the validation or the
    probe's seeds (the warm start then taught reasoning about held-out levels)."""
    from ragen_core.training.config import ConfigError, load_config
    from ragen_core.training.trainer import check_runnable, seed_streams

    base = ["warm_start.reasoning_dependence=0", "warm_start.sft_episodes=16"]
    ok = load_config(None, [*base, "warm_start.seed=777", "warm_start.template_levels=4"])
    check_runnable(ok)
    assert seed_streams(ok)["template"] == range(773, 777)
    with pytest.raises(ConfigError, match=r"warm_start.template_levels=6 needs warm_start.seed >= 6"):
        check_runnable(load_config(None, [*base, "warm_start.seed=3", "warm_start.template_levels=6"]))
    with pytest.raises(ConfigError, match=r"warm_start.template_levels: template reference seeds 77..776 overlap the "
                                          r"validation seeds"):
        check_runnable(load_config(None, [*base, "warm_start.seed=777", "warm_start.template_levels=700"]))
    probe = ["mi.probe_prompts=8", "mi.probe_seed=5000", "warm_start.seed=5040", "warm_start.template_levels=12",
             "warm_start.sft_episodes=0"]
    check_runnable(load_config(None, [*base[:1], *probe]))  # no warm start: no template stream
    with pytest.raises(ConfigError, match="mi.probe_seed: probe seeds .* overlap the template reference seeds"):
        check_runnable(load_config(None, [*base, *probe[:-1], "env.val_seed=123"]))
    state_reasoning = load_config(None, ["warm_start.seed=3", "warm_start.template_levels=6"])
    assert "template" not in seed_streams(state_reasoning)  # reasoning about the state: no reference levels
    check_runnable(state_reasoning)
