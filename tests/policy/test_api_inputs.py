"""The policy API with inputs an outside review tried: one stop string, None, misaligned image lists on either
decoding path, bools as counts, chat messages whose role or content is not text."""

from __future__ import annotations

import pytest

from ragen_core.policy.base import stop_strings


def test_stop_strings_take_one_string_whole_and_none_as_none():
    assert stop_strings("</answer>") == ("</answer>",)
    assert stop_strings(("</answer>", "", "STOP")) == ("</answer>", "STOP")
    assert stop_strings(None) == ()
    with pytest.raises(TypeError, match="stop strings must be str"):
        stop_strings(["</answer>", 5])


def test_stop_at_adds_one_string_as_one_stop_token(make_tiny_policy):
    from ragen_core.integrations.trl.env import stop_at

    policy = make_tiny_policy()
    before = policy.model.generation_config.eos_token_id
    before = [before] if isinstance(before, int) else list(before or [])
    eos = stop_at(policy.model, policy.tokenizer, "</answer>")
    answer_id = policy.tokenizer("</answer>", add_special_tokens=False)["input_ids"]
    assert len(answer_id) == 1
    # the tokens of '<', '/', 'a', ... must not become stop tokens
    assert set(eos) == {*before, policy.tokenizer.eos_token_id, answer_id[0]}


@pytest.mark.parametrize("fast", [True, False])
def test_misaligned_image_lists_are_refused_on_both_paths(make_tiny_policy, fast):
    policy = make_tiny_policy()
    policy.fast = fast
    prompt = policy.encode_chat([{"role": "user", "content": "x"}])
    with pytest.raises(ValueError, match="one list per sequence"):
        policy.generate([prompt], max_new_tokens=2, images=[[], []])


def test_generate_takes_no_stop_strings_and_refuses_a_bool_count(make_tiny_policy):
    policy = make_tiny_policy()
    prompt = policy.encode_chat([{"role": "user", "content": "x"}])
    assert len(policy.generate([prompt], max_new_tokens=2, stop=None)) == 1
    with pytest.raises(ValueError, match="max_new_tokens"):
        policy.generate([prompt], max_new_tokens=True)


@pytest.mark.parametrize("message", [{"role": "user", "content": None}, {"role": None, "content": "x"},
                                     {"role": "user", "content": 5},
                                     {"role": "user", "content": [{"type": "text", "text": "hi"}]}])
def test_chat_messages_need_text_role_and_content(make_tiny_policy, message):
    with pytest.raises(ValueError, match="message 0: 'role' and 'content' must be strings"):
        make_tiny_policy().encode_chat([message])
