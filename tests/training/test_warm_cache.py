"""The warm-start cache: a hit reproduces the run that trained it, and the key covers what the warm start reads."""

from __future__ import annotations

import json

from ragen_core.training.config import load_config
from ragen_core.training.trainer import Trainer
from ragen_core.training.warm_cache import cache_key

BASE = ["env.id=ragen/Bandit-v0", "model.path=tiny", "rollout.groups=2", "rollout.group_size=4",
        "rollout.max_turns=1", "rollout.max_new_tokens=24", "rollout.system_prompt=false", "run.steps=2",
        "run.progress=false", "run.device=cpu", "algo.name=grpo", "algo.lr=1e-3", "algo.mini_batch_size=8",
        "algo.micro_batch_size=8", "eval.episodes=4", "eval.every=2", "mi.every=2",
        "warm_start.sft_episodes=8", "warm_start.batch_size=8", "warm_start.epochs=1"]


def _run(run_dir, *overrides):
    cfg = load_config(None, BASE + list(overrides))
    return Trainer(cfg, run_dir).fit()


def _comparable(history):
    """Everything but timings and the cache flag."""
    return [{k: v for k, v in r.items() if not k.startswith("perf/") and k != "sft/cached"} for r in history]


def test_a_cache_hit_reproduces_the_run_that_filled_it(tmp_path):
    cache = tmp_path / "cache"
    first = _run(tmp_path / "a", f"warm_start.cache_dir={cache}")
    second = _run(tmp_path / "b", f"warm_start.cache_dir={cache}")
    plain = _run(tmp_path / "c")
    assert first[0]["sft/cached"] == 0.0 and second[0]["sft/cached"] == 1.0 and plain[0]["sft/cached"] == 0.0
    assert len(list(cache.glob("*.pt"))) == 1
    assert _comparable(first) == _comparable(second) == _comparable(plain)
    logged = [json.loads(x) for x in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    assert logged[0]["perf/sft_s_original"] == first[0]["perf/sft_s"]


def test_a_different_warm_start_is_a_different_entry(tmp_path):
    cache = tmp_path / "cache"
    _run(tmp_path / "a", f"warm_start.cache_dir={cache}")
    other = _run(tmp_path / "b", f"warm_start.cache_dir={cache}", "warm_start.action_noise=0.5")
    assert other[0]["sft/cached"] == 0.0
    assert len(list(cache.glob("*.pt"))) == 2


def test_the_key_ignores_what_follows_the_warm_start_and_follows_what_precedes_it():
    key = cache_key(load_config(None, BASE))
    for later in ("filter.enabled=false", "filter.strategy=random", "algo.entropy_coef=0.1", "run.steps=9",
                  "eval.episodes=4", "mi.every=5", "run.name=x", "warm_start.cache_dir=/elsewhere"):
        assert cache_key(load_config(None, BASE + [later])) == key, later
    for earlier in ("run.seed=1", "warm_start.sft_episodes=17", "warm_start.lr=2e-3", "env.kwargs={high_prob=0.4}",
                    "rollout.max_new_tokens=25", "model.dtype=bfloat16"):
        assert cache_key(load_config(None, BASE + [earlier])) != key, earlier


def test_arms_of_a_seed_share_their_step0_measurements_and_train_as_if_they_had_taken_them(tmp_path):
    """An arm that reads its step-0 validation and probe from the cache logs the numbers and outcome lines it would
    have computed, and the rest of its run is the run it would have been (the measurements' generators are their
    own: skipping them moves no training stream)."""
    probe = ["mi.probe_prompts=2", "mi.probe_group_size=2", "mi.probe_every=2"]
    shared = tmp_path / "cache"
    _run(tmp_path / "a", f"warm_start.cache_dir={shared}", *probe)  # the first arm fills the cache
    hit = _run(tmp_path / "b", f"warm_start.cache_dir={shared}", *probe, "filter.enabled=false")
    own = _run(tmp_path / "c", f"warm_start.cache_dir={tmp_path / 'own'}", *probe, "filter.enabled=false")
    assert len(list(shared.glob("*.step0.json"))) == 2  # one validation, one probe
    step0 = [r for r in hit if r["step"] == 0 and ("val/success" in r or "probe/retrieval_margin" in r)]
    assert len(step0) == 2
    assert _comparable(hit) == _comparable(own)
    for name in ("val_outcomes.jsonl",):
        assert (tmp_path / "b" / name).read_text() == (tmp_path / "c" / name).read_text()


def test_the_step0_key_follows_the_measurement_settings_not_their_cadence():
    from ragen_core.training.warm_cache import step0_key

    cfg = load_config(None, BASE)
    key = step0_key(cfg, "validation")
    assert step0_key(cfg, "probe") != key
    for same in ("eval.every=7", "mi.probe_every=3", "filter.enabled=false", "algo.entropy_coef=0.1"):
        assert step0_key(load_config(None, BASE + [same]), "validation") == key, same
    for other in ("eval.episodes=5", "eval.greedy=false", "mi.probe_prompts=3", "run.seed=1",
                  "warm_start.lr=2e-3", "env.val_seed=7"):
        assert step0_key(load_config(None, BASE + [other]), "validation") != key, other


def test_the_key_follows_the_source_of_the_demonstrations(tmp_path, monkeypatch):
    """Editing the env's package (its oracle, its habit, its wording) gives a new key although the config is the
    same, so a cached warm start trained on the old demonstrations is never handed back; another package's edit
    does not."""
    import gymnasium as gym

    from ragen_core.training.warm_cache import demonstration_code_digest

    for name in ("pkg_a", "pkg_b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("")
        (tmp_path / name / "env.py").write_text("import gymnasium as gym\n\nclass E(gym.Env):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    gym.register(id="test/DigestA-v0", entry_point="pkg_a.env:E")
    try:
        before = demonstration_code_digest("test/DigestA-v0")
        (tmp_path / "pkg_b" / "env.py").write_text("# another env's edit\n")
        assert demonstration_code_digest("test/DigestA-v0") == before
        (tmp_path / "pkg_a" / "helpers.py").write_text("HABIT = 'finish[unknown]'\n")  # a module beside the env's
        assert demonstration_code_digest("test/DigestA-v0") != before
    finally:
        gym.registry.pop("test/DigestA-v0", None)
    assert demonstration_code_digest("ragen/SearchQA-v0") != demonstration_code_digest("ragen/Bandit-v0")


def test_the_key_follows_the_code_that_trains_and_measures_not_the_apps(tmp_path):
    """The cache is shared across studies and commits, so an edit of the forward, the SFT loop or the trainer must
    give a new key; an edit of an app or a scale-out adapter, which trains nothing here, must not."""
    from ragen_core.training.warm_cache import training_code_digest

    for rel in ("rollout.py", "policy/fast_qwen2.py", "training/sft.py", "apps/reproduce/cli.py",
                "integrations/trl.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x = 1\n")
    before = training_code_digest(tmp_path)
    for rel in ("apps/reproduce/cli.py", "integrations/trl.py"):
        (tmp_path / rel).write_text("x = 2\n")
        assert training_code_digest(tmp_path) == before, rel
    for rel in ("rollout.py", "policy/fast_qwen2.py", "training/sft.py"):
        (tmp_path / rel).write_text((tmp_path / rel).read_text() + "# rounding\n")
        after = training_code_digest(tmp_path)
        assert after != before, rel
        before = after
    (tmp_path / "policy" / "new_forward.py").write_text("")  # a new module counts too
    assert training_code_digest(tmp_path) != before
    before = training_code_digest(tmp_path)
    (tmp_path / "policy" / "csrc").mkdir()
    (tmp_path / "policy" / "csrc" / "decode_step.cpp").write_text("// the compiled decoding steps\n")
    assert training_code_digest(tmp_path) != before  # the C++ source of the decoding steps counts
    assert training_code_digest() == training_code_digest()  # the shipped package: stable between calls
