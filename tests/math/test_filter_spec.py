"""FilterSpec: the one definition of the filter settings, validated once, taken by filter_groups and select_groups."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from ragen_core.math.filtering import FilterSpec, FilterSpecError, filter_groups, select_groups


def test_defaults_are_the_papers_and_the_spec_is_frozen():
    spec = FilterSpec()
    assert (spec.strategy, spec.value, spec.score, spec.include_zero, spec.order, spec.ddof, spec.eps) == (
        "top_p", 0.9, "variance", True, "largest", 1, 0.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.value = 0.5  # type: ignore[misc]


def test_numbers_are_stored_as_floats_so_equal_settings_give_equal_specs():
    assert FilterSpec("top_k_abs", 3) == FilterSpec("top_k_abs", 3.0)
    assert isinstance(FilterSpec("top_k_abs", 3).value, float) and isinstance(FilterSpec(eps=0).eps, float)


@pytest.mark.parametrize("kwargs, field", [
    ({"strategy": "top_q"}, "strategy"), ({"score": "mad"}, "score"), ({"order": "up"}, "order"),
    ({"include_zero": "yes"}, "include_zero"), ({"include_zero": 1}, "include_zero"),
    ({"ddof": -1}, "ddof"), ({"ddof": 1.0}, "ddof"), ({"ddof": True}, "ddof"),
    ({"eps": -0.01}, "eps"), ({"eps": "x"}, "eps"), ({"eps": float("nan")}, "eps"),
    ({"value": 0.0}, "value"), ({"value": 1.5}, "value"), ({"value": "x"}, "value"),
    ({"strategy": "top_k_abs", "value": 2.5}, "value"), ({"strategy": "top_k_abs", "value": float("inf")}, "value"),
    ({"strategy": "min_p", "value": -0.1}, "value"),
])
def test_each_bad_field_is_named(kwargs, field):
    with pytest.raises(FilterSpecError) as info:
        FilterSpec(**kwargs)
    assert info.value.field == field and str(info.value).startswith(f"{field} must be")
    assert isinstance(info.value, ValueError)


def test_group_size_must_exceed_ddof():
    FilterSpec(ddof=1).check_group_size(2)
    FilterSpec(ddof=0).check_group_size(1)
    with pytest.raises(FilterSpecError, match="G > ddof") as info:
        FilterSpec(ddof=1).check_group_size(1)
    assert info.value.field == "ddof"


def test_filter_groups_takes_a_spec_or_its_fields():
    rewards = torch.tensor([[0.0, 1.0, 1.0, 1.0], [0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    spec = FilterSpec("top_k", 0.5, score="std", order="smallest", include_zero=False)
    by_spec = filter_groups(rewards, spec)
    assert by_spec.kept.tolist() == filter_groups(rewards, "top_k", 0.5, "std", False, "smallest").kept.tolist()
    assert by_spec.kept.tolist() == filter_groups(rewards, **dataclasses.asdict(spec)).kept.tolist()
    assert select_groups(by_spec.scores, spec).kept.tolist() == by_spec.kept.tolist()
    with pytest.raises(TypeError, match="not both"):
        filter_groups(rewards, spec, value=0.5)
