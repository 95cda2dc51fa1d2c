"""A warm start that asks its env for a demonstrator hook the env cannot serve is a config error before the run
folder is made (one `config error:` line, exit status 2, no folder), for every env and every hook the warm start
calls: the oracle's turn (`warm_start.policy = "oracle"`, and the templates of `reasoning_dependence` < 1), the
random policy's turn (`policy = "random"`) and the noisy demonstrator's answer (`action_noise` > 0). Which envs lack a
hook is read off the envs themselves, never a list: a stand-in env without `oracle_step` is refused, the same env
with one is accepted."""

from __future__ import annotations

from pathlib import Path

import pytest
from stand_in_envs import ValueEnv, register

from ragen_core.apps.train import main, preflight
from ragen_core.training.config import ConfigError, load_config


class NoOracleEnv(ValueEnv):
    """One turn of ``value N``; it has ACTIONS (a random policy works) but no ``oracle_step`` of its own."""

    def _execute(self, action):
        return 0.0, True


class OracleEnv(NoOracleEnv):
    """The same env with a demonstrator: the oracle says go."""

    def oracle_step(self, reasoning: str = "full") -> tuple[str, list[str]]:
        return f"I see value {self.value}.", ["go"]


NO_ORACLE = register("test/HooksNoOracle-v0", NoOracleEnv)
WITH_ORACLE = register("test/HooksOracle-v0", OracleEnv)

#: A tiny warm start on the CPU (nothing here trains: every case stops or passes at the preflight).
BASE = ["model.path=tiny", "run.device=cpu", "rollout.groups=2", "rollout.group_size=2", "rollout.max_turns=1",
        "algo.name=grpo", "eval.episodes=2", "mi.every=0", "warm_start.sft_episodes=4", "warm_start.epochs=1"]


def _cfg(*overrides: str):
    return load_config(None, [*BASE, *overrides])


@pytest.mark.parametrize("overrides, key", [
    ((f"env.id={NO_ORACLE}", "warm_start.policy=oracle"), "warm_start.policy=oracle"),
    # the templates of a partly input-dependent demonstrator are the oracle's turns, whatever the policy
    ((f"env.id={NO_ORACLE}", "warm_start.policy=random", "warm_start.reasoning_dependence=0.5"),
     "warm_start.reasoning_dependence=0.5"),
    # Countdown has an oracle but neither ACTIONS nor a random_action hook: no random policy
    (("env.id=ragen/Countdown-v0", "warm_start.policy=random"), "warm_start.policy=random"),
    # Code and MetaMathQA have no fixed action list, hence no "first" action for the noisy demonstrator
    (("env.id=ragen/Code-v0", "warm_start.action_noise=0.5", "warm_start.noise_action=first"),
     "warm_start.noise_action=first"),
    (("env.id=ragen/MetaMathQA-v0", "warm_start.action_noise=0.5", "warm_start.noise_action=first"),
     "warm_start.noise_action=first"),
])
def test_a_hook_the_env_lacks_is_one_config_error_line_and_no_run_folder(tmp_path, capsys, overrides, key):
    config = tmp_path / "base.toml"
    config.write_text("[run]\nseed = 3\n")
    out_dir = tmp_path / "runs"
    assert main([str(config), *BASE, f"run.out_dir={out_dir}", *overrides]) == 2
    err = capsys.readouterr().err
    assert err.startswith("config error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert key in err and overrides[0].split("=", 1)[1] in err  # names the key and the env
    assert not out_dir.exists()


def test_the_env_decides_not_a_list():
    with pytest.raises(ConfigError, match="oracle_step"):
        preflight(_cfg(f"env.id={NO_ORACLE}"))
    preflight(_cfg(f"env.id={WITH_ORACLE}"))  # the same env with the hook
    preflight(_cfg(f"env.id={NO_ORACLE}", "warm_start.policy=random"))  # the random policy needs only ACTIONS


@pytest.mark.parametrize("overrides", [
    (f"env.id={NO_ORACLE}", "warm_start.sft_episodes=0"),  # no warm start: no hook is called
    ("env.id=ragen/Code-v0", "warm_start.noise_action=first"),  # no noise: the "first" answer is never asked for
    ("env.id=ragen/Countdown-v0",),  # the oracle it has
    ("env.id=ragen/Bandit-v0", "warm_start.action_noise=0.6", "warm_start.noise_action=first"),
])
def test_what_the_env_can_serve_passes(overrides):
    preflight(_cfg(*overrides))


def test_every_shipped_preset_passes_its_own_check():
    """Each shipped config's warm start is one its env can demonstrate (nothing shipped is refused)."""
    from ragen_core.training.presets import list_presets
    from ragen_core.training.sft import check_demonstrator

    presets = list_presets()
    assert presets
    for name, path, _ in presets:
        cfg = load_config(Path(path))
        check_demonstrator(cfg)  # raises ValueError naming the key on a hook the env lacks
        assert name


def test_a_trainer_built_in_python_checks_the_hooks_too(tmp_path):
    """The same check when a notebook builds the Trainer itself (no `ragen train` preflight): a ConfigError naming
    the key, and no run folder."""
    from ragen_core.training.trainer import Trainer

    run_dir = tmp_path / "run"
    with pytest.raises(ConfigError, match=r"warm_start\.policy=oracle on test/HooksNoOracle-v0"):
        Trainer(_cfg(f"env.id={NO_ORACLE}"), run_dir)
    assert not run_dir.exists()
