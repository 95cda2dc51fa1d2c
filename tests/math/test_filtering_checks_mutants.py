"""`ragen_core.math.filtering`'s error objects, messages, reward dtypes and top-p boundary, pinned where the
mutation run found them untested (`make mutation`, docs/theory_report/mutation.md).

- :class:`FilterSpecError` keeps its field, problem and key, and ``renamed`` keeps the first two;
- the messages say what to do (``use G >= ddof + 1``) and what was expected (``[m] of indices``);
- rewards of every real dtype are read (unsigned 16-64-bit integers were refused as "not real numbers" by
  `reward_variance` and `filter_groups`, while `grpo` and `select_groups` took them);
- top-p's threshold ``value * total - eps`` with its relative slack of 1e-9 of the total: a prefix equal to the
  threshold reaches it, and the slack scales with the total.
"""

from __future__ import annotations

import pickle

import pytest
import torch

from ragen_core.math.filtering import (
    FilterSpec,
    FilterSpecError,
    compact,
    filter_groups,
    reward_variance,
    rv_statistics,
    select_groups,
    select_rows,
)


def test_a_filter_spec_error_keeps_what_it_concerns():
    err = FilterSpecError("value", "must be in (0, 1]; got 2")
    assert (err.field, err.problem, err.key, str(err)) == ("value", "must be in (0, 1]; got 2", "value",
                                                             "value must be in (0, 1]; got 2")
    renamed = err.renamed("filter.value")
    assert isinstance(renamed, FilterSpecError)
    assert (renamed.field, renamed.problem, renamed.key) == ("value", "must be in (0, 1]; got 2", "filter.value")
    assert str(renamed) == "filter.value must be in (0, 1]; got 2"
    back = pickle.loads(pickle.dumps(renamed))
    assert (back.field, back.problem, back.key, str(back)) == (renamed.field, renamed.problem, renamed.key,
                                                                 str(renamed))


@pytest.mark.parametrize("ddof,g", [(1, 1), (2, 2), (3, 1)])
def test_too_small_a_group_for_ddof_says_which_size_works(ddof, g):
    with pytest.raises(FilterSpecError, match=rf"got G={g} with ddof={ddof} \(use G >= {ddof + 1} or a smaller ddof\)"):
        FilterSpec(ddof=ddof).check_group_size(g)


def _batch(p: int = 3, g: int = 2) -> dict[str, torch.Tensor]:
    return {"input_ids": torch.arange(p * g * 4).view(p * g, 4), "attention_mask": torch.ones(p * g, 4)}


@pytest.mark.parametrize("call", [lambda kept: compact(_batch(), kept, 2),
                                  lambda kept: select_rows(_batch(), kept)])
def test_unreadable_indices_say_what_was_expected(call):
    with pytest.raises(ValueError, match=r"must be a real tensor \[m\] of indices or nested lists of numbers"):
        call([None])


@pytest.mark.parametrize("dtype", [torch.uint8, torch.uint16, torch.uint32, torch.uint64, torch.int16, torch.bool])
def test_rewards_of_every_real_dtype_are_read(dtype):
    rewards = [[1, 0, 1, 1], [0, 0, 0, 0], [1, 1, 0, 0]]
    ref = []
    for row in rewards:  # the sample variance by a plain loop
        mean = sum(row) / len(row)
        ref.append(sum((r - mean) ** 2 for r in row) / (len(row) - 1))
    got = reward_variance(torch.tensor(rewards).to(dtype))
    assert got.dtype == torch.float64 and got.tolist() == pytest.approx(ref, abs=1e-15)
    assert filter_groups(torch.tensor(rewards).to(dtype), "top_p", 0.9).kept.tolist() == \
        select_groups(torch.tensor(ref), "top_p", 0.9).kept.tolist() == [2, 0]


def test_the_top_p_slack_is_relative_to_the_total():
    """Scores that total 1e6: a first prefix 1e-4 short of 0.6 of the total is within 1e-9 of the total (the
    slack is 1e-3 here), so it reaches the threshold and one group is kept."""
    scores = torch.tensor([600_000 - 1e-4, 400_000 + 1e-4], dtype=torch.float64)
    assert select_groups(scores, "top_p", 0.6).kept.tolist() == [0]
    # Beyond the slack (1e-2 short) the second group is needed.
    scores = torch.tensor([600_000 - 1e-2, 400_000 + 1e-2], dtype=torch.float64)
    assert select_groups(scores, "top_p", 0.6).kept.tolist() == [0, 1]


def test_a_prefix_equal_to_the_threshold_reaches_it():
    """The documented rule keeps the smallest prefix whose sum is >= value * total - eps - 1e-9 * total: a first
    score exactly equal to that threshold is enough on its own."""
    total = 1e9
    for _ in range(50):  # the threshold moves with the total: iterate to a fixed point in float64
        threshold = 0.6 * total - 0.0 - 1e-9 * total
        first = threshold
        scores = torch.tensor([first, 1e9 - first], dtype=torch.float64)
        new_total = float(torch.cumsum(scores, 0)[-1])
        if new_total == total:
            break
        total = new_total
    assert float(scores[0]) == 0.6 * total - 1e-9 * total and scores[0] > scores[1]
    assert select_groups(scores, "top_p", 0.6).kept.tolist() == [0]


def test_unreadable_variances_beside_the_scores_are_named():
    with pytest.raises(ValueError, match=r"^variances must be a real tensor \[P\] or nested lists of numbers"):
        select_groups(torch.tensor([1.0, 2.0]), "top_p", 0.9, variances=[None, 1.0])


def test_filter_spec_of_takes_a_spec_or_settings_never_both():
    spec = FilterSpec("top_k", 0.5)
    assert FilterSpec.of(spec) is spec
    assert FilterSpec.of("top_k", 0.5) == spec
    for args, kwargs in [((spec, 0.5), {}), ((spec, 0.5, "std"), {}), ((spec,), {"ddof": 0})]:
        with pytest.raises(TypeError, match=r"^pass either a FilterSpec or the filter settings, not both$"):
            FilterSpec.of(*args, **kwargs)


def test_rv_statistics_refuses_what_is_not_a_variance():
    with pytest.raises(ValueError, match=r"^variances must be a real tensor \[P\] or nested lists of numbers"):
        rv_statistics([None, 1.0])
    with pytest.raises(ValueError, match=r"^variances must be real numbers; got dtype torch.bool$"):
        rv_statistics(torch.tensor([True, False]))
    with pytest.raises(ValueError, match=r"^scores must be real numbers \(variances or standard deviations\); got "
                                         r"dtype torch.bool$"):
        select_groups(torch.tensor([True, False]), "top_p", 0.9)


EIGHT = "[0, 1, 2, 3, 4, 5, 6, 7]"


@pytest.mark.parametrize("n_negative,listed", [(1, "[0]"), (8, EIGHT), (9, EIGHT + " ..."), (12, EIGHT + " ...")])
def test_negative_variances_list_the_first_eight_groups(n_negative, listed):
    v = torch.ones(15, dtype=torch.float64)
    v[:n_negative] = -0.5
    with pytest.raises(ValueError) as err:
        rv_statistics(v)
    assert str(err.value) == f"variances must be non-negative (a variance is >= 0); got -0.5 at group(s) {listed}"


def test_an_unreadable_reward_table_says_how_to_mark_a_missing_value():
    with pytest.raises(ValueError, match=r"^rewards must be a real tensor \[P, G\] or nested lists of numbers \(NaN "
                                         r"for a missing value, not None\); could not read it"):
        reward_variance([[None, 1.0], [0.0, 1.0]])


@pytest.mark.parametrize("eps,problem", [(-1, "must be a non-negative number; got -1"),
                                         (float("nan"), "must be a non-negative number; got nan"),
                                         (float("inf"), "must be a finite number >= 0; got inf"),
                                         (True, "must be a non-negative number, not a bool; got True")])
def test_a_bad_eps_is_named_with_what_is_wrong(eps, problem):
    with pytest.raises(FilterSpecError) as err:
        FilterSpec("top_p", 0.9, eps=eps)
    assert str(err.value) == f"eps {problem}"
