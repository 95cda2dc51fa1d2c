"""The Code env's reward and the math checker's verdict are functions of (seed, action): str hashing is fixed.

The sandbox used to start its interpreter with `-I` (isolated mode), which ignores PYTHONHASHSEED, so every run
hashed str with a fresh random key. A program whose output follows the iteration order of a set of str, such as
`print(" ".join(set(words)))`, printed a different order on each call of the same text, and earned 1.0 or 0.0 by
chance. The math checker's worker, started the same way, had the same property. Both now run `-I` minus `-E`
with an environment the caller writes in full (PYTHONHASHSEED=0, PYTHONSAFEPATH=1): nothing else of the caller's
environment reaches them, as before.

How likely the old code was to pass the first test by chance: a set of 20 distinct str under uniformly random
64-bit hashes (CPython's own set, 300,000 simulated keys) never printed the same order twice, and even the first
two printed strings agree across 5 independent runs with probability about 5e-11. Matching the seed-0 reference
in all 5 runs, as the test asks, is less likely still (at most 0.0032^5, about 3e-13).

The references are independent of the sandbox: the same program run by the same interpreter in a plain
subprocess with PYTHONHASHSEED=0.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ragen_envs.code import CodeEnv, Limits, run_program, sandbox_isolation
from ragen_envs.code.sandbox import isolation, runner
from ragen_envs.math import checker

pytestmark = pytest.mark.xdist_group("sandbox")

CALLS = 5
FAST = {"wall_seconds": 5.0, "cpu_seconds": 2}
LIMITS = Limits(wall_seconds=5.0, cpu_seconds=2)
WORDS = [f"word{i:02d}" for i in range(20)]
PRINT_SET = f"words = {WORDS!r}\nprint(' '.join(set(words)))\n"
RETURN_SET = "def distinct(words):\n    return list(set(words))\n"
# What a leaked caller variable would change, printed by the run (and by the math worker).
PROBE = (
    "import json, os, sys\n"
    "try:\n    import s65_leak_marker\n    leaked = True\nexcept ImportError:\n    leaked = False\n"
    "print(json.dumps({'hash': hash('abc'), 'path': sys.path, 'inspect': sys.flags.inspect,"
    " 'verbose': sys.flags.verbose, 'warnoptions': sys.warnoptions, 'imported': leaked,"
    " 'environ': sorted(os.environ)}), flush=True)\n"
)


@pytest.fixture(params=["default", "guard"])
def mode(request, monkeypatch):
    """The sandbox mode this machine picks, and the guard fallback (no namespaces)."""
    if request.param == "guard":
        monkeypatch.setenv("RAGEN_SANDBOX_MODE", "guard")
    isolation.reset_probe_cache()
    yield sandbox_isolation()
    monkeypatch.delenv("RAGEN_SANDBOX_MODE", raising=False)
    isolation.reset_probe_cache()


def _seed0(python: str, source: str, stdin: str = "") -> str:
    """`source`'s stdout from a plain subprocess of `python` with str hashing fixed by PYTHONHASHSEED=0."""
    out = subprocess.run([python, "-S", "-c", source], input=stdin, capture_output=True, text=True, timeout=60,
                         env={"PYTHONHASHSEED": "0"}, cwd="/")  # fmt: skip
    assert out.returncode == 0, out.stderr
    return out.stdout


def _answer(program: str) -> str:
    return f"<think>t</think><answer>\n```python\n{program}\n```\n</answer>"


def _rewards(path, program: str) -> list[float]:
    """The reward of the same answer in CALLS fresh episodes of the same seed."""
    rewards = []
    for _ in range(CALLS):
        env = CodeEnv(dataset=path, limits=FAST, submission_wall_seconds=30.0)
        env.reset(seed=0)
        _, reward, _, _, info = env.step(_answer(program))
        rewards.append((reward, info["verdicts"]))
    return rewards


def test_a_printed_set_of_str_is_the_same_in_every_run_and_earns_the_same_reward(mode, tmp_path):
    expected = _seed0(mode.python, PRINT_SET)
    assert sorted(expected.split()) == sorted(WORDS)
    outputs = [run_program(PRINT_SET, limits=LIMITS) for _ in range(CALLS)]
    assert [(r.verdict, r.stdout) for r in outputs] == [("ok", expected)] * CALLS, mode.mode
    path = tmp_path / "set.jsonl"
    path.write_text(json.dumps({"problem": "Print the distinct words.",
                                "tests": [{"input": "", "output": expected}]}) + "\n")  # fmt: skip
    assert _rewards(path, PRINT_SET) == [(1.0, ["passed"])] * CALLS


def test_a_returned_set_of_str_is_the_same_in_every_run_and_earns_the_same_reward(tmp_path):
    iso = sandbox_isolation()
    expected = json.loads(_seed0(iso.python, RETURN_SET + f"import json\nprint(json.dumps(distinct({WORDS!r})))\n"))
    path = tmp_path / "fn.jsonl"
    path.write_text(json.dumps({"problem": "Return the distinct words.", "fn_name": "distinct",
                                "tests": [{"input": [WORDS], "output": expected}]}) + "\n")  # fmt: skip
    assert _rewards(path, RETURN_SET) == [(1.0, ["passed"])] * CALLS


def _leak_parent_variables(monkeypatch, tmp_path) -> str:
    """Set PYTHON* variables in this process that would show in a child that read them; the module dir."""
    leak = tmp_path / "leak"
    leak.mkdir()
    (leak / "s65_leak_marker.py").write_text("")
    startup = tmp_path / "startup.py"
    startup.write_text("print('STARTUP RAN')\n")
    for name, value in {"PYTHONPATH": str(leak), "PYTHONSTARTUP": str(startup), "PYTHONINSPECT": "1",
                        "PYTHONVERBOSE": "1", "PYTHONWARNINGS": "error", "PYTHONHASHSEED": "123"}.items():
        monkeypatch.setenv(name, value)
    return str(leak)


def _assert_nothing_leaked(seen: dict, leak: str, seed0_hash: int) -> None:
    assert seen["hash"] == seed0_hash  # the caller's PYTHONHASHSEED=123 did not reach it either
    assert leak not in seen["path"] and not seen["imported"]
    assert seen["inspect"] == 0 and seen["verbose"] == 0 and seen["warnoptions"] == []


def test_python_variables_of_the_caller_do_not_reach_the_run(mode, monkeypatch, tmp_path):
    seed0_hash = json.loads(_seed0(mode.python, PROBE))["hash"]
    leak = _leak_parent_variables(monkeypatch, tmp_path)
    res = run_program(PROBE, limits=LIMITS)
    assert res.verdict == "ok", res.stderr
    assert "STARTUP RAN" not in res.stdout and "import " not in res.stderr  # PYTHONSTARTUP, PYTHONVERBOSE
    seen = json.loads(res.stdout)
    _assert_nothing_leaked(seen, leak, seed0_hash)
    # The program sees the environment it always saw: nothing but what the interpreter sets itself (PEP 538).
    assert set(seen["environ"]) <= {"LC_CTYPE"}, seen["environ"]


def test_the_math_worker_hashes_str_the_same_way_and_ignores_the_callers_python_variables(monkeypatch, tmp_path):
    """The worker's interpreter, started as `_Worker` starts it, running PROBE instead of the checker loop."""
    seed0_hash = json.loads(_seed0(sys.executable, PROBE))["hash"]
    leak = _leak_parent_variables(monkeypatch, tmp_path)
    monkeypatch.setattr(checker, "_WORKER_CODE", PROBE)
    for _ in range(2):
        worker = checker._Worker()
        try:
            line = worker.read_line(cpu_limit=60.0, wall_limit=120.0)
        finally:
            worker.kill()
        seen = json.loads(line)
        _assert_nothing_leaked(seen, leak, seed0_hash)
        assert "PYTHONPATH" not in seen["environ"] and "PYTHONSTARTUP" not in seen["environ"]


def test_without_safe_path_the_launch_script_still_leaves_its_directory_off_sys_path(mode, monkeypatch):
    """Python < 3.11 ignores PYTHONSAFEPATH and puts the script's directory first on sys.path; the same happens
    here when the variable is left out. launch.py drops that entry: the sandbox's own modules stay unimportable."""
    monkeypatch.setattr(runner, "INTERPRETER_ENV", {"PYTHONHASHSEED": "0"})
    here = str(Path(runner.LAUNCH).parent)
    src = "import sys\nprint(sys.path)\ntry:\n    import limits\n    print('IMPORTED')\nexcept ImportError:\n    pass\n"
    res = run_program(src, limits=LIMITS)
    assert res.verdict == "ok" and "IMPORTED" not in res.stdout, (res.verdict, res.stdout, res.stderr)
    assert here not in res.stdout
