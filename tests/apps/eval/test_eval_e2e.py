"""`ragen eval` end to end with a real server: a tiny Sokoban policy trained for one step (`ragen train`), exported
(`ragen export`) and served by `transformers serve` on 127.0.0.1 (the `serve` extra), no mock anywhere.

- in process, `ragen eval RUN_DIR --seed <val_seed> --episodes <eval.episodes> --temperature 0` reproduces the
  run's own logged validation episode by episode, and its episodes.jsonl is valid input for `ragen diagnose`;
- through the server, greedy, the same seeds give the same success, the same actions and the same prompts episode
  by episode (the response texts equal up to the whitespace the server strips around the reasoning it splits off);
- a server stopped mid-run gives one line and exit status 1; after a restart `--resume` completes with every episode
  exactly once, and the same outcomes;
- `--group-size G` adds the reward-variance pre-check and the MI proxies; a text model refuses a vision id; the tiny
  vision model plays one.

Why these settings agree: the run's config plays single-turn context (each prompt is rendered from the env's text,
never from earlier responses), so both paths send the chat template the same text; see docs/eval.md for where "full"
context may differ.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from ragen_core.apps.cli import main as ragen
from ragen_core.apps.eval import main as ragen_eval
from ragen_core.apps.eval.summary import wilson_interval

# One worker plays them all under `make test` (-n 2 --dist loadgroup): the run and the server are made once.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("eval_e2e")]

RUN_ARGS = ["sokoban_tiny", "run.steps=1", "warm_start.sft_episodes=600", "warm_start.epochs=1", "eval.every=1",
            "eval.episodes=24", "mi.every=0", "run.progress=false", "rollout.groups=2", "rollout.group_size=2",
            "algo.mini_batch_size=4", "algo.micro_batch_size=4"]


def _lines(folder: Path) -> dict[tuple, dict]:
    rows = [json.loads(x) for x in (folder / "episodes.jsonl").read_text().splitlines() if x.strip()]
    return {(r["env"], r["seed"], r["sample"]): r for r in rows}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Served:
    """`transformers serve MODEL` on 127.0.0.1 in its own process group (started and stopped by the tests)."""

    def __init__(self, model: Path, log: Path):
        self.model, self.log, self.port = model, log, _free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
        with open(self.log, "a") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "transformers.cli.transformers", "serve", str(self.model), "--host",
                 "127.0.0.1", "--port", str(self.port), "--device", "cpu", "--log-level", "warning"],
                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"transformers serve exited: {self.log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
        raise RuntimeError(f"transformers serve did not start: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)  # its own process group: the server and nothing else
            self.proc.wait()
        self.proc = None


@pytest.fixture(scope="session")
def trained(tmp_path_factory):
    """A one-step Sokoban run (24 validation episodes) and its `ragen export`."""
    root = tmp_path_factory.mktemp("eval_e2e")
    run = root / "run"
    assert ragen(["train", *RUN_ARGS, "--run-dir", str(run)]) == 0
    assert ragen(["export", str(run), "--out", str(root / "model")]) == 0
    return run, root / "model"


@pytest.fixture(scope="session")
def served(trained):
    server = Served(trained[1], trained[0].parent / "serve.log")
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def in_process(trained, tmp_path_factory):
    """`ragen eval RUN_DIR` on the run's validation seeds, greedy (what its validation does)."""
    run = trained[0]
    out = tmp_path_factory.mktemp("eval_local") / "out"
    assert ragen_eval([str(run), "--seed", "123", "--episodes", "24", "--temperature", "0", "--out", str(out),
                       "--no-progress"]) == 0
    return out


def test_in_process_eval_of_a_run_reproduces_its_logged_validation(trained, in_process, capsys):
    run, _ = trained
    validation = json.loads((run / "val_outcomes.jsonl").read_text().splitlines()[-1])
    lines = _lines(in_process)
    assert [int(lines[("ragen/Sokoban-v0", s, 0)]["success"]) for s in validation["seeds"]] == validation["success"]
    assert 0 < sum(validation["success"]) < len(validation["success"])  # a mixed outcome: equality means something
    env = json.loads((in_process / "summary.json").read_text())["envs"]["ragen/Sokoban-v0"]
    k = sum(validation["success"])
    assert env["episodes"] == 24 and env["success"] == pytest.approx(k / 24)
    assert env["success_ci95"] == pytest.approx(list(wilson_interval(k, 24)))
    assert env["mi"]["scorer_is_sampler"].startswith("yes") and env["mi"]["n_prompts"] == 24
    assert (in_process / "summary.png").stat().st_size > 0 and "| ragen/Sokoban-v0 | 24 |" in \
        (in_process / "summary.md").read_text()
    capsys.readouterr()
    assert ragen(["diagnose", str(in_process / "episodes.jsonl"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rv"]["n_rollouts"] == 24


def _norm(text: str) -> str:
    """A response without the whitespace around its tags and at its ends (what a server that splits off the reasoning
    strips)."""
    return re.sub(r"\s*(</?(?:think|answer)>)\s*", r"\1", text).strip()


def test_a_served_model_plays_each_episode_as_the_in_process_one(trained, served, in_process):
    run, model = trained
    out = run.parent / "served"
    assert ragen_eval(["--base-url", served.url, "--model-name", str(model), "--config", str(run), "--seed", "123",
                       "--episodes", "24", "--temperature", "0", "--workers", "4", "--out", str(out),
                       "--no-progress"]) == 0
    local, remote = _lines(in_process), _lines(out)
    assert local.keys() == remote.keys()
    for key in local:
        a, b = local[key], remote[key]
        assert a["success"] == b["success"] and a["reward"] == pytest.approx(b["reward"]), key
        assert [t["info"]["actions_executed"] for t in a["turns"]] == [t["info"]["actions_executed"]
                                                                       for t in b["turns"]], key
        assert [m for m in a["messages"] if m["role"] != "assistant"] == \
            [m for m in b["messages"] if m["role"] != "assistant"], key  # the same prompts, turn by turn
        assert [_norm(t["response"]) for t in a["turns"]] == [_norm(t["response"]) for t in b["turns"]], key
        assert b["tokens"]["completion"] == a["tokens"]["completion"], key  # the server's usage, the same tokens
    summary = json.loads((out / "summary.json").read_text())["envs"]["ragen/Sokoban-v0"]
    assert summary["success"] == json.loads((in_process / "summary.json").read_text())["envs"][
        "ragen/Sokoban-v0"]["success"]


def test_a_served_model_samples_at_temperature_one(trained, served):
    run, model = trained
    out = run.parent / "sampled"
    assert ragen_eval(["--base-url", served.url, "--model-name", str(model), "--config", str(run), "--episodes", "4",
                       "--group-size", "4", "--workers", "8", "--out", str(out), "--no-progress"]) == 0
    groups: dict[int, set[str]] = {}
    for (_, seed, _), r in _lines(out).items():
        groups.setdefault(seed, set()).add(r["response"])
    assert any(len(responses) > 1 for responses in groups.values())  # sampled, not the greedy answer 4 times
    rv = json.loads((out / "summary.json").read_text())["envs"]["ragen/Sokoban-v0"]["rv"]
    assert rv["groups"] == 4 and "mi" not in json.loads((out / "summary.json").read_text())["envs"]["ragen/Sokoban-v0"]


def test_a_server_stopped_mid_run_is_one_line_and_resume_completes_every_episode_once(trained, served, in_process):
    run, model = trained
    out = run.parent / "stopped"
    proc = subprocess.Popen([sys.executable, "-m", "ragen_core.apps.eval", "--base-url", served.url, "--model-name",
                             str(model), "--config", str(run), "--seed", "123", "--episodes", "24", "--temperature",
                             "0", "--workers", "2", "--max-retries", "1", "--out", str(out)],
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not (out / "episodes.jsonl").exists() or len(_lines(out)) < 3):
        time.sleep(0.1)
    served.stop()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    errors = [x for x in err.splitlines() if x.startswith("ragen eval:")]
    assert len(errors) == 1 and "Traceback" not in err, err
    kept = len(_lines(out))
    assert 3 <= kept < 24 and f"cannot reach the server at {served.url}" in errors[0]
    assert f"{kept} of 24 episodes are in {out}" in errors[0] and f"ragen eval --resume {out}" in errors[0]
    served.start()
    assert ragen_eval(["--resume", str(out), "--no-progress"]) == 0
    rows = [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]
    keys = [(r["env"], r["seed"], r["sample"]) for r in rows]
    assert len(keys) == len(set(keys)) == 24
    local = _lines(in_process)
    assert {k: r["success"] for k, r in zip(keys, rows)} == {k: r["success"] for k, r in local.items()}


def test_groups_add_the_precheck_and_a_text_model_refuses_vision_ids(trained, capsys):
    run, _ = trained
    out = run.parent / "groups"
    assert ragen_eval([str(run), "--envs", "ragen/Sokoban-v0,ragen/Sokoban-Vision-v0", "--episodes", "6",
                       "--group-size", "4", "--out", str(out), "--no-progress"]) == 0
    envs = json.loads((out / "summary.json").read_text())["envs"]
    assert "takes no images" in envs["ragen/Sokoban-Vision-v0"]["refused"]
    rv, lines = envs["ragen/Sokoban-v0"]["rv"], _lines(out)
    assert len(lines) == 24 and {k[2] for k in lines} == {0, 1, 2, 3}
    by_seed: dict[int, list[float]] = {}
    for (_, seed, _), r in lines.items():
        by_seed.setdefault(seed, []).append(r["reward"])
    import numpy as np

    assert rv["groups"] == 6 and rv["groups_with_variance"] == sum(np.var(v, ddof=1) > 1e-10 for v in by_seed.values())
    mi = envs["ragen/Sokoban-v0"]["mi"]
    assert mi["group_size"] == 4
    # 6 prompts: 720 relabellings; the summary keeps the permutation test's outcome beside the regime
    assert 1 / 720 <= mi["mi_seq_p_value"] <= 1 and isinstance(mi["regime_resolved"], bool)
    table = (out / "summary.md").read_text()
    assert ("(unresolved:" in table) == (not mi["regime_resolved"])
    capsys.readouterr()
    assert ragen(["diagnose", str(out / "episodes.jsonl"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["rv"]
    assert report["n_groups"] == 6 and report["rv_mean"] == pytest.approx(rv["rv_mean"], nan_ok=True)


def test_the_tiny_vision_model_plays_a_vision_id_in_process(tmp_path):
    out = tmp_path / "vision"
    assert ragen_eval(["tiny", "--envs", "ragen/Sokoban-Vision-v0", "--episodes", "2", "--max-tokens", "8",
                       "--mi-groups", "0", "--out", str(out), "--no-progress"]) == 0
    lines = _lines(out)
    assert len(lines) == 2 and all("<image>" in r["messages"][1]["content"] for r in lines.values())
    assert json.loads((out / "summary.json").read_text())["envs"]["ragen/Sokoban-Vision-v0"]["episodes"] == 2
