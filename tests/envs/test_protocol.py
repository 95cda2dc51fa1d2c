"""The shared response parser: RAGEN protocol rules, bad input, property tests."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragen_envs.protocol import FORMAT_PENALTY, parse_response, vocabulary_matcher

VOCAB = ("Up", "Down", "Left", "Right")
MATCH = vocabulary_matcher(VOCAB)


def _tagged(answer: str, think: str = "plan") -> str:
    return f"<think>{think}</think> <answer>{answer}</answer>"


def test_well_formed_response_gives_actions_without_penalty():
    parsed = parse_response(_tagged("Up || Left"), MATCH)
    assert parsed.actions == ("Up", "Left")
    assert parsed.dropped == ()
    assert parsed.format_error is None
    assert parsed.format_penalty == 0.0
    assert parsed.think == "plan"


def test_matching_is_case_and_whitespace_insensitive():
    parsed = parse_response(_tagged("  uP ||\tLEFT  "), MATCH)
    assert parsed.actions == ("Up", "Left")


def test_actions_beyond_the_turn_budget_are_dropped_and_penalised():
    parsed = parse_response(_tagged("Up || Down || Left"), MATCH, max_actions=2)
    assert parsed.actions == ("Up", "Down")
    assert parsed.dropped == ("Left",)
    assert parsed.format_penalty == FORMAT_PENALTY


def test_unknown_action_is_dropped_and_penalised_but_valid_ones_run():
    parsed = parse_response(_tagged("Jump || Up"), MATCH)
    assert parsed.actions == ("Up",)
    assert parsed.dropped == ("Jump",)
    assert parsed.format_penalty == FORMAT_PENALTY


@pytest.mark.parametrize(
    "response, reason",
    [
        ("", "missing <answer>"),
        ("Up", "missing <answer>"),
        ("<answer>Up</answer>", "missing <think>"),
        ("<think>a</think><answer>Up</answer><answer>Down</answer>", "expected one <answer>"),
        ("<think>a</think><answer>Up", "expected one <answer>"),
        ("<think>a</think></answer>Up<answer>", "comes before"),
        ("<think><answer>Up</answer></think>", "must close before"),
        ("<think>a</think><answer><think>b</think>Up</answer>", "<think> tag inside <answer>"),
        ("<think>a</think><answer>   </answer>", "empty answer"),
        ("<think>a<think>b</think><answer>Up</answer>", "expected one <think>"),
    ],
)
def test_malformed_responses_execute_nothing(response, reason):
    parsed = parse_response(response, MATCH)
    assert parsed.actions == ()
    assert reason in parsed.format_error
    assert parsed.format_penalty == FORMAT_PENALTY


def test_tags_are_case_insensitive_and_surrounding_text_tolerated():
    parsed = parse_response("Sure! <THINK>x</THINK>\n<Answer>Right</Answer> done", MATCH)
    assert parsed.actions == ("Right",)


def test_answer_mode_makes_think_optional():
    assert parse_response("<answer>Up</answer>", MATCH, action_format="answer").actions == ("Up",)
    assert parse_response(_tagged("Up"), MATCH, action_format="answer").actions == ("Up",)


def test_plain_mode_accepts_bare_actions_and_tags():
    assert parse_response("up || down", MATCH, action_format="plain").actions == ("Up", "Down")
    assert parse_response(_tagged("Left"), MATCH, action_format="plain").actions == ("Left",)
    assert parse_response("<think>hm</think> Right", MATCH, action_format="plain").actions == ("Right",)


def test_long_response_is_truncated_before_parsing():
    response = "x" * 5000 + _tagged("Up")
    parsed = parse_response(response, MATCH, max_chars=1000)
    assert parsed.truncated
    assert parsed.actions == ()
    short = parse_response(_tagged("Up") + "x" * 5000, MATCH, max_chars=1000)
    assert short.truncated and short.actions == ("Up",)


def test_control_characters_are_neutralised():
    parsed = parse_response("<think>a\x00b</think><answer>Up\x07 || \x1bLeft</answer>", MATCH)
    assert parsed.actions == ("Up", "Left")


def test_non_string_inputs_are_malformed_not_errors():
    for value in (None, 3, ["Up"], {"a": 1}):
        parsed = parse_response(value, MATCH)
        assert parsed.actions == () and "must be a string" in parsed.format_error
    assert parse_response(_tagged("Up").encode(), MATCH).actions == ("Up",)
    assert parse_response(b"\xff\xfe<think>", MATCH).actions == ()


def test_free_form_answers_are_not_split():
    parsed = parse_response(_tagged("1 || 2"), lambda s: s, split_actions=False, max_actions=1)
    assert parsed.actions == ("1 || 2",)


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="action_format"):
        parse_response("x", MATCH, action_format="xml")
    with pytest.raises(ValueError, match="max_actions"):
        parse_response("x", MATCH, max_actions=0)
    with pytest.raises(ValueError, match="alias"):
        vocabulary_matcher(VOCAB, {"north": "Jump"})


# ---------------------------------------------------------------- property tests
@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_any_text_parses_without_error_and_respects_the_contract(text):
    parsed = parse_response(text, MATCH, max_actions=2)
    assert set(parsed.actions) <= set(VOCAB)
    assert len(parsed.actions) <= 2
    assert parsed.format_penalty in (0.0, FORMAT_PENALTY)
    if parsed.format_penalty == 0.0:
        assert parsed.actions and parsed.format_error is None and not parsed.dropped


_case = st.sampled_from([str.lower, str.upper, str.title, lambda s: s])


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(VOCAB), _case, st.sampled_from(["", " ", "  ", "\t"])), min_size=1, max_size=5),
    st.integers(1, 4),
    st.text(alphabet=st.characters(blacklist_characters="<>"), max_size=50),
)
def test_valid_actions_round_trip_up_to_the_budget(actions, budget, think):
    answer = " || ".join(f"{pad}{case(a)}{pad}" for a, case, pad in actions)
    parsed = parse_response(_tagged(answer, think), MATCH, max_actions=budget)
    names = [a for a, _, _ in actions]
    assert parsed.actions == tuple(names[:budget])
    assert len(parsed.dropped) == max(0, len(names) - budget)
    assert parsed.format_penalty == (0.0 if len(names) <= budget else FORMAT_PENALTY)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=60), st.text(max_size=60))
def test_text_around_a_valid_response_never_adds_actions(prefix, suffix):
    parsed = parse_response(prefix + _tagged("Down") + suffix, MATCH)
    # Extra tags in the surrounding text make the response malformed; otherwise exactly "Down".
    assert parsed.actions in ((), ("Down",))
    if "<" not in prefix + suffix:
        assert parsed.actions == ("Down",)


_fragments = st.sampled_from(["<think>", "</think>", "<answer>", "</answer>", "<THINK>", "<", "Up", " ", "x", "||"])


@settings(max_examples=400, deadline=None)
@given(st.lists(_fragments, max_size=12), st.sampled_from(["tagged", "answer", "plain"]))
def test_fast_path_agrees_with_the_general_rules(pieces, action_format):
    from ragen_envs.protocol import _locate_answer, _locate_answer_general

    text = "".join(pieces)
    assert _locate_answer(text, action_format) == _locate_answer_general(text, action_format)
