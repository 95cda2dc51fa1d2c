"""The Python Trainer's hold on its run folder: the folder lock while it writes (a second process is refused in one
line; released at the end of fit(), also when it fails; `ragen train`'s own lock does not block its Trainer), a
rollouts.jsonl that always describes the run, and a TensorBoard writer closed at the end of fit()."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from stand_in_envs import ParityEnv, register

from ragen_core.locks import FolderLocked, holding_folder, lock_folder, release_folder
from ragen_core.training.config import load_config
from ragen_core.training.trainer import Trainer

ENV_ID = register("test/ParityLifecycle-v0", ParityEnv)
HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

#: A second process: builds `Trainer(cfg, run_dir, resume=True)` and prints OK, or LOCKED and the error's line.
CHILD = f"""
import json, sys
sys.path.insert(0, {str(HERE)!r})
from stand_in_envs import ParityEnv, register
register({ENV_ID!r}, ParityEnv)
from ragen_core.training.config import load_config
from ragen_core.training.trainer import FolderLocked, Trainer
cfg = load_config(None, json.loads(sys.argv[1]))
try:
    Trainer(cfg, sys.argv[2], resume=True)
    print("OK")
except FolderLocked as e:
    print("LOCKED " + str(e))
"""

#: A second process that only tries the folder's lock (no Trainer): prints OK or LOCKED.
TRY_LOCK = """
import sys
from ragen_core.locks import FolderLocked, lock_folder
try:
    lock_folder(sys.argv[1]); print("OK")
except FolderLocked:
    print("LOCKED")
"""


@pytest.fixture(scope="module")
def model_dir(make_tiny_model):
    return make_tiny_model("value 12 Say anything. go")


def overrides(model_dir: Path, *extra: str) -> list[str]:
    return [f"env.id={ENV_ID}", f"model.path={model_dir}", "rollout.groups=2", "rollout.group_size=2",
            "rollout.max_turns=1", "rollout.max_new_tokens=4", "run.steps=1", "run.progress=false", "run.device=cpu",
            "algo.name=grpo", "algo.lr=1e-3", "algo.mini_batch_size=4", "algo.micro_batch_size=4",
            "eval.episodes=2", "eval.every=1", "mi.every=0", "filter.enabled=false", *extra]


def child_trainer(args: list[str], run_dir: Path) -> str:
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(args), str(run_dir)], cwd=ROOT, text=True,
                         capture_output=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip()


def child_lock(folder: Path) -> str:
    out = subprocess.run([sys.executable, "-c", TRY_LOCK, str(folder)], cwd=ROOT, text=True, capture_output=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip()


def lock_is_free(folder: Path) -> bool:
    """Whether no descriptor holds the folder's lock (flock: one of this process's own conflicts as well)."""
    try:
        fd = lock_folder(folder)
    except FolderLocked:
        return False
    release_folder(fd)
    return True


# ------------------------------------------------------------------ the folder lock

@pytest.mark.parametrize("fails", [False, True])
def test_a_second_process_is_refused_while_fit_writes_and_admitted_after(model_dir, tmp_path, fails):
    """Two Python Trainers on one folder (two processes) used to interleave metrics.jsonl and checkpoints: the
    second now gets FolderLocked in one line while the first's fit() runs, and the lock is released when fit()
    returns or raises."""
    args = overrides(model_dir)
    run_dir = tmp_path / "run"
    seen: list[str] = []

    def on_step(record: dict) -> None:
        if not seen:  # the first record (the step-0 validation) follows the first checkpoint: resumable
            seen.append(child_trainer(args, run_dir))
            if fails:
                raise RuntimeError("stopped by the test")

    trainer = Trainer(load_config(None, args), run_dir, on_step=on_step)
    if fails:
        with pytest.raises(RuntimeError, match="stopped by the test"):
            trainer.fit()
    else:
        trainer.fit()
    assert seen[0].startswith("LOCKED "), seen
    line = seen[0].removeprefix("LOCKED ")
    assert "\n" not in line and str(run_dir) in line and "another process" in line, line
    assert lock_is_free(run_dir)
    assert child_trainer(args, run_dir) == "OK"  # released: the run can be resumed by another process


def test_the_lock_held_by_this_process_is_not_taken_again_and_stays_held(tmp_path):
    """`ragen train` locks its run folder, then builds the Trainer in the same process: the Trainer's lock must
    neither refuse it (flock conflicts between two descriptors of one process) nor release the command's lock."""
    fd = lock_folder(tmp_path)
    try:
        with holding_folder(tmp_path):
            assert child_lock(tmp_path) == "LOCKED"
        assert child_lock(tmp_path) == "LOCKED"  # still the command's
    finally:
        release_folder(fd)
    assert child_lock(tmp_path) == "OK"
    with holding_folder(tmp_path):  # not held here: taken, and released at the end
        assert child_lock(tmp_path) == "LOCKED"
    assert child_lock(tmp_path) == "OK"


# ------------------------------------------------------------------ rollouts.jsonl describes the run

def test_a_resume_that_keeps_no_rollouts_removes_the_earlier_file(model_dir, tmp_path):
    """A run that kept rollouts, resumed with run.rollouts_steps=0: the old file (its final batch sampled by weights
    the run has since trained on) stayed, and `ragen diagnose` read it as the run's."""
    run_dir = tmp_path / "run"
    Trainer(load_config(None, overrides(model_dir, "run.rollouts_steps=2")), run_dir).fit()
    assert (run_dir / "rollouts.jsonl").is_file()
    cfg = load_config(None, overrides(model_dir, "run.rollouts_steps=0", "run.steps=2"))
    with pytest.warns(UserWarning, match="removed .*rollouts.jsonl: run.rollouts_steps=0"):
        trainer = Trainer(cfg, run_dir, resume=True)
    assert not (run_dir / "rollouts.jsonl").exists()
    trainer.fit()
    assert not (run_dir / "rollouts.jsonl").exists()


def test_a_new_run_keeping_no_rollouts_removes_a_file_left_in_its_folder(model_dir, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "rollouts.jsonl").write_text(json.dumps({"group": "final-g0", "reward": 1.0, "step": 9,
                                                        "final": True}) + "\n")
    Trainer(load_config(None, overrides(model_dir, "run.rollouts_steps=0")), run_dir).fit()
    assert not (run_dir / "rollouts.jsonl").exists()


# ------------------------------------------------------------------ TensorBoard

class RecordingWriter:
    """Stands for torch's SummaryWriter (the tensorboard package is an extra): records scalars and close()."""

    def __init__(self) -> None:
        self.scalars: list[tuple[str, float, int]] = []
        self.closed = False

    def add_scalar(self, key: str, value: float, step: int) -> None:
        assert not self.closed, "written after close()"
        self.scalars.append((key, value, step))

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize("fails", [False, True])
def test_the_tensorboard_writer_is_closed_when_fit_ends(model_dir, tmp_path, fails):
    def on_step(record: dict) -> None:
        if fails:
            raise RuntimeError("stopped by the test")

    trainer = Trainer(load_config(None, overrides(model_dir)), tmp_path / "run", on_step=on_step)
    writer = RecordingWriter()
    trainer.log.tensorboard, trainer.log._tb = True, writer  # run.tensorboard, with the writer already open
    if fails:
        with pytest.raises(RuntimeError, match="stopped by the test"):
            trainer.fit()
    else:
        trainer.fit()
    assert writer.scalars and writer.closed
