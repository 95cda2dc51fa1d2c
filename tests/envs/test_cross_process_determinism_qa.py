"""A seed replays the same episodes in another process, whatever that process's hashing, folder or history.

A researcher who reruns a seed on another day gets a new process: another ``PYTHONHASHSEED`` (Python randomises
``str`` hashing per process unless it is set), another working directory, perhaps ``OMP_NUM_THREADS`` unset, a
fresh PocketCube table cache, and other envs built before. The levels, the episodes, the rewards, the infos and
the rendered frames must be the same byte for byte.

Two real subprocesses play every registered id, with its default kwargs and with the kwargs of each
``configs/*_tiny.toml``, from a few seeds: the oracle's turns (fixed texts where an env has no oracle) and a
fixed sequence of answers, good and bad; one episode as a chat through ``ragen_core.episode.ChatEpisode``;
and the ``rgb_array`` frame where the env draws one. The second process runs the cases and the seeds in reverse
order, and steps a second instance of the same env between every two steps of the first (shared caches and
module-level state must not leak between instances).

The Code env's per-test timings and sandbox run ids (a measurement and a fresh random name per run, documented
in ``CodeEnv``'s info) are the only fields left out of the comparison; its submissions get a wide wall-clock
budget (``submission_wall_seconds``), so that a loaded machine cannot skip a test in one process only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

_SCRIPT = textwrap.dedent(
    r"""
    import hashlib, json, os, re, sys
    import numpy as np
    import gymnasium as gym

    import ragen_envs
    from ragen_core.episode import ChatEpisode

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib

    repo, order, interleave = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
    SEEDS = (0, 3)
    MAX_STEPS = 4
    FIXED = ["<think>hm</think><answer>Up</answer>", "no tags at all", "<answer>1</answer>",
             "<think>x</think><answer>search[red]</answer>"]
    VOLATILE = {"wall_time", "submission_wall_time", "run_id"}
    RUN_ID = re.compile(r"ragen-sbx-[0-9a-f]{16}")

    def canon(x):
        if isinstance(x, np.ndarray):
            data = np.ascontiguousarray(x)
            return {"ndarray": str(x.dtype), "shape": list(x.shape),
                    "sha256": hashlib.sha256(data.tobytes()).hexdigest()}
        if isinstance(x, (bool, np.bool_)):
            return bool(x)
        if isinstance(x, (int, np.integer)):
            return int(x)
        if isinstance(x, (float, np.floating)):
            return repr(float(x))
        if isinstance(x, str):
            return RUN_ID.sub("ragen-sbx-<run>", x)
        if isinstance(x, dict):  # the key order is part of the record (a dict built from a set would show it)
            return [[str(k), canon(v)] for k, v in x.items() if k not in VOLATILE]
        if isinstance(x, (list, tuple)):
            return [canon(v) for v in x]
        if isinstance(x, (set, frozenset)):
            return {"set": sorted(repr(v) for v in x)}
        if x is None:
            return None
        return repr(x)

    def response(env, t, mode):
        if mode == "fixed":
            return FIXED[t % len(FIXED)]
        try:
            text, acts = env.unwrapped.oracle_step()
        except (NotImplementedError, ValueError):
            return FIXED[t % len(FIXED)]
        return f"<think> {text} </think> <answer> {' || '.join(acts)} </answer>"

    OTHER = None

    def episode(env, seed, mode):
        obs, info = env.reset(seed=seed)
        rec = [["reset", canon(obs), canon(info), canon(env.render())]]
        for t in range(MAX_STEPS):
            text = response(env, t, mode)
            obs, r, term, trunc, info = env.step(text)
            rec.append([text, canon(obs), repr(float(r)), bool(term), bool(trunc), canon(info), canon(env.render())])
            if OTHER is not None:  # another instance of the same id, stepped in between
                try:
                    OTHER.step(FIXED[(t + 1) % len(FIXED)])
                except Exception:
                    OTHER.reset(seed=seed + 500)
            if term or trunc:
                break
        return rec

    def chat(env, seed):
        ep = ChatEpisode(env, length_limit=64, max_turns=3)
        rec = [canon(ep.reset(seed).messages())]
        t = 0
        while not ep.done:
            step = ep.step(response(env, t, "oracle"))
            rec.append([repr(step.reward), canon(step.info), step.user])
            t += 1
        return rec

    cases = [(env_id, "default", {}) for env_id in ragen_envs.env_ids()]
    for path in sorted((os.path.join(repo, "configs", f) for f in os.listdir(os.path.join(repo, "configs")))):
        if path.endswith("_tiny.toml"):
            with open(path, "rb") as f:
                spec = tomllib.load(f)["env"]
            cases.append((spec["id"], os.path.basename(path), spec.get("kwargs", {})))
    if order == "rev":
        cases = cases[::-1]
    # Code judges within a wall-clock budget per submission (4 s by default): on a loaded machine a test can be
    # skipped for want of it. A wider budget changes no task, only keeps the load out of the verdicts compared.
    cases = [(i, label, {**kw, "submission_wall_seconds": 60.0} if i == "ragen/Code-v0" else kw)
             for i, label, kw in cases]

    out = {"hash_randomization": sys.flags.hash_randomization, "hash": hash("ragen"), "cases": {}}
    for env_id, label, kwargs in cases:
        env = gym.make(env_id, render_mode="ansi", **kwargs)
        OTHER = None
        if interleave:
            OTHER = gym.make(env_id, **kwargs)
            OTHER.reset(seed=99)
        recs = {}
        for seed in (SEEDS[::-1] if order == "rev" else SEEDS):
            for mode in ("oracle", "fixed"):
                recs[f"seed {seed} {mode}"] = episode(env, seed, mode)
        OTHER = None
        recs["chat seed 1"] = chat(gym.make(env_id, **kwargs), 1)
        if "rgb_array" in env.unwrapped.metadata.get("render_modes", []):
            frame_env = gym.make(env_id, render_mode="rgb_array", **kwargs)
            frame_env.reset(seed=2)
            recs["rgb_array seed 2"] = canon(frame_env.render())
        out["cases"][f"{env_id} [{label}]"] = {
            k: {"sha256": hashlib.sha256(json.dumps(v).encode()).hexdigest(), "record": v} for k, v in recs.items()
        }
    json.dump(out, sys.stdout)
    """
)


def _first_difference(a, b, path="") -> str:
    if type(a) is not type(b):
        return f"{path}: {a!r:.300} != {b!r:.300}"
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} entries != {len(b)} entries"
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return _first_difference(x, y, f"{path}[{i}]")
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                return _first_difference(a.get(k), b.get(k), f"{path}/{k}")
    return f"{path}: {a!r:.300} != {b!r:.300}"


def _start(tmp_path: Path, name: str, hash_seed: str, order: str, interleave: bool, **env_changes: str | None):
    cwd = tmp_path / name / "deeper" if order == "rev" else tmp_path / name
    cwd.mkdir(parents=True)
    env = dict(os.environ)
    env["PYTHONHASHSEED"] = hash_seed
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    for key, value in env_changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return subprocess.Popen(
        [sys.executable, "-c", _SCRIPT, str(REPO), order, "1" if interleave else "0"],
        cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def _result(proc: subprocess.Popen) -> dict:
    try:
        out, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"the replay process did not finish in 300 s; stderr: {err[-2000:]}")
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out)


def test_every_env_replays_a_seed_byte_for_byte_in_another_process(tmp_path):
    procs = [
        _start(tmp_path, "first", "0", "fwd", False, OMP_NUM_THREADS="1"),
        _start(tmp_path, "second", "12345", "rev", True, OMP_NUM_THREADS=None, TZ="Asia/Tokyo",
               RAGEN2_CACHE=str(tmp_path / "fresh-cache")),
    ]
    first, second = (_result(p) for p in procs)

    # The two processes really hashed str differently (PYTHONHASHSEED=0 switches randomisation off, 12345 fixes
    # another seed).
    assert (first["hash_randomization"], second["hash_randomization"]) == (0, 1)
    assert first["hash"] != second["hash"]

    import ragen_envs

    covered = {key.split(" [")[0] for key in first["cases"]}
    assert covered == set(ragen_envs.env_ids())
    assert any("_tiny.toml" in key for key in first["cases"])
    assert set(first["cases"]) == set(second["cases"])

    differences = []
    for case, runs in first["cases"].items():
        other = second["cases"][case]
        assert set(runs) == set(other), case
        for run, got in runs.items():
            if got["sha256"] != other[run]["sha256"]:
                differences.append(f"{case} {run}: {_first_difference(got['record'], other[run]['record'])}")
    assert not differences, "episodes differ between processes:\n" + "\n".join(differences[:20])
