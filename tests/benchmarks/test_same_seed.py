"""benchmarks.same_seed: the comparison of two runs' metrics, on synthetic run folders."""

import json
from pathlib import Path

import pytest

from benchmarks.same_seed import compare_all, compare_run, markdown, overrides


def _run(path: Path, rows, outcomes="a\n"):
    path.mkdir(parents=True)
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (path / "val_outcomes.jsonl").write_text(outcomes)
    return path


def test_identical_up_to_wall_clock_times(tmp_path):
    a = _run(tmp_path / "a", [{"step": 1, "loss": 0.5, "perf/step_s": 1.0, "perf/tokens_trained": 10.0}])
    b = _run(tmp_path / "b", [{"step": 1, "loss": 0.5, "perf/step_s": 9.0, "perf/tokens_trained": 10.0}])
    r = compare_run(a, b)
    assert r["differences"] == [] and r["keys"] == 3  # step, loss, perf/tokens_trained (a count, not a time)


def test_every_kind_of_difference_is_reported(tmp_path):
    a = _run(tmp_path / "a", [{"step": 1, "loss": 0.5, "gone": 1}, {"step": 2, "perf/tokens_trained": 10.0}])
    b = _run(tmp_path / "b", [{"step": 1, "loss": 0.25, "added": 2}, {"step": 2, "perf/tokens_trained": 11.0}],
             outcomes="b\n")
    d = compare_run(a, b)["differences"]
    assert "row 0 (step 1): loss 0.5 vs 0.25" in d
    assert "row 1 (step 2): perf/tokens_trained 10.0 vs 11.0" in d
    assert "only in the old run: gone" in d and "only in the new run: added" in d
    assert "val_outcomes.jsonl differs" in d
    c = _run(tmp_path / "c", [{"step": 1, "loss": 0.5, "gone": 1}])
    assert "rows: 2 vs 1" in compare_run(a, c)["differences"]


def test_a_new_key_alone_reads_identical_with_its_name(tmp_path):
    _run(tmp_path / "old" / "x", [{"step": 1, "loss": 0.5}])
    _run(tmp_path / "new" / "x", [{"step": 1, "loss": 0.5, "filter/nan_groups": 0}])
    _run(tmp_path / "old" / "y", [{"step": 1}])
    result = compare_all(tmp_path / "old", tmp_path / "new")
    assert result["missing_in_new"] == ["y"]
    text = markdown(result, "o", "n")
    assert "| x | 1 | 2 | identical; new keys: `filter/nan_groups` |" in text and "No new run: y." in text


def test_overrides_cap_the_warm_start_and_shrink_only_an_existing_probe(tmp_path):
    with_both = tmp_path / "a.toml"
    with_both.write_text("[warm_start]\nsft_episodes = 3000\n[mi]\nprobe_prompts = 32\n")
    none = tmp_path / "b.toml"
    none.write_text("[run]\nsteps = 5\n")
    a, b = overrides(with_both, tmp_path), overrides(none, tmp_path)
    assert "warm_start.sft_episodes=150" in a and "mi.probe_prompts=8" in a
    assert not any(o.startswith(("warm_start.sft_episodes", "mi.probe_prompts")) for o in b)


def test_measurement_only_differences_say_so_and_anything_else_does_not(tmp_path):
    base = {"step": 1, "loss/policy": 0.5, "collapse/mi_est": 0.1, "probe/retrieval_margin": 0.4}
    _run(tmp_path / "old" / "m", [base])
    _run(tmp_path / "new" / "m", [{**base, "collapse/mi_est": 0.1 + 3e-6, "probe/retrieval_margin": 0.4 - 2e-5}])
    _run(tmp_path / "old" / "t", [base])
    _run(tmp_path / "new" / "t", [{**base, "loss/policy": 0.5 + 1e-9, "collapse/mi_est": 0.2}])  # training moved
    _run(tmp_path / "old" / "f", [base])
    _run(tmp_path / "new" / "f", [{**base, "collapse/mi_est": 0.2}], outcomes="b\n")  # and a file differs
    result = compare_all(tmp_path / "old", tmp_path / "new")
    assert result["runs"]["m"]["largest"] == pytest.approx(2e-5)
    text = markdown(result, "o", "n")
    assert ("| m | 1 | 4 | 2 measurement values differ (`collapse/*`, `probe/*`, largest by 2.0e-05); training, "
            "validation and rollouts identical |") in text
    assert "| t | 1 | 4 | 2 differences |" in text and "| f | 1 | 4 | 2 differences |" in text
