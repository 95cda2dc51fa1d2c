"""`make test` runs the property tests derandomized (the "ci" profile of tests/conftest.py), so a red run of
a generated test is reproducible from its log: the same examples on every run and every machine."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _recipe(target: str) -> list[str]:
    """The command lines of a Makefile target (the tab-indented lines after `target:`)."""
    lines = (ROOT / "Makefile").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(rf"{target}\s*:", line))
    recipe = []
    for line in lines[start + 1 :]:
        if not line.startswith("\t"):
            break
        recipe.append(line.strip())
    return recipe


def test_make_test_selects_the_ci_profile():
    pytest_lines = [line for line in _recipe("test") if "-m pytest" in line]
    assert pytest_lines and all(line.startswith("HYPOTHESIS_PROFILE=ci ") for line in pytest_lines), pytest_lines


def _default_settings(**env: str) -> str:
    """`derandomize database` of Hypothesis' default settings after loading tests/conftest.py in a fresh
    interpreter whose environment holds only `env` and PATH, HOME, TMPDIR (Hypothesis also loads its own CI
    profile when it sees a CI service's variables, so none of those may leak in)."""
    clean = {k: os.environ[k] for k in ("PATH", "HOME", "TMPDIR") if k in os.environ}
    code = (
        "import runpy; runpy.run_path('tests/conftest.py'); from hypothesis import settings; "
        "print(settings.default.derandomize, settings.default.database)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**clean, **env}, capture_output=True,
                         text=True, check=True)
    return out.stdout.split("\n")[-2]


def test_the_ci_profile_is_derandomized_without_an_example_database():
    assert _default_settings(HYPOTHESIS_PROFILE="ci") == "True None"
    assert _default_settings(CI="true") == "True None"
    assert _default_settings().startswith("False ")  # the check can fail: local runs stay random
