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

__all__ = ["CollapseVerdict", "HarmfulVerdict", "ProbeResolution", "detect_collapse", "detect_harmful_collapse",
           "collapse_from_history", "finite_number", "probe_resolution", "PROBE_KEYS", "RESOLUTION_Z"]

#: The probe metrics the verdict reads from a run's history.
PROBE_KEYS = {"margin": "probe/retrieval_margin", "token_entropy": "probe/token_entropy",
              "cond_entropy": "probe/cond_entropy_est"}


@dataclass(frozen=True)
class CollapseVerdict:
    """What :func:`detect_collapse` found (steps are training steps; None = never). ``margin_start`` and
    ``margin_end`` are the margins of the curves' first and last measurements (``start_step``; the last is the
    curves' last step)."""

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
    #: the step of the curves' first measurement, where ``margin_start`` is read: step 0 only when the curves
    #: start there (a caller that left out a step-0 measurement with a missing value starts later)
    start_step: int = 0

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
        steps: training steps of the measurements, increasing; the first is the start (``start_step``: step 0
            when the curves have it).
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
                   reference_step=int(steps[ref]), margin_reference=m_ref, start_step=int(steps[0]))
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


def finite_number(v: Any) -> bool:
    """Whether `v` is a measured value: an int or float (not a bool) that is finite (not None, NaN or an
    infinity). The one rule of the collapse check and the study's analysis for a missing measurement."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def collapse_from_history(history: Sequence[Mapping[str, Any]], **kwargs: Any) -> CollapseVerdict | None:
    """:func:`detect_collapse` on the probe measurements of a run's metrics history (None without a probe or
    with fewer than 2 measurements). A measurement without all three values is left out, so the curves may start
    after step 0 (a null step-0 margin): the verdict's ``start_step`` and ``reference_step`` name the steps its
    start and reference are read at. A value that is not a finite number (None, NaN, an infinity: a metric that
    could not be computed) makes its measurement missing too, so a run's summary never fails on it. Keyword
    arguments go to :func:`detect_collapse`."""
    rows = [r for r in history if all(finite_number(r.get(k)) for k in PROBE_KEYS.values())]
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


#: Standard errors of a difference of two margins that the drop must exceed (:func:`probe_resolution`). Two would
#: do for one pre-chosen pair of measurements; the detector compares every measurement with the *highest* earlier
#: one, which picks the noise's upward swings, and a simulated probe that did not collapse still read "yes" in up to
#: 7% of runs that passed a 2-SE rule (P x G = 8 x 2, 32 x 2, 32 x 4 near chance), against <= 2% at 2.5.
RESOLUTION_Z = 2.5


@dataclass(frozen=True)
class ProbeResolution:
    """Whether a probe of ``n_traces = P * G`` traces can tell the detector's drop from sampling noise
    (:func:`probe_resolution`)."""

    resolved: bool
    margin_reference: float
    n_prompts: int
    group_size: int
    n_traces: int
    chance: float
    #: the fall the detector needs, ``drop * margin_reference``
    needed_fall: float
    #: sampling standard error of the difference of two margins of this probe at the pooled margin
    se_difference: float
    z: float
    #: the smallest number of traces (and samples per prompt at the same P) that would resolve this drop; None when
    #: the reference margin is <= 0 (no drop to resolve at any size)
    traces_needed: int | None
    group_size_needed: int | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def probe_resolution(margin_reference: float, n_prompts: int, group_size: int, drop: float = 0.5,
                     z: float = RESOLUTION_Z, chance: float | None = None) -> ProbeResolution:
    """Whether a probe of P prompts x G samples is large enough for :func:`detect_collapse`'s drop rule.

    The retrieval margin ``m = (acc - c) / (1 - c)`` (c = chance, 1/P for the probe's distinct prompts) rescales
    the retrieval accuracy ``acc``, a share of N = P * G retrievals (ragen_core.math.mi.mi_proxies). With a true
    accuracy ``a``, ``Var(acc) <= a (1 - a) / N`` (binomial; equality when every prompt is retrieved equally often,
    less when the fixed probe prompts differ in difficulty), so

        SE(m) = sqrt(a (1 - a) / N) / (1 - c)

    The detector calls a drop when the margin falls from its reference ``m_ref`` to at most ``(1 - drop) m_ref``.
    For a probe that did not collapse, both measurements share one true margin; its pooled estimate is the mean of
    the two, ``m_bar = (1 - drop / 2) m_ref`` (``a_bar = c + (1 - c) m_bar``), and the difference of two independent
    measurements has

        SE_diff = sqrt(2 a_bar (1 - a_bar) / N) / (1 - c)

    The probe resolves the drop when ``drop * m_ref > z * SE_diff``; solved for N, the smallest probe that does is

        N_needed = floor(2 z^2 a_bar (1 - a_bar) / ((1 - c)^2 (drop m_ref)^2)) + 1

    (``group_size_needed = ceil(N_needed / P)`` at the same P). Pooling, not the variance at ``m_ref`` alone:
    ``a (1 - a)`` vanishes at ``m_ref = 1``, which would call any probe resolved there. `z`: :data:`RESOLUTION_Z`.

    Args:
        margin_reference: the verdict's reference margin (:attr:`CollapseVerdict.margin_reference`).
        n_prompts, group_size: the probe's P (>= 2) and G (>= 1): ``probe/n_prompts``, ``probe/group_size``.
        drop: the detector's relative fall (its default 0.5).
        chance: the retrieval chance level (``probe/retrieval_chance``); None: 1 / P.
    """
    for name, v, low in (("n_prompts", n_prompts, 2), ("group_size", group_size, 1)):
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise ValueError(f"{name} must be an integer >= {low}; got {v!r}")
    if not (isinstance(margin_reference, (int, float)) and math.isfinite(margin_reference)):
        raise ValueError(f"margin_reference must be a finite number; got {margin_reference!r}")
    if not 0 < drop < 1:
        raise ValueError(f"drop must be in (0, 1); got {drop}")
    if not (math.isfinite(z) and z > 0):
        raise ValueError(f"z must be a positive number; got {z}")
    c = 1.0 / n_prompts if chance is None else float(chance)
    if not 0 <= c < 1:
        raise ValueError(f"chance must be in [0, 1); got {chance}")
    n = n_prompts * group_size
    fall = drop * float(margin_reference)
    a_bar = min(max(c + (1 - c) * (1 - drop / 2) * float(margin_reference), 0.0), 1.0)
    var2 = 2 * a_bar * (1 - a_bar) / (1 - c) ** 2  # N * SE_diff^2
    se = math.sqrt(var2 / n)
    if fall > 0:
        needed = math.floor(z * z * var2 / (fall * fall)) + 1
        g_needed: int | None = -(-needed // n_prompts)
    else:
        needed, g_needed = None, None
    return ProbeResolution(resolved=fall > 0 and fall > z * se, margin_reference=float(margin_reference),
                           n_prompts=n_prompts, group_size=group_size, n_traces=n, chance=c, needed_fall=fall,
                           se_difference=se, z=float(z), traces_needed=needed, group_size_needed=g_needed)
