"""The tiny base model ("tiny-base"): its generated text, its pinned recipe, its cache and what pre-training does.

The full build (about 28 CPU-minutes) never runs here: every test uses a recipe of a few steps.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import tomllib
import torch

from ragen_core.policy import TINY_BASE, load_policy, tiny, tiny_base
from ragen_core.policy.tiny_base import (
    DEFAULT_RECIPE,
    TASKS,
    TINY_BASE_RECIPE_SHA256,
    BaseRecipe,
    encode_example,
    exact_match,
    example_stream,
    make_example,
    recipe_digest,
)

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
#: The configs whose envs the base model is for (docs/training.md): their answers must never be in its text.
AGENT_CONFIGS = ("searchqa_tiny", "webshop_tiny", "sudoku_tiny")

#: A few steps of the default mix at a small batch: enough to touch every task, stage and code path.
SMALL = dataclasses.replace(DEFAULT_RECIPE, steps=6, batch_size=4, warmup=2)

WHAT_TO_RECORD = (
    "the shipped tiny-base recipe (its fields, the text generator or the tiny model it starts from) changed, so "
    "the base model every tiny-base config loads is another one. If intended: record the new "
    "recipe_digest(DEFAULT_RECIPE) in TINY_BASE_RECIPE_SHA256 (and bump TINY_BASE_VERSION when the change is in "
    "code the recipe's fields do not show), rebuild (python scripts/build_tiny_base.py) and update the numbers in "
    "docs/training.md ('The tiny base model'). If not, undo the change."
)


def _texts(recipe: BaseRecipe, steps: int | None = None) -> list[str]:
    out = []
    for k, batch in enumerate(example_stream(recipe)):
        if steps is not None and k >= steps:
            break
        out.extend(e.text for e in batch)
    return out


# ------------------------------------------------------------------------------------------------ the text
def test_the_generator_is_deterministic_and_seeded():
    a = list(example_stream(SMALL))
    assert a == list(example_stream(SMALL))
    assert len(a) == SMALL.steps and all(len(b) == SMALL.batch_size for b in a)
    other = list(example_stream(dataclasses.replace(SMALL, data_seed=1)))
    assert [e.text for b in other for e in b] != [e.text for b in a for e in b]
    for task in TASKS:
        one = make_example(np.random.default_rng(5), task, 6, 10, task != "copy")
        assert one == make_example(np.random.default_rng(5), task, 6, 10, task != "copy")
        assert one.task == task and one.spans


def test_every_answer_span_is_trained_on_and_nothing_else():
    tok = _tokenizer()
    for task in TASKS:
        for chat in (False, True):
            e = make_example(np.random.default_rng(1), task, 5, 10, chat and task != "copy")
            ids, marks = encode_example(tok, e)
            answers = tok.decode([i for i, m in zip(ids, marks) if m])
            want = "".join(e.text[s:t] for s, t in e.spans)
            # the marked tokens are the answers (a token may carry the space before an answer)
            assert answers.replace(" ", "") == want.replace(" ", ""), (task, chat, answers, want)
            assert not marks[0]


def test_the_curriculum_grows_the_tables():
    recipe = dataclasses.replace(DEFAULT_RECIPE, steps=100, warmup=10, decay=0.35, stages=((0.5, 3, 4), (1.0, 10, 10)))
    assert recipe.stage(0) == (3, 4) and recipe.stage(49) == (3, 4) and recipe.stage(50) == (10, 10)
    rows = [t.count("\n") for t in _texts(dataclasses.replace(recipe, mix=(("lookup", 1.0),), chat=0.0), 100)]
    # up to 3 rows and 3 questions, an answer line and up to 2 + 2 lines of page furniture, then up to 10 rows
    assert max(rows[: 50 * recipe.batch_size]) <= 2 * 3 + 1 + 4 < max(rows[50 * recipe.batch_size:])
    assert recipe.lr_at(1) < recipe.lr_at(recipe.warmup) == recipe.lr == recipe.lr_at(60)  # constant to 65
    assert recipe.lr_at(100) == pytest.approx(0.0, abs=1e-12)


@functools.cache
def _env_answers(config: str) -> dict[str, set]:
    """Every answer-like string of a config's episodes: all seeds its validation, warm start and training reset."""
    import gymnasium as gym

    import ragen_envs  # noqa: F401

    cfg = tomllib.loads((CONFIGS / f"{config}.toml").read_text())
    env_cfg, ws, ev, run, ro = cfg["env"], cfg["warm_start"], cfg["eval"], cfg["run"], cfg["rollout"]
    seeds = [*range(env_cfg.get("val_seed", 123), env_cfg.get("val_seed", 123) + ev["episodes"]),
             *range(ws.get("seed", 777), ws.get("seed", 777) + ws["sft_episodes"]),
             *range(env_cfg.get("train_seed", 10000), env_cfg.get("train_seed", 10000) + run["steps"] * ro["groups"])]
    env = gym.make(env_cfg["id"], disable_env_checker=True, **env_cfg["kwargs"])
    words: set[str] = set()
    grids: set[tuple] = set()
    for s in seeds:
        env.reset(seed=s)
        u = env.unwrapped
        if hasattr(u, "kb"):  # SearchQA: every entity's name and attribute values, and the gold answers
            for ent in u.kb.entities.values():
                words.update(w for w in [ent.name, *ent.attrs.values()] if len(w) >= 5)
            words.update(g for g in u.golds if len(g) >= 5)
        if hasattr(u, "catalog"):  # WebShop: every product's ASIN and title
            for p in u.catalog.products:
                words.update((p.asin, p.title))
        if hasattr(u, "_solution"):  # Sudoku: the solution grid and the puzzle
            grids.add(tuple(np.asarray(u._solution).ravel().tolist()))
            grids.add(tuple(np.asarray(u.puzzle).ravel().tolist()))
    env.close()
    return {"words": words, "grids": grids}


def _grids_in(text: str) -> list[tuple]:
    """The grids of a generated text, as the env stores them (row-major digits, 0 for an empty cell)."""
    out, rows = [], []
    for line in [*text.split("\n"), ""]:
        m = re.fullmatch(r"R\d+((?: +[.\d]| +\|)+)", line)
        if m:
            rows.append([0 if c == "." else int(c) for c in re.findall(r"[.\d]", m.group(1))])
        elif rows and not re.fullmatch(r" +[-+]+", line):
            out.append(tuple(c for r in rows for c in r))
            rows = []
    return out


def _words(texts: list[str]) -> set[str]:
    return set(re.findall(r"[A-Za-z0-9$.]+", "\n".join(texts)))


@pytest.fixture(scope="module")
def generated() -> list[str]:
    """The first 25 batches of the shipped recipe plus 200 batches of each curriculum stage (about 7,000 texts)."""
    texts = _texts(DEFAULT_RECIPE, 25)
    for f, _, _ in DEFAULT_RECIPE.stages:
        start = min(DEFAULT_RECIPE.steps - 1, int(f * DEFAULT_RECIPE.steps) - 1)
        rows, max_len = DEFAULT_RECIPE.stage(start)
        rng = np.random.default_rng(123)
        texts += [make_example(rng, TASKS[i % len(TASKS)], rows, max_len, i % 3 == 0).text for i in range(6400 // 2)]
    return texts


def _leaks(answers: dict[str, set], texts: list[str]) -> tuple[list[str], set[tuple]]:
    """The env answers found in `texts` as whole words or phrases (a syllable string inside a longer generated word is
    no leak), and the env grids among the texts' grids."""
    words = _words(texts)
    blob = "\n".join(texts)
    leaked = sorted(a for a in answers["words"] if set(re.findall(r"[A-Za-z0-9$.]+", a)) <= words
                    and re.search(rf"(?<![A-Za-z0-9]){re.escape(a)}(?![A-Za-z0-9])", blob))
    return leaked, {g for t in texts for g in _grids_in(t)} & answers["grids"]


@pytest.mark.parametrize("config", AGENT_CONFIGS)
def test_the_text_holds_no_answer_of_the_agent_configs(config, generated):
    answers = _env_answers(config)
    # the episodes were read (WebShop: one catalogue of 40 products, a title or two shared)
    assert len(answers["words"]) + len(answers["grids"]) >= 70
    assert len({g for t in generated for g in _grids_in(t)}) > 1000  # and the generated grids
    words, grids = _leaks(answers, generated)
    assert not words, f"generated text contains {config}'s answers or facts: {words[:10]}"
    assert not grids, f"a generated grid is one of {config}'s puzzles or solutions"


def test_the_leak_check_can_fail(generated):
    """The check above finds an env's answer planted in the text: an ASIN, a SearchQA name, a Sudoku solution."""
    qa, shop, sudoku = (_env_answers(c) for c in AGENT_CONFIGS)
    asin = min(w for w in shop["words"] if re.fullmatch(r"B0[A-Z0-9]{8}", w))
    name = min(w for w in qa["words"] if " " in w)
    solution = min(g for g in sudoku["grids"] if 0 not in g)
    texts = generated[:50]
    assert _leaks(shop, texts) == ([], set()) and _leaks(qa, texts) == ([], set())
    assert _leaks(shop, [*texts, f"[{asin}] Lamp\n"])[0] == [asin]
    assert _leaks(qa, [*texts, f"The keeper of {name} is Bade."])[0] == [name]
    grid = tiny_base._grid_text(np.array(solution).reshape(4, 4), 2, 2)
    assert _leaks(sudoku, [*texts, grid + "R1C1 is 1.\n"])[1] == {solution}


def test_the_word_lists_are_not_the_envs():
    from ragen_envs.searchqa import knowledge
    from ragen_envs.webshop import catalog

    assert not set(tiny_base.SYLLABLES) & set(knowledge.SYLLABLES)
    assert not set(tiny_base.SYLLABLES) & set(catalog._BRAND_SYLLABLES)


def test_generated_grids_are_never_full():
    rng = np.random.default_rng(0)
    for _ in range(300):
        for g in _grids_in(make_example(rng, "grid").text):
            assert 0 in g


# ------------------------------------------------------------------------------------------------ the recipe
def test_the_shipped_recipe_is_the_recorded_one():
    got = recipe_digest(DEFAULT_RECIPE)
    assert got == TINY_BASE_RECIPE_SHA256, f"recipe digest {got} != recorded {TINY_BASE_RECIPE_SHA256}: " + (
        WHAT_TO_RECORD)


def test_the_digest_follows_the_recipe_the_generator_and_the_tiny_model(monkeypatch):
    base = recipe_digest(SMALL)
    assert recipe_digest(SMALL) == base
    for change in ({"steps": 7}, {"lr": 2e-3}, {"data_seed": 1}, {"chat": 0.5}, {"mix": (("lookup", 1.0),)},
                   {"stages": ((1.0, 4, 10),)}, {"model": (("hidden", 64),)}):
        assert recipe_digest(dataclasses.replace(SMALL, **change)) != base, change
    monkeypatch.setattr(tiny_base, "NOUNS", (*tiny_base.NOUNS[:-1], "teapot"))  # an edit of the generator
    assert recipe_digest(SMALL) != base
    monkeypatch.undo()
    monkeypatch.setattr(tiny_base, "TINY_BASE_VERSION", tiny_base.TINY_BASE_VERSION + 1)
    assert recipe_digest(SMALL) != base
    monkeypatch.undo()
    monkeypatch.setattr(tiny_base, "TINY_MODEL_SHA256", {**tiny.TINY_MODEL_SHA256, "text": "0" * 64})
    assert recipe_digest(SMALL) != base


def test_a_recipe_is_checked():
    with pytest.raises(ValueError, match="mix"):
        BaseRecipe(mix=(("sokoban", 1.0),))
    with pytest.raises(ValueError, match="stages"):
        BaseRecipe(stages=((0.0, 3, 10),))
    with pytest.raises(ValueError, match="steps"):
        BaseRecipe(steps=0)


# ------------------------------------------------------------------------------------------------ build and load
@pytest.fixture(scope="module")
def small_cache(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny-base-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tiny_base, "BUILD_EVAL_N", 4)
        path = tiny_base.default_tiny_base_dir(root, SMALL)
    return root, path


def test_the_cache_builds_once_per_recipe(small_cache, monkeypatch):
    root, path = small_cache
    meta = json.loads((path / "ragen_tiny_base.json").read_text())
    assert meta["recipe_sha256"] == recipe_digest(SMALL) and meta["last"]["step"] == SMALL.steps
    assert meta["start_model_sha256"] == tiny.TINY_MODEL_SHA256["text"]  # it starts from the pinned tiny model
    assert set(meta["before"]) == set(meta["after"]) == set(tiny_base.EVAL_SHAPES)

    def no_build(*a, **k):
        raise AssertionError("a cached base model must not be built again")

    monkeypatch.setattr(tiny_base, "build_tiny_base_model", no_build)
    assert tiny_base.default_tiny_base_dir(root, SMALL) == path
    with pytest.raises(AssertionError, match="built again"):  # another recipe is another folder
        tiny_base.default_tiny_base_dir(root, dataclasses.replace(SMALL, steps=5))
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) == [path.name]


def test_a_damaged_cached_base_model_is_refused_not_loaded(small_cache, tmp_path, monkeypatch):
    """The build records the trained model's digest; a cached folder whose weights were edited is refused."""
    root, path = small_cache
    meta = json.loads((path / "ragen_tiny_base.json").read_text())
    assert meta["sha256"] == tiny.tiny_model_digest(path)
    copy = tmp_path / "cache"
    shutil.copytree(root, copy)
    weights = copy / path.name / "model.safetensors"
    raw = bytearray(weights.read_bytes())
    raw[-5] ^= 0x01
    weights.write_bytes(bytes(raw))
    monkeypatch.setattr(tiny, "_VERIFIED", {})
    with pytest.raises(tiny.CorruptTinyModelError, match="modified or damaged"):
        tiny_base.default_tiny_base_dir(copy, SMALL)


def test_load_policy_tiny_base_is_the_tiny_model_pretrained(small_cache, monkeypatch):
    from transformers import Qwen2ForCausalLM

    root, path = small_cache
    monkeypatch.setenv("RAGEN2_CACHE", str(root))
    monkeypatch.setattr(tiny_base, "DEFAULT_RECIPE", SMALL)
    policy = load_policy(TINY_BASE)
    assert isinstance(policy.model, Qwen2ForCausalLM)
    tiny_dir = tiny.default_tiny_model_dir(root)
    for name in ("tokenizer.json", "chat_template.jinja"):  # the tiny tokenizer and chat template, byte for byte
        assert (path / name).read_bytes() == (tiny_dir / name).read_bytes()
    assert policy.tokenizer.chat_template == tiny.CHAT_TEMPLATE
    ref = load_policy(str(tiny_dir))
    for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "tie_word_embeddings"):
        assert getattr(policy.model.config, key) == getattr(ref.model.config, key), key
    trained = dict(policy.model.named_parameters())
    assert any(not torch.equal(p, trained[n]) for n, p in ref.model.named_parameters())  # weights moved
    assert tiny_model_is_unchanged(tiny_dir)


def tiny_model_is_unchanged(tiny_dir: Path) -> bool:
    return tiny.tiny_model_digest(tiny_dir) == tiny.TINY_MODEL_SHA256["text"]


def test_pretraining_teaches_the_copy(tmp_path):
    """A small-scale pre-training (the copy task alone: one id of 1-4 characters shown, then repeated; 400 steps of
    16 on a hidden-64 tiny model, about 8 CPU-seconds) lifts held-out exact copying from the untrained model's 0 to
    about 0.57 (measured), and the answer tokens' accuracy from chance (1/34) to about 0.74."""
    from transformers import AutoModelForCausalLM

    recipe = BaseRecipe(steps=400, batch_size=16, lr=3e-3, warmup=20, decay=0.3, mix=(("copy", 1.0),), chat=0.0,
                        stages=((1.0, 1, 4),), model=(("hidden", 64),))
    tok = _tokenizer()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = AutoModelForCausalLM.from_pretrained(tiny.build_tiny_model(tmp_path, **dict(recipe.model)))
        rng = np.random.default_rng(tiny_base.EVAL_SEED)
        held_out = [make_example(rng, "copy", 1, 4, kind="id") for _ in range(100)]
        before = exact_match(model, tok, held_out), _token_accuracy(model, tok, held_out)
        tiny_base.pretrain(model, tok, recipe)
        after = exact_match(model, tok, held_out), _token_accuracy(model, tok, held_out)
    finally:
        torch.set_num_threads(threads)
    assert before[0] <= 0.02 and before[1] < 0.1, before
    assert after[0] >= 0.3 and after[1] >= 0.5, after


@torch.no_grad()
def _token_accuracy(model, tok, examples) -> float:
    x, y = tiny_base._batch([encode_example(tok, e) for e in examples], tok.pad_token_id)
    pred = model.lm_head(model.model(input_ids=x).last_hidden_state).argmax(-1)
    mask = y != -100
    return float((pred[mask] == y[mask]).float().mean())


def _tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny.default_tiny_model_dir())


def test_the_lean_answer_forward_is_transformers_forward():
    """`_answer_logits` runs the last layer and the output layer only at the positions that predict an answer token;
    its logits, targets and every parameter's gradient equal transformers' full forward read at those positions, on
    the shipped tiny model at the pre-training's own shapes (10-row tables, chat answers, grids: up to ~300 tokens,
    answers mid-row and at the end) and on a row with no answer at all."""
    from transformers import AutoModelForCausalLM

    tok = _tokenizer()
    model = AutoModelForCausalLM.from_pretrained(tiny.default_tiny_model_dir(), dtype=torch.float32)
    torch.manual_seed(0)
    with torch.no_grad():  # away from the initialisation, so every weight matters to the comparison
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    rng = np.random.default_rng(5)
    examples = [make_example(rng, task, 10, 10, chat) for task in TASKS for chat in (False, True)]
    encoded = [encode_example(tok, e) for e in examples]
    ids, _ = encoded[0]
    encoded.append((ids[:12], [False] * 12))  # a short row that predicts nothing
    x, y = tiny_base._batch(encoded, tok.pad_token_id)
    assert x.shape[1] > 150 and int((y != -100).sum()) > 100

    def grads_of(fn):
        model.zero_grad(set_to_none=True)
        logits, target = fn(x, y)
        torch.nn.functional.cross_entropy(logits, target, reduction="sum").backward()
        return logits.detach(), target, {n: p.grad.clone() for n, p in model.named_parameters()}

    def full(x, y):
        read = y != -100
        return model.lm_head(model.model(input_ids=x).last_hidden_state[read]), y[read]

    want_logits, want_target, want_grads = grads_of(full)
    got_logits, got_target, got_grads = grads_of(lambda x, y: tiny_base._answer_logits(model, x, y))
    assert torch.equal(got_target, want_target)
    torch.testing.assert_close(got_logits, want_logits, atol=2e-5, rtol=1e-5)
    for name, g in want_grads.items():
        torch.testing.assert_close(got_grads[name], g, atol=1e-5, rtol=1e-4, msg=name)
