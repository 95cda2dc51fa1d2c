"""Behaviour unchanged by a refactor: the same short run of every tiny config at two commits, metrics compared.

    python -m benchmarks.same_seed run CODE_DIR OUT_DIR      # one short run per config with the code in CODE_DIR
    python -m benchmarks.same_seed compare OLD_DIR NEW_DIR   # the two sets of runs, key by key

    # two commits that build different tiny models: give both sides one model folder, and the new side the old
    # forward, so that what is compared is the training code
    python -m benchmarks.same_seed run OLD_CODE OLD_OUT --tiny-model DIR
    python -m benchmarks.same_seed run NEW_CODE NEW_OUT --tiny-model DIR --set model.fast_forward=false

``run`` trains each of :data:`CONFIGS` for :data:`STEPS` RL steps on one seed with a shortened warm start (at most
:data:`WARM_EPISODES` demonstrations; configs without a warm start keep none), validating every 2 steps on 16
episodes and probing every step on 8 prompts where the config has a probe, one torch thread, in a process whose
working directory and import path are CODE_DIR (a checkout of the other commit: ``git worktree add DIR COMMIT``).
Each run has its own warm-start cache under OUT_DIR, so the warm start is recomputed by each commit's code.

``compare`` reads every run's ``metrics.jsonl`` and compares them row by row and key by key, exactly, except the
keys that are wall-clock times (``perf/*_s``); ``val_outcomes.jsonl`` and ``rollouts.jsonl`` must be equal byte for
byte. A key present in one commit only is reported as such. Writes ``benchmarks/results/same_seed.json``.

``--tiny-model DIR`` replaces ``model.path = "tiny"`` by the model folder DIR in every text config (a vision config
keeps its own tiny vision model): the tiny model is built from a corpus of the envs' text, and before the corpus was
pinned every commit that reworded an env built another one, so two commits compare equal only on one folder.
``--set KEY=VALUE`` (repeatable) adds an override to every run. ``run`` also records the SHA-256 of the weights
each run's warm start produced (``warm_start.sha256`` in the run folder, by tensor name, dtype, shape and bytes:
the same hash whatever code wrote the cache file), and ``compare`` compares them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

RESULTS = Path(__file__).resolve().parent / "results"
CONFIGS = ("bandit_tiny", "code_tiny", "collapse_frozenlake", "collapse_sokoban", "countdown_tiny", "frozenlake_tiny",
           "game2048_tiny", "math_tiny", "pocketcube_tiny", "searchqa_tiny", "sokoban_tiny", "sokoban_vision_tiny",
           "sudoku_tiny", "webshop_tiny")
STEPS = 3
WARM_EPISODES = 150
SEED = 5
COMPARED_FILES = ("val_outcomes.jsonl", "rollouts.jsonl")
WARM_HASH_FILE = "warm_start.sha256"


def overrides(config_file: Path, cache_dir: Path, tiny_model: Path | None = None,
              extra: tuple[str, ...] = ()) -> list[str]:
    """The short run's overrides of one config (its warm start capped, its probe shrunk if it has one; with
    `tiny_model`, a text config's built-in tiny model replaced by that folder), then `extra`."""
    data = tomllib.loads(config_file.read_text())
    out = [f"run.seed={SEED}", f"run.steps={STEPS}", f'warm_start.cache_dir="{cache_dir}"', "eval.every=2",
           "eval.episodes=16", "mi.every=1", "run.progress=false", "run.threads=1", "run.max_minutes=0",
           "run.save_every=0"]
    episodes = data.get("warm_start", {}).get("sft_episodes", 0)
    if episodes:
        out.append(f"warm_start.sft_episodes={min(episodes, WARM_EPISODES)}")
    if data.get("mi", {}).get("probe_prompts", 0):
        out += ["mi.probe_prompts=8", "mi.probe_every=1"]
    # The harness cannot ask an old commit's env whether it shows images; every image env's id says "Vision".
    text_env = "Vision" not in str(data.get("env", {}).get("id", ""))
    if tiny_model is not None and text_env and data.get("model", {}).get("path", "tiny") == "tiny":
        out.append(f'model.path="{tiny_model}"')
    return out + list(extra)


def state_sha256(path: Path) -> str:
    """SHA-256 of the ``"model"`` state dict in a warm-start cache file: every tensor by name (sorted), dtype,
    shape and bytes, so that two commits' files with equal weights hash equal whatever else they hold."""
    import torch

    state = torch.load(path, map_location="cpu", weights_only=True)["model"]
    h = hashlib.sha256()
    for name, t in sorted(state.items()):
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def run_all(code: Path, out: Path, configs: tuple[str, ...] = CONFIGS, tiny_model: Path | None = None,
            extra: tuple[str, ...] = ()) -> dict[str, int]:
    """Train every config with the code of `code` into `out`/NAME; the exit status per config. Each config's
    warm start goes to a cache of its own (`out`/wscache/NAME), whose weights are hashed into its run folder."""
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(code), "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    status = {}
    for name in configs:
        cfg = code / "configs" / f"{name}.toml"
        if not cfg.is_file():  # a config newer than that commit: nothing to run, compare reports it missing
            print(f"{name}: no config at this commit", flush=True)
            continue
        cache = out / "wscache" / name
        cmd = [sys.executable, "-m", "ragen_core.apps.train", str(cfg), *overrides(cfg, cache, tiny_model, extra),
               "--run-dir", str(out / name)]
        with open(out / f"{name}.log", "w", encoding="utf-8") as log:
            status[name] = subprocess.run(cmd, cwd=code, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
        weights = sorted(cache.glob("*.pt")) if cache.is_dir() else []
        if status[name] == 0 and len(weights) == 1:
            (out / name / WARM_HASH_FILE).write_text(state_sha256(weights[0]) + "\n")
        print(f"{name}: exit {status[name]}", flush=True)
    return status


def _is_time(key: str) -> bool:
    return key.startswith("perf/") and key.endswith("_s")


def _rows(path: Path) -> list[dict[str, Any]]:
    return [{k: v for k, v in json.loads(line).items() if not _is_time(k)}
            for line in path.read_text().splitlines() if line.strip()]


#: Two values differ by float rounding when |a - b| <= ROUNDING * max(1, |a|, |b|).
ROUNDING = 1e-6


def compare_run(old: Path, new: Path) -> dict[str, Any]:
    """One config's two runs: rows, keys, and every difference (a list of strings; empty = identical). A key or a
    compared file that only the new run has (a metric or a file added since) is listed apart, not as a difference."""
    a, b = _rows(old / "metrics.jsonl"), _rows(new / "metrics.jsonl")
    diffs = [] if len(a) == len(b) else [f"rows: {len(a)} vs {len(b)}"]
    only_old, only_new = set(), set()
    value_diffs = []  # (row, key, |a - b|, within rounding)
    other_rows = []  # rows with a difference that is not a number's
    for i, (x, y) in enumerate(zip(a, b)):
        for k in sorted(set(x) | set(y)):
            if k not in y:
                only_old.add(k)
            elif k not in x:
                only_new.add(k)
            elif x[k] != y[k]:
                diffs.append(f"row {i} (step {x.get('step')}): {k} {x[k]!r} vs {y[k]!r}")
                numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (x[k], y[k]))
                if numbers:
                    d = abs(x[k] - y[k])
                    value_diffs.append((i, k, d, d <= ROUNDING * max(1.0, abs(x[k]), abs(y[k]))))
                else:
                    other_rows.append(i)
    diffs += [f"only in the old run: {k}" for k in sorted(only_old)]
    diffs += [f"only in the new run: {k}" for k in sorted(only_new)]
    new_files, same_files = [], []
    for f in (*COMPARED_FILES, WARM_HASH_FILE):
        if (old / f).exists() != (new / f).exists():
            diffs.append(f"{f} in one run only")
            if (new / f).exists():
                new_files.append(f)
        elif (old / f).exists():
            if (old / f).read_bytes() != (new / f).read_bytes():
                diffs.append(f"{f} differs")
            else:
                same_files.append(f)
    spaces = sorted({k.split("/")[0] for _, k, _, _ in value_diffs})
    beyond = [i for i, _, _, ok in value_diffs if not ok] + other_rows
    return {"rows": len(a), "keys": len({k for r in a for k in r}), "differences": diffs,
            "only_new": sorted(only_new), "only_old": sorted(only_old), "new_files": new_files,
            "same_files": same_files, "namespaces": spaces,
            "largest": max((d for _, _, d, _ in value_diffs), default=None),
            "rounding_only": bool(value_diffs) and not beyond,
            "first_step": a[min(beyond)].get("step") if beyond else None}


#: The namespaces of metrics.jsonl that only measure (their code draws no random number the run reads and no update
#: reads them): a difference there leaves the run's training as it was.
MEASUREMENT_SPACES = ("collapse", "probe")


def _file_names(files: list[str]) -> str:
    names = {"val_outcomes.jsonl": "validation", "rollouts.jsonl": "rollouts", WARM_HASH_FILE: "warm start"}
    return ", ".join(names.get(f, f) for f in files)


def verdict(r: dict[str, Any]) -> str:
    """One config's result in words: identical, identical but for what the new commit added, measurements only,
    float rounding only, or from which step the runs differ."""
    added = [f"`{k}`" for k in r["only_new"]]
    new_files = r.get("new_files", [])
    real = [d for d in r["differences"] if not d.startswith("only in the new run: ")
            and not any(d == f"{f} in one run only" for f in new_files)]
    listed = ", ".join(added) if len(added) <= 3 else f"{len(added)} ({', '.join(added[:2])}, ...)"
    extra = (f"; new keys: {listed}" if added else "") + \
        (f"; new files: {', '.join(new_files)}" if new_files else "")
    if not real:
        return "identical" + extra
    spaces = r.get("namespaces") or []
    numeric = sum(1 for d in real if d.startswith("row ") and " vs " in d)
    same = _file_names(r.get("same_files", [])) or "no file"
    tail = f" (+ {len(added)} new key{'s' if len(added) != 1 else ''})" if added else ""
    if spaces and numeric == len(real) and set(spaces) <= set(MEASUREMENT_SPACES):
        files = "validation and rollouts" if not new_files else same
        return (f"{numeric} measurement values differ (" + ", ".join(f"`{s}/*`" for s in spaces)
                + f", largest by {r['largest']:.1e}); training, {files} identical{tail}")
    if numeric == len(real) and r.get("rounding_only"):
        return (f"{numeric} values differ by float rounding (" + ", ".join(f"`{s}/*`" for s in spaces)
                + f", largest by {r['largest']:.1e}); identical: {same}{tail}")
    return f"{len(real)} differences from step {r.get('first_step')}; identical: {same}{tail}"


def compare_all(old: Path, new: Path) -> dict[str, Any]:
    names = sorted(p.name for p in old.iterdir() if (p / "metrics.jsonl").is_file())
    missing = [n for n in names if not (new / n / "metrics.jsonl").is_file()]
    runs = {n: compare_run(old / n, new / n) for n in names if n not in missing}
    only_new = sorted(p.name for p in new.iterdir() if (p / "metrics.jsonl").is_file() and p.name not in names)
    return {"runs": runs, "missing_in_new": missing, "missing_in_old": only_new}


def markdown(result: dict[str, Any], old_label: str, new_label: str) -> str:
    lines = [f"Same seed ({SEED}), {STEPS} RL steps, warm start of at most {WARM_EPISODES} demonstrations, per config: "
             f"{old_label} against {new_label}, every key of metrics.jsonl except wall-clock times, "
             f"{', '.join(COMPARED_FILES)} byte for byte, and the warm start's weights by hash where recorded.", "",
             "| config | rows | keys compared | result |", "|---|---:|---:|---|"]
    for name, r in result["runs"].items():
        lines.append(f"| {name} | {r['rows']} | {r['keys']} | {verdict(r)} |")
    if result["missing_in_new"]:
        lines.append(f"\nNo new run: {', '.join(result['missing_in_new'])}.")
    if result.get("missing_in_old"):
        lines.append(f"\nNo old run (no such config at {old_label}): {', '.join(result['missing_in_old'])}.")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="one short run per config with the code of CODE_DIR")
    r.add_argument("code", type=Path)
    r.add_argument("out", type=Path)
    r.add_argument("--configs", default=",".join(CONFIGS))
    r.add_argument("--tiny-model", type=Path, default=None,
                   help="the model folder every text config's built-in tiny model is replaced by")
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="an override added to every run (repeatable)")
    c = sub.add_parser("compare", help="compare two sets of runs")
    c.add_argument("old", type=Path)
    c.add_argument("new", type=Path)
    c.add_argument("--old-label", default="old")
    c.add_argument("--new-label", default="new")
    c.add_argument("--result", default="same_seed", metavar="NAME",
                   help="write benchmarks/results/NAME.json (default same_seed: the refactor check of "
                        "docs/architecture.md)")
    c.add_argument("--about", default="", help="a sentence set before the table")
    args = parser.parse_args(argv)
    if args.cmd == "run":
        status = run_all(args.code.resolve(), args.out.resolve(), tuple(n for n in args.configs.split(",") if n),
                         args.tiny_model.resolve() if args.tiny_model else None, tuple(args.set))
        return int(any(status.values()))
    from benchmarks.machine import describe_machine
    from benchmarks.readme_tables import write_result

    result = compare_all(args.old, args.new)
    result.update(benchmark="same_seed", old=args.old_label, new=args.new_label, machine=describe_machine())
    result["markdown"] = (args.about.strip() + "\n\n" if args.about.strip() else "") + \
        markdown(result, args.old_label, args.new_label)
    write_result(result, RESULTS / f"{args.result}.json")
    changed = [n for n, x in result["runs"].items() if len(x["differences"]) != len(x["only_new"])]
    return int(bool(changed or result["missing_in_new"]))


if __name__ == "__main__":
    raise SystemExit(main())
