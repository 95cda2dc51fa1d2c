"""What `ragen reproduce` runs, as data: an :class:`Experiment` is its arms (a base config and overrides), its seed
kind, its outcomes and its rule object, and how its records are analysed and written; :func:`build_runs` turns
any experiment into run specs for the runner (local or Ray), :func:`choose_seeds` checks its seeds, and
:class:`RunRecord` is the typed record of one finished run. The registry of every experiment is
:data:`ragen_core.apps.reproduce.experiments.EXPERIMENTS`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

__all__ = ["TUNING_SEEDS", "MAX_SEEDS", "RunSpec", "Variant", "Seeds", "Experiment", "RunRecord", "build_runs",
           "choose_seeds", "check_seeds", "third_of_the_run", "record_problem"]

#: Seeds 100-199 are the tuning seeds, on which configs were piloted and tuned: an experiment that reports
#: verdicts never uses them, a search uses only them.
TUNING_SEEDS = range(100, 200)
#: The most seeds an experiment runs (``--seeds``): the most its power analysis ever plans
#: (:func:`ragen_core.apps.reproduce.analysis.seeds_needed` and ``equivalence_seeds`` report a design that needs more
#: as out of reach, "> 1000" in the report). Each seed is a training run of every arm, and every run is listed
#: before the first one starts: a count in the billions (within the seed bound) was an out-of-memory traceback.
MAX_SEEDS = 1000


@dataclass(frozen=True)
class RunSpec:
    """One training run: its group (the run folder's first part, ``env`` of its record), arm, seed, base config
    and overrides."""

    env: str
    arm: str
    seed: int
    config: str  # absolute path of the base config
    overrides: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.env}-{self.arm}-s{self.seed}"


@dataclass(frozen=True)
class Variant:
    """One arm of an experiment: a base config of ``configs/``, overrides, and what it is for.

    `group`: the runs' group (the study's env; default: the experiment's name); `common`: overrides of the group
    applied before ``--quick``'s and the arm's own; `same_runs_as`: (group, arm) whose runs these are (the same
    config and overrides, so a seed's run is shared; the analysis renames them, :func:`rename_shared`)."""

    name: str
    config: str
    overrides: tuple[str, ...]
    purpose: str
    group: str | None = None
    common: tuple[str, ...] = ()
    same_runs_as: tuple[str, str] | None = None


@dataclass(frozen=True)
class Seeds:
    """An experiment's seeds: `kind` "reporting" (never a tuning seed) or "tuning" (only tuning seeds), the
    default `first` seed and `count` (``--first-seed``, ``--seeds``; ``--quick``: `quick_count`), and where the
    count comes from a power analysis, `plan` (documentation of the function that sizes it)."""

    kind: str = "reporting"
    first: int = 0
    count: int = 5
    quick_count: int = 1
    plan: str | None = None


@dataclass(frozen=True)
class Experiment:
    """Everything `ragen reproduce --experiment NAME` runs and reports (module docstring).

    `analyse(records) -> dict` computes the analysis from run records alone; `write(records, report_dir, header)
    -> Path` analyses and writes the report (so ``--from-results`` regenerates it). `outcomes`: the outcomes it
    judges (key -> label); `rule`: the rule object the analysis applies and the report prints."""

    name: str
    about: str
    variants: tuple[Variant, ...]
    seeds: Seeds
    outcomes: dict[str, str] = field(default_factory=dict, hash=False)
    rule: Any = None
    common: tuple[str, ...] = ()
    analyse: Callable[[list[dict[str, Any]]], dict[str, Any]] | None = field(default=None, compare=False)
    write: Callable[[list[dict[str, Any]], Any, dict[str, Any]], Path] | None = field(default=None, compare=False)

    @property
    def seeds_kind(self) -> str:
        return self.seeds.kind

    def groups(self) -> tuple[str, ...]:
        """The groups of its runs, in order."""
        return tuple(dict.fromkeys(v.group or self.name for v in self.variants))


def choose_seeds(exp: Experiment, n: int | None = None, first: int | None = None, quick: bool = False) -> list[int]:
    """Seeds first..first+n-1 of `exp` (defaults: its :class:`Seeds`), of its kind.

    Raises:
        ValueError: n < 1 or above :data:`MAX_SEEDS`, first < 0, a last seed above 2**32 - 1
            (:data:`ragen_envs.validation.MAX_SEED`), a reporting range that reaches the tuning seeds 100-199,
            or a tuning experiment's seed outside them.
    """
    n = (exp.seeds.quick_count if quick else exp.seeds.count) if n is None else n
    first = exp.seeds.first if first is None else first
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"--seeds must be an integer >= 1; got {n!r}")
    if n > MAX_SEEDS:
        raise ValueError(f"--seeds must be an integer in [1, {MAX_SEEDS}] (the most seeds an experiment's power "
                         f"analysis plans; each seed is a training run of every arm); got {n}")
    from ragen_core.training.config import seed_range_problem

    problem = seed_range_problem("--first-seed", first, n, "--seeds")
    if problem is not None:  # each seed in [0, MAX_SEED]
        raise ValueError(problem)
    seeds = list(range(first, first + n))
    if exp.seeds.kind == "reporting" and seeds[0] < TUNING_SEEDS.stop and seeds[-1] >= TUNING_SEEDS.start:
        raise ValueError(f"seeds {seeds[0]}-{seeds[-1]} would reach the tuning seeds {TUNING_SEEDS.start}-"
                         f"{TUNING_SEEDS.stop - 1}, which {exp.name} never uses; choose --first-seed and --seeds so "
                         f"that the range ends below {TUNING_SEEDS.start} or starts at {TUNING_SEEDS.stop} or above")
    check_seeds(exp, seeds)
    return seeds


def check_seeds(exp: Experiment, seeds: Sequence[int]) -> None:
    """Raise ValueError unless `seeds` are distinct, at least one, and of `exp`'s kind."""
    if not seeds:
        raise ValueError(f"{exp.name} needs at least one seed")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct; got {list(seeds)}")
    tuning = [s for s in seeds if s in TUNING_SEEDS]
    if exp.seeds.kind == "reporting" and tuning:
        raise ValueError(f"seeds {tuning} are tuning seeds ({TUNING_SEEDS.start}-{TUNING_SEEDS.stop - 1}); "
                         f"{exp.name}'s verdicts must come from seeds the configs were not tuned on")
    if exp.seeds.kind == "tuning" and len(tuning) != len(seeds):
        raise ValueError(f"experiment {exp.name} is a search: only tuning seeds ({TUNING_SEEDS.start}-"
                         f"{TUNING_SEEDS.stop - 1}); got {list(seeds)}")


def build_runs(exp: Experiment, seeds: Sequence[int], configs_dir: str | Path, cache_dir: str | Path,
               quick: bool = False, groups: Sequence[str] | None = None,
               quick_overrides: Callable[[Path], list[str]] | None = None) -> list[RunSpec]:
    """The runs of `exp` on `seeds` (of its groups `groups`, default all): every variant x seed, ordered so that
    2 workers start on different warm starts: the i-th variant of every group, then the (i+1)-th, each on every
    seed. Each run's overrides: the seed, no progress bar, no time limit, the shared warm-start cache, the
    experiment's and the group's common overrides, `quick_overrides(config)` with `quick`, the arm's own.

    Raises:
        ValueError: seeds of the wrong kind (:func:`check_seeds`) or an unknown group.
        FileNotFoundError: a base config missing from `configs_dir` (naming ``--configs-dir``).
    """
    check_seeds(exp, seeds)
    known = exp.groups()
    chosen = known if groups is None else tuple(groups)
    unknown = [g for g in chosen if g not in known]
    if unknown:
        raise ValueError(f"unknown env(s) {unknown}; {exp.name} has {list(known)}")
    folder = Path(configs_dir)
    missing = sorted({v.config for v in exp.variants if (v.group or exp.name) in chosen
                      and not (folder / v.config).is_file()})
    if missing:
        raise FileNotFoundError(
            f"the base configs {missing} are not in {folder}. Run `ragen reproduce` from a clone of the repository, "
            "or pass --configs-dir DIR with a copy of its configs/ folder.")
    by_group = {g: [v for v in exp.variants if (v.group or exp.name) == g] for g in chosen}
    width = max((len(vs) for vs in by_group.values()), default=0)
    specs: list[RunSpec] = []
    for i in range(width):
        for g, vs in by_group.items():
            if i >= len(vs):
                continue
            v = vs[i]
            quick_extra = (quick_overrides or third_of_the_run)(folder / v.config) if quick else []
            env, arm = v.same_runs_as or (g, v.name)
            for seed in seeds:
                common = (f"run.seed={seed}", "run.progress=false", "run.max_minutes=0",
                          f'warm_start.cache_dir="{cache_dir}"', *exp.common, *v.common, *quick_extra)
                specs.append(RunSpec(env, arm, seed, str(folder / v.config), (*common, *v.overrides)))
    return specs


def third_of_the_run(config: Path) -> list[str]:
    """``--quick``: a third of the RL steps and a third of the warm start's demonstrations (at least one of each).

    The quick study is a smoke test of the pipeline (under 30 minutes on 2 cores), not a measurement: its runs
    need not reach the regimes the full configs are tuned for, so the warm start shrinks with the RL phase (the
    collapse configs' warm starts are most of their cost).
    """
    from ragen_core.training.config import load_config

    cfg = load_config(config, [])
    return [f"run.steps={max(cfg.run.steps // 3, 1)}",
            f"warm_start.sft_episodes={max(cfg.warm_start.sft_episodes // 3, 1) if cfg.warm_start.sft_episodes else 0}"]


@dataclass
class RunRecord:
    """The record of one finished run (``done.json``, and each entry of a results.json's ``records``): what
    :func:`ragen_core.apps.reproduce.runner.read_run` reads from its ``metrics.jsonl`` (that function documents
    each field). Fields a run recorded before they existed are None and are not written back, so
    ``RunRecord.from_dict(d).to_dict() == d`` for every committed record; unknown keys are kept in `extra`."""

    env: str
    arm: str
    seed: int
    name: str
    steps: int
    val: list[list[float]]
    mi: list[dict[str, Any]]
    probe: list[dict[str, Any]]
    rv_heterogeneity_first: float | None = None
    zero_variance_fraction: float | None = None
    sft_s: float | None = None
    sft_cached: bool = False
    rl_s: float | None = None
    planned_steps: int | None = None
    commit: str | None = None
    config_sha256: str | None = None
    filter_log: list[dict[str, Any]] | None = None
    phases: dict[str, float | None] | None = None
    wall_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: the keys of the dict it was read from, in order (None: every field)
    keys: tuple[str, ...] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunRecord:
        """Read a record dict.

        Raises:
            TypeError: `d` is not a dict.
            ValueError: a required field (env, arm, seed, name, steps, val) is missing, or a field the analysis
                reads is of the wrong kind (:func:`record_problem`), named with the record.
        """
        if not isinstance(d, dict):
            raise TypeError(f"a run record must be a JSON object (a dict); got {type(d).__name__} {d!r:.60}")
        names = [f.name for f in fields(cls) if f.name not in ("extra", "keys")]
        required = ("env", "arm", "seed", "name", "steps", "val")
        absent = [k for k in required if k not in d]
        if absent:
            raise ValueError(f"run record {d.get('name', '?')!r} lacks {absent}")
        problem = record_problem(d)
        if problem is not None:  # here, not as a traceback deep inside the analysis
            raise ValueError(f"run record {d.get('name')!r}: {problem}")
        known = {k: d[k] for k in names if k in d}
        known.setdefault("mi", [])
        known.setdefault("probe", [])
        return cls(**known, extra={k: v for k, v in d.items() if k not in names}, keys=tuple(d))

    def to_dict(self) -> dict[str, Any]:
        """The record as a dict: the keys it was read with, in their order (a new record: every field)."""
        values = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("extra", "keys")}
        values.update(self.extra)
        keys = self.keys if self.keys is not None else tuple(values)
        return {k: values[k] for k in keys}


def _number(x: Any) -> bool:
    """A finite int or float (not a bool)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _count(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def record_problem(d: dict[str, Any]) -> str | None:
    """The first field of a record dict whose kind the analysis cannot use (one line), or None.

    What :func:`ragen_core.apps.reproduce.runner.read_run` writes: env, arm and name strings; seed and steps integers
    >= 0; val a list of ``[step, success]`` pairs (an integer step >= 0, a finite number); mi, probe and filter_log
    lists of objects, each with an integer step; phases an object; the timings and the step-1 statistics finite
    numbers or null; planned_steps an integer or null. A record of a ``results.json`` edited by hand or made by
    another tool is checked against this before the analysis reads it (``--from-results``): NaN is not a number
    here (``null`` is "not measured")."""
    for key in ("env", "arm", "name"):
        if not isinstance(d.get(key), str):
            return f"{key} must be a string; got {d.get(key)!r}"
    for key in ("seed", "steps"):
        if not _count(d.get(key)):
            return f"{key} must be an integer >= 0; got {d.get(key)!r}"
    val = d.get("val")
    if not isinstance(val, list):
        return f"val must be a list of [step, success] pairs; got {val!r:.60}"
    for pair in val:
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2 and _count(pair[0]) and _number(pair[1])):
            return f"val must be a list of [step, success] pairs (an integer step >= 0, a finite number); got {pair!r}"
    for key in ("mi", "probe", "filter_log"):
        rows = d.get(key)
        if rows is None and key == "filter_log":
            continue
        if key in d and not (isinstance(rows, list) and all(isinstance(r, dict) and _count(r.get("step"))
                                                             for r in rows)):
            return f"{key} must be a list of objects, each with an integer step >= 0; got {rows!r:.60}"
    for key in ("rv_heterogeneity_first", "zero_variance_fraction", "sft_s", "rl_s", "wall_s"):
        if d.get(key) is not None and not _number(d[key]):
            return f"{key} must be a finite number or null; got {d[key]!r}"
    if d.get("planned_steps") is not None and not _count(d["planned_steps"]):
        return f"planned_steps must be an integer >= 0 or null; got {d['planned_steps']!r}"
    if d.get("phases") is not None and not isinstance(d["phases"], dict):
        return f"phases must be an object or null; got {d['phases']!r:.60}"
    return None
