"""The template-collapse signature of a run, decided from its held-out probe curves (docs/collapse.md).

Template collapse (docs/science.md section 1) is a fall of the input dependence I(X;Z) while the within-input
diversity H(Z|X) and the token entropy that dashboards watch stay where they were. On the probe's curves
(ragen_core.training.probe, measured at step 0 and every k steps) the signature is, with ``drop = 0.5`` and
``band = 0.25`` by default:

1. **MI drop**: the retrieval margin over chance, ``m_t = (acc_t - chance) / (1 - chance)``, falls to at most
   ``(1 - drop)`` times its *reference* value and stays there at the next measurement (or it is the last one):
   the first such step is the *drop step*. The reference is the highest margin before it (``reference="peak"``,
   the default: the start of the fall, since RL often raises the MI first and loses it later) or the step-0
   margin (``reference="start"``). A reference margin ``<= min_start`` has nothing to lose.
2. **Entropy flat**: token entropy and H(Z|X) (per token) stay within ``[1 - band, 1 + band]`` of their values at
   the reference measurement, at every measurement from it up to and including the drop step. The first
   measurement outside the band is that series' *alarm step*; an alarm at or before the drop step means the MI
   fell because the text changed its entropy (noise or compression), not by template collapse.

:func:`detect_collapse` is a pure function of the curves, so it can be tested on synthetic curves with a known
answer and applied to any run's ``metrics.jsonl`` (:func:`collapse_from_history`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["CollapseVerdict", "HarmfulVerdict", "detect_collapse", "detect_harmful_collapse", "collapse_from_history",
           "PROBE_KEYS"]

#: The probe metrics the verdict reads from a run's history.
PROBE_KEYS = {"margin": "probe/retrieval_margin", "token_entropy": "probe/token_entropy",
              "cond_entropy": "probe/cond_entropy_est"}


@dataclass(frozen=True)
class CollapseVerdict:
    """What :func:`detect_collapse` found (steps are training steps; None = never)."""

    collapsed: bool
    reason: str
    margin_start: float
    margin_min: float
    margin_end: float
    drop_step: int | None
    entropy_alarm_step: int | None
    cond_entropy_alarm_step: int | None
    #: token entropy and H(Z|X) at the drop step (or at the end without a drop) over their reference values
    entropy_ratio: float
    cond_entropy_ratio: float
    #: the measurement the fall is measured from (step 0, or the margin's peak before the drop) and its margin
    reference_step: int = 0
    margin_reference: float = math.nan

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _alarm(steps: Sequence[int], series: Sequence[float], band: float, ref: int) -> int | None:
    """The first step from index `ref` on whose value leaves ``[1 - band, 1 + band] * series[ref]``."""
    base = series[ref]
    for s, v in zip(steps[ref:], series[ref:]):
        if not (base * (1 - band) <= v <= base * (1 + band)):
            return int(s)
    return None


def _find_drop(margin: Sequence[float], drop: float, min_start: float, reference: str) -> tuple[int | None, int]:
    """(index of the drop or None, index of its reference): the first i >= 1 with margin[i] and margin[i+1] (if
    any) at most (1 - drop) times the reference margin, the reference being index 0 (``"start"``) or the highest
    margin before i (``"peak"``, its first occurrence)."""
    n = len(margin)
    for i in range(1, n):
        ref = 0 if reference == "start" else max(range(i), key=lambda j: (margin[j], -j))
        if margin[ref] <= min_start:
            continue
        level = (1 - drop) * margin[ref]
        if margin[i] <= level and (i == n - 1 or margin[i + 1] <= level):
            return i, ref
    return None, (0 if reference == "start" else max(range(n), key=lambda j: (margin[j], -j)))


def detect_collapse(steps: Sequence[int], margin: Sequence[float], token_entropy: Sequence[float],
                    cond_entropy: Sequence[float], drop: float = 0.5, band: float = 0.25,
                    min_start: float = 0.05, reference: str = "peak") -> CollapseVerdict:
    """Decide the template-collapse signature from aligned probe curves (see the module docstring).

    Args:
        steps: training steps of the measurements, increasing, the first being the start (step 0).
        margin: retrieval margin over chance at those steps (0 = chance, 1 = perfect retrieval).
        token_entropy: mean token entropy (nats, > 0) at those steps.
        cond_entropy: H(Z|X) estimate (nats per token, > 0) at those steps.
        drop: relative fall of the margin that counts as the MI drop (0.5 = halved).
        band: relative band the entropies must stay in (0.25 = +-25%).
        min_start: the smallest reference margin that counts as input-dependent.
        reference: where the fall is measured from: ``"peak"`` (default: the highest margin before the drop, the
            start of the fall; RL often first raises the MI, then loses it) or ``"start"`` (step 0). The entropy
            band is taken around the entropies at the same reference measurement.
    """
    n = len(steps)
    if n < 2 or not (len(margin) == len(token_entropy) == len(cond_entropy) == n):
        raise ValueError(f"need >= 2 aligned measurements; got steps {n}, margin {len(margin)}, "
                         f"token_entropy {len(token_entropy)}, cond_entropy {len(cond_entropy)}")
    if any(b <= a for a, b in zip(steps, steps[1:])):
        raise ValueError(f"steps must increase; got {list(steps)}")
    values = [*margin, *token_entropy, *cond_entropy]
    if not all(math.isfinite(v) for v in values):
        raise ValueError("the curves must be finite")
    if min(token_entropy) <= 0 or min(cond_entropy) <= 0:
        raise ValueError("the entropies must be > 0 (a band around 0 is empty)")
    if not (0 < drop < 1 and 0 < band < 1):
        raise ValueError(f"drop and band must be in (0, 1); got {drop}, {band}")
    if reference not in ("peak", "start"):
        raise ValueError(f"reference must be 'peak' or 'start'; got {reference!r}")
    drop_idx, ref = _find_drop(margin, drop, min_start, reference)
    m_ref = float(margin[ref])
    ent_alarm = _alarm(steps, token_entropy, band, ref)
    cond_alarm = _alarm(steps, cond_entropy, band, ref)
    at = drop_idx if drop_idx is not None else n - 1
    verdict = dict(margin_start=float(margin[0]), margin_min=float(min(margin)), margin_end=float(margin[-1]),
                   drop_step=None if drop_idx is None else int(steps[drop_idx]),
                   entropy_alarm_step=ent_alarm, cond_entropy_alarm_step=cond_alarm,
                   entropy_ratio=float(token_entropy[at] / token_entropy[ref]),
                   cond_entropy_ratio=float(cond_entropy[at] / cond_entropy[ref]),
                   reference_step=int(steps[ref]), margin_reference=m_ref)
    where = "its start" if reference == "start" else "its peak"
    if max(margin[: (drop_idx or n)]) <= min_start:
        return CollapseVerdict(False, f"no input dependence to lose (margin <= {min_start} at {where})",
                               **verdict)
    if drop_idx is None:
        low = min(range(ref, n), key=lambda j: (margin[j], j))
        # a dip that recovered at the next measurement is not a drop (a dip at the last one would have been)
        if low + 1 < n and m_ref > min_start and margin[low] <= (1 - drop) * m_ref:
            return CollapseVerdict(False, f"no MI drop: the margin fell to {margin[low]:.3f} at step {steps[low]} "
                                   f"(at most {(1 - drop):.0%} of {where}, {m_ref:.3f} at step {steps[ref]}) but "
                                   f"was back to {margin[low + 1]:.3f} at the next measurement", **verdict)
        return CollapseVerdict(False, f"no MI drop: the margin stayed above {(1 - drop):.0%} of {where} "
                               f"({m_ref:.3f} at step {steps[ref]} -> min after it "
                               f"{margin[low]:.3f})", **verdict)
    drop_step = int(steps[drop_idx])
    early = [(name, s) for name, s in (("token entropy", ent_alarm), ("H(Z|X)", cond_alarm))
             if s is not None and s <= drop_step]
    if early:
        what = ", ".join(f"{name} left the +-{band:.0%} band at step {s}" for name, s in early)
        return CollapseVerdict(False, f"MI fell from {m_ref:.3f} (step {steps[ref]}) by step {drop_step}, but "
                               f"{what}: an entropy change, not a template", **verdict)
    return CollapseVerdict(True, f"template collapse: the retrieval margin fell from {m_ref:.3f} (step "
                           f"{steps[ref]}) to {float(margin[drop_idx]):.3f} by step {drop_step} while token "
                           f"entropy and H(Z|X) stayed within +-{band:.0%} of their step-{steps[ref]} values "
                           f"({verdict['entropy_ratio']:.2f}x, {verdict['cond_entropy_ratio']:.2f}x)", **verdict)


def collapse_from_history(history: Sequence[Mapping[str, Any]], **kwargs: Any) -> CollapseVerdict | None:
    """:func:`detect_collapse` on the probe measurements of a run's metrics history (None without a probe or
    with fewer than 2 measurements). Keyword arguments go to :func:`detect_collapse`."""
    rows = [r for r in history if all(isinstance(r.get(k), (int, float)) for k in PROBE_KEYS.values())]
    if len(rows) < 2:
        return None
    return detect_collapse([int(r["step"]) for r in rows], [float(r[PROBE_KEYS["margin"]]) for r in rows],
                           [float(r[PROBE_KEYS["token_entropy"]]) for r in rows],
                           [float(r[PROBE_KEYS["cond_entropy"]]) for r in rows], **kwargs)


@dataclass(frozen=True)
class HarmfulVerdict:
    """What :func:`detect_harmful_collapse` found: the three conditions and the numbers behind them."""

    harmful: bool
    reason: str
    #: (1) the margin fell by `drop` from its peak and stayed there (:func:`detect_collapse`'s drop rule)
    mi_fell: bool
    #: (2) validation success at the end is no higher than at the evaluation nearest the margin's peak
    success_not_higher: bool
    #: (3) token entropy and H(Z|X) stayed within the band of their values at the peak through the end
    entropy_flat_to_end: bool
    peak_step: int
    drop_step: int | None
    success_at_peak: float
    success_end: float
    entropy_ratio_range: tuple[float, float]
    cond_entropy_ratio_range: tuple[float, float]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def detect_harmful_collapse(steps: Sequence[int], margin: Sequence[float], token_entropy: Sequence[float],
                            cond_entropy: Sequence[float], val_steps: Sequence[int], val_success: Sequence[float],
                            drop: float = 0.5, band: float = 0.25, min_start: float = 0.05) -> HarmfulVerdict:
    """The paper's template collapse, with the three conditions of a collapse that emerges and hurts:

    1. the probe's retrieval margin falls to at most ``(1 - drop)`` of its peak (the highest margin before the
       fall) and stays there at the next measurement (:func:`detect_collapse`, ``reference="peak"``);
    2. validation success at the end of the run is no higher than at the evaluation nearest the margin's peak
       (ties: the earlier one): input dependence and success fall together, as in the paper;
    3. token entropy and H(Z|X) stay within ``[1 - band, 1 + band]`` of their values at the peak at every probe
       measurement from the peak **to the end of the run** (not only to the drop): the collapse stays invisible
       to entropy.

    ``harmful`` is all three. Curves as :func:`detect_collapse`; `val_steps` / `val_success` are the validation
    evaluations (step 0 included)."""
    if not val_steps or len(val_steps) != len(val_success):
        raise ValueError("need at least one validation evaluation, with one success value per step")
    base = detect_collapse(steps, margin, token_entropy, cond_entropy, drop=drop, band=band, min_start=min_start,
                           reference="peak")
    peak = base.reference_step
    ref = list(steps).index(peak)
    ent = [v / token_entropy[ref] for v in token_entropy[ref:]]
    cond = [v / cond_entropy[ref] for v in cond_entropy[ref:]]
    flat = all(1 - band <= v <= 1 + band for v in (*ent, *cond))
    nearest = min(range(len(val_steps)), key=lambda i: (abs(val_steps[i] - peak), val_steps[i]))
    s_peak, s_end = float(val_success[nearest]), float(val_success[-1])
    fell = base.drop_step is not None
    not_higher = s_end <= s_peak
    harmful = fell and not_higher and flat
    parts = [(f"the margin fell to at most {1 - drop:.0%} of its peak" if fell else base.reason),
             (f"success {s_peak:.3f} at step {val_steps[nearest]} -> {s_end:.3f} at the end"),
             ("entropies within the band to the end" if flat else
              f"entropies left the band (token {min(ent):.2f}x-{max(ent):.2f}x, H(Z|X) {min(cond):.2f}x-"
              f"{max(cond):.2f}x of the peak's)")]
    return HarmfulVerdict(harmful=harmful, reason="; ".join(parts), mi_fell=fell, success_not_higher=not_higher,
                          entropy_flat_to_end=flat, peak_step=int(peak), drop_step=base.drop_step,
                          success_at_peak=s_peak, success_end=s_end,
                          entropy_ratio_range=(min(ent), max(ent)), cond_entropy_ratio_range=(min(cond), max(cond)))
