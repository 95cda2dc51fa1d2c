"""`accepted_kwargs` lists exactly what `gym.make(id, name=...)` accepts, and docs/envs.md says the same.

The judge of "accepted" is `gym.make` itself: a name is accepted when `gym.make` with the name at its default value
raises no TypeError ("unexpected keyword argument").
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import gymnasium as gym
import pytest

import ragen_envs  # noqa: F401  (registers the ids)
from ragen_envs.base import TextAgentEnv
from ragen_envs.registration import accepted_kwargs, env_ids, kwarg_error

ROOT = Path(__file__).resolve().parents[2]
IDS = env_ids()
#: Every name a TextAgentEnv constructor has (read off the base class, the only place they are declared).
BASE_NAMES = sorted(p for p in inspect.signature(TextAgentEnv.__init__).parameters if p != "self")
_MISSING = object()


def _default(env_id: str, name: str):
    """The value `gym.make(env_id)` uses for `name`: the registered spec's, else the nearest constructor default
    up the class's MRO (_MISSING when no class declares the name)."""
    spec = gym.spec(env_id)
    if name in (spec.kwargs or {}):
        return spec.kwargs[name]
    cls = gym.envs.registration.load_env_creator(spec.entry_point)
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is not None:
            param = inspect.signature(init).parameters.get(name)
            if param is not None and param.default is not inspect.Parameter.empty:
                return param.default
    return _MISSING


def _gym_make_accepts(env_id: str, name: str, value) -> bool:
    try:
        gym.make(env_id, **{name: value}).close()
    except TypeError as e:
        if "unexpected keyword argument" in str(e):
            return False
        raise
    return True


@pytest.mark.parametrize("env_id", IDS)
def test_every_name_accepted_kwargs_lists_is_accepted_by_gym_make(env_id):
    for name in accepted_kwargs(env_id):
        value = _default(env_id, name)
        assert value is not _MISSING, f"{env_id}: {name} has no default"
        assert _gym_make_accepts(env_id, name, value), f"{env_id} rejects {name}={value!r}, which accepted_kwargs lists"


@pytest.mark.parametrize("env_id", IDS)
def test_a_base_class_name_gym_make_rejects_is_not_listed(env_id):
    listed = set(accepted_kwargs(env_id))
    for name in BASE_NAMES:
        assert _gym_make_accepts(env_id, name, _default(env_id, name)) == (name in listed), (env_id, name)


@pytest.mark.parametrize("env_id", ["ragen/Bandit-v0", "ragen/Countdown-v0", "ragen/MetaMathQA-v0", "ragen/Code-v0",
                                    "ragen/SearchQA-v0", "ragen/WebShop-v0"])
def test_the_one_answer_envs_take_no_action_budget(env_id):
    with pytest.raises(TypeError, match="max_actions"):
        gym.make(env_id, max_actions=5)
    assert "max_actions" not in accepted_kwargs(env_id)


def _suggestions(message: str) -> set[str]:
    return {name for hint in re.findall(r"did you mean (.*?)\?", message) for name in re.findall(r"'(\w+)'", hint)}


@pytest.mark.parametrize("env_id", IDS)
@pytest.mark.parametrize("typo", ["max_action", "max_actions_per_tur", "format_penalti", "max_turn", "visionn"])
def test_kwarg_error_only_suggests_names_gym_make_accepts(env_id, typo):
    with pytest.raises(TypeError) as exc:
        gym.make(env_id, **{typo: 3})
    message = kwarg_error(env_id, {typo: 3}, exc.value)
    assert f"has no kwarg '{typo}'" in message
    for name in _suggestions(message):
        assert _gym_make_accepts(env_id, name, _default(env_id, name)), f"{env_id}: suggests {name!r}: {message}"
    accepted = message.split("; it accepts: ", 1)[1].split(", ")
    for name in accepted:
        assert _gym_make_accepts(env_id, name, _default(env_id, name)), f"{env_id}: lists {name!r}"


def test_the_issue_example_suggests_nothing_bandit_rejects():
    kwargs = {"max_action": 3}
    with pytest.raises(TypeError) as exc:
        gym.make("ragen/Bandit-v0", **kwargs)
    message = kwarg_error("ragen/Bandit-v0", kwargs, exc.value)
    assert "max_actions" not in message  # neither max_actions nor max_actions_per_turn: Bandit takes neither


# ---------------------------------------------------------------------------------------------- docs/envs.md
def _doc_rows(start: str, end: str) -> list[list[str]]:
    text = (ROOT / "docs" / "envs.md").read_text(encoding="utf-8")
    block = text.split(start, 1)[1].split("\n", 1)[1].split(end, 1)[0]
    rows = [line.strip().strip("|").split("|") for line in block.strip().splitlines()]
    return [[cell.strip() for cell in row] for row in rows[2:]]  # past the header and its rule


def _names(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def test_the_knob_table_of_docs_envs_md_lists_only_what_gym_make_accepts():
    rows = _doc_rows("<!-- envs:start", "<!-- envs:end -->")
    table = {_names(row[0])[0]: _names(row[2]) for row in rows}
    assert list(table) == IDS
    for env_id, knobs in table.items():
        assert set(knobs) <= set(accepted_kwargs(env_id)), env_id
        for knob in knobs:
            assert _gym_make_accepts(env_id, knob, _default(env_id, knob)), f"docs/envs.md lists {env_id} {knob}"


def test_the_shared_kwargs_table_of_docs_envs_md_matches_gym_make():
    rows = _doc_rows("<!-- shared-kwargs:start", "<!-- shared-kwargs:end -->")
    documented: dict[str, set[str]] = {}
    for row in rows:
        ids = set(IDS) if row[1] == "every id" else set(_names(row[1]))
        assert ids <= set(IDS), row
        for name in _names(row[0]):
            documented[name] = ids
    assert set(documented) == {"action_format", "format_penalty", "render_mode", "max_actions_per_turn",
                               "max_turns", "vision", "split_actions", "turn_limit"}
    for name, ids in documented.items():
        for env_id in IDS:
            accepted = _gym_make_accepts(env_id, name, _default(env_id, name))
            assert accepted == (env_id in ids), f"docs/envs.md on {env_id} and {name}: gym.make says {accepted}"
            assert accepted == (name in accepted_kwargs(env_id)), (env_id, name)


def test_every_accepted_name_is_in_one_of_the_two_tables():
    own = {_names(row[0])[0]: set(_names(row[2])) for row in _doc_rows("<!-- envs:start", "<!-- envs:end -->")}
    shared: dict[str, set[str]] = {env_id: set() for env_id in IDS}
    for row in _doc_rows("<!-- shared-kwargs:start", "<!-- shared-kwargs:end -->"):
        for env_id in (IDS if row[1] == "every id" else _names(row[1])):
            shared[env_id] |= set(_names(row[0]))
    for env_id in IDS:
        registered = set(gym.spec(env_id).kwargs or {})
        assert set(accepted_kwargs(env_id)) - registered <= own[env_id] | shared[env_id], env_id
