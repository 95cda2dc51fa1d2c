"""What a run folder gives a user: the first lines of `ragen train`, a damaged checkpoint in one line, the rollouts
file that `ragen diagnose` reads, and `ragen export` to a transformers folder."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ragen_core.apps.diagnose import main as diagnose
from ragen_core.apps.export import main as export
from ragen_core.apps.train import main as train
from ragen_core.training.report import markdown_to_text


@pytest.fixture(scope="module")
def model_dir(make_tiny_model):
    return make_tiny_model("Bandit arm teacher engineer gambler Choose one arm <answer> </answer>")


def _base(folder: Path) -> str:
    path = folder / "base.toml"
    path.write_text("[run]\nseed = 3\n")
    return str(path)


@pytest.fixture(scope="module")
def run_dir(model_dir, tmp_path_factory):
    run = tmp_path_factory.mktemp("runs") / "run"
    args = [_base(run.parent), f"model.path={model_dir}", "env.id=ragen/Bandit-v0", "rollout.groups=3",
            "rollout.group_size=2", "rollout.max_turns=1", "rollout.max_new_tokens=8", "rollout.system_prompt=false",
            "run.steps=3",
            "run.device=cpu", "run.progress=false", "algo.name=grpo", "algo.lr=1e-3", "algo.mini_batch_size=6",
            "algo.micro_batch_size=6", "eval.episodes=2", "eval.every=2", "mi.every=0",
            "warm_start.sft_episodes=4", "warm_start.epochs=1", "warm_start.batch_size=4", "--run-dir", str(run)]
    assert train(args) == 0
    return run


def test_train_says_where_and_what_as_it_goes(model_dir, tmp_path, capsys):
    run = tmp_path / "run"
    args = [_base(tmp_path), f"model.path={model_dir}", "env.id=ragen/Bandit-v0", "rollout.groups=2",
            "rollout.group_size=2", "rollout.max_turns=1", "rollout.max_new_tokens=8", "run.steps=2",
            "run.device=cpu", "run.progress=false",
            "algo.name=grpo", "eval.episodes=2", "eval.every=1", "mi.every=0", "warm_start.sft_episodes=0",
            "--run-dir", str(run)]
    assert train(args) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"run folder: {run}"
    assert any(line.startswith("step 0: validation success") and "held-out" in line for line in err)
    assert any(line.startswith("step 2: validation success") for line in err)
    assert train(["--resume", str(run), "run.steps=3"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"run folder: {run}" and "resuming at step 2 of 3 (the last checkpoint)" in err


def test_the_summary_lists_every_file_the_run_folder_holds(run_dir):
    """summary.md's "Files:" line names what a user finds in the folder (it had left out val_outcomes.jsonl,
    rollouts.jsonl, provenance.json and itself)."""
    line = next(x for x in (run_dir / "summary.md").read_text().splitlines() if x.startswith("Files: "))
    listed = set(line[len("Files: "):].rstrip(".").replace("`", "").split(", "))
    on_disk = {p.name for p in run_dir.iterdir() if p.is_file()}
    assert on_disk <= listed and {"summary.md", "checkpoints/latest.pt", "rollouts.jsonl", "val_outcomes.jsonl",
                                  "provenance.json", "metrics.jsonl", "config.toml"} <= listed
    assert listed - on_disk == {"checkpoints/latest.pt"} and (run_dir / "checkpoints" / "latest.pt").is_file()


@pytest.mark.parametrize("damage", ["truncated", "random bytes", "empty"])
def test_a_damaged_checkpoint_is_one_line_and_left_alone(run_dir, tmp_path, capsys, damage):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    latest = copy / "checkpoints" / "latest.pt"
    data = latest.read_bytes()
    bad = {"truncated": data[: len(data) // 3], "random bytes": os.urandom(5000), "empty": b""}[damage]
    latest.write_bytes(bad)
    capsys.readouterr()
    assert train(["--resume", str(copy)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("cannot resume:") and "damaged or incomplete" in err[-1], err
    assert not any("Traceback" in line for line in err) and len(err) <= 3, err
    assert latest.read_bytes() == bad  # nothing overwritten
    assert export([str(copy)]) == 2


def test_the_rollouts_file_is_diagnosable_with_the_runs_own_model(run_dir, capsys):
    rows = [json.loads(x) for x in (run_dir / "rollouts.jsonl").read_text().splitlines()]
    steps = sorted({r["step"] for r in rows if not r.get("final")})
    assert steps == [2, 3]  # the last run.rollouts_steps (2) training steps
    final = [r for r in rows if r.get("final")]
    assert len(final) == 6 and len({r["model"] for r in final}) == 1
    for r in rows:
        assert set(r) >= {"group", "reward", "prompt", "response", "model", "step"}
        assert r["prompt"].startswith("<|im_start|>")  # the prompt with its chat template
    capsys.readouterr()
    assert diagnose([str(run_dir), "--model", str(run_dir), "--json"]) == 0
    mi = json.loads(capsys.readouterr().out)["mi"]
    assert mi["scorer_is_sampler"].startswith("yes") and not mi["regime"].startswith("withheld")
    # the groups scored are those the final weights sampled (all of them if no update changed the weights)
    final_sha = final[0]["model"]
    own = {r["group"] for r in rows if r["model"] == final_sha}
    assert mi["n_prompts"] == len(own) >= 3
    if len(own) < len({r["group"] for r in rows}):
        assert any("this model sampled" in n for n in mi["notes"])
    assert (run_dir / "model" / "ragen_export.json").is_file()


def test_export_writes_a_transformers_folder_with_the_runs_weights(run_dir, tmp_path):
    import torch
    import transformers

    from ragen_core.policy.identity import weights_sha256

    out = tmp_path / "exported"
    assert export([str(run_dir), "--out", str(out)]) == 0
    model = transformers.AutoModelForCausalLM.from_pretrained(out)
    state = torch.load(run_dir / "checkpoints" / "latest.pt", map_location="cpu", weights_only=False)["model"]
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, state[name]), name
    assert json.loads((out / "ragen_export.json").read_text())["weights_sha256"] == weights_sha256(model)
    transformers.AutoTokenizer.from_pretrained(out)
    assert export([str(tmp_path)]) == 2  # not a run folder


def test_exported_model_is_written_once_and_again_when_the_run_trained_on(run_dir, tmp_path):
    import shutil

    import torch

    from ragen_core.apps.export import export_is_stale, exported_model

    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    shutil.rmtree(copy / "model", ignore_errors=True)
    assert export_is_stale(copy, copy / "model")  # missing
    out = exported_model(copy)
    assert out == copy / "model" and not export_is_stale(copy, out)
    written = (out / "ragen_export.json").stat().st_mtime_ns
    assert exported_model(copy) == out and (out / "ragen_export.json").stat().st_mtime_ns == written  # fresh: kept
    latest = copy / "checkpoints" / "latest.pt"
    state = torch.load(latest, map_location="cpu", weights_only=False)
    state["step"] = int(state.get("step", 0)) + 1  # the run trained on after the export
    torch.save(state, latest)
    assert export_is_stale(copy, out)
    exported_model(copy)
    assert json.loads((out / "ragen_export.json").read_text())["step"] == state["step"]


@pytest.mark.parametrize(("text", "stop", "expected"), [
    ("think</think><answer>Up</answer> more", ["</answer>"], "think</think><answer>Up</answer>"),
    ("a</answer>b</think>c", ["</think>", "</answer>"], "a</answer>"),  # the earliest-ending one wins
    ("ab", ["ab", "b"], "ab"),  # both end at the same place
    ("no stop here", ["</answer>"], "no stop here"),
    ("", ["x"], ""),
])
def test_cut_at_stop_by_hand(text, stop, expected):
    from ragen_core.policy.hf import cut_at_stop

    assert cut_at_stop(text, stop) == expected


def test_summary_in_the_terminal_is_plain_text():
    text = markdown_to_text("# Run `x`\n\n| metric | start | end |\n|---|---|---|\n| H(Z\\|X) estimate | 0.1 | 0.2 |\n"
                            "\n**Collapse check**: no.")
    assert text.splitlines()[0] == "Run x"
    assert "H(Z|X) estimate  0.1    0.2" in text and "|" not in text.replace("H(Z|X)", "") and "**" not in text


def test_a_misspelt_env_kwarg_names_the_closest(tmp_path, capsys):
    assert train([_base(tmp_path), "env.id=ragen/Sokoban-v0", "env.kwargs.dim_rom=[5, 5]", "--run-dir",
                  str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'dim_room'?" in err and not (tmp_path / "run").exists()
