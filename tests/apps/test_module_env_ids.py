"""Gymnasium's ``"module:id"`` form (the module registers the id when imported, as ``gym.make`` does it) reaches
``ragen play`` and ``ragen train``'s checks: they looked the id up with ``gym.spec``, which imports nothing, and
refused it ("Namespace ... not found") although ``gym.make`` would have made it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import gymnasium as gym
import pytest

from ragen_core.training import trainer
from ragen_core.training.config import load_config

ROOT = Path(__file__).resolve().parents[2]
MODULE = textwrap.dedent('''
    import gymnasium as gym
    from gymnasium import spaces


    class EchoEnv(gym.Env):
        def __init__(self, target: str = "yes"):
            self.target = target
            self.action_space = spaces.Text(64)
            self.observation_space = spaces.Text(64)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return f"Say {self.target}", {}

        def step(self, action):
            won = self.target in action
            return "again", float(won), won, False, {"success": won}


    gym.register(id="modid/Echo-v0", entry_point=EchoEnv)
''')
ENV_ID = "modid_user_envs:modid/Echo-v0"


@pytest.fixture
def user_module(tmp_path, monkeypatch) -> Path:
    (tmp_path / "modid_user_envs.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "modid_user_envs", raising=False)
    gym.registry.pop("modid/Echo-v0", None)
    yield tmp_path
    gym.registry.pop("modid/Echo-v0", None)


def test_ragen_play_finds_a_module_prefixed_id(user_module):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(user_module), str(ROOT)])}
    done = subprocess.run([sys.executable, "-m", "ragen_core.apps.cli", "play", ENV_ID], input="yes\n", text=True,
                          capture_output=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Say yes" in done.stdout and "reward: +1.00" in done.stdout


def test_the_trainers_env_check_finds_a_module_prefixed_id(user_module):
    cfg = load_config(str(ROOT / "configs" / "bandit_tiny.toml"), [f"env.id={ENV_ID}", "env.kwargs={}"])
    trainer._check_env_and_model(cfg, None)  # raised ConfigError: "Namespace modid_user_envs:modid not found"


def test_an_unknown_module_is_one_config_error_naming_it(user_module):
    cfg = load_config(str(ROOT / "configs" / "bandit_tiny.toml"), ["env.id=no_such_module_xyz:modid/Echo-v0"])
    with pytest.raises(trainer.ConfigError, match="no_such_module_xyz"):
        trainer._check_env_and_model(cfg, None)
