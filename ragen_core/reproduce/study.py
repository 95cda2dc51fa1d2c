"""The study: which runs reproduce which of the paper's findings (docs/reproduction.md).

A study is a list of :class:`RunSpec`: a base config of ``configs/`` (one that learns on a CPU), an *arm* (the
overrides that make the variant) and a training seed. The four findings and the arms that measure them:

1. template collapse is invisible to entropy: ``entropy_bonus`` (a strong entropy bonus, no filter) against the
   healthy ``top_p`` arm, on Sokoban;
2. MI predicts success better than entropy: every run of the study (Spearman over runs);
3. filtering helps where reward variance is heterogeneous: ``no_filter`` / ``top_p`` (rho 0.9) / ``random`` (the
   same number of groups as top-p, drawn at random) on Sokoban and FrozenLake, with the RV heterogeneity
   pre-check of each env;
4. the RV quartile ablation: ``rv_top_quartile`` / ``rv_bottom_quartile`` (2 of 8 groups, the highest- or the
   lowest-variance ones) on Sokoban.

``full`` is 3 seeds x the arms above (27 runs, about 70 minutes on 2 cores); ``quick`` is one seed at a third of
the steps (9 runs, under 30 minutes on 2 cores): a smoke test of the whole pipeline, too small for intervals.
All runs of one (env, seed) share their warm start through ``warm_start.cache_dir``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["ARMS", "ENVS", "Arm", "RunSpec", "build_study", "find_configs_dir"]


@dataclass(frozen=True)
class Arm:
    """A training variant: overrides of the base config, and what it is for."""

    name: str
    overrides: tuple[str, ...]
    purpose: str


#: Every arm of the study, by name.
ARMS: dict[str, Arm] = {a.name: a for a in (
    Arm("top_p", (), "the method as shipped: top-p filtering on reward variance, rho = 0.9 (findings 1, 3)"),
    Arm("no_filter", ("filter.enabled=false",), "every group is trained on (finding 3)"),
    Arm("random", ('filter.strategy="random"',),
        "the control: as many groups as top-p keeps, drawn uniformly at random (finding 3)"),
    Arm("rv_top_quartile", ('filter.strategy="top_k"', "filter.value=0.25", 'filter.order="largest"'),
        "only the quarter of the groups with the highest reward variance (finding 4)"),
    Arm("rv_bottom_quartile", ('filter.strategy="top_k"', "filter.value=0.25", 'filter.order="smallest"'),
        "only the quarter of the groups with the lowest reward variance (finding 4)"),
    Arm("entropy_bonus", ("filter.enabled=false", "algo.entropy_coef=1.0"),
        "a strong entropy bonus (1000x the default) and no filter: the regulariser outweighs the task signal "
        "(finding 1)"),
)}

#: env name -> (base config file in configs/, arms run on it).
ENVS: dict[str, tuple[str, tuple[str, ...]]] = {
    "sokoban": ("sokoban_tiny.toml",
                ("top_p", "no_filter", "random", "rv_top_quartile", "rv_bottom_quartile", "entropy_bonus")),
    "frozenlake": ("frozenlake_tiny.toml", ("top_p", "no_filter", "random")),
}


@dataclass(frozen=True)
class RunSpec:
    """One training run of the study."""

    env: str
    arm: str
    seed: int
    config: str  # absolute path of the base config
    overrides: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.env}-{self.arm}-s{self.seed}"


def find_configs_dir(explicit: str | Path | None = None) -> Path:
    """The folder holding the base configs: `explicit`, else the source checkout's ``configs/``.

    Raises:
        FileNotFoundError: naming what is missing and how to supply it.
    """
    if explicit is not None:
        folder = Path(explicit)
    else:
        folder = Path(__file__).resolve().parents[2] / "configs"
    missing = [f for f, _ in ENVS.values() if not (folder / f).is_file()]
    if missing:
        raise FileNotFoundError(
            f"the study's base configs {missing} are not in {folder}. Run `ragen reproduce` from a clone of the "
            "repository, or pass --configs-dir DIR with a copy of its configs/ folder.")
    return folder


def build_study(seeds: list[int], quick: bool, configs_dir: Path, cache_dir: Path,
                envs: tuple[str, ...] | None = None) -> list[RunSpec]:
    """The runs of the study, ordered so that 2 workers start on different (env, seed) warm starts.

    Order: arm-major within each env's arm list (the first arm of every (env, seed) comes first), so that the
    runs sharing a warm start are spread out and mostly find it cached.
    """
    if not seeds:
        raise ValueError("the study needs at least one seed")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct; got {seeds}")
    chosen = tuple(ENVS) if envs is None else envs
    unknown = [e for e in chosen if e not in ENVS]
    if unknown:
        raise ValueError(f"unknown env(s) {unknown}; the study has {list(ENVS)}")
    specs: list[RunSpec] = []
    width = max(len(ENVS[e][1]) for e in chosen)
    for i in range(width):
        for env in chosen:
            config, arms = ENVS[env]
            if i >= len(arms):
                continue
            for seed in seeds:
                common = [f"run.seed={seed}", "run.progress=false", f'warm_start.cache_dir="{cache_dir}"']
                if quick:
                    common += _quick_overrides(configs_dir / config)
                specs.append(RunSpec(env, arms[i], seed, str(configs_dir / config),
                                     (*common, *ARMS[arms[i]].overrides)))
    return specs


def _quick_overrides(config: Path) -> list[str]:
    """A third of the steps (the warm start unchanged: the RL phase is what the quick study shortens)."""
    from ragen_core.config import load_config

    cfg = load_config(config, [])
    return [f"run.steps={max(cfg.run.steps // 3, 1)}"]
