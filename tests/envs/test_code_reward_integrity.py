"""Reward integrity of `ragen/Code-v0` against tricks on the harness itself (not on the task).

An agent's answer, sent through `env.step` in the documented format, tries to earn the reward without
solving the task: exit early with status 0, print the harness's success words, return an object whose
`__eq__` is always true, replace `json.dumps`, `builtins` or the result channel, read the tests from
the frames, the gc or the environment, import the sandbox's own module, swallow every exception. None
of these earns anything: the program's answer crosses to the env as JSON or text and is judged there
(`values_equal`, `outputs_match`), from data the program cannot forge. These were already refused
before this file; they stay here as regressions, next to a correct program that earns the reward.

Fixed with this file:

- `extract_program` took quadratic time in the blanks after a fence (0.4 s for one 16,000-character
  answer, the most a step accepts; more for a direct call): linear now.
- Guard mode (the fallback sandbox without namespaces): its audit hook consulted `os.path.realpath`
  at event time (a program that replaced it wrote anywhere), checked only the first path of a rename or
  link (`os.rename("f", "/tmp/x")` moved a file out of the working dir), kept its refusals in mutable
  sets that a PermissionError's traceback exposed (a program emptied them), and let a directory outside
  be opened (a dir_fd for writes the hook cannot see). Now it consults only values bound before the
  program runs, checks every path of an event, and refuses those opens.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragen_envs.code import CodeEnv, extract_program, run_program, sandbox, sandbox_isolation
from ragen_envs.code.sandbox import isolation
from ragen_envs.spaces import MAX_RESPONSE_CHARS

FAST = {"wall_seconds": 2.0, "cpu_seconds": 1}
BUDGET = 30.0  # not under test here: a loaded machine may take a second for a trivial run


def _answer(program: str) -> str:
    return f"<think>t</think><answer>\n```python\n{program}\n```\n</answer>"


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    """Two one-record data sets, "double a number", with two hidden tests each (few runs per step)."""
    root = tmp_path_factory.mktemp("code-integrity")
    fn = root / "fn.jsonl"
    fn.write_text(json.dumps({
        "problem": "Return twice x.", "fn_name": "double",
        "tests": [{"input": [3], "output": 6}, {"input": [5], "output": 10}],
        "public_tests": [{"input": [1], "output": 2}],
    }) + "\n")
    stdin = root / "stdin.jsonl"
    stdin.write_text(json.dumps({
        "problem": "Print twice the number on stdin.",
        "tests": [{"input": "3\n", "output": "6\n"}, {"input": "5\n", "output": "10\n"}],
        "public_tests": [{"input": "1\n", "output": "2\n"}],
    }) + "\n")
    return {"function": fn, "stdin": stdin}


def _submit(path, program: str, repair: bool = False):
    env = CodeEnv(dataset=path, limits=FAST, submission_wall_seconds=BUDGET, multi_turn_repair=repair)
    env.reset(seed=0)
    _, reward, _, _, info = env.step(_answer(program))
    return reward, info


FUNCTION_TRICKS = {
    "sys.exit(0) before defining anything": "import sys\nsys.exit(0)",
    "os._exit(0) at import": "import os\nos._exit(0)",
    "SystemExit(0) inside the function": "def double(x):\n    raise SystemExit(0)",
    "os._exit(0) inside the function": "import os\ndef double(x):\n    os._exit(0)",
    "the success words on stdout and stderr": (
        "import sys\nprint('passed\\nOK\\nAll tests passed')\nsys.stderr.write('ok\\n')\n"
        "def double(x):\n    print('passed')\n    return None"
    ),
    "an object equal to everything": "class A:\n    def __eq__(self, o): return True\ndef double(x):\n    return A()",
    "an int subclass equal to everything": (
        "class A(int):\n    def __eq__(self, o): return True\n    __hash__ = int.__hash__\n"
        "def double(x):\n    return A(0)"
    ),
    "a list subclass equal to everything": (
        "class A(list):\n    def __eq__(self, o): return True\ndef double(x):\n    return A()"
    ),
    "json.dumps replaced": "import json\njson.dumps = lambda *a, **k: 'true'\ndef double(x):\n    return 0",
    "the result channel written directly": (
        "import os\ndef double(x):\n    for fd in range(3, 30):\n        try: os.write(fd, b'\"passed\"')\n"
        "        except OSError: pass\n    os._exit(0)"
    ),
    "builtins replaced": (
        "import builtins\nbuiltins.isinstance = lambda *a: True\nbuiltins.type = lambda *a: int\n"
        "def double(x):\n    return 'x'"
    ),
    "every exception swallowed": (
        "def double(x):\n    try:\n        raise AssertionError('wrong')\n"
        "    except BaseException:\n        return None"
    ),
    "the tests hunted in frames, gc, environ and files": (
        "import gc, os, sys\ndef double(x):\n"
        "    seen = [repr(os.environ), sys.argv, os.listdir('/'), os.listdir('.')]\n"
        "    f = sys._getframe()\n    while f:\n        seen.append(repr(f.f_locals))\n        f = f.f_back\n"
        "    seen += [repr(o) for o in gc.get_objects() if isinstance(o, dict)]\n"
        "    for s in seen:\n        if '10' in s and '6' in s and 'output' in s:\n"
        "            return 'found'\n    return -1"
    ),
    "the sandbox's own module imported": (
        "import inside\ndef double(x):\n    inside.Status(1).report({'exit': 0})\n    return None"
    ),
    "the project imported": "import ragen_envs\ndef double(x):\n    return 2 * x",
    "NUL bytes and a lone surrogate in the code": "def double(x):\n    return '\x00\ud800'",
}


@pytest.mark.parametrize("name", sorted(FUNCTION_TRICKS))
def test_function_harness_tricks_earn_nothing(datasets, name):
    reward, info = _submit(datasets["function"], FUNCTION_TRICKS[name])
    assert reward == 0.0 and not info["success"], (name, info["test_results"])
    assert "passed" not in info["verdicts"]


STDIN_TRICKS = {
    "sys.exit(0) before printing": "import sys\nsys.exit(0)\nprint(2 * int(input()))",
    "the success words": "print('passed')\nprint('OK')",
    "exit status 256 (0 mod 256) after nothing": "raise SystemExit(256)",
    "an int subclass as exit status": "class I(int):\n    def __and__(s, o): return 0\nraise SystemExit(I(1))",
    "a thread printing after the exit": (
        "import threading, time, sys\ndef w():\n    time.sleep(0.05)\n    print('6')\n"
        "threading.Thread(target=w).start()\nraise SystemExit(0)"
    ),
    "stdout replaced": (
        "import sys\nclass W:\n    def write(s, x): return len(x)\n    def flush(s): pass\nsys.stdout = W()\n"
    ),
    "the input echoed": "import sys\nsys.stdout.write(sys.stdin.read())",
}


@pytest.mark.parametrize("name", sorted(STDIN_TRICKS))
def test_stdin_harness_tricks_earn_nothing(datasets, name):
    reward, info = _submit(datasets["stdin"], STDIN_TRICKS[name])
    assert reward == 0.0 and not info["success"], (name, info["test_results"])


@pytest.mark.parametrize("style, program", [
    ("function", "def double(x):\n    return 2 * x"),
    ("stdin", "print(2 * int(input()))"),
])
def test_a_correct_program_earns_the_reward(datasets, style, program):
    for repair in (False, True):
        reward, info = _submit(datasets[style], program, repair=repair)
        assert reward == 1.0 and info["success"], info["test_results"]


@pytest.mark.parametrize("program", [
    "import os\nwhile True:\n    try: os.fork()\n    except OSError: pass",
    "a = []\nwhile True: a.append(bytearray(10**7))",
    "import sys\nwhile True: sys.stdout.write('x' * 65536)",
    "while True: pass",
])
def test_a_step_of_a_runaway_program_returns_within_its_budget(datasets, program, monkeypatch):
    """One submission's budget (1 s) bounds the whole step, whatever the program does: each of its runs (2
    hidden tests and a public one: up to 3 s with a budget per run) may last only until the step's 1 s is
    used up, and the step returns. The bound on the step's own time is loose: tearing the fork bomb down took
    up to 4.9 s (against 6 s, the bound before) while six other processes kept both cores busy, as the math
    checker's load test does on the other pytest worker."""
    t0, deadlines = time.monotonic(), []
    real_run = sandbox.run_program

    def run(*args, limits, **kwargs):
        deadlines.append(time.monotonic() - t0 + limits.wall_seconds)  # the latest end this run is given
        return real_run(*args, limits=limits, **kwargs)

    monkeypatch.setattr(sandbox, "run_program", run)
    env = CodeEnv(dataset=datasets["stdin"], limits={"wall_seconds": 1.0, "cpu_seconds": 1},
                  submission_wall_seconds=1.0, multi_turn_repair=True)
    env.reset(seed=0)
    t0 = time.monotonic()
    _, reward, _, _, info = env.step(_answer(program))
    assert time.monotonic() - t0 < 30.0  # it returns: nothing waits for the program's processes
    # Within the one budget (0.5 s for the moments between the env's clock and this one; a budget per run
    # would give the second run until about 2 s).
    assert deadlines and max(deadlines) < 1.5, deadlines
    assert reward == 0.0 and not info["success"]
    assert set(info["verdicts"]) <= {"time limit", "memory limit", "output limit", "runtime error"}


# ----------------------------------------------------------------------------------------------- the fence
# The fence pattern before the fix: its two adjacent `[ \t]*` (the tag left out) backtrack quadratically.
_OLD_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)```", re.IGNORECASE | re.ASCII | re.DOTALL)


def _fastest_of_5(function, *args) -> float:
    """The least of 5 timings of `function(*args)`: a parse of well under a millisecond that the machine paused
    (another process on the core, a garbage collection) must not read as slow; a quadratic one is slow each time."""
    times = []
    for _ in range(5):
        t0 = time.monotonic()
        function(*args)
        times.append(time.monotonic() - t0)
    return min(times)


def test_a_fence_followed_by_blanks_is_read_in_linear_time(datasets):
    blanks = " \t" * 8000
    assert extract_program("```" + blanks + "x") is None  # an opening fence without a newline: no program
    elapsed = _fastest_of_5(extract_program, "```" + blanks + "x")
    assert elapsed < 0.05, f"{elapsed:.3f} s for one fence (was 0.4 s)"
    # Through a step, at the most a response may hold: the step answers at once (format penalty or a run).
    env = CodeEnv(dataset=datasets["stdin"], limits=FAST, submission_wall_seconds=BUDGET)
    env.reset(seed=0)
    head = "<think>t</think><answer>```"
    response = head + " " * (MAX_RESPONSE_CHARS - len(head) - len("x</answer>")) + "x</answer>"
    assert len(response) == MAX_RESPONSE_CHARS
    assert _fastest_of_5(extract_program, response[len("<think>t</think><answer>"):-len("</answer>")]) < 0.05
    _, reward, _, _, info = env.step(response)
    assert reward <= 0.0 and not info["success"]


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=["`", " ", "\t", "\n", "p", "y", "t", "h", "o", "n", "3", "P", "x"], max_size=40))
def test_the_fence_reads_what_it_read_before(text):
    old = _OLD_FENCE.search(text)
    new = re.compile(r"```[ \t]*(?:(?:python3?|py)[ \t]*)?\n(.*?)```", re.IGNORECASE | re.ASCII | re.DOTALL)
    from ragen_envs.code import env as env_module

    assert env_module._FENCE.pattern == new.pattern
    got = env_module._FENCE.search(text)
    assert (old is None) == (got is None)
    if old is not None:
        assert old.span() == got.span() and old.group(1) == got.group(1)


# ----------------------------------------------------------------------------------------------- guard mode
@pytest.fixture
def guard_mode(monkeypatch):
    monkeypatch.setenv("RAGEN_SANDBOX_MODE", "guard")
    isolation.reset_probe_cache()
    assert sandbox_isolation().mode == "guard"
    yield
    monkeypatch.delenv("RAGEN_SANDBOX_MODE")
    isolation.reset_probe_cache()


@pytest.fixture
def outside():
    """A world-writable host directory outside every run (the program runs as a fresh uid)."""
    path = tempfile.mkdtemp(prefix="ragen-qa-outside-")
    os.chmod(path, 0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


_TRY = (
    "import os, sys\n"
    "def attempt(name, f):\n"
    "    try:\n"
    "        f()\n"
    "        print(name, 'DONE')\n"
    "    except Exception as e:\n"
    "        print(name, type(e).__name__)\n"
)

GUARD_ESCAPES = {
    "os.path.realpath replaced": (
        "import posixpath\nwd = os.getcwd()\nposixpath.realpath = lambda p, **k: wd + '/x'\n"
        "os.path.realpath = posixpath.realpath\nos.fspath = lambda p: wd + '/x'\n"
        "attempt('write', lambda: open(OUT + '/a', 'w').write('x'))"
    ),
    "a file renamed or linked out": (
        "open('f', 'w').close()\nattempt('rename', lambda: os.rename('f', OUT + '/b'))\n"
        "attempt('replace', lambda: os.replace('f', OUT + '/c'))\nattempt('link', lambda: os.link('f', OUT + '/d'))\n"
        "attempt('symlink', lambda: os.symlink('f', OUT + '/e'))"
    ),
    "a symlink out, then a write through it": (
        "attempt('symlink', lambda: os.symlink(OUT, 'l'))\nattempt('up', lambda: os.symlink('..', 'up'))\n"
        "attempt('write', lambda: open('l/f', 'w').write('x'))"
    ),
    "a str subclass as the path": (
        "class S(str):\n    def startswith(self, *a): return True\n    def split(self, *a): return ['x']\n"
        "attempt('write', lambda: open(S(OUT + '/g'), 'w').write('x'))"
    ),
    "a descriptor of a directory outside": (
        "def go():\n    fd = os.open(OUT, os.O_RDONLY)\n"
        "    os.close(os.open('h', os.O_CREAT | os.O_WRONLY, dir_fd=fd))\n"
        "attempt('dir_fd', go)"
    ),
    "the hook's own variables changed": (
        "import gc\ntry:\n    os.kill(1, 0)\nexcept PermissionError as e:\n    tb = e.__traceback__\n"
        "    while tb.tb_next:\n        tb = tb.tb_next\n"
        "    for v in tb.tb_frame.f_locals.values():\n        getattr(v, 'clear', lambda: None)()\n"
        "for o in gc.get_objects():\n    if callable(o) and getattr(o, '__closure__', None) and "
        "getattr(o, '__name__', '') == 'hook':\n"
        "        for c in o.__closure__:\n            c.cell_contents = '/'\n"
        "import inside\n"
        "attempt('code', lambda: setattr(inside._guard_inside, '__code__', (lambda p, r: True).__code__))\n"
        "attempt('import', lambda: __import__('mmap'))\n"
        "attempt('write', lambda: open(OUT + '/i', 'w').write('x'))"
    ),
}


@pytest.mark.parametrize("name", sorted(GUARD_ESCAPES))
def test_guard_mode_keeps_writes_in_the_working_dir(guard_mode, outside, name):
    program = _TRY + f"OUT = {outside!r}\n" + GUARD_ESCAPES[name]
    res = run_program(program, limits={"wall_seconds": 10})
    assert res.verdict == "ok", res
    assert os.listdir(outside) == [], (name, os.listdir(outside), res.stdout)
    lines = res.stdout.split("\n")
    assert not any(line.endswith(" DONE") for line in lines), (name, res.stdout)


def test_guard_mode_still_lets_a_program_use_its_working_dir(guard_mode):
    program = _TRY + (
        "import shutil, pathlib\n"
        "attempt('write', lambda: open('a.txt', 'w').write('1'))\n"
        "attempt('mkdir', lambda: os.makedirs('d/e'))\n"
        "attempt('rename', lambda: os.rename('a.txt', 'd/b.txt'))\n"
        "attempt('symlink', lambda: os.symlink('d/b.txt', 'l'))\n"
        "attempt('read through the link', lambda: open('l').read())\n"
        "attempt('pathlib', lambda: pathlib.Path('p.txt').write_text('x'))\n"
        "attempt('dir_fd inside', lambda: os.close(\n"
        "    os.open('q', os.O_CREAT | os.O_WRONLY, dir_fd=os.open('d', os.O_RDONLY))))\n"
        "attempt('rmtree', lambda: shutil.rmtree('d'))\n"
        "attempt('read outside', lambda: open(os.__file__).read())\n"
        "attempt('list outside', lambda: os.listdir('/'))\n"
        "attempt('/dev/null', lambda: open('/dev/null', 'w').write('x'))\n"
        "class C:\n    pass\nattempt('class attribute', lambda: setattr(C, 'n', 1))\n"
    )
    res = run_program(program, limits={"wall_seconds": 10})
    assert res.verdict == "ok", res
    lines = [line for line in res.stdout.split("\n") if line]
    assert len(lines) == 12 and all(line.endswith(" DONE") for line in lines), res.stdout
