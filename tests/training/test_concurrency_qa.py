"""Several processes on one run folder, one cache or one evaluation folder, as seeds run in parallel do.

The interleavings are forced, never hoped for: a process is stopped (SIGSTOP) at a known point, or the test holds
the lock a running process holds, or it leaves the files a writer killed mid-write leaves. Tiny Bandit runs of a
tiny model (`bandit_cli`)."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from bandit_cli import BANDIT_CORPUS, bandit_args, base_config_file

from ragen_core.apps.train import main
from ragen_core.training.config import load_config
from ragen_core.training.warm_cache import cached_step0, step0_key

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def model_dir(make_tiny_model):
    return make_tiny_model(BANDIT_CORPUS)


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


class _Held:
    """The lock a running ``ragen train`` / ``ragen eval`` holds on its folder (an flock on the folder itself)."""

    def __init__(self, folder: Path):
        self.fd = os.open(folder, os.O_RDONLY)
        fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def release(self) -> None:
        os.close(self.fd)


# ------------------------------------------------------------------ two `ragen train` in one run folder

def test_a_run_stopped_in_its_warm_start_keeps_its_folder_from_a_second_run(model_dir, tmp_path, capsys):
    """Run A is stopped right after it made its folder (before its first checkpoint); run B is given the same
    --run-dir. B used to pass the folder check (nothing to resume there yet), train and finish in it; A then found
    B's checkpoint, failed with a traceback and removed the folder: B's finished run was lost. Now B is refused in
    one line and A finishes its own run there."""
    run_dir = tmp_path / "run"
    cfg = base_config_file(tmp_path)
    args = [str(cfg), *bandit_args(model_dir), "--run-dir", str(run_dir)]
    a = subprocess.Popen([sys.executable, "-m", "ragen_core.apps.train", *args], cwd=ROOT, text=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        assert a.stderr.readline().startswith("run folder: ")
        a.send_signal(signal.SIGSTOP)
        before = _tree(run_dir)
        assert main([str(cfg), *bandit_args(model_dir, "run.seed=5"), "--run-dir", str(run_dir)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("cannot start: ") and err.count("\n") == 1 and "Traceback" not in err, err
        assert "being trained by another `ragen train` process" in err
        assert _tree(run_dir) == before
    finally:
        a.send_signal(signal.SIGCONT)
    rest = a.stderr.read()
    assert a.wait(120) == 0, rest
    assert load_config(run_dir / "config.toml").run.seed == 3  # A's run, whole
    assert (run_dir / "checkpoints" / "latest.pt").is_file() and (run_dir / "summary.md").is_file()


@pytest.fixture(scope="module")
def finished_run(model_dir, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("finished")
    run_dir = folder / "run"
    assert main([str(base_config_file(folder)), *bandit_args(model_dir), "--run-dir", str(run_dir)]) == 0
    return run_dir


def test_a_resume_of_a_run_being_trained_is_refused_and_writes_nothing(finished_run, capsys):
    """Two `--resume` of one run at once would append the same steps twice to its metrics and overwrite each
    other's checkpoints."""
    before = _tree(finished_run)
    held = _Held(finished_run)  # a `ragen train --resume` of it running now
    try:
        assert main(["--resume", str(finished_run), "run.steps=3"]) == 2
    finally:
        held.release()
    err = capsys.readouterr().err
    assert err.startswith("cannot resume: ") and err.count("\n") == 1, err
    assert _tree(finished_run) == before


def test_a_new_run_in_a_folder_whose_run_holds_the_lock_writes_nothing_there(model_dir, tmp_path, capsys):
    """What a start in its warm start leaves (config.toml, no checkpoint) is restartable by a later `ragen train`,
    but not while that start is still running."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.toml").write_text("# the running start's\n")
    held = _Held(run_dir)
    try:
        assert main([str(base_config_file(tmp_path)), *bandit_args(model_dir), "--run-dir", str(run_dir)]) == 2
    finally:
        held.release()
    assert "being trained by another" in capsys.readouterr().err
    assert _tree(run_dir) == {"config.toml": b"# the running start's\n"}


_RACE = """
import json, multiprocessing, sys
from ragen_core.apps.train import claim_new_run_dir
from ragen_core.training.config import load_config

def claim(args):
    cfg, barrier = args
    barrier.wait(timeout=60)  # a child that died breaks the barrier: an error, not a wait for ever
    return str(claim_new_run_dir(cfg))

if __name__ == "__main__":
    cfg = load_config(None, [f"run.out_dir={sys.argv[1]}", "run.name=seed-sweep"])
    ctx = multiprocessing.get_context("fork")
    n = int(sys.argv[2])
    barrier = ctx.Manager().Barrier(n)
    with ctx.Pool(n) as pool:
        print(json.dumps(pool.map_async(claim, [(cfg, barrier)] * n).get(timeout=120)))
"""


def test_runs_of_one_name_started_at_once_get_a_folder_each(tmp_path):
    """run.out_dir/run.name[-N] is made with exist_ok=False: processes released together by a barrier each get
    their own folder (before, a name looked at free by two of them was made by both, with exist_ok=True). The
    processes fork from a fresh interpreter, not from the test's process, whose threads (left by earlier tests)
    a fork would copy in whatever state they hold."""
    n = 6
    script = tmp_path / "race.py"
    script.write_text(_RACE)
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "runs"), str(n)], capture_output=True,
                          text=True, timeout=240, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr[-3000:]
    folders = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(set(folders)) == n
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == sorted(
        ["seed-sweep"] + [f"seed-sweep-{i}" for i in range(1, n)])


# ------------------------------------------------------------------ the warm-start cache

def test_the_temporary_file_of_a_killed_cache_writer_is_removed_and_never_read(tmp_path):
    """A writer killed inside torch.save / write_text leaves NAME.tmpPID beside the entry: never read (the entry
    appears only by rename), but it used to stay for good (for a real model, one copy of the weights per killed
    run). The next run of the key removes it under the key's lock."""
    cache = tmp_path / "cache"
    cfg = load_config(None, ["env.id=ragen/Bandit-v0", "model.path=tiny", f"warm_start.cache_dir={cache}"])
    cache.mkdir()
    path = cache / f"{step0_key(cfg, 'probe')}.step0.json"
    killed = path.with_name(path.name + ".tmp4242")
    killed.write_text('{"key": "' + step0_key(cfg, "probe") + '", "sha256": "0", "val')  # cut mid-write
    other = cache / "unrelated.step0.json.tmp77"  # another key's: not this lock's to judge
    other.write_text("x")
    assert cached_step0(cfg, "probe", lambda: {"x": 1.5}) == ({"x": 1.5}, False)
    assert not killed.exists() and other.exists()
    assert cached_step0(cfg, "probe", lambda: pytest.fail("measured twice")) == ({"x": 1.5}, True)


# ------------------------------------------------------------------ two `ragen eval` into one folder

def test_a_second_evaluation_into_a_folder_being_started_writes_nothing_there(tmp_path, capsys):
    """The first evaluation has made the folder and holds its lock but has not written eval.json yet (it is
    loading its model); a second one with the same --out used to pass the emptiness check, write its own eval.json
    over the folder, and only then find the lock. Now the lock is taken before anything is written."""
    from ragen_core.apps.eval import main as eval_main

    out = tmp_path / "out"
    out.mkdir()
    held = _Held(out)
    try:
        code = eval_main(["--base-url", "http://127.0.0.1:9/v1", "--model-name", "m", "--out", str(out),
                          "--no-progress", "--config", "bandit_tiny", "--episodes", "2"])
    finally:
        held.release()
    err = capsys.readouterr().err
    assert code == 2 and "is being played by another ragen eval" in err, err
    assert list(out.iterdir()) == []
