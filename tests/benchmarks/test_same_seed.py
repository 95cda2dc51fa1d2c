"""benchmarks.same_seed: the comparison of two runs' metrics, on synthetic run folders."""

import json
from pathlib import Path

import pytest

from benchmarks.same_seed import compare_all, compare_run, markdown, overrides, verdict


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
    _run(tmp_path / "new" / "z", [{"step": 1}])  # a config the old commit did not have
    result = compare_all(tmp_path / "old", tmp_path / "new")
    assert result["missing_in_new"] == ["y"] and result["missing_in_old"] == ["z"]
    text = markdown(result, "o", "n")
    assert "| x | 1 | 2 | identical; new keys: `filter/nan_groups` |" in text and "No new run: y." in text
    assert "No old run (no such config at o): z." in text


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
    _run(tmp_path / "new" / "t", [{**base, "loss/policy": 0.6, "collapse/mi_est": 0.2}])  # training moved
    _run(tmp_path / "old" / "f", [base])
    _run(tmp_path / "new" / "f", [{**base, "collapse/mi_est": 0.2}], outcomes="b\n")  # and a file differs
    result = compare_all(tmp_path / "old", tmp_path / "new")
    assert result["runs"]["m"]["largest"] == pytest.approx(2e-5)
    text = markdown(result, "o", "n")
    assert ("| m | 1 | 4 | 2 measurement values differ (`collapse/*`, `probe/*`, largest by 2.0e-05); training, "
            "validation and rollouts identical |") in text
    assert "| t | 1 | 4 | 2 differences from step 1; identical: validation |" in text
    assert "| f | 1 | 4 | 2 differences from step 1; identical: no file |" in text


def test_a_shared_tiny_model_replaces_only_a_text_configs_built_in_tiny_model(tmp_path):
    folder = tmp_path / "model"
    cases = {"text": '[env]\nid = "ragen/Sokoban-v0"\n[model]\npath = "tiny"\n',
             "default": '[env]\nid = "ragen/Bandit-v0"\n',
             "vision": '[env]\nid = "ragen/Sokoban-Vision-v0"\n[model]\npath = "tiny"\n',
             "base": '[env]\nid = "ragen/SearchQA-v0"\n[model]\npath = "tiny-base"\n'}
    got = {}
    for name, text in cases.items():
        (tmp_path / f"{name}.toml").write_text(text)
        got[name] = overrides(tmp_path / f"{name}.toml", tmp_path, folder, ("model.fast_forward=false",))
    replaced = f'model.path="{folder}"'
    assert replaced in got["text"] and replaced in got["default"]
    assert not any(o.startswith("model.path") for o in got["vision"] + got["base"])
    assert all(o[-1] == "model.fast_forward=false" for o in got.values())


def test_the_warm_start_hash_reads_the_weights_not_the_file(tmp_path):
    torch = pytest.importorskip("torch")
    from benchmarks.same_seed import state_sha256

    w = {"b": torch.arange(6.0).reshape(2, 3), "a": torch.ones(4)}
    torch.save({"model": w, "metrics": {"x": 1.0}, "key": "k1"}, tmp_path / "one.pt")
    torch.save({"model": dict(reversed(list(w.items()))), "metrics": {"y": 2.0}}, tmp_path / "two.pt")
    assert state_sha256(tmp_path / "one.pt") == state_sha256(tmp_path / "two.pt")
    moved = {**w, "a": torch.tensor([1.0, 1.0, 1.0, float(torch.nextafter(torch.tensor(1.0), torch.tensor(2.0)))])}
    torch.save({"model": moved}, tmp_path / "three.pt")
    assert state_sha256(tmp_path / "three.pt") != state_sha256(tmp_path / "one.pt")
    old, new = tmp_path / "old" / "r", tmp_path / "new" / "r"
    _run(old, [{"step": 1}])
    _run(new, [{"step": 1}])
    (old / "warm_start.sha256").write_text(state_sha256(tmp_path / "one.pt"))
    (new / "warm_start.sha256").write_text(state_sha256(tmp_path / "three.pt"))
    assert compare_run(old, new)["differences"] == ["warm_start.sha256 differs"]


def test_float_rounding_and_what_the_new_commit_added_are_told_apart_from_a_change(tmp_path):
    """An old commit that wrote fewer files and keys, and an update whose numbers moved by rounding only, are not
    a changed run; a value past the rounding bound is, from its step on."""
    base = [{"step": 0, "val/success": 0.25}, {"step": 1, "loss/policy": 0.5, "loss/approx_kl": -3.5e-9}]
    old = _run(tmp_path / "old" / "r", base)
    (old / "warm_start.sha256").write_text("abc\n")
    new = _run(tmp_path / "new" / "r", [base[0], {"step": 1, "loss/policy": 0.5 + 4e-8, "loss/approx_kl": 0.0,
                                                   "filter/groups_total": 8}])
    (new / "warm_start.sha256").write_text("abc\n")
    (new / "rollouts.jsonl").write_text("{}\n")
    r = compare_run(old, new)
    assert r["rounding_only"] and r["new_files"] == ["rollouts.jsonl"]
    assert verdict(r) == ("2 values differ by float rounding (`loss/*`, largest by 4.0e-08); identical: validation, "
                          "warm start (+ 1 new key)")
    moved = _run(tmp_path / "moved" / "r", [{"step": 0, "val/success": 0.25}, {"step": 1, "loss/policy": 0.51,
                                                                            "loss/approx_kl": 0.0}])
    r = compare_run(old, moved)
    assert not r["rounding_only"] and r["first_step"] == 1
    assert verdict(r).startswith("3 differences from step 1; identical: validation")
    assert verdict(compare_run(old, old)) == "identical"
