"""One filter spec, three front-ends: the training config's [filter] section, TRL's flat rv_filter_* fields and verl's
ragen_filter section build the same ragen_core.math.filtering.FilterSpec for the same settings, and reject the same
bad values with the same explanation, each under its own key."""

from __future__ import annotations

import dataclasses
import os

import pytest

from ragen_core.integrations.verl.core import FilterSpec as VerlFilterSpec
from ragen_core.math.filtering import FilterSpec, FilterSpecError
from ragen_core.training.config import ConfigError, FilterConfig, config_to_dict, dump_toml, load_config

SETTINGS = [
    {},
    {"strategy": "top_k", "value": 0.25, "order": "smallest"},
    {"strategy": "top_k_abs", "value": 3, "include_zero": False, "eps": 0.01, "ddof": 0},
    {"strategy": "min_p", "value": 0.5, "score": "std"},
    {"strategy": "random", "value": 0.9},
]
BAD = [("strategy", "top_q"), ("value", 0.0), ("value", 1.5), ("score", "mad"), ("order", "up"),
       ("include_zero", "yes"), ("ddof", -1), ("eps", -0.01)]


def _toml(value):
    return f'"{value}"' if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else repr(value)


def _from_config(settings):
    return load_config(None, [f"filter.{k}={_toml(v)}" for k, v in settings.items()]).filter.spec


def _verl_core(spec):
    return FilterSpec(**{f.name: getattr(spec, f.name) for f in dataclasses.fields(FilterSpec)})


def _trl_config(tmp_path, **kwargs):
    if not os.environ.get("CI"):
        pytest.importorskip("trl")
    from ragen_core.integrations.trl import RagenGRPOConfig

    return RagenGRPOConfig(output_dir=str(tmp_path), report_to="none", use_cpu=True, num_generations=4,
                           per_device_train_batch_size=4, **kwargs)


@pytest.mark.parametrize("settings", SETTINGS)
def test_config_and_verl_build_the_same_spec(settings):
    spec = FilterSpec(**settings)
    assert _from_config(settings) == spec
    verl = VerlFilterSpec.from_config(settings)
    assert isinstance(verl, FilterSpec) and _verl_core(verl) == spec


@pytest.mark.parametrize("key, value", BAD)
def test_config_and_verl_reject_the_same_values(key, value):
    with pytest.raises(FilterSpecError) as core:
        FilterSpec(**{key: value})
    with pytest.raises(ConfigError) as cfg:
        load_config(None, [f"filter.{key}={_toml(value)}"])
    if key != "include_zero":  # a string is no bool for the config's own type check, before the spec sees it
        assert str(cfg.value) == f"filter.{core.value}"
    with pytest.raises(FilterSpecError) as verl:
        VerlFilterSpec.from_config({key: value})
    assert (verl.value.field, verl.value.problem) == (core.value.field, core.value.problem)
    assert str(verl.value) == f"ragen_filter.{core.value}"


@pytest.mark.parametrize("settings", SETTINGS)
def test_trl_builds_the_same_spec(tmp_path, settings):
    from ragen_core.integrations.trl.grpo import RV_FILTER_FIELDS, rv_filter_arguments

    spec = FilterSpec(**settings)
    args = _trl_config(tmp_path, **{RV_FILTER_FIELDS[k]: v for k, v in settings.items()},
                       **({} if "strategy" in settings else {"rv_filter": "top_p"}))
    assert args.filter_spec() == spec
    assert _trl_config(tmp_path, **rv_filter_arguments(spec)).filter_spec() == spec
    assert _trl_config(tmp_path).filter_spec() is None  # rv_filter=None: off


@pytest.mark.parametrize("key, value", BAD)
def test_trl_rejects_the_same_values(tmp_path, key, value):
    from ragen_core.integrations.trl.grpo import RV_FILTER_FIELDS

    with pytest.raises(FilterSpecError) as core:
        FilterSpec(**{key: value})
    with pytest.raises(FilterSpecError) as trl:
        _trl_config(tmp_path, **{"rv_filter": "top_p", RV_FILTER_FIELDS[key]: value})
    assert (trl.value.field, trl.value.problem) == (core.value.field, core.value.problem)
    assert str(trl.value) == f"{RV_FILTER_FIELDS[key]} {core.value.problem}"


def test_every_spec_field_has_its_place_in_each_front_end(tmp_path):
    """Adding a FilterSpec field adds a [filter] key and a verl key by itself; TRL needs its rv_filter_* field."""
    names = [f.name for f in dataclasses.fields(FilterSpec)]
    assert list(config_to_dict(load_config(None))["filter"]) == ["enabled", *names, "max_empty_steps", "empty_step"]
    assert [f.name for f in dataclasses.fields(VerlFilterSpec)][:len(names)] == names
    args = _trl_config(tmp_path)
    from ragen_core.integrations.trl.grpo import RV_FILTER_FIELDS

    for name in names[1:]:  # rv_filter (the strategy) defaults to None: off
        assert getattr(args, RV_FILTER_FIELDS[name]) == getattr(FilterSpec(), name), name


def test_the_filter_section_round_trips_and_guards_its_spec(tmp_path):
    cfg = load_config(None, ['filter.strategy="top_k_abs"', "filter.value=4", "filter.ddof=0"])
    assert cfg.filter.spec == FilterSpec("top_k_abs", 4, ddof=0)
    path = tmp_path / "c.toml"
    path.write_text(dump_toml(cfg))
    assert "ddof = 0" in path.read_text() and load_config(path) == cfg
    # A file's strategy and an override's value are checked together, on their final values.
    path.write_text('[filter]\nstrategy = "top_k_abs"\n')
    assert load_config(path, ["filter.value=2"]).filter.spec.value == 2.0
    with pytest.raises(ConfigError, match="^filter.value must be a positive integer count"):
        load_config(path)
    with pytest.raises(AttributeError, match="filter.spec"):
        FilterConfig().value = 0.5
    with pytest.raises(ConfigError, match="^filter.ddof needs G > ddof"):
        load_config(None, ["filter.ddof=2", "rollout.group_size=2"])
    load_config(None, ["filter.ddof=2", "rollout.group_size=2", "filter.enabled=false"])
