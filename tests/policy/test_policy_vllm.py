"""VLLMPolicy's logic against a stand-in engine (a CPU HFPolicy behind vLLM's offline API shape).

The stand-in mimics what VLLMPolicy relies on: `generate(token prompts, per-request SamplingParams,
use_tqdm)` returning outputs with `.outputs[0].token_ids / .text / .logprobs / .finish_reason`
(EOS included in `token_ids`, as vLLM does), `apply_model(fn)` running `fn` on the worker's model,
whose `load_weights(iterable of (name, tensor))` loads weights, and `reset_prefix_cache()`.
The real engine is exercised only by the gpu-marked test.
"""

from __future__ import annotations

import copy
import importlib.util
import sys
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch

from ragen_core.policy import HFPolicy, Policy, build_tiny_model
from ragen_core.policy.vllm import VLLMPolicy, _import_vllm


@dataclass
class FakeSamplingParams:
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 16
    stop: list | None = None
    include_stop_str_in_output: bool = False
    logprobs: int | None = None
    seed: int | None = None
    skip_special_tokens: bool = True


class _WorkerModel:
    """What `apply_model` hands to the function: a module with vLLM's `load_weights`."""

    def __init__(self, module):
        self.module = module

    def load_weights(self, weights):
        self.module.load_state_dict(dict(weights), strict=True)


class FakeEngine:
    def __init__(self, trainer: HFPolicy):
        self.inner = HFPolicy(copy.deepcopy(trainer.model), trainer.tokenizer)
        self.worker_model = _WorkerModel(self.inner.model)
        self.calls: list[list[FakeSamplingParams]] = []
        self.resets = 0

    def apply_model(self, fn):
        return [fn(self.worker_model)]

    def reset_prefix_cache(self):
        self.resets += 1

    def generate(self, prompts, params, use_tqdm=True):
        assert use_tqdm is False
        self.calls.append(list(params))
        eos = self.inner.tokenizer.eos_token_id
        outs = []
        for prompt, sp in zip(prompts, params):
            g = self.inner.generate(
                [prompt["prompt_token_ids"]],
                max_new_tokens=sp.max_tokens,
                temperature=sp.temperature,
                top_p=sp.top_p,
                stop=tuple(sp.stop or ()),
                generator=torch.Generator().manual_seed(sp.seed),
            )[0]
            ids, lps = list(g.response_ids), list(g.response_logprobs)
            hit_stop = any(s in g.text for s in (sp.stop or ()))
            if g.finish_reason == "stop" and not hit_stop:  # vLLM keeps the EOS token in token_ids
                ids.append(eos)
                lps.append(-0.5)
            logprobs = [{t: SimpleNamespace(logprob=lp, rank=1)} for t, lp in zip(ids, lps)]
            outs.append(
                SimpleNamespace(
                    outputs=[
                        SimpleNamespace(
                            text=g.text,
                            token_ids=tuple(ids),
                            logprobs=logprobs,
                            finish_reason="length" if g.finish_reason == "length" else "stop",
                        )
                    ]
                )
            )
        return outs


@pytest.fixture()
def pair(tmp_path):
    path = build_tiny_model(
        tmp_path, corpus=["<think> a </think> <answer> Up </answer>"] * 20, hidden=32, layers=2
    )
    trainer = HFPolicy.from_pretrained(path)
    engine = FakeEngine(trainer)
    return trainer, engine, VLLMPolicy(trainer, engine, sampling_params_cls=FakeSamplingParams)


def _prompts(pol):
    return [pol.encode_chat([{"role": "user", "content": c}]) for c in ("Turn 1:\nState:\n#P_#", "Up?")]


def test_is_a_policy_and_delegates_scoring(pair):
    trainer, _, pol = pair
    assert isinstance(pol, Policy)
    assert pol.model is trainer.model and pol.tokenizer is trainer.tokenizer and pol.device == trainer.device
    ids, mask = pol.pad([p + [5, 6] for p in _prompts(pol)])
    a = pol.forward_logprobs(ids, mask, with_entropy=True)
    b = trainer.forward_logprobs(ids, mask, with_entropy=True)
    assert torch.equal(a.logprobs, b.logprobs) and torch.equal(a.entropy, b.entropy)


def test_sampling_params_mapping(pair):
    _, engine, pol = pair
    pol.generate(
        _prompts(pol),
        max_new_tokens=7,
        temperature=0.7,
        top_p=0.9,
        stop=("</answer>",),
        generator=torch.Generator().manual_seed(0),
    )
    sp = engine.calls[-1][0]
    assert (sp.temperature, sp.top_p, sp.max_tokens, sp.stop) == (0.7, 0.9, 7, ["</answer>"])
    assert sp.logprobs == 0 and sp.include_stop_str_in_output and sp.n == 1 and sp.skip_special_tokens
    assert len(engine.calls[-1]) == 2 and engine.calls[-1][0].seed != engine.calls[-1][1].seed
    pol.generate(_prompts(pol), greedy=True, stop=(), max_new_tokens=3)
    assert all(p.temperature == 0.0 and p.top_p == 1.0 and p.stop is None for p in engine.calls[-1])


def test_seeded_generator_gives_reproducible_requests(pair):
    _, engine, pol = pair
    kw = dict(max_new_tokens=10, stop=())
    a = pol.generate(_prompts(pol), generator=torch.Generator().manual_seed(3), **kw)
    b = pol.generate(_prompts(pol), generator=torch.Generator().manual_seed(3), **kw)
    assert [g.response_ids for g in a] == [g.response_ids for g in b]
    assert [p.seed for p in engine.calls[0]] == [p.seed for p in engine.calls[1]]


def test_outputs_follow_the_generation_contract(pair):
    trainer, _, pol = pair
    eos = trainer.tokenizer.eos_token_id
    gens = pol.generate(_prompts(pol), max_new_tokens=30, stop=(), generator=torch.Generator().manual_seed(0))
    for g, p in zip(gens, _prompts(pol)):
        assert g.prompt_ids == p and eos not in g.response_ids
        assert len(g.response_ids) == len(g.response_logprobs)
        assert g.finish_reason in ("stop", "length")
        # the log-probs are the engine's, here an HFPolicy at temperature 1: equal to teacher forcing
        ids, mask = trainer.pad([g.prompt_ids + g.response_ids])
        scored = trainer.forward_logprobs(ids, mask).logprobs[0, len(p) :]
        assert torch.allclose(scored, torch.tensor(g.response_logprobs), atol=1e-4)


def test_trailing_eos_is_stripped_with_its_logprob():
    trainer_stub = SimpleNamespace(eos_token_ids=frozenset({2}), model=torch.nn.Linear(1, 1))
    out = SimpleNamespace(
        outputs=[
            SimpleNamespace(
                text="ab",
                token_ids=(7, 8, 2),
                finish_reason="stop",
                logprobs=[{7: SimpleNamespace(logprob=-1.0)}, {8: -2.0}, {2: SimpleNamespace(logprob=-3.0)}],
            )
        ]
    )
    engine = SimpleNamespace(generate=lambda prompts, params, use_tqdm: [out])
    pol = VLLMPolicy(trainer_stub, engine, sampling_params_cls=FakeSamplingParams)
    (g,) = pol.generate([[1, 2, 3]], stop=())
    assert g.response_ids == [7, 8] and g.response_logprobs == [-1.0, -2.0] and g.finish_reason == "stop"


def test_weights_are_synced_after_an_update(pair):
    trainer, engine, pol = pair
    prompts = _prompts(pol)
    pol.generate(prompts, greedy=True, stop=(), max_new_tokens=4)
    assert pol.sync_count == 0  # same checkpoint: nothing to push
    opt = torch.optim.SGD(trainer.model.parameters(), lr=5.0)
    ids, mask = trainer.pad([p + [9, 10, 11] for p in prompts])
    (-trainer.forward_logprobs(ids, mask).logprobs.sum()).backward()
    opt.step()
    opt.zero_grad()
    changed = [
        k
        for k, v in trainer.model.state_dict().items()
        if not torch.equal(v, engine.inner.model.state_dict()[k])
    ]
    assert changed  # the engine is stale now
    gens = pol.generate(prompts, greedy=True, stop=(), max_new_tokens=6)
    assert pol.sync_count == 1 and engine.resets == 1
    for k, v in trainer.model.state_dict().items():
        assert torch.equal(v, engine.inner.model.state_dict()[k]), k
    ref = trainer.generate(prompts, greedy=True, stop=(), max_new_tokens=6)
    assert [g.response_ids for g in gens] == [g.response_ids for g in ref]
    pol.generate(prompts, greedy=True, stop=(), max_new_tokens=2)
    assert pol.sync_count == 1  # no change since the last sync


def test_no_auto_sync_leaves_engine_stale_until_forced(pair):
    trainer, engine, pol = pair
    pol.auto_sync = False
    with torch.no_grad():
        for p in trainer.model.parameters():
            p.add_(0.1)
    pol.generate(_prompts(pol), max_new_tokens=2, stop=())
    assert pol.sync_count == 0
    assert pol.sync_weights() is True and pol.sync_weights() is False
    assert pol.sync_weights(force=True) is True and pol.sync_count == 2


def test_bad_arguments(pair, monkeypatch):
    _, _, pol = pair
    p = _prompts(pol)
    with pytest.raises(ValueError, match="images"):
        pol.generate(p, images=[[torch.zeros(4, 4, 3).numpy()], []])
    for kw in ({"max_new_tokens": 0}, {"top_p": 0.0}, {"temperature": -1.0}):
        with pytest.raises(ValueError):
            pol.generate(p, **kw)
    with pytest.raises(ValueError, match="empty"):
        pol.generate([[]])
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="GPU only"):
            VLLMPolicy.from_pretrained("/nonexistent", device="cpu")


def test_missing_vllm_gives_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` raise ImportError
    with pytest.raises(ImportError, match="pip install"):
        _import_vllm()


@pytest.mark.gpu
@pytest.mark.skipif(
    not torch.cuda.is_available() or importlib.util.find_spec("vllm") is None, reason="needs CUDA and vllm"
)
def test_real_vllm_engine_generates_and_syncs(tmp_path):
    path = build_tiny_model(tmp_path, hidden=64, layers=2)
    pol = VLLMPolicy.from_pretrained(
        path, device="cuda", dtype="float32", engine_kwargs={"enforce_eager": True}
    )
    prompts = _prompts(pol)
    gens = pol.generate(prompts, max_new_tokens=8, stop=(), generator=torch.Generator().manual_seed(0))
    ids, mask = pol.pad([g.prompt_ids + g.response_ids for g in gens])
    scored = pol.forward_logprobs(ids, mask).logprobs
    for b, g in enumerate(gens):
        L, n = len(g.prompt_ids), len(g.response_ids)
        assert torch.allclose(scored[b, L : L + n].cpu(), torch.tensor(g.response_logprobs), atol=1e-2)
    with torch.no_grad():
        for p in pol.model.parameters():
            p.mul_(1.5)
    pol.generate(prompts, max_new_tokens=2)
    assert pol.sync_count == 1
