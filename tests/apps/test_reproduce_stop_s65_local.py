"""Stopping `ragen reproduce` as a user or a scheduler does, with real processes: a study of real (tiny) training runs
is sent Ctrl-C or SIGTERM while its runs are in flight, or one run's process is killed. What is checked is what the
user sees (exit status, one line, no traceback) and what is left behind (no process, no run counted as finished
that did not finish). The runs are long (400 steps), so that they are certainly running when the signal comes;
each test stops them within seconds."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from ragen_core.apps.reproduce.runner import execute_warm_run, finished_records
from ragen_core.apps.reproduce.spec import RunSpec

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc (Linux)")]

CONFIG = """\
[run]
steps = 400
device = "cpu"
[model]
path = "tiny"
[env]
id = "ragen/Bandit-v0"
[rollout]
groups = 2
group_size = 4
max_turns = 1
max_new_tokens = 24
system_prompt = false
[algo]
name = "grpo"
lr = 1e-3
mini_batch_size = 8
micro_batch_size = 8
[mi]
every = 1
[eval]
every = 2
episodes = 4
[warm_start]
sft_episodes = 8
batch_size = 8
epochs = 1
"""

#: `ragen reproduce` with its plan replaced by two runs of CONFIG (argv[1]); the other arguments are the command's.
DRIVER = """
import sys
from ragen_core.apps.reproduce import cli
from ragen_core.apps.reproduce.spec import RunSpec

if __name__ == "__main__":
    config, cache = sys.argv[1], sys.argv[2]
    specs = [RunSpec("bandit", "a", s, config, (f"run.seed={s}", "run.progress=false",
                                                f'warm_start.cache_dir="{cache}"')) for s in (0, 1)]
    cli.build_runs = lambda *a, **k: specs
    sys.exit(cli.main(sys.argv[3:]))
"""

NAMES = ["bandit-a-s0", "bandit-a-s1"]


def _default_signals() -> None:
    """In the child before it runs: Ctrl-C's and SIGTERM's default actions (a suite started in the background
    ignores SIGINT, and an ignored signal stays ignored across exec)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _start(tmp_path: Path, *flags: str) -> tuple[subprocess.Popen, Path]:
    """The study in its own process group (as a terminal starts a command); (process, runs folder)."""
    config = tmp_path / "bandit.toml"
    config.write_text(CONFIG)
    driver = tmp_path / "driver.py"
    driver.write_text(textwrap.dedent(DRIVER))
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, str(driver), str(config), str(tmp_path / "cache"), "--out", str(out),
                             "--workers", "2", "--no-progress", *flags], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=_default_signals,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
    return proc, out / "runs"


def _wait_until_stepping(proc: subprocess.Popen, runs: Path, names: list[str], limit_s: float = 120) -> None:
    """Until each of `names` has logged an RL step (so each has a checkpoint and is training)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and proc.poll() is None:
        if all('"perf/step_s"' in _read(runs / n / "metrics.jsonl") for n in names):
            return
        time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"the runs did not start: {proc.communicate()[1][-3000:]}")


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _descendants(pid: int) -> list[int]:
    """Every process below `pid`, from /proc (parent links)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _alive(pids: list[int]) -> list[int]:
    """The processes of `pids` that still run (a zombie has ended)."""
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.append(pid)
    return alive


def _stop(proc: subprocess.Popen, signum: int, group: bool) -> tuple[int, str, list[int]]:
    """Send `signum` to the study (its process group, or its process alone); (exit status, stderr, the processes
    under it that still run once it has exited)."""
    below = _descendants(proc.pid)
    assert below, "the study runs its runs in processes of its own"
    (os.killpg if group else os.kill)(proc.pid, signum)
    try:
        _, err = proc.communicate(timeout=120)  # a loaded CI machine: runs save their checkpoints first
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    # A process that has exited may still be listed for a moment, and under the full suite's load (2 workers,
    # each with runs of its own) the runs' last checkpoint and exit can take seconds: 30 s, still a hang's bound.
    deadline = time.monotonic() + 30
    while _alive(below) and time.monotonic() < deadline:
        time.sleep(0.1)
    return proc.returncode, err, _alive(below)


def _spec(config: Path, cache: Path, seed: int = 0) -> RunSpec:
    return RunSpec("bandit", "a", seed, str(config), (f"run.seed={seed}", "run.progress=false",
                                                      f'warm_start.cache_dir="{cache}"'))


def test_ctrl_c_to_the_study_alone_stops_its_runs_and_says_what_to_do(tmp_path):
    """`kill -INT` of the study's process (not its group) used to print that the runs were stopped and then wait
    for each of them to train to its end, since no Ctrl-C reached them."""
    proc, runs = _start(tmp_path)
    _wait_until_stepping(proc, runs, NAMES)
    status, err, left = _stop(proc, signal.SIGINT, group=False)
    assert status == 130, err[-3000:]
    assert "Traceback" not in err and left == []
    line = [x for x in err.splitlines() if "interrupted; no further run was started" in x]
    assert len(line) == 1, err[-3000:]
    assert "0 of 2 runs finished" in line[0] and "stopped 2 at their last checkpoint (bandit-a-s0, bandit-a-s1)" \
        in line[0] and "0 not started" in line[0] and f"Continue with: ragen reproduce --out {runs.parent}" in line[0]
    for name in NAMES:  # each stopped by its trainer, and none counted as finished
        assert "interrupted at step" in (runs / name / "train.log").read_text()
        assert not (runs / name / "done.json").exists()
    assert finished_records([_spec(tmp_path / "bandit.toml", tmp_path / "cache", s) for s in (0, 1)], runs)[0] == []


@pytest.mark.parametrize("group", [True, False], ids=["group", "process"])
def test_sigterm_stops_the_study_as_ctrl_c_does(tmp_path, group):
    """SIGTERM (a scheduler's stop) used to kill the study at once (exit -15, no word): to its process group it
    cut each run mid-step; to its process alone it left both runs training on, unwatched, to an end that no
    done.json would record."""
    proc, runs = _start(tmp_path)
    _wait_until_stepping(proc, runs, NAMES)
    status, err, left = _stop(proc, signal.SIGTERM, group=group)
    assert status == 143, err[-3000:]
    assert "Traceback" not in err and left == []
    assert "ragen reproduce: stopped by SIGTERM; no further run was started: 0 of 2 runs finished" in err
    assert "stopped 2 at their last checkpoint (bandit-a-s0, bandit-a-s1)" in err
    for name in NAMES:
        assert "interrupted at step" in (runs / name / "train.log").read_text()
        assert not (runs / name / "done.json").exists()


def _run_process_of(run_dir: Path) -> int:
    """The process below this one whose output goes to `run_dir`'s train.log (a run forked from the warm process)."""
    log = str(run_dir / "train.log")
    for pid in _descendants(os.getpid()):
        try:
            if os.readlink(f"/proc/{pid}/fd/1") == log:
                return pid
        except OSError:
            continue
    raise AssertionError(f"no process writes {log}")


def test_a_killed_run_is_a_failure_that_quotes_its_log_and_is_run_again(tmp_path):
    """A run whose process was killed used to be reported as `failed (exit -9); see PATH`: the signal unnamed and
    the log's last lines left to be looked up."""
    config = tmp_path / "bandit.toml"
    config.write_text(CONFIG)
    spec = _spec(config, tmp_path / "cache")
    runs = tmp_path / "runs"
    errors: list[str] = []

    def run() -> None:
        try:
            execute_warm_run(spec, runs)
        except RuntimeError as e:
            errors.append(str(e))

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 120
    while '"perf/step_s"' not in _read(runs / spec.name / "metrics.jsonl") and time.monotonic() < deadline:
        time.sleep(0.1)
    os.kill(_run_process_of(runs / spec.name), signal.SIGKILL)
    thread.join(60)
    assert len(errors) == 1
    assert f"run {spec.name} failed (killed by SIGKILL)" in errors[0]
    assert "its last lines:" in errors[0] and "step 0: validation success" in errors[0]
    # Not counted as finished: a resumed study runs it again (from its last checkpoint).
    assert finished_records([spec], runs) == ([], [spec.name])
    assert (runs / spec.name / "checkpoints" / "latest.pt").is_file()


# ------------------------------------------------------------------------------------------- Ray
def _start_ray(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    """The study with `--ray local` (a single-node Ray instance it starts), its runs stepping; skipped where Ray is
    missing or cannot start here (a sandbox without the ports or shared memory it needs)."""
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'ragen2[ray]')")
    proc, runs = _start(tmp_path, "--ray", "local")
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None:
        if all('"perf/step_s"' in _read(runs / n / "metrics.jsonl") for n in NAMES):
            return proc, runs
        time.sleep(0.1)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    err = proc.communicate()[1]
    if not any((runs / n).exists() for n in NAMES):
        pytest.skip(f"Ray could not start here: {err.strip().splitlines()[-1:] or 'no message'}")
    raise AssertionError(f"the runs did not start: {err[-3000:]}")


def test_ctrl_c_stops_a_ray_study_and_its_runs_at_their_checkpoints(tmp_path):
    """With --ray, Ctrl-C used to shut Ray down under the runs: each training process was killed wherever it was,
    the interrupt never reached it, and the line named no run."""
    proc, runs = _start_ray(tmp_path)
    status, err, left = _stop(proc, signal.SIGINT, group=True)
    assert status == 130, err[-3000:]
    assert "Traceback" not in err and left == []
    assert "interrupted; no further run was started: 0 of 2 runs finished" in err
    assert "stopped 2 at their last checkpoint (bandit-a-s0, bandit-a-s1)" in err and "--ray local" in err
    for name in NAMES:
        assert "interrupted at step" in (runs / name / "train.log").read_text()
        assert not (runs / name / "done.json").exists()
        assert not (runs / f".{name}.stop").exists()  # a later study runs them


def test_sigterm_stops_a_ray_study(tmp_path):
    """SIGTERM to a Ray study's process used to end it through Ray's own handler: a C stack dump on stderr, the
    runs killed by the shutdown, no line."""
    proc, runs = _start_ray(tmp_path)
    status, err, left = _stop(proc, signal.SIGTERM, group=False)
    assert status == 143, err[-3000:]
    assert "SIGTERM received" not in err and "Traceback" not in err and left == []
    assert "stopped by SIGTERM; no further run was started: 0 of 2 runs finished" in err
    for name in NAMES:
        assert "interrupted at step" in (runs / name / "train.log").read_text()
