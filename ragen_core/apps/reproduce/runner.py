"""Running the study's runs: local worker processes or Ray tasks, resumable, with a progress bar.

Each run is one training process (one torch thread) in ``OUT/runs/NAME``: locally forked from a warm process that
imported torch, transformers and the trainer once (:func:`execute_warm_run`), else a fresh ``python -m
ragen_core.apps.train``. A finished run has a ``done.json`` (its record, :func:`read_run`) and is never re-run; a
killed one continues from its last checkpoint. A run folder of another design, or one whose ``done.json`` or
``metrics.jsonl`` is damaged, is neither counted nor resumed (:func:`read_finished`, :func:`design_problem`).
With ``--ray ADDRESS`` every run is a Ray task (``num_cpus=1``) on
that cluster, a fresh process (:func:`execute_run`); the two paths differ only in who schedules the runs and in the
imports. With Ray, the run folders and the warm-start cache must be on a file system that every Ray node sees (one
machine, or a shared mount).

Stopping: Ctrl-C, or SIGTERM (a scheduler's stop), to the study's process or its whole process group starts no
further run and stops each running one as Ctrl-C stops ``ragen train`` (at its last checkpoint: it writes no
``done.json``, so it is resumed, never counted), waits for them, and raises :class:`Interrupted` naming them. A
study's process that dies unstopped (SIGKILL, an OOM kill; with Ray, the worker that waits on the run) stops its
runs all the same: each run watches a pipe that process holds (:mod:`ragen_core.apps.reproduce.lifeline`; not on
Windows).
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import multiprocessing
import multiprocessing.connection
import multiprocessing.forkserver
import multiprocessing.resource_tracker
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor
from concurrent.futures import wait as wait_all
from pathlib import Path
from typing import Any

from ragen_core.apps.reproduce.lifeline import SUPPORTED as LIFELINE_SUPPORTED
from ragen_core.apps.reproduce.lifeline import lifeline, stop_when_cut
from ragen_core.apps.reproduce.spec import RunRecord, RunSpec
from ragen_core.training.metrics import STEP, Collapse, Filter, Loss, Perf, Probe, Sft, Val
from ragen_core.training.provenance import RESULT_NEUTRAL_KEYS

__all__ = ["execute_run", "execute_warm_run", "warm_context", "read_run", "with_wall_time", "run_local", "run_ray",
           "finished_records", "Interrupted"]

def _fields(*keys: str) -> dict[str, str]:
    """Record field -> metric: the field is the metric's name without its namespace."""
    return {key.split("/", 1)[1]: key for key in keys}


#: The fields of each MI measurement (a row with collapse/mi_seq_est): field -> metric.
MI_KEYS = _fields(Collapse.MI_ZSCORE_EMA, Collapse.MI_SEQ_EST, Collapse.MI_UPPER_BOUND, Collapse.RETRIEVAL_ACC,
                  Collapse.RETRIEVAL_CHANCE, Collapse.COND_ENTROPY_EST, Collapse.MARGINAL_ENTROPY_EST,
                  Collapse.TOKEN_ENTROPY, Collapse.REGIME,
                  # within-group covariance of return and pointwise MI over the kept / the dropped groups
                  Collapse.PMI_RETURN_COV_KEPT, Collapse.PMI_RETURN_COV_DROPPED)
#: The fields of each held-out probe measurement (ragen_core.training.probe): field -> metric. A row counts as a
#: probe measurement when it has probe/retrieval_margin.
PROBE_KEYS = _fields(Probe.RETRIEVAL_ACC, Probe.RETRIEVAL_CHANCE, Probe.RETRIEVAL_MARGIN, Probe.MI_SEQ_EST,
                     Probe.MI_UPPER_BOUND, Probe.MI_SEQ_NORM, Probe.TOKEN_ENTROPY, Probe.COND_ENTROPY_EST,
                     Probe.RECALL_AT_2, Probe.RECALL_AT_2_CHANCE, Probe.RECALL_AT_4, Probe.RECALL_AT_4_CHANCE,
                     Probe.RECALL_AT_8, Probe.RECALL_AT_8_CHANCE,
                     # the probe traces' mean reasoning length in tokens, and the share that match the template
                     Probe.REASONING_TOKENS, Probe.TEMPLATE_SHARE, Probe.MODAL_SHARE)
#: The per-step filter log: field -> metric. A step's entry has every field, None where that metric was not logged
#: (runs from before the field existed).
FILTER_LOG_KEYS = _fields(Filter.GROUPS_TOTAL, Filter.KEPT_GROUPS, Filter.ZERO_FRACTION, Filter.KEPT_ZERO_ADV_SHARE,
                          Filter.SKIPPED, Filter.REGULARISER_ONLY, Loss.GRAD_NORM_TASK, Loss.GRAD_NORM_ENTROPY)


#: The environment of a run's process: one torch thread (the study runs one run per core).
RUN_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}

#: The module a warm process imports before it forks runs (:mod:`ragen_core.apps.reproduce.warm_imports`).
WARM_IMPORTS = "ragen_core.apps.reproduce.warm_imports"


#: A fresh run's program, ``python -c TRAIN_WITH_CTRL_C FD ARGV``: ``python -m ragen_core.apps.train ARGV`` with
#: Ctrl-C's handler set and SIGINT unblocked first, and its lifeline's read end FD watched (-1: none;
#: :func:`ragen_core.apps.reproduce.lifeline.stop_when_cut`). The handler and the mask are inherited: a Ray worker's
#: child starts with SIGINT blocked, a job started with ``&`` with it ignored (and Python then installs no handler),
#: and a stopped study could not stop its runs. SIGTERM is unblocked too: :func:`run_local`'s worker threads, which
#: start these processes, block both (:func:`_signals_blocked`).
TRAIN_WITH_CTRL_C = ("import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
                     "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM}); "
                     "fd = int(sys.argv.pop(1)); "
                     "from ragen_core.apps.reproduce.lifeline import stop_when_cut; "
                     "fd < 0 or stop_when_cut(fd); "
                     "from ragen_core.apps import train; sys.argv[0] = train.__file__; "
                     "sys.exit(train.main(sys.argv[1:]))")

#: Whether runs get a lifeline to the study that started them (:mod:`ragen_core.apps.reproduce.lifeline`: a run
#: whose study died unstopped stops at its last checkpoint); not on Windows.
LIFELINES = LIFELINE_SUPPORTED


def execute_run(spec: RunSpec, runs_dir: str | Path, warm: bool = False) -> dict[str, Any]:
    """Train `spec` unless its ``done.json`` exists; return its record.

    The run is ``python -m ragen_core.apps.train`` in a fresh process, or, with `warm`, the same ``main`` in a
    process forked from a warm one that imported torch, transformers, the trainer and matplotlib once
    (:func:`warm_context`): the same run without 4-5 s of imports. Either way the run has one torch thread and
    writes its output to ``train.log``; its wall time is measured around the process.

    Raises:
        RuntimeError: the training process failed (the message names its log and exit status), or the run folder
            cannot be used: a finished run's folder that is damaged or of another design (:func:`read_finished`),
            a killed run of another design (:func:`design_problem`), which it neither counts nor overwrites.
    """
    lock = _run_lock(Path(runs_dir), spec)
    try:
        return _execute(spec, Path(runs_dir) / spec.name, warm)
    finally:
        if lock is not None:
            os.close(lock)  # releases the lock


def _run_lock(runs_dir: Path, spec: RunSpec) -> int | None:
    """Hold ``RUNS_DIR/.NAME.lock`` (an exclusive ``flock``) while this process runs `spec`: two studies on the same
    ``--out`` (or two Ray tasks) would otherwise train the same run folder at once, interleaving its logs and
    checkpoints. The file sits beside the run folder, which must hold only a run's own files. Returns the lock's file
    descriptor; None where ``flock`` is not available (Windows, some network file systems): no lock, as before.

    Raises:
        RuntimeError: another process holds the run's lock (it is running it now).
    """
    try:
        import fcntl
    except ImportError:
        return None
    runs_dir.mkdir(parents=True, exist_ok=True)
    path = runs_dir / f".{spec.name}.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise RuntimeError(f"run {spec.name} is being run by another process now (it holds {path}): is another "
                           f"`ragen reproduce` running on the same --out? Let it finish, then rerun") from None
    except OSError:  # a file system without flock: run unlocked, as before
        os.close(fd)
        return None
    return fd


def stop_file(runs_dir: str | Path, name: str) -> Path:
    """``RUNS_DIR/.NAME.stop``: while it exists, the run `name` is not started, and a running one is stopped as by
    Ctrl-C (:func:`_wait`). How a stopped Ray study reaches its tasks on any node (the run folders are on a file
    system every node sees); :func:`run_ray` writes it and removes it."""
    return Path(runs_dir) / f".{name}.stop"


def _execute(spec: RunSpec, run_dir: Path, warm: bool) -> dict[str, Any]:
    """:func:`execute_run`'s body, under the run's lock."""
    stop = stop_file(run_dir.parent, spec.name)
    if stop.exists() or _STOPPING.is_set() or _STOP_SIGNALS:
        raise RuntimeError(f"run {spec.name} {NOT_STARTED}")
    done = run_dir / "done.json"
    if done.is_file():  # a damaged or foreign run folder, or one another process finished since this one looked
        try:
            return read_finished(spec, run_dir)
        except RunFolderError as e:
            raise RuntimeError(f"run {spec.name}: {e}") from None
    if (run_dir / "checkpoints" / "latest.pt").is_file() and (run_dir / "config.toml").is_file():
        problem = design_problem(spec, run_dir)
        if problem is not None:  # a killed run of another design: resuming it would continue that design
            raise RuntimeError(f"run {spec.name}: {problem}")
        argv = ["--resume", str(run_dir)]
    else:
        argv = [spec.config, *spec.overrides, "--run-dir", str(run_dir)]
    run_dir.mkdir(parents=True, exist_ok=True)
    log_path = run_dir / "train.log"
    start = time.perf_counter()
    # The run's lifeline (ragen_core.apps.reproduce.lifeline): this process holds the write end until the run has
    # ended, the run the read end; if this process dies unstopped (SIGKILL, an OOM kill) the run stops itself.
    read, write = lifeline() if LIFELINES else (-1, -1)
    try:
        if warm:
            # A Connection is passed to a forked run as a descriptor of its own (multiprocessing duplicates it).
            end = None if read < 0 else multiprocessing.connection.Connection(read, writable=False)
            read = -1  # the Connection owns it now
            try:
                child = warm_context().Process(target=_train_here, args=(argv, str(log_path), end), name=spec.name)
                child.start()
            finally:
                if end is not None:
                    end.close()  # the run holds its own copy
            status = _wait(spec.name, _Forked(child), stop)
        else:
            with open(log_path, "a", encoding="utf-8") as log:
                process = subprocess.Popen([sys.executable, "-c", TRAIN_WITH_CTRL_C, str(read), *argv],
                                           env={**os.environ, **RUN_ENV}, stdout=log, stderr=subprocess.STDOUT,
                                           pass_fds=(read,) if read >= 0 else ())
                if read >= 0:
                    os.close(read)  # the run holds its own copy
                    read = -1
                status = _wait(spec.name, process, stop)
    finally:
        for fd in (read, write):
            if fd >= 0:
                os.close(fd)
    if status != 0:
        raise RuntimeError(f"run {spec.name} failed ({_exit_status(status)}); see {log_path}"
                           + _log_tail(log_path))
    record = with_wall_time(read_run(run_dir, spec), time.perf_counter() - start)
    tmp = done.with_suffix(".tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, done)
    return record


class _Forked:
    """A forked run (a ``multiprocessing.Process``) with :class:`subprocess.Popen`'s ``wait(timeout)``, ``poll()``
    and ``send_signal``: what :func:`_wait` uses of either, safe to call from several threads at once.

    The warm process writes a run's exit status once, into a pipe: a ``multiprocessing.Process`` reads it on its
    first ``exitcode`` or ``join`` that finds the pipe readable, and two threads that both find it readable (the
    run's waiting thread, and :func:`stop_running` in the main thread) both read: one gets the status, the other
    the pipe's end, which multiprocessing reports as exit 255. So the status is read under a lock, and only the
    wait for it happens outside (a thread sending a signal is never held up by one that waits)."""

    def __init__(self, process: multiprocessing.process.BaseProcess):
        self.process = process
        self._lock = threading.Lock()

    def wait(self, timeout: float | None = None) -> int:
        multiprocessing.connection.wait([self.process.sentinel], timeout)
        code = self.poll()
        if code is None:
            raise subprocess.TimeoutExpired(self.process.name, timeout)
        return code

    def poll(self) -> int | None:
        with self._lock:
            self.process.join(0)  # reads the status if it has come (and forgets the finished child)
            return self.process.exitcode

    def send_signal(self, signum: int) -> None:
        with self._lock:
            self.process.join(0)
            if self.process.exitcode is None and self.process.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.process.pid, signum)


#: The run processes this process waits on now (run name -> process), for :func:`stop_running`.
_RUNNING: dict[str, Any] = {}
_RUNNING_LOCK = threading.Lock()

#: Set by :func:`stop_running` until :func:`run_local` returns: no further run starts (:func:`_execute` refuses with
#: :data:`NOT_STARTED`), and a run whose process started while the stop was being sent is sent Ctrl-C as soon as
#: :func:`_wait` registers it (a Ctrl-C that lands while a worker thread is still starting its run used to leave
#: that run training to its end).
_STOPPING = threading.Event()

#: The signals (numbers) that stopped the study run_local runs now, recorded by its handlers (:func:`_stop_requests`)
#: before its loop acts on them: no run starts once one is here.
_STOP_SIGNALS: list[int] = []

#: How a run that a stop kept from starting says so (its RuntimeError's message after ``run NAME``; also the Ray
#: tasks' words, :func:`_ray_interrupted`).
NOT_STARTED = "was not started: the study was stopped"


def _wait(name: str, child: Any, stop: Path) -> int:
    """Wait for the run process `child` (a Popen or a :class:`_Forked`) and return its exit status. While it runs,
    :func:`stop_running` reaches it, and so does the file `stop` (:func:`stop_file`, looked for every 0.2 s): once
    it exists the run is sent Ctrl-C (it stops at its last checkpoint) and waited for."""
    with _RUNNING_LOCK:
        _RUNNING[name] = child
        stopping = _STOPPING.is_set()  # read under the lock that stop_running sets it under: no stop is missed
    try:
        if stopping:
            child.send_signal(signal.SIGINT)
        while True:
            try:
                return child.wait(0.2)
            except subprocess.TimeoutExpired:
                if stop.exists():
                    child.send_signal(signal.SIGINT)
                    return child.wait()
    finally:
        with _RUNNING_LOCK:
            _RUNNING.pop(name, None)


def stop_running(signum: int = signal.SIGINT) -> list[str]:
    """Send `signum` (Ctrl-C's SIGINT: each run stops as ``ragen train`` does, at its last checkpoint) to every run
    process this process waits on now; their names. A run that already got the terminal's Ctrl-C stops once: a
    forked run stops on the first SIGINT or SIGTERM and ignores the rest (:func:`_train_here`). Until the study's
    :func:`run_local` returns, no further run starts, and one whose process is starting now is stopped once it is
    registered (:data:`_STOPPING`)."""
    with _RUNNING_LOCK:
        _STOPPING.set()
        running = dict(_RUNNING)
    for child in running.values():
        with contextlib.suppress(ProcessLookupError, OSError):
            child.send_signal(signum)
    return sorted(running)


def _exit_status(status: int | None) -> str:
    """``exit 2``, or ``killed by SIGKILL`` for a negative status (killed by that signal)."""
    if isinstance(status, int) and status < 0:
        try:
            return f"killed by {signal.Signals(-status).name}"
        except ValueError:
            return f"killed by signal {-status}"
    return f"exit {status}"


#: How many of a failed run's last log lines its failure quotes.
LOG_TAIL_LINES = 5


def _log_tail(log_path: Path, n: int = LOG_TAIL_LINES) -> str:
    """The last `n` non-empty lines of a run's log, each on its own indented line after ``; its last lines:``
    ("" without a log): what a failure says of why, without opening the file."""
    try:
        lines = [x.rstrip() for x in log_path.read_text(encoding="utf-8", errors="replace").splitlines()
                 if x.strip()]
    except OSError:
        return ""
    if not lines:
        return " (its log is empty)"
    return "; its last lines:\n      " + "\n      ".join(x[:300] for x in lines[-n:])


def execute_warm_run(spec: RunSpec, runs_dir: str | Path) -> dict[str, Any]:
    """:func:`execute_run` forked from the warm process (what ``ragen reproduce`` runs locally); a fresh process
    where Python has no ``forkserver`` (Windows)."""
    return execute_run(spec, runs_dir, warm="forkserver" in multiprocessing.get_all_start_methods())


_WARM_LOCK = threading.Lock()


def warm_context() -> multiprocessing.context.ForkServerContext:
    """Python's ``forkserver`` context, its server started (once per process) with :data:`RUN_ENV` and
    :data:`WARM_IMPORTS` imported: each run is then forked from a process whose imports are done and which has
    computed nothing (so no thread pool exists to be forked).

    Only the server's environment takes :data:`RUN_ENV`; this process's is restored at once. The server starts with
    SIGTERM and SIGINT blocked (a signal mask is inherited across fork and exec): a SIGTERM or Ctrl-C to the study's
    process group then stops the runs (:func:`_train_here` unblocks both) but not the server, which must outlive
    them to report their exit status; it still ends with this process (it exits when its pipe from here closes).
    Python's server ignores SIGINT only once its imports are done: a Ctrl-C in the first seconds of a study (or
    while it builds the compiled decoding step) used to end it in a KeyboardInterrupt traceback. The compiler it
    runs inherits the mask, so such a Ctrl-C does not cut the build short either. A run forked from it starts with
    both blocked, so a stop sent while it starts waits until its handler is set, instead of ending it in a
    traceback or being lost."""
    ctx = multiprocessing.get_context("forkserver")
    with _WARM_LOCK:
        ctx.set_forkserver_preload([WARM_IMPORTS])
        saved = {k: os.environ.get(k) for k in RUN_ENV}
        os.environ.update(RUN_ENV)
        # Python's resource tracker, started by the server's first start, unblocks SIGINT and SIGTERM in the
        # calling thread after it has started itself (bpo-33613): start it first, or the server's mask is lost.
        # It also leaves them unblocked in this thread, which (a run_local worker) must keep them blocked, so that
        # Ctrl-C reaches the main thread at once (_signals_blocked): the mask is taken before and restored after.
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, set())
        try:
            multiprocessing.resource_tracker.ensure_running()
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})  # this thread's only
            multiprocessing.forkserver.ensure_running()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    return ctx


def _train_here(argv: list[str], log_path: str, study: multiprocessing.connection.Connection | None = None) -> None:
    """A forked run's body: stdout and stderr to `log_path` (appended), ``sys.argv`` as a fresh
    ``python -m ragen_core.apps.train`` would see it, then the trainer's ``main``; its status is the exit code.

    The first SIGINT or SIGTERM is Ctrl-C to the trainer (it stops at its last checkpoint, says so in the log and
    exits 130) and later ones are ignored: a terminal's Ctrl-C reaches the run and the study's process, which passes
    it on (:func:`stop_running`), and a second interrupt inside the trainer's own stop would end it in a
    traceback. `study`: the read end of the run's lifeline (:mod:`ragen_core.apps.reproduce.lifeline`), watched:
    when the study's process is gone the run sends itself SIGINT.

    Both signals arrive blocked (:func:`warm_context`) and are unblocked only once the handler is set and the output
    goes to the log, inside the ``try``: a stop sent while the run was starting is delivered there, and ends the run
    with one line in its log (exit 130), not a traceback on the study's terminal."""
    signal.signal(signal.SIGINT, _stop_once)
    signal.signal(signal.SIGTERM, _stop_once)
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
        if study is not None:
            stop_when_cut(os.dup(study.fileno()))
            study.close()
        from ragen_core.apps import train

        sys.argv = [train.__file__, *argv]
        status = train.main(argv)
    except KeyboardInterrupt:  # stopped before the trainer's own Ctrl-C handling began: nothing of it to keep
        print("\ninterrupted before training started", file=sys.stderr)
        status = 130
    sys.exit(status)


def _stop_once(signum: int, frame: Any) -> None:
    """A forked run's SIGINT and SIGTERM handler: ignore both from now on, then raise Ctrl-C's KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


def with_wall_time(record: dict[str, Any], wall_s: float | None) -> dict[str, Any]:
    """`record` with its run's wall time ``wall_s`` and, when it records its phases, the start-up and the rest
    (``phases["other_s"]``: what the timed phases leave of the wall time; None without a wall time)."""
    record = {**record, "wall_s": wall_s}
    if isinstance(record.get("phases"), dict):
        phases = dict(record["phases"])
        known = sum(v for k, v in phases.items() if k != "other_s" and isinstance(v, (int, float)))
        phases["other_s"] = max(float(wall_s) - known, 0.0) if isinstance(wall_s, (int, float)) else None
        record["phases"] = phases
    return record


def read_run(run_dir: str | Path, spec: RunSpec) -> dict[str, Any]:
    """The record of a finished run, from its ``metrics.jsonl``: a :class:`ragen_core.apps.reproduce.spec.RunRecord`
    as a dict (``wall_s`` None: :func:`execute_run` sets it).

    Keys: env, arm, seed, steps (RL steps done), val (``[[step, success], ...]``, step 0 = after the warm start),
    mi (``[{"step": s, <MI_KEYS>...}, ...]``: the in-batch proxies), probe (``[{"step": s, <PROBE_KEYS>...,
    "probe_s": seconds}, ...]``: the held-out probe, step 0 = before the first RL step; empty without a probe),
    rv_heterogeneity_first (of the step-1 batch: rolled out by the
    warm-started policy, the paper's pre-training check), zero_variance_fraction (the mean share of groups with
    zero reward variance per step), sft_s (the warm start's seconds in this run: loading time on a cache hit),
    sft_cached and rl_s (seconds of RL steps and validations); provenance: planned_steps (``run.steps`` of the
    run's ``config.toml``), commit and config_sha256 (from the run's ``provenance.json``); filter_log (one entry
    per RL step that logged any ``filter/`` metric of :data:`FILTER_LOG_KEYS`: ``{"step", groups_total,
    kept_groups, zero_fraction, kept_zero_adv_share, skipped, ...}``); phases (seconds of each phase of the run,
    :func:`run_phases`). A missing file or key gives None.
    """
    rows = _metric_rows(Path(run_dir) / "metrics.jsonl")
    val: dict[int, float] = {}
    for r in rows:
        if isinstance(r.get(Val.SUCCESS), (int, float)):
            val[int(r[STEP])] = float(r[Val.SUCCESS])  # the last record of a step wins
    mi = []
    for r in rows:
        if isinstance(r.get(Collapse.MI_SEQ_EST), (int, float)):
            mi.append({"step": int(r[STEP]), **{k: r.get(m) for k, m in MI_KEYS.items()}})
    probe: dict[int, dict[str, Any]] = {}
    for r in rows:
        if isinstance(r.get(Probe.RETRIEVAL_MARGIN), (int, float)):
            probe[int(r[STEP])] = {"step": int(r[STEP]), **{k: _finite(r.get(m)) for k, m in PROBE_KEYS.items()},
                                   "probe_s": _finite(r.get(Perf.PROBE_S))}  # the last record of a step wins
    first = next((r for r in rows if int(r.get(STEP, 0)) == 1 and Filter.RV_HETEROGENEITY in r), {})
    zero = [float(r[Filter.ZERO_FRACTION]) for r in rows if isinstance(r.get(Filter.ZERO_FRACTION), (int, float))]
    sft = next((r for r in rows if Sft.LOSS_LAST in r), {})
    steps = [r for r in rows if Perf.STEP_S in r]
    rv_h = first.get(Filter.RV_HETEROGENEITY)
    filter_steps: dict[int, dict[str, Any]] = {}
    for r in rows:
        if int(r.get(STEP, 0)) >= 1 and any(m in r for m in FILTER_LOG_KEYS.values()):
            # the last record of a step wins, as for the probe
            filter_steps[int(r[STEP])] = {"step": int(r[STEP]),
                                          **{k: _finite(r.get(m)) for k, m in FILTER_LOG_KEYS.items()}}
    filter_log = [filter_steps[k] for k in sorted(filter_steps)]
    provenance = _provenance(Path(run_dir))
    return RunRecord(
        env=spec.env, arm=spec.arm, seed=spec.seed, name=spec.name,
        steps=max((int(r[STEP]) for r in steps), default=0),
        val=[list(x) for x in sorted(val.items())],
        mi=mi,
        probe=[probe[k] for k in sorted(probe)],
        rv_heterogeneity_first=float(rv_h) if isinstance(rv_h, (int, float)) and math.isfinite(rv_h) else None,
        zero_variance_fraction=sum(zero) / len(zero) if zero else None,
        sft_s=sft.get(Perf.SFT_S),  # the time this run spent: training the warm start, or loading it
        sft_cached=bool(sft.get(Sft.CACHED, 0.0)),
        rl_s=sum(float(r[Perf.STEP_S]) + float(r.get(Perf.EVAL_S, 0.0) or 0.0) for r in steps),
        planned_steps=_planned_steps(Path(run_dir)),
        commit=provenance.get("commit"),
        config_sha256=provenance.get("config_sha256"),
        filter_log=filter_log,
        phases=run_phases(rows),
    ).to_dict()


def _metric_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a ``metrics.jsonl``; ValueError naming the line that is not a JSON object (a damaged file)."""
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as e:
            raise ValueError(f"line {number} is not JSON ({e})") from None
        if not isinstance(row, dict):
            raise ValueError(f"line {number} is a JSON {type(row).__name__}, not an object of metrics")
        rows.append(row)
    return rows


#: The phases of a run whose seconds a record keeps (:func:`run_phases`), in the order a report lists them.
PHASES = ("warm_start_s", "rl_steps_s", "validation_s", "probe_s", "other_s")


def run_phases(rows: list[dict[str, Any]], wall_s: float | None = None) -> dict[str, float | None]:
    """Seconds of each phase of one run from its ``metrics.jsonl`` rows: the warm start (``perf/sft_s``: training it,
    or loading it on a cache hit), the RL steps (``perf/step_s`` summed: rollout, filter, MI, scoring, update), the
    validations and the probes (``perf/eval_s`` and ``perf/probe_s`` summed, step 0 included), and ``other_s``: the
    run's wall time `wall_s` less those (start-up, model and env building, checkpoints; None without `wall_s`)."""
    def total(key: str) -> float:
        return sum(float(r[key]) for r in rows if isinstance(r.get(key), (int, float)) and math.isfinite(r[key]))

    sft = next((r.get(Perf.SFT_S) for r in rows if isinstance(r.get(Perf.SFT_S), (int, float))), None)
    out: dict[str, float | None] = {"warm_start_s": float(sft) if sft is not None else 0.0,
                                    "rl_steps_s": total(Perf.STEP_S), "validation_s": total(Perf.EVAL_S),
                                    "probe_s": total(Perf.PROBE_S)}
    known = sum(v for v in out.values() if v is not None)
    out["other_s"] = max(float(wall_s) - known, 0.0) if wall_s is not None else None
    return out


def design_cost(records: Iterable[dict[str, Any]], n_seeds: int) -> dict[str, Any]:
    """Core-minutes of a design's finished runs, whole and per seed, per phase (:data:`PHASES`), and per group.

    A run that records its phases counts every one (start-up included: ``other_s``); a run from before phases
    were recorded counts its warm start and RL steps with validations (``sft_s`` + ``rl_s``), as the header's
    ``core_minutes`` always has: ``runs_with_phases`` says how many runs are counted whole. ``by_group`` splits
    the same core-minutes by the runs' group (``env``: a base config of the design): its runs, its core-minutes
    and, from the runs that recorded them, its phases; a group's share of the warm starts falls on the run that
    trained them (its other arms load them from the cache)."""
    records = list(records)
    per_phase = {k: 0.0 for k in PHASES}
    whole = 0.0
    with_phases = 0
    by_group: dict[str, dict[str, Any]] = {}
    for r in records:
        group = by_group.setdefault(str(r.get("env", "?")), {"runs": 0, "whole_core_minutes": 0.0,
                                                              "phases_core_minutes": {k: 0.0 for k in PHASES}})
        group["runs"] += 1
        ph = r.get("phases")
        if isinstance(ph, dict):
            with_phases += 1
            for k in PHASES:
                v = ph.get(k)
                if isinstance(v, (int, float)):
                    per_phase[k] += float(v) / 60.0
                    group["phases_core_minutes"][k] += float(v) / 60.0
                    whole += float(v) / 60.0
                    group["whole_core_minutes"] += float(v) / 60.0
        else:
            minutes = ((r.get("sft_s") or 0.0) + (r.get("rl_s") or 0.0)) / 60.0
            whole += minutes
            group["whole_core_minutes"] += minutes
    return {"whole_core_minutes": whole, "per_seed_core_minutes": whole / n_seeds if n_seeds else None,
            "phases_core_minutes": per_phase, "runs_with_phases": with_phases, "runs": len(records),
            "seeds": n_seeds, "by_group": by_group}


def _provenance(run_dir: Path) -> dict[str, str | None]:
    """``commit`` and ``config_sha256`` from the run's ``provenance.json`` (written by the trainer); {} when it is
    missing or unreadable (runs from before it was written)."""
    try:
        data = json.loads((run_dir / "provenance.json").read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: str(data[k]) for k in ("commit", "config_sha256") if data.get(k) is not None}


def _planned_steps(run_dir: Path) -> int | None:
    """``run.steps`` of the run's resolved ``config.toml`` (the steps it was meant to do); None without one."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    try:
        steps = tomllib.loads((run_dir / "config.toml").read_text()).get("run", {}).get("steps")
    except (OSError, ValueError):
        return None
    return steps if isinstance(steps, int) and not isinstance(steps, bool) else None


def _finite(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and math.isfinite(x) else None


class RunFolderError(ValueError):
    """A finished run's folder that cannot be counted: damaged (a file that is not JSON) or of another design
    (:func:`design_problem`). The message names the file and what to do; `kind` and `detail` are what a list of
    missing runs gives (``NAME (unreadable: JSONDecodeError): done.json, line 1 ...``, ``NAME (another design):
    run.steps = 13 (this design: 40)``): short, and without the machine's paths."""

    def __init__(self, message: str, kind: str, detail: str = ""):
        super().__init__(message)
        self.kind = kind
        self.detail = detail


#: Keys of a run's config that change nothing it computes or records, so a run folder may differ from its spec in
#: them: where the warm-start cache is (its key covers every input of a warm start) and the progress bar. The same
#: keys that ``provenance.json``'s ``config_sha256`` leaves out (one set), so runs this counts as one design hash
#: equal.
SAME_RUN_KEYS = RESULT_NEUTRAL_KEYS


@functools.lru_cache(maxsize=4096)
def _spec_config(spec: RunSpec) -> dict[str, dict[str, Any]] | None:
    """The resolved config of `spec` as its run's ``config.toml`` holds it (the trainer writes ``dump_toml`` of
    ``load_config(config, overrides)``), read back as TOML; None when the spec's config cannot be loaded (the run
    itself would then fail and say why)."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    from ragen_core.training.config import dump_toml, load_config

    try:
        return tomllib.loads(dump_toml(load_config(spec.config, list(spec.overrides))))
    except (OSError, ValueError, TypeError):
        return None


def design_problem(spec: RunSpec, run_dir: str | Path) -> str | None:
    """Why the run in `run_dir` is not `spec`'s run (one line naming the keys that differ), or None
    (:func:`design_difference` says only the keys).

    A run folder is named by group, arm and seed only, so an ``--out`` that already holds runs of another design
    (``--quick`` runs under a full study, runs of an edited base config or overrides) has folders of the same
    names: counted as this design's, they would mix other runs into its verdicts. The run's ``config.toml`` is
    compared with the spec's resolved config on the keys both know (a key added or removed since the run was made
    is not a difference), but for :data:`SAME_RUN_KEYS`. A folder without ``config.toml`` has nothing to compare
    (None)."""
    differ = design_difference(spec, run_dir)
    if differ is None:
        return None
    return (f"{run_dir} holds a run of another design ({differ}): it is not counted; give this design its own "
            "--out, or remove that folder to run it again")


def design_difference(spec: RunSpec, run_dir: str | Path) -> str | None:
    """The keys in which the run in `run_dir` differs from `spec`'s (``run.steps = 13 (this design: 40); ...``, at
    most 3 shown), or None (the same run, or nothing to compare: :func:`design_problem`)."""
    path = Path(run_dir) / "config.toml"
    if not path.is_file():
        return None
    wanted = _spec_config(spec)
    if wanted is None:
        return None
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    try:
        saved = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:  # a run's own config.toml that is not TOML: not comparable, not this run
        return f"config.toml is not readable TOML ({type(e).__name__}: {e})"
    differ = [f"{section}.{key} = {saved[section][key]!r} (this design: {value!r})"
              for section, values in wanted.items() if isinstance(saved.get(section), dict)
              for key, value in values.items()
              if key in saved[section] and saved[section][key] != value and f"{section}.{key}" not in SAME_RUN_KEYS]
    if not differ:
        return None
    return "; ".join(differ[:3]) + (f"; and {len(differ) - 3} more" if len(differ) > 3 else "")


def _read_json(path: Path) -> Any:
    """`path` as JSON, or RunFolderError naming it (and the line of a JSON Lines file)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise RunFolderError(f"{path} is not readable JSON ({e}); remove {path.parent} to run it again",
                             f"unreadable: {type(e).__name__}", f"{path.name}, {e}") from None


def read_finished(spec: RunSpec, run_dir: str | Path) -> dict[str, Any]:
    """The record of the finished run of `spec` in `run_dir` (it has a ``done.json``), re-read from its
    ``metrics.jsonl`` with this version's reader (a report can use fields added after the run) and the wall time
    ``done.json`` kept.

    Raises:
        RunFolderError: ``done.json`` or a line of ``metrics.jsonl`` is not JSON, or the folder holds a run of
            another design (:func:`design_problem`); the message names the file and what to do.
    """
    run_dir = Path(run_dir)
    done = run_dir / "done.json"
    record = _read_json(done)
    if not isinstance(record, dict):
        raise RunFolderError(f"{done} holds a JSON {type(record).__name__}, not a run record; remove {run_dir} to "
                             "run it again", "unreadable: not a record", done.name)
    differ = design_difference(spec, run_dir)
    if differ is not None:
        raise RunFolderError(design_problem(spec, run_dir) or differ, "another design", differ)
    metrics = run_dir / "metrics.jsonl"
    if not metrics.is_file():
        return record
    try:
        # Keep the timing, and count the start-up from it again (the reader alone cannot: it has no wall time).
        return with_wall_time(read_run(run_dir, spec), record.get("wall_s"))
    except (OSError, ValueError, KeyError, TypeError) as e:  # json's error names the line; the file is named here
        raise RunFolderError(f"{metrics} is damaged ({type(e).__name__}: {e}); remove {run_dir} to run it again",
                             f"unreadable: {type(e).__name__}", f"{metrics.name}, {e}") from None


def finished_records(specs: Iterable[RunSpec], runs_dir: str | Path) -> tuple[list[dict[str, Any]], list[str]]:
    """(records of the finished runs, names of the missing ones), starting nothing. A damaged run folder or one of
    another design (:func:`read_finished`) is missing, with the reason: ``NAME (unreadable: JSONDecodeError): ...``
    or ``NAME (another design): ...``."""
    records, missing = [], []
    for spec in specs:
        run_dir = Path(runs_dir) / spec.name
        if not (run_dir / "done.json").is_file():
            missing.append(spec.name)
            continue
        try:
            records.append(read_finished(spec, run_dir))
        except RunFolderError as e:  # a damaged run folder is reported, not fatal
            missing.append(f"{spec.name} ({e.kind}): {e.detail}")
    return records, missing


def _progress(total: int, initial: int, enabled: bool):
    if not enabled:
        return None
    from ragen_core.progress import progress_bar

    return progress_bar(total, initial=initial, desc="study", unit="run", leave=True)


class Interrupted(KeyboardInterrupt):
    """A study stopped by Ctrl-C (`signum` SIGINT) or SIGTERM: no further run was started, and the runs that were
    running were stopped at their last checkpoint (`stopped`, names); `not_started` and `failed` (``NAME: why``, the
    runs that had failed before the stop) list the others that did not finish. A KeyboardInterrupt, so that code
    that handles Ctrl-C handles it too."""

    def __init__(self, signum: int = signal.SIGINT, stopped: Iterable[str] = (), not_started: Iterable[str] = (),
                 failed: Iterable[str] = ()):
        # What a script that does not catch it prints after the class name: say what kind of stop it is.
        super().__init__(f"{signal.Signals(signum).name}: the study was stopped (a KeyboardInterrupt)")
        self.signum = signum
        self.stopped = list(stopped)
        self.not_started = list(not_started)
        self.failed = list(failed)


def _signum(cause: KeyboardInterrupt, received: list[int]) -> int:
    """The signal that stopped a study: `cause`'s, else the last signal :func:`_stop_requests` recorded (Ray turns
    an exception raised in its waits into a plain KeyboardInterrupt, so the exception alone may not say which), else
    Ctrl-C's SIGINT."""
    if isinstance(cause, Interrupted):
        return cause.signum
    return received[-1] if received else signal.SIGINT


def run_local(specs: list[RunSpec], runs_dir: str | Path, workers: int = 2, progress: bool = True,
              execute: Callable[[RunSpec, str | Path], dict[str, Any]] = execute_warm_run) -> list[dict[str, Any]]:
    """Run `specs` on `workers` local processes at a time (threads that each wait on one training process, forked
    from the warm process by default: :func:`execute_warm_run`). As with any multiprocessing start method but fork,
    a script calling this needs the ``if __name__ == "__main__":`` guard: each forked run imports the script.

    A failed run is reported after the others finish (RuntimeError listing every failure, each with its log's last
    lines). Ctrl-C (KeyboardInterrupt) or SIGTERM starts no further run: the queued ones are cancelled, the running
    ones are sent Ctrl-C (:func:`stop_running`: each stops at its last checkpoint, also when the interrupt reached
    only this process) and waited for, and :class:`Interrupted` says which were stopped.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1; got {workers}")
    records, todo = _split_done(specs, runs_dir)
    bar = _progress(len(specs), len(records), progress)
    failures: list[str] = []
    futures: dict[Any, RunSpec] = {}
    pool = ThreadPoolExecutor(max_workers=workers)
    _STOPPING.clear()  # a stop of an earlier study in this process
    with _stop_requests() as received:  # Ctrl-C and SIGTERM are recorded here, acted on in the loop below
        try:
            with _signals_blocked():  # the worker threads are created here, and keep this mask (see below)
                futures.update({pool.submit(execute, s, runs_dir): s for s in todo})
            pending = set(futures)
            while pending and not received:  # woken twice a second, so a recorded stop is acted on at once
                done, pending = wait_all(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                if received:  # runs that ended with the stop (a run that got the signal too) are the stop's
                    break
                for fut in done:
                    _collect(fut, futures[fut], records, failures)
                    if bar is not None:
                        bar.update(1)
            if received:  # a stop that came as the last run ended is a stop too: the study ends as stopped
                raise Interrupted(received[0])
        except KeyboardInterrupt as e:  # the recorded stop, or a KeyboardInterrupt of a handler not ours
            # Cancel the queued runs (leaving the pool would start each of them), stop the running ones, wait for
            # them. Signals that come meanwhile are only recorded: a second Ctrl-C does not cut this wait short.
            pool.shutdown(wait=False, cancel_futures=True)
            stop_running()
            # Not the cancelled ones: a future cancelled by shutdown() is never marked done for wait() (CPython).
            wait_all([f for f in futures if not f.cancelled()])
            raise _interrupted(_signum(e, received), futures, failures) from None
        finally:
            pool.shutdown(wait=True)
            _STOPPING.clear()  # every run of this study has ended: runs started here later (execute_run) may start
            if bar is not None:
                bar.close()
    if failures:
        raise RuntimeError("some runs failed:\n  " + "\n  ".join(failures))
    return _in_order(records, specs)


@contextlib.contextmanager
def _stop_requests() -> Iterator[list[int]]:
    """While inside (in the main thread): SIGTERM, and Ctrl-C's SIGINT where Python turns it into KeyboardInterrupt,
    only append their number to the yielded list (:data:`_STOP_SIGNALS`), which :func:`run_local`'s loop reads twice
    a second and :func:`_execute` before it starts a run (a worker thread whose run has just ended would otherwise
    start the next one in the moment before the loop acts).

    Why not an exception: one raised at whatever bytecode the main thread is on could land inside the pool's start
    of a worker thread, or between a submit and the record of its future. Masking the signal in the main thread
    does not prevent that: any thread that takes it (a worker thread, whose mask Python's resource tracker clears
    when the warm process starts) makes the main thread raise at its next bytecode. CI found the result: a study
    Ctrl-C'd in its first second printed "0 of 4 runs finished", and its first run, which no stop reached, trained
    to its end before the process exited. A handler that only records cannot interrupt anything.

    A study started with SIGINT ignored (``nohup``, a background job) keeps ignoring it, and one whose SIGINT has a
    handler of its own keeps that handler (a KeyboardInterrupt it raises is still handled, as before). Outside the
    main thread, where no handler can be set, the list stays empty."""
    received = _STOP_SIGNALS
    received.clear()
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def record(signum: int, frame: Any) -> None:
        received.append(signum)  # no lock taken: the main thread may be inside any lock's code when this runs

    previous: dict[int, Any] = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        if signum == signal.SIGINT and signal.getsignal(signum) is not signal.default_int_handler:
            continue
        previous[signum] = signal.signal(signum, record)
    try:
        yield received
    finally:  # None: a handler set outside Python, which cannot be set again from here
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        received.clear()


@contextlib.contextmanager
def _signals_blocked() -> Iterator[None]:
    """Ctrl-C (SIGINT) and SIGTERM blocked in this thread inside the block, and delivered (if they came) as it ends.

    :func:`run_local` submits its runs inside it, so that the pool's worker threads, started there, keep the mask
    (:func:`warm_context` restores it after Python's resource tracker clears it): a signal to the process then
    reaches the main thread, whose wait it wakes at once, and not a worker thread, after which the main thread acted
    only at its next wake-up. That a signal cannot land between a worker thread's start and the pool's record of it
    is :func:`_stop_requests`'s doing: a mask does not ensure it (any thread that takes the signal makes the main
    thread act). Where the platform has no signal masks (Windows) this does nothing."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _collect(fut: Any, spec: RunSpec, records: list[dict[str, Any]], failures: list[str]) -> None:
    """The finished future `fut` of `spec`'s run: its record into `records`, or its failure into `failures`."""
    try:
        records.append(fut.result())
    except Exception as e:  # noqa: BLE001 - every run's failure is collected and reported together
        failures.append(f"{spec.name}: {e}")


def _interrupted(signum: int, futures: dict[Any, RunSpec], failures: list[str]) -> Interrupted:
    """The :class:`Interrupted` of a stop of :func:`run_local` whose runs (`futures`, all done or cancelled by now)
    were stopped: the cancelled ones were not started; the others that did not return a record were stopped, but for
    those in `failures` (failed before the stop)."""
    failed = {f.split(":", 1)[0] for f in failures}
    not_started = [s.name for f, s in futures.items()
                   if f.cancelled() or NOT_STARTED in str(f.exception())]
    stopped = [s.name for f, s in futures.items()
               if not f.cancelled() and f.exception() is not None and s.name not in failed
               and NOT_STARTED not in str(f.exception())]
    return Interrupted(signum, sorted(stopped), sorted(not_started), failures)


def run_ray(specs: list[RunSpec], runs_dir: str | Path, address: str, progress: bool = True,
            execute: Callable[[RunSpec, str | Path], dict[str, Any]] = execute_run,
            init_kwargs: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Run `specs` as Ray tasks (one CPU each) on the cluster at `address`.

    ``address="local"`` starts a single-node Ray instance on this machine (what the tests use: Ray 2.60 removed
    ``local_mode``). Requires ``pip install ragen2[ray]``.

    Ctrl-C or SIGTERM (recorded by :func:`_stop_requests`, set after ``ray.init``, whose own SIGTERM handler would end
    this process at once) writes each unfinished run's :func:`stop_file`: a queued task then starts no run, and a
    running one sends its training process Ctrl-C (it stops at its last checkpoint). Every task is waited for (Ray's
    own ``ray.cancel`` reaches a task only once its training process has ended), then :class:`Interrupted` names
    the runs that were stopped. A Ray instance started here is shut down.
    """
    try:
        import ray
    except ImportError:
        raise RuntimeError("--ray needs Ray: pip install 'ragen2[ray]' (tested with ray 2.60.0)") from None
    kwargs = dict(init_kwargs or {})
    kwargs.setdefault("include_dashboard", False)
    kwargs.setdefault("log_to_driver", False)
    started_here = not ray.is_initialized()
    if started_here:
        if address == "local":
            ray.init(**kwargs)
        else:
            ray.init(address=address, **kwargs)
    bar = None
    pending: dict[Any, RunSpec] = {}
    failures: list[str] = []
    try:
        with _stop_requests() as received:  # recorded, acted on below: never raised between a submit and its record
            try:
                task = ray.remote(num_cpus=1, max_retries=0)(execute)
                records, todo = _split_done(specs, runs_dir)
                bar = _progress(len(specs), len(records), progress)
                pending.update({task.remote(s, str(runs_dir)): s for s in todo})
                while pending and not received:
                    # With a timeout: a blocked ray.wait runs no signal handler until a run ends.
                    ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
                    if not ready or received:
                        continue
                    spec = pending.pop(ready[0])
                    try:
                        records.append(ray.get(ready[0]))
                    except Exception as e:  # noqa: BLE001 - collected and reported together
                        failures.append(f"{spec.name}: {e}")
                    if bar is not None:
                        bar.update(1)
                if received:
                    raise Interrupted(received[0])
            except KeyboardInterrupt as e:  # the recorded stop, or Ray's KeyboardInterrupt (a handler not ours)
                raise _ray_interrupted(ray, _signum(e, received), pending, Path(runs_dir), failures) from None
    finally:
        if bar is not None:
            bar.close()
        if started_here:
            ray.shutdown()
    if failures:
        raise RuntimeError("some runs failed:\n  " + "\n  ".join(failures))
    return _in_order(records, specs)


def _ray_interrupted(ray: Any, signum: int, pending: dict[Any, RunSpec], runs_dir: Path,
                     failures: list[str]) -> Interrupted:
    """Stop the `pending` Ray tasks of a stopped :func:`run_ray` by their :func:`stop_file` and wait until each has
    ended (a running one once its training process has stopped: :func:`_wait`); the :class:`Interrupted` naming
    them. The stop files are removed again, so that the next study on these folders runs them."""
    for spec in pending.values():
        stop_file(runs_dir, spec.name).touch()
    stopped, not_started = [], []
    try:
        for ref, spec in pending.items():
            try:
                ray.get(ref)  # a run that finished before the stop: its done.json is written, and it is counted
            except Exception as e:  # noqa: BLE001 - the run's RuntimeError after its stop, or "was not started"
                (not_started if NOT_STARTED in str(e) else stopped).append(spec.name)
    finally:
        for spec in pending.values():
            stop_file(runs_dir, spec.name).unlink(missing_ok=True)
    return Interrupted(signum, sorted(stopped), sorted(not_started), failures)


def _split_done(specs: list[RunSpec], runs_dir: str | Path) -> tuple[list[dict[str, Any]], list[RunSpec]]:
    """(records of the finished runs, specs still to run); the stop files (:func:`stop_file`) of the latter that a
    study killed while it stopped may have left are removed, so that they run."""
    records, _ = finished_records(specs, runs_dir)
    names = {r["name"] for r in records}
    todo = [s for s in specs if s.name not in names]
    for s in todo:
        stop_file(runs_dir, s.name).unlink(missing_ok=True)
    return records, todo


def _in_order(records: list[dict[str, Any]], specs: list[RunSpec]) -> list[dict[str, Any]]:
    by_name = {r["name"]: r for r in records}
    return [by_name[s.name] for s in specs if s.name in by_name]
