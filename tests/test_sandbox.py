"""The sandbox (ragen_envs.code.sandbox): basic behaviour and the hostile-program corpus.

Every program of tests/hostile_programs/ is run (a) through CodeEnv on a one-test task, which must give
reward 0 and the expected verdict, and (b) directly with run_program, whose full output is checked
for the markers that would reveal an escape (secret file, environment variable, expected output,
files written on the host, connections to a listener, surviving processes). `test_zz_outcome_table`
prints what each attempt did (run with `-s` to see it).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest

from ragen_envs.code import (
    CodeEnv,
    Limits,
    outputs_match,
    run_function,
    run_program,
    sandbox,
    sandbox_isolation,
    values_match,
)

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
}
GUARD_SUBSET = [
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
        "print(sys.flags.isolated, sys.flags.no_site)\n"
    )
    a = run_program(src, limits=LIMITS)
    b = run_program(src, limits=LIMITS)
    assert a.verdict == "ok", a.stderr
    env_line, cwd, listing, flags = a.stdout.splitlines()
    # Nothing inherited; LC_CTYPE is set by the interpreter itself (PEP 538 C-locale coercion).
    assert set(eval(env_line)) <= {"LC_CTYPE"}, env_line
    assert listing == "['solution.py']"
    assert flags == "1 1"
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
    assert values_match([1, [2.0000000001, "a"]], [1, [2, "a"]])
    assert values_match({"a": 0.1 + 0.2}, {"a": 0.3})
    assert not values_match(True, 1) and not values_match(1, True)
    assert not values_match([1, 2], [1, 2, 3]) and not values_match("1", 1)
    assert values_match(None, None) and not values_match(None, 0)


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


@pytest.fixture
def hostile_setup(tmp_path, monkeypatch):
    token = secrets.token_hex(8)
    expected = f"zz-expected-{secrets.token_hex(8)}"
    dataset = tmp_path / "secret_tests.jsonl"
    dataset.write_text(
        json.dumps({"problem": "Print the secret word.", "tests": [{"input": "ping\n", "output": expected + "\n"}]}) + "\n"
    )
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
    }
    outside_paths = [outside / marker] + [Path(d) / marker for d in ("/tmp", "/var/tmp", "/dev/shm", "/root", "/etc", "/")]
    yield {
        "subs": subs,
        "dataset": dataset,
        "expected": expected,
        "secret_marker": secret_marker,
        "env_marker": env_marker,
        "listener": listener,
        "outside_paths": outside_paths,
    }
    listener.close()
    shutil.rmtree(secret_dir, ignore_errors=True)
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


def _contain(name: str, setup: dict) -> None:
    program = _program(name, setup["subs"])
    env = CodeEnv(dataset=setup["dataset"], limits=LIMITS)
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step(f"<think>x</think><answer>\n```python\n{program}\n```\n</answer>")
    assert reward == 0.0, f"{name}: reward {reward}"
    assert terminated and info["verdicts"][0] in EXPECTED_VERDICTS[name], (name, info["test_results"])
    env_run_id = info["test_results"][0]["run_id"]

    res = run_program(program, "ping\n", limits=LIMITS, hide_paths=[setup["dataset"]])
    out = res.stdout + res.stderr
    problems = []
    for run_id in (env_run_id, res.run_id):
        alive = _no_survivors(run_id)
        if alive:
            problems.append(f"processes of run {run_id} survive: {alive}")
    given_answer = "__EXPECTED__" in (HOSTILE_DIR / f"{name}.py").read_text()  # exit tricks know it
    if setup["expected"] in out and not given_answer:
        problems.append("the expected output was reachable")
    if setup["secret_marker"] in out:
        problems.append("the root-only secret file was read")
    if setup["env_marker"] in out:
        problems.append("the env process's environment was read")
    written = [str(p) for p in setup["outside_paths"] if p.exists()]
    if written:
        problems.append(f"files written outside the sandbox: {written}")
    time.sleep(0.1)
    if setup["listener"].events:
        problems.append(f"the listener received {setup['listener'].events}")
    if name == "privilege_escalation" and res.isolation == "namespaces":
        if res.stdout.strip() == "0" or "SUCCEEDED" in res.stderr:
            problems.append("regained uid 0")
    # The env and the sandbox stay usable after every attempt.
    after = run_program("print(6 * 7)", limits=LIMITS)
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
    sandbox._reset_probe_cache()
    assert sandbox_isolation().mode == "guard"
    yield
    monkeypatch.delenv("RAGEN_SANDBOX_MODE")
    sandbox._reset_probe_cache()


@pytest.mark.parametrize("name", GUARD_SUBSET)
def test_hostile_program_is_contained_in_guard_mode(name, guard_mode, hostile_setup):
    _contain(name, hostile_setup)


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
