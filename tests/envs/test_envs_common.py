"""Contracts every registered env of the suite must meet (run over all ids)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ragen_envs
from ragen_envs.base import TextAgentEnv
from ragen_envs.protocol import FORMAT_PENALTY
from ragen_envs.registration import ENV_SPECS, env_ids

IDS = env_ids()
DOC_SECTIONS = (
    "Description",
    "Action Space",
    "Observation Space",
    "Starting State",
    "Rewards",
    "Episode End",
    "Information",
    "Arguments",
    "Version History",
    "Text format",
    "Action format",
)
REQUIRED_INFO = {"action_is_valid", "actions_executed", "success", "format_penalty"}

NASTY_RESPONSES = [
    "",
    " ",
    "\x00\x01\x02\x1b[31m",
    "x" * 1_000_000 + "<think>a</think><answer>Up</answer>",
    "<think>",
    "<answer>",
    "</answer><answer>",
    "<think>a</think><answer>",
    "<think><think>a</think></think><answer>Up</answer>",
    "<think>a</think><answer>Up</answer><answer>Down</answer>",
    "<think>a</think><answer><answer>Up</answer></answer>",
    "日本語のテキスト 🙂 <think>思考</think>",
    "\ud800 lone surrogate",
    "<think>a</think>\n",
]


def _text(obs):
    return obs["text"] if isinstance(obs, dict) else obs


def test_every_id_is_registered_under_the_ragen_namespace():
    assert IDS, "no env registered"
    for env_id in IDS:
        assert env_id.startswith("ragen/") and env_id in gym.registry
    assert len(set(IDS)) == len(IDS) == len(ENV_SPECS)


def test_module_prefix_form_works():
    env = gym.make("ragen_envs:" + IDS[0])
    env.close()


@pytest.mark.parametrize("env_id", IDS)
def test_gymnasium_env_checker(env_id):
    env = gym.make(env_id)
    check_env(env.unwrapped, skip_render_check=True)
    env.close()


def doc_sections(doc: str) -> dict[str, str]:
    """A docstring's sections: heading -> the text under it. A heading is a whole line `## Heading`."""
    sections: dict[str, str] = {}
    current = None
    for line in doc.splitlines():
        text = line.strip()
        if text.startswith("## "):
            current = text[3:].strip()
            sections[current] = ""
        elif current is not None:
            sections[current] += text + "\n"
    return sections


def test_doc_sections_match_whole_heading_lines():
    doc = (
        "Summary.\n\n    ## Rewards\n\n    Rewards and Episode End are words here, not headings.\n"
        "    ## Episode End\n"
    )
    assert list(doc_sections(doc)) == ["Rewards", "Episode End"]
    assert "Episode End" not in doc_sections("Summary.\n    ## Rewards\n    see Episode End\n")


@pytest.mark.parametrize("env_id", IDS)
def test_docstring_has_the_gymnasium_sections(env_id):
    sections = doc_sections(type(gym.make(env_id).unwrapped).__doc__ or "")
    missing = [s for s in DOC_SECTIONS if s not in sections]
    assert not missing, f"{env_id} docstring lacks the section headings {missing}"
    assert "gym.make" in sections["Arguments"], f"{env_id}: the Arguments section shows no gym.make call"


@pytest.mark.parametrize("env_id", IDS)
def test_envs_use_the_base_step_and_reset(env_id):
    """Envs shape a step through the documented hooks of ragen_envs.base, never by overriding step()."""
    cls = type(gym.make(env_id).unwrapped)
    assert issubclass(cls, TextAgentEnv)
    for name in ("step", "reset", "_observation", "_info"):
        assert getattr(cls, name) is getattr(TextAgentEnv, name), f"{cls.__name__} overrides {name}()"


@pytest.mark.parametrize("env_id", IDS)
def test_reset_and_step_info_conventions(env_id):
    env = gym.make(env_id)
    obs, info = env.reset(seed=0)
    assert REQUIRED_INFO <= set(info)
    assert isinstance(info["instructions"], str) and len(info["instructions"]) > 40
    assert "<answer>" in info["instructions"]
    assert env.observation_space.contains(obs)
    _, reward, terminated, truncated, info = env.step("<think>x</think><answer>no such action</answer>")
    assert REQUIRED_INFO <= set(info)
    assert isinstance(terminated, bool) and isinstance(truncated, bool)
    assert isinstance(info["actions_executed"], list)
    assert math.isfinite(reward)


@pytest.mark.parametrize("env_id", IDS)
def test_bad_input_never_crashes_nor_changes_the_state(env_id):
    env = gym.make(env_id)
    env.reset(seed=1)
    state = env.unwrapped._state_text()
    for response in NASTY_RESPONSES:
        obs, reward, terminated, truncated, info = env.step(response)
        assert not info["action_is_valid"], repr(response[:60])
        assert reward == pytest.approx(FORMAT_PENALTY)
        assert env.observation_space.contains(obs)
        if terminated or truncated:
            # Single-turn tasks end on any answer; the next episode starts from the same seed.
            env.reset(seed=1)
        else:
            assert env.unwrapped._state_text() == state


@pytest.mark.parametrize("env_id", IDS)
def test_random_text_steps_never_crash(env_id):
    env = gym.make(env_id)

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(st.text(max_size=200), min_size=1, max_size=4), st.integers(0, 2**16))
    def run(responses, seed):
        env.reset(seed=seed)
        for response in responses:
            obs, reward, terminated, truncated, info = env.step(response)
            assert env.observation_space.contains(obs)
            assert math.isfinite(reward)
            if terminated or truncated:
                break

    run()
    env.close()


@pytest.mark.parametrize("env_id", IDS)
def test_same_seed_same_level_different_seeds_differ(env_id):
    env = gym.make(env_id)
    a = _text(env.reset(seed=7)[0])
    b = _text(env.reset(seed=7)[0])
    others = {_text(env.reset(seed=s)[0]) for s in range(8, 20)}
    assert a == b
    assert len(others | {a}) > 1, "12 different seeds all gave the same initial state"


_TRAJECTORY_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import gymnasium as gym
    import ragen_envs
    out = {}
    for env_id in ragen_envs.env_ids():
        env = gym.make(env_id)
        rows = []
        for seed in (0, 1, 2):
            obs, info = env.reset(seed=seed)
            text = obs["text"] if isinstance(obs, dict) else obs
            row = [text]
            vocab = getattr(env.unwrapped, "ACTIONS", ()) or ("answer",)
            for t in range(4):
                action = vocab[(seed + t) % len(vocab)]
                obs, r, term, trunc, info = env.step(f"<think>t</think><answer>{action}</answer>")
                text = obs["text"] if isinstance(obs, dict) else obs
                row.append([text, round(float(r), 6), term, trunc])
                if term or trunc:
                    break
            rows.append(row)
        out[env_id] = rows
    json.dump(out, sys.stdout)
    """
)


def test_determinism_across_processes_with_different_hash_seeds():
    results = []
    for hash_seed in ("1", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        proc = subprocess.run(
            [sys.executable, "-c", _TRAJECTORY_SCRIPT], capture_output=True, text=True, env=env, timeout=600
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        results.append(json.loads(proc.stdout))
    assert set(results[0]) == set(IDS)
    for env_id in IDS:
        assert results[0][env_id] == results[1][env_id], f"{env_id} differs between processes"


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("env_id", IDS)
def test_vector_envs_return_the_same_strings_as_single_envs(env_id, mode):
    venv = gym.make_vec(env_id, num_envs=2, vectorization_mode=mode)
    try:
        obs, _ = venv.reset(seed=[3, 4])
        singles = [gym.make(env_id) for _ in range(2)]
        expected = [s.reset(seed=seed)[0] for s, seed in zip(singles, (3, 4))]
        texts = obs["text"] if isinstance(obs, dict) else obs
        assert list(texts) == [_text(e) for e in expected]
        if isinstance(obs, dict):
            assert np.array_equal(obs["image"][0], expected[0]["image"])
        vocab = getattr(singles[0].unwrapped, "ACTIONS", ()) or ("answer",)
        response = f"<think>t</think><answer>{vocab[0]}</answer>"
        obs, rewards, term, trunc, _ = venv.step([response, response])
        texts = obs["text"] if isinstance(obs, dict) else obs
        for i, single in enumerate(singles):
            single_obs, single_r, single_term, single_trunc, _ = single.step(response)
            if not (single_term or single_trunc):
                assert texts[i] == _text(single_obs)
            assert rewards[i] == pytest.approx(single_r)
    finally:
        venv.close()


def test_package_exports():
    assert callable(ragen_envs.parse_response)
    assert ragen_envs.env_ids() == IDS


# ----------------------------------------------------------------------------------------------- hostile text
ECHO_PAYLOADS = ["\ud800", "a\udfffb", "\udbff\udc00", "\U0001f600", "\U0010ffff", "x\x00y"]


@pytest.mark.parametrize("env_id", IDS)
def test_echoed_text_never_leaves_the_observation_space(env_id):
    """Whatever an env echoes from the answer (search query, clicked element, answer text), the
    observation stays in observation_space and info holds no lone surrogate (it must encode as UTF-8)."""
    env = gym.make(env_id)
    env.reset(seed=0)
    for payload in ECHO_PAYLOADS:
        for answer in (f"search[{payload}]", f"click[{payload}]", f"finish[{payload}]", payload, f"Up {payload}"):
            obs, reward, terminated, truncated, info = env.step(f"<think>t</think><answer>{answer}</answer>")
            assert env.observation_space.contains(obs), (env_id, answer)
            assert math.isfinite(reward)
            str(info).encode("utf-8")
            if terminated or truncated:
                env.reset(seed=0)
    env.close()


def test_fold_case_table_is_complete():
    from ragen_envs.protocol import _FOLDS_TO_ASCII

    computed = {
        chr(c)
        for c in range(0x80, 0x110000)
        if not 0xD800 <= c <= 0xDFFF and any(ord(f) < 0x80 for f in chr(c).casefold())
    }
    assert computed == set(_FOLDS_TO_ASCII)


_LOOKALIKES = {"s": "\u017f", "S": "\u017f", "k": "\u212a", "K": "\u212a", "i": "\u0131", "I": "\u0130"}


@pytest.mark.parametrize("env_id", IDS)
def test_lookalike_letters_never_match_an_action(env_id):
    """'ſ' (U+017F), 'K' (U+212A), 'ı' and 'İ' equal s, k, i under Unicode case folding / re.IGNORECASE;
    an action spelled with them is not an action (it is dropped, never dispatched as the ASCII one)."""
    env = gym.make(env_id).unwrapped
    env.reset(seed=0)
    free_form = env._match_action("zq xv 17") is not None  # math, code: any text is an answer
    names = list(env.ACTIONS) + ["search[x]", "click[Buy Now]", "finish[x]", "search[Buy Now]"]
    names += [a for arm in (getattr(env, "low_arm", None), getattr(env, "high_arm", None)) if arm for a in [arm]]
    tried = 0
    for name in names:
        for letter, lookalike in _LOOKALIKES.items():
            if letter in name.split("[")[0]:
                spoof = name.replace(letter, lookalike, 1)
                tried += 1
                matched = env._match_action(spoof)
                if free_form:  # the text is kept as written, never turned into the ASCII spelling
                    assert matched is not None and lookalike in matched, (spoof, matched)
                else:
                    assert matched is None, (spoof, matched)
    assert tried


def test_tags_match_ascii_case_only():
    from ragen_envs.protocol import parse_response, vocabulary_matcher

    match = vocabulary_matcher(["Up", "Skip"])
    assert parse_response("<THINK>a</THINK><Answer>up</ANSWER>", match).actions == ("Up",)
    for spoof in ("<think>a</think><an\u017fwer>Up</an\u017fwer>", "<th\u0131nk>a</th\u0131nk><answer>Up</answer>",
                  "<thin\u212a>a</thin\u212a><answer>Up</answer>"):
        assert parse_response(spoof, match).actions == (), spoof
    assert match("\u017fkip") is None and match("s\u212aip") is None and match("SKIP") == "Skip"
    assert vocabulary_matcher(["Été"])("éTÉ") == "Été"  # non-ASCII names still fold as usual


def test_parser_replaces_lone_surrogates_and_fit_observation_is_total():
    from ragen_envs.protocol import parse_response
    from ragen_envs.spaces import MAX_OBSERVATION_CHARS, fit_observation, observation_space

    parsed = parse_response("<think>\ud800</think><answer>a\udc00</answer>", lambda p: p)
    assert parsed.actions == ("a\ufffd",) and parsed.think == "\ufffd"
    space = observation_space()
    for text in ("", "\x00", "\ud800" * 3, "\U0001f600", "x" * (MAX_OBSERVATION_CHARS + 5), "ok"):
        fitted = fit_observation(text)
        assert space.contains(fitted), repr(text[:10])
    assert fit_observation("ok") == "ok"
