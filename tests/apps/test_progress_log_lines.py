"""Progress reports where they are shown: a terminal gets tqdm's bar, a log file or a pipe gets plain lines (no
carriage returns), at most one per interval, each with its count, rate and time left computed from the clock."""

from __future__ import annotations

import io
import re

import torch
from tqdm.std import tqdm

from ragen_core.progress import LogProgress, progress_bar
from ragen_core.rollout import RolloutSettings, make_envs
from ragen_core.training.sft import collect_sft_batch, sft_train


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_lines_at_most_one_per_interval_with_count_rate_and_time_left():
    clock, out = FakeClock(), io.StringIO()
    bar = LogProgress(100, desc="warm start (SFT)", unit="step", file=out, interval=30.0, clock=clock)
    written_at = []
    for k in range(1, 101):  # one step every 2 s: 200 s in all
        clock.now += 2.0
        before = out.getvalue().count("\n")
        bar.update(1)
        bar.set_postfix(loss=f"{1 / k:.3f}")
        if out.getvalue().count("\n") > before:
            written_at.append(k)
    bar.close()
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    # A line once 30 s have passed since the last: steps 15, 30, ..., 90 (at 2 s a step), then the last at close.
    assert written_at == [15, 30, 45, 60, 75, 90]
    assert len(lines) == 7
    first = lines[0]
    assert first.startswith("warm start (SFT): 15/100 step (15%)")
    assert "2 s/step" in first  # 15 steps in 30 s: slower than one a second reads as seconds per step
    assert "0:30 elapsed" in first
    assert "about 2:50 left" in first  # 85 steps at 2 s each
    assert first.endswith("loss=0.071")  # the postfix set at the step before the line (1/14)
    assert lines[-1].startswith("warm start (SFT): 100/100 step (100%)")
    assert "3:20 elapsed" in lines[-1] and "left" not in lines[-1]


def test_short_work_writes_nothing_and_a_resumed_count_rates_only_its_own_units():
    clock, out = FakeClock(), io.StringIO()
    bar = LogProgress(10, desc="eval", unit="ep", file=out, interval=30.0, clock=clock)
    for _ in range(10):
        clock.now += 1.0
        bar.update(1)
    bar.close()
    assert out.getvalue() == ""

    out = io.StringIO()
    bar = LogProgress(200, desc="train", unit="step", initial=150, file=out, interval=30.0, clock=clock)
    for _ in range(10):  # 10 steps of 4 s after a resume at step 150
        clock.now += 4.0
        bar.update(1)
    line = out.getvalue().splitlines()[0]
    assert line.startswith("train: 158/200 step (79%)")
    assert "4 s/step" in line  # 8 steps here in 32 s; the 150 before the resume took no time here
    assert "about 2:48 left" in line  # 42 steps at 4 s


def test_progress_bar_is_tqdm_on_a_terminal_and_lines_elsewhere():
    assert isinstance(progress_bar(5, desc="x", unit="u", file=Terminal()), tqdm)
    assert isinstance(progress_bar(5, desc="x", unit="u", file=io.StringIO()), LogProgress)


def test_the_warm_start_writes_no_carriage_return_into_a_log(make_tiny_policy, monkeypatch):
    """`ragen train ... 2> run.log`: the warm start's bar, drawn into a file, must not be a carriage-return
    stream (tqdm redraws its bar with '\\r' whatever the stream)."""
    import ragen_core.progress as progress

    monkeypatch.setattr(progress, "LOG_INTERVAL_S", 0.0)
    policy = make_tiny_policy("Left Right")
    envs = make_envs("ragen/Bandit-v0", 4)
    batch = collect_sft_batch(policy, envs, list(range(4)), RolloutSettings(max_turns=1))
    log = io.StringIO()
    monkeypatch.setattr("sys.stderr", log)
    sft_train(policy, batch, epochs=2, batch_size=2, generator=torch.Generator().manual_seed(0), progress=True)
    text = log.getvalue()
    assert "\r" not in text
    assert re.search(r"warm start \(SFT\): 4/4 step \(100%\)", text)
