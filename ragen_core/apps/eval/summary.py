"""The numbers of an evaluation: ``summary.json``, ``summary.md`` (the table) and ``summary.png``.

Per env, over its finished episodes (a failed episode is counted in ``failed_episodes`` and nowhere else):

- ``success``: k / n, with ``success_ci95`` the Wilson score interval (:func:`wilson_interval`); with
  ``--group-size G > 1`` the G samples of a seed are not independent trials (greedy ones are copies), so the interval
  is Wilson's on the seeds' effective number of episodes (:func:`seed_clustered_interval`), ``success_ci95_n``;
- ``mean_reward`` (episode return), ``mean_turns``, ``invalid_action_rate`` and ``format_failure_rate`` (shares of
  turns: no valid action executed / the env charged the format penalty), ``tokens_per_episode`` (generated tokens)
  and ``prompt_tokens_per_episode``, ``latency_s_per_episode``;
- with ``--group-size G > 1``, ``rv``: the reward-variance pre-check of ``ragen diagnose``
  (:func:`ragen_core.apps.diagnose.rv_report`, each seed's G episodes one group): the share of groups with reward
  variance and what top-p (rho = 0.9) filtering would keep, i.e. whether SNR-aware filtering would act on this model;
- with an in-process model, ``mi``: the MI proxies and the regime of ``ragen diagnose --model`` on the same
  episodes, scored by the model that played them (:func:`ragen_core.apps.diagnose.mi_report`).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ragen_core.apps.diagnose import regime_text
from ragen_core.math.stats import wilson_interval, wilson_of_share

__all__ = ["SUMMARY_JSON", "SUMMARY_MD", "SUMMARY_PNG", "env_summary", "mi_profile", "rv_profile",
           "seed_clustered_interval", "summarize", "wilson_interval", "write_markdown", "write_plot"]

SUMMARY_JSON = "summary.json"
SUMMARY_MD = "summary.md"
SUMMARY_PNG = "summary.png"
#: The top-p keep rate of the pre-check (the paper's rho).
KEEP_RATE = 0.9


def seed_clustered_interval(groups: Sequence[tuple[int, int]], level: float = 0.95) -> tuple[float, float, float]:
    """Wilson's interval of a success rate whose episodes come in groups (the G samples of a seed), on the groups'
    effective number of episodes: ``(low, high, n_eff)``.

    `groups` holds ``(y_j, m_j)``: successes and finished episodes of seed j (m_j >= 1), N seeds, n = sum m_j
    episodes, p = sum y_j / n. The samples of one seed share its level, so they are correlated (greedy ones are
    copies) and n overstates the information: Wilson on n covers far less than 95% (a simulation of greedy groups of
    4 on 32 seeds: 68%). The variance of p between seeds (the ratio estimator's, seeds as the independent units)

        v = N / (N - 1) * sum_j (y_j - p m_j)^2 / n^2

    gives the effective number of episodes n_eff = p (1 - p) / v (n / n_eff is Kish's design effect), clipped to
    [N, n]: no fewer than one independent episode per seed, no more than the episodes. Where nothing varies (p = 0
    or 1, or a single seed) the within-seed correlation cannot be measured and n_eff = N (the copies of greedy
    decoding). One sample per seed (every m_j = 1) gives n_eff = n: :func:`wilson_interval` exactly."""
    groups = [(int(y), int(m)) for y, m in groups if m > 0]
    if any(not 0 <= y <= m for y, m in groups):
        raise ValueError(f"need 0 <= successes <= episodes per group; got {groups}")
    n_seeds, n, k = len(groups), sum(m for _, m in groups), sum(y for y, _ in groups)
    if n == 0:
        return 0.0, 1.0, 0.0
    p = k / n
    if n_seeds < 2 or k in (0, n):
        n_eff = float(n_seeds)
    else:
        v = n_seeds / (n_seeds - 1) * sum((y - p * m) ** 2 for y, m in groups) / (n * n)
        n_eff = float(n) if v <= 0 else min(float(n), max(float(n_seeds), p * (1 - p) / v))
    if n_eff == n:  # integral counts: exactly wilson_interval's numbers
        return (*wilson_interval(k, n, level), float(n))
    return (*wilson_of_share(p, n_eff, level), n_eff)


def _mean(values: Sequence[float]) -> float | None:
    return float(sum(values) / len(values)) if values else None


def env_summary(lines: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The numbers of one env's ``episodes.jsonl`` lines (module docstring)."""
    ok = [x for x in lines if not x["failed"]]
    failed = [x for x in lines if x["failed"]]
    n, k = len(ok), sum(bool(x["success"]) for x in ok)
    turns = [t for x in ok for t in x["turns"]]
    completion = [x["tokens"]["completion"] for x in ok]
    prompt = [x["tokens"]["prompt"] for x in ok]
    by_seed: dict[int, list[int]] = {}
    for x in ok:  # (successes, episodes) per seed: the independent units of the interval
        y_m = by_seed.setdefault(int(x["seed"]), [0, 0])
        y_m[0] += bool(x["success"])
        y_m[1] += 1
    lo, hi, n_eff = seed_clustered_interval([(y, m) for y, m in by_seed.values()])
    return {
        "episodes": n,
        "successes": k,
        "success": k / n if n else None,
        "success_ci95": [lo, hi],
        "success_ci95_n": n_eff,
        "mean_reward": _mean([float(x["reward"]) for x in ok]),
        "mean_turns": _mean([float(x["num_turns"]) for x in ok]),
        "invalid_action_rate": _mean([float(not t["action_valid"]) for t in turns]),
        "format_failure_rate": _mean([float(not t["format_valid"]) for t in turns]),
        "tokens_per_episode": None if None in completion else _mean(completion),
        "prompt_tokens_per_episode": None if None in prompt else _mean(prompt),
        "latency_s_per_episode": _mean([float(x["latency_s"]) for x in ok]),
        "failed_episodes": len(failed),
        "failures": dict(Counter(x["failed"]["reason"] for x in failed)),
    }


def _groups(lines: Sequence[dict[str, Any]]) -> dict[int | str, list[Any]]:
    """Finished episodes as ``ragen diagnose`` rollouts, grouped by seed (line numbers count from 1)."""
    from ragen_core.apps.diagnose import Rollout, group_rollouts

    rows = [Rollout(i + 1, x["group"], float(x["reward"]), x["prompt"], x["response"], x["model"])
            for i, x in enumerate(lines) if not x["failed"]]
    return group_rollouts(rows)


def rv_profile(lines: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The reward-variance pre-check of one env's groups (``rv_report``, ddof 1, top-p rho = 0.9) and its reading:
    ``filter_acts`` is True when some group has a variance (above ``diagnose.ZERO_TOL``, 1e-10) and top-p would keep
    some but not all groups. ``top_p_kept_groups`` is ``ragen diagnose``'s count (a group of equal rewards has a
    variance of exactly 0, whatever the rewards, as in the trainer: a batch of such groups keeps none)."""
    from ragen_core.apps.diagnose import ZERO_TOL, rv_report

    rep = rv_report(_groups(lines), keep_rate=KEEP_RATE)
    usable = len(rep["variances"])
    with_var = sum(1 for v in rep["variances"].values() if isinstance(v, float) and v > ZERO_TOL)
    kept = rep["top_p"]["kept_groups"]
    if usable == 0:
        reading, acts = "no group has two finished episodes: no variance to measure", False
    elif with_var == 0:
        reading, acts = ("no group has reward variance (every variance within 1e-10 of 0): GRPO gets no signal "
                         "from these prompts"), False
    elif kept < usable:
        reading, acts = f"top-p keeps {kept} of {usable} groups: SNR-aware filtering would act", True
    else:
        reading, acts = f"top-p keeps all {usable} groups: filtering would not act", False
    return {"groups": usable, "groups_with_variance": with_var, "rv_mean": rep["rv_mean"], "rv_std": rep["rv_std"],
            "rv_heterogeneity": rep["rv_heterogeneity"],
            "rv_heterogeneity_ci95": rep.get("rv_heterogeneity_ci95", [math.nan, math.nan]),
            "zero_fraction": rep["zero_fraction"],
            "top_p_keep_rate": KEEP_RATE, "top_p_kept_groups": kept, "filter_acts": acts, "reading": reading}


def mi_profile(lines: Sequence[dict[str, Any]], folder: str, max_groups: int, device: str) -> dict[str, Any]:
    """The MI proxies of ``ragen diagnose --model FOLDER`` on one env's first turns (``mi_report``), and the regime
    when the scorer is the model that played them (the lines name its weights); else the regime is withheld, as
    ``ragen diagnose`` withholds it. ``{"skipped": why}`` when the proxies cannot be computed."""
    from ragen_core.apps.diagnose import mi_report

    try:
        stats = mi_report(_groups(lines), folder, batch_tokens=16384, max_groups=max_groups, device=device)
    except (ValueError, OSError) as exc:
        return {"skipped": str(exc).splitlines()[0]}
    if not str(stats["scorer_is_sampler"]).startswith("yes"):
        stats["regime"] = "withheld: the scoring model is not known to be the one that played the episodes"
    keep = ("n_prompts", "group_size", "retrieval_acc", "retrieval_chance", "mi_est", "mi_seq_est", "mi_upper_bound",
            "mi_zscore", "cond_entropy_est", "marginal_entropy_est", "regime", "regime_resolved", "mi_seq_p_value",
            "mi_seq_null_q95", "scorer_is_sampler", "notes")
    return {k: stats[k] for k in keep if k in stats}


def _interval(ci: Sequence[float] | None) -> str:
    """`` [lo, hi]`` of a bootstrap interval for a table cell; "" when there is none."""
    if not ci or any(not isinstance(x, (int, float)) or math.isnan(x) for x in ci):
        return ""
    return f" [{ci[0]:.2f}, {ci[1]:.2f}]"


def strict_json(obj: Any) -> Any:
    """NaN and infinities -> None (``summary.json`` is strict JSON)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {str(k): strict_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict_json(v) for v in obj]
    return obj


def summarize(lines: Sequence[dict[str, Any]], env_ids: Sequence[str], refused: dict[str, str],
              group_size: int) -> dict[str, dict[str, Any]]:
    """Each env id -> its numbers (:func:`env_summary`, plus ``rv`` when ``group_size > 1``); a refused env ->
    ``{"refused": why, "episodes": 0}``."""
    out: dict[str, dict[str, Any]] = {}
    for env_id in env_ids:
        if env_id in refused:
            out[env_id] = {"refused": refused[env_id], "episodes": 0}
            continue
        mine = [x for x in lines if x["env"] == env_id]
        out[env_id] = env_summary(mine)
        if group_size > 1:
            out[env_id]["rv"] = rv_profile(mine)
    return out


# ---------------------------------------------------------------------------------------------- files
def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _num(x: float | None, fmt: str = ".3f") -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def write_markdown(path: Path, header: dict[str, Any], envs: dict[str, dict[str, Any]],
                   settings: dict[str, dict[str, Any]]) -> str:
    """``summary.md``: what was evaluated, the table of envs, the pre-check and MI sections when present, the
    settings each env was played with. Returns the text."""
    lines = [f"# ragen eval: {header['model']}", "",
             f"{header['backend']}; sampling: {header['sampling']}; seeds {header['seeds']}, "
             f"{header['group_size']} sample(s) each; {header['date']}.", "",
             "| env | episodes | success | 95% CI | mean reward | mean turns | invalid actions | format failures | "
             "tokens/episode | failed |",
             "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for env_id, s in envs.items():
        if "refused" in s:
            lines.append(f"| {env_id} | 0 | refused | | | | | | | |")
            continue
        lo, hi = s["success_ci95"]
        fail = str(s["failed_episodes"]) + (f" ({', '.join(f'{k} {v}' for k, v in s['failures'].items())})"
                                            if s["failures"] else "")
        lines.append(f"| {env_id} | {s['episodes']} | {_pct(s['success'])} | [{_pct(lo)}, {_pct(hi)}] | "
                     f"{_num(s['mean_reward'])} | {_num(s['mean_turns'], '.2f')} | {_pct(s['invalid_action_rate'])} | "
                     f"{_pct(s['format_failure_rate'])} | {_num(s['tokens_per_episode'], '.1f')} | {fail} |")
    clustered = {k: s for k, s in envs.items() if "refused" not in s and s["success_ci95_n"] < s["episodes"]}
    if clustered:  # say why these intervals are wider than Wilson's on the episodes
        lines += ["", "95% CI over seeds: a seed's samples are not independent trials, so the interval is Wilson's on "
                  "the effective number of episodes (" + "; ".join(f"{k}: {s['success_ci95_n']:.1f} of {s['episodes']}"
                                                               for k, s in clustered.items()) + ")."]
    refused = {k: s["refused"] for k, s in envs.items() if "refused" in s}
    if refused:
        lines += ["", "Refused: " + "; ".join(f"{k}: {why}" for k, why in refused.items()) + "."]
    rv = {k: s["rv"] for k, s in envs.items() if "rv" in s}
    if rv:
        lines += ["", f"## Reward-variance pre-check (groups of {header['group_size']} samples per seed)", "",
                  "| env | groups | with variance | top-p 0.9 keeps | RV heterogeneity [95% bootstrap] | reading |",
                  "|---|---:|---:|---:|---:|---|"]
        for k, r in rv.items():
            lines.append(f"| {k} | {r['groups']} | {r['groups_with_variance']} | {r['top_p_kept_groups']} | "
                         f"{_num(r['rv_heterogeneity'], '.2f')}{_interval(r.get('rv_heterogeneity_ci95'))} | "
                         f"{r['reading']} |")
    mi = {k: s["mi"] for k, s in envs.items() if "mi" in s}
    if mi:
        lines += ["", "## MI proxies (first turns, scored by the model that played them)", "",
                  "| env | P x G | Retrieval-Acc (chance) | MI-Seq-Est (max log P) | H(Z\\|X) nats/token | regime |",
                  "|---|---|---:|---:|---:|---|"]
        for k, m in mi.items():
            if "skipped" in m:
                lines.append(f"| {k} | | | | | skipped: {m['skipped']} |")
                continue
            lines.append(f"| {k} | {m['n_prompts']} x {m['group_size']} | {_num(m['retrieval_acc'])} "
                         f"({_num(m['retrieval_chance'])}) | {_num(m['mi_seq_est'])} ({_num(m['mi_upper_bound'])}) | "
                         f"{_num(m['cond_entropy_est'])} | {regime_text(m)} |")
        notes = [f"- {k}: {note}" for k, m in mi.items() for note in m.get("notes") or ()]
        lines += [""] + notes if notes else []
    lines += ["", "## Settings", "",
              "| env | from | max turns | context | max new tokens | system prompt | env kwargs |",
              "|---|---|---:|---|---:|---|---|"]
    for k, p in settings.items():
        st, kwargs = p["settings"], json.dumps(p["env_kwargs"]) if p["env_kwargs"] else ""
        lines.append(f"| {k} | {p['source']} | {st['max_turns']} | {st['context']} | {st['max_new_tokens']} | "
                     f"{'on' if st['system_prompt'] else 'off'} | {kwargs} |")
    text = "\n".join(lines) + "\n"
    path.write_text(text, encoding="utf-8")
    return text


def _plot_label(env_id: str, s: dict[str, Any]) -> str:
    """An env's row label: its name, finished episodes and, for a seed-clustered interval, its effective number."""
    name = env_id.removeprefix("ragen/")
    if "refused" in s:
        return f"{name} (refused)"
    n_eff = s.get("success_ci95_n")
    eff = f", {n_eff:.1f} effective" if isinstance(n_eff, (int, float)) and s["episodes"] and n_eff < s["episodes"] \
        else ""
    return f"{name} (n={s['episodes']}{eff})"


def write_plot(path: Path, envs: dict[str, dict[str, Any]], title: str) -> None:
    """``summary.png``: each env's success with its 95% interval (``success_ci95``: Wilson's, on the effective number
    of episodes when a seed's samples are clustered, which the row then names). An env without a point (refused, or
    no finished episode) keeps its row and says why, so that no env disappears from the figure. The title is wrapped
    to the figure's width."""
    import textwrap

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = list(envs.items())
    fig, ax = plt.subplots(figsize=(7, 0.45 * max(len(rows), 1) + 1.2))
    for i, (_, s) in enumerate(rows):
        if "refused" in s or not s.get("episodes") or not isinstance(s.get("success"), (int, float)):
            why = "refused" if "refused" in s else f"no finished episode ({s.get('failed_episodes', 0)} failed)"
            ax.text(0.5, i, why, ha="center", va="center", fontsize=8, color="tab:gray")
            continue
        lo, hi = s["success_ci95"]
        ax.errorbar(s["success"], i, xerr=[[max(0.0, s["success"] - lo)], [max(0.0, hi - s["success"])]], fmt="o",
                    color="C0", capsize=4)
    ax.set_yticks(range(len(rows)), [_plot_label(k, s) for k, s in rows])
    ax.set_ylim(len(rows) - 0.5, -0.5)  # first env on top; the rows' range even when no env has a point
    ax.set_xlim(-0.02, 1.02)
    ax.set_xlabel("success, share of episodes (95% Wilson interval)")
    fig.suptitle(textwrap.fill(title, 80), fontsize=9)  # centred on the figure, not on the axes beside the labels
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")  # the long labels and title inside the image
    plt.close(fig)
