"""The env contract's defaults live in one place (`ragen_envs.contract`) and every caller reads an env through it.

The base env takes the constants as its constructor defaults; the rollout (`ragen_core.episode`), the TRL adapter,
the verl adapter (through `ChatEpisode`), `ragen play` and the trainer read an env's values through the contract's
functions: moving a constant moves what they do, and no caller of ragen_core keeps a literal default of its own.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import ragen_core
import ragen_envs
from ragen_envs import contract
from ragen_envs.base import TextAgentEnv

#: The contract attributes a caller may read with a fallback, and the contract's constant for each.
CONTRACT_ATTRIBUTES = {
    "format_penalty_value": "FORMAT_PENALTY",
    "max_actions_per_turn": "MAX_ACTIONS_PER_TURN",
    "action_format": "ACTION_FORMAT",
    "vision": "VISION",
}


class Foreign:
    """An env outside the contract: it declares none of the attributes, and its step raises."""

    def step(self, text: str) -> Any:
        raise RuntimeError("boom")


def test_the_base_env_takes_the_contract_constants_as_its_defaults():
    params = inspect.signature(TextAgentEnv.__init__).parameters
    assert params["format_penalty"].default == contract.FORMAT_PENALTY == ragen_envs.FORMAT_PENALTY == -0.1
    assert params["max_actions_per_turn"].default == contract.MAX_ACTIONS_PER_TURN == 2
    assert params["action_format"].default == contract.ACTION_FORMAT == "tagged"
    assert params["vision"].default is contract.VISION is False


def test_the_readers_return_what_an_env_declares():
    env = gym.make("ragen/Sokoban-v0", format_penalty=-0.5, max_actions_per_turn=3, action_format="plain")
    assert contract.format_penalty(env) == -0.5
    assert contract.max_actions_per_turn(env) == 3
    assert contract.action_format(env) == "plain"
    assert contract.vision(env) is False and contract.vision(gym.make("ragen/Sokoban-Vision-v0")) is True


@pytest.mark.parametrize("env_id", [i for i in ragen_envs.env_ids() if "Sokoban" in i or "Bandit" in i])
def test_observes_images_agrees_with_the_built_env(env_id: str):
    """What the trainer asks (which tiny model) before it builds an env: the spec and the kwargs say it."""
    for kwargs in ({}, {"vision": False}, {"vision": True}) if "Sokoban" in env_id else ({},):  # Bandit: no vision=
        built = gym.make(env_id, **kwargs).unwrapped.vision
        assert contract.observes_images(env_id, kwargs) is built


def test_the_rollout_follows_the_contract(monkeypatch):
    from ragen_core.episode import response_format, safe_step

    monkeypatch.setattr(contract, "FORMAT_PENALTY", -0.25)
    _, reward, terminated, _, info = safe_step(Foreign(), "<answer>Up</answer>")
    assert reward == -0.25 and info["format_penalty"] == -0.25 and terminated
    monkeypatch.setattr(contract, "ACTION_FORMAT", "plain")
    assert response_format(Foreign()) == "[your answer]"


def test_the_trl_adapter_reads_the_penalty_through_the_contract(monkeypatch):
    from ragen_core.integrations.trl import env as trl_env

    a = trl_env.RagenEnvironment("ragen/FrozenLake-v0")
    a.reset(seed=0)
    seen = []

    def spy(env: Any, default: float | None = None) -> float:
        seen.append(default)
        return -0.75

    monkeypatch.setattr(contract, "format_penalty", spy)
    assert a.get_reward() == -0.75 and seen == [trl_env.UNDECLARED_FORMAT_PENALTY]
    monkeypatch.undo()
    a._env = Foreign()  # an env outside the contract: the adapter's documented value, as before
    assert a.get_reward() == trl_env.UNDECLARED_FORMAT_PENALTY == 0.0


def test_the_verl_episode_reads_the_penalty_through_the_contract(monkeypatch):
    from ragen_core.integrations.verl.env import EnvEpisode

    ep = EnvEpisode("ragen/FrozenLake-v0", seed=0)
    ep.start()
    monkeypatch.setattr(ep.env, "step", Foreign().step)  # the env raises on this answer
    monkeypatch.setattr(contract, "format_penalty", lambda env, default=None: -0.25)
    assert ep.step("<answer>Up</answer>") is None and ep.turn_rewards[-1] == -0.25 and ep.done


def test_play_reads_the_actions_per_turn_through_the_contract(monkeypatch):
    from ragen_core.apps.play import example_action

    env = gym.make("ragen/Sokoban-v0")
    env.reset(seed=0)
    assert example_action(env).count("||") == 1  # the env's 2
    one = gym.make("ragen/Sokoban-v0", max_actions_per_turn=1)
    one.reset(seed=0)
    assert "||" not in example_action(one)
    seen = []
    monkeypatch.setattr(contract, "max_actions_per_turn", lambda e, default=None: seen.append(default) or 1)
    assert "||" not in example_action(env) and seen == [1]  # play's value for an env that declares none


def test_no_caller_in_ragen_core_keeps_a_default_of_its_own():
    """`getattr(x, "<contract attribute>", <literal>)` anywhere in ragen_core is a second copy of a default (None,
    "not declared: skip", is allowed)."""
    root = Path(ragen_core.__file__).parent
    offenders = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                    and len(node.args) == 3 and isinstance(node.args[1], ast.Constant)
                    and node.args[1].value in CONTRACT_ATTRIBUTES
                    and not (isinstance(node.args[2], ast.Constant) and node.args[2].value is None)):
                offenders.append(f"{path.relative_to(root)}:{node.lineno}")
    assert not offenders, offenders


def test_the_trainer_asks_the_env_and_the_policy_protocol():
    """No env-id sniffing and no `hasattr(policy, ...)` in `Trainer.__init__`."""
    from ragen_core.training import trainer

    init = inspect.getsource(trainer.Trainer.__init__)
    assert '"Vision" in' not in init and "hasattr(policy" not in init
    assert "policy_path(cfg)" in init  # the one place that picks the model of a config...
    assert "observes_images(cfg.env.id, cfg.env.kwargs)" in inspect.getsource(trainer.policy_path)  # ...asks the env
    # and nothing else in the core picks it by the id's spelling
    from pathlib import Path

    import ragen_core

    for path in Path(ragen_core.__file__).parent.rglob("*.py"):
        assert '"Vision" in cfg.env.id' not in path.read_text(), path
