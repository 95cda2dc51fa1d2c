"""The sandbox (ragen_envs.code.sandbox): basic behaviour, each isolation layer, the hostile-program corpus.

Every program of tests/envs/hostile_programs/ is run (a) through CodeEnv on a one-test task, which must give
reward 0 and the expected verdict, and (b) directly with run_program (`fn_*` programs: run_function),
whose full output is checked for the markers that would reveal an escape (secret file, environment
variable, expected output, world-readable host files, the project checkout, files written on the host,
connections to a listener, a message from another run, sockets or namespaces created) and after which
nothing of the run may remain (processes, SysV IPC objects, mounts, temporary directories, cgroups).
`test_zz_outcome_table` prints what each attempt did (run with `-s` to see it).
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

import ragen_envs
from ragen_envs.code import (
    CodeEnv,
    Limits,
    outputs_match,
    run_function,
    run_program,
    sandbox,
    sandbox_isolation,
)
from ragen_envs.code.sandbox import cgroup, inside, isolation, rootfs, runner, seccomp

pytestmark = pytest.mark.xdist_group("sandbox")

HOSTILE_DIR = Path(__file__).parent / "hostile_programs"
LIMITS = Limits(
    wall_seconds=1.0,
    cpu_seconds=1,
    memory_bytes=256 * 2**20,
    output_bytes=64 * 1024,
    file_bytes=4 * 2**20,
    disk_bytes=8 * 2**20,
    max_processes=8,
)

# program -> verdicts accepted for its (single) test in the env
EXPECTED_VERDICTS = {
    "infinite_loop": {"time limit"},
    "sleep_forever": {"time limit"},
    "fork_bomb": {"time limit", "runtime error"},
    "memory_bomb": {"memory limit"},
    "huge_output": {"output limit"},
    "disk_filler": {"output limit"},
    "write_outside": {"wrong answer"},
    "read_parent_env": {"wrong answer"},
    "read_secret_file": {"wrong answer"},
    "socket_connect": {"wrong answer", "runtime error"},
    "kill_parent": {"runtime error"},
    "daemon": {"wrong answer"},
    "exit_zero_wrong": {"wrong answer"},
    "os_exit_before_flush": {"wrong answer"},
    "correct_then_crash": {"runtime error"},
    "patch_exit": {"runtime error"},
    "read_tests": {"wrong answer"},
    "privilege_escalation": {"wrong answer"},
    # issue 11: IPC, whole-run limits, caller crash, host reads, vsock, user namespaces
    "ipc_shared_memory": {"wrong answer"},
    "aggregate_memory": {"memory limit"},
    "aggregate_cpu": {"time limit"},
    "host_reads": {"wrong answer"},
    "vsock_and_raw_sockets": {"wrong answer"},
    "user_namespace": {"wrong answer"},
    "fn_deep_result": {"runtime error"},
    "fn_fake_json": {"runtime error", "output limit"},
    "fn_huge_int": {"runtime error"},
    # issue 23: the configuration in the program's memory, the page cache, syscalls the filter missed
    "read_config_memory": {"wrong answer"},
    "page_cache_channel": {"wrong answer"},
    "seccomp_gaps": {"wrong answer"},
    # cross-run channels: host-wide inode counters, the host's kernel log
    "inode_counter_channel": {"wrong answer"},
    "kernel_log_channel": {"wrong answer"},
}
# Programs that need more wall time than LIMITS gives to show what they do (large allocations are slow
# in a VM; ctypes and memory scans are slow on a loaded machine); with 1 s they would end by the wall
# deadline whatever the sandbox enforces.
SLOW = {"ipc_shared_memory", "aggregate_memory", "aggregate_cpu", "read_config_memory", "page_cache_channel",
        "seccomp_gaps", "inode_counter_channel", "kernel_log_channel"}
# Programs that test one limit and must not run into another first: filling 5 x 180 MiB costs about
# 0.5 CPU-s on a quiet machine but over 1 s when the cores are shared (page faults contend), so the
# memory test gets CPU time to spare; with 1 CPU-s it ended as "time limit" in a loaded CI run.
SPARE_CPU = {"aggregate_memory"}
GUARD_VERDICTS = {  # guard mode refuses imports (ctypes, socket) with an audit hook: an error
    "vsock_and_raw_sockets": {"wrong answer", "runtime error"},
    "user_namespace": {"wrong answer", "runtime error"},
}
GUARD_SUBSET = [
    "vsock_and_raw_sockets",
    "user_namespace",
    "fn_deep_result",
    "fn_fake_json",
    "infinite_loop",
    "fork_bomb",
    "write_outside",
    "read_parent_env",
    "read_secret_file",
    "socket_connect",
    "kill_parent",
    "daemon",
    "read_tests",
]
TABLE: list[tuple[str, str, str, str, str]] = []


# ----------------------------------------------------------------------------------------------- basics
def test_isolation_is_reported():
    iso = sandbox_isolation()
    assert iso.mode in ("namespaces", "userns", "guard")
    assert iso.mode in iso.describe() and iso.network and iso.processes
    print("\n" + iso.describe())


def test_trivial_program_and_stdin():
    res = run_program("print(sum(map(int, input().split())))", "1 2 39\n", limits=LIMITS)
    assert res.verdict == "ok" and res.exit_code == 0
    assert res.stdout == "42\n"


def test_large_stdin_is_delivered_whole():
    data = "x" * 300_000 + "\n"
    res = run_program("import sys\nprint(len(sys.stdin.read()))", data, limits=LIMITS)
    assert res.stdout.strip() == str(len(data))


def test_empty_environment_isolated_interpreter_and_fresh_workdir():
    src = (
        "import os, sys\n"
        "print(sorted(os.environ))\n"
        "print(os.getcwd())\n"
        "print(sorted(os.listdir('.')))\n"
        "print(sys.flags.no_user_site, sys.flags.no_site, sys.flags.hash_randomization, sys.flags.safe_path)\n"
    )
    a = run_program(src, limits=LIMITS)
    b = run_program(src, limits=LIMITS)
    assert a.verdict == "ok", a.stderr
    env_line, cwd, listing, flags = a.stdout.splitlines()
    # Nothing inherited; LC_CTYPE is set by the interpreter itself (PEP 538 C-locale coercion).
    assert set(eval(env_line)) <= {"LC_CTYPE"}, env_line
    assert listing == "['solution.py']"
    # -I without -E (-s -S, PYTHONSAFEPATH from the sandbox's own environment), so that PYTHONHASHSEED=0 holds: no
    # user site, no site, no hash randomisation, no script folder on sys.path.
    assert flags == "1 1 0 True"
    assert cwd != b.stdout.splitlines()[1], "two runs shared a working directory"
    assert not os.path.exists(cwd), "the temporary working directory was not removed"


def test_project_and_site_packages_are_not_importable():
    res = run_program("import ragen_envs", limits=LIMITS)
    assert res.verdict == "runtime error" and "ModuleNotFoundError" in res.stderr
    res = run_program("import numpy", limits=LIMITS)
    assert res.verdict == "runtime error" and "ModuleNotFoundError" in res.stderr


def test_runtime_error_and_exit_codes():
    res = run_program("raise ValueError('boom')", limits=LIMITS)
    assert res.verdict == "runtime error" and res.exit_code == 1 and "ValueError: boom" in res.stderr
    assert run_program("import sys; sys.exit(7)", limits=LIMITS).exit_code == 7
    assert run_program("import sys; sys.exit('msg')", limits=LIMITS).exit_code == 1
    assert run_program("import sys; sys.exit()", limits=LIMITS).verdict == "ok"
    res = run_program("def f(): f()\nf()", limits=LIMITS)
    assert res.verdict == "runtime error" and "RecursionError" in res.stderr


def test_function_mode():
    res = run_function("def add(a, b):\n    print('debug')\n    return [a + b, (a, b)]", "add", [2, 3], limits=LIMITS)
    assert res.verdict == "ok" and res.has_value and res.value == [5, [2, 3]]
    assert "debug" in res.stderr and res.stdout.strip() == json.dumps([5, [2, 3]])
    res = run_function("class Solution:\n    def twice(self, x):\n        return 2 * x", "twice", [21], limits=LIMITS)
    assert res.value == 42
    res = run_function("def f(**kw):\n    return sorted(kw)", "f", [], {"b": 1, "a": 2}, limits=LIMITS)
    assert res.value == ["a", "b"]
    assert run_function("def g(): return 1", "f", limits=LIMITS).verdict == "runtime error"
    res = run_function("def f(): return object()", "f", limits=LIMITS)
    assert res.verdict == "runtime error" and not res.has_value


def test_bad_arguments_raise_value_error():
    with pytest.raises(ValueError, match="source"):
        run_program(b"print(1)")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown limit"):
        run_program("print(1)", limits={"wall": 1})
    with pytest.raises(ValueError, match="wall_seconds"):
        Limits(wall_seconds=0)
    with pytest.raises(ValueError, match="memory_bytes"):
        Limits(memory_bytes=1024**2)
    with pytest.raises(ValueError, match="identifier"):
        run_function("x = 1", "not a name")
    with pytest.raises(ValueError, match="JSON"):
        run_function("def f(x): return x", "f", [object()])
    with pytest.raises(ValueError, match="absolute"):
        run_program("print(1)", hide_paths=["relative/path"])


def test_output_judges_against_hand_written_cases():
    assert outputs_match("1 2\n3\n", "1 2\n3")
    assert outputs_match("1 2  \r\n3\n\n\n", "1 2\n3\n")
    assert not outputs_match("1  2\n3\n", "1 2\n3\n")  # inner whitespace counts
    assert not outputs_match("\n1\n", "1\n")  # leading blank lines count
    assert not outputs_match("", "0\n")


# ----------------------------------------------------------------------------------------------- hostile corpus
def test_corpus_is_complete():
    files = {p.stem for p in HOSTILE_DIR.glob("*.py")}
    assert files == set(EXPECTED_VERDICTS), files ^ set(EXPECTED_VERDICTS)


class _Listener:
    """TCP + UDP listener on one localhost port; records anything that arrives."""

    def __init__(self):
        self.tcp = socket.socket()
        self.tcp.bind(("127.0.0.1", 0))
        self.tcp.listen(8)
        self.tcp.settimeout(0.1)
        self.port = self.tcp.getsockname()[1]
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", self.port))
        self.udp.settimeout(0.1)
        self.events: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self):
        while not self._stop.is_set():
            for sock, kind in ((self.tcp, "tcp"), (self.udp, "udp")):
                try:
                    if kind == "tcp":
                        conn, _ = sock.accept()
                        self.events.append("tcp connection")
                        conn.close()
                    else:
                        sock.recvfrom(1024)
                        self.events.append("udp datagram")
                except OSError:
                    pass

    def close(self):
        self._stop.set()
        self._thread.join(2)
        self.tcp.close()
        self.udp.close()


def _public_dir() -> Path:
    """A fresh world-readable directory in a world-readable place of the host that no sandbox layer but
    the program's own root hides (not under /tmp or /var/tmp, which older sandboxes covered with tmpfs)."""
    for parent in ("/var/cache", "/var/lib", "/opt", "/srv", "/usr/local/share"):
        if os.path.isdir(parent) and os.stat(parent).st_mode & 0o005 == 0o005 and os.access(parent, os.W_OK):
            path = Path(tempfile.mkdtemp(prefix="ragen-public-", dir=parent))
            os.chmod(path, 0o755)
            return path
    pytest.skip("no world-readable, writable directory outside /tmp for the host-read check")


@pytest.fixture
def hostile_setup(tmp_path, monkeypatch):
    token = secrets.token_hex(8)
    expected = f"zz-expected-{secrets.token_hex(8)}"
    dataset = tmp_path / "secret_tests.jsonl"
    dataset.write_text(
        json.dumps({"problem": "Print the secret word.", "tests": [{"input": "ping\n", "output": expected + "\n"}]})
        + "\n"
    )
    fn_dataset = tmp_path / "secret_fn_tests.jsonl"
    fn_dataset.write_text(
        json.dumps(
            {"problem": "Return the secret word.", "fn_name": "solve", "tests": [{"input": [1], "output": expected}]}
        )
        + "\n"
    )
    # A world-readable file in a world-readable directory: only the sandbox's own root can hide it.
    public_dir = _public_dir()
    os.chmod(public_dir, 0o755)
    public_marker = f"WORLD-READABLE-{token}"
    public_file = public_dir / "public.txt"
    public_file.write_text(public_marker)
    os.chmod(public_file, 0o644)
    project_file = Path(ragen_envs.__file__).resolve().parents[1] / "ragen_envs" / "code" / "sandbox" / "__init__.py"
    git_config = project_file.parents[3] / ".git" / "config"
    outside = tmp_path / "outside"
    outside.mkdir()
    os.chmod(outside, 0o777)  # world-writable on purpose: only the sandbox may stop the write
    secret_dir = Path.home() / f".ragen-sandbox-test-{token}"
    secret_dir.mkdir(mode=0o700)
    secret = secret_dir / "secret.txt"
    secret_marker = f"SECRET-FILE-{token}"
    secret.write_text(secret_marker)
    os.chmod(secret, 0o600)
    env_marker = f"SECRET-ENV-{token}"
    monkeypatch.setenv("RAGEN_TEST_SECRET", env_marker)
    listener = _Listener()
    marker = f"ragen-escape-{token}"
    subs = {
        "__MARKER__": marker,
        "__OUTSIDE_DIR__": str(outside),
        "__PARENT_PID__": str(os.getpid()),
        "__SECRET_PATH__": str(secret),
        "__PORT__": str(listener.port),
        "__EXPECTED__": expected,
        "__DATASET_PATH__": str(dataset),
        "__DATASET_PATH_HEX__": str(dataset).encode().hex(),
        "__PROJECT_FILE__": str(project_file),
        "__PROJECT_GIT_CONFIG__": str(git_config),
        "__WORLD_READABLE__": str(public_file),
        "__LOG_TOKEN__": _log_token(),
    }
    outside_paths = [outside / marker] + [
        Path(d) / marker for d in ("/tmp", "/var/tmp", "/dev/shm", "/root", "/etc", "/")
    ]
    yield {
        "subs": subs,
        "dataset": dataset,
        "fn_dataset": fn_dataset,
        "public_marker": public_marker,
        "project_marker": "Run untrusted Python programs: the security boundary",
        "expected": expected,
        "secret_marker": secret_marker,
        "env_marker": env_marker,
        "listener": listener,
        "outside_paths": outside_paths,
    }
    listener.close()
    shutil.rmtree(secret_dir, ignore_errors=True)
    shutil.rmtree(public_dir, ignore_errors=True)
    for p in outside_paths:  # leave the machine clean even when a test failed
        if p.is_file():
            p.unlink()


def _program(name: str, subs: dict[str, str]) -> str:
    text = (HOSTILE_DIR / f"{name}.py").read_text()
    for key, value in subs.items():
        text = text.replace(key, value)
    return text


def _surviving(run_id: str) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if run_id.encode() in cmd:
                pids.append(int(entry))
    return pids


def _no_survivors(run_id: str) -> list[int]:
    deadline = time.monotonic() + 2.0
    while True:
        alive = _surviving(run_id)
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def _ipc_objects() -> set[str]:
    """The host's SysV IPC objects (shared memory, semaphores, message queues): key and id columns."""
    found = set()
    for kind in ("shm", "sem", "msg"):
        try:
            lines = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()[1:]
        except OSError:
            continue
        found |= {f"{kind} {' '.join(line.split()[:2])}" for line in lines}
    return found


def _leftovers(run_id: str) -> list[str]:
    """Everything of a finished run that is still on the host: mounts, temp dirs, cgroups."""
    left = []
    if run_id in Path("/proc/self/mountinfo").read_text():
        left.append("a mount")
    tmp = tempfile.gettempdir()
    left += [f"temp dir {n}" for n in os.listdir(tmp) if n.startswith(run_id)]
    setup = isolation.ensure_probed()[1]["cgroups"]
    left += [f"cgroup {p}" for p in cgroup.stale_run_cgroups(setup) if run_id in p]
    return left


def _contain(name: str, setup: dict, verdicts: dict[str, set[str]] | None = None) -> None:
    program = _program(name, setup["subs"])
    limits = dataclasses.replace(LIMITS, wall_seconds=6.0) if name in SLOW else LIMITS
    if name in SPARE_CPU:
        limits = dataclasses.replace(limits, cpu_seconds=5)
    function = name.startswith("fn_")
    ipc_before = _ipc_objects()
    env = CodeEnv(dataset=setup["fn_dataset" if function else "dataset"], limits=limits)
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step(f"<think>x</think><answer>\n```python\n{program}\n```\n</answer>")
    assert reward == 0.0, f"{name}: reward {reward}"
    expected = (verdicts or {}).get(name, EXPECTED_VERDICTS[name])
    assert terminated and info["verdicts"][0] in expected, (name, info["test_results"])
    env_run_id = info["test_results"][0]["run_id"]

    if function:
        res = run_function(program, "solve", [1], limits=limits, hide_paths=[setup["fn_dataset"]])
    else:
        res = run_program(program, "ping\n", limits=limits, hide_paths=[setup["dataset"]])
    out = res.stdout + res.stderr
    problems = []
    for run_id in (env_run_id, res.run_id):
        alive = _no_survivors(run_id)
        if alive:
            problems.append(f"processes of run {run_id} survive: {alive}")
        left = _leftovers(run_id)
        if left:
            problems.append(f"run {run_id} left {left}")
    new_ipc = _ipc_objects() - ipc_before
    if new_ipc:
        problems.append(f"SysV IPC objects left on the host: {sorted(new_ipc)}")
    given_answer = "__EXPECTED__" in (HOSTILE_DIR / f"{name}.py").read_text()  # exit tricks know it
    if setup["expected"] in out and not given_answer:
        problems.append("the expected output was reachable")
    if setup["secret_marker"] in out:
        problems.append("the root-only secret file was read")
    if setup["env_marker"] in out:
        problems.append("the env process's environment was read")
    if setup["public_marker"] in out:
        problems.append("a world-readable host file was read")
    if setup["project_marker"] in out or "[core]" in out:
        problems.append("the project checkout was read")
    if str(setup["dataset"]) in res.stdout or "root_plan" in out or "hide_paths" in out:
        problems.append("the sandbox configuration was visible")
    for marker in ("CREATED", "SUCCEEDED", "READ FROM A PREVIOUS RUN"):
        if marker in res.stdout:
            problems.append(f"{marker}: {res.stdout[:200]!r}")
    written = [str(p) for p in setup["outside_paths"] if p.exists()]
    if written:
        problems.append(f"files written outside the sandbox: {written}")
    time.sleep(0.1)
    if setup["listener"].events:
        problems.append(f"the listener received {setup['listener'].events}")
    if name == "privilege_escalation" and res.isolation == "namespaces":
        if res.stdout.strip() == "0" or "SUCCEEDED" in res.stderr:
            problems.append("regained uid 0")
    if name == "aggregate_memory" and res.peak_memory is not None and res.peak_memory > limits.memory_bytes * 1.1:
        problems.append(f"the run held {res.peak_memory} bytes against {limits.memory_bytes}")
    if name == "aggregate_cpu" and res.cpu_time is not None and res.cpu_time > limits.cpu_limit + 0.5:
        problems.append(f"the run used {res.cpu_time:.2f} CPU-s against {limits.cpu_limit}")
    # The env and the sandbox stay usable after every attempt (a usability check, not a timing one).
    after = run_program("print(6 * 7)", limits=dataclasses.replace(LIMITS, wall_seconds=10.0))
    if after.verdict != "ok" or after.stdout != "42\n":
        problems.append(f"the sandbox broke: {after}")

    attempts = "; ".join(
        line[len("ATTEMPT ") :] for line in res.stderr.splitlines() if line.startswith("ATTEMPT ")
    )
    TABLE.append(
        (
            f"{name} [{res.isolation}]",
            info["verdicts"][0],
            f"{res.verdict}: {res.detail}"[:90],
            attempts[:300] or "-",
            "CONTAINED" if not problems else "ESCAPED: " + "; ".join(problems),
        )
    )
    assert not problems, f"{name}: " + "; ".join(problems)


@pytest.mark.parametrize("name", sorted(EXPECTED_VERDICTS))
def test_hostile_program_is_contained(name, hostile_setup):
    _contain(name, hostile_setup)


@pytest.fixture
def guard_mode(monkeypatch):
    monkeypatch.setenv("RAGEN_SANDBOX_MODE", "guard")
    isolation.reset_probe_cache()
    assert sandbox_isolation().mode == "guard"
    yield
    monkeypatch.delenv("RAGEN_SANDBOX_MODE")
    isolation.reset_probe_cache()


@pytest.mark.parametrize("name", GUARD_SUBSET)
def test_hostile_program_is_contained_in_guard_mode(name, guard_mode, hostile_setup):
    _contain(name, hostile_setup, GUARD_VERDICTS)


# ----------------------------------------------------------------------------------------------- the layers, one by one
def _needs_namespaces():
    if sandbox_isolation().mode == "guard":
        pytest.skip("this layer needs the namespace modes (root or unprivileged user namespaces)")


def _needs_seccomp():
    if seccomp.seccomp_program()[0] is None:
        pytest.skip(f"no seccomp layer here: {seccomp.seccomp_program()[1]}")


def _needs_cgroups():
    setup = isolation.ensure_probed()[1]["cgroups"]
    if setup.mechanism == "watch":
        pytest.skip("no writable cgroup hierarchy here (the process-tree watch applies): " + "; ".join(setup.notes))
    return setup


HOSTILE_RESULTS = {
    "990 levels": "def f():\n    a = [1]\n    for _ in range(990):\n        a = [a]\n    return a",
    "100k brackets from a replaced json.dumps": (
        "import json\njson.dumps = lambda *a, **k: '[' * 100000 + ']' * 100000\ndef f():\n    return 1"
    ),
    "200k brackets, unbalanced": "import json\njson.dumps = lambda *a, **k: '[' * 200000\ndef f():\n    return 1",
    "5000-digit integer": (
        "import sys\nsys.set_int_max_str_digits(0)\ndef f():\n    return 10 ** 4999"
    ),
    "101 levels of objects": "def f():\n    a = {}\n    for _ in range(101):\n        a = {'k': a}\n    return a",
    "not JSON": "import json\njson.dumps = lambda *a, **k: 'print(1)'\ndef f():\n    return 1",
}


@pytest.mark.parametrize("case", sorted(HOSTILE_RESULTS))
def test_run_function_turns_any_result_into_a_verdict(case):
    """Issue 11.1: whatever the program prints as its result, run_function returns a verdict."""
    res = run_function(HOSTILE_RESULTS[case], "f")
    assert res.verdict == "runtime error" and not res.has_value and res.value is None, res
    assert "no readable result" in res.detail


def test_run_function_keeps_legitimate_nested_and_special_results():
    res = run_function("def f():\n    a = 1\n    for _ in range(99):\n        a = [a]\n    return a", "f")
    assert res.verdict == "ok" and res.has_value
    depth, v = 0, res.value
    while isinstance(v, list):
        depth, v = depth + 1, v[0]
    assert depth == 99 and v == 1
    res = run_function("def f():\n    return [float('nan'), float('inf'), 10 ** 4000, {'a': [None, True]}]", "f")
    assert res.verdict == "ok" and res.value[1] == float("inf") and res.value[2] == 10**4000


def test_ipc_namespace_nothing_crosses_runs_or_stays():
    """Issue 11.2: SysV shared memory, semaphores and message queues die with the run."""
    _needs_namespaces()
    key = 0x52474E00 + secrets.randbelow(255)
    writer = (
        "import ctypes\nL = ctypes.CDLL(None, use_errno=True)\nL.shmat.restype = ctypes.c_void_p\n"
        "L.shmat.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_int)\n"
        f"s = L.shmget({key}, 4096, 0o1666)\np = L.shmat(s, None, 0)\nctypes.memmove(p, b'hello-next-run', 14)\n"
        f"print(s >= 0, L.semget({key}, 1, 0o1666) >= 0, L.msgget({key}, 0o1666) >= 0)\n"
    )
    reader = (
        "import ctypes\nL = ctypes.CDLL(None, use_errno=True)\n"
        f"print(L.shmget({key}, 0, 0), L.semget({key}, 0, 0), L.msgget({key}, 0))\n"
    )
    before = _ipc_objects()
    first = run_program(writer, limits=LIMITS)
    assert first.verdict == "ok" and first.stdout.split() == ["True", "True", "True"], first
    second = run_program(reader, limits=LIMITS)
    assert second.verdict == "ok" and second.stdout.split() == ["-1", "-1", "-1"], second
    assert _ipc_objects() - before == set()
    assert not any(f"{key:#010x}"[2:] in line or str(key) in line for line in _ipc_objects())


MEMORY_HOG = (
    "import os, time\n"
    "for _ in range(5):\n"
    "    if os.fork() == 0:\n"
    "        x = b'\\1' * (180 << 20); time.sleep(2); os._exit(0)\n"
    "for _ in range(5): os.wait()\n"
    "print('all allocated')\n"
)
CPU_HOG = (
    "import os, time\n"
    "for _ in range(4):\n"
    "    if os.fork() == 0:\n"
    "        t = time.process_time()\n"
    "        while time.process_time() - t < 0.9: pass\n"
    "        os._exit(0)\n"
    "for _ in range(4): os.wait()\n"
    "print('all spun')\n"
)
WHOLE_RUN = Limits(wall_seconds=8.0, cpu_seconds=1, memory_bytes=256 * 2**20, max_processes=8)


def _check_whole_run_limits(slack: float = 1.15):
    # The memory part with room in CPU and wall time: on a loaded machine (the suite's other workers) the five
    # forks and their allocations could otherwise reach the run's 1 CPU-second or its wall deadline first, and the
    # run end by a time limit before the memory limit this part is about.
    res = run_program(MEMORY_HOG, limits=dataclasses.replace(WHOLE_RUN, cpu_seconds=4, wall_seconds=30.0))
    assert res.verdict == "memory limit", res
    # The five processes would hold 900 MiB; a cgroup stops them at the limit, the watch (which samples
    # every 50 ms and counts shared pages once per process) shortly after it.
    assert res.peak_memory is not None and res.peak_memory <= WHOLE_RUN.memory_bytes * slack, res.peak_memory
    assert "all allocated" not in res.stdout
    res = run_program(CPU_HOG, limits=WHOLE_RUN)
    assert res.verdict == "time limit" and "CPU time of the run" in res.detail, res
    assert res.cpu_time is not None and res.cpu_time <= WHOLE_RUN.cpu_limit + 0.5, res.cpu_time
    assert res.wall_time < WHOLE_RUN.wall_seconds - 1  # ended by the CPU limit, not the wall deadline


def test_whole_run_memory_and_cpu_are_bounded():
    """Issue 11.3: five processes under their own RLIMIT_AS, four under their own RLIMIT_CPU."""
    _check_whole_run_limits()


@pytest.fixture
def watch_mode(monkeypatch):
    monkeypatch.setenv("RAGEN_SANDBOX_CGROUP", "watch")
    isolation.reset_probe_cache()
    assert "process-tree watch" in sandbox_isolation().resources
    yield
    monkeypatch.delenv("RAGEN_SANDBOX_CGROUP")
    isolation.reset_probe_cache()


def test_whole_run_limits_hold_with_the_process_tree_watch(watch_mode):
    """Issue 11.3, fallback where no cgroup can be written: the caller samples the tree and kills it."""
    _check_whole_run_limits(slack=2.0)


def test_cgroup_per_run_is_created_limited_and_removed():
    setup = _needs_cgroups()
    iso = sandbox_isolation()
    assert iso.resources.startswith(f"cgroup {setup.mechanism}")
    probe = (
        "import os\nprint('cgroup visible:', os.path.exists('/proc/self/cgroup'))\n"
        "pids = []\nfor _ in range(40):\n    try:\n        pid = os.fork()\n    except OSError as e:\n"
        "        print('fork refused', e.errno); break\n"
        "    if pid == 0:\n        import time; time.sleep(1); os._exit(0)\n"
        "    pids.append(pid)\nprint('forked', len(pids))\n"
    )
    res = run_program(probe, limits=dataclasses.replace(LIMITS, wall_seconds=4.0, max_processes=6))
    assert res.verdict == "ok", res
    assert "fork refused 11" in res.stdout and int(res.stdout.split("forked ")[1]) <= 6
    # No /proc, so no cgroup path (the run id and the caller's pid) to see; the supervisor also roots a
    # cgroup namespace at the run's cgroup, which would show as "/".
    assert "cgroup visible: False" in res.stdout, res.stdout
    assert not [p for p in cgroup.stale_run_cgroups(setup) if res.run_id in p]


def test_forced_cgroup_mechanism_is_checked(monkeypatch):
    with pytest.raises(ValueError, match="RAGEN_SANDBOX_CGROUP"):
        cgroup.probe_cgroups("v3")
    setup = cgroup.probe_cgroups()
    other = [m for m in ("v2", "v1") if m != setup.mechanism]
    for mechanism in other:
        try:
            forced = cgroup.probe_cgroups(mechanism)
        except RuntimeError as exc:
            assert mechanism in str(exc)
        else:
            assert forced.mechanism == mechanism


def test_the_program_sees_nothing_of_the_host_file_system(tmp_path):
    """Issue 11.4: only the interpreter, its libraries and standard library, and its own dirs."""
    _needs_namespaces()
    public = _public_dir()
    try:
        os.chmod(public, 0o755)
        (public / "f.txt").write_text("public")
        os.chmod(public / "f.txt", 0o644)
        src = (
            "import os, sys\n"
            "top = sorted(os.listdir('/'))\n"
            "walk = []\n"
            "for d in top:\n"
            "    if d in ('proc', 'dev'):\n"
            "        continue\n"
            "    for root, dirs, files in os.walk('/' + d):\n"
            "        walk += [os.path.join(root, f) for f in files]\n"
            f"print(top)\nprint(os.path.exists({str(public)!r}), os.path.exists('/etc/passwd'))\n"
            "import json; print(json.dumps(walk))\n"
        )
        res = run_program(src, limits=dataclasses.replace(LIMITS, wall_seconds=10.0, cpu_seconds=5,
                                                           output_bytes=8 * 2**20))
    finally:
        shutil.rmtree(public, ignore_errors=True)
    assert res.verdict == "ok", res
    top, exists, files = res.stdout.splitlines()
    assert exists == "False False"
    assert set(eval(top)) <= {"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "root", "sbin",
                              "tmp", "usr", "opt", "home", "nix"}
    facts = rootfs.interpreter_facts(sandbox_isolation().python)
    stdlib = [p for p in facts["path"] if os.path.isdir(p)]
    allowed = ("/etc/ld.so.cache", "/usr/lib/locale/", "/tmp/ragen-sbx-")
    for path in json.loads(files):
        path = os.path.realpath(path)  # the host's symlinks (/lib -> usr/lib) are replicated inside
        ok = (
            any(path.startswith(d + "/") for d in stdlib)
            or path.startswith(allowed)
            or path == os.path.realpath(sandbox_isolation().python)
            or path.endswith(".so") or ".so." in path or "/gconv/" in path
        )
        assert ok, f"the sandbox shows {path}"
        assert "site-packages" not in path and "dist-packages" not in path, path


def test_there_is_no_proc_and_no_configuration_to_see():
    """Issue 11.4: /proc/1/cmdline used to show the supervisor's configuration. The sandbox has no /proc at
    all now (its inodes come from the host-wide counter a run could signal through), nor the /dev links
    into it; `open(0)` reads stdin as /dev/stdin did."""
    _needs_namespaces()
    src = (
        "import os, sys\nprint([p for p in ('/proc', '/dev/stdin', '/dev/fd') if os.path.lexists(p)])\n"
        "print(sorted(os.listdir('/')))\nprint(open(0).read().strip())\n"
    )
    res = run_program(src, "via fd 0\n", limits=LIMITS, hide_paths=["/var/tmp/ragen-hidden-path-marker"])
    assert res.verdict == "ok", res
    assert res.stdout.splitlines()[0] == "[]" and res.stdout.splitlines()[2] == "via fd 0", res.stdout
    for secret in ("ragen-hidden-path-marker", "root_plan", "hide_paths", "limits", tempfile.gettempdir() + "/ragen"):
        assert secret not in res.stdout, secret


# What /proc/self/status showed, asked of the kernel directly: `status` = [PR_GET_NO_NEW_PRIVS,
# PR_GET_SECCOMP (2: a filter), the effective capabilities as /proc printed them].
STATUS_PROBE = (
    "import ctypes\nL = ctypes.CDLL(None, use_errno=True)\n"
    "header, data = (ctypes.c_uint32 * 2)(0x20080522, 0), (ctypes.c_uint32 * 6)()\nL.capget(header, data)\n"
    "status = [L.prctl(39, 0, 0, 0, 0), L.prctl(21, 0, 0, 0, 0), '%08x%08x' % (data[3], data[0])]\n"
)


def test_seccomp_and_no_new_privs_are_active():
    """Issue 11.5/11.6: the program runs with NoNewPrivs and a seccomp filter."""
    _needs_seccomp()
    res = run_program(STATUS_PROBE + "print(status[:2])", limits=LIMITS)
    assert res.verdict == "ok" and res.stdout.strip() == "[1, 2]", res


def test_vsock_is_refused_where_the_host_can_create_it():
    """Issue 11.5: AF_VSOCK is not confined by the network namespace."""
    _needs_seccomp()
    try:
        socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM).close()
    except (OSError, AttributeError) as exc:
        pytest.skip(f"this kernel has no AF_VSOCK ({exc}): nothing for the sandbox to refuse")
    src = (
        "import socket\ntry:\n    socket.socket(40, socket.SOCK_STREAM); print('CREATED')\n"
        "except OSError as e:\n    print(e.errno)\n"
    )
    res = run_program(src, limits=LIMITS)
    assert res.stdout.strip() == str(errno.EPERM), res


def test_sockets_of_every_family_are_refused():
    """Every socket numbers its inode with the host-wide counter pipes use (a channel between runs): no
    family is allowed, not even unix and inet, which the network namespace confined."""
    _needs_seccomp()
    candidates = {1: socket.SOCK_STREAM, 2: socket.SOCK_DGRAM, 10: socket.SOCK_STREAM, 16: socket.SOCK_DGRAM,
                  17: socket.SOCK_DGRAM, 38: socket.SOCK_SEQPACKET, 40: socket.SOCK_STREAM}
    creatable = []
    for family, kind in candidates.items():
        try:
            socket.socket(family, kind).close()
            creatable.append(family)
        except OSError:
            pass
    assert {1, 2, 16} <= set(creatable)  # unix, inet, netlink: any process can open them, so the check below bites
    src = (
        "import socket\nout = []\n"
        f"for family, kind in {[(f, int(candidates[f])) for f in creatable]!r}:\n"
        "    try:\n        socket.socket(family, kind); out.append('CREATED %d' % family)\n"
        "    except OSError as e:\n        out.append('%d:%d' % (family, e.errno))\n"
        "try:\n    socket.socketpair(); out.append('CREATED pair')\n"
        "except OSError as e:\n    out.append('pair:%d' % e.errno)\n"
        "print(' '.join(out))\n"
    )
    res = run_program(src, limits=LIMITS)
    assert res.verdict == "ok", res
    assert res.stdout.split() == [f"{f}:{errno.EPERM}" for f in creatable] + [f"pair:{errno.EPERM}"], res.stdout


def test_user_namespaces_are_refused():
    """Issue 11.5: sandboxed code could create a new user namespace."""
    _needs_seccomp()
    src = (
        "import ctypes, os\nL = ctypes.CDLL(None, use_errno=True)\n"
        "rc = L.unshare(0x10000000)\nprint(rc, ctypes.get_errno())\n"
        "rc = L.syscall(56, 0x10000000 | 17, 0, 0, 0, 0)\n"
        "if rc == 0:\n    os._exit(0)\nprint(rc, ctypes.get_errno())\n"
        "import threading\nt = threading.Thread(target=print, args=('threads still work',)); t.start(); t.join()\n"
    )
    res = run_program(src, limits=LIMITS)
    assert res.stdout.split("\n")[:2] == [f"-1 {errno.EPERM}", f"-1 {errno.EPERM}"], res
    assert "threads still work" in res.stdout  # clone3 -> ENOSYS, glibc falls back to clone


ORDINARY_PROGRAM = """
import bisect, collections, decimal, fractions, functools, heapq, itertools, json, math, random, re, string, sys
import array, copy, dataclasses, datetime, enum, io, operator, queue, statistics, struct, time, typing
import concurrent.futures, faulthandler, hashlib, os, signal, tempfile, threading
data = sys.stdin.read().split()
sys.setrecursionlimit(1 << 20)
threading.stack_size(1 << 26)  # the usual deep-recursion idiom: recursion in a thread with a big stack
depth = []
worker = threading.Thread(target=lambda: depth.append((lambda f: f(f, 20000))(lambda f, n: n and 1 + f(f, n - 1))))
worker.start(); worker.join()
threading.stack_size(0)
with concurrent.futures.ThreadPoolExecutor(4) as pool:
    squares = sum(pool.map(lambda x: x * x, range(10)))
pid = os.fork()
if pid == 0:
    os._exit(7)
child = os.waitpid(pid, 0)[1] >> 8
os.mkfifo("fifo")  # IPC between the program's own processes without a pipe()
if os.fork() == 0:
    with open("fifo", "w") as f:
        f.write("through a fifo")
    os._exit(0)
with open("fifo") as f:
    fifo = f.read()
os.wait()
faulthandler.enable()  # a new action for SIGSEGV: a no-op that reports success
signal.signal(signal.SIGFPE, signal.SIG_DFL)
print(sum(map(int, data)), depth[0], squares, child, fifo, os.cpu_count() >= 1, tempfile.mkdtemp()[:5])
"""


def test_ordinary_programs_run_without_pipes_sockets_or_proc():
    """What a task program does (read stdin, compute with the common modules, threads with a deep
    recursion, fork, a FIFO, faulthandler) still runs; a fault ends it with the signal's number."""
    res = run_program(ORDINARY_PROGRAM, "1 2 39\n", limits=dataclasses.replace(LIMITS, wall_seconds=10.0))
    assert res.verdict == "ok", res
    assert res.stdout == "42 20000 285 7 through a fifo True /tmp/\n", res.stdout
    res = run_function("import json\ndef f(xs):\n    return sorted(json.loads(json.dumps(xs)))", "f", [[3, 1, 2]],
                       limits=LIMITS)
    assert res.verdict == "ok" and res.value == [1, 2, 3], res
    res = run_program("import ctypes\nctypes.string_at(16)", limits=LIMITS)
    assert res.verdict == "runtime error" and res.exit_code == signal.SIGSEGV, res
    if seccomp.seccomp_program()[0] is not None:
        res = run_program("import subprocess, sys\nsubprocess.run([sys.executable, '-c', 'pass'])", limits=LIMITS)
        assert res.verdict == "runtime error" and "PermissionError" in res.stderr, res  # a pipe, then execve


def test_a_fault_signal_ends_the_program_process_with_its_number():
    """`inside.exit_on_fault_signals`: the handler is libc's `_exit`, so the status is the signal's number."""
    statuses = []
    for signum in inside.FAULT_SIGNALS:
        pid = os.fork()
        if pid == 0:
            try:
                inside.exit_on_fault_signals()
                os.kill(os.getpid(), signum)
            finally:
                os._exit(99)
        statuses.append(os.waitpid(pid, 0)[1])
    assert [os.WIFEXITED(s) and os.WEXITSTATUS(s) for s in statuses] == list(inside.FAULT_SIGNALS)


def test_a_fault_handler_that_cannot_be_installed_is_a_setup_error():
    class NoSignals:
        exit_address, sig_err = 0, -1

        def signal(self, signum, handler):
            return -1

        def errno(self):
            return errno.EINVAL

    with pytest.raises(inside.SetupError, match="fault handler"):
        inside.exit_on_fault_signals(NoSignals())


# ----------------------------------------------------------------------------------------------- cross-run channels
def _pipe_inode() -> int:
    read_fd, write_fd = os.pipe()
    try:
        return os.fstat(read_fd).st_ino
    finally:
        os.close(read_fd)
        os.close(write_fd)


def test_runs_cannot_pass_data_through_host_wide_inode_counters():
    """A writer run tries to move each host-wide inode counter to a byte, a later run reads the counters.
    Before: pipes, memfds and pidfds carried the byte (exactly, in 6 of 16, 12 of 16 and 14 of 16 run
    pairs, docs/security.md). Now no run can move the pipe counter and none can read the other two."""
    _needs_seccomp()
    _needs_namespaces()
    program = _program("inode_counter_channel", {})
    limits = dataclasses.replace(LIMITS, wall_seconds=10.0, cpu_seconds=5)
    byte = secrets.randbelow(256)
    writer = run_program(program, f"write {byte}\n", limits=limits)
    reader = run_program(program, "read\n", limits=limits)
    assert writer.verdict == "ok" and reader.verdict == "ok", (writer, reader)
    # The writers left (fork, shared mappings) move counters that nothing in a run can read.
    assert writer.stdout == "wrote get_next_ino: no writer; shmem: blind with shared_mapping; pidfs: blind with fork\n"
    got = dict(part.split(": ") for part in reader.stdout[len("read "):].strip().split("; "))
    assert got["shmem"] == "None" and got["pidfs"] == "None", reader.stdout
    # get_next_ino stays readable (stdin is a pipe the launcher made) but was moved by no run
    assert "ATTEMPT stdin: inode" in reader.stderr and "ATTEMPT pipe: EPERM" in reader.stderr, reader.stderr


BUSY_PROGRAM = """
import mmap, os, select, socket, threading
made = {}
def attempt(name, make, times):
    for _ in range(times):
        try:
            make()
        except OSError:
            continue
        made[name] = made.get(name, 0) + 1
def pipe():
    for fd in os.pipe():
        os.close(fd)
def pair():
    for s in socket.socketpair():
        s.close()
def look_up_own_proc_entry():
    try:
        os.stat("/proc/self/task/%d/status" % threading.get_native_id())
    except OSError:
        pass
def thread():  # a new thread's /proc directory, looked up: two fresh /proc inodes, if there were a /proc
    t = threading.Thread(target=look_up_own_proc_entry)
    t.start(); t.join()
def fork():
    if os.fork() == 0:
        os._exit(0)
    os.wait()
attempt("pipe", pipe, 500)
attempt("socketpair", pair, 300)
attempt("socket", lambda: socket.socket().close(), 300)
attempt("memfd", lambda: os.close(os.memfd_create("m")), 300)
attempt("thread", thread, 200)
attempt("fork", fork, 50)
attempt("eventfd", lambda: os.close(os.eventfd(0)), 200)
attempt("epoll", lambda: select.epoll().close(), 200)
attempt("mapping", lambda: mmap.mmap(-1, 4096).close(), 200)
attempt("file", lambda: os.close(os.open("f", os.O_CREAT | os.O_RDWR)), 200)
print(sorted(made))
"""


def test_nothing_a_run_may_do_moves_the_hosts_pipe_inode_counter():
    """The kernel numbers pipes, sockets and /proc inodes with one counter, kept per CPU: a run pinned to
    the caller's CPU tries 500 pipes, 300 sockets, 300 socketpairs, 200 threads with their /proc entries,
    forks, eventfds, mappings and files; the counter moves no more than for a trivial run (about 40: the
    launcher's pipes, the run's namespaces). Before the change the same program moved it 1,800 further."""
    _needs_seccomp()
    _needs_namespaces()
    cpu = min(os.sched_getaffinity(0))
    saved = os.sched_getaffinity(0)
    limits = dataclasses.replace(LIMITS, wall_seconds=10.0, cpu_seconds=5)
    rounds = []
    try:
        os.sched_setaffinity(0, {cpu})  # this thread and the run it starts: one CPU, one per-CPU counter
        # Other processes on this CPU move the counter too (the other pytest worker's sandbox runs: +50 to +150
        # in a busy run, measured), and it jumps by 1024 or more where the CPU takes a fresh batch of numbers.
        # The least of three runs is the run's own share unless all three were disturbed; a round that looks
        # moved is measured again, up to 8 rounds. A run that could move the counter moves it by hundreds in
        # every round (each channel BUSY_PROGRAM tries makes 200 inodes or more; before the change 1,800).
        for _ in range(8):
            trivial, busy = [], []
            for _ in range(3):
                for source, moves in (("print(1)", trivial), (BUSY_PROGRAM, busy)):
                    before = _pipe_inode()
                    res = run_program(source, limits=limits)
                    moves.append(_pipe_inode() - before)
                    assert res.verdict == "ok", res
            rounds.append((trivial, busy))
            if min(busy) - min(trivial) < 50:
                break
    finally:
        os.sched_setaffinity(0, saved)
    assert min(busy) - min(trivial) < 50, rounds
    assert res.stdout.strip() == "['epoll', 'eventfd', 'file', 'fork', 'mapping', 'thread']", res.stdout


def _exception_trace() -> str:
    try:
        return Path("/proc/sys/debug/exception-trace").read_text().strip()
    except OSError:
        return "unknown"


def _log_token() -> str:
    """6 random hex digits whose first is not 0: the kernel prints registers with %lx, without leading
    zeros, so a token "0cbd01" in si shows as "si:cbd0151" and a search for it misses the message
    (1 run in 16 failed, or passed whatever the log held)."""
    return f"{secrets.randbits(23) | 1 << 23:06x}"


def _open_kernel_log() -> int:
    """/dev/kmsg, positioned after its last message (root, or dmesg_restrict 0), or skip."""
    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        pytest.skip(f"the kernel log cannot be read here: {exc}")
    os.lseek(fd, 0, os.SEEK_END)
    return fd


def _new_kernel_messages(fd: int) -> list[str]:
    messages = []
    while True:
        try:
            record = os.read(fd, 8192)
        except BlockingIOError:
            break
        except OSError as exc:  # EPIPE: older messages were overwritten while reading
            if exc.errno != errno.EPIPE:
                raise
            continue
        messages.append(record.decode("utf-8", "replace").split(";", 1)[-1])
    os.close(fd)
    return messages


def _host_segfault(address: int) -> None:
    """A process outside the sandbox, without a handler, faults at `address`: the kernel logs it."""
    code = f"import ctypes; ctypes.string_at({address:#x}, 1)"
    subprocess.run([sys.executable, "-I", "-S", "-c", code], env={}, capture_output=True, timeout=60)


def test_log_tokens_read_back_as_the_kernel_prints_them():
    """The kernel log tests look for the token in registers printed with %lx: each draw must print as
    itself (6 digits, no leading zero), or the search misses what the run wrote."""
    for _ in range(4000):
        token = _log_token()
        assert len(token) == 6 and f"{int(token, 16):x}" == token, token


def test_faults_in_a_run_do_not_reach_the_host_kernel_log():
    """The kernel logs a fault that kills a process with no handler for it, with addresses the program
    chose (`segfault at ...`, `traps: ... ip:...`), and every seccomp kill (audit). kernel_log_channel
    makes each fault at an address that carries a token: none shows up, between two faults of a host
    process that do (so the rate limit of those messages hid nothing)."""
    _needs_seccomp()
    if _exception_trace() != "1":
        pytest.skip(f"the host does not log user faults (debug.exception-trace {_exception_trace()})")
    token = _log_token()
    controls = [(0x7C << 36) | (secrets.randbits(24) << 12) for _ in range(2)]
    time.sleep(5.5)  # a fresh window of printk_ratelimit (10 messages per 5 s) for the 2 + up to 8 messages
    log = _open_kernel_log()
    _host_segfault(controls[0])
    res = run_program(_program("kernel_log_channel", {"__LOG_TOKEN__": token}), "closed\n",
                      limits=dataclasses.replace(LIMITS, wall_seconds=10.0, cpu_seconds=5))
    _host_segfault(controls[1])
    time.sleep(0.2)
    messages = _new_kernel_messages(log)
    if not all(any(f"segfault at {c:x}" in m for m in messages) for c in controls):
        pytest.skip(f"the host's own faults were not all logged (rate limit?): {messages}")
    syscall_number = int(token, 16) | 1 << 24  # what `int 0x80` asked for
    leaked = [m for m in messages if token in m or f"syscall={syscall_number}" in m]
    assert not leaked, leaked
    assert res.verdict == "ok" and res.stdout == "done\n", res
    attempts = res.stderr
    assert "ATTEMPT segfault: exit status 11" in attempts, attempts
    assert "ATTEMPT reset the handler, then segfault: exit status 11" in attempts, attempts
    assert "ATTEMPT exec, then segfault: PermissionError" in attempts, attempts
    assert "ATTEMPT clone sharing the signal handlers: EPERM" in attempts, attempts
    assert "ATTEMPT prctl(PR_SET_NAME): still" in attempts, attempts
    assert "ATTEMPT x32 syscall: -1 ENOSYS" in attempts or os.uname().machine != "x86_64", attempts


def test_the_kernel_log_writers_left_open_are_the_documented_ones():
    """docs/security.md: what a run can still write to the host's log. A misaligned call into the vsyscall
    page is logged with two registers the program chose (128 bits a message, at most 10 messages per 5 s
    host-wide) while debug.exception-trace is 1, and not at all when it is 0. (The bad-frame and UMIP
    messages the program also tries are printed, not checked: the latter depends on the CPU.)"""
    _needs_seccomp()
    if os.uname().machine != "x86_64":
        pytest.skip("the vsyscall page is x86_64's")
    token = _log_token()
    log = _open_kernel_log()
    res = run_program(_program("kernel_log_channel", {"__LOG_TOKEN__": token}), "open\n",
                      limits=dataclasses.replace(LIMITS, wall_seconds=10.0, cpu_seconds=5))
    time.sleep(0.2)
    messages = [m.strip() for m in _new_kernel_messages(log) if token in m or "bad frame" in m]
    assert res.verdict == "ok" and res.stdout == "done\n", res
    print("\nkernel log messages of the open writers:", *messages, sep="\n  ")
    vsyscall = [m for m in messages if "vsyscall" in m]
    if _exception_trace() == "0":
        assert not vsyscall and not [m for m in messages if "bad frame" in m], messages
        return
    assert len(vsyscall) == 1, messages
    chosen = [field for field in vsyscall[0].split() if field in (f"si:{token}51", f"di:{token}d1")]
    assert len(chosen) == 2, vsyscall  # 2 x 64 bits the program chose, as documented


def test_plain_io_works_under_the_page_cache_rules():
    """preadv2/pwritev2 are refused only with flags (RWF_NOWAIT probes the page cache): the flag-less
    calls CPython makes, fsync and mmap'd reads keep working."""
    _needs_seccomp()
    src = (
        "import mmap, os\n"
        "fd = os.open(os.__file__, os.O_RDONLY)\nbuf = bytearray(16)\n"
        "print(os.preadv(fd, [buf], 0), bytes(buf) == os.pread(fd, 16, 0))\n"
        "m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)\nprint(m[:16] == bytes(buf))\n"
        "w = os.open('f', os.O_RDWR | os.O_CREAT)\nprint(os.pwritev(w, [b'abc'], 0), os.pread(w, 3, 0))\n"
        "os.fsync(w)\n"
        "for flags in (os.RWF_NOWAIT, os.RWF_HIPRI):\n"
        "    try:\n        os.preadv(fd, [buf], 0, flags); print('ALLOWED', flags)\n"
        "    except OSError as e:\n        print(e.errno)\n"
    )
    res = run_program(src, limits=dataclasses.replace(LIMITS, wall_seconds=6.0))
    assert res.verdict == "ok", res
    assert res.stdout.split("\n")[:5] == ["16 True", "True", "3 b'abc'", str(errno.EPERM), str(errno.EPERM)], res


def _disk_flushes(path: str) -> int | None:
    """Cache flushes the disk holding `path` has completed (/proc/diskstats, Linux >= 5.5), or None."""
    dev = os.stat(path).st_dev
    for line in Path("/proc/diskstats").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 20 and (int(fields[0]), int(fields[1])) == (os.major(dev), os.minor(dev)):
            return int(fields[18])
    return None


def test_fsync_of_a_host_file_does_not_flush_the_host_disk():
    """fsync of a file opened read-only still makes the disk flush its write cache (3.6 ms each on the
    project's VM): a run could keep the host's disk flushing. fsync is a no-op in the sandbox."""
    _needs_seccomp()
    _needs_namespaces()
    facts = rootfs.interpreter_facts(sandbox_isolation().python)
    target = next(os.path.join(p, "os.py") for p in facts["path"] if os.path.isfile(os.path.join(p, "os.py")))
    before = _disk_flushes(target)
    if before is None:
        pytest.skip(f"no flush counter in /proc/diskstats for the device of {target}")
    fd = os.open(target, os.O_RDONLY)
    try:
        for _ in range(5):
            os.fsync(fd)
    finally:
        os.close(fd)
    if _disk_flushes(target) - before < 5:
        pytest.skip("this disk takes no cache flushes on fsync: nothing to keep a run from doing")
    src = f"import os\nfd = os.open({target!r}, os.O_RDONLY)\nfor _ in range(100):\n    os.fsync(fd)\nprint('done')\n"
    before = _disk_flushes(target)
    res = run_program(src, limits=dataclasses.replace(LIMITS, wall_seconds=10.0))
    flushes = _disk_flushes(target) - before
    assert res.verdict == "ok" and res.stdout == "done\n", res
    assert flushes < 50, f"100 fsyncs in the sandbox made the host disk flush {flushes} times"  # others may fsync


def _resident_pages(path: str) -> int:
    """How many pages of `path` are in the host's page cache (mincore on a mapping of the whole file)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
    libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
    libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    size = os.path.getsize(path)
    vec = (ctypes.c_ubyte * ((size + 4095) // 4096))()
    fd = os.open(path, os.O_RDONLY)
    try:
        area = libc.mmap(None, size, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
        assert area not in (None, ctypes.c_void_p(-1).value)
        try:
            assert libc.mincore(area, size, vec) == 0, ctypes.get_errno()
        finally:
            libc.munmap(area, size)
    finally:
        os.close(fd)
    return sum(v & 1 for v in vec)


def test_a_run_leaves_the_host_page_cache_as_it_found_it():
    """A removed memory cgroup stays in the kernel ("dying") while page cache is charged to it: runs
    that read uncached files each left one, and what they read stayed cached for later runs to see.
    The run's page cache is now reclaimed before its cgroup is removed."""
    _needs_namespaces()
    _needs_cgroups()
    if os.geteuid() != 0:
        pytest.skip("mincore reports another process's page cache only to the file's owner")
    facts = rootfs.interpreter_facts(sandbox_isolation().python)
    stdlib = next(p for p in facts["path"] if os.path.isfile(os.path.join(p, "pydoc_data", "topics.py")))
    target = os.path.join(stdlib, "pydoc_data", "topics.py")  # large, and nothing imports it
    fd = os.open(target, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # the host evicts it (a program may not)
    finally:
        os.close(fd)
    if _resident_pages(target):
        pytest.skip(f"{target} stays cached (mapped by another process)")
    read = f"print(len(open({target!r}, 'rb').read()))"
    res = run_program(read, limits=dataclasses.replace(LIMITS, wall_seconds=6.0))
    assert res.verdict == "ok" and int(res.stdout) == os.path.getsize(target), res
    left = _resident_pages(target)
    assert left == 0, f"{left} pages the run read stay in the host's page cache"


def test_syscalls_unknown_to_libseccomp_are_denied_by_number():
    """An older libseccomp does not know open_tree_attr (467) or cachestat (451) by name: they are added
    by their number (the same on every architecture from 424 on), not skipped."""

    class OldLibseccomp:
        class Arch:
            NATIVE = 0

        @staticmethod
        def resolve_syscall(arch, name):
            return {"read": 0}.get(name, -1)

    if os.uname().machine not in ("x86_64", "aarch64"):
        pytest.skip("the generic numbers are checked on x86_64 and aarch64")
    assert seccomp._syscall_number(OldLibseccomp, "read") == 0
    assert seccomp._syscall_number(OldLibseccomp, "open_tree_attr") == 467
    assert seccomp._syscall_number(OldLibseccomp, "cachestat") == 451
    assert seccomp._syscall_number(OldLibseccomp, "no_such_call") is None
    assert set(seccomp.GENERIC_NUMBERS) <= set(seccomp.DENIED_SYSCALLS)
    assert max(seccomp.GENERIC_NUMBERS.values()) <= seccomp.REVIEWED_UP_TO


class _FailingLibc:
    def __init__(self, fail_errno=errno.EINVAL):
        self.fail_errno = fail_errno
        self.calls = []

    def prctl(self, *args):
        self.calls.append(args)
        return -1

    def errno(self):
        return self.fail_errno

    def addressof(self, obj):
        return 0

    def SockFprog(self, *args):
        return args


def test_a_failed_no_new_privs_is_a_setup_error(monkeypatch):
    """Issue 11.6: a failed prctl(PR_SET_NO_NEW_PRIVS) used to be ignored."""
    lib = _FailingLibc()
    monkeypatch.setattr(inside, "libc", lambda: lib)
    with pytest.raises(inside.SetupError, match="PR_SET_NO_NEW_PRIVS"):
        inside.set_no_new_privs()
    assert lib.calls == [(inside.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)]
    with pytest.raises(inside.SetupError, match="seccomp"):
        inside.load_seccomp(b"\0" * 16, lib)
    with pytest.raises(inside.SetupError, match="malformed"):
        inside.load_seccomp(b"\0" * 12, lib)


def _program_process_report(tmp_path, **values) -> tuple[int, dict]:
    """Run `inside.run_program` in a forked child, as the program process; (exit status, report)."""
    import resource

    marker = tmp_path / "ran"
    read_fd, write_fd = os.pipe()
    cfg = {
        "workdir": str(tmp_path), "uid": None, "seccomp": None, "guard": False, "fn_name": None,
        "namespaces": False, "root": None,
        "limits": {  # the current hard limits: lowering nothing that the test process needs
            name: resource.getrlimit(res)[1]
            for name, res in (("memory", resource.RLIMIT_AS), ("file", resource.RLIMIT_FSIZE),
                              ("nofile", resource.RLIMIT_NOFILE), ("nproc", resource.RLIMIT_NPROC))
        },
    }
    cfg["limits"]["cpu"] = 60
    cfg.update(values)
    pid = os.fork()
    if pid == 0:  # the program process, as the supervisor forks it
        try:
            inside.run_program(
                cfg, f"open({str(marker)!r}, 'w')", str(tmp_path / "s.py"), inside.Status(write_fd)
            )
        finally:
            os._exit(99)
    os.close(write_fd)
    _, status = os.waitpid(pid, 0)
    data = os.read(read_fd, 65536).decode()
    os.close(read_fd)
    assert not marker.exists(), "the program ran"
    return os.WEXITSTATUS(status), json.loads(data)


def test_the_program_process_reports_a_setup_failure_and_runs_nothing(monkeypatch, tmp_path):
    """The program process turns a failed hardening step into {"setup_error"} + EXIT_SETUP: no code runs."""
    monkeypatch.setattr(inside, "libc", lambda: _FailingLibc())
    code, report = _program_process_report(tmp_path)
    assert code == inside.EXIT_SETUP and "PR_SET_NO_NEW_PRIVS" in report["setup_error"]


def test_the_program_process_refuses_to_run_outside_the_runs_root(tmp_path):
    """The program process checks that the root it ended up in is the one the supervisor built."""
    here = os.stat("/")
    code, report = _program_process_report(tmp_path, root=["pivot", here.st_dev, here.st_ino + 1])
    assert code == inside.EXIT_SETUP and "root file system" in report["setup_error"]


@pytest.mark.parametrize("pivot", [True, False], ids=["pivot_root", "chroot fallback"])
def test_the_program_process_joins_the_root_built_after_it_was_forked(tmp_path, pivot):
    """The program process is forked before the supervisor reads the configuration and builds the root
    (so that it never holds the configuration). pivot_root moves it along; after the chroot fallback it
    enters the root itself, by a relative name. Either way it ends up inside the new root, with nothing
    of the host's tree reachable and no host path needed."""
    if os.geteuid() != 0:
        pytest.skip("mount namespaces, mounts and chroot need root")
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            import ctypes

            if ctypes.CDLL(None, use_errno=True).unshare(0x00020000) != 0:  # CLONE_NEWNS
                os.write(write_fd, b'"no mount namespace"')
                os._exit(0)
            os.chdir(tmp_path)  # as the caller starts the bootstrap: in the run's host directory
            os.mkdir(inside.ROOT_DIR_NAME)
            go_r, go_w = os.pipe()
            child = os.fork()
            if child == 0:  # the program process
                os.close(go_w)
                how = os.read(go_r, 100).decode()
                try:
                    inside.join_root(how)
                    seen = [how, os.getcwd(), sorted(os.listdir("/")), os.path.exists(str(tmp_path))]
                except BaseException as e:
                    seen = repr(e)
                os.write(write_fd, json.dumps(seen).encode())
                os._exit(0)
            os.close(go_r)
            new_root = os.path.join(os.getcwd(), inside.ROOT_DIR_NAME)
            inside.mount(None, "/", None, inside.MS_REC | inside.MS_PRIVATE)
            inside.mount("tmpfs", new_root, "tmpfs", 0, "size=64k")
            open(os.path.join(new_root, "inside"), "w").close()
            if not pivot:
                inside.SYS_PIVOT_ROOT.clear()  # (this forked child's copy): pivot_root "fails"
            how = inside.switch_root(new_root, [])
            os.write(go_w, how.encode())
            os.waitpid(child, 0)
        finally:
            os._exit(0)
    os.close(write_fd)
    os.waitpid(pid, 0)
    seen = json.loads(os.read(read_fd, 65536).decode() or '"nothing reported"')
    os.close(read_fd)
    if seen == "no mount namespace":
        pytest.skip("no mount namespace can be created here")
    assert seen == ["pivot" if pivot else "chroot", "/", ["inside"], False], seen


def test_a_failed_hardening_step_is_a_sandbox_error_end_to_end():
    cfg = dict(isolation.ensure_probed()[1], seccomp="00" * 12)  # a filter the kernel cannot load
    res, _ = runner.run_once(cfg, "print('ran')", "", LIMITS, None, ())
    assert res.verdict == "sandbox error" and "ran" not in res.stdout, res
    assert "seccomp" in res.detail


def test_a_supervisor_failure_is_a_sandbox_error_and_the_program_process_ends():
    """The program process is forked before the supervisor builds the root: when the build fails, the
    run is a sandbox error, nothing runs and nothing of the run is left."""
    _needs_namespaces()
    cfg = dict(isolation.ensure_probed()[1], root_plan=[["no such entry", "/x"]])
    res, _ = runner.run_once(cfg, "print('ran')", "", LIMITS, None, ())
    assert res.verdict == "sandbox error" and "unknown root plan entry" in res.detail, res
    assert "ran" not in res.stdout and not _no_survivors(res.run_id) and not _leftovers(res.run_id)


def test_the_program_process_runs_nothing_when_the_supervisor_hands_nothing_over():
    """Guard mode has no PID namespace to end it: a closed channel makes the program process exit."""
    read_fd, write_fd = os.pipe()
    memfd = os.memfd_create("config", 0)
    pid = os.fork()
    if pid == 0:
        try:
            os.close(write_fd)
            inside.program_process(read_fd, memfd, inside.Status(-1))
        finally:
            os._exit(99)
    os.close(read_fd)
    os.close(write_fd)
    _, status = os.waitpid(pid, 0)
    os.close(memfd)
    assert os.WEXITSTATUS(status) == inside.EXIT_SETUP


def test_caller_death_ends_the_run():
    """A caller that dies mid-run (OOM killer, ctrl-C) must not leave the run behind: the supervisor sees
    the status pipe break and exits, which ends the run; the next probe removes its cgroup and dirs."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "from ragen_envs.code import run_program, sandbox_isolation\n"
        "sandbox_isolation()\nprint('probed', flush=True)\n"
        "run_program('import time\\nprint(1, flush=True)\\ntime.sleep(600)', "
        "limits={'wall_seconds': 600, 'cpu_seconds': 600})\n"
    )
    root = str(Path(ragen_envs.__file__).resolve().parents[1])
    launch = runner.LAUNCH.encode()  # the run's processes are the ones with it on their command line
    caller = subprocess.Popen([sys.executable, "-c", code, root], stdout=subprocess.PIPE)
    try:
        assert caller.stdout.readline() == b"probed\n"  # the probe's own runs are over
        deadline, run_pids = time.monotonic() + 60, []
        while time.monotonic() < deadline and not run_pids:
            time.sleep(0.2)
            run_pids = [p for p in _descendants(caller.pid) if launch in _cmdline(p).split(b"\0")]
        assert run_pids, "the run did not start"
        argv = _cmdline(run_pids[0]).split(b"\0")
        run_id = argv[argv.index(launch) + 1].decode()
        time.sleep(0.5)
        assert _surviving(run_id)
        caller.kill()
        caller.wait()
        deadline = time.monotonic() + 10
        while _surviving(run_id) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _surviving(run_id), f"run {run_id} outlived its caller"
        removed = isolation.sweep_stale(isolation.ensure_probed()[1]["cgroups"])
        assert not _leftovers(run_id), (removed, _leftovers(run_id))
    finally:
        if caller.poll() is None:
            caller.kill()


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                kids = [int(c) for c in Path(f"/proc/{p}/task/{tid}/children").read_text().split()]
                out += kids
                todo += kids
        except OSError:
            continue
    return out


def test_drop_capabilities_leaves_none(tmp_path):
    """User-namespace mode: the program is uid 0 of its namespace with every capability dropped."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            lib = inside.libc()
            import ctypes

            if ctypes.CDLL(None, use_errno=True).unshare(0x10000000) != 0:  # a user namespace: all caps in it
                os.write(write_fd, b"no userns")
            else:
                before = [ln for ln in Path("/proc/self/status").read_text().splitlines() if ln.startswith("CapEff")]
                inside.drop_capabilities(lib)
                after = [ln for ln in Path("/proc/self/status").read_text().splitlines() if ln.startswith("Cap")]
                os.write(write_fd, json.dumps([before, after]).encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    os.waitpid(pid, 0)
    data = os.read(read_fd, 65536).decode()
    os.close(read_fd)
    if data == "no userns":
        pytest.skip("user namespaces cannot be created here")
    before, after = json.loads(data)
    assert before[0].split()[1] != "0000000000000000"
    assert all(line.split()[1] == "0000000000000000" for line in after), after


def test_user_namespace_mode_as_an_unprivileged_user():
    """The "userns" mode (no root): run the sandbox as nobody through setpriv and check its layers."""
    import sysconfig

    python = "/usr/bin/python3"
    site = sysconfig.get_paths()["purelib"]
    reasons = []
    if shutil.which("setpriv") is None:
        reasons.append("no setpriv (util-linux)")
    if os.geteuid() != 0:
        reasons.append("the test needs root to switch to nobody")
    if not os.access(python, os.X_OK):
        reasons.append(f"no {python}")
    else:
        version = subprocess.run(
            [python, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True
        )
        if version.stdout.strip() != str(sys.version_info[:2]):
            reasons.append(f"{python} is not Python {sys.version_info[:2]} (the venv's packages would not load)")
    if Path("/proc/sys/user/max_user_namespaces").read_text().strip() == "0":
        reasons.append("unprivileged user namespaces are disabled")
    if reasons:
        pytest.skip("; ".join(reasons))
    root = str(Path(ragen_envs.__file__).resolve().parents[1])
    src = STATUS_PROBE + (
        "import json, os, socket\n"
        "try:\n    socket.socket(40, socket.SOCK_STREAM); v = 'CREATED'\nexcept OSError as e:\n    v = e.errno\n"
        "print(json.dumps([os.getuid(), status, os.path.exists('/proc'), v, sorted(os.listdir('/'))]))\n"
    )
    code = (
        "import json, sys\nfrom ragen_envs.code import sandbox\n"
        "iso = sandbox.sandbox_isolation()\n"
        f"r = sandbox.run_program({src!r})\n"
        "print(json.dumps([iso.mode, iso.resources, r.verdict, r.stdout]))\n"
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "PYTHONPATH": f"{root}:{site}"}
    proc = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", python, "-c", code],
        capture_output=True, text=True, env=env, timeout=300, cwd="/",
    )  # fmt: skip
    if proc.returncode != 0 and ("Permission denied" in proc.stderr or "ModuleNotFoundError" in proc.stderr):
        pytest.skip(f"nobody cannot load the project here: {proc.stderr.strip().splitlines()[-1]}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    mode, resources, verdict, stdout = json.loads(proc.stdout.strip().splitlines()[-1])
    assert mode == "userns" and verdict == "ok", (mode, verdict, stdout)
    uid, status, proc, vsock, top = json.loads(stdout)
    assert uid == 0 and status == [1, 2, "0000000000000000"] and proc is False, stdout
    assert vsock == errno.EPERM and "root" not in top and "work" not in top, stdout


def test_cgroup_v2_files_are_written_and_read(tmp_path, monkeypatch):
    """The v2 branch (this machine binds the controllers to v1, so it is checked on a fake hierarchy)."""
    base = tmp_path / "cg"
    base.mkdir()
    (base / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (base / "cgroup.subtree_control").write_text("memory pids\n")
    monkeypatch.setattr(cgroup, "_own_paths", lambda: {"": "/cg"})
    monkeypatch.setattr(cgroup, "_mounts", lambda: [(str(tmp_path), "cgroup2", set())])
    setup = cgroup.probe_cgroups("v2")
    assert setup.mechanism == "v2" and setup.bases == {"": str(base)}
    run = cgroup.RunCgroup(setup, "ragen-sbx-x.1", 256 * 2**20, 9)
    d = base / "ragen-sbx-x.1"
    assert (d / "memory.max").read_text() == str(256 * 2**20) and (d / "pids.max").read_text() == "9"
    (d / "cpu.stat").write_text("usage_usec 1500000\nuser_usec 1000000\n")
    (d / "memory.peak").write_text("123456\n")
    (d / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\n")
    (d / "pids.events").write_text("max 4\n")
    assert run.cpu_seconds() == 1.5 and run.memory_stats() == (123456, 2) and run.pids_refused() == 4
    (d / "memory.stat").write_text("anon 4096\nfile 0\nkernel 8192\n")
    run.release_page_cache()
    assert not (d / "memory.reclaim").exists()  # no page cache charged: nothing to reclaim
    (d / "memory.stat").write_text("anon 4096\nfile 73728\nkernel 8192\n")
    run.release_page_cache()
    assert (d / "memory.reclaim").read_text() == "73728"
    for f in d.iterdir():
        f.unlink()
    assert run.remove() == [] and not d.exists()


# ------------------------------------------------------------------------------------------ the bootstrap, unit by unit
def test_bootstrap_is_a_standard_library_module_run_by_path():
    package = Path(sandbox.__file__).resolve().parent
    launch = package / "launch.py"
    assert Path(inside.__file__).resolve() == package / "inside.py"
    assert launch.is_file() and runner.LAUNCH == str(launch)
    # launch.py puts this directory first on sys.path while it imports `inside`: no module here may
    # shadow a standard-library module that import (or the interpreter's start-up) would load.
    assert not {p.stem for p in package.glob("*.py")} & set(sys.stdlib_module_names)
    import ast

    for path in (Path(inside.__file__), launch):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module != "__future__":
                names = [node.module]
            for name in names:
                assert name.split(".")[0] in sys.stdlib_module_names or name == "inside", (path.name, name)


def test_status_encoder_matches_json():
    for obj in ({"exit": 0, "cpu": 0.25, "notes": ["a\"b\\c\n\t\x01\ud800é"], "x": None, "y": True}, [], "s"):
        assert json.loads(inside.to_json(obj)) == json.loads(json.dumps(obj))


def test_read_config_and_wait_for_go(tmp_path):
    import marshal

    fd = os.memfd_create("cfg", 0)
    os.write(fd, marshal.dumps({"a": [1, "b"], "c": None}))
    assert inside.read_config(fd) == {"a": [1, "b"], "c": None}
    r, w = os.pipe()
    os.write(w, b"g")
    inside.wait_for_go(r)
    r, w = os.pipe()
    os.close(w)
    with pytest.raises(inside.SetupError, match="cgroup"):
        inside.wait_for_go(r)


def test_root_plan_holds_only_the_interpreter_and_its_standard_library():
    python = sandbox_isolation().python
    plan = rootfs.root_plan(python)
    kinds = {row[0] for row in plan}
    assert kinds <= {"dir", "symlink", "file", "tree", "dev", "empty", "tmpfs"}  # no /proc (rootfs docstring)
    assert not [row for row in plan if row[1].startswith("/proc") or row[1] in ("/dev/stdin", "/dev/fd")]
    binds = [row[1] for row in plan if row[0] in ("file", "tree")]
    project = str(Path(ragen_envs.__file__).resolve().parents[1])
    assert not any(b.startswith(project) for b in binds)
    assert python in binds
    for b in binds:
        assert (
            b.startswith(("/usr/", "/lib", "/etc/ld.so.cache", "/root/.pyenv/", "/opt/", "/usr/local/"))
            or "python" in b
        ), b
    assert [row[1] for row in plan if row[0] == "tmpfs"] == ["/dev/shm", "/tmp"]
    for row in plan:
        if row[0] == "tree" and os.path.isdir(os.path.join(row[1], "site-packages")):
            assert ["empty", os.path.join(row[1], "site-packages")] in plan


def test_seccomp_policy_compiles():
    program, description = seccomp.seccomp_program()
    if program is None:
        pytest.skip(description)
    assert len(program) % 8 == 0 and len(program) > 80
    assert "AF_VSOCK" in description and "clone" in description


def test_zz_outcome_table(capsys):
    """Print what every hostile attempt did (collected by the tests above, in this worker)."""
    if not TABLE:
        pytest.skip("the corpus ran in another worker")
    header = ("program [mode]", "env verdict", "direct run", "what the attempts got", "outcome")
    with capsys.disabled():
        print("\n\nHostile-program corpus: " + sandbox_isolation().describe().replace("\n", "\n  "))
        print(" | ".join(header))
        for row in TABLE:
            print(" | ".join(row))


def test_a_sweep_waits_for_killed_processes_to_leave_their_cgroup():
    """The sweep's cgroup removal kills what is left in a stale run's cgroup and retries the rmdir while the kernel
    tears the killed processes down (EBUSY), so a loaded machine does not leave the cgroup behind; a cgroup that
    cannot be removed for another reason is given up at once."""
    setup = isolation.ensure_probed()[1]["cgroups"]
    if setup.mechanism not in ("v1", "v2"):
        pytest.skip(f"no cgroups here ({setup.mechanism}): the sweep has none to remove")
    base = setup.bases.get("pids") or setup.bases.get("") or next(iter(setup.bases.values()))
    path = os.path.join(base, f"ragen-sbx-test{os.getpid()}.999999999")
    os.mkdir(path)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        Path(path, "cgroup.procs").write_text(str(child.pid))
        assert isolation._remove_cgroup(path), "the cgroup of a killed process was left behind"
        assert not os.path.exists(path)
        assert child.wait(timeout=10) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
        if os.path.isdir(path):
            os.rmdir(path)
    assert isolation._remove_cgroup(path)  # already gone: nothing to do
    with tempfile.NamedTemporaryFile() as not_a_cgroup:  # ENOTDIR, not EBUSY: no reason to wait
        assert not isolation._remove_cgroup(not_a_cgroup.name)
