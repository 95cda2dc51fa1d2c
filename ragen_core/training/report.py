"""What a run writes besides checkpoints: the metrics log, the plots and the summary.

- :class:`RunLog`: ``metrics.jsonl`` (one JSON object per log call), ``val_outcomes.jsonl`` (per-episode
  validation outcomes), the optional TensorBoard mirror, the in-memory history, the rewind on resume.
- :func:`write_plots`: ``success.png``, ``entropy_mi.png``, ``filter.png`` from the history.
- :func:`write_summary`: ``summary.md``, what was run and the numbers at start and end.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ragen_core.math.stats import mean_ci
from ragen_core.training.algorithms import get_algorithm
from ragen_core.training.config import ConfigError, TrainConfig
from ragen_core.training.metrics import STEP, Collapse, Filter, Probe, Rollout, Val

__all__ = ["METRICS", "VAL_OUTCOMES", "RunLog", "markdown_to_text", "require_tensorboard", "write_plots",
           "write_summary"]

#: One JSON line of metrics per log call (the steps, the warm start, the validations), in the run folder.
METRICS = "metrics.jsonl"
#: Per-episode validation outcomes, one JSON line per validation: {"step", "seeds", "success": [0/1, ...]}.
VAL_OUTCOMES = "val_outcomes.jsonl"
#: One line per resume of the run: when, from which step, the accepted config changes and the code it ran with.
RESUME_LOG = "resume_log.jsonl"


def require_tensorboard() -> None:
    """Fail at start-up, not after the first step, when TensorBoard logging is asked for but missing."""
    try:
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401
    except ImportError as exc:
        raise ConfigError(
            "run.tensorboard = true needs the tensorboard package: pip install 'ragen2[tensorboard]'"
        ) from exc


def _metrics_jsonable(d: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        if isinstance(v, (np.floating, np.integer)):
            v = v.item()
        if isinstance(v, float) and not math.isfinite(v):
            v = None
        out[k] = v
    return out


class RunLog:
    """The metrics of one run: ``metrics.jsonl``, ``val_outcomes.jsonl``, TensorBoard, `history`, `on_step`."""

    def __init__(self, run_dir: str | Path, tensorboard: bool = False,
                 on_step: Callable[[dict[str, Any]], None] | None = None):
        self.run_dir = Path(run_dir)
        self.tensorboard = tensorboard
        self.on_step = on_step
        self.history: list[dict[str, Any]] = []
        self._tb = None
        if tensorboard:
            require_tensorboard()

    def start(self) -> None:
        """A fresh run: empty log files."""
        (self.run_dir / METRICS).write_text("")
        (self.run_dir / VAL_OUTCOMES).write_text("")

    def log(self, metrics: dict[str, Any]) -> None:
        metrics = _metrics_jsonable(metrics)
        self.history.append(metrics)
        with open(self.run_dir / METRICS, "a", encoding="utf-8") as f:
            f.write(json.dumps(metrics) + "\n")
        if self.tensorboard:
            self._tensorboard(metrics)
        if self.on_step is not None:
            self.on_step(metrics)

    def log_val_outcomes(self, step: int, seeds: list[int], success: list[int]) -> None:
        """Per-episode outcomes (the same seeds every time), for paired before/after comparisons."""
        with open(self.run_dir / VAL_OUTCOMES, "a", encoding="utf-8") as f:
            f.write(json.dumps({"step": step, "seeds": seeds, "success": success}) + "\n")

    def rewind(self, step: int) -> None:
        """Resume: reload the history up to `step`; records after it belong to the lost step and are dropped.

        A crash can cut the last line of either file short, and can fall between a validation's outcomes line and
        its metrics record (the outcomes are written first): a last line that does not parse, and the outcomes of a
        step whose metrics hold no validation, belong to work the checkpoint does not have, and are dropped (the
        resumed run measures them again). A damaged line before the last is CheckpointError naming it: the files
        were changed by something other than a crash."""
        mpath = self.run_dir / METRICS
        vpath = self.run_dir / VAL_OUTCOMES
        # Both files are read (and checked) before either is rewritten: a damaged one leaves both as they were.
        history = [r for r in jsonl_records(mpath) if r[STEP] <= step] if mpath.is_file() else []
        outcomes = jsonl_records(vpath) if vpath.is_file() else None
        self.history = history
        _replace_text(mpath, "".join(json.dumps(r) + "\n" for r in history))
        if outcomes is not None:
            validated = {r[STEP] for r in history if Val.SUCCESS in r}
            kept = [r for r in outcomes if r["step"] <= step and r["step"] in validated]
            _replace_text(vpath, "".join(json.dumps(r) + "\n" for r in kept))

    def close(self) -> None:
        """Flush and close the TensorBoard writer, if one is open: it buffers its events, and one left open may lose
        them when the process exits. A later :meth:`log` opens a new writer (a new events file in the same folder).
        """
        writer, self._tb = self._tb, None
        if writer is not None:
            writer.close()

    def _tensorboard(self, metrics: dict[str, Any]) -> None:
        """Mirror the numeric metrics to TensorBoard (`run.tensorboard = true`, extra `tensorboard`)."""
        if self._tb is None:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(self.run_dir / "tensorboard"))
        for k, v in metrics.items():
            if k != STEP and isinstance(v, (int, float)):
                self._tb.add_scalar(k, v, metrics[STEP])


def record_resume(run_dir: Path, step: int, changes: dict[str, tuple[Any, Any]]) -> None:
    """Append a resume to the run's :data:`RESUME_LOG`: when, from which step, the accepted changes (``{key: {"from",
    "to"}}``), the code it continues with (``provenance.json`` names the code of the run's start only; a resume
    may run another commit, or other uncommitted changes: ``patch`` names their ``code-<digest>.patch`` beside the
    log, ``untracked`` the untracked source files, as in provenance.json) and what rounds its numbers: the CPU
    (``cpu``), the torch thread count in force (``torch_threads``; call it once the resumed run has set it) and the
    CPU decoding step (``decoding``), so a resume on another machine, at another count or with another decoding step
    shows in the run's own files."""
    from datetime import datetime, timezone

    import torch

    from ragen_core.policy.native import decode_path
    from ragen_core.training.provenance import code_state, cpu_arithmetic, cpu_model

    code = code_state(run_dir, name=None)
    rec = {"time": datetime.now(timezone.utc).isoformat(timespec="seconds"), "step": step,
           "changes": {k: {"from": a, "to": b} for k, (a, b) in changes.items()},
           "commit": code.pop("commit"), "dirty": code.pop("dirty"), "torch": torch.__version__,
           "cpu": cpu_model(), "cpu_arithmetic": cpu_arithmetic(), "torch_threads": torch.get_num_threads(),
           "decoding": decode_path(), **code}
    with open(Path(run_dir) / RESUME_LOG, "a", encoding="utf-8") as f:
        f.write(json.dumps(rec) + "\n")


def _replace_text(path: Path, text: str) -> None:
    """Write `path` whole through a temporary file and a rename: a resume stopped while rewriting its logs (Ctrl-C,
    a full disk) leaves the file as it was, never truncated (``write_text`` empties it first)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def jsonl_records(path: Path) -> list[dict[str, Any]]:
    """The records of a JSON-lines file the run appends to, for a resume: a last line that does not parse (cut
    short by a crash) is left out; any other line that is not UTF-8 or does not parse, or is not a record (a JSON
    object with an integer ``step``, as the run writes every one), is CheckpointError naming it."""
    from ragen_core.training.checkpoint import CheckpointError

    text = path.read_bytes().decode("utf-8", errors="surrogateescape")  # a damaged byte is named by its line
    lines = [(i, line) for i, line in enumerate(text.splitlines(), 1) if line.strip()]
    records = []
    for k, (number, line) in enumerate(lines):
        try:
            line.encode("utf-8")  # an undecodable byte became a lone surrogate, which does not encode
            rec = json.loads(line)
        except (ValueError, RecursionError):  # UnicodeEncodeError is a ValueError
            if k == len(lines) - 1:  # the record being written when the run stopped
                break
            raise CheckpointError(f"{path} line {number} is not JSON; the file was changed since the run wrote it "
                                  "(restore it, or start a new run)") from None
        step = rec.get(STEP) if isinstance(rec, dict) else None
        if not isinstance(step, int) or isinstance(step, bool):
            raise CheckpointError(f"{path} line {number} is not a record of this run (a JSON object with an "
                                  f"integer \"step\"): {line[:60]!r}")
        records.append(rec)
    return records


def _series(history: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for rec in history:
        v = rec.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            xs.append(int(rec[STEP]))
            ys.append(float(v))
    return xs, ys


#: The largest magnitude a plotted point may have: matplotlib cannot lay out an axis whose range reaches float64's
#: limit (values of about 1e308 raised "arange: cannot compute length" at the end of a run, before its summary).
_PLOT_MAX = 1e300


def _drawable(history: list[dict[str, Any]], key: str, label: str) -> tuple[list[int], list[float], str]:
    """The curve of `key` as plotted: one point per record that holds `key`, in record order. A null (an undefined
    or non-finite value, :class:`ragen_core.training.metrics.Metric`) or a value beyond +-:data:`_PLOT_MAX` is a NaN
    point, which matplotlib draws as a break in the line: the line never joins across a step without a value. A
    record without `key` (a metric measured every k steps) is no point at all. `label` says how many were not drawn
    (the metrics and the summary keep them); no curve when no value was drawn and none was left out."""
    xs: list[int] = []
    ys: list[float] = []
    null = far = 0
    for rec in history:
        if key not in rec:
            continue
        v = rec[key]
        finite = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        if finite and abs(v) > _PLOT_MAX:
            far += 1
        elif not finite:
            null += 1
        xs.append(int(rec[STEP]))
        ys.append(float(v) if finite and abs(v) <= _PLOT_MAX else math.nan)
    notes = [f"{null} null step(s): gaps"] if null else []
    if far:
        notes.append(f"{far} value(s) beyond +-{_PLOT_MAX:.0e} not drawn")
    if notes:
        label = f"{label} ({'; '.join(notes)})"
    return xs, ys, label


def _legend_outside(ax: Any) -> None:
    """The legend to the right of the axes, never over the curves."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(handles, labels, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)


def _no_data(ax: Any, labels: list[str]) -> None:
    """A panel none of whose curves has a logged value (e.g. the in-batch MI of a run shorter than ``mi.every``)."""
    ax.text(0.5, 0.5, "no value logged in this run: " + ", ".join(labels), ha="center", va="center", fontsize=8,
            color="tab:gray", transform=ax.transAxes)


def _panels(plt: Any, rows: int, title: str) -> tuple[Any, Any]:
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(rows, 1, figsize=(7.5, 1.9 * rows + 0.6), sharex=True, squeeze=False)
    axes = [a[0] for a in axes]
    axes[0].set_title(title)
    axes[-1].set_xlabel("RL step")
    axes[-1].xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole: no tick at step 1.25
    return fig, axes


def _save(fig: Any, path: Path, plt: Any) -> Path:
    ax = fig.axes[-1]
    lo, hi = ax.get_xlim()
    if hi - lo < 2:  # one step only: matplotlib's +-5% margin would be ticked 0.95, 0.975, ...; show whole steps
        ax.set_xlim((lo + hi) / 2 - 1, (lo + hi) / 2 + 1)
    fig.tight_layout()
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path


#: y label and limits of a panel that shows shares.
_SHARE = ("share (0-1)", (-0.02, 1.02))
#: The figures of :func:`write_plots`: file -> (title, panels). A panel is (y label, y limits or None, curves), a
#: curve (metric, legend label, matplotlib style); a curve without data is left out.
_FIGURES: dict[str, tuple[str, list[tuple[Any, ...]]]] = {
    "success.png": ("Success", [
        ("success rate (0-1)", (-0.02, 1.02), [(Rollout.SUCCESS, "training rollouts (sampled)", {}),
                                               (Val.SUCCESS, "validation (held out)", {"marker": "o"})]),
    ]),
    "entropy_mi.png": ("Entropy and input dependence (in-batch)", [
        ("nats / token", None, [(Collapse.TOKEN_ENTROPY, "token entropy (trained tokens, kept groups)", {}),
                                (Collapse.COND_ENTROPY_EST, "H(Z|X) estimate (first turn, all groups)",
                                 {"marker": "s"})]),
        ("nats / trace", None, [(Collapse.MI_SEQ_EST, "MI-Seq-Est", {"marker": "o", "color": "tab:red"})]),
        (*_SHARE, [(Collapse.RETRIEVAL_ACC, "Retrieval-Acc", {"marker": "^", "color": "tab:orange"}),
                   (Collapse.RETRIEVAL_CHANCE, "chance", {"linestyle": ":", "color": "tab:gray"})]),
    ]),
    "filter.png": ("Reward variance and filtering", [
        ("reward^2", None, [(Filter.RV_MEAN, "mean per-group reward variance", {})]),
        ("ratio", None, [(Filter.RV_HETEROGENEITY, "RV heterogeneity (std / mean)", {"color": "tab:purple"})]),
        (*_SHARE, [(Filter.KEPT_FRACTION, "groups kept", {"color": "tab:green"}),
                   (Filter.ZERO_FRACTION, "groups with zero variance", {"linestyle": ":", "color": "tab:gray"})]),
    ]),
}


def write_plots(run_dir: Path, history: list[dict[str, Any]]) -> list[Path]:
    """success.png, entropy_mi.png, filter.png (:data:`_FIGURES`; and probe.png with the probe) from the metrics
    history: one quantity per axis (one panel each, with its unit), legends beside the axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for name, (title, panels) in _FIGURES.items():
        fig, axes = _panels(plt, len(panels), title)
        for ax, (ylabel, ylim, curves) in zip(axes, panels):
            absent = []
            for key, label, style in curves:
                xs, ys, shown = _drawable(history, key, label)
                if xs:  # a curve whose every point was left out still says so in the legend
                    # a dot on every point: a one-point curve, or a point between two gaps, is no line at all
                    ax.plot(xs, ys, label=shown, **{"marker": ".", **style})
                else:
                    absent.append(label)
            if len(absent) == len(curves):  # say so, rather than draw empty axes that read as a plotting bug
                _no_data(ax, absent)
            ax.set_ylabel(ylabel)
            if ylim is not None:
                ax.set_ylim(*ylim)
            _legend_outside(ax)
        paths.append(_save(fig, run_dir / name, plt))
    if _series(history, Probe.RETRIEVAL_MARGIN)[0]:
        paths.append(_probe_plot(run_dir, history, plt))
    return paths


def _probe_plot(run_dir: Path, history: list[dict[str, Any]], plt: Any) -> Path:
    """probe.png: the held-out probe's input dependence (margin, MI-Seq / log N) above its entropies relative to
    step 0, with the +-25% band the collapse check uses (ragen_core.math.collapse)."""
    fig, axes = _panels(plt, 2, "Held-out probe: input dependence vs entropy")
    for key, label, style in ((Probe.RETRIEVAL_MARGIN, "retrieval margin over chance", "o-"),
                              (Probe.MI_SEQ_NORM, "MI-Seq-Est / log N", "s-")):
        xs, ys, label = _drawable(history, key, label)
        axes[0].plot(xs, ys, style, label=label)
    axes[0].set_ylim(-0.05, 1.05)
    axes[0].set_ylabel("0 = chance, 1 = ceiling")
    for key, label, color in ((Probe.TOKEN_ENTROPY, "token entropy", "tab:gray"),
                              (Probe.COND_ENTROPY_EST, "H(Z|X)", "tab:cyan")):
        xs, rel, label = _relative(history, key, label)
        if xs:
            axes[1].plot(xs, rel, "--", marker=".", color=color, label=label)
    axes[1].axhspan(0.75, 1.25, color="tab:gray", alpha=0.1, label="+-25% band")
    axes[1].set_ylabel("relative to step 0")
    for ax in axes:
        _legend_outside(ax)
    return _save(fig, run_dir / "probe.png", plt)


def _relative(history: list[dict[str, Any]], key: str, label: str) -> tuple[list[int], list[float], str]:
    """`key`'s probe curve over its step-0 value, gaps kept (:func:`_drawable`). When step 0 has no positive value the
    reference is the first point that has one, and `label` names its step; no curve when no point has one."""
    xs, ys, label = _drawable(history, key, label)
    ref = next((i for i, y in enumerate(ys) if y > 0), None)  # NaN > 0 is False
    if ref is None:
        return [], [], label
    if xs[ref] != 0:
        label = f"{label} (over step {xs[ref]}: step 0 has no value)"
    rel = [y / ys[ref] for y in ys]  # a ratio can reach the limit its values did not (1e200 / 1e-200)
    return xs, [y if math.isfinite(y) and abs(y) <= _PLOT_MAX else math.nan for y in rel], label


def _first_last(history: list[dict[str, Any]], key: str) -> tuple[float | None, float | None]:
    _, ys = _series(history, key)
    return (ys[0], ys[-1]) if ys else (None, None)


def _number(v: Any) -> float | None:
    """`v` as a finite number, or None (null, NaN, text: a record the run did not write that way)."""
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    return None


def _fmt(v: Any, digits: int = 3) -> str:
    n = _number(v)
    return "n/a" if n is None else f"{n:.{digits}f}"


def _count(v: Any) -> str:
    """A count of a record (probe prompts, samples) as the summary shows it: ``?`` when it is not a number."""
    n = _number(v)
    return "?" if n is None else str(int(n))


def task_gradient_direction(corr: list[float], level: float = 0.95, flat: int = 0) -> str:
    """The report's line on which way the task gradient pushed input dependence, from the probe measurements'
    within-prompt correlations of a trace's return with its pointwise MI: a direction is named only when the
    t-interval of their mean excludes 0 (with one measurement, none is). The measurements of one run are treated as
    independent, which they are not (each probe follows the last by a few steps), so the interval is optimistic.

    `flat`: the measurements left out of `corr` because nothing varied within any prompt (every trace of a prompt
    earned the same return, or scored the same PMI): their correlation is logged as 0 by convention, not measured,
    and averaging those zeros in read as a precise zero ("+0.000, interval [+0.000, +0.000]")."""
    left_out = (f"; {flat} measurement{'s' if flat != 1 else ''} without within-prompt variation of return or "
                "pointwise MI left out (nothing to correlate)") if flat else ""
    if not corr:  # every one flat: their zeros are conventions, so no interval is formed from them
        return (f"**Task-gradient direction**: not measured: mean over {flat} probe measurement"
                f"{'s' if flat != 1 else ''}: +0.000 by convention only, none had within-prompt variation of both "
                "return and pointwise MI (every trace of a prompt earned the same, or scored the same PMI), so there "
                "was no task-gradient signal to read a direction from.")
    mean, lo, hi = mean_ci(corr, level)
    if len(corr) < 2:
        way, interval = "one measurement: no interval, so no direction is read", ""
    else:
        interval = (f", {level:.0%} interval [{lo:+.3f}, {hi:+.3f}] (the measurements of one run taken as "
                    "independent, so it is optimistic)")
        way = ("the traces that depend more on their input earned more: the task gradient raised the MI" if lo > 0
               else "the traces that depend less on their input earned more: the task gradient favoured a template"
               if hi < 0 else "no direction shown: the interval contains 0")
    return (f"**Task-gradient direction**: within-prompt correlation between a trace's return and its pointwise MI, "
            f"mean over {len(corr)} probe measurement{'s' if len(corr) != 1 else ''}: {mean:+.3f}{interval} "
            f"({way}){left_out}.")


def _probe_size(history: list[dict[str, Any]], step: int, cfg: TrainConfig | None) -> tuple[int, int, float] | None:
    """``(P, G, chance)`` of the probe measurement at `step`: its ``probe/n_prompts``, ``probe/group_size`` and
    ``probe/retrieval_chance``, or where a count is not recorded the run's ``mi.probe_prompts`` /
    ``mi.probe_group_size`` (chance 1/P); None when neither says."""
    rec = next((r for r in history if r.get(STEP) == step and _number(r.get(Probe.RETRIEVAL_MARGIN)) is not None),
               {})
    p, g = _number(rec.get(Probe.N_PROMPTS)), _number(rec.get(Probe.GROUP_SIZE))
    if (p is None or g is None) and cfg is not None:
        p, g = float(cfg.mi.probe_prompts), float(cfg.mi.probe_group_size)
    if p is None or g is None or p < 2 or g < 1 or p != int(p) or g != int(g):
        return None
    chance = _number(rec.get(Probe.RETRIEVAL_CHANCE))
    return int(p), int(g), (1.0 / p if chance is None or not 0 <= chance < 1 else chance)


def collapse_line(verdict: Any, size: tuple[int, int, float] | None) -> str:
    """The summary's collapse check: the detector's yes / no, or "unresolved" when the probe of `size` ``(P, G,
    chance)`` is too small to tell its drop from sampling noise (:func:`ragen_core.math.collapse.probe_resolution`).
    A reference margin at or below the detector's ``min_start`` has no drop to resolve: its "no" stands."""
    import inspect

    from ragen_core.math.collapse import detect_collapse, probe_resolution

    defaults = inspect.signature(detect_collapse).parameters
    drop, min_start = defaults["drop"].default, defaults["min_start"].default
    head = ("**Collapse check** (the retrieval margin down >= 50% from its peak with both entropies within +-25% of "
            "their values there, no entropy alarm before the drop): ")
    said = f"{'yes' if verdict.collapsed else 'no'}: {verdict.reason}"
    if not verdict.margin_reference > min_start:
        return f"{head}{said}."
    if size is None:
        return f"{head}{said} (the probe's size is not recorded: whether it can resolve the drop was not checked)."
    res = probe_resolution(verdict.margin_reference, size[0], size[1], drop=drop, chance=size[2])
    probe = f"{res.n_traces} traces ({res.n_prompts} prompts x {res.group_size} samples)"
    noise = (f"the {drop:.0%} fall from the reference margin {res.margin_reference:.3f} is {res.needed_fall:.3f}, "
             f"against a sampling standard error of {res.se_difference:.3f} for the difference of two margins of "
             f"this probe's {probe}")
    if res.resolved:
        return f"{head}{said}. Probe resolution: {noise}, more than {res.z:g} of them."
    more = "" if res.traces_needed is None else (
        f"; a probe of about {res.traces_needed} traces would resolve it (e.g. mi.probe_group_size = "
        f"{res.group_size_needed} at {res.n_prompts} prompts)")
    return (f"{head}unresolved: the probe is too small to tell: {noise}, not more than {res.z:g} of them{more}. "
            f"The detector alone read {said}.")


def _probe_summary(history: list[dict[str, Any]], cfg: TrainConfig | None = None) -> list[str]:
    """The held-out probe's start/end table and the collapse verdict (ragen_core.math.collapse), marked unresolved
    when the probe (its recorded size, else `cfg`'s) is too small to tell the drop from noise."""
    from ragen_core.math.collapse import collapse_from_history

    rows = [r for r in history if isinstance(r.get(Probe.RETRIEVAL_MARGIN), (int, float))]
    first, last = rows[0], rows[-1]
    out = [f"## Held-out MI probe ({_count(first.get(Probe.N_PROMPTS, 0))} prompts x "
           f"{_count(first.get(Probe.GROUP_SIZE, 0))} samples, steps "
           f"{int(first[STEP])}..{int(last[STEP])})", "",
           "| metric | start | end | chance | ceiling |", "|---|---|---|---|---|"]
    for key, label, chance, ceiling in (
            (Probe.RETRIEVAL_ACC, "Retrieval-Acc", _fmt(first.get(Probe.RETRIEVAL_CHANCE)), "1"),
            (Probe.RECALL_AT_8, "Recall@8", _fmt(first.get(Probe.RECALL_AT_8_CHANCE)), "1"),
            (Probe.RETRIEVAL_MARGIN, "retrieval margin over chance", "0", "1"),
            (Probe.MI_SEQ_EST, "MI-Seq-Est (nats)", "0", _fmt(first.get(Probe.MI_UPPER_BOUND))),
            (Probe.TOKEN_ENTROPY, "token entropy (nats)", "", ""),
            (Probe.COND_ENTROPY_EST, "H(Z\\|X) est. (nats/token)", "", "")):
        out.append(f"| {label} | {_fmt(first.get(key))} | {_fmt(last.get(key))} | {chance} | {ceiling} |")
    # Which way the task gradient pushed input dependence (ragen_core.training.probe.pmi_return_association). A
    # measurement whose covariance and correlation are both exactly 0 had no within-prompt variation of return or
    # of PMI (the correlation is 0 by convention there): it carries no direction, so it is counted, not averaged.
    corr, flat = [], 0
    for r in rows:
        c, cov = _number(r.get(Probe.PMI_RETURN_CORR)), _number(r.get(Probe.PMI_RETURN_COV))
        if c is None:
            continue
        if c == 0.0 and cov == 0.0:
            flat += 1
        else:
            corr.append(c)
    if corr or flat:
        out += ["", task_gradient_direction(corr, flat=flat)]
    verdict = collapse_from_history(history)
    if verdict is not None:
        out += ["", collapse_line(verdict, _probe_size(history, verdict.reference_step, cfg))]
    return out


def _validation_intervals(history: list[dict[str, Any]], episodes: int, level: float = 0.95) -> str:
    """The line under the table that gives the validation success its sample size: each value is a share of
    ``eval.episodes`` episodes (k = round(success * n) of them succeeded), shown with its Wilson interval, so that a
    start / end pair from a few episodes (2 of 8 -> 4 of 8) is not read as a change. "" without a validation."""
    from ragen_core.math.stats import wilson_interval

    a, b = _first_last(history, Val.SUCCESS)
    if a is None or b is None or not isinstance(episodes, int) or episodes < 1:
        return ""

    def shown(v: float) -> str:
        lo, hi = wilson_interval(min(max(round(v * episodes), 0), episodes), episodes, level)
        return f"{v:.3f} [{lo:.3f}, {hi:.3f}]"

    return (f"Validation success, a share of `eval.episodes` = {episodes} episode{'s' if episodes != 1 else ''}: "
            f"start {shown(a)}, end {shown(b)} ({level:.0%} Wilson intervals; the per-episode outcomes, on the same "
            f"seeds each time, are in `{VAL_OUTCOMES}` for a paired comparison).")


def _run_files(run_dir: Path, summary: Path) -> str:
    """The run folder's files as the summary lists them: every file it holds now (what the run wrote, the plots
    included), the latest checkpoint, and the summary itself; read off the folder, so the list cannot go stale."""
    names = {p.name for p in run_dir.iterdir() if p.is_file()} | {summary.name}
    if (run_dir / "checkpoints" / "latest.pt").is_file():
        names.add("checkpoints/latest.pt")
    return ", ".join(f"`{name}`" for name in sorted(names))


def write_summary(run_dir: Path, cfg: TrainConfig, history: list[dict[str, Any]], stopped: str = "") -> Path:
    """summary.md: what was run, the numbers at start and end, where the files are.

    `stopped` (why the run stopped early: the time limit, the empty-step rule) is shown only when fewer than
    ``run.steps`` steps ran: a limit reached on the last step stopped nothing."""
    steps = [r[STEP] for r in history if r.get(STEP, 0) > 0]
    if steps and max(steps) >= cfg.run.steps:
        stopped = ""
    lines = [f"# Run `{cfg.run.name}`", "",
             f"- env `{cfg.env.id}`, model `{cfg.model.path}`, "
             f"{cfg.rollout.groups} groups x {cfg.rollout.group_size} rollouts, up to {cfg.rollout.max_turns} "
             f"turn{'s' if cfg.rollout.max_turns != 1 else ''} "
             f"({cfg.rollout.context} context)",
             f"- algorithm `{cfg.algo.name}`: {get_algorithm(cfg.algo.name).describe(cfg.algo)}",
             f"- filter: {'off' if not cfg.filter.enabled else f'{cfg.filter.spec.strategy} {cfg.filter.spec.value}'}; "
             f"steps run: {max(steps) if steps else 0} of {cfg.run.steps}" + (f"; {stopped}" if stopped else ""),
             f"- empty (skipped) steps: {int(sum(r.get(Filter.SKIPPED, 0) or 0 for r in history))}", "",
             "| metric | start | end |", "|---|---|---|"]
    for key, label in ((Val.SUCCESS, "validation success"), (Rollout.SUCCESS, "train success"),
                       (Rollout.FORMAT_VALID, "train format-valid rate"), (Rollout.RETURN, "train mean return"),
                       (Collapse.TOKEN_ENTROPY, "token entropy (nats, trained tokens)"),
                       (Collapse.COND_ENTROPY_EST, "H(Z\\|X) estimate"), (Collapse.MI_EST, "MI-Est"),
                       (Collapse.MI_SEQ_EST, "MI-Seq-Est"), (Collapse.RETRIEVAL_ACC, "Retrieval-Acc"),
                       (Filter.KEPT_FRACTION, "kept fraction"), (Filter.RV_HETEROGENEITY, "RV heterogeneity")):
        a, b = _first_last(history, key)
        lines.append(f"| {label} | {_fmt(a)} | {_fmt(b)} |")
    # Each row's start is its own first measurement, and they differ: say which, so that the rows are not read as
    # one moment.
    lines += ["", "Start / end: each metric's first and last logged (non-null) value, so the starts are not one "
              "moment: validation's is step 0 (before the first RL step, after any warm start), a training-batch "
              "metric's the first step that logged it (step 1, or the first that updated or had reward variance), "
              "the in-batch MI's its first check (`mi.every`)."]
    val_line = _validation_intervals(history, cfg.eval.episodes)
    if val_line:
        lines += ["", val_line]
    regimes = [r[Collapse.REGIME] + (" (unresolved)" if r.get(Collapse.REGIME_RESOLVED) == 0.0 else "")
               for r in history if isinstance(r.get(Collapse.REGIME), str)]
    if regimes:
        lines += ["", f"Regime at the first / last MI check: {regimes[0]} / {regimes[-1]} (the four regimes of "
                  "docs/science.md section 1, read off the in-batch proxies: high or low H(Z|X) x high or low "
                  "input dependence; compressed reasoning = low within-input diversity, still input-dependent, "
                  "the normal end state of a policy that learned its task; \"unresolved\": too few prompts to "
                  "tell the MI side from chance, `collapse/regime_resolved`)."]
    if _series(history, Probe.RETRIEVAL_MARGIN)[0]:
        lines += ["", *_probe_summary(history, cfg)]
    path = run_dir / "summary.md"
    lines += ["", f"Files: {_run_files(run_dir, path)}."]
    path.write_text("\n".join(lines) + "\n")
    return path


def markdown_to_text(text: str) -> str:
    """A Markdown summary as terminal text: tables aligned in columns (separator rows dropped), ``\\|`` unescaped,
    headings without ``#``, bold and code marks removed."""
    out: list[str] = []
    table: list[list[str]] = []

    def flush() -> None:
        if not table:
            return
        widths = [max(len(row[i]) if i < len(row) else 0 for row in table) for i in range(max(map(len, table)))]
        for row in table:
            out.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
        table.clear()

    for line in text.splitlines():
        plain = line.replace("**", "").replace("`", "")
        if plain.startswith("|"):
            cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", plain.strip())[1:-1]]
            if all(set(c) <= set("-: ") for c in cells):
                continue
            table.append(cells)
            continue
        flush()
        out.append(re.sub(r"^#+\s*", "", plain).replace("\\|", "|"))
    flush()
    return "\n".join(out) + "\n"
