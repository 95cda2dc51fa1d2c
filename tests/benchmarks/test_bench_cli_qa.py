"""The benchmarks' command lines as a user runs them: bad counts, unwritable output paths, unknown case indices and
configs, a baseline commit that cannot be checked out, strict result JSON, and quick runs that leave the committed
results alone. Every check here stops at argument parsing or runs the smallest real measurement."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import bench_cross_score, bench_mi, bench_profile, bench_tasks, readme_tables
from benchmarks.micro import bench_decode

ROOT = Path(__file__).resolve().parents[2]


def _usage_error(main, argv, capsys) -> str:
    """Run a benchmark's main on `argv`, expect a usage error (exit 2) and return its message."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("main, argv, option", [
    (bench_mi.main, ["--repeats", "0"], "--repeats"),
    (bench_mi.main, ["--repeats", "-2"], "--repeats"),
    (bench_mi.main, ["--batch-tokens", "0"], "--batch-tokens"),
    (bench_cross_score.main, ["--reps", "0"], "--reps"),
    (bench_decode.main, ["--reps", "0"], "--reps"),
    (bench_decode.main, ["--rows", "0"], "--rows"),
    (bench_decode.main, ["--threads", "0"], "--threads"),
])
def test_zero_or_negative_counts_are_usage_errors(main, argv, option, capsys):
    """A count below 1 is one usage line naming the option (was: the default, or a crash deep inside)."""
    err = _usage_error(main, argv, capsys)
    assert f"argument {option}: expected an integer >= 1" in err


def test_unknown_case_index_is_a_usage_error(capsys):
    """`--cases 9` used to measure nothing and write an empty result."""
    err = _usage_error(bench_cross_score.main, ["--cases", "9", "--json", "/tmp/unused.json"], capsys)
    assert "--cases: no case 9" in err


@pytest.mark.parametrize("main, option", [(bench_mi.main, "--out"), (bench_tasks.main, "--out"),
                                          (bench_cross_score.main, "--json"), (bench_decode.main, "--json")])
def test_output_below_a_file_or_a_folder_is_refused_before_the_run(main, option, tmp_path, capsys):
    """Checked at parse time: such a path used to lose the whole run to a traceback in the final write."""
    a_file = tmp_path / "taken"
    a_file.write_text("x")
    err = _usage_error(main, [option, str(a_file / "result.json")], capsys)
    assert f"{option} {a_file / 'result.json'}: {a_file} is a file, not a folder" in err
    err = _usage_error(main, [option, str(tmp_path)], capsys)
    assert "is a folder" in err


def test_unknown_profile_config_is_a_usage_error(capsys):
    err = _usage_error(bench_profile.main, ["--configs", "no_such_config", "--no-threads"], capsys)
    assert "--configs: no config 'no_such_config'" in err


def test_missing_baseline_commit_says_how_to_make_it():
    """An unknown commit is one ValueError with git's reason and the command (was a CalledProcessError whose
    message git's captured stderr held)."""
    commit = "no-such-commit-qa"
    with pytest.raises(ValueError) as exc:
        bench_profile.baseline_checkout(commit)
    text = str(exc.value)
    assert text.startswith(f"--baseline {commit}: cannot make its worktree")
    assert "git worktree add --detach" in text
    assert not (ROOT / "benchmarks" / f".baseline-{commit}").exists()


def _strict(text: str):
    def refuse(name):
        raise AssertionError(f"not strict JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def test_write_result_writes_strict_json(tmp_path, capsys):
    """NaN and infinities (a phase that never ran) are null: `json.dumps`' default NaN is not JSON."""
    result = {"markdown": "t", "a": float("nan"), "b": [1.5, float("inf"), {"c": -float("inf")}], "d": (2.0,)}
    path = readme_tables.write_result(result, tmp_path / "sub" / "r.json")
    assert _strict(path.read_text()) == {"markdown": "t", "a": None, "b": [1.5, None, {"c": None}], "d": [2.0]}
    assert sorted(p.name for p in path.parent.iterdir()) == ["r.json"]  # no temporary file left


def test_write_result_keeps_finite_values_bit_identical(tmp_path, capsys):
    values = {"markdown": "", "x": 0.1 + 0.2, "y": 1e-300, "n": 3, "s": "nan"}
    path = readme_tables.write_result(values, tmp_path / "r.json")
    assert _strict(path.read_text()) == values


def test_quick_tasks_run_leaves_the_committed_result_alone(tmp_path, monkeypatch, capsys):
    """`--quick` writes tasks_quick.json (ignored by git), never the committed full-mode tasks.json (which
    `ragen bench --quick` then copied into the README). The measurements run for real, on the smallest sizes."""
    episodes, bm25, sandbox = bench_tasks.bench_episodes, bench_tasks.bench_bm25, bench_tasks.bench_sandbox
    monkeypatch.setattr(bench_tasks, "bench_episodes", lambda seconds: episodes(0.001))
    monkeypatch.setattr(bench_tasks, "bench_bm25", lambda n, q: bm25(50, 3))
    monkeypatch.setattr(bench_tasks, "bench_sandbox", lambda runs: sandbox(1))
    monkeypatch.setattr(bench_tasks, "RESULTS", tmp_path)
    assert bench_tasks.main(["--quick"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tasks_quick.json"]
    assert _strict((tmp_path / "tasks_quick.json").read_text())["mode"] == "quick"


def test_profile_driver_without_arguments_prints_its_usage():
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "profile_driver.py")], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.startswith("usage: python benchmarks/profile_driver.py CONFIG OUT.json")
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("seeds, says", [("", "no seed given"), ("a", "give integers"), ("13,,14", "is empty"),
                                         ("-1", "integers >= 0")])
def test_end_to_end_seeds_are_checked_before_the_baseline_is_prepared(seeds, says, capsys):
    """`--seeds ''` crashed at min([]) after the baseline checkout was prepared; `--seeds a` was a traceback."""
    from benchmarks import bench_end_to_end

    with pytest.raises(SystemExit) as code:
        bench_end_to_end.main([f"--seeds={seeds}", "--baseline", "no-such-commit"])
    assert code.value.code == 2 and says in capsys.readouterr().err


def test_every_committed_json_record_is_strict_json():
    """A committed result or record holding NaN or Infinity (Python's json default) is not JSON to other readers
    (jq, JavaScript, strict parsers): benchmark results, run records and reports are written as strict JSON."""
    root = Path(__file__).resolve().parents[2]
    files = subprocess.run(["git", "ls-files", "*.json"], cwd=root, capture_output=True, text=True,
                           check=True).stdout.split()
    checked = [f for f in files if not f.startswith("tests/")]
    assert checked, "no committed JSON found"
    for name in checked:
        try:
            _strict((root / name).read_text())
        except AssertionError as err:
            raise AssertionError(f"{name}: {err}") from None


def test_trl_crosscheck_markdown_renders_from_its_committed_summary():
    """The committed summary has null where a time was not measured (strict JSON); the table still renders."""
    from benchmarks import bench_trl

    saved = json.loads((Path(__file__).resolve().parents[2] / "benchmarks/results/trl_crosscheck.json").read_text())
    text = bench_trl.markdown(saved["summary"], saved["steps"])
    assert "| engine |" in text and "None" not in text and "nan" not in text
