"""The GPU presets (``configs/*qwen2.5*.toml``): the paper's documented defaults, and the GPU memory they state.

These presets cannot run here (no GPU, no Qwen weights), so what they promise is checked against independent
references: the paper's defaults as docs/science.md section 6 writes them (parsed from the doc, not copied), and the
memory of their training state from the Qwen2.5 architecture's parameter count (the model and the trainer's critic
built on the meta device, nothing allocated) times the bytes a parameter that the trainer's optimiser really holds
after a step on a tiny bfloat16 model (the tensors of the weights and of the optimiser's state, summed).

The memory statement is there because the float32 master copies of the bfloat16 weights
(``ragen_core.training.sft.Float32Master``) raised the resident state from 6 to 14 bytes a parameter, for the policy
and for the critic: the 3B presets went from 37 GB to 86 GB, beyond an 80 GB GPU, which their files and docs did not
say (docs/train.md spoke of 36 GB more, for one model).
"""

from __future__ import annotations

import re
from pathlib import Path

import gymnasium as gym
import pytest
import torch

from ragen_core.training.config import load_config

transformers = pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]
PRESETS = sorted((ROOT / "configs").glob("*qwen2.5*.toml"))
_NUM = r"\d+(?:\.\d+)?(?:e-?\d+)?"
#: The published architectures of Qwen2.5-0.5B-Instruct and Qwen2.5-3B-Instruct (their config.json files).
QWEN25 = {
    "0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    "3b": dict(hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16,
               num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
}


def test_the_presets_are_the_three_gpu_presets():
    assert [p.name for p in PRESETS] == ["frozenlake_qwen2.5-3b.toml", "sokoban_qwen2.5-0.5b.toml",
                                         "sokoban_qwen2.5-3b.toml"]


def _paper_defaults() -> dict[str, float]:
    """The official defaults sentence of docs/science.md section 6, and the filter's rho of its table, as numbers."""
    text = " ".join((ROOT / "docs" / "science.md").read_text(encoding="utf-8").split())
    section = text[text.index("## 6."):]
    sentence = section[section.index("Official defaults:"):]
    sentence = sentence[:sentence.index("Peak validation")]
    patterns = {
        "groups": rf"({_NUM}) prompt groups x", "group_size": rf"x ({_NUM}) rollouts per step",
        "temperature": rf"temperature ({_NUM})", "lr": rf"actor lr ({_NUM})",
        "entropy_coef": rf"entropy coefficient ({_NUM})", "clip_low": rf"clip ({_NUM}) /",
        "clip_high": rf"clip {_NUM} / ({_NUM})", "gamma_lam": rf"gamma = lambda = ({_NUM})",
        "max_turns": rf"up to ({_NUM}) turns", "actions_per_turn": rf"({_NUM}) actions per turn",
    }
    out = {k: float(re.search(p, sentence).group(1)) for k, p in patterns.items()}
    assert "KL off" in sentence
    out["kl_coef"] = 0.0
    out["rho"] = float(re.search(rf"top-p rho = ({_NUM})", section).group(1))
    return out


@pytest.mark.parametrize("path", PRESETS, ids=[p.stem for p in PRESETS])
def test_each_preset_keeps_the_papers_documented_defaults(path):
    paper = _paper_defaults()
    cfg = load_config(path)
    r, a, f = cfg.rollout, cfg.algo, cfg.filter
    assert (r.groups, r.group_size, r.temperature, r.max_turns) == (
        paper["groups"], paper["group_size"], paper["temperature"], paper["max_turns"])
    assert r.top_p == 1.0  # no nucleus cut in training rollouts: temperature alone
    assert a.name == "ppo" and (a.lr, a.entropy_coef, a.kl_coef) == (paper["lr"], paper["entropy_coef"],
                                                                      paper["kl_coef"])
    assert (a.clip_low, a.clip_high, a.gamma, a.lam) == (paper["clip_low"], paper["clip_high"], paper["gamma_lam"],
                                                         paper["gamma_lam"])
    assert f.enabled and (f.spec.strategy, f.spec.value) == ("top_p", paper["rho"])
    env = gym.make(cfg.env.id, **cfg.env.kwargs)
    assert env.unwrapped.max_actions_per_turn == paper["actions_per_turn"]
    assert (cfg.env.train_seed, cfg.env.val_seed) == (10000, 123)
    assert cfg.model.dtype == "bfloat16" and cfg.run.device == "cuda"


def _bytes(x) -> int:
    """Bytes of the (non-scalar) tensors in a nested state dict."""
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size() if x.dim() else 0
    if isinstance(x, dict):
        return sum(_bytes(v) for v in x.values())
    if isinstance(x, (list, tuple)):
        return sum(_bytes(v) for v in x)
    return 0


def _resident_bytes_per_parameter(build) -> float:
    """Weights plus optimiser state of a bfloat16 model after one step of the optimiser ``build(params)``, a
    parameter (measured: the tensors summed)."""
    cfg = transformers.Qwen2Config(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True)
    torch.manual_seed(0)
    model = transformers.Qwen2ForCausalLM(cfg).to(torch.bfloat16)
    params = list(model.parameters())
    opt = build(params)
    model(torch.randint(0, 64, (2, 5))).logits.float().square().mean().backward()
    opt.step()
    opt.zero_grad()
    n = sum(p.numel() for p in params)
    return (sum(p.numel() * p.element_size() for p in params) + _bytes(opt.state_dict())) / n


def _trained_parameters(arch: dict) -> int:
    """Parameters PPO trains: the model's and its critic's (``ValueModel``, the trainer's), built on the meta device."""
    from ragen_core.training.trainer import ValueModel

    with torch.device("meta"):
        model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**arch))
        critic = ValueModel(model)
    return sum(p.numel() for p in model.parameters()) + sum(p.numel() for p in critic.parameters())


@pytest.mark.parametrize("path", PRESETS, ids=[p.stem for p in PRESETS])
def test_each_preset_states_the_gpu_memory_of_its_training_state(path):
    cfg = load_config(path)
    assert cfg.algo.name == "ppo" and cfg.model.dtype == "bfloat16"  # a critic, and float32 master copies
    from ragen_core.training.trainer import make_optimizer

    per_param = _resident_bytes_per_parameter(lambda params: make_optimizer(params, cfg.algo))
    assert per_param == 14.0  # bfloat16 weight 2, float32 copy 4, AdamW's float32 moments 8
    size = "0.5b" if "0.5b" in path.name else "3b"
    n = _trained_parameters(QWEN25[size])
    header = " ".join(line.lstrip("# ") for line in path.read_text().splitlines() if line.startswith("#"))
    m = re.search(rf"2 x ({_NUM}) B parameters x ({_NUM}) bytes, ({_NUM}) GB", header)
    assert m, f"{path.name} does not state the memory of its training state"
    stated_params, stated_bytes, stated_gb = (float(g) for g in m.groups())
    assert stated_bytes == per_param
    assert stated_params * 2e9 == pytest.approx(n, rel=0.005)
    assert stated_gb * 1e9 == pytest.approx(n * per_param, rel=0.01)
    assert ("more than an 80 GB GPU holds" in header) == (n * per_param > 80e9)


def test_the_training_doc_gives_the_same_memory():
    text = " ".join((ROOT / "docs" / "train.md").read_text(encoding="utf-8").split())
    n3, n05 = _trained_parameters(QWEN25["3b"]), _trained_parameters(QWEN25["0.5b"])
    m = re.search(rf"2 x ({_NUM}) B x 14 bytes, ({_NUM}) GB \(({_NUM}) GB before the float32 copies\) for the 3B "
                  r"presets", text)
    assert m, "docs/train.md does not state the 3B presets' memory"
    assert float(m.group(1)) * 2e9 == pytest.approx(n3, rel=0.005)
    assert float(m.group(2)) * 1e9 == pytest.approx(14 * n3, rel=0.01)
    old = _resident_bytes_per_parameter(lambda params: torch.optim.AdamW(params, lr=1e-6))  # on the bf16 weights
    assert old == 6.0  # weight 2 + AdamW's bfloat16 moments 4
    assert float(m.group(3)) * 1e9 == pytest.approx(old * n3, rel=0.01)
    m = re.search(rf"The 0.5B preset needs ({_NUM}) GB \(2 x ({_NUM}) B x 14 bytes\)", text)
    assert m and float(m.group(1)) * 1e9 == pytest.approx(14 * n05, rel=0.01)
    assert float(m.group(2)) * 2e9 == pytest.approx(n05, rel=0.005)
