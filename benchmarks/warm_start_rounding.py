"""Why the lean forward's warm starts validate differently: one seed's warm start traced step by step, both forwards.

    python -m benchmarks.warm_start_rounding [--config collapse_sokoban] [--seed 300] [--perturbations 3]
                                             [--workers 2] [--out DIR]
    python -m benchmarks.warm_start_rounding trace SETTING SEED PERTURB OUT_JSON [--config NAME]   # one warm start

`bench_fast_forward` found greedy success right after the warm start lower with ``model.fast_forward`` on than off
on all three of its seeds. This benchmark separates the three ways that could happen:

1. **a different function**: the per-step SFT loss and gradient norm of both settings from the same initial
   weights, step by step (the same batches in the same order): equal to float rounding at the first steps, or not;
2. **a different decoding**: the warm-started weights of each setting validated with both decoding paths (the
   lean forward's KV-cached step and transformers'): the same greedy episodes, or not;
3. **rounding amplified by training**: the warm start repeated from initial weights perturbed by a relative 1e-6
   (``PERTURB`` = 1..K, seeded; 0 = none), under each setting: how far success moves at one seed when nothing but
   the last bits of the start change. If the two settings' successes differ by no more than these repeats do, the
   gap is rounding chaos, not the lean forward.

Each warm start is the config's (``warm_start.*``, run.seed = SEED, no cache), one torch thread per process,
`workers` processes at a time. Writes ``benchmarks/results/warm_start_rounding.json`` (shown in
docs/performance.md, ``results:warm_start_rounding``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = ("off", "on")
#: Relative size of the perturbation of every initial weight (w <- w * (1 + EPS * z), z ~ N(0, 1)).
EPS = 1e-6
#: Thresholds of "the trajectories have separated": the first SFT step whose loss differs by more than each.
DIVERGENCE = (1e-5, 1e-3, 1e-2)


def trace(setting: str, seed: int, perturb: int, out: Path, config: str) -> dict[str, Any]:
    """One warm start of `config` under `setting` ("off": transformers' forward, "on": the lean forward), its
    initial weights perturbed when `perturb` > 0: per-step loss and gradient norm, then greedy validation with
    both decoding paths on the same weights. Written to `out` (JSON) and returned."""
    import torch

    from ragen_core.training import sft
    from ragen_core.training.config import load_config
    from ragen_core.training.trainer import Trainer

    torch.set_num_threads(1)
    cfg = load_config(ROOT / "configs" / f"{config}.toml",
                      [f"run.seed={seed}", f"model.fast_forward={'true' if setting == 'on' else 'false'}",
                       'warm_start.cache_dir=""', "run.progress=false", "run.threads=1"])
    trainer = Trainer(cfg, tempfile.mkdtemp(prefix="warm-rounding-"))
    policy, model = trainer.policy, trainer.model
    if perturb:
        gen = torch.Generator().manual_seed(perturb)
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(1 + EPS * torch.randn(p.shape, generator=gen))
    rec: dict[str, Any] = {"setting": setting, "seed": seed, "perturb": perturb, "config": config,
                           "loss": [], "grad_norm": []}
    clip, forward = torch.nn.utils.clip_grad_norm_, policy.forward_logprobs

    def recording_clip(params, max_norm, *args, **kwargs):  # sft_train's clip: the step's gradient norm
        norm = clip(params, max_norm, *args, **kwargs)
        rec["grad_norm"].append(float(norm))
        return norm

    def recording_forward(ids, am, images=None, score_mask=None):  # sft_train's loss, recomputed from its output
        out_ = forward(ids, am, images=images, score_mask=score_mask)
        m = score_mask.float()
        rec["loss"].append(float(-(out_.logprobs.detach().float() * m).sum() / m.sum().clamp(min=1)))
        return out_

    torch.nn.utils.clip_grad_norm_, policy.forward_logprobs = recording_clip, recording_forward
    try:
        rec["sft"] = sft.warm_start(policy, cfg)
    finally:
        torch.nn.utils.clip_grad_norm_, policy.forward_logprobs = clip, forward
    model.eval()
    for decode in SETTINGS:  # the same weights, both decoding paths
        policy.fast = decode == "on"
        rec[f"success_decode_{decode}"] = trainer.evaluate(record=False)["val/success"]
        rec[f"episodes_decode_{decode}"] = list(trainer._last_val_success)
    out.write_text(json.dumps(rec))
    return rec


def _run_trace(config: str, seed: int, setting: str, perturb: int, folder: Path) -> dict[str, Any]:
    out = folder / f"{setting}-s{seed}-p{perturb}.json"
    cmd = [sys.executable, "-m", "benchmarks.warm_start_rounding", "trace", setting, str(seed), str(perturb), str(out),
           "--config", config]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    with open(out.with_suffix(".log"), "w", encoding="utf-8") as log:
        status = subprocess.run(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    if status:
        raise RuntimeError(f"{out.stem} exited {status}: see {out.with_suffix('.log')}")
    return json.loads(out.read_text())


def summarise(traces: list[dict[str, Any]]) -> dict[str, Any]:
    """The three checks of the module docstring from the traces of one config and seed."""
    by = {(t["setting"], t["perturb"]): t for t in traces}
    off, on = by[("off", 0)], by[("on", 0)]
    n = min(len(off["loss"]), len(on["loss"]))
    diff = np.abs(np.array(off["loss"][:n]) - np.array(on["loss"][:n]))
    gdiff = np.abs(np.array(off["grad_norm"][:n]) - np.array(on["grad_norm"][:n]))
    first = {f"{th:g}": next((int(k) for k in np.nonzero(diff > th)[0]), None) for th in DIVERGENCE}
    decode = {s: sum(a != b for a, b in zip(by[(s, 0)]["episodes_decode_off"], by[(s, 0)]["episodes_decode_on"]))
              for s in SETTINGS}
    success = {s: [by[k]["success_decode_on"] for k in sorted(k for k in by if k[0] == s)] for s in SETTINGS}
    mean = {s: float(np.mean(v)) for s, v in success.items()}
    sd = {s: float(np.std(v, ddof=1)) if len(v) > 1 else None for s, v in success.items()}
    welch = None
    if all(len(v) > 1 for v in success.values()):
        se = float(np.sqrt(sum(np.var(v, ddof=1) / len(v) for v in success.values())))
        welch = {"diff": mean["on"] - mean["off"], "se": se, "t": (mean["on"] - mean["off"]) / se if se else None}
    return {"steps": n, "first_step_loss_differs_by": first,
            "max_loss_diff_first_100": float(diff[:100].max()) if n else None,
            "max_grad_norm_diff_first_100": float(gdiff[:100].max()) if n else None,
            "decode_disagreements": decode, "episodes": len(off["episodes_decode_on"]),
            "success": success, "mean": mean, "sd": sd, "welch": welch}


def markdown(result: dict[str, Any]) -> str:
    s = result["summary"]
    pct = lambda v: f"{100 * v:.1f}"  # noqa: E731
    first = s["first_step_loss_differs_by"]
    lines = [f"`configs/{result['config']}.toml`, warm start of seed {result['seed']} ({s['steps']} SFT steps), "
             "transformers' forward (off) and the lean forward (on) from the same initial weights, then from "
             f"weights perturbed by a relative {EPS:g} ({result['perturbations']} seeded perturbations each):", "",
             f"- SFT loss per step: largest |off - on| over the first 100 steps {s['max_loss_diff_first_100']:.1e} "
             f"(gradient norm {s['max_grad_norm_diff_first_100']:.1e}); first step differing by more than 1e-5: "
             f"{first['1e-05']}, 1e-3: {first['0.001']}, 1e-2: {first['0.01']}.",
             f"- The same weights decoded both ways: {s['decode_disagreements']['off']} and "
             f"{s['decode_disagreements']['on']} of {s['episodes']} greedy episodes differ (off's and on's weights).",
             "", "| forward | greedy success after the warm start, per start (%) | mean | SD |", "|---|---|---:|---:|"]
    for k in SETTINGS:
        vals = ", ".join(pct(v) for v in s["success"][k])
        sd = "" if s["sd"][k] is None else pct(s["sd"][k])
        lines.append(f"| {k} | {vals} | {pct(s['mean'][k])} | {sd} |")
    if s["welch"]:
        w = s["welch"]
        lines += ["", f"on - off: {100 * w['diff']:+.1f} points (Welch t = {w['t']:.2f}, SE {100 * w['se']:.1f})."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from benchmarks.machine import non_negative_int, positive_int

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["trace"]:
        p = argparse.ArgumentParser(prog="warm_start_rounding trace")
        p.add_argument("setting", choices=SETTINGS)
        p.add_argument("seed", type=int)
        p.add_argument("perturb", type=int)
        p.add_argument("out", type=Path)
        p.add_argument("--config", default="collapse_sokoban")
        a = p.parse_args(argv[1:])
        trace(a.setting, a.seed, a.perturb, a.out, a.config)
        return 0
    p = argparse.ArgumentParser(prog="warm_start_rounding", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="collapse_sokoban")
    p.add_argument("--seed", type=non_negative_int, default=300)
    p.add_argument("--perturbations", type=non_negative_int, default=3)
    p.add_argument("--workers", type=positive_int, default=2)
    p.add_argument("--out", type=Path, default=None, help="trace folder (default: a temporary one)")
    a = p.parse_args(argv)
    from benchmarks.machine import describe_machine
    from benchmarks.readme_tables import RESULTS, write_result

    folder = a.out or Path(tempfile.mkdtemp(prefix="warm-rounding-"))
    folder.mkdir(parents=True, exist_ok=True)
    jobs = [(s, k) for k in range(a.perturbations + 1) for s in SETTINGS]
    with ThreadPoolExecutor(a.workers) as pool:
        traces = list(pool.map(lambda job: _run_trace(a.config, a.seed, job[0], job[1], folder), jobs))
    result = {"benchmark": "warm_start_rounding", "config": a.config, "seed": a.seed,
              "perturbations": a.perturbations, "eps": EPS, "summary": summarise(traces),
              "machine": describe_machine()}
    result["markdown"] = markdown(result)
    write_result(result, RESULTS / "warm_start_rounding.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
