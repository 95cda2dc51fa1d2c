"""`ragen reproduce` under the situations a user meets besides a clean run: an --out that holds runs of another
design (the quick study's under the full one), damaged run folders, Ctrl-C in the middle, two processes on one run,
report paths that are files or folders of the wrong kind, a hand-made results.json, and NaN in what is written as
data. Every run here is synthetic (a metrics.jsonl like the trainer's and the config.toml the trainer writes) except
the Ctrl-C test of the command itself, which interrupts a real quick run during its warm start."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from ragen_core.apps.reproduce import cli
from ragen_core.apps.reproduce.report import write_report
from ragen_core.apps.reproduce.runner import execute_run, finished_records, read_run, run_local
from ragen_core.apps.reproduce.spec import RunSpec
from ragen_core.apps.reproduce.study import ARMS, build_study
from ragen_core.training.config import dump_toml, load_config

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"


def _finish(spec: RunSpec, runs_dir: Path, config_of: RunSpec | None = None) -> dict:
    """A finished run of `spec` as execute_run leaves it: metrics.jsonl, the config.toml the trainer writes
    (``dump_toml(load_config(config, overrides))``, of `config_of` when given: a run of another design) and
    done.json."""
    d = runs_dir / spec.name
    d.mkdir(parents=True, exist_ok=True)
    rows = [{"step": 0, "sft/loss_last": 0.1, "perf/sft_s": 5.0}, {"step": 0, "val/success": 0.1}]
    rows += [{"step": s, "perf/step_s": 1.0, "filter/zero_fraction": 0.25, **({"val/success": 0.2 + 0.01 * s}
                                                                              if s % 2 == 0 else {})}
             for s in range(1, 5)]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    source = config_of or spec
    (d / "config.toml").write_text(dump_toml(load_config(source.config, list(source.overrides))))
    record = read_run(d, spec)
    (d / "done.json").write_text(json.dumps(record))
    return record


def _quick_and_full(out: Path) -> tuple[list[RunSpec], list[RunSpec]]:
    """The learning Sokoban runs of seed 0, as the quick and as the full study builds them (the same names)."""
    quick = build_study([0], True, CONFIGS, out / "warm_cache", envs=("sokoban",))
    full = build_study([0], False, CONFIGS, out / "warm_cache", envs=("sokoban",))
    assert [s.name for s in quick] == [s.name for s in full]
    return quick, full


# ------------------------------------------------------------------------------------------- another design
def test_a_full_study_does_not_count_the_quick_studys_runs_in_the_same_out(tmp_path, capsys):
    """Run folders are named by group, arm and seed only: quick runs under the full study's --out used to be
    counted as its runs (a third of the steps, reported as complete, exit 0)."""
    out = tmp_path / "study"
    quick, full = _quick_and_full(out)
    for q in quick:
        _finish(q, out / "runs")
    argv = ["--envs", "sokoban", "--seeds", "1", "--out", str(out), "--configs-dir", str(CONFIGS), "--no-progress"]
    assert cli.main([*argv, "--report-only"]) == 1  # nothing of this design has finished
    err = capsys.readouterr().err
    assert f"{full[0].name} (another design): run.steps = 20 (this design: 60)" in err
    assert "not counted" in err and not (out / "reproduction.md").exists()
    records, missing = finished_records(full, out / "runs")
    assert records == [] and len(missing) == len(full)
    # Running it neither counts nor overwrites them: each is a failure naming the folder, nothing is trained.
    with pytest.raises(RuntimeError, match="holds a run of another design") as e:
        run_local(full, out / "runs", workers=2, progress=False, execute=execute_run)
    assert str(out / "runs" / full[0].name) in str(e.value) and "own --out" in str(e.value)
    assert all(json.loads((out / "runs" / s.name / "done.json").read_text())["steps"] == 4 for s in quick)
    # The quick study itself still reads them, and a warm-start cache elsewhere is the same run.
    assert finished_records(quick, out / "runs")[1] == []
    moved = build_study([0], True, CONFIGS, tmp_path / "elsewhere", envs=("sokoban",))
    assert finished_records(moved, out / "runs")[1] == []
    assert cli.main([*argv[:4], "--quick", *argv[4:], "--report-only"]) == 0
    header = json.loads((out / "reproduction" / "results.json").read_text())["header"]
    assert header["n_missing"] == 0 and f"--out {out}" in header["command"]  # the command resumes these runs


def test_a_killed_run_of_another_design_is_not_resumed(tmp_path):
    """A run folder with a checkpoint but no done.json used to be resumed from its own config.toml whatever the
    study asked for."""
    out = tmp_path / "study"
    quick, full = _quick_and_full(out)
    d = out / "runs" / full[0].name
    _finish(full[0], out / "runs", config_of=quick[0])
    (d / "done.json").unlink()
    (d / "checkpoints").mkdir()
    (d / "checkpoints" / "latest.pt").write_bytes(b"not read")
    with pytest.raises(RuntimeError, match=r"another design \(run\.steps = 20 \(this design: 60\)"):
        execute_run(full[0], out / "runs")
    assert not (d / "train.log").exists()  # no trainer started


# ------------------------------------------------------------------------------------------- damaged folders
def test_damaged_run_folders_are_failures_naming_the_file(tmp_path, capsys):
    """A done.json or a metrics.jsonl line that is not JSON: the report lists the run as missing with the file, and
    the study run exits 1 naming it (a damaged metrics.jsonl used to pass as finished, exit 0, while the report
    listed the run as missing; a damaged done.json failed with a bare JSON error naming no file)."""
    out = tmp_path / "study"
    specs = build_study([0], True, CONFIGS, out / "warm_cache", envs=("sokoban",))
    for s in specs:
        _finish(s, out / "runs")
    runs = out / "runs"
    (runs / specs[0].name / "done.json").write_text('{"env": "sok')
    metrics = runs / specs[1].name / "metrics.jsonl"
    metrics.write_text(metrics.read_text()[:-20])  # a last line cut short
    (runs / specs[2].name / "done.json").write_text("[1, 2]")
    records, missing = finished_records(specs, runs)
    assert [r["name"] for r in records] == [specs[3].name]
    assert missing[0].startswith(f"{specs[0].name} (unreadable: JSONDecodeError): done.json")
    assert missing[1].startswith(f"{specs[1].name} (unreadable: ValueError): metrics.jsonl, line 6 is not JSON")
    assert missing[2] == f"{specs[2].name} (unreadable: not a record): done.json"
    argv = ["--quick", "--envs", "sokoban", "--out", str(out), "--configs-dir", str(CONFIGS), "--no-progress"]
    assert cli.main(argv) == 1  # every run is finished or damaged: nothing is trained
    err = capsys.readouterr().err
    assert f"{runs / specs[0].name / 'done.json'} is not readable JSON" in err
    assert f"{metrics} is damaged" in err and f"remove {runs / specs[1].name} to run it again" in err
    assert "3 of 4 runs missing" in err and (out / "reproduction.md").is_file()


# ------------------------------------------------------------------------------------------- Ctrl-C
_INTERRUPTED = """
import sys, time
from pathlib import Path
from ragen_core.apps.reproduce.runner import run_local
from ragen_core.apps.reproduce.spec import RunSpec

def execute(spec, runs_dir):
    (Path(runs_dir) / (spec.name + ".started")).write_text("")
    time.sleep(1.0)
    return {"name": spec.name}

if __name__ == "__main__":
    run_local([RunSpec("e", "a", s, "x", ()) for s in range(8)], sys.argv[1], workers=2, progress=False,
              execute=execute)
"""


def test_ctrl_c_starts_no_queued_run(tmp_path, default_sigint):
    """KeyboardInterrupt in run_local used to leave the queued runs to the pool's exit, which started every one of
    them (each a training run of minutes) before the interrupt surfaced."""
    script = tmp_path / "study.py"
    script.write_text(textwrap.dedent(_INTERRUPTED))
    runs = tmp_path / "runs"
    runs.mkdir()
    proc = subprocess.Popen([sys.executable, str(script), str(runs)], cwd=ROOT, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, preexec_fn=default_sigint)
    deadline = time.monotonic() + 60
    while not list(runs.glob("*.started")) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert "KeyboardInterrupt" in err
    assert len(list(runs.glob("*.started"))) <= 2  # the two running when Ctrl-C came, none of the 6 queued


@pytest.mark.slow
def test_ctrl_c_in_the_command_stops_the_study_with_one_line(tmp_path, start_quick_study, interrupt_group):
    """The command as a terminal's Ctrl-C reaches it (the whole process group): exit 130, one line saying how to
    resume, the running run stopped by its trainer, no other run started."""
    out = tmp_path / "out"
    proc = start_quick_study(tmp_path)
    log = out / "runs" / "sokoban-top_p-s0" / "train.log"
    deadline = time.monotonic() + 120
    while not (log.is_file() and "warm start" in log.read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)
    err = interrupt_group(proc, 60)
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted; no further run was started" in err and "Traceback" not in err
    assert sorted(d.name for d in (out / "runs").iterdir() if d.is_dir()) == ["sokoban-top_p-s0"]


# ------------------------------------------------------------------------------------------- one run, two processes
def _bandit(tmp_path: Path) -> Path:
    config = tmp_path / "bandit.toml"
    config.write_text('[run]\nsteps = 2\n[env]\nid = "ragen/Bandit-v0"\n')
    return config


def test_two_processes_never_train_the_same_run_folder(tmp_path):
    """Two studies on one --out (or two Ray tasks) used to start the same run in the same folder at once."""
    config = _bandit(tmp_path)
    spec = RunSpec("bandit", "a", 0, str(config), ("run.seed=0", "algo.no_such_key=1"))  # the trainer exits 2
    errors: list[str] = []

    def first():
        try:
            execute_run(spec, tmp_path / "runs")
        except RuntimeError as e:
            errors.append(str(e))

    thread = threading.Thread(target=first)
    thread.start()
    deadline = time.monotonic() + 30
    while not (tmp_path / "runs" / spec.name / "train.log").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    with pytest.raises(RuntimeError, match="being run by another process now"):
        execute_run(spec, tmp_path / "runs")
    thread.join(60)
    assert errors and "failed (exit 2)" in errors[0]  # the first one ran (and failed on its config)
    with pytest.raises(RuntimeError, match=r"failed \(exit 2\)"):  # the lock is released afterwards
        execute_run(spec, tmp_path / "runs")


# ------------------------------------------------------------------------------------------- report paths
def test_report_paths_of_the_wrong_kind_are_refused_before_any_run(tmp_path, capsys):
    """A file where the report's folder goes (or a folder where its Markdown goes) used to be a FileExistsError /
    IsADirectoryError traceback after every run had finished."""
    out = tmp_path / "study"
    specs = build_study([0], True, CONFIGS, out / "warm_cache", envs=("sokoban",))
    for s in specs:
        _finish(s, out / "runs")
    base = ["--quick", "--envs", "sokoban", "--out", str(out), "--configs-dir", str(CONFIGS), "--no-progress"]
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "reproduction").write_text("a file")
    assert cli.main([*base, "--report-dir", str(bad)]) == 2
    assert f"--report-dir {bad / 'reproduction'}: it is a file" in capsys.readouterr().err
    (bad / "reproduction").unlink()
    (bad / "reproduction.md").mkdir()
    assert cli.main([*base, "--report-dir", str(bad)]) == 2
    assert f"{bad / 'reproduction.md'}: it is a folder" in capsys.readouterr().err
    fresh = tmp_path / "fresh" / "study"
    (bad / "search").write_text("a file")  # another experiment's report folder
    assert cli.main(["--experiment", "search", "--out", str(fresh), "--report-dir", str(bad),
                     "--configs-dir", str(CONFIGS), "--no-progress"]) == 2
    assert f"{bad / 'search'}: it is a file" in capsys.readouterr().err and not fresh.exists()
    # --from-results into such a folder: exit 1 with the reason. Existing report files are replaced.
    assert cli.main([*base, "--report-only"]) == 0
    results = out / "reproduction" / "results.json"
    assert cli.main(["--from-results", str(results), "--report-dir", str(bad)]) == 1
    assert "it is a folder" in capsys.readouterr().err
    assert cli.main(["--from-results", str(results)]) == 0


# ------------------------------------------------------------------------------------------- --from-results
@pytest.mark.parametrize("content, says", [
    ('[1, 2]', "a JSON list"),
    ('{"header": {}, "records": {"a": 1}}', "'records' must be a JSON list"),
    ('{"header": [], "records": []}', "'header' must be a JSON object"),
    ('{"header": {}, "records": ["abc"]}', "a run record must be a JSON object"),
    ('{"header": {}, "experiment": "nope", "records": []}', "experiment 'nope' is not one of"),
    ('{"header": {}, "records": [{"env": "sokoban", "arm": "top_p", "seed": "0", "name": "n", "steps": 3, '
     '"val": [[0, 0.1]]}]}', "run record 'n': seed must be an integer >= 0; got '0'"),
    ('{"header": {}, "records": [{"env": "sokoban", "arm": "top_p", "seed": 0, "name": "n", "steps": 3, '
     '"val": "zz"}]}', "val must be a list of [step, success] pairs"),
    ('{"header": {}, "records": [{"env": "sokoban", "arm": "top_p", "seed": 0, "name": "n", "steps": 3, '
     '"val": [[0, NaN]]}]}', "an integer step >= 0, a finite number); got [0, nan]"),
    ('{"header": {}, "records": [{"env": "sokoban", "arm": "top_p", "seed": 0, "name": "n", "steps": 3, '
     '"val": [[0, 0.1]], "mi": [3]}]}', "mi must be a list of objects"),
    ('{"header": {"mode": "full"}, "records": [{"env": "sokoban", "arm": "top_p", "seed": 0, "name": "n", '
     '"steps": 3, "val": [[0, 0.1]]}]}', "its header lacks ['command', 'seeds'"),
])
def test_a_malformed_results_json_is_one_line_naming_what_is_wrong(tmp_path, capsys, content, says):
    """Each of these used to be an AttributeError, ValueError or KeyError traceback from inside the analysis or the
    report."""
    path = tmp_path / "results.json"
    path.write_text(content)
    assert cli.main(["--from-results", str(path), "--report-dir", str(tmp_path / "r")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ragen reproduce: ") and says in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()


# ------------------------------------------------------------------------------------------- data outputs
def test_results_json_is_strict_json_with_null_for_what_was_not_finite(tmp_path):
    """A NaN or infinity in a record used to be written as the bare token NaN, which JSON readers refuse (the
    writer's NaN-to-null rule sat in json.dumps' `default`, which never sees a float)."""
    spec = RunSpec("sokoban", "top_p", 0, "unused.toml", ())
    d = tmp_path / "runs" / spec.name
    d.mkdir(parents=True)
    (d / "metrics.jsonl").write_text(json.dumps({"step": 0, "val/success": 0.1}) + "\n" + json.dumps(
        {"step": 5, "perf/step_s": 1.0, "collapse/mi_seq_est": 1.0, "collapse/mi_zscore_ema": None}) + "\n")
    record = read_run(d, spec)
    record["mi"][0]["mi_zscore_ema"] = math.nan
    record["wall_s"] = math.inf
    header = {"mode": "quick", "command": "ragen reproduce --quick", "seeds": [0], "n_runs": 1, "n_missing": 0,
              "missing": [], "core_minutes": 0.1, "machine": "test",
              "arms": {"top_p": {"overrides": list(ARMS["top_p"].overrides), "purpose": ARMS["top_p"].purpose}}}
    from ragen_core.apps.reproduce.analysis import analyse

    write_report({"analysis": analyse([record], n_boot=20), "records": [record]}, tmp_path / "rep", header)
    text = (tmp_path / "rep" / "reproduction" / "results.json").read_text()

    def refuse(token):
        raise ValueError(f"not JSON: {token}")

    data = json.loads(text, parse_constant=refuse)
    assert data["records"][0]["mi"][0]["mi_zscore_ema"] is None and data["records"][0]["wall_s"] is None
    assert data["records"][0]["mi"][0]["mi_seq_est"] == 1.0
