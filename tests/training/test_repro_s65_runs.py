"""Reproducible runs, checked as a researcher checks them, on real (shortened) runs of a shipped config with a warm
start and the held-out probe (`configs/collapse_sokoban.toml`): two fresh processes, one of them started from the
other's recorded ``config.toml`` alone, write the same run; a run extended or interrupted and resumed from an older
checkpoint, its warm start read from the cache, writes the uninterrupted run's records; the warm-start cache and
``provenance.json`` name what changes the numbers beside the code and the config (the CPU and the thread count)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ragen_core.training import provenance
from ragen_core.training.config import load_config
from ragen_core.training.trainer import Trainer
from ragen_core.training.warm_cache import cache_key, step0_key

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "collapse_sokoban.toml"
#: collapse_sokoban shortened to seconds: warm start, in-batch MI every step, validation and probe every 2 steps.
SHORT = ["warm_start.sft_episodes=16", "warm_start.epochs=1", "rollout.groups=2", "rollout.group_size=2",
         "eval.episodes=4", "eval.every=2", "mi.every=1", "mi.probe_prompts=4", "mi.probe_group_size=2",
         "mi.probe_every=2", "filter.enabled=false", "run.progress=false"]
FILES = ("metrics.jsonl", "val_outcomes.jsonl", "rollouts.jsonl")


def _lines(path: Path) -> list[dict]:
    """The JSON records of a .jsonl file, wall-clock times (``perf/*_s``) and the cache's own flags left out: the
    keys that differ between two runs of one config by construction (docs/train.md)."""
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    return [{k: v for k, v in r.items() if not (k.startswith("perf/") and k.endswith(("_s", "_s_original")))
             and k != "sft/cached"} for r in rows]


def _weights_digest(run_dir: Path) -> str:
    """SHA-256 of the final checkpoint's model tensors (names and bytes)."""
    state = torch.load(run_dir / "checkpoints" / "latest.pt", map_location="cpu", weights_only=False)["model"]
    h = hashlib.sha256()
    for name in sorted(state):
        h.update(name.encode() + state[name].contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _run(run_dir: Path, *overrides: str, resume: bool = False) -> Trainer:
    trainer = Trainer(load_config(CONFIG, SHORT + list(overrides)), run_dir, resume=resume)
    trainer.fit()
    return trainer


# ------------------------------------------------------------------ two fresh processes
def test_two_fresh_processes_one_from_the_recorded_config_alone_write_the_same_run(tmp_path):
    def train(*args: str) -> None:
        done = subprocess.run([sys.executable, "-m", "ragen_core.apps.train", *args], cwd=ROOT, text=True,
                              capture_output=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]

    train(str(CONFIG), *SHORT, "run.steps=2", "run.seed=3", "--run-dir", str(tmp_path / "a"))
    recorded = tmp_path / "recorded.toml"  # the file a reader gets with the run folder, nothing else
    recorded.write_text((tmp_path / "a" / "config.toml").read_text())
    train(str(recorded), "--run-dir", str(tmp_path / "b"))
    a, b = tmp_path / "a", tmp_path / "b"
    assert [r["step"] for r in _lines(a / "metrics.jsonl")] == [0, 0, 0, 1, 2]  # warm start, validation, probe
    assert any("probe/retrieval_margin" in r for r in _lines(a / "metrics.jsonl"))
    for name in FILES:
        assert _lines(a / name) == _lines(b / name), name
    assert _weights_digest(a) == _weights_digest(b)


# ------------------------------------------------------------------ resume, and the warm start from the cache
def test_extended_and_interrupted_runs_from_the_cache_resume_as_the_uninterrupted_run(tmp_path, monkeypatch):
    cache = f"warm_start.cache_dir={tmp_path / 'cache'}"
    straight = tmp_path / "straight"  # fills the cache: warm start, step-0 validation and probe
    _run(straight, cache, "run.steps=3", "run.save_every=2")

    # Stopped after step 1 (right before step 2's validation and probe), then extended to 3 steps.
    extended = tmp_path / "extended"
    first = _run(extended, cache, "run.steps=1")
    assert first.log.history[0]["sft/cached"] == 1.0
    _run(extended, cache, "run.steps=3", resume=True)
    # Its records are the straight run's, plus the end-of-run validation its 1-step run took at step 1.
    got, want = _lines(extended / "metrics.jsonl"), _lines(straight / "metrics.jsonl")
    extra = [r for r in got if r["step"] == 1 and "val/success" in r]
    assert len(extra) == 1 and set(extra[0]) <= {"step", "val/success", "val/return", "val/format_valid",
                                                 "val/response_length"}
    assert [r for r in got if r is not extra[0]] == want
    val = _lines(extended / "val_outcomes.jsonl")
    assert [r for r in val if r["step"] != 1] == _lines(straight / "val_outcomes.jsonl")

    # Ctrl-C inside step 2's update with run.save_every = 2: the resume goes back to the step-0 checkpoint.
    interrupted = tmp_path / "interrupted"
    real_update = Trainer.update

    def interrupt_in_step_2(self, rows, images):
        if self.state.step == 1:
            raise KeyboardInterrupt
        return real_update(self, rows, images)

    monkeypatch.setattr(Trainer, "update", interrupt_in_step_2)
    with pytest.raises(KeyboardInterrupt):
        _run(interrupted, cache, "run.steps=3", "run.save_every=2")
    monkeypatch.setattr(Trainer, "update", real_update)
    assert torch.load(interrupted / "checkpoints" / "latest.pt", weights_only=False)["step"] == 0
    _run(interrupted, cache, "run.steps=3", "run.save_every=2", resume=True)

    for name in FILES:
        assert _lines(interrupted / name) == _lines(straight / name), name
    assert _lines(extended / "rollouts.jsonl") == _lines(straight / "rollouts.jsonl")
    assert _weights_digest(extended) == _weights_digest(straight) == _weights_digest(interrupted)


# ------------------------------------------------------------------ what changes the numbers beside the config
@pytest.fixture
def threads():
    """Set torch's thread count in a test; the process's count is restored after it."""
    before = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(before)


def test_the_warm_start_cache_key_names_the_thread_count_and_the_cpu(threads, monkeypatch):
    # Another thread count or CPU rounds differently (docs/train.md): an entry of one must not serve the other.
    cfg = load_config(CONFIG, SHORT)
    threads(1)
    one = cache_key(cfg), step0_key(cfg, "probe")
    threads(2)
    two = cache_key(cfg), step0_key(cfg, "probe")
    assert one[0] != two[0] and one[1] != two[1]
    monkeypatch.setattr(provenance, "cpu_model", lambda: "Another CPU with AVX-512")
    assert cache_key(cfg) not in (one[0], two[0])


def _cpuinfo_model() -> str | None:
    """The first ``model name`` line of /proc/cpuinfo, read here independently of the code under test."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    return next((line.partition(":")[2].strip() for line in text.splitlines() if line.startswith("model name")),
                None)


def test_provenance_records_the_thread_count_and_the_cpu_the_run_computed_with(tmp_path, threads):
    threads(1)
    cfg = load_config(CONFIG, SHORT + ["warm_start.sft_episodes=0", "mi.probe_prompts=0", "run.steps=0",
                                       "run.threads=2", "eval.at_start=false"])
    Trainer(cfg, tmp_path / "run").fit()
    record = json.loads((tmp_path / "run" / "provenance.json").read_text())
    assert record["torch_threads"] == 2
    assert record["cpu"] == _cpuinfo_model()
