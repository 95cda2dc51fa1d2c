"""Backward-pass savings of SNR-aware filtering, measured honestly (docs/science.md section 4, issue 7).

    python -m benchmarks.bench_filtering [--quick] [--device cpu|cuda] [--sizes 4x8,8x16] [--models tiny,large]

What is timed: one policy update step on a real rollout batch, i.e. filtering (when the variant filters),
``compact`` or masking, GRPO advantages, ``HFPolicy.forward_logprobs`` with entropy and ``score_mask`` = the loss
mask (as the trainer calls it: on the tiny model's lean forward only the scored positions get logits and a group's
shared prompt is computed once), the PPO clipped loss minus 0.001 x entropy (``ragen_core.math.losses``,
token-mean, the trainer's loss) and ``backward()``, over the whole batch in one pass. The optimizer step is not
timed (its cost does not depend on the batch). Variants, all on the same batch, interleaved (one round = every
variant once, the order rotated each round), after warm-up rounds:

- ``none``: no filtering, every row trained on;
- ``top_p0.9_masked``: top-p 0.9 picks groups, dropped groups stay in the batch with their loss zeroed
  (what frameworks that only mask do): the forward and backward passes still run over every row, the dropped
  rows' positions scored as before the masking (``score_mask`` is the loss mask before it);
- ``top_p0.9_removed``, ``top_p0.5_removed``, ``top_p0.25_removed``, ``top_k0.9_removed``: dropped groups are
  physically removed (``ragen_core.math.filtering.compact``) before the forward pass.

One pass over the whole batch saves more than the removed tokens (efficiency above 1): a smaller batch also has a
smaller activation footprint. Trainers (ours, TRL, verl) run fixed micro-batches instead, so the headline contrast
(none / masked / removed at top-p 0.9) is also timed in micro-batches of ``--micro-batch`` rows (default 8, each
trimmed to its longest row, gradients accumulated): the saving users get in practice, beside the one-pass one.

Defaults (CPU, one torch thread, about 8 minutes on a shared 2-core machine): the tiny model on Sokoban and
FrozenLake at P x G = 4 x 8 with every variant, 5 timed rounds; the large model on FrozenLake at 4 x 2 with
none / masked / removed (top-p 0.9), 3 rounds. On this CPU one unfiltered tiny-model step at 8 x 16 takes
~30-40 s (~65k tokens), so the paper's 8 x 16 is left to ``--sizes 8x16`` and to ``benchmarks/gpu_check.sh``.
Warm-up: on CPU one step of ``none`` per warm-up round; glibc malloc is told to keep freed memory
(:func:`steady_allocator`), otherwise a big step after small ones pays page faults the reverse order does not.

Per variant: median step time and its spread (IQR over rounds), rows and real tokens kept, the ideal time
``t_none x kept-token fraction`` and the efficiency ``(t_none - t_variant) / (t_none - t_ideal)`` (1 = the
saving is exactly proportional to the tokens removed, 0 = no saving). The masked variant and the removed variant
compute the same gradient (``tests/benchmarks/test_bench_filtering.py`` checks it); only their cost differs.

Batches: the tiny policy (``load_policy("tiny")``) samples one P x G = 8 x 16 batch per env with
``ragen_core.rollout.rollout`` (single turn, 32 new tokens: the prompts are real, ~400-500 tokens of the tiny
BPE); smaller P x G are its first p groups x first g rollouts (rollouts of a group are exchangeable). The batch is
sampled once and reused across variants and repeats (sampling is not what is timed). The larger model (hidden 384,
10 layers, ~9x the parameters, same tokenizer) is timed on the same token batches.

Rewards: the untrained tiny model never writes a well-formed answer, so every rollout gets the same format
penalty and every group has zero reward variance (the JSON records these real RV statistics; top-p on them keeps
nothing and the step is skipped). With ``--rewards auto`` (default) the groups to keep are then chosen from a
seeded synthetic [P, G] reward matrix with bimodal group variance (RV heterogeneity near the paper's Sokoban
1.2-1.3); the JSON says which source each set used. Which groups are kept changes only the kept-token fraction,
which is what the efficiency is measured against.

Also: the cost of ``filter_groups`` (variance + top-p) for P up to 1024 as a fraction of the step time, and the
peak memory of one step with and without filtering (CPU: each variant in a fresh subprocess, ``ru_maxrss``;
CUDA: ``torch.cuda.max_memory_allocated``). Results: ``benchmarks/results/filtering.json`` (quick:
``filtering_quick.json``) with the machine, versions, date, torch threads and a Markdown table.
"""

from __future__ import annotations

import os

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmarks.machine import setup_torch, torch_result_header  # noqa: E402
from ragen_core.math.advantages import aggregate_loss, grpo  # noqa: E402
from ragen_core.math.filtering import FilterResult, compact, filter_groups, reward_variance, rv_statistics  # noqa: E402
from ragen_core.math.losses import ppo_policy_loss  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
ENVS = {"sokoban": "ragen/Sokoban-v0", "frozenlake": "ragen/FrozenLake-v0"}
#: Model sizes: build_tiny_model keyword arguments ({} = the tiny default, hidden 192, 4 layers).
MODELS: dict[str, dict[str, int]] = {"tiny": {}, "large": {"hidden": 384, "layers": 10}}
ENTROPY_COEF = 0.001
ROW_KEYS = ("input_ids", "attention_mask", "loss_mask", "old_logprobs", "row_traj", "row_group")


@dataclass(frozen=True)
class Variant:
    """One way of handling a batch: ``mode`` is "none", "mask" (zero the loss) or "remove" (``compact``)."""

    name: str
    mode: str
    strategy: str | None = None
    value: float | None = None

    def __post_init__(self) -> None:
        if self.mode not in ("none", "mask", "remove"):
            raise ValueError(f"mode must be 'none', 'mask' or 'remove'; got {self.mode!r}")
        if self.mode != "none" and (self.strategy is None or self.value is None):
            raise ValueError(f"variant {self.name!r}: mode {self.mode!r} needs a strategy and a value")


VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant("none", "none"),
    Variant("top_p0.9_masked", "mask", "top_p", 0.9),
    Variant("top_p0.9_removed", "remove", "top_p", 0.9),
    Variant("top_p0.5_removed", "remove", "top_p", 0.5),
    Variant("top_p0.25_removed", "remove", "top_p", 0.25),
    Variant("top_k0.9_removed", "remove", "top_k", 0.9),
)}
CONTRAST = ("none", "top_p0.9_masked", "top_p0.9_removed")
#: Timed rounds at the paper's batch size (see main()).
PAPER_SIZE_ROUNDS = 2


# ---------------------------------------------------------------------------------------------- batches
def rows_from_batch(batch: Any) -> dict[str, torch.Tensor]:
    """The row tensors the step needs, from a RolloutBatch in full context (one row per trajectory)."""
    rows = {k: v for k, v in batch.row_tensors().items() if k in ROW_KEYS}
    if rows["input_ids"].shape[0] != batch.groups * batch.group_size:
        raise ValueError("the benchmark needs one row per trajectory (context='full')")
    return rows


def sub_batch(rows: dict[str, torch.Tensor], rewards: torch.Tensor, p: int, g: int
              ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """The first ``p`` groups x first ``g`` rollouts of a group-major batch, re-padded (all-padding columns cut).

    Args:
        rows: ``[P*G, T]`` row tensors (group-major, row ``i * G + k``), ``row_traj``/``row_group`` ``[P*G]``.
        rewards: ``[P, G]``.
    Returns:
        rows ``[p*g, T']`` (``row_traj`` = 0..p*g-1, ``row_group`` = row // g) and rewards ``[p, g]``.
    """
    big_p, big_g = rewards.shape
    if not (1 <= p <= big_p and 1 <= g <= big_g):
        raise ValueError(f"sub-batch {p}x{g} must fit in the sampled {big_p}x{big_g}")
    idx = (torch.arange(p)[:, None] * big_g + torch.arange(g)[None, :]).reshape(-1)
    out = {k: v.index_select(0, idx) for k, v in rows.items()}
    out["row_traj"] = torch.arange(p * g)
    out["row_group"] = torch.arange(p).repeat_interleave(g)
    t = int(out["attention_mask"].sum(dim=1).max())
    out = {k: (v[:, :t].contiguous() if v.dim() == 2 else v) for k, v in out.items()}
    return out, rewards[:p, :g].clone()


def synthetic_rewards(p: int, g: int, seed: int = 0) -> torch.Tensor:
    """Seeded 0/1 rewards ``[p, g]`` with bimodal group variance (solved/failed groups next to mixed ones).

    Per group a success probability ``q ~ U(0, 1)``, rounded to 0 or 1 for half of the groups (zero variance);
    redrawn (same generator) until at least ``min(2, p)`` groups have non-zero variance, so top-p keeps a
    non-trivial subset.
    """
    gen = torch.Generator().manual_seed(seed)
    need = min(2, p)
    while True:
        q = torch.rand(p, 1, generator=gen)
        q = torch.where(torch.rand(p, 1, generator=gen) < 0.5, q.round(), q)
        r = (torch.rand(p, g, generator=gen) < q).to(torch.float32)
        if g < 2 or int((reward_variance(r) > 0).sum()) >= need:
            return r


def choose_rewards(real: torch.Tensor, source: str, seed: int = 0) -> tuple[torch.Tensor, str]:
    """Rewards used to pick groups: the real ones, or synthetic ones when the real ones carry (almost) no signal.

    ``source``: "real", "synthetic" or "auto" (real if at least two groups have non-zero variance).
    """
    if source not in ("real", "synthetic", "auto"):
        raise ValueError(f"rewards source must be 'real', 'synthetic' or 'auto'; got {source!r}")
    if source == "real":
        return real, "real"
    if source == "auto" and int((reward_variance(real) > 1e-10).sum()) >= min(2, real.shape[0]):
        return real, "real"
    return synthetic_rewards(*real.shape, seed=seed), "synthetic"


# ---------------------------------------------------------------------------------------------- the step
def apply_variant(rows: dict[str, torch.Tensor], rewards: torch.Tensor, variant: Variant
                  ) -> tuple[dict[str, torch.Tensor], FilterResult | None]:
    """Filter (per ``variant``), add GRPO ``advantages`` ``[R, T]``, then mask or remove the dropped groups.

    Args:
        rows: group-major row tensors ``[P*G, T]`` (full context: one row per trajectory).
        rewards: ``[P, G]`` returns used for the filter and the advantages.
    Returns:
        (rows for the step, FilterResult or None). "mask" keeps every row and zeroes ``loss_mask`` and
        ``advantages`` on the dropped rows; "remove" returns ``compact(rows, kept, G)``.
    """
    p, g = rewards.shape
    adv = grpo(rewards) if g >= 2 else rewards - rewards.mean(dim=1, keepdim=True)
    rows = dict(rows)
    mask = rows["loss_mask"]
    # The positions the forward scores: the loss mask before any masking, so that a masking framework's step still
    # computes its dropped rows (the trainer passes its loss mask as score_mask; see loss_backward).
    rows["score_mask"] = mask != 0
    rows["advantages"] = adv.reshape(-1)[rows["row_traj"]][:, None] * (mask != 0).to(adv.dtype)
    if variant.mode == "none":
        return rows, None
    res = filter_groups(rewards, strategy=variant.strategy, value=variant.value)
    if variant.mode == "mask":
        keep_row = res.mask[rows["row_group"]]
        rows["loss_mask"] = mask * keep_row[:, None].to(mask.dtype)
        rows["advantages"] = rows["advantages"] * keep_row[:, None].to(adv.dtype)
        return rows, res
    return compact(rows, res.kept, g), res


def loss_backward(policy: Any, rows: dict[str, torch.Tensor], entropy_coef: float = ENTROPY_COEF,
                  micro_batch: int = 0) -> float | None:
    """Forward + backward of the trainer's policy loss on ``rows`` (gradients left in ``policy.model``).

    ``loss = ppo_policy_loss(token-mean) - entropy_coef * mean token entropy``, both over ``loss_mask``. The forward
    scores the positions of ``score_mask`` (default: ``loss_mask``), as ``Trainer._update`` passes its loss mask:
    without it the tiny model's lean forward computes logits at every prompt position and no shared prompt prefix,
    a step several times the trainer's.
    ``micro_batch`` = 0 runs the whole batch in one pass; ``n`` > 0 runs ``ceil(R / n)`` passes of ``n`` rows, each
    trimmed to its longest row (as the trainer's ``Trainer._slice``), and accumulates the gradient: pass ``m``
    contributes its token-mean times ``tokens_m / tokens_total``, so the sum is the whole batch's token-mean and
    the gradient is the same. A pass whose rows have no loss token (a masked framework's dropped rows) is still
    run, as it is there.
    Returns the loss, or None when no token is trained on (an empty batch: the update is skipped).
    """
    policy.model.zero_grad(set_to_none=True)
    n_rows = rows["input_ids"].shape[0]
    total = int((rows["loss_mask"] != 0).sum()) if n_rows else 0
    if n_rows == 0 or total == 0:
        return None
    size = n_rows if micro_batch <= 0 else micro_batch
    device = policy.device
    loss_sum = 0.0
    for start in range(0, n_rows, size):
        idx = torch.arange(start, min(start + size, n_rows))
        sub = {k: v.index_select(0, idx) for k, v in rows.items()}
        t = int(sub["attention_mask"].sum(dim=1).max())
        sub = {k: (v[:, :t] if v.dim() == 2 else v) for k, v in sub.items()}
        mask = sub["loss_mask"].to(device)
        score = sub.get("score_mask", sub["loss_mask"]) != 0
        out = policy.forward_logprobs(sub["input_ids"].to(device), sub["attention_mask"].to(device),
                                      with_entropy=True, score_mask=score.to(device))
        logp = out.logprobs.float()
        tokens = int((mask != 0).sum())
        if tokens == 0:
            loss = 0.0 * (logp.sum() + out.entropy.float().sum())  # the pass runs, it contributes nothing
        else:
            pg, _ = ppo_policy_loss(logp, sub["old_logprobs"].to(device), sub["advantages"].to(device), mask,
                                    loss_agg_mode="token-mean")
            loss = (pg - entropy_coef * aggregate_loss(out.entropy.float(), mask, "token-mean")) * (tokens / total)
        loss.backward()
        loss_sum += float(loss.detach())
    return loss_sum


def run_step(policy: Any, rows: dict[str, torch.Tensor], rewards: torch.Tensor, variant: Variant,
             micro_batch: int = 0) -> float | None:
    """One timed step: :func:`apply_variant` then :func:`loss_backward` (whole batch, or ``micro_batch`` rows)."""
    step_rows, _ = apply_variant(rows, rewards, variant)
    return loss_backward(policy, step_rows, micro_batch=micro_batch)


# ---------------------------------------------------------------------------------------------- timing
def round_orders(names: Sequence[str], rounds: int) -> list[list[str]]:
    """Round r runs every variant once, in ``names`` order rotated by r (no variant always first or last)."""
    n = len(names)
    return [[names[(r + j) % n] for j in range(n)] for r in range(rounds)]


def _sync(device: torch.device | None) -> None:
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


def time_interleaved(step: Callable[[str], Any], names: Sequence[str], warmup: int, repeats: int,
                     device: torch.device | None = None,
                     warmup_names: Sequence[str] | None = None) -> dict[str, list[float]]:
    """Seconds per call of ``step(name)``, interleaved round-robin, after ``warmup`` untimed rounds.

    A warm-up round runs ``warmup_names`` (default: every name). On CPU one step of the largest variant is
    enough (no per-shape compilation; it grows the allocator to the peak); on CUDA every shape is warmed up.

    Returns {name: [seconds in timed round 0, ..., timed round repeats - 1]}.
    """
    times: dict[str, list[float]] = {n: [] for n in names}
    for _ in range(warmup):
        for name in (warmup_names or names):
            step(name)
    _sync(device)
    for order in round_orders(list(names), repeats):
        for name in order:
            _sync(device)
            t0 = time.perf_counter()
            step(name)
            _sync(device)
            times[name].append(time.perf_counter() - t0)
    return times


def quartiles(xs: Sequence[float]) -> tuple[float, float, float]:
    """(q1, median, q3), linear interpolation (numpy's default percentile)."""
    q1, med, q3 = np.percentile(np.asarray(xs, dtype=float), [25, 50, 75])
    return float(q1), float(med), float(q3)


def efficiency(t_none: float, t_variant: float, kept_fraction: float) -> float | None:
    """Actual saving / ideal saving = ``(t_none - t_variant) / (t_none - t_none * kept_fraction)``.

    None when the ideal saving is zero (nothing dropped, or nothing to save).
    """
    ideal_saving = t_none * (1.0 - kept_fraction)
    if not ideal_saving > 0:
        return None
    return (t_none - t_variant) / ideal_saving


def _nan_to_none(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else x


def summarize(times: dict[str, list[float]], infos: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Per-variant rows: timings (median, IQR), tokens kept, ideal time, efficiency (of medians and per round)."""
    base = times["none"]
    _, t_none, _ = quartiles(base)
    out = []
    for name, ts in times.items():
        q1, med, q3 = quartiles(ts)
        info = infos[name]
        f = info["tokens_kept_fraction"]
        per_round = [efficiency(b, t, f) for b, t in zip(base, ts)]
        per_round = [e for e in per_round if e is not None]
        row = {
            "variant": name,
            **info,
            "time_median_s": med,
            "time_q1_s": q1,
            "time_q3_s": q3,
            "times_s": ts,
            "ideal_s": t_none * f,
            "saving_s": t_none - med,
            "efficiency": efficiency(t_none, med, f),
            "efficiency_per_round_median": quartiles(per_round)[1] if per_round else None,
            "efficiency_per_round_iqr": ([quartiles(per_round)[0], quartiles(per_round)[2]] if per_round else None),
        }
        out.append(row)
    return out


def variant_info(rows: dict[str, torch.Tensor], rewards: torch.Tensor, variant: Variant) -> dict[str, Any]:
    """What a variant trains on: rows, kept groups, real tokens (attention), padded positions, loss tokens."""
    step_rows, res = apply_variant(rows, rewards, variant)
    tokens = int(rows["attention_mask"].sum())
    positions = rows["attention_mask"].numel()
    loss_tokens = int((rows["loss_mask"] != 0).sum())
    p = rewards.shape[0]
    kept_groups = p if res is None else res.n_kept
    if variant.mode == "mask":
        # The saving an ideal implementation would get from these kept groups (the step itself saves nothing).
        kept_tokens = int(rows["attention_mask"][res.mask[rows["row_group"]]].sum())
    else:
        kept_tokens = int(step_rows["attention_mask"].sum())
    return {
        "rows": int(step_rows["input_ids"].shape[0]),
        "kept_groups": int(kept_groups),
        "groups": int(p),
        "tokens": kept_tokens,
        "tokens_kept_fraction": kept_tokens / tokens,
        "padded_positions": int(step_rows["attention_mask"].numel()),
        "padded_positions_fraction": step_rows["attention_mask"].numel() / positions,
        "loss_tokens": int((step_rows["loss_mask"] != 0).sum()),
        "loss_tokens_fraction": int((step_rows["loss_mask"] != 0).sum()) / max(loss_tokens, 1),
    }


# ---------------------------------------------------------------------------------------------- overhead
def filter_overhead(ps: Sequence[int], g: int, repeats: int) -> list[dict[str, Any]]:
    """Median wall time of ``filter_groups`` (variance + top-p 0.9) and of ``reward_variance`` on [P, g]."""
    out = []
    for p in ps:
        r = synthetic_rewards(p, g, seed=p)
        for _ in range(5):
            filter_groups(r, "top_p", 0.9)
        ts, tv = [], []
        for _ in range(repeats):
            t0 = time.perf_counter()
            filter_groups(r, "top_p", 0.9)
            ts.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            reward_variance(r)
            tv.append(time.perf_counter() - t0)
        out.append({"P": p, "G": g, "filter_s": quartiles(ts)[1], "variance_s": quartiles(tv)[1]})
    return out


# ---------------------------------------------------------------------------------------------- memory
def _proc_status_kib(field: str) -> int | None:
    """A ``/proc/self/status`` field in KiB (Linux), else None."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_peak_rss() -> bool:
    """Reset the process's peak RSS (VmHWM) to its current RSS (Linux >= 4.0: write 5 to clear_refs)."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _memory_child(spec_path: str) -> int:
    """Fresh process: load the model and the batch, run one step of one variant, print peak-RSS numbers.

    The peak is the step's own: VmHWM is reset to the current RSS just before the step (so loading the model
    and importing torch cannot set it). Without /proc (non-Linux) it falls back to ru_maxrss over the process.
    """
    spec = torch.load(spec_path, weights_only=False)
    torch.set_num_threads(int(spec["threads"]))
    from ragen_core.policy import HFPolicy

    policy = HFPolicy.from_pretrained(spec["model_dir"])
    policy.model.train()
    variant = VARIANTS[spec["variant"]]
    rows, rewards = spec["rows"], spec["rewards"]
    reset = _reset_peak_rss()
    before = _proc_status_kib("VmRSS") if reset else None
    run_step(policy, rows, rewards, variant)
    if reset and before is not None:
        peak, method = _proc_status_kib("VmHWM"), "VmHWM reset before the step"
    else:
        scale = 1 if sys.platform != "darwin" else 1 / 1024  # ru_maxrss: KiB on Linux, bytes on macOS
        before, method = 0, "ru_maxrss of the whole process"
        peak = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale)
    print(json.dumps({"variant": variant.name, "peak_rss_mb": peak / 1024, "rss_before_step_mb": before / 1024,
                      "step_peak_increase_mb": (peak - before) / 1024, "method": method}))
    return 0


def memory_cpu(model_dir: Path, rows: dict[str, torch.Tensor], rewards: torch.Tensor, names: Sequence[str],
               threads: int) -> list[dict[str, Any]]:
    """Peak RSS of one step per variant, each in a fresh subprocess (so earlier variants cannot set the peak)."""
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            spec = Path(tmp) / f"{name}.pt"
            torch.save({"model_dir": str(model_dir), "rows": rows, "rewards": rewards, "variant": name,
                        "threads": threads}, spec)
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
            proc = subprocess.run([sys.executable, "-m", "benchmarks.bench_filtering", "--memory-child", str(spec)],
                                  capture_output=True, text=True, cwd=str(ROOT), env=env, timeout=600)
            if proc.returncode != 0:
                raise RuntimeError(f"memory child for {name} failed:\n{proc.stderr[-2000:]}")
            out.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return out


def memory_cuda(policy: Any, rows: dict[str, torch.Tensor], rewards: torch.Tensor,
                names: Sequence[str]) -> list[dict[str, Any]]:
    """``torch.cuda.max_memory_allocated`` during one step per variant (peak stats reset in between)."""
    out = []
    dev = policy.device
    for name in names:
        policy.model.zero_grad(set_to_none=True)
        torch.cuda.synchronize(dev)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(dev)
        before = torch.cuda.memory_allocated(dev)
        run_step(policy, rows, rewards, VARIANTS[name])
        torch.cuda.synchronize(dev)
        peak = torch.cuda.max_memory_allocated(dev)
        out.append({"variant": name, "peak_allocated_mb": peak / 2**20, "allocated_before_step_mb": before / 2**20,
                    "step_peak_increase_mb": (peak - before) / 2**20})
    return out


# ---------------------------------------------------------------------------------------------- driver
def steady_allocator() -> str | None:
    """Make glibc malloc keep freed memory (trim threshold 4 GiB, mmap threshold fixed at its 32 MiB maximum).

    Why: by default glibc returns freed heap memory to the OS and moves its mmap threshold with the sizes it
    sees, so a large step that follows small ones pays fresh page faults that one following a large step does
    not: timings then depend on the previous variant. With these settings blocks <= 32 MiB are reused from the
    heap and larger ones are mmapped every time (a cost proportional to the batch, the same for every order).
    Returns a description, or None where it does not apply (not glibc).
    """
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        ok = libc.mallopt(m_trim_threshold, 4 * 2**30) and libc.mallopt(m_mmap_threshold, 32 * 2**20)
    except (OSError, AttributeError):
        return None
    return "glibc mallopt: M_TRIM_THRESHOLD 4 GiB, M_MMAP_THRESHOLD 32 MiB" if ok else None


def sample(policy: Any, env_id: str, p: int, g: int, max_new_tokens: int, seed: int) -> tuple[dict, torch.Tensor,
                                                                                               dict[str, Any]]:
    """One real rollout batch of the policy (single turn, full context): rows, real rewards [p, g], stats."""
    from ragen_core.rollout import RolloutSettings, make_envs, rollout

    envs = make_envs(env_id, p * g)
    settings = RolloutSettings(max_turns=1, context="full", max_new_tokens=max_new_tokens)
    t0 = time.perf_counter()
    with torch.no_grad():
        batch = rollout(policy, envs, [10_000 + seed * 1000 + i for i in range(p)], g, settings,
                        generator=torch.Generator().manual_seed(seed))
    info = {"sampling_s": time.perf_counter() - t0, **batch.summary()}
    return rows_from_batch(batch), batch.rewards_pg.clone(), info


def load_model(name: str, device: str) -> tuple[Any, Path]:
    from ragen_core.policy import HFPolicy, default_tiny_model_dir

    model_dir = default_tiny_model_dir(**MODELS[name])
    policy = HFPolicy.from_pretrained(model_dir, device=device)
    policy.model.train()
    return policy, model_dir


def parse_sizes(text: str) -> list[tuple[int, int]]:
    out = []
    for part in text.split(","):
        try:
            p, g = (int(x) for x in part.lower().split("x"))
        except ValueError:
            raise ValueError(f"sizes must look like '8x16,4x8' (P x G); got {text!r}") from None
        if p < 1 or g < 1:
            raise ValueError(f"P and G must be >= 1; got {part!r}")
        out.append((p, g))
    return out


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "| model | env | P x G | passes | variant | rows | kept tokens | kept positions | step time (median [IQR]) "
        "| ideal | efficiency | paired per round (median [IQR]) |",
        "|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in result["sets"]:
        for r in s["variants"]:
            eff = r["efficiency"]
            pr = r["efficiency_per_round_iqr"]
            iqr = "" if pr is None else f" [{pr[0]:.2f}, {pr[1]:.2f}]"
            lines.append(
                f"| {s['model']} | {s['env']} | {s['P']} x {s['G']} | "
                f"{'micro-batches of ' + str(s['micro_batch']) if s.get('micro_batch') else 'whole batch'} | "
                f"{r['variant']} | {r['rows']} | "
                f"{r['tokens_kept_fraction']:.0%} | {r['padded_positions_fraction']:.0%} | {r['time_median_s']:.3f} s "
                f"[{r['time_q1_s']:.3f}, {r['time_q3_s']:.3f}] | {r['ideal_s']:.3f} s | {_fmt(eff, '.2f')} | "
                f"{_fmt(r['efficiency_per_round_median'], '.2f')}{iqr} |")
    lines.append("")
    src = sorted({s["rewards_source"] for s in result["sets"]})
    rv = "; ".join(f"{s['env']} {s['P']}x{s['G']}: mean {_fmt(_nan_to_none(s['real_rv']['rv_mean']), '.3g')}, "
                   f"zero-variance groups {s['real_rv']['zero_fraction']:.0%}"
                   for s in result["sets"] if s["model"] == result["sets"][0]["model"])
    lines.append(f"Efficiency = (t_none - t) / (t_none - t_ideal), t_ideal = t_none x kept-token fraction, from "
                 f"the medians; 'paired per round' computes it within each round (robust to load drift); "
                 f"forward + backward of the PPO loss over the whole batch in one pass, or in fixed micro-batches "
                 f"(each trimmed to its longest row, gradients accumulated: what trainers run), {result['device']}, "
                 f"{result['torch_threads']} torch thread(s), {result['repeats']} interleaved rounds (large model: "
                 f"{result['large_repeats']}; the paper's 8 x 16 batch: {PAPER_SIZE_ROUNDS}) after "
                 f"{result['warmup']} warm-up round(s); kept positions = padded "
                 f"[rows x columns] after compact; CPU allocator: {result['allocator']}. "
                 f"Groups kept by rewards: {', '.join(src)}. Real reward variance of "
                 f"the sampled batches (untrained tiny model): {rv}.")
    oh = result.get("overhead")
    if oh:
        mb = oh["measured_batch"]
        parts = [f"P={o['P']}: {o['filter_s'] * 1e3:.3f} ms = {o['fraction_of_step']:.1e} of a step"
                 for o in oh["filter"]]
        lines.append(f"Variance + top-p filter on the measured {oh['reference']} batch: "
                     f"{mb['filter_s'] * 1e3:.3f} ms = {mb['fraction_of_step']:.1e} of its step.")
        lines.append(f"Variance + top-p filter cost vs the step time at that P (step time extrapolated from the "
                     f"measured {oh['reference']} per-token time): " + "; ".join(parts) + ".")
    mem = result.get("memory")
    if mem:
        key = "peak_allocated_mb" if "peak_allocated_mb" in mem["variants"][0] else "peak_rss_mb"
        what = "max allocated" if key == "peak_allocated_mb" else "peak RSS, fresh process each"
        parts = [f"{m['variant']} {m[key]:.0f} MB (+{m['step_peak_increase_mb']:.0f} MB during the step)"
                 for m in mem["variants"]]
        lines.append(f"Peak memory of one step ({mem['set']}, {what}): " + "; ".join(parts) + ".")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from benchmarks.machine import check_output_path, non_negative_int, positive_int

    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_filtering", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one small set, 2 rounds (well under a minute)")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--threads", type=positive_int, default=1, help="torch CPU threads (default 1: stable timings)")
    parser.add_argument("--envs", default=None, help="comma list of sokoban, frozenlake")
    parser.add_argument("--models", default=None, help="comma list of tiny, large")
    parser.add_argument("--sizes", default=None, help="P x G list for the tiny model, e.g. 8x16,4x8")
    parser.add_argument("--large-sizes", default=None, help="P x G list for the large model")
    parser.add_argument("--paper-sizes", default=None,
                        help="P x G list timed on the tiny model, first env, headline contrast only "
                             "(default: 8x16, the paper's batch; none in --quick)")
    parser.add_argument("--sample-size", default=None, help="P x G sampled per env (default 8x16, quick 4x2)")
    parser.add_argument("--max-new-tokens", type=positive_int, default=None)
    parser.add_argument("--warmup", type=non_negative_int, default=1, help="warm-up rounds (CPU: one 'none' step each)")
    parser.add_argument("--repeats", type=positive_int, default=None, help="timed rounds (default 5, quick 2)")
    parser.add_argument("--large-repeats", type=positive_int, default=None,
                        help="timed rounds, large model (default 3)")
    parser.add_argument("--large-env", default="frozenlake", help="env of the large model (default frozenlake)")
    parser.add_argument("--large-all-variants", action="store_true",
                        help="time every variant on the large model (default: none / masked / removed at top-p 0.9)")
    parser.add_argument("--micro-batch", type=positive_int, default=8,
                        help="also time the headline contrast in fixed micro-batches of this many rows, as trainers "
                             "run it (default 8: algo.micro_batch_size's default and TRL's per-device batch); 0 = no")
    parser.add_argument("--rewards", default="auto", choices=("auto", "real", "synthetic"))
    parser.add_argument("--no-memory", action="store_true")
    parser.add_argument("--default-malloc", action="store_true",
                        help="leave glibc malloc at its defaults (see steady_allocator)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--memory-child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    check_output_path(parser, args.out)
    if args.memory_child:
        return _memory_child(args.memory_child)
    device = setup_torch(parser, args)
    allocator = None if args.default_malloc else steady_allocator()
    q = args.quick
    envs = (args.envs or ("sokoban" if q else "sokoban,frozenlake")).split(",")
    models = (args.models or ("tiny" if q else "tiny,large")).split(",")
    for e in envs:
        if e not in ENVS:
            parser.error(f"unknown env {e!r}; accepted: {', '.join(ENVS)}")
    for m in models:
        if m not in MODELS:
            parser.error(f"unknown model {m!r}; accepted: {', '.join(MODELS)}")
    try:
        sizes = parse_sizes(args.sizes or ("4x2" if q else "4x8"))
        large_sizes = parse_sizes(args.large_sizes or "4x2")
        paper_spec = args.paper_sizes if args.paper_sizes is not None else ("" if q else "8x16")
        paper_sizes = parse_sizes(paper_spec) if paper_spec else []
        need = sizes + paper_sizes + (large_sizes if "large" in models else [])
        default_sample = f"{max(p for p, _ in need)}x{max(g for _, g in need)}"
        sample_p, sample_g = parse_sizes(args.sample_size or default_sample)[0]
    except ValueError as exc:
        parser.error(str(exc))
    max_new = args.max_new_tokens or (16 if q else 32)
    repeats = args.repeats or (2 if q else 5)
    large_repeats = args.large_repeats or (2 if q else 3)
    if any(p > sample_p or g > sample_g for p, g in need):
        parser.error(f"every size must fit in the sampled batch {sample_p}x{sample_g} (--sample-size)")

    from benchmarks.readme_tables import write_result

    t_start = time.perf_counter()
    result: dict[str, Any] = {
        **torch_result_header("bench_filtering", q, device),
        "warmup": args.warmup,
        "repeats": repeats,
        "large_repeats": large_repeats,
        "allocator": allocator or "default",
        "warmup_rounds": "CPU: one step of 'none' per warm-up round; CUDA: every variant",
        "rollout": {"sampled": f"{sample_p}x{sample_g}", "max_turns": 1, "context": "full",
                    "max_new_tokens": max_new, "policy": "tiny (untrained)"},
        "step": "filter/compact or mask + GRPO advantages + forward_logprobs(with_entropy, score_mask=loss mask "
                "before masking) + PPO clipped loss "
                "(token-mean) - 0.001 x entropy + backward, whole batch in one pass or in micro-batches of "
                "`micro_batch` rows (set field); optimizer step not timed",
        "sets": [],
    }

    tiny, tiny_dir = load_model("tiny", str(device))
    sampled: dict[str, tuple[dict, torch.Tensor, dict]] = {}
    for e in envs:
        print(f"[filtering] sampling {sample_p}x{sample_g} on {ENVS[e]} ...", flush=True)
        sampled[e] = sample(tiny, ENVS[e], sample_p, sample_g, max_new, seed=len(sampled))
    policies = {"tiny": (tiny, tiny_dir)}
    for m in models:
        if m not in policies:
            policies[m] = load_model(m, str(device))
    names_all = list(VARIANTS)
    mem_rows = None
    for m in models:
        policy, model_dir = policies[m]
        n_params = sum(p.numel() for p in policy.model.parameters())
        # The large model is ~9x slower per token: time it on the headline contrast only.
        names = names_all if m == "tiny" or args.large_all_variants else list(CONTRAST)
        large_env = args.large_env if args.large_env in envs else envs[0]
        jobs = ([(e, size, names, repeats, 0) for e in envs for size in sizes] if m == "tiny"
                else [(large_env, size, names, large_repeats, 0) for size in large_sizes])
        if m == "tiny":
            # What trainers do: fixed micro-batches (the saving users get in practice), headline contrast.
            if args.micro_batch > 0:
                jobs += [(e, size, list(CONTRAST), repeats, args.micro_batch) for e in envs for size in sizes]
            # The paper's 8 x 16 batch costs ~6x a 4 x 8 step on a CPU (about a minute unfiltered): headline
            # contrast only, first env, PAPER_SIZE_ROUNDS rounds, so that `make bench` stays under 20 minutes.
            jobs += [(envs[0], size, list(CONTRAST), PAPER_SIZE_ROUNDS, 0) for size in paper_sizes]
        for e, (p, g), names, n_rounds, micro in jobs:
            rows_all, real_all, sinfo = sampled[e]
            rows, real = sub_batch(rows_all, real_all, p, g)
            rewards, source = choose_rewards(real, args.rewards, seed=p * 1000 + g)
            infos = {n: variant_info(rows, rewards, VARIANTS[n]) for n in names}
            print(f"[filtering] {m} ({n_params / 1e6:.1f}M) {e} {p}x{g}: {rows['input_ids'].shape[0]} rows, "
                  f"{int(rows['attention_mask'].sum())} tokens, rewards {source}, "
                  f"{f'micro-batches of {micro} rows' if micro else 'one pass'}", flush=True)
            t0 = time.perf_counter()
            times = time_interleaved(lambda n, rows=rows, rewards=rewards, policy=policy, micro=micro:
                                     run_step(policy, rows, rewards, VARIANTS[n], micro_batch=micro),
                                     names, args.warmup, n_rounds,
                                     device, warmup_names=None if device.type == "cuda" else ["none"])
            summary = summarize(times, infos)
            for r in summary:
                print(f"    {r['variant']:<20} {r['time_median_s']:8.3f} s  kept {r['tokens_kept_fraction']:5.0%}"
                      f"  eff {_fmt(r['efficiency'], '.2f')}", flush=True)
            real_rv = rv_statistics(reward_variance(real)) if g >= 2 else {}
            used_rv = rv_statistics(reward_variance(rewards)) if g >= 2 else {}
            result["sets"].append({
                "model": m, "parameters": n_params, "model_args": MODELS[m] or {"hidden": 192, "layers": 4},
                "env": ENVS[e], "P": p, "G": g, "micro_batch": micro, "rows": int(rows["input_ids"].shape[0]),
                "tokens": int(rows["attention_mask"].sum()), "seq_len_max": int(rows["attention_mask"].shape[1]),
                "rewards_source": source, "real_rv": {k: _nan_to_none(v) for k, v in real_rv.items()},
                "selection_rv": {k: _nan_to_none(v) for k, v in used_rv.items()},
                "real_filter_top_p0.9_empty": bool(filter_groups(real, "top_p", 0.9).empty) if g >= 2 else None,
                "sampling": {k: v for k, v in sinfo.items()},
                "timing_wall_s": time.perf_counter() - t0,
                "variants": summary,
            })
            if mem_rows is None and m == "tiny" and not args.no_memory:
                mem_rows = (rows, rewards, model_dir, f"{m} {ENVS[e]} {p}x{g}")

    # Variance + filter cost relative to a step at the same P, from the first tiny set's per-token time.
    first = result["sets"][0]
    t_none = next(r for r in first["variants"] if r["variant"] == "none")["time_median_s"]
    per_token = t_none / first["tokens"]
    tokens_per_row = first["tokens"] / first["rows"]
    g_over = 16
    over = filter_overhead([8, 64, 256, 1024], g_over, 50 if q else 300)
    for o in over:
        o["step_s_extrapolated"] = per_token * tokens_per_row * o["P"] * o["G"]
        o["fraction_of_step"] = o["filter_s"] / o["step_s_extrapolated"]
    own = next(o for o in filter_overhead([first["P"]], first["G"], 50 if q else 300))
    result["overhead"] = {
        "reference": f"{first['model']} {first['env']} {first['P']}x{first['G']}",
        "per_token_s": per_token, "tokens_per_row": tokens_per_row,
        "measured_batch": {**own, "step_s": t_none, "fraction_of_step": own["filter_s"] / t_none},
        "filter": over,
    }

    if mem_rows is not None:
        rows, rewards, model_dir, label = mem_rows
        mem_names = ["none", "top_p0.9_removed"] if q else list(CONTRAST)
        print(f"[filtering] peak memory per variant ({label}) ...", flush=True)
        if device.type == "cuda":
            variants_mem = memory_cuda(policies["tiny"][0], rows, rewards, mem_names)
        else:
            variants_mem = memory_cpu(model_dir, rows, rewards, mem_names, args.threads)
        result["memory"] = {"set": label, "variants": variants_mem}

    result["wall_s"] = time.perf_counter() - t_start
    result["markdown"] = markdown(result)
    write_result(result, args.out or RESULTS / ("filtering_quick.json" if q else "filtering.json"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
