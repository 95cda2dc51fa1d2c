"""rollouts.jsonl over a long run: what each step writes and what stays in memory.

The file keeps the last `run.rollouts_steps` batches (and, at the end, the final one). It was rewritten whole at
every step from every kept batch held in memory, so a run keeping all its steps' rollouts wrote O(steps) bytes per
step (O(steps^2) in all) and held every batch. Now a batch is written after the others while the window is not full,
the file is rewritten only when a batch leaves the window, and only each batch's place in the file stays in memory;
what the file holds after each step is unchanged (checked here against lines built independently of the class).
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from ragen_core.policy.identity import weights_sha256
from ragen_core.training.trainer import RolloutsFile

LONG = 4000  # characters of each prompt: what a real chat-templated prompt weighs


class _Tok:
    def decode(self, ids, skip_special_tokens=False):
        return "".join(chr(ord("a") + i % 26) for i in ids)


def _policy(seed: int = 0):
    torch.manual_seed(seed)
    return SimpleNamespace(model=torch.nn.Linear(3, 2), tokenizer=_Tok())


def _batch(step: int, groups: int = 2, size: int = 2, empty: bool = False):
    trajs = []
    for g in range(groups):
        for k in range(size):
            turns = [] if empty else [SimpleNamespace(prompt_ids=list(range(step, step + LONG)),
                                                      response_text=f"answer {step}.{g}.{k} \u00e9")]
            trajs.append(SimpleNamespace(turns=turns, group=g, episode_return=float(step + g - k) / 3))
    return SimpleNamespace(trajectories=trajs)


def _expected_lines(step: int, policy, final: bool = False, empty: bool = False) -> list[str]:
    """The lines of one batch, built from the format's definition (not by the class)."""
    if empty:
        return []
    sha = weights_sha256(policy.model)
    prompt_of = _Tok().decode
    out = []
    for traj in _batch(step).trajectories:
        rec = {"group": f"{'final' if final else f's{step}'}-g{traj.group}", "reward": traj.episode_return,
               "prompt": prompt_of(traj.turns[0].prompt_ids), "response": traj.turns[0].response_text,
               "model": sha, "step": step}
        if final:
            rec["final"] = True
        out.append(json.dumps(rec))
    return out


class _Writes:
    """Counts the rewrites of rollouts.jsonl (a temporary file renamed over it) and the bytes written to it."""

    def __init__(self, monkeypatch):
        self.replaced = 0
        self.bytes = 0
        real_replace, real_write_bytes, real_write_text = Path.replace, Path.write_bytes, Path.write_text

        def replace(path, target):
            if Path(target).name == "rollouts.jsonl":
                self.replaced += 1
            return real_replace(path, target)

        def write_bytes(path, data):
            self.bytes += len(data)
            return real_write_bytes(path, data)

        def write_text(path, data, *a, **kw):
            self.bytes += len(data.encode("utf-8"))
            return real_write_text(path, data, *a, **kw)

        monkeypatch.setattr(Path, "replace", replace)
        monkeypatch.setattr(Path, "write_bytes", write_bytes)
        monkeypatch.setattr(Path, "write_text", write_text)


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def test_a_window_that_covers_the_run_writes_each_batch_once(tmp_path, monkeypatch):
    path, policy, steps = tmp_path / "rollouts.jsonl", _policy(), 30
    writes = _Writes(monkeypatch)
    rf = RolloutsFile(path, steps=100)
    expected: list[str] = []
    for step in range(1, steps + 1):
        rf.add(step, _batch(step), policy)
        expected += _expected_lines(step, policy)
        assert _lines(path) == expected
    rf.add(steps, _batch(steps), policy, final=True)
    assert _lines(path) == expected + _expected_lines(steps, policy, final=True)
    # The file was never rewritten whole (it was, at every step: 31 rewrites of up to 30 batches).
    assert writes.replaced == 0
    assert writes.bytes == 0  # every batch went after the others, through an append, not a whole-file write


def test_no_batch_stays_in_memory(tmp_path):
    """The old class held every kept batch's rows (prompts included) for the whole run: 30 x 4 prompts here."""
    rf, policy = RolloutsFile(tmp_path / "rollouts.jsonl", steps=100), _policy()
    for step in range(1, 31):
        rf.add(step, _batch(step), policy)
    held = len(pickle.dumps(vars(rf)))
    assert held < 4 * LONG, held  # less than one prompt's text, for 120 prompts written


@pytest.mark.parametrize("window", [1, 2, 3])
def test_a_full_window_keeps_the_last_steps_then_the_final_batch(tmp_path, monkeypatch, window):
    path, policy = tmp_path / "rollouts.jsonl", _policy()
    writes = _Writes(monkeypatch)
    rf = RolloutsFile(path, steps=window)
    for step in range(1, 11):
        rf.add(step, _batch(step), policy)
        expected = [x for s in range(max(1, step - window + 1), step + 1) for x in _expected_lines(s, policy)]
        assert _lines(path) == expected
    # Rewritten only once a batch left the window: steps window+1 .. 10.
    assert writes.replaced == 10 - window
    rf.add(10, _batch(10), policy, final=True)
    assert _lines(path) == expected + _expected_lines(10, policy, final=True)


def test_an_empty_batch_leaves_the_window_at_the_next_step(tmp_path):
    path, policy = tmp_path / "rollouts.jsonl", _policy()
    rf = RolloutsFile(path, steps=3)
    for step in range(1, 7):
        rf.add(step, _batch(step, empty=step == 4), policy)
    # Step 4 wrote nothing and took no place once step 5 came: steps 3, 5 and 6 remain.
    assert _lines(path) == [x for s in (3, 5, 6) for x in _expected_lines(s, policy)]


def test_more_steps_after_the_final_batch_drop_it(tmp_path):
    """A fit() continued after its end (run.steps raised in a notebook): the final batch was not a step's."""
    path, policy = tmp_path / "rollouts.jsonl", _policy()
    rf = RolloutsFile(path, steps=5)
    for step in (1, 2):
        rf.add(step, _batch(step), policy)
    rf.add(2, _batch(2), policy, final=True)
    rf.add(3, _batch(3), policy)
    rf.add(4, _batch(4), policy)
    assert _lines(path) == [x for s in (1, 2, 3, 4) for x in _expected_lines(s, policy)]


def _window(step: int, window: int, policy) -> list[str]:
    """What an uninterrupted run's file holds after `step`: the batches of its last `window` steps."""
    return [x for s in range(max(1, step - window + 1), step + 1) for x in _expected_lines(s, policy)]


@pytest.mark.parametrize("window,checkpoint", [(5, 3), (3, 4)])
def test_a_resume_drops_the_final_and_later_batches_then_appends(tmp_path, monkeypatch, window, checkpoint):
    """The run wrote steps 1-5 and its final batch, but its last checkpoint is `checkpoint` (run.save_every > 1):
    the resumed run trains the later steps again and ends with the file an uninterrupted run has."""
    path, policy = tmp_path / "rollouts.jsonl", _policy()
    rf = RolloutsFile(path, steps=window)
    for step in range(1, 6):
        rf.add(step, _batch(step), policy)
    rf.add(5, _batch(5), policy, final=True)
    writes = _Writes(monkeypatch)
    rf = RolloutsFile(path, steps=window, resume=True)
    for step in range(checkpoint + 1, 8):
        rf.add(step, _batch(step), policy)
        assert _lines(path) == _window(step, window, policy)
    rf.add(7, _batch(7), policy, final=True)
    assert _lines(path) == _window(7, window, policy) + _expected_lines(7, policy, final=True)
    # The first step after the resume rewrites the file (its later batches and final one go); then a rewrite only
    # when a batch leaves the window.
    assert writes.replaced == 1 + sum(1 for s in range(checkpoint + 2, 8) if s > window)


def test_a_write_cut_short_is_written_over(tmp_path):
    """An append stopped part-way (Ctrl-C in a notebook, then fit() again from the checkpoint) leaves a cut line:
    the next batch goes over it, not after it."""
    path, policy = tmp_path / "rollouts.jsonl", _policy()
    rf = RolloutsFile(path, steps=10)
    rf.add(1, _batch(1), policy)
    with open(path, "a", encoding="utf-8") as f:
        f.write('{"group": "s2-g0", "rew')
    rf.add(2, _batch(2), policy)
    assert _lines(path) == _expected_lines(1, policy) + _expected_lines(2, policy)


def test_a_file_removed_during_the_run_starts_again_with_a_warning(tmp_path):
    path, policy = tmp_path / "rollouts.jsonl", _policy()
    rf = RolloutsFile(path, steps=2)
    rf.add(1, _batch(1), policy)
    rf.add(2, _batch(2), policy)
    path.unlink()
    with pytest.warns(UserWarning, match="no longer holds the rollouts of steps 2-2"):
        rf.add(3, _batch(3), policy)
    assert _lines(path) == _expected_lines(3, policy)
    rf.add(4, _batch(4), policy)
    assert _lines(path) == _expected_lines(3, policy) + _expected_lines(4, policy)
