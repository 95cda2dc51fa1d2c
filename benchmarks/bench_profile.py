"""Where a training run's time goes, part by part, against two arithmetic floors and against an older commit.

    python -m benchmarks.bench_profile [--quick] [--baseline COMMIT] [--configs a,b] [--no-threads]

For every shipped CPU config (``configs/*_tiny.toml`` and the collapse testbed's), one profiled run
(:mod:`benchmarks.profile_driver`: a shortened warm start, ``STEPS`` RL steps, the in-batch MI diagnostics once,
one validation, one probe) in a fresh process on one torch thread, first with the code of ``--baseline`` (default
43a82f3, the commit before the lean forward; checked out once into a git worktree under
``benchmarks/.baseline-COMMIT``), then with this checkout's code, one after the other on the same machine: the
ratios are side by side.

Per phase and part it reports the seconds (and their share of the phase) and two floors.

**The dense floor** (the one reported since 78c5e51): the dense floating-point work of the phase, as a
plain forward computes it for every token the phase processed, divided by one matrix rate (float32
``[800, 128] x [128, 512]``, the MLP's shape, best of 5 on one thread):

    forward MACs per token = layers * (h*(h + 2*kv*d) + h*h + 3*h*i + 2*h*ctx) + V*h

(h hidden size, kv*d the key/value width, i the MLP width, ctx the mean number of earlier positions a token
attends to: 80 where the phase has no turns to measure it; V the vocabulary), times 2 FLOPs per MAC, and times 3
for a forward and backward. Generation: prompt and generated tokens, forward; the update (the share of the batch's
tokens the filter kept; none in a step whose filter kept no group, which was counted as a full update before) and
the SFT steps: the trained rows' real tokens, forward and backward; the probe and the in-batch MI: every trace
position under every prompt plus the prompts' tokens (forward; the probe's generation too).

**The lean floor**: only the work whose result is read, counted from the phase's own calls by the driver
(:mod:`benchmarks.profile_driver`: distinct prefixes once per call, the positions whose log-prob or next token is
read, the key/value positions in between), each part priced at the rate measured for its own matrix shape
(:func:`matmul_rates`; a decoding step's projections and output layer at the rates of as many rows as the step
decodes, see :func:`lean_floor`). With H query heads of dimension d, Hkv key/value heads, L layers, per token
(MACs):

    qkv = h*(H + 2*Hkv)*d   o = H*d*h   up = 2*h*i (gate and up)   down = i*h   att(c) = 2*H*d*c   out = V*h
    layer(c)            = qkv + o + up + down + att(c)
    dense token         = L*layer(c) + out                                    (the dense floor's per-token cost)
    lean prompt token   = (L-1)*layer(c) + 2*h*Hkv*d                           (keys and values of the last layer)
    lean read position  = L*layer(c) + out                                    (its output and its logits are read)

where c is the number of keys the position's query attends to (a position p of a causal row: p + 1). A prompt
token's output is never read: it reaches later positions only through its keys and values, so the last layer needs
only those (no query, attention, output projection or MLP) and the output layer does not run there. At c = 70 (the
middle of a ~140-token prompt) that is 0.56 MFLOP against 1.33 for a dense token at c = 80.

Which positions are which (the driver's counts): a generation call computes each distinct prompt's first
``len - 1`` tokens once (the G rollouts of a group share their first prompt) as prompt tokens, then one read
position per sampled token; a scoring call (SFT, the update, the old-log-prob pass, the probe's entropy pass)
computes each distinct prefix before a row's first read log-prob once, read positions at ``t - 1`` for every
token ``t`` whose log-prob is read, the unread positions between them as prompt tokens (keys and values only), and
nothing after the last read one; cross-scoring computes each prompt's prefix once and each distinct trace once
under every prompt.

**Backward** (SFT and the update, ``train`` work): 2x the forward of the same positions, so 3x in all, also at
prompt positions. The loss reads only the response's log-probs, but those attend to the prompt's keys and values
in every layer, so the gradient reaches every prompt position: through the last layer's key/value projections
(their weight gradient and their input gradient), then through every earlier layer in full (each matrix product's
input gradient dX = dY W^T and weight gradient dW = X^T dY, each as many MACs as the forward product; the
attention's two products likewise), down to the tied embedding, which is trained. What backward skips at prompt
positions is what the forward skipped there: the last layer's query, attention, output projection and MLP, and the
output layer; and it computes nothing after a row's last read position. So an SFT row of P prompt and R response
tokens costs 3 * ((P-1) lean prompt tokens + R read positions) at the lean floor, against 3 * (P + R) dense tokens.

Not counted by either floor: element-wise work (norms, RoPE, SiLU, softmax, sampling), the embedding lookup,
padding the code computes (a batch's rows padded to the longest, the decoding cache's columns past a shorter
prompt), and the tokenizer and the envs. A phase at 1.0x its lean floor computes only what is read, at the full
rate of its matrix shapes.

Matrix rates: measured in this process, float32, one thread, best of 5 timings each (:func:`matmul_rates`):
``F.linear`` at ``MATMUL_ROWS`` token rows for each projection shape of the model (``qkv``, ``kv``, ``o``, ``up``,
``down``, ``out``), and the attention's two batched products (queries x keys, weights x values) at
``ATTENTION_SHAPE`` (rows, heads, a ~160-token context, head dimension). Backward products are priced at their
forward shape's rate.

``threads``: SFT steps per second with 1 and 2 torch threads, on a quiet machine and beside one other busy process
(what ``ragen reproduce`` runs: two single-thread runs on two cores): the measurement behind ``run.threads = 0``
(auto: one thread for the tiny model).

Writes ``benchmarks/results/profile.json`` (quick: ``profile_quick.json``) with a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
DRIVER = Path(__file__).resolve().parent / "profile_driver.py"
BASELINE = "43a82f3"
CONFIGS = ("bandit_tiny", "countdown_tiny", "pocketcube_tiny", "sokoban_tiny", "frozenlake_tiny", "collapse_sokoban",
           "collapse_frozenlake")
#: Warm-start demonstrations per profiled run (the configs' own numbers are 1500-4000: the per-step cost is what is
#: measured, and the study's time is rebuilt from it).
WARM_EPISODES = {"full": 256, "quick": 64}
PHASE_LABELS = {"warm_start": "warm start", "rl_steps": "RL step", "mi": "in-batch MI", "validation": "validation",
                "probe": "probe"}
#: Token rows of the projection products timed by :func:`matmul_rates` (a training micro-batch's worth).
MATMUL_ROWS = 800
#: (rows, heads, context, head dimension) of the attention products timed by :func:`matmul_rates`.
ATTENTION_SHAPE = (8, 4, 160, 32)
#: The parts of the per-token cost (module docstring), each priced at its own matrix rate.
PARTS = ("qkv", "kv", "o", "up", "down", "att", "out")
#: Row counts at which the decoding steps' matrix rates are measured (a step of n rows is priced at the smallest
#: bucket >= n: :func:`benchmarks.profile_driver.decode_bucket`).
DECODE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
#: FLOPs per MAC of a pass kind of the driver's counts: a forward, or a forward and its backward.
PASS_FACTOR = {"forward": 2.0, "train": 6.0, "decode": 2.0}


# ---------------------------------------------------------------------------------------------- the floor
def matmul_gflops(repeats: int = 5) -> float:
    """The core's float32 matrix-product rate (GFLOP/s) at the tiny model's MLP shape, one thread (best of
    `repeats`)."""
    import torch

    torch.set_num_threads(1)
    a, b = torch.randn(800, 128), torch.randn(128, 512)
    for _ in range(20):
        a @ b
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(200):
            a @ b
        best = min(best, (time.perf_counter() - t0) / 200)
    return 2 * 800 * 128 * 512 / best / 1e9


def matmul_rates(model: dict[str, int], repeats: int = 5, rows: int = MATMUL_ROWS,
                 attention: tuple[int, int, int, int] = ATTENTION_SHAPE) -> dict[str, float]:
    """GFLOP/s of each part's matrix product at the model's own shapes, float32, one thread, best of `repeats`:
    ``F.linear`` of ``[rows, in]`` by each projection's ``[out, in]`` weight, and for ``att`` the queries x keys and
    weights x values products of ``attention`` = (rows, heads, context, head dim) together."""
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(1)
    h, inter, vocab = model["hidden"], model["intermediate"], model["vocab"]
    d = model.get("head_dim") or h // model["heads"]
    q, kv = model["heads"] * d, model["kv_heads"] * d
    shapes = {"qkv": (h, q + 2 * kv), "kv": (h, 2 * kv), "o": (q, h), "up": (h, 2 * inter), "down": (inter, h),
              "out": (h, vocab)}

    def best(fn, flop: float) -> float:
        for _ in range(10):
            fn()
        t = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(50):
                fn()
            t = min(t, (time.perf_counter() - t0) / 50)
        return flop / t / 1e9

    out = {}
    for part, (n_in, n_out) in shapes.items():
        x, w = torch.randn(rows, n_in), torch.randn(n_out, n_in)
        out[part] = best(lambda x=x, w=w: F.linear(x, w), 2 * rows * n_in * n_out)
    b, heads, ctx, hd = attention
    qt, kt, vt = (torch.randn(b, heads, ctx, hd) for _ in range(3))

    def attend():
        return torch.matmul(torch.matmul(qt, kt.transpose(2, 3)), vt)

    out["att"] = best(attend, 2 * 2 * b * heads * ctx * ctx * hd)
    return out


def macs_per_token(model: dict[str, int], ctx: float) -> float:
    """Dense forward multiply-adds per token (module docstring)."""
    h, layers, inter, vocab = model["hidden"], model["layers"], model["intermediate"], model["vocab"]
    d = h // model["heads"]
    kv = model["kv_heads"] * d
    per_layer = h * (h + 2 * kv) + h * h + 3 * h * inter + 2 * h * ctx
    return layers * per_layer + vocab * h


def part_macs(model: dict[str, int]) -> dict[str, float]:
    """Forward MACs per token of each part (module docstring); ``att`` is per key attended to."""
    h, inter, vocab = model["hidden"], model["intermediate"], model["vocab"]
    d = model.get("head_dim") or h // model["heads"]
    q, kv = model["heads"] * d, model["kv_heads"] * d
    return {"qkv": h * (q + 2 * kv), "kv": 2 * h * kv, "o": q * h, "up": 2 * h * inter, "down": inter * h,
            "att": 2 * q, "out": vocab * h}


def lean_prompt_macs(model: dict[str, int], ctx: float) -> float:
    """Forward MACs of a prompt token attending to `ctx` keys at the lean floor: every layer but the last, and the
    last layer's keys and values (module docstring)."""
    c = part_macs(model)
    layer = c["qkv"] + c["o"] + c["up"] + c["down"] + c["att"] * ctx
    return (model["layers"] - 1) * layer + c["kv"]


def lean_read_macs(model: dict[str, int], ctx: float) -> float:
    """Forward MACs of a read position attending to `ctx` keys: every layer and the output layer."""
    c = part_macs(model)
    return model["layers"] * (c["qkv"] + c["o"] + c["up"] + c["down"] + c["att"] * ctx) + c["out"]


def lean_part_macs(model: dict[str, int], work: dict[str, float]) -> dict[str, float]:
    """Forward MACs per part of one pass's lean work (the driver's ``kv_tokens``, ``kv_ctx``, ``read_tokens``,
    ``read_ctx``): :func:`lean_prompt_macs` per key/value position, :func:`lean_read_macs` per read position."""
    c, layers = part_macs(model), model["layers"]
    kv, read = work.get("kv_tokens", 0.0), work.get("read_tokens", 0.0)
    rows = (layers - 1) * kv + layers * read  # token rows through a whole layer
    out = {p: rows * c[p] for p in ("qkv", "o", "up", "down")}
    out["kv"] = kv * c["kv"]
    out["att"] = c["att"] * ((layers - 1) * work.get("kv_ctx", 0.0) + layers * work.get("read_ctx", 0.0))
    out["out"] = read * c["out"]
    return out


def lean_floor(phase: dict[str, Any], model: dict[str, int], rates: dict[str, Any]) -> tuple[float, float]:
    """``(GFLOP, seconds)`` of a profiled phase at the lean floor: each pass kind's parts (:func:`lean_part_macs`)
    at 2 FLOPs per MAC (``train``: 6, forward and backward), each part at its own rate (GFLOP/s).

    A decoding step (kind ``decode@B``: one token per row still decoding, B the bucket of their count) is a
    forward whose projections and output layer are ``[rows, in]`` products of that few rows: they are priced at
    ``rates["decode"][B]`` (:func:`matmul_rates` at B rows) where measured, else at the large-row rates. Its
    attention stays at ``rates["att"]``, the rate of a prefill-shaped product: a decoding step's single query per
    row reads its keys at memory speed, slower, so this keeps the floor below what any implementation attains."""
    gflop = seconds = 0.0
    for kind, work in (phase.get("lean") or {}).items():
        base, _, rows = kind.partition("@")
        by_rows = rates.get("decode") or {}
        own = (by_rows.get(int(rows)) or by_rows.get(rows)) if rows else None  # int keys here, str keys from JSON
        for part, macs in lean_part_macs(model, work).items():
            flop = PASS_FACTOR[base] * macs / 1e9
            gflop += flop
            seconds += flop / ((own or rates)[part] if part != "att" else rates[part])
    return gflop, seconds


def phase_gflop(phase: dict[str, Any], model: dict[str, int]) -> float:
    """Dense GFLOP of one profiled phase (module docstring), from the tokens the driver counted."""
    c, extra = phase["counts"], phase["extra"]
    prompt, generated = c.get("prompt_tokens", 0.0), c.get("generated_tokens", 0.0)
    rows = max(prompt + generated, 1.0)
    ctx = 0.5 * (prompt + generated) / max(c.get("turns", 1.0), 1.0) if c.get("turns") else 80.0
    per_token = 2 * macs_per_token(model, ctx)
    name = phase["phase"]
    if name == "warm_start":  # the collected rows, trained for `epochs`: forward and backward
        return 3 * per_token * rows * extra.get("epochs", 2) / 1e9
    gen = per_token * rows
    if name == "rl_steps":
        # The share of the batch's tokens trained on; a step without it trained nothing (the filter kept no group).
        kept = extra.get("filter/tokens_kept_fraction") or [1.0]
        kept_mean = sum(k if k is not None else 0.0 for k in kept) / len(kept)
        return (gen + 3 * per_token * rows * kept_mean) / 1e9
    cross = per_token * (c.get("cross_positions", 0.0) + c.get("cross_prompt_tokens", 0.0))
    if name == "probe":
        return (gen + cross) / 1e9
    if name == "mi":
        return cross / 1e9
    return gen / 1e9


# ---------------------------------------------------------------------------------------------- running
def baseline_checkout(commit: str) -> Path:
    """A git worktree of `commit` under benchmarks/.baseline-COMMIT (made once, reused).

    Raises ValueError (one message: git's own reason and the command to run by hand) when the worktree cannot be
    made: an unknown commit, a shallow clone that lacks it, a source tree that is not a git checkout. The mains turn
    it into a usage error; it used to be a CalledProcessError traceback with git's message swallowed."""
    where = Path(__file__).resolve().parent / f".baseline-{commit}"
    if not (where / "ragen_core").is_dir():
        cmd = ["git", "-C", str(ROOT), "worktree", "add", "--detach", "--force", str(where), commit]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True)
        except FileNotFoundError:  # no git on PATH
            proc = subprocess.CompletedProcess(cmd, 127, "", "git: command not found")
        if proc.returncode != 0:
            reason = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
            raise ValueError(f"--baseline {commit}: cannot make its worktree {where} ({reason}); the commit must be "
                             f"in this clone's history (`git fetch --unshallow` in a shallow clone), then "
                             f"`git worktree add --detach {where} {commit}` makes it by hand")
    return where


def profile(code_root: Path, config: str, episodes: int, epochs_override: str | None = None) -> dict[str, Any]:
    """Run the driver on `config` with the code of `code_root` in a fresh single-threaded process."""
    env = {**os.environ, "PYTHONPATH": str(code_root), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "profile.json"
        cfg_path = ROOT / "configs" / f"{config}.toml"
        overrides = [f"warm_start.sft_episodes={episodes}"]
        proc = subprocess.run([sys.executable, str(DRIVER), str(cfg_path), str(out), *overrides], env=env,
                              cwd=str(code_root), capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"profile of {config} with {code_root} failed:\n{proc.stderr[-3000:]}")
        result = json.loads(out.read_text())
    epochs = _config_epochs(cfg_path)
    for phase in result["phases"]:
        if phase["phase"] == "warm_start":
            phase["extra"]["epochs"] = epochs
    return result


def _config_epochs(cfg_path: Path) -> int:
    import tomllib

    return int(tomllib.loads(cfg_path.read_text()).get("warm_start", {}).get("epochs", 2))


def threads_measurement(quick: bool) -> list[dict[str, Any]]:
    """SFT steps/s of the collapse Sokoban warm start with 1 and 2 threads, quiet and beside one busy process."""
    code = (
        "import sys, time, torch\n"
        "torch.set_num_threads(int(sys.argv[1]))\n"
        "from ragen_core.training.config import load_config\n"
        "from ragen_core.training.trainer import Trainer\n"
        "from ragen_core.training import sft\n"
        "import tempfile\n"
        "cfg = load_config('configs/collapse_sokoban.toml', ['run.progress=false', 'warm_start.cache_dir=',"
        " f'run.threads={sys.argv[1]}', f'warm_start.sft_episodes={sys.argv[2]}'])\n"
        "tr = Trainer(cfg, tempfile.mkdtemp())\n"
        "torch.set_num_threads(int(sys.argv[1]))\n"
        "m = sft.warm_start(tr.policy, cfg)\n"
        "steps = cfg.warm_start.epochs * ((int(m['sft/episodes']) * 2 + 3) // 4)\n"
        "print(steps / (m['perf/sft_s'] - m['perf/sft_collect_s']))\n"
    )
    episodes = 32 if quick else 128
    rows = []
    for load in (False, True):
        busy = None
        if load:  # one other single-threaded training-like process: a busy loop of matrix products
            busy = subprocess.Popen([sys.executable, "-c", "import torch\ntorch.set_num_threads(1)\n"
                                     "a=torch.randn(800,128); b=torch.randn(128,512)\nwhile True: a@b\n"])
            time.sleep(1.0)
        try:
            for threads in (1, 2):
                env = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false",
                       "OMP_NUM_THREADS": str(threads)}
                proc = subprocess.run([sys.executable, "-c", code, str(threads), str(episodes)], env=env,
                                      cwd=str(ROOT), capture_output=True, text=True)
                if proc.returncode != 0:
                    raise RuntimeError(proc.stderr[-2000:])
                rate = float(proc.stdout.strip().splitlines()[-1])
                rows.append({"threads": threads, "other_busy_process": load, "sft_steps_per_s": rate})
        finally:
            if busy is not None:
                busy.kill()
                busy.wait()
    return rows


# ---------------------------------------------------------------------------------------------- report
def _phase_row(phase: dict[str, Any], steps: int) -> dict[str, Any]:
    per = steps if phase["phase"] == "rl_steps" else 1
    return {"wall_s": phase["wall_s"] / per, "parts": {k: v / per for k, v in phase["parts"].items()}}


def summarise(config: str, base: dict[str, Any], now: dict[str, Any], gflops: float,
              rates: dict[str, float] | None = None) -> dict[str, Any]:
    """Per phase: baseline and current seconds (RL: per step), speed-up, the dense floor, the lean floor (with
    `rates`, the per-shape matrix rates of :func:`matmul_rates`, and a profile that counted lean work) and the
    parts."""
    out: dict[str, Any] = {"config": config, "phases": []}
    base_phases = {p["phase"]: p for p in base["phases"]}
    for phase in now["phases"]:
        name = phase["phase"]
        steps = phase["extra"].get("steps", 1) if name == "rl_steps" else 1
        floor = phase_gflop(phase, now["model"]) / gflops / steps
        cur = _phase_row(phase, steps)
        row = {"phase": name, "now_s": cur["wall_s"], "parts_now": cur["parts"], "floor_s": floor,
               "now_over_floor": cur["wall_s"] / floor if floor else None}
        if rates is not None and "lean" in phase:
            lean_gflop, lean_s = lean_floor(phase, now["model"], rates)
            row.update(lean_gflop=lean_gflop / steps, lean_floor_s=lean_s / steps,
                       now_over_lean=cur["wall_s"] / (lean_s / steps) if lean_s else None)
        if name in base_phases:
            b = _phase_row(base_phases[name], steps)
            row.update(base_s=b["wall_s"], parts_base=b["parts"], speedup=b["wall_s"] / cur["wall_s"])
        if name == "warm_start":
            row["episodes"] = phase["extra"].get("episodes")
            for src, key in ((phase, "now"), (base_phases.get(name), "base")):
                if src:
                    ex = src["extra"]
                    row[f"collect_s_{key}"] = ex.get("collect_s")
                    row[f"sft_steps_s_{key}"] = (ex.get("sft_s") or 0.0) - (ex.get("collect_s") or 0.0)
        out["phases"].append(row)
    return out


def _parts_text(parts: dict[str, float]) -> str:
    total = sum(parts.values()) or 1.0
    top = sorted(parts.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{k} {v:.2f} s ({100 * v / total:.0f}%)" for k, v in top if v / total >= 0.05)


def _ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}x"


def markdown(result: dict[str, Any]) -> str:
    rates = result.get("rates") or {}
    rate_text = (" Rates at the model's own shapes (GFLOP/s): " + ", ".join(
        f"{k} {v:.0f}" for k, v in rates.items() if k != "decode") + "." if rates else "")
    decode = rates.get("decode") or {}
    if decode:
        shown = [b for b in (8, 32, 128) if str(b) in decode or b in decode]
        rate_text += (" A decoding step's projections and output layer have one row per sequence still decoding, "
                      "and are priced at the rates of that many rows (" + "; ".join(
                          f"{b} rows: " + ", ".join(f"{k} {v:.0f}" for k, v in (decode.get(b) or decode[str(b)])
                                                    .items()) for b in shown)
                      + "); its attention at the rate above, which a single query per row does not reach.")
    lines = [f"Side by side, one process per run, one torch thread: the code of {result['baseline']} and this "
             f"checkout, {result['warm_episodes']} warm-start demonstrations and {result['steps']} RL steps per "
             f"run. Dense floor: the phase's dense arithmetic at the core's matrix rate, {result['gflops']:.1f} "
             "GFLOP/s (float32, the MLP's shape). Lean floor: only the work whose result is read (distinct prompts "
             "once, the last layer's keys and values at prompt positions, logits where read), each part at the "
             f"rate of its own matrix shape.{rate_text}", "",
             f"| config | phase | {result['baseline']} s | now s | speed-up | dense floor s | now / dense | "
             "lean floor s | now / lean | where the time goes now |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for c in result["configs"]:
        for p in c["phases"]:
            label = PHASE_LABELS[p["phase"]]
            if p["phase"] == "warm_start":
                label += f" ({p['episodes']} episodes)"
            base = f"{p['base_s']:.2f}" if "base_s" in p else "-"
            speed = f"{p['speedup']:.1f}x" if "speedup" in p else "-"
            parts = _parts_text(p["parts_now"])
            if p["phase"] == "warm_start":
                # The timers' parts (env, tokenizer, "other": everything untimed) split the phase another way
                # than collection / SFT, and "other" holds the SFT steps: one split only, not both side by side.
                parts = (f"demonstrations {p['collect_s_now']:.2f} s, SFT steps {p['sft_steps_s_now']:.2f} s "
                         f"({100 * p['sft_steps_s_now'] / p['now_s']:.0f}%)")
            lean = f"{p['lean_floor_s']:.2f}" if p.get("lean_floor_s") is not None else "-"
            lines.append(f"| {c['config']} | {label} | {base} | {p['now_s']:.2f} | {speed} | {p['floor_s']:.2f} | "
                         f"{_ratio(p['now_over_floor'])} | {lean} | {_ratio(p.get('now_over_lean'))} | {parts} |")
    if result.get("threads"):
        lines += ["", "| torch threads | another busy process | SFT steps/s |", "|---:|---|---:|"]
        for r in result["threads"]:
            lines.append(f"| {r['threads']} | {'yes' if r['other_busy_process'] else 'no'} | "
                         f"{r['sft_steps_per_s']:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two configs, fewer demonstrations")
    parser.add_argument("--baseline", default=BASELINE, help=f"the commit to compare with (default {BASELINE})")
    parser.add_argument("--configs", default="", help="comma-separated config names (default: every CPU config)")
    parser.add_argument("--no-threads", action="store_true", help="skip the threads measurement")
    args = parser.parse_args(argv)
    from benchmarks.machine import describe_machine
    from benchmarks.readme_tables import write_result

    configs = [c for c in args.configs.split(",") if c] or (
        ["bandit_tiny", "collapse_sokoban"] if args.quick else list(CONFIGS))
    unknown = [c for c in configs if not (ROOT / "configs" / f"{c}.toml").is_file()]
    if unknown:  # checked before the baseline's profiles run, not after them (a RuntimeError from the driver)
        parser.error(f"--configs: no config {unknown[0]!r} in configs/; e.g. {', '.join(CONFIGS)}")
    episodes = WARM_EPISODES["quick" if args.quick else "full"]
    start = time.perf_counter()
    gflops = matmul_gflops()
    by_shape: dict[tuple, dict[str, float]] = {}  # the matrix rates of each model's shapes, measured once
    try:
        base_root = baseline_checkout(args.baseline)
    except ValueError as e:
        parser.error(str(e))
    summaries = []
    for config in configs:
        print(f"[profile] {config}: {args.baseline} ...", flush=True)
        base = profile(base_root, config, episodes)
        print(f"[profile] {config}: this checkout ...", flush=True)
        now = profile(ROOT, config, episodes)
        shape = tuple(sorted((k, v) for k, v in now["model"].items() if k != "parameters"))
        if shape not in by_shape:
            by_shape[shape] = matmul_rates(now["model"])
            by_shape[shape]["decode"] = {b: {k: v for k, v in matmul_rates(now["model"], rows=b).items()
                                             if k != "att"} for b in DECODE_BUCKETS}
        rates = by_shape[shape]
        summaries.append({**summarise(config, base, now, gflops, rates), "rates": rates,
                          "raw": {"baseline": base, "now": now}})
    rates = next(iter(by_shape.values()), None) if len(by_shape) == 1 else None
    threads = [] if args.no_threads else threads_measurement(args.quick)
    result = {"benchmark": "profile", "quick": args.quick, "baseline": args.baseline, "gflops": gflops,
              "rates": rates, "matmul_rows": MATMUL_ROWS, "attention_shape": list(ATTENTION_SHAPE),
              "warm_episodes": episodes, "steps": 3, "configs": summaries, "threads": threads,
              "machine": describe_machine(), "wall_s": time.perf_counter() - start}
    result["markdown"] = markdown(result)
    write_result(result, RESULTS / ("profile_quick.json" if args.quick else "profile.json"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
