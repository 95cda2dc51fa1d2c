"""Training whose numbers go bad: an update with a NaN or inf loss, gradient norm or advantage stops the run before
the optimiser step with one line naming the step and the quantity; no NaN or inf weights are ever saved (a warm start
that diverged included), and a checkpoint holding them (written before this rule) is not resumed from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from bandit_cli import BANDIT_CORPUS, bandit_args, base_config_file
from stand_in_envs import ParityEnv, register

from ragen_core.apps.train import main
from ragen_core.policy import HFPolicy
from ragen_core.training import checkpoint
from ragen_core.training.checkpoint import LATEST, CheckpointError
from ragen_core.training.config import ConfigError, load_config
from ragen_core.training.trainer import Trainer

ENV_ID = "test/NonFiniteParity-v0"
HUGE_ENV_ID = "test/HugeRewardParity-v0"
LARGE_ENV_ID = "test/LargeRewardParity-v0"


class HugeRewardEnv(ParityEnv):
    """ParityEnv paying +-2e38 (finite, near float32's largest 3.4e38) instead of 1 / 0."""

    REWARD = 2e38

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, self.REWARD if reward > 0 else -self.REWARD, terminated, truncated, info


class LargeRewardEnv(HugeRewardEnv):
    """+-1e30: the advantages stay finite, their squares (a value loss) do not."""

    REWARD = 1e30


register(ENV_ID, ParityEnv)
register(HUGE_ENV_ID, HugeRewardEnv)
register(LARGE_ENV_ID, LargeRewardEnv)


@pytest.fixture(scope="module")
def model_dir(make_tiny_model):
    return make_tiny_model("value 12 Say anything. go")


def make_cfg(model_dir: Path, *overrides: str):
    base = [f"env.id={ENV_ID}", f"model.path={model_dir}", "rollout.groups=3", "rollout.group_size=4",
            "rollout.max_turns=2", "rollout.max_new_tokens=6", "run.steps=2", "run.progress=false",
            "run.device=cpu", "algo.lr=1e-3", "algo.mini_batch_size=8", "algo.micro_batch_size=4",
            "eval.episodes=4", "eval.every=0", "mi.every=0", "filter.value=0.5"]
    return load_config(None, base + list(overrides))


def weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def all_finite(state: dict[str, torch.Tensor]) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in state.values() if t.is_floating_point())


def logged_steps(run_dir: Path) -> set[int]:
    return {json.loads(x)["step"] for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()}


@pytest.mark.parametrize("overrides, quantity", [
    # entropy bonus x 1e30: the gradient norm overflows (clipping by it would zero the step, or make it NaN)
    (["algo.entropy_coef=1e30"], "loss/grad_norm = inf"),
    (["algo.entropy_coef=1e30", "algo.grad_clip=0"], "loss/grad_norm = inf"),
    # a KL coefficient that overflows the loss's gradient, with the unbounded k1 estimator
    (["algo.kl_coef=1e30", "algo.kl_estimator=k1"], "loss/grad_norm = inf"),
    # rewards of 1e30 under PPO: the value loss (returns - values)^2 overflows, and the critic's gradient
    ([f"env.id={LARGE_ENV_ID}", "algo.name=ppo"], "loss/value = inf, loss/critic_grad_norm = inf"),
])
def test_a_diverging_update_stops_before_the_optimiser_step(model_dir, tmp_path, overrides, quantity):
    cfg = make_cfg(model_dir, *overrides)
    trainer = Trainer(cfg, tmp_path, policy=HFPolicy.from_pretrained(model_dir))
    before = weights(trainer.model)
    with pytest.raises(ConfigError) as caught:
        trainer.fit()
    message = str(caught.value)
    assert isinstance(caught.value, FloatingPointError)
    assert "\n" not in message
    assert "training diverged by step 1" in message and quantity in message, message
    assert "checkpoints/latest.pt still holds step 0" in message, message
    # The optimiser never stepped: the weights are the ones the run started from, and so is the checkpoint.
    after = weights(trainer.model)
    assert all(torch.equal(before[k], after[k]) for k in before)
    saved = torch.load(tmp_path / LATEST, weights_only=False)
    assert saved["step"] == 0 and all(torch.equal(before[k], saved["model"][k]) for k in before)
    assert 1 not in logged_steps(tmp_path)  # no NaN metrics either


@pytest.mark.parametrize("algo", ["rloo", "dr_grpo"])
def test_advantages_that_overflow_float32_are_named(model_dir, tmp_path, algo):
    # Finite returns of +-2e38 in one group: RLOO's r - mean(others) and Dr.GRPO's group sum exceed 3.4e38.
    cfg = make_cfg(model_dir, f"env.id={HUGE_ENV_ID}", f"algo.name={algo}", "rollout.max_turns=1", "filter.value=1")
    trainer = Trainer(cfg, tmp_path, policy=HFPolicy.from_pretrained(model_dir))
    with pytest.raises(ConfigError, match=r"training diverged by step 1: the advantages overflow float32 .*"
                                          r"largest \|episode return\| 2e\+38.*smaller rewards"):
        trainer.fit()
    assert all_finite(weights(trainer.model))
    assert torch.load(tmp_path / LATEST, weights_only=False)["step"] == 0


def test_a_warm_start_that_diverges_is_not_saved(model_dir, tmp_path):
    cfg = make_cfg(model_dir, "warm_start.sft_episodes=8", "warm_start.policy=random", "warm_start.lr=1e30")
    trainer = Trainer(cfg, tmp_path, policy=HFPolicy.from_pretrained(model_dir))
    with pytest.raises(ConfigError) as caught:
        trainer.fit()
    message = str(caught.value)
    # Stopped at the warm start's first non-finite loss, before its optimiser step: no NaN reaches the weights.
    assert "the warm start diverged at its optimiser step " in message and "loss = nan" in message, message
    assert "nothing was saved" in message and "warm_start.lr (now 1e+30)" in message, message
    assert all(bool(torch.isfinite(p).all()) for p in trainer.policy.model.parameters())
    assert not (tmp_path / LATEST).exists()
    assert 1 not in logged_steps(tmp_path)


def test_save_checkpoint_keeps_the_last_good_state(tmp_path):
    good = {"step": 1, "model": {"w": torch.ones(3)}, "critic": None}
    checkpoint.save_checkpoint(tmp_path, good, 1, keep_every=1)
    for part, bad in (("model", {"w": torch.tensor([1.0, float("nan"), 1.0])}),
                      ("critic", {"head": torch.tensor([float("-inf")])})):
        state = {**good, "step": 2, part: bad}
        with pytest.raises(ConfigError, match=rf"the weights hold NaN or inf \({part}: "):
            checkpoint.save_checkpoint(tmp_path, state, 2, keep_every=1)
    assert torch.load(tmp_path / LATEST, weights_only=False)["step"] == 1
    assert not (tmp_path / "checkpoints" / "step_000002.pt").exists()
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["latest.pt", "step_000001.pt"]


def test_a_checkpoint_with_nan_weights_is_not_resumed(model_dir, tmp_path):
    run_dir = tmp_path / "run"
    Trainer(make_cfg(model_dir, "run.steps=1"), run_dir, policy=HFPolicy.from_pretrained(model_dir)).fit()
    state = torch.load(run_dir / LATEST, weights_only=False)
    name = next(iter(state["model"]))
    state["model"][name] = torch.full_like(state["model"][name], float("nan"))
    torch.save(state, run_dir / LATEST)  # as a run that diverged used to leave it
    with pytest.raises(CheckpointError, match=rf"holds NaN or inf weights \(model: {name}\).*\(step 1\)"):
        Trainer(make_cfg(model_dir, "run.steps=2"), run_dir, policy=HFPolicy.from_pretrained(model_dir),
                resume=True)


@pytest.fixture(scope="module")
def bandit_model_dir(make_tiny_model):
    return make_tiny_model(BANDIT_CORPUS)


def test_cli_one_line_and_no_resume_from_nan(bandit_model_dir, tmp_path, capsys):
    """`ragen train` as the reviewer runs it: the diverging run ends with one line (exit 2), its folder keeps the
    last good checkpoint, and a resume of a NaN checkpoint says why it cannot continue."""
    run_dir = tmp_path / "run"
    args = bandit_args(bandit_model_dir, "filter.empty_step=regularise", "algo.entropy_coef=1e30", steps=2)
    assert main([str(base_config_file(tmp_path)), *args, "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if "diverged" in x]
    assert len(lines) == 1 and lines[0].startswith("config error: training diverged by step 1: "), err
    assert "Traceback" not in err
    state = torch.load(run_dir / LATEST, weights_only=False)
    assert state["step"] == 0 and all_finite(state["model"])
    # A NaN checkpoint (as an older version wrote one) is refused with one line.
    state["model"] = {k: torch.full_like(v, float("nan")) if v.is_floating_point() else v
                      for k, v in state["model"].items()}
    torch.save(state, run_dir / LATEST)
    assert main(["--resume", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert "cannot resume: " in err and "holds NaN or inf weights" in err and "Traceback" not in err, err


@pytest.mark.parametrize("key", ["algo.lr", "warm_start.lr", "model.critic_lr"])
def test_a_learning_rate_beyond_float32_is_a_config_error(key):
    """1e39 passed the checks and then raised torch's overflow error inside the optimiser step (a traceback)."""
    from ragen_core.training.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=rf"{key} must be a finite number in .*float32"):
        load_config(None, [f"{key}=1e39"])
    load_config(None, [f"{key}=1e38"])  # within float32: accepted (it diverges, and the trainer says so)


def test_a_reward_beyond_float32_is_contained_as_an_env_error():
    """A finite Python float beyond float32 (1e39) passed the reward check and then became inf in the float32
    batch (a RuntimeError traceback when the batch was built); it is now an env error like a NaN reward."""
    import gymnasium as gym

    from ragen_core.episode import safe_step

    class Huge(gym.Env):
        def step(self, action):
            return "obs", 1e39, True, False, {}

    _, reward, terminated, _, info = safe_step(Huge(), "x")
    assert info["env_error"].startswith("ValueError: env.step returned the reward 1e+39") and terminated
    assert abs(reward) < 1e3  # the format penalty, not the reward
