"""Environment speed, side by side with gym-sokoban 0.0.6, on one CPU core.

    python -m benchmarks.bench_envs [--quick] [--no-peer]

Measures (each a time-boxed loop; rates are items per wall-clock second on one pinned core):

- Sokoban generation, rooms/s at 6x6/1, 8x8/2 and 10x10/3 boxes. Ours: `SokobanGenerator`, whose
  exact backward search gives every room its optimal solution length, *and* an independent
  forward `solve` of every room whose length must match (the "verified" rate is the headline).
  gym-sokoban: `generate_room` as its env's reset calls it (failed rooms are retried and not
  counted); its rooms are never verified solvable by a solver.
- Sokoban text step/s: our `step` of a full tagged response (parse + dynamics + text
  observation) against gym-sokoban's `step`, which renders an RGB frame every step.
- Sokoban `render()` rgb_array frames/s, both.
- Text step/s of ragen/FrozenLake-v0, ragen/Bandit-v0 and ragen/PocketCube-v0 when they import: `env.step` alone
  (`step_rate`), as for Sudoku and 2048; the resets between episodes and the choice of the next answer are not
  timed (FrozenLake's resets, a new map each, took about three quarters of the loop, and Bandit, single-turn,
  resets after every step); the resets' own rate goes in the row's notes.
- ragen/PocketCube-v0 levels/s, each level's exact distance verified by the oracle (`bench_pocketcube`), with the
  distance table's size, build time (from its cache metadata) and load time.
- ragen/Sudoku-v0 levels/s at 4x4 and 9x9 (each puzzle re-checked unique by the exact solver), ragen/2048-v0
  levels/s (a reset), and the text step/s of both with the oracle's answers (`bench_sudoku_2048`).

The machine is shared: the 1-minute load average at the start and at the end of the run is recorded (the
"machine" of the JSON and the table's footnote), since other jobs on the other cores still share caches and
memory bandwidth, and the best-of-rounds rates are the least contended ones.

gym-sokoban is installed by this script into its own venv at `benchmarks/.peer-venv` (gym==0.26.2,
gym-sokoban==0.0.6, setuptools<70 for `pkg_resources`, numpy<2 for `np.bool8`); if that fails the
comparison columns are skipped with a message. Results: `benchmarks/results/envs.json` (with the
machine description) and `benchmarks/results/envs.md` (the Markdown table, also printed).
"""

from __future__ import annotations

import os

# One core, one thread: set before NumPy is imported anywhere in this process.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import inspect  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
PEER_VENV = ROOT / "benchmarks" / ".peer-venv"
PEER_REQUIREMENTS = ["gym==0.26.2", "gym-sokoban==0.0.6", "setuptools<70", "numpy<2"]
GEN_CONFIGS = [((6, 6), 1), ((8, 8), 2), ((10, 10), 3)]
STEP_DIM = (6, 6)


def pin_one_core() -> int | None:
    """Pin this process to one CPU (the last one allowed); returns it, or None where unsupported."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[-1]})
        return cpus[-1]
    except (AttributeError, OSError):
        return None


def timed(fn, seconds: float, min_items: int = 3) -> tuple[float, int]:
    """Call fn() repeatedly for about `seconds` (at least `min_items` times); returns (items/s, items).

    fn returns the number of items it produced (so a loop body may batch).
    """
    items = 0
    start = time.perf_counter()
    while True:
        items += fn()
        elapsed = time.perf_counter() - start
        if elapsed >= seconds and items >= min_items:
            return items / elapsed, items


def step_rate(env, answer, seconds: float, first_seed: int = 0, min_steps: int = 3) -> dict:
    """Steps/s of `env.step` alone, over about `seconds` of wall time (at least `min_steps` steps).

    `answer(obs, i)` gives the i-th response from the latest observation; it and the resets that follow a finished
    episode (seeds `first_seed`, `first_seed` + 1, ...) are outside the timed region, so the rate is the step's
    and nothing else's. Returns {"rate", "items", "resets", "reset_rate"} (`reset_rate`: resets/s of `env.reset`
    alone, None when no episode ended).
    """
    steps, busy, resets, reset_busy, seed = 0, 0.0, 0, 0.0, first_seed
    obs, _ = env.reset(seed=seed)
    start = time.perf_counter()
    while time.perf_counter() - start < seconds or steps < min_steps:
        response = answer(obs, steps)
        t0 = time.perf_counter()
        obs, _, term, trunc, _ = env.step(response)
        busy += time.perf_counter() - t0
        steps += 1
        if term or trunc:
            seed += 1
            t0 = time.perf_counter()
            obs, _ = env.reset(seed=seed)
            reset_busy += time.perf_counter() - t0
            resets += 1
    return {"rate": steps / busy, "items": steps, "resets": resets,
            "reset_rate": resets / reset_busy if resets and reset_busy > 0 else None}


# ----------------------------------------------------------------------------- ours
def bench_ours(seconds: float) -> dict[str, dict]:
    import numpy as np

    from ragen_envs.sokoban import SokobanEnv, SokobanGenerator, solve

    out: dict[str, dict] = {}
    for dims, boxes in GEN_CONFIGS:
        key = f"{dims[0]}x{dims[1]}/{boxes}"
        gen = SokobanGenerator(dims, boxes)
        rng = np.random.default_rng(0)
        rate_gen, n_gen = timed(lambda g=gen, r=rng: (g.generate(r), 1)[1], seconds)
        rng = np.random.default_rng(1)
        lengths: list[int] = []

        def verified(g=gen, r=rng, lengths=lengths):
            item = g.generate(r)
            solution = solve(item.level)
            if solution is None or len(solution) != item.optimal_steps:
                raise AssertionError(f"solver disagrees with the generator on\n{item.level.to_xsb()}")
            lengths.append(item.optimal_steps)
            return 1

        rate_ver, n_ver = timed(verified, seconds)
        out[f"generation {key}"] = {
            "rate": rate_ver,
            "items": n_ver,
            "generation_only_rate": rate_gen,
            "mean_optimal_steps": float(np.mean(lengths)),
        }

    responses = [f"<think>move</think><answer>{a}</answer>" for a in ("Up", "Left", "Down", "Right")]
    env = SokobanEnv(dim_room=STEP_DIM, num_boxes=1, max_actions=None)
    env.reset(seed=0)
    counter = [0]

    def text_steps(batch=200):
        for _ in range(batch):
            _, _, term, _, _ = env.step(responses[counter[0] & 3])
            counter[0] += 1
            if term:
                env.reset(seed=counter[0])
        return batch

    rate, n = timed(text_steps, seconds)
    out["text step"] = {"rate": rate, "items": n}

    renv = SokobanEnv(dim_room=STEP_DIM, num_boxes=1, max_actions=None, render_mode="rgb_array")
    renv.reset(seed=0)

    def renders(batch=200):
        for _ in range(batch):
            renv.render()
        return batch

    rate, n = timed(renders, seconds)
    out["rgb_array render"] = {"rate": rate, "items": n}
    return out


OTHER_ENV_IDS = ("ragen/FrozenLake-v0", "ragen/Bandit-v0", "ragen/PocketCube-v0")


def bench_other_envs(seconds: float, env_ids: tuple[str, ...] = OTHER_ENV_IDS) -> dict[str, dict]:
    """Text steps/s (`step_rate`: env.step alone) of ragen/FrozenLake-v0, ragen/Bandit-v0 and ragen/PocketCube-v0
    (skipped when they do not import)."""
    import gymnasium as gym

    import ragen_envs  # noqa: F401  (registers the ids)

    out: dict[str, dict] = {}
    for env_id in env_ids:
        try:
            env = gym.make(env_id).unwrapped
            env.reset(seed=0)
            vocab = list(getattr(env, "ACTIONS", ())) or ["a"]
        except Exception as exc:  # another engineer's env may not exist yet
            out[env_id] = {"skipped": f"{type(exc).__name__}: {exc}"}
            continue

        def answer(obs, i, env=env, vocab=vocab):
            """The i-th action of the env's vocabulary, in turn; Bandit's arm names are drawn per episode (no
            fixed ACTIONS): the first word of the observation that the env's own matcher accepts."""
            if getattr(env, "ACTIONS", ()):
                return f"<think>t</think><answer>{vocab[i % len(vocab)]}</answer>"
            text = obs["text"] if isinstance(obs, dict) else str(obs)
            words = [w for w in re.findall(r"[\w-]+", text) if env._match_action(w) is not None]
            return f"<think>t</think><answer>{(words or ['a'])[0]}</answer>"

        out[env_id] = step_rate(env, answer, seconds)
    return out


def bench_pocketcube(seconds: float) -> dict[str, dict]:
    """ragen/PocketCube-v0 levels/s at the default scramble depth (5), each verified: the table's optimal solution
    has the reported length and solves the level on the sticker model. Also the table's load time (disk cache)."""
    try:
        from ragen_envs.pocketcube import PocketCubeEnv, apply_moves, is_solved, table_metadata
        from ragen_envs.pocketcube.table import _LOADED, distance_table

        start = time.perf_counter()
        _LOADED.clear()
        distance_table()  # built here when the cache is empty
        load_s = time.perf_counter() - start
    except Exception as exc:  # pragma: no cover - reported, not fatal
        return {"ragen/PocketCube-v0 generation": {"skipped": f"{type(exc).__name__}: {exc}"}}
    env = PocketCubeEnv()
    seed = [0]

    def generate(verify: bool) -> int:
        _, info = env.reset(seed=seed[0])
        seed[0] += 1
        if verify:
            plan = env.optimal_solution()
            if len(plan) != info["distance"] or not is_solved(apply_moves(env.state, plan))[0]:
                raise AssertionError(f"oracle disagrees with the table at seed {seed[0] - 1}")
        return 1

    rate_gen, _ = timed(lambda: generate(False), seconds)
    rate, n = timed(lambda: generate(True), seconds)
    meta = table_metadata()
    out = {"rate": rate, "items": n, "generation_only_rate": rate_gen, "table_load_s": load_s,
           "table_build_s": meta.get("build_seconds"), "table_bytes": meta.get("bytes")}
    out["notes"] = (f"scramble depth 5, exact distance per level, oracle-verified ({fmt_rate(rate_gen)}/s without); "
                    f"table {(meta.get('bytes') or 0) / 2**20:.1f} MiB, built in {meta.get('build_seconds')} s "
                    f"once, loaded in {load_s:.2f} s")
    return {"ragen/PocketCube-v0 generation": out}


def bench_sudoku_2048(seconds: float) -> dict[str, dict]:
    """ragen/Sudoku-v0 and ragen/2048-v0: levels/s (every Sudoku puzzle re-checked unique by the exact solver)
    and text steps/s (only `env.step` timed: Sudoku placing the oracle's placements, 2048 the oracle's moves,
    so every step is a valid move); the 2048 oracle's success rate at 4x4 / 2048 over the games it finishes."""
    try:
        from ragen_envs.game2048 import Game2048Env
        from ragen_envs.sudoku import SudokuEnv, count_solutions
    except Exception as exc:  # pragma: no cover - reported, not fatal
        return {"ragen/Sudoku-v0": {"skipped": f"{type(exc).__name__}: {exc}"}}
    out: dict[str, dict] = {}
    for label, kwargs in (("4x4, 10 givens", {}), ("9x9, 30 givens", {"size": 9, "givens": 30})):
        env = SudokuEnv(**kwargs)
        seed = [0]

        def generate(env=env, seed=seed) -> int:
            env.reset(seed=seed[0])
            seed[0] += 1
            if count_solutions(env.puzzle, env.n) != 1:
                raise AssertionError(f"Sudoku seed {seed[0] - 1} is not unique")
            return 1

        rate, n = timed(generate, seconds)
        out[f"ragen/Sudoku-v0 {label} generation"] = {"rate": rate, "items": n,
                                                      "notes": "unique solution re-checked by the exact solver"}

    def respond(actions) -> str:
        return "<think>t</think><answer>" + " || ".join(actions) + "</answer>"

    sudoku = SudokuEnv()
    out["ragen/Sudoku-v0"] = {**step_rate(sudoku, lambda obs, i: respond(sudoku.oracle_step()[1]), seconds),
                              "notes": "4x4; 2 oracle placements per answer"}
    game = Game2048Env()
    seed = [0]

    def new_game(game=game, seed=seed) -> int:
        game.reset(seed=seed[0])
        seed[0] += 1
        return 1

    rate, n = timed(new_game, seconds)
    out["ragen/2048-v0 4x4 generation"] = {"rate": rate, "items": n,
                                           "notes": "a reset: the empty board and two random tiles"}
    steps = step_rate(game, lambda obs, i: respond(game.oracle_step()[1]), seconds)
    wins = games = 0
    start = time.perf_counter()
    while time.perf_counter() - start < 3 * seconds or games == 0:
        _, info = game.reset(seed=1000 + games)
        done = False
        while not done:
            _, _, term, trunc, info = game.step(respond(game.oracle_step()[1]))
            done = term or trunc
        games += 1
        wins += bool(info["success"])
    out["ragen/2048-v0"] = {
        **steps, "oracle_wins": wins, "oracle_games": games,
        "notes": f"4x4; oracle moves; the expectimax oracle (depth 2) reached 2048 in {wins} of {games} games",
    }
    return out


# ----------------------------------------------------------------------------- gym-sokoban
# Run by the side venv's python; it measures with the same `timed` as ours (its source is pasted in below).
PEER_SCRIPT = r"""
import json, os, random, sys, time, warnings
warnings.filterwarnings("ignore")
cpu = int(sys.argv[2])
if cpu >= 0:
    os.sched_setaffinity(0, {cpu})
import numpy as np
from gym_sokoban.envs.room_utils import generate_room
from gym_sokoban.envs.sokoban_env import SokobanEnv

seconds = float(sys.argv[1])
random.seed(0)
np.random.seed(0)

TIMED_SOURCE

out = {}
for (h, w), boxes in [((6, 6), 1), ((8, 8), 2), ((10, 10), 3)]:
    failures = [0]
    def gen():
        try:
            generate_room(dim=(h, w), num_steps=int(1.7 * (h + w)), num_boxes=boxes)
            return 1
        except (RuntimeError, RuntimeWarning):
            failures[0] += 1  # the env's reset retries these; they cost time but give no room
            return 0
    rate, n = timed(gen, seconds)
    out[f"generation {h}x{w}/{boxes}"] = {"rate": rate, "items": n, "failures": failures[0]}

env = SokobanEnv(dim_room=(6, 6), num_boxes=1, max_steps=10**9)
i = [0]
def steps(batch=50):
    for _ in range(batch):
        _, _, done, _ = env.step(1 + (i[0] % 4))  # push up/down/left/right, as our four actions
        i[0] += 1
        if done:
            env.reset()
    return batch
rate, n = timed(steps, seconds)
out["text step"] = {"rate": rate, "items": n}
def renders(batch=50):
    for _ in range(batch):
        env.render(mode="rgb_array")
    return batch
rate, n = timed(renders, seconds)
out["rgb_array render"] = {"rate": rate, "items": n}
print("PEER_JSON " + json.dumps(out))
""".replace("TIMED_SOURCE", inspect.getsource(timed))


def ensure_peer_venv() -> Path | None:
    """The side venv's python with gym-sokoban importable, created on first use; None on failure."""
    python = PEER_VENV / "bin" / "python"
    probe = [str(python), "-c", "import warnings; warnings.filterwarnings('ignore'); import gym_sokoban.envs"]
    if python.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return python
    print(f"installing gym-sokoban 0.0.6 into {PEER_VENV} ...", flush=True)
    try:
        subprocess.run(["python3", "-m", "venv", str(PEER_VENV)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", *PEER_REQUIREMENTS],
            check=True,
            capture_output=True,
            text=True,
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        print(f"gym-sokoban comparison skipped: could not build the side venv ({detail.strip()[-500:]})")
        return None
    if subprocess.run(probe, capture_output=True).returncode != 0:
        print("gym-sokoban comparison skipped: gym_sokoban does not import in the side venv")
        return None
    return python


def bench_peer(seconds: float, cpu: int | None) -> dict[str, dict] | None:
    python = ensure_peer_venv()
    if python is None:
        return None
    proc = subprocess.run(
        [str(python), "-c", PEER_SCRIPT, str(seconds), str(-1 if cpu is None else cpu)],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"},
    )
    for line in proc.stdout.splitlines():
        if line.startswith("PEER_JSON "):
            return json.loads(line[len("PEER_JSON ") :])
    print(f"gym-sokoban comparison skipped: the peer run failed:\n{proc.stderr[-2000:]}")
    return None


# ----------------------------------------------------------------------------- report
def fmt_rate(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:,.0f}" if x >= 100 else f"{x:,.1f}"


def step_notes(res: dict) -> str:
    """A row's notes: its own, then, for a `step_rate` row, that only env.step was timed and the resets' rate."""
    notes = res.get("notes", "")
    if "resets" not in res:  # a levels/s row
        return notes
    timed = ("env.step alone; resets not timed ("
             + (f"{fmt_rate(res['reset_rate'])} resets/s)" if res.get("reset_rate") else "none happened)"))
    return f"{notes}; {timed}" if notes else timed


def build_rows(ours: dict, others: dict, peer: dict | None) -> list[dict]:
    rows = []
    for dims, boxes in GEN_CONFIGS:
        key = f"generation {dims[0]}x{dims[1]}/{boxes}"
        o = ours[key]
        p = (peer or {}).get(key, {})
        rows.append(
            {
                "benchmark": f"Sokoban generation {dims[0]}x{dims[1]}, {boxes} box{'es' if boxes > 1 else ''}",
                "unit": "rooms/s",
                "ours": o["rate"],
                "peer": p.get("rate"),
                "notes": (
                    f"ours: every room solver-verified, exact optimal length (mean {o['mean_optimal_steps']:.1f} "
                    f"steps; {fmt_rate(o['generation_only_rate'])}/s without the extra forward solve); "
                    f"gym-sokoban: not verified"
                    + (f", {p['failures']} failed tries" if p.get("failures") else "")
                ),
            }
        )
    for key, unit, notes in (
        (
            "text step",
            "steps/s",
            "ours: parse a tagged response + move + text obs; gym-sokoban: step renders an RGB frame",
        ),
        (
            "rgb_array render",
            "frames/s",
            "ours: in-memory sprites, one gather; gym-sokoban: reads the sprite PNGs per frame",
        ),
    ):
        rows.append(
            {
                "benchmark": f"Sokoban {key} ({STEP_DIM[0]}x{STEP_DIM[1]})",
                "unit": unit,
                "ours": ours[key]["rate"],
                "peer": (peer or {}).get(key, {}).get("rate"),
                "notes": notes,
            }
        )
    for env_id, res in others.items():
        generation = env_id.endswith(" generation")  # a levels/s row (bench_pocketcube), not a step rate
        rows.append(
            {
                "benchmark": env_id if generation else f"{env_id} text step",
                "unit": "levels/s" if generation else "steps/s",
                "ours": res.get("rate"),
                "peer": None,
                "notes": res.get("skipped", step_notes(res)),
            }
        )
    for row in rows:
        row["ratio"] = row["ours"] / row["peer"] if row["ours"] and row["peer"] else None
    return rows


def markdown(rows: list[dict], mode: str, seconds: float, rounds: int, load: tuple[float, float] | None = None) -> str:
    lines = [
        "| Benchmark | Unit | ragen_envs | gym-sokoban 0.0.6 | Ratio | Notes |",
        "| --- | --- | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        ratio = (
            f"{r['ratio']:.0f}x"
            if r["ratio"] and r["ratio"] >= 10
            else (f"{r['ratio']:.1f}x" if r["ratio"] else "-")
        )
        lines.append(
            f"| {r['benchmark']} | {r['unit']} | {fmt_rate(r['ours'])} | {fmt_rate(r['peer'])} | {ratio} | "
            f"{r['notes']} |"
        )
    lines.append("")
    shared = (f" (1-minute load average {load[0]:.1f} at the start, {load[1]:.1f} at the end: other jobs were "
              "running)" if load is not None else "")
    lines.append(
        f"One pinned core{shared}, {mode} mode: best of {rounds} alternating round(s) of {seconds:g} s per "
        "measurement; `python -m benchmarks.bench_envs`."
    )
    return "\n".join(lines)


def merge_best(runs: list[dict | None]) -> dict | None:
    """Best of several rounds: the highest of every `*rate` field, summed `items`.

    The machine is shared, so the fastest round is the best estimate of uncontended speed; ours
    and gym-sokoban's rounds alternate, so both get the same chances.
    """
    runs = [r for r in runs if r]
    if not runs:
        return None
    best: dict = {}
    for run in runs:
        for key, res in run.items():
            if key not in best:
                best[key] = dict(res)
                continue
            cur = best[key]
            for field, value in res.items():
                if field.endswith("rate") and isinstance(value, (int, float)):
                    cur[field] = max(cur.get(field) or 0.0, value)
                elif field in ("items", "failures"):
                    cur[field] = cur.get(field, 0) + value
    return best


def _load_average() -> float | None:
    """The 1-minute load average (None where the platform has none)."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="1 round of 1 s per measurement (full: 3 rounds of 4 s)"
    )
    parser.add_argument("--no-peer", action="store_true", help="skip the gym-sokoban side venv")
    parser.add_argument("--out", type=Path, default=None,
                        help="the result JSON (default benchmarks/results/envs.json; --quick: envs_quick.json); "
                             "the Markdown table goes beside it, as .md")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from benchmarks.machine import check_output_path, describe_machine
    from benchmarks.readme_tables import write_result

    check_output_path(parser, args.out)
    seconds, rounds = (1.0, 1) if args.quick else (4.0, 3)
    mode = "quick" if args.quick else "full"
    cpu = pin_one_core()

    load_start = _load_average()
    ours_runs, other_runs, peer_runs = [], [], []
    for i in range(rounds):
        print(f"round {i + 1}/{rounds} ...", flush=True)
        ours_runs.append(bench_ours(seconds))
        other_runs.append({**bench_other_envs(seconds), **bench_pocketcube(seconds)})
        other_runs[-1].update(bench_sudoku_2048(seconds))
        if not args.no_peer and (i == 0 or peer_runs[-1] is not None):
            peer_runs.append(bench_peer(seconds, cpu))
    ours, others, peer = merge_best(ours_runs), merge_best(other_runs), merge_best(peer_runs)
    rows = build_rows(ours, others, peer)
    load_end = _load_average()
    load = (load_start, load_end) if load_start is not None and load_end is not None else None
    table = markdown(rows, mode, seconds, rounds, load)
    machine = describe_machine()
    machine["pinned_cpu"] = cpu
    machine["load_average_1min"] = {"start": load_start, "end": load_end}
    result = {
        "benchmark": "envs",
        "mode": mode,
        "seconds_per_measurement": seconds,
        "rounds": rounds,
        "machine": machine,
        "peer": "gym-sokoban 0.0.6 (gym 0.26.2)" if peer else None,
        "gym_sokoban_rooms_verified": False,
        "rows": rows,
        "raw": {"ours": ours, "other_envs": others, "gym_sokoban": peer},
        "markdown": table,
    }
    # A quick run writes envs_quick.json (ignored by git) and prints its table, as every other benchmark's quick
    # form does: it used to overwrite the committed full-mode envs.json and envs.md, which `ragen bench --quick`
    # then copied into the README's table.
    out = args.out or RESULTS / ("envs_quick.json" if args.quick else "envs.json")
    write_result(result, out)
    if args.out is not None or not args.quick:
        out.with_suffix(".md").write_text(table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
