"""Every numeric config key has a declared range, checked in one place: NaN, infinities and out-of-range values are
one ConfigError naming the key and what it accepts, while every valid config (the defaults, the shipped configs and
presets) loads as before. Also the group-size rules (group-relative estimators and the filter need G >= 2), text
keys, `run.name` and unreadable config files."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from ragen_core.training.config import BOUNDS, ConfigError, TrainConfig, config_to_dict, load_config
from ragen_core.training.presets import list_presets
from ragen_core.training.trainer import check_runnable

ROOT = Path(__file__).resolve().parents[2]


def _schema_numeric_keys() -> dict[str, type]:
    """Every int or float key of the config, walked from the default config's own values (bools excluded)."""
    out = {}
    for section, values in config_to_dict(TrainConfig()).items():
        for key, value in values.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out[f"{section}.{key}"] = type(value)
    return out


NUMERIC = _schema_numeric_keys()

#: Numeric keys that accept one of the bad values below, with the documented rule that allows it. None does: no key
#: means anything by NaN or an infinity ("no limit" and "off" are 0), and no key takes a negative value (seeds,
#: rates, coefficients and cadences are >= 0). A future exception must be added here with its documented rule.
ALLOWED: dict[tuple[str, str], str] = {}

BAD_VALUES = ("nan", "inf", "-inf", "-1")


def test_the_walk_finds_the_numeric_keys_of_every_section():
    # An independent sanity check of the walk: a few keys of each kind, including the inlined filter.spec fields and
    # the RolloutOptions fields of [rollout].
    for key, typ in {"run.max_minutes": float, "run.seed": int, "env.val_seed": int, "rollout.temperature": float,
                     "rollout.length_limit": int, "algo.lr": float, "filter.eps": float, "filter.ddof": int,
                     "mi.ema_eps": float, "warm_start.batch_size": int, "eval.episodes": int}.items():
        assert NUMERIC[key] is typ, key
    assert len(NUMERIC) >= 60


def test_every_numeric_key_has_a_declared_range():
    assert set(BOUNDS) == set(NUMERIC)


@pytest.mark.parametrize("key", sorted(NUMERIC))
@pytest.mark.parametrize("bad", BAD_VALUES)
def test_nan_infinities_and_negative_values_are_refused_for_every_numeric_key(key, bad):
    if (key, bad) in ALLOWED:
        load_config(None, [f"{key}={bad}"])
        return
    with pytest.raises(ConfigError) as err:
        load_config(None, [f"{key}={bad}"])
    message = str(err.value)
    assert message.startswith(key + " ") and "\n" not in message, message
    # ... and says what is accepted (a range, or the type)
    assert re.search(r"[<>]=? ?-?\d|in [\[(]|integer|non-negative|positive", message), message


@pytest.mark.parametrize(("override", "key"), [
    ("algo.lr=inf", "algo.lr"), ("rollout.temperature=inf", "rollout.temperature"),
    ("algo.clip_high=inf", "algo.clip_high"), ("algo.dual_clip=inf", "algo.dual_clip"),
    ("algo.entropy_coef=inf", "algo.entropy_coef"), ("algo.kl_coef=inf", "algo.kl_coef"),
    ("algo.grad_clip=inf", "algo.grad_clip"), ("algo.adam_eps=inf", "algo.adam_eps"), ("filter.eps=inf", "filter.eps"),
    ("algo.target_kl=inf", "algo.target_kl"), ("run.max_minutes=-5", "run.max_minutes"),
    ("model.critic_lr=-1e-5", "model.critic_lr"), ("algo.weight_decay=nan", "algo.weight_decay"),
    ("algo.value_clip=-inf", "algo.value_clip"), ("mi.ema_eps=nan", "mi.ema_eps"),
    ("warm_start.lr=nan", "warm_start.lr"),
    ("warm_start.batch_size=-1", "warm_start.batch_size"), ("mi.batch_tokens=-1", "mi.batch_tokens"),
    ("rollout.length_limit=-1", "rollout.length_limit"), ("run.keep_every=-1", "run.keep_every"),
    ("run.seed=-1", "run.seed"), ("warm_start.seed=-1", "warm_start.seed"), ("env.train_seed=-1", "env.train_seed"),
    ("env.val_seed=-1", "env.val_seed"),
])
def test_the_reviewers_values_are_refused_with_the_accepted_range(override, key):
    with pytest.raises(ConfigError, match=rf"^{re.escape(key)} must be (0 or )?(a finite number|an integer) "):
        load_config(None, [override])


@pytest.mark.parametrize(("override", "ok"), [
    # Special values and ends of the ranges, as the field docs define them.
    ("algo.dual_clip=0", True), ("algo.dual_clip=0.5", False), ("algo.dual_clip=1", False),
    ("algo.dual_clip=1.5", True),
    ("mi.probe_prompts=0", True), ("mi.probe_prompts=1", False), ("mi.probe_prompts=2", True),
    ("rollout.top_p=1", True), ("rollout.top_p=0", False), ("rollout.top_p=1.5", False),
    ("algo.clip_low=0", True), ("algo.clip_low=1", False), ("mi.ema_alpha=0", True), ("mi.ema_alpha=1", False),
    ("algo.gamma=1", True), ("algo.gamma=1.01", False), ("warm_start.action_noise=1", True),
    ("algo.lr=0", False), ("algo.adam_eps=0", False), ("rollout.temperature=0", False),
    ("run.max_minutes=0", True), ("algo.target_kl=0", True), ("algo.grad_clip=0", True), ("algo.value_clip=0", True),
    ("run.steps=0", True), ("run.seed=0", True), ("eval.episodes=0", False), ("warm_start.batch_size=0", False),
    ("mi.batch_tokens=0", False), ("rollout.groups=0", False), ("algo.epochs=0", False),
])
def test_the_ends_of_the_ranges(override, ok):
    if ok:
        load_config(None, [override])
    else:
        with pytest.raises(ConfigError, match="^" + re.escape(override.split("=")[0])):
            load_config(None, [override])


def test_a_config_built_in_code_is_checked_the_same_way():
    cfg = TrainConfig()
    cfg.algo.lr = float("inf")
    with pytest.raises(ConfigError, match=r"^algo.lr must be a finite number in \(0, 3.40282e\+38\] .*; got inf$"):
        cfg.validate()
    cfg = TrainConfig()
    cfg.run.seed = True  # a bool is not an int here
    with pytest.raises(ConfigError, match="^run.seed "):
        cfg.validate()


def _all_shipped() -> list[Path]:
    files = sorted((ROOT / "configs").glob("*.toml"))
    presets = [path for _, path, _ in list_presets()]
    return files + [p for p in presets if p.resolve() not in {f.resolve() for f in files}]


def test_the_defaults_and_every_shipped_config_and_preset_still_load():
    configs = _all_shipped()
    assert len(configs) >= 19
    check_runnable(load_config(None))
    for path in configs:
        cfg = load_config(path)
        assert config_to_dict(load_config(path)) == config_to_dict(cfg)
        cfg.run.device = "cpu"  # the GPU configs ask for cuda, which this machine may lack
        check_runnable(cfg)  # seed streams disjoint
    assert {name for name, _, _ in list_presets()} >= {"bandit_tiny", "sokoban_tiny"}


@pytest.mark.parametrize("algo", ["grpo", "dr_grpo", "dapo", "rloo"])
def test_group_relative_estimators_need_two_rollouts_per_group(algo):
    with pytest.raises(ConfigError, match=rf"^rollout.group_size must be >= 2 for algo.name={algo}"):
        load_config(None, [f"algo.name={algo}", "rollout.group_size=1", "filter.enabled=false"])
    load_config(None, [f"algo.name={algo}", "rollout.group_size=2", "filter.enabled=false"])


@pytest.mark.parametrize("algo", ["ppo", "grpo"])
def test_the_filter_needs_two_rollouts_per_group(algo):
    with pytest.raises(ConfigError, match=r"^rollout.group_size must be >= 2 .*filter.enabled"):
        load_config(None, ["algo.name=ppo", "rollout.group_size=1", "filter.enabled=true"])
    with pytest.raises(ConfigError, match=r"^rollout.group_size "):
        load_config(None, [f"algo.name={algo}", "rollout.group_size=1", "filter.enabled=true", "filter.ddof=0"])


def test_ppo_keeps_one_rollout_per_group_without_the_filter():
    cfg = load_config(None, ["algo.name=ppo", "rollout.group_size=1", "filter.enabled=false"])
    assert (cfg.algo.name, cfg.rollout.group_size) == ("ppo", 1)


def test_text_keys_take_number_like_overrides_as_text(tmp_path):
    assert load_config(None, ["run.name=123"]).run.name == "123"
    assert load_config(None, ["run.name=true"]).run.name == "true"
    assert load_config(None, ['run.name="quoted"']).run.name == "quoted"
    path = tmp_path / "c.toml"
    path.write_text("[run]\nname = 123\n")
    with pytest.raises(ConfigError, match=r'^run.name must be of type str; got 123 \(int\): quote it, name = "123"'):
        load_config(path)


@pytest.mark.parametrize("name", ["", ".", "..", "../escaped", "a/b", "a\\b", "/abs"])
def test_run_name_is_one_folder_name(name):
    cfg = TrainConfig()
    cfg.run.name = name
    with pytest.raises(ConfigError, match="^run.name must be a plain folder name"):
        cfg.validate()
    with pytest.raises(ConfigError, match="^run.name "):
        load_config(None, [f"run.name={name}"])


def test_run_name_accepts_ordinary_names():
    for name in ("run", "sokoban-tiny", "a.b_c-1", "123"):
        assert load_config(None, [f"run.name={name}"]).run.name == name


def test_an_unreadable_config_file_is_one_config_error(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_bytes(b"\xff\xfe[run]\n")
    with pytest.raises(ConfigError, match="not UTF-8") as err:
        load_config(path)
    assert "\n" not in str(err.value)


def test_the_bounds_do_not_change_valid_configs():
    # Validation only reads: a valid config is the same object content before and after.
    cfg = load_config(ROOT / "configs" / "sokoban_tiny.toml")
    before = dataclasses.asdict(cfg)
    cfg.validate()
    assert dataclasses.asdict(cfg) == before


def _set(cfg: TrainConfig, key: str, value) -> None:
    """Set `key` on a config object as code would (the fields of ``filter.spec`` are keys of [filter])."""
    section_name, name = key.split(".")
    section = getattr(cfg, section_name)
    if hasattr(section, name):
        object.__setattr__(section, name, value)
        return
    for f in dataclasses.fields(section):  # an inlined part (filter.spec): a frozen dataclass, replaced
        part = getattr(section, f.name)
        if dataclasses.is_dataclass(part) and hasattr(part, name):
            object.__setattr__(part, name, value)
            return
    raise KeyError(key)


#: A value of the wrong kind for each kind of key, as a notebook could set it: text for a flag ("false" is a non-empty
#: string, so it would read as true), a number for text, text for a number, a list for a table.
WRONG_KIND = {bool: "false", str: 3, int: "3", float: "0.5", dict: ["a"]}


@pytest.mark.parametrize("key", sorted(k for s, v in config_to_dict(TrainConfig()).items() for k in
                                       (f"{s}.{name}" for name in v)))
def test_a_key_set_in_code_to_a_value_of_the_wrong_kind_is_refused_by_validate(key):
    section, name = key.split(".")
    value = config_to_dict(TrainConfig())[section][name]
    kind = next((t for t in (bool, str, int, float, dict) if isinstance(value, t)), None)
    if kind is None:  # an optional key whose default is None takes several kinds; nothing to check here
        pytest.skip(f"{key} defaults to {value!r}")
    cfg = TrainConfig()
    _set(cfg, key, WRONG_KIND[kind])
    with pytest.raises(ConfigError, match=re.escape(key)):
        cfg.validate()
