"""The study: which runs reproduce which of the paper's findings (docs/reproduction.md).

A study is a list of :class:`RunSpec`: a base config of ``configs/``, an *arm* (the overrides that make the
variant) and a training seed. Two kinds of base config, each used for the findings it can test:

- **collapse-prone** (``collapse_sokoban``: ``configs/collapse_sokoban.toml``, ``collapse_frozenlake``:
  ``configs/collapse_frozenlake.toml``): the warm start leaves the reasoning input-dependent but off the MI
  ceiling, and the held-out MI probe (``ragen_core.training.probe``, ``probe/*``) is on. Findings 1 and 3 run here:

  1. template collapse is invisible to entropy: the ``no_filter`` arm, judged per seed on its probe curves by
     :func:`ragen_core.math.collapse.detect_collapse`;
  3. filtering prevents it: ``top_p`` (rho 0.9) against ``no_filter`` and against ``random`` (as many groups
     as top-p keeps, drawn at random), paired by seed, on outcomes fixed in advance (docs/reproduction.md).

  The ``entropy_bonus`` arm (entropy coefficient 1.0, no filter) is an extra on ``collapse_sokoban``: a strong
  entropy bonus turns the text into noise, an entropy-driven fall of MI, not template collapse.
- **learning** (``sokoban``: ``configs/sokoban_tiny.toml``, ``frozenlake``: ``configs/frozenlake_tiny.toml``):
  configs on which RL learns. Findings 2 and 4 run here, with the probe switched on as well
  (``mi.probe_prompts=32``, every 10 steps; the probe has its own sampler, so it leaves the training run
  unchanged):

  2. MI predicts success better than entropy: every run of these envs, ranks within env, intervals from a
     bootstrap over seeds;
  4. the RV quartile ablation: ``rv_top_quartile`` / ``rv_bottom_quartile`` (2 of 8 groups, the highest- or the
     lowest-variance ones) on Sokoban, compared at equal steps.

Seeds: ``full`` runs training seeds S..S+N-1 with S = 0 and N = 5 by default (``--first-seed S``, ``--seeds N``).
Seeds 100-199 are the tuning seeds, on which the collapse-prone configs were piloted and tuned; the study never
uses them, so its verdicts are on seeds that no choice of the configs saw. ``quick`` is one seed at a third of the
steps and a third of the warm-start demonstrations: a smoke test of the whole pipeline (under 30 minutes on 2
cores), too small for intervals.
All runs of one (env, seed) share their warm start through ``warm_start.cache_dir``, and every run has its
config's steps: the study lifts the configs' time limit (``run.max_minutes=0``), which would otherwise end runs
earlier on a busier machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ragen_core.apps.reproduce.spec import TUNING_SEEDS, Experiment, RunSpec, Seeds, Variant, build_runs, choose_seeds

__all__ = ["ARMS", "ENVS", "COLLAPSE_ENVS", "LEARNING_ENVS", "DEFAULT_SEEDS", "TUNING_SEEDS", "Arm", "RunSpec",
           "build_study", "find_configs_dir", "study_seeds", "STUDY"]

#: Training seeds of a full study by default (0..4), and the tuning seeds it must never use.
DEFAULT_SEEDS = 5


@dataclass(frozen=True)
class Arm:
    """A training variant: overrides of the base config, and what it is for."""

    name: str
    overrides: tuple[str, ...]
    purpose: str


#: Every arm of the study, by name.
ARMS: dict[str, Arm] = {a.name: a for a in (
    Arm("no_filter", ("filter.enabled=false",),
        "every group is trained on: where template collapse should appear (findings 1, 3; 2 on the learning envs)"),
    # Spelled out rather than inherited: a collapse-prone config may ship with its filter off.
    Arm("top_p", ("filter.enabled=true", 'filter.strategy="top_p"', "filter.value=0.9"),
        "the method: top-p filtering on reward variance, rho = 0.9 (findings 3, 2)"),
    Arm("random", ("filter.enabled=true", 'filter.strategy="random"', "filter.value=0.9"),
        "the control: as many groups as top-p keeps, drawn uniformly at random (finding 3)"),
    Arm("entropy_bonus", ("filter.enabled=false", "algo.entropy_coef=1.0"),
        "extra: a strong entropy bonus (1000x the default), no filter. It turns the text into noise: an "
        "entropy-driven fall of MI, not template collapse"),
    Arm("rv_top_quartile",
        ("filter.enabled=true", 'filter.strategy="top_k"', "filter.value=0.25", 'filter.order="largest"'),
        "only the quarter of the groups with the highest reward variance (finding 4)"),
    Arm("rv_bottom_quartile",
        ("filter.enabled=true", 'filter.strategy="top_k"', "filter.value=0.25", 'filter.order="smallest"'),
        "only the quarter of the groups with the lowest reward variance (finding 4)"),
)}

#: The held-out MI probe, switched on for the learning configs (the collapse-prone ones have it in the file):
#: 32 prompts every 10 steps. A probe costs 10-14 s on one core (docs/collapse.md), 2-5x a step of these
#: configs; every 10 steps keeps it to ~1.5 minutes of a 60-step run and still gives finding 2 two early
#: measurements (steps 0 and 10) and finding 4 a measurement every 10 steps.
PROBE_OVERRIDES = ("mi.probe_prompts=32", "mi.probe_every=10")

#: The learning configs' top-p and no-filter arms measure finding 2's early window (steps <= a quarter of the run,
#: :data:`ragen_core.apps.reproduce.analysis.EARLY_FRACTION` x 60 = 15) and the end, nothing in between: finding 2
#: reads their early probes and early in-batch MI, the per-run table their end margin, and every finding their
#: success after the warm start and at the end. So they probe at steps 0, 10 and 60 (not 20-50), cross-score the
#: batch at steps 5, 10 and 15 (not 20-60) and validate at 0, 10 and 60 (not 20-50). The RV quartiles keep every
#: measurement: finding 4 compares them at the last step both runs of a seed have, which can be any. All three are
#: measurements only (the probe and validation have their own samplers; cross-scoring draws nothing), so training
#: is unchanged.
WINDOW_ARMS = ("top_p", "no_filter")
LEARNING_WINDOW = ("mi.probe_until=15", "mi.until=15", "eval.until=15")
#: The collapse configs' in-batch MI: no finding reads it (findings 1 and 3 read the probe), the per-run table its
#: early window (EARLY_FRACTION x 40 = 10): steps 5 and 10, not 15-40.
COLLAPSE_WINDOW = ("mi.until=10",)


def _overrides(env: str, arm: str) -> tuple[str, ...]:
    """The arm's overrides, with the measurement window (:data:`LEARNING_WINDOW`, :data:`COLLAPSE_WINDOW`) where
    it suits the arm."""
    if env in LEARNING_ENVS:
        window = LEARNING_WINDOW if arm in WINDOW_ARMS else ()
    else:
        window = COLLAPSE_WINDOW
    return ARMS[arm].overrides + window

#: env name -> (base config file in configs/, arms run on it, extra overrides of every run of the env).
ENVS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "collapse_sokoban": ("collapse_sokoban.toml", ("no_filter", "top_p", "random", "entropy_bonus"), ()),
    "collapse_frozenlake": ("collapse_frozenlake.toml", ("no_filter", "top_p", "random"), ()),
    "sokoban": ("sokoban_tiny.toml", ("top_p", "no_filter", "rv_top_quartile", "rv_bottom_quartile"),
                PROBE_OVERRIDES),
    "frozenlake": ("frozenlake_tiny.toml", ("top_p", "no_filter"), PROBE_OVERRIDES),
}
#: Envs of findings 1 and 3, and of findings 2 and 4.
COLLAPSE_ENVS = ("collapse_sokoban", "collapse_frozenlake")
LEARNING_ENVS = ("sokoban", "frozenlake")


#: The main study as an experiment spec: every env's arms (the env's extra overrides as the group's common ones),
#: on reporting seeds 0..4 by default. Its analysis and report are attached in the registry
#: (:data:`ragen_core.apps.reproduce.experiments.EXPERIMENTS`, ``"study"``).
STUDY = Experiment(
    name="study",
    about="the paper's four findings (docs/reproduction.md): template collapse and filtering against it on the "
          "collapse-prone configs, MI vs entropy and the RV quartiles on the learning configs",
    variants=tuple(Variant(arm, config, _overrides(env, arm), ARMS[arm].purpose, group=env, common=extra)
                   for env, (config, arms, extra) in ENVS.items() for arm in arms),
    seeds=Seeds(kind="reporting", first=0, count=DEFAULT_SEEDS, quick_count=1))


def study_seeds(n: int | None, quick: bool, first: int = 0) -> list[int]:
    """Training seeds first..first+n-1 (n default: 1 for quick, :data:`DEFAULT_SEEDS` for full), never a tuning
    seed (:func:`ragen_core.apps.reproduce.spec.choose_seeds` on :data:`STUDY`).

    Raises:
        ValueError: n < 1, first < 0, or a range that reaches the tuning seeds 100-199.
    """
    return choose_seeds(STUDY, n, first, quick)


def find_configs_dir(explicit: str | Path | None = None, envs: tuple[str, ...] | None = None) -> Path:
    """The folder holding the base configs of `envs` (default all): `explicit`, else the checkout's ``configs/``.

    Raises:
        FileNotFoundError: naming what is missing and how to supply it.
    """
    if explicit is not None:
        folder = Path(explicit)
    else:
        folder = Path(__file__).resolve().parents[3] / "configs"  # ragen_core/apps/reproduce/ -> the checkout
    chosen = tuple(ENVS) if envs is None else tuple(e for e in envs if e in ENVS)
    missing = [ENVS[e][0] for e in chosen if not (folder / ENVS[e][0]).is_file()]
    if missing:
        raise FileNotFoundError(
            f"the study's base configs {missing} are not in {folder}. Run `ragen reproduce` from a clone of the "
            "repository, or pass --configs-dir DIR with a copy of its configs/ folder.")
    return folder


def build_study(seeds: list[int], quick: bool, configs_dir: Path, cache_dir: Path,
                envs: tuple[str, ...] | None = None) -> list[RunSpec]:
    """The runs of the study: every env x its arms x `seeds` (:func:`ragen_core.apps.reproduce.spec.build_runs` on
    :data:`STUDY`), ordered so that 2 workers start on different (env, seed) warm starts: arm-major within each
    env's arm list (the first arm of every (env, seed) comes first), so that the runs sharing a warm start are
    spread out and mostly find it cached. No time limit: the configs' run.max_minutes guards an interactive run,
    but in the study it would cut runs short by the machine's load.

    Raises:
        ValueError: no seeds, repeated seeds, a tuning seed (100-199), or an unknown env.
    """
    return build_runs(STUDY, seeds, configs_dir, cache_dir, quick=quick, groups=envs)
