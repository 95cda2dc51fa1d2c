"""The MI layer's cross-scoring refuses prompt + trace pairs past a learned position table, in its own test
selection (`make mutation` runs `ragen_core/math/mi.py` against tests/math only; tests/policy/test_model_variety_qa.py
checks the same through a policy). A small GPT-2 (16 learned positions), no tokenizer needed."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from ragen_core.math import mi


@pytest.fixture(scope="module")
def gpt2():
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=64, n_embd=16, n_layer=1, n_head=2, n_positions=16, bos_token_id=1, eos_token_id=2)
    return GPT2LMHeadModel(cfg).eval()


@pytest.mark.parametrize("score", [mi.cross_score, mi.cross_score_naive])
def test_pairs_past_the_position_table_are_refused_before_any_forward(gpt2, score):
    seq = list(range(10, 30))
    with pytest.raises(ValueError, match=r"prompts\[1\] \(12 tokens\) with the longest trace \(5 tokens\) needs 17 "
                                         r"positions, but GPT2LMHeadModel embeds only 16"):
        score(gpt2, [seq[:3], seq[:12]], [[seq[:5]], [seq[:2]]])
    assert score(gpt2, [seq[:3], seq[:12]], [[seq[:4]], [seq[:2]]]).shape == (2, 1, 2)  # 16 positions: runs


class _Model(torch.nn.Module):
    """A stand-in model: a config of the given fields and the given submodules (dotted names nest)."""

    def __init__(self, config: dict | None, modules: dict[str, torch.nn.Module]):
        super().__init__()
        if config is not None:
            self.config = SimpleNamespace(**config)
        for path, module in modules.items():
            parent = self
            *heads, last = path.split(".")
            for head in heads:
                if not hasattr(parent, head):
                    parent.add_module(head, torch.nn.Module())
                parent = getattr(parent, head)
            parent.add_module(last, module)


class _TableLike(torch.nn.Module):
    """Has ``num_embeddings`` like a table but is not torch's Embedding (a user's lookup of another kind)."""

    num_embeddings = 16


def _table(rows: int) -> torch.nn.Embedding:
    return torch.nn.Embedding(rows, 4)


# (config, modules, what learned_position_limit must say): worked out by hand from its documented rule, a table
# named wpe / embed_positions / position_embeddings (the last part of its name), torch's Embedding, with the config's
# max_position_embeddings (else n_positions) rows, or up to 2 more (OPT's offset).
CASES = {
    "gpt-2 style, nested": ({"n_positions": 16}, {"transformer.wte": _table(64), "transformer.wpe": _table(16)}, 16),
    "table at the top": ({"max_position_embeddings": 16}, {"wpe": _table(16)}, 16),
    "max_position_embeddings only": ({"max_position_embeddings": 12},
                                     {"model.decoder.embed_positions": _table(12)}, 12),
    "OPT's offset of 2": ({"max_position_embeddings": 12}, {"model.decoder.embed_positions": _table(14)}, 12),
    "3 rows more: not the table": ({"max_position_embeddings": 12},
                                   {"model.decoder.embed_positions": _table(15)}, None),
    "fewer rows: not the table": ({"max_position_embeddings": 12},
                                  {"model.decoder.embed_positions": _table(11)}, None),
    "BERT-style name": ({"max_position_embeddings": 8}, {"bert.embeddings.position_embeddings": _table(8)}, 8),
    "a table of one position": ({"max_position_embeddings": 1}, {"wpe": _table(1)}, 1),
    "a limit of 0": ({"max_position_embeddings": 0}, {"wpe": _table(2)}, None),
    "n_positions of 0": ({"n_positions": 0}, {"wpe": _table(2)}, None),
    "a bool limit": ({"max_position_embeddings": True}, {"wpe": _table(2)}, None),
    "a token table only (RoPE)": ({"max_position_embeddings": 16}, {"model.embed_tokens": _table(16)}, None),
    "a position name on another name's end": ({"max_position_embeddings": 16}, {"wpe.proj": _table(16)}, None),
    "not torch's Embedding": ({"max_position_embeddings": 16}, {"transformer.wpe": _TableLike()}, None),
    "no config": (None, {"transformer.wpe": _table(16)}, None),
}


@pytest.mark.parametrize("case", list(CASES))
def test_learned_position_limit_reads_the_table_and_the_config(case):
    config, modules, want = CASES[case]
    assert mi.learned_position_limit(_Model(config, modules)) == want


def test_a_rope_model_has_no_position_limit():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=1, max_position_embeddings=16)
    assert mi.learned_position_limit(Qwen2ForCausalLM(cfg)) is None


def test_the_longest_prompt_is_named_whichever_its_place():
    """The check pairs the longest prompt with the longest trace, wherever each sits."""
    model = _Model({"max_position_embeddings": 8}, {"wpe": _table(8)})
    xs = [torch.arange(2), torch.arange(6), torch.arange(3)]
    zs = [[torch.arange(1)], [torch.arange(1)], [torch.arange(3)]]
    with pytest.raises(ValueError, match=r"^prompts\[1\] \(6 tokens\) with the longest trace \(3 tokens\) needs 9 "
                                         r"positions, but _Model embeds only 8 \(a learned position table: config "
                                         r"max_position_embeddings = 8\); shorten them$"):
        mi._check_positions(model, xs, zs)
    mi._check_positions(model, xs[:1] + xs[2:], zs[:1] + zs[2:])  # 3 + 3 = 6 positions: fine
    mi._check_positions(model, [torch.arange(5)], [[torch.arange(3)]])  # exactly 8: fine
