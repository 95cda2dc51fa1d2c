"""The mutation-testing driver (`mutation/run_mutmut.py`): what it counts as an equivalent mutant.

mutmut numbers the mutants of a function in order, so a change to the function renumbers them, and an equivalence
argument recorded under a name can end up attached to another mutation. The driver binds each argument to the
mutation's own lines; these tests pin that, the diff of a mutated signature (a default argument), and that the
committed records agree with each other.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def driver():
    spec = importlib.util.spec_from_file_location("run_mutmut", ROOT / "mutation" / "run_mutmut.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _survivor(driver, name: str, original: str, mutant: str) -> dict:
    return {"name": name, "status": "survived", "diff": driver.mutant_diff(original, mutant)}


def test_a_mutated_default_argument_shows_in_the_diff(driver):
    original = "def x_f__mutmut_orig(L, n_perm: int = 9999):\n    return L\n"
    mutant = "def x_f__mutmut_1(L, n_perm: int = 10000):\n    return L\n"
    assert driver._changed_lines(driver.mutant_diff(original, mutant)) == (
        "-def x_f(L, n_perm: int = 9999):\n+def x_f(L, n_perm: int = 10000):")


def test_an_unchanged_signature_is_not_in_the_diff(driver):
    original = "def xǁSpecǁcheck__mutmut_orig(self, g):\n    return g + 1\n"
    mutant = "def xǁSpecǁcheck__mutmut_7(self, g):\n    return g - 1\n"
    assert driver._changed_lines(driver.mutant_diff(original, mutant)) == "-    return g + 1\n+    return g - 1"


def test_an_argument_counts_only_for_the_mutation_it_was_written_for(driver):
    name = "ragen_core.math.mi.x_f__mutmut_3"
    written_for = _survivor(driver, name, "def x_f__mutmut_orig(a):\n    return a.to(torch.float64)\n",
                            "def x_f__mutmut_3(a):\n    return a.to(None)\n")
    equivalent = {name: {"mutation": driver._changed_lines(written_for["diff"]), "why": "a no-op cast"}}
    assert driver._argued(equivalent, written_for) == "a no-op cast"
    assert driver.stale_arguments(equivalent, [written_for]) == []
    # The function changed and mutant 3 is now another mutation: the old argument must not cover it.
    renumbered = _survivor(driver, name, "def x_f__mutmut_orig(a, b):\n    return a >= b\n",
                           "def x_f__mutmut_3(a, b):\n    return a > b\n")
    assert driver._argued(equivalent, renumbered) is None
    assert driver.stale_arguments(equivalent, [renumbered]) == [name]
    # An argument without its mutation (the file's old format) covers nothing.
    assert driver._argued({name: "a no-op cast"}, written_for) is None
    assert driver._argued({}, written_for) is None


def test_the_report_does_not_call_a_renumbered_mutant_equivalent(driver):
    name = "ragen_core.math.filtering.x_f__mutmut_3"
    now = _survivor(driver, name, "def x_f__mutmut_orig(a, b):\n    return a >= b\n",
                    "def x_f__mutmut_3(a, b):\n    return a > b\n")
    result = {"module": "filtering", "total": 10, "killed": 9, "checked": 10, "counts": {"killed": 9, "survived": 1},
              "score": 0.9, "survivors": [now], "not_checked": [],
              "mutations": {name: driver._changed_lines(now["diff"])}}
    stale = {name: {"mutation": "-    return a.to(torch.float64)\n+    return a.to(None)", "why": "a no-op cast"}}
    report = driver.report_md({"final": {"filtering": result}}, stale)
    assert "a no-op cast" not in report
    assert "`x_f__mutmut_3`: **SURVIVED** (not killed, not shown equivalent)" in report
    row = next(line for line in report.splitlines() if line.startswith("| filtering |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[5:8] == ["0", "0", "1"]  # equivalent, timeouts, surviving and not equivalent
    fresh = {name: {"mutation": driver._changed_lines(now["diff"]), "why": "ties are impossible here"}}
    report = driver.report_md({"final": {"filtering": result}}, fresh)
    assert "**equivalent**: ties are impossible here" in report


def test_every_recorded_argument_names_the_mutation_of_the_recorded_run(driver):
    """Each argument in mutation/equivalent.json is for the mutation its name has in the latest recorded run
    (mutation/results.json), so no argument covers a renumbered mutant."""
    equivalent = json.loads((ROOT / "mutation" / "equivalent.json").read_text())
    final = json.loads((ROOT / "mutation" / "results.json").read_text())["final"]
    recorded = {name: text for r in final.values() for name, text in r.get("mutations", {}).items()}
    for name, entry in equivalent.items():
        assert isinstance(entry, dict) and entry.get("why"), name
        assert name in recorded, f"{name}: no such mutant in the recorded runs"
        assert entry["mutation"] == recorded[name], f"{name}: the argument was written for another mutation"
