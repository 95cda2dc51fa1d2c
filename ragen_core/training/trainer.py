"""The small-scale trainer: :class:`Trainer`, one run's models, optimisers and RNG streams, and its loop.

The command that runs it, `ragen train CONFIG|PRESET [key=value ...]` (preflight, run folder, resume log, Ctrl-C),
is :mod:`ragen_core.apps.train`.

One training step, top to bottom (:meth:`Trainer.train_step`, CleanRL style; every piece of math is a pure
function of `ragen_core`):

    1. rollout        P groups x G multi-turn episodes on fresh train seeds (ragen_core.rollout.rollout)
    2. filter         SNR-aware filtering on the [P, G] returns (ragen_core.math.filtering.filter_groups,
                      docs/science.md section 4); with dynamic sampling (dapo), extra rounds refill the dropped groups
    3. diagnostics    every `mi.every` steps (up to `mi.until`): cross-score the whole batch (mi.cross_score) -> MI
                      proxies, MI-ZScore-EMA, H(Z|X) estimate, regime (docs/science.md section 2)
    4. compact        the dropped groups' rows are physically removed (filtering.select_rows); an empty batch skips
                      the update (counted; stop after `filter.max_empty_steps` in a row)
    5. score          old log-probs, reference log-probs (KL on) and critic values (ppo) of the kept rows
    6. advantages     the algorithm's entry (ragen_core.training.algorithms): GAE over the critic, or a group estimator
    7. update         PPO clipped loss (losses.ppo_policy_loss, clip-higher + dual clip) - entropy bonus
                      + KL to the reference (losses.kl_penalty, off by default); critic: losses.value_loss
    8. validation     every `eval.every` steps (up to `eval.until`) and at the last step, on held-out seeds
                      (validation seed 123)

then the loop logs the metrics (ragen_core.training.report.RunLog) and saves the checkpoint
(ragen_core.training.checkpoint).

A step whose advantages, losses or gradient norms hold a NaN or an inf (a learning rate that diverges, rewards too
large for float32) stops the run before the optimiser step with NonFiniteError (a ConfigError), one line naming the
step and the quantities; the step is neither logged nor checkpointed, and no NaN weights are ever saved
(ragen_core.training.checkpoint.save_checkpoint), so ``checkpoints/latest.pt`` keeps the last good state.

Algorithms (`algo.name`) are the entries of ragen_core.training.algorithms.ALGORITHMS (ppo, grpo, dr_grpo, dapo, rloo):
whether a critic is trained, the advantage, the loss aggregation, whether dynamic sampling is allowed.

Metrics are namespaced: ``rollout/`` ``filter/`` ``collapse/`` ``loss/`` ``perf/`` ``val/`` (and ``probe/``,
``sft/``); every key is a constant of :mod:`ragen_core.training.metrics`, with its meaning and unit. The run folder
holds ``config.toml`` (resolved), ``metrics.jsonl``, ``checkpoints/``, PNG plots and ``summary.md``
(ragen_core.training.report).
"""

from __future__ import annotations

import copy
import json
import math
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ragen_core.episode import per_rollout_options
from ragen_core.locks import FolderLocked, holding_folder
from ragen_core.math import losses
from ragen_core.math.advantages import TRAJ_MEAN, aggregate_loss, trajectory_token_weights
from ragen_core.math.filtering import filter_groups, reward_variance, rv_statistics, select_rows
from ragen_core.policy import TINY_PATHS, load_policy
from ragen_core.rollout import RolloutBatch, RolloutSettings, build_batch, make_envs, pad_token_id, rollout
from ragen_core.training.algorithms import compute_advantages, get_algorithm, token_loss_mode
from ragen_core.training.checkpoint import (
    LATEST,
    CheckpointError,
    NonFiniteError,
    RNGStreams,
    TrainState,
    load_checkpoint,
    save_checkpoint,
)
from ragen_core.training.config import (
    ConfigError,
    TrainConfig,
    config_to_dict,
    dump_toml,
    load_config,
    resume_changes,
)
from ragen_core.training.metrics import Collapse, Filter, Loss, Perf, Probe, Rollout, Val
from ragen_core.training.probe import cadence_due
from ragen_core.training.provenance import write_provenance
from ragen_core.training.report import (
    RunLog,
    jsonl_records,
    record_resume,
    require_tensorboard,
    write_plots,
    write_summary,
)

__all__ = [
    "Trainer",
    "LIVE_KEYS",
    "ValueModel",
    "resolve_device",
    "select_groups_rows",
    "zero_advantage_share",
    "validation_rollout",
    "seed_streams",
    "check_runnable",
    "NonFiniteError",
    "FolderLocked",
]


# ---------------------------------------------------------------------------------------------- models
def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


class ValueModel(torch.nn.Module):
    """Critic: a copy of the policy's transformer backbone and a zero-initialised linear value head.

    ``forward(input_ids, attention_mask) -> values [B, T]`` where ``values[b, t]`` estimates the return from the
    state *before* token t (computed from the hidden state at t - 1, as verl does), 0 at t = 0. Images are not
    fed to the critic (it sees the text of vision observations only).
    """

    def __init__(self, lm: torch.nn.Module):
        super().__init__()
        base = getattr(lm, "base_model", None)
        self.backbone = copy.deepcopy(base if base is not None and base is not lm else lm)
        hidden = getattr(lm.config, "hidden_size", None) or getattr(lm.config, "n_embd", None)
        if hidden is None:
            raise ValueError("cannot find the hidden size of the model (config.hidden_size)")
        self.head = torch.nn.Linear(int(hidden), 1)
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.zeros_(self.head.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        out = self.backbone(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
        h = getattr(out, "last_hidden_state", None)
        if h is None:
            h = out.hidden_states[-1]
        v = self.head(h.float()).squeeze(-1)
        values = torch.zeros_like(v)
        values[:, 1:] = v[:, :-1]
        return values


# ---------------------------------------------------------------------------------------------- pure helpers
def lr_fraction(schedule: str, step: int, total_steps: int) -> float:
    """The learning rate of RL step `step` (1-based) as a fraction of `algo.lr`.

    ``"constant"``: 1. ``"linear"``: ``1 - (step - 1) / total_steps`` (CleanRL's annealing), i.e. 1 at step 1
    and ``1 / total_steps`` at the last step; never below that, should a run go past `total_steps`.
    """
    if schedule == "constant":
        return 1.0
    if schedule == "linear":
        return max(1.0 - (step - 1) / total_steps, 1.0 / total_steps)
    raise ValueError(f"unknown lr schedule {schedule!r}; expected 'constant' or 'linear'")


#: `run.threads = 0` on the CPU: one torch thread for models with fewer parameters than this (the tiny model has
#: 0.62 M), torch's default (one per core) otherwise. Measured by `benchmarks/bench_profile.py` (threads).
AUTO_ONE_THREAD_PARAMETERS = 20_000_000

#: torch's thread count when this module was first imported: its default (OMP_NUM_THREADS, else one per physical
#: core) unless the process had set another before. What `run.threads = 0` restores where it does not pick one
#: thread, so "auto" means one count per process, not whatever an earlier Trainer (or notebook cell) left set.
TORCH_DEFAULT_THREADS = torch.get_num_threads()


def cpu_threads(threads: int, model: torch.nn.Module, device: torch.device) -> int:
    """The torch CPU threads a run uses (0 = torch's default, :data:`TORCH_DEFAULT_THREADS`): `threads` when set,
    else one thread for a model of fewer than :data:`AUTO_ONE_THREAD_PARAMETERS` parameters on the CPU."""
    if threads:
        return threads
    if device.type != "cpu":
        return 0
    n = sum(p.numel() for p in model.parameters())
    return 1 if n < AUTO_ONE_THREAD_PARAMETERS else 0


def policy_path(cfg: TrainConfig) -> str:
    """The model a config loads: ``model.path``, except that the built-in tiny model is the tiny vision model
    ("tiny-vision") for an env that shows images (the env says so: :func:`ragen_envs.contract.observes_images`)."""
    from ragen_envs.contract import observes_images

    if cfg.model.path == "tiny" and observes_images(cfg.env.id, cfg.env.kwargs):
        return "tiny-vision"
    return cfg.model.path


def _check_fused_training(policy: Any, device: torch.device, cfg: Any) -> None:
    """ConfigError naming `model.fused_training` where it cannot run: the lean forward off or not taken by this
    model, another device or dtype, unsupported sizes, no compiled library."""
    from ragen_core.policy.fast_qwen2 import fused_training_blocker

    why = fused_training_blocker(policy, device, cfg.model.fast_forward)
    if why is not None:
        raise ConfigError(f"model.fused_training = true cannot run here: {why}; set model.fused_training=false")


def make_optimizer(params: list[torch.nn.Parameter], algo: Any, fused: bool = False) -> Any:
    """The policy's optimiser (`algo.optimizer`): AdamW with `algo.adam_eps`, or plain SGD (no momentum), whose
    update -lr * (g_task - entropy_coef * g_entropy + kl_coef * g_kl) keeps every coefficient's scale. On 16-bit
    (bfloat16) weights it steps float32 copies of them (:class:`ragen_core.training.sft.Float32Master`). `fused`
    (`model.fused_training`): AdamW's fused step (one kernel for every parameter; other rounding)."""
    from ragen_core.training.sft import with_float32_master

    if algo.optimizer == "sgd":
        return with_float32_master(params, lambda ps: torch.optim.SGD(ps, lr=algo.lr, weight_decay=algo.weight_decay))
    return with_float32_master(params, lambda ps: torch.optim.AdamW(ps, lr=algo.lr, weight_decay=algo.weight_decay,
                                                                    eps=algo.adam_eps, fused=fused or None))


class GradParts:
    """The policy gradient split into its parts (`algo.grad_parts`): task (the clipped policy-gradient loss), the
    entropy bonus (-entropy_coef x entropy) and the KL penalty (kl_coef x kl), each weighted as the update weights
    the micro-batch. Each part gets its own backward pass (``torch.autograd.grad``); their sum goes into ``.grad``,
    so the optimiser sees the total (equal to one joint backward up to float rounding).

    Why: with Adam a lone regulariser gradient is divided by its own running scale, so its coefficient hardly
    sets the size of the update; these norms show how large each part of the gradient was (docs/collapse.md).
    """

    NAMES = (("task", Loss.GRAD_NORM_TASK), ("entropy", Loss.GRAD_NORM_ENTROPY), ("kl", Loss.GRAD_NORM_KL))

    def __init__(self, model: torch.nn.Module):
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.reset()

    def reset(self) -> None:
        """Start a new mini-batch: zero the per-part sums."""
        self.sums: dict[str, list[torch.Tensor]] = {}

    def backward(self, weight: float, **part_losses: torch.Tensor | None) -> None:
        """Back-propagate ``weight * loss`` of every part that is not None; add each to its sum and all to .grad."""
        live = [(k, v) for k, v in part_losses.items() if v is not None and v.requires_grad]
        for i, (name, loss) in enumerate(live):
            grads = torch.autograd.grad(loss * weight, self.params, retain_graph=i < len(live) - 1,
                                        allow_unused=True)
            acc = self.sums.setdefault(name, [torch.zeros_like(p) for p in self.params])
            for a, p, g in zip(acc, self.params, grads):
                if g is None:
                    continue
                a.add_(g)
                if p.grad is None:
                    p.grad = g.detach().clone()
                else:
                    p.grad.add_(g)

    def norms(self) -> dict[str, float]:
        """``{metric: L2 norm of the part's gradient summed over the mini-batch}`` for the parts seen."""
        out = {}
        for name, key in self.NAMES:
            if name in self.sums:
                out[key] = float(torch.linalg.vector_norm(torch.stack(
                    [torch.linalg.vector_norm(a.float()) for a in self.sums[name]])))
        return out

    def snapshot(self) -> list[torch.Tensor]:
        return [p.detach().clone() for p in self.params]

    def distance_from(self, before: list[torch.Tensor]) -> float:
        """||theta_now - theta_before|| over the trained parameters."""
        return float(torch.linalg.vector_norm(torch.stack(
            [torch.linalg.vector_norm((p.detach() - b).float()) for p, b in zip(self.params, before)])))


def format_penalty_warning(env: Any) -> str | None:
    """A warning when breaking the answer format costs less than a well-formed turn that does nothing useful.

    Envs with a per-action cost declare it as ``STEP_REWARD`` (Sokoban: -0.1). A well-formed turn of
    ``max_actions_per_turn`` wasted actions then earns ``STEP_REWARD x max_actions_per_turn``; if the format
    penalty is above that, a malformed answer is the cheaper failure and RL learns to break the format
    (docs/training.md, item 10). None when the env has no per-action cost or the penalty is low enough.
    """
    u = getattr(env, "unwrapped", env)
    step = getattr(u, "STEP_REWARD", None)
    per_turn = getattr(u, "max_actions_per_turn", None)
    penalty = getattr(u, "format_penalty_value", None)
    if step is None or per_turn is None or penalty is None or step >= 0:
        return None
    wasted_turn = float(step) * int(per_turn)
    if penalty <= wasted_turn + 1e-9:  # a tie is fine (-0.1 x 3 is -0.30000000000000004 in floats)
        return None
    return (f"{type(u).__name__}: a malformed answer costs {penalty:g} but a well-formed turn of {per_turn} wasted "
            f"actions costs {wasted_turn:g}, so RL can learn to break the answer format; set "
            f"env.kwargs.format_penalty <= {wasted_turn:g} (or max_actions_per_turn=1). See docs/training.md.")


def _most_rows(cfg: TrainConfig) -> int:
    """The most training rows one step can have: one per episode in the full context, one per turn otherwise (a
    dynamic-sampling refill keeps at most `rollout.groups` groups too)."""
    per_episode = 1 if cfg.rollout.context == "full" else cfg.rollout.max_turns
    return cfg.rollout.groups * cfg.rollout.group_size * per_episode


def _target_kl_ignored(cfg: TrainConfig) -> str | None:
    """Why `algo.target_kl` can never act, or None.

    Its early stop compares a step's mini-batch updates with the policy that sampled the batch. With one epoch and
    a mini-batch that holds every row a step can have, each step is a single update computed on that very policy
    (old log-probs recomputed: approx-KL 0 to float rounding). With `algo.recompute_old_logprobs = false` the
    sampling log-probs may differ from the model's, and the check does act on that single update.
    """
    a = cfg.algo
    if a.target_kl == 0 or not a.recompute_old_logprobs or a.epochs > 1:
        return None
    rows = _most_rows(cfg)
    if a.mini_batch_size < rows:
        return None
    turns = "" if cfg.rollout.context == "full" else " x rollout.max_turns"
    return (f"with algo.epochs=1 and algo.mini_batch_size={a.mini_batch_size} >= the {rows} rows a step trains at "
            f"most (rollout.groups x rollout.group_size{turns}), every step is one update on the policy that sampled "
            f"it, whose approx-KL is 0: raise algo.epochs or lower algo.mini_batch_size for the early stop to act "
            f"(docs/training.md, item 9)")


def ignored_settings(cfg: TrainConfig) -> list[str]:
    """One line per `[algo]` key set away from its default that this run never reads (a key set but with no
    effect: a run with and without it trains the same numbers), saying why; [] when there is none.

    Warnings, not ConfigErrors: run folders written with such a key still load, resume and export. The critic's
    learning rate (`model.critic_lr`) is left out on purpose: the shipped GRPO configs set it so that an
    ``algo.name=ppo`` override trains its critic at the config's rate.
    """
    a, default = cfg.algo, type(cfg.algo)()
    algo = get_algorithm(a.name)
    out = []

    def unread(key: str, why: str) -> None:
        name = key.split(".", 1)[1]
        if getattr(a, name) != getattr(default, name):
            out.append(f"{key}={getattr(a, name)!r} has no effect: {why}")

    if not algo.critic:
        for key in ("algo.gamma", "algo.lam", "algo.value_clip"):
            unread(key, f"it applies to the critic's GAE and value loss (algo.name=ppo), and algo.name={a.name} "
                        f"trains no critic (its advantage uses the undiscounted episode return)")
    if a.kl_coef == 0:
        unread("algo.kl_estimator", "the KL penalty is off (algo.kl_coef=0)")
    if a.optimizer != "adamw":
        unread("algo.adam_eps", f"it is AdamW's epsilon, and algo.optimizer={a.optimizer}")
    if not a.dynamic_sampling:
        unread("algo.max_refill_rounds", "it bounds dynamic sampling, which is off (algo.dynamic_sampling=false)")
    why = _target_kl_ignored(cfg)
    if why is not None:
        out.append(f"algo.target_kl={a.target_kl:g} has no effect: {why}")
    return out


def validation_seeds(cfg: TrainConfig) -> list[int]:
    """The held-out seeds: ``eval.episodes`` consecutive seeds from ``env.val_seed``."""
    return [cfg.env.val_seed + i for i in range(cfg.eval.episodes)]


@torch.no_grad()
def validation_rollout(policy: Any, envs: Sequence[Any], cfg: TrainConfig, settings: RolloutSettings,
                       step: int, on_turn: Callable[[int], None] | None = None) -> RolloutBatch:
    """One rollout of each validation seed after `step` RL steps (decoding per `settings`, greedy by default).

    The sampler is seeded from ``run.seed`` and `step`, so a model validated at the same step by another engine
    (the TRL cross-check) sees the same episodes and, when sampling, the same random stream. `on_turn` is the
    rollout's per-turn callback (a progress bar).
    """
    seeds = validation_seeds(cfg)
    gen = torch.Generator(device="cpu").manual_seed(cfg.run.seed + 10_000 + step)
    policy.model.eval()
    opts = per_rollout_options(cfg.env.per_rollout_option, seeds, 1)
    return rollout(policy, envs, seeds, 1, settings, generator=gen, reset_options=opts, on_turn=on_turn)


def zero_advantage_share(advantages: torch.Tensor, loss_mask: torch.Tensor, row_group: torch.Tensor) -> float:
    """Share of the groups present in the rows whose advantages are exactly 0 on every trained token: the groups
    that add nothing to the task gradient (under GRPO, those whose rewards were all equal). ``advantages`` and
    ``loss_mask`` ``[R, T]``, ``row_group`` ``[R]``; NaN without trained tokens."""
    groups = row_group[:, None].expand_as(advantages)[loss_mask]
    if groups.numel() == 0:
        return math.nan
    nonzero = advantages[loss_mask] != 0
    present = torch.unique(groups)
    signal = torch.unique(groups[nonzero]) if bool(nonzero.any()) else groups.new_zeros(0)
    return 1.0 - signal.numel() / present.numel()


def select_groups_rows(rows: dict[str, torch.Tensor], kept_groups: torch.Tensor) -> dict[str, torch.Tensor]:
    """The rows of the kept groups: every turn of their episodes (``rows["row_group"]`` names each row's group).

    Kept rows stay in batch order (so the turns of a trajectory stay in order); padding columns that no kept row
    uses are cut (:func:`ragen_core.math.filtering.select_rows`).
    """
    kept_rows = torch.isin(rows["row_group"], kept_groups).nonzero().flatten()
    return select_rows(rows, kept_rows, mask_key="attention_mask")


def _with_reward_variance(batch: RolloutBatch) -> torch.Tensor:
    """The groups of `batch` whose rewards vary (DAPO's dynamic-sampling rule with the filter off): a group whose
    rollouts all earned the same return has zero group-relative advantage and teaches nothing."""
    return (reward_variance(batch.rewards_pg) > 1e-10).nonzero().flatten()


def _overlaps(a: range, b: range) -> bool:
    """Whether two non-empty seed ranges share a seed."""
    return bool(a) and bool(b) and max(a.start, b.start) < min(a.stop, b.stop)


def seed_streams(cfg: TrainConfig) -> dict[str, range]:
    """The seed streams a config uses, the ones :func:`_check_seed_ranges` keeps apart (and ``ragen eval``'s seeds
    avoid): ``validation`` (``eval.episodes`` seeds from ``env.val_seed``), ``warm-start`` (``warm_start.sft_episodes``
    from ``warm_start.seed``), ``train`` (``env.train_seed`` upwards, unbounded: one seed per group, never reused),
    with a template demonstrator (``warm_start.reasoning_dependence`` < 1) ``template`` (the `template_levels` reference
    levels whose reasoning it writes, the seeds just below ``warm_start.seed``) and, with the MI probe on, ``probe``
    (the seeds its levels may be drawn from)."""
    ws = cfg.warm_start
    streams = {"validation": range(cfg.env.val_seed, cfg.env.val_seed + cfg.eval.episodes),
               "warm-start": range(ws.seed, ws.seed + ws.sft_episodes),
               "train": range(cfg.env.train_seed, sys.maxsize)}
    if ws.sft_episodes and ws.reasoning_dependence < 1:
        streams["template"] = range(max(ws.seed - ws.template_levels, 0), ws.seed)
    if cfg.mi.probe_prompts:
        from ragen_core.training.probe import probe_seed_range

        streams["probe"] = probe_seed_range(cfg.mi.probe_seed, cfg.mi.probe_prompts)
    return streams


def _check_seed_ranges(cfg: TrainConfig) -> None:
    """Held-out seeds are never trained on: the validation seeds overlap neither the warm start's nor the train seed
    stream (:func:`seed_streams`), and the probe's (with the probe) none of those three. Raises ConfigError naming
    the key."""
    streams = seed_streams(cfg)
    val, ws, train = streams["validation"], streams["warm-start"], streams["train"]
    checks = [("warm_start.seed", "warm-start", ws, "validation", val),
              ("env.val_seed", "validation", val, "train", train)]
    if "template" in streams:
        levels = cfg.warm_start.template_levels
        if levels > cfg.warm_start.seed:  # the reference levels are the seeds just below it: seed 0 was repeated
            raise ConfigError(f"warm_start.template_levels={levels} needs warm_start.seed >= {levels} (the template "
                              f"reference levels are the {levels} seeds just below warm_start.seed="
                              f"{cfg.warm_start.seed}); raise warm_start.seed or lower template_levels")
        # The demonstrator writes its reasoning about these levels: they are trained on, as the warm start's are.
        checks += [("warm_start.template_levels", "template reference", streams["template"], "validation", val)]
    if "probe" in streams:  # the probe's levels are held out from everything else
        checks += [("mi.probe_seed", "probe", streams["probe"], name, other)
                   for name, other in (("validation", val), ("warm-start", ws), ("train", train))]
        if "template" in streams:
            checks += [("mi.probe_seed", "probe", streams["probe"], "template reference", streams["template"])]
    for key, name, seeds, other_name, other in checks:
        if _overlaps(seeds, other):
            where = (f"the train seed stream starting at env.train_seed={cfg.env.train_seed}" if other is train
                     else f"the {other_name} seeds {other.start}..{other.stop - 1}")
            raise ConfigError(f"{key}: {name} seeds {seeds.start}..{seeds.stop - 1} overlap {where}")


def _check_device(name: str) -> None:
    """ConfigError unless `run.device` names a device this torch can use: ``cuda`` needs a CUDA build and a visible
    GPU, ``cuda:N`` one of at least N + 1 GPUs (torch itself fails only at the first tensor moved there, deep in
    the run, with an AssertionError)."""
    if not name.startswith("cuda"):
        return
    if not torch.cuda.is_available():
        why = "this torch is built without CUDA" if torch.version.cuda is None else "no CUDA GPU is visible"
        raise ConfigError(f"run.device={name}: {why} (torch {torch.__version__}); use run.device=cpu or auto")
    index = name.partition(":")[2]
    count = torch.cuda.device_count()
    if index and (not index.isdigit() or int(index) >= count):
        raise ConfigError(f"run.device={name}: must be cuda or cuda:N with N < {count} (the GPUs visible here)")


def check_runnable(cfg: TrainConfig) -> None:
    """The checks of a validated config that look beyond its own values: the seed streams are disjoint
    (:func:`_check_seed_ranges`), `run.device` exists here, and `run.tensorboard` has its package. Raises
    ConfigError naming the key.

    The trainer runs them before it creates anything, and ``ragen train`` before it makes the run folder, so that a
    config that cannot run leaves nothing behind.
    """
    _check_seed_ranges(cfg)
    _check_device(cfg.run.device)
    _check_per_rollout_option(cfg)
    if cfg.run.tensorboard:
        require_tensorboard()


def _check_per_rollout_option(cfg: TrainConfig) -> None:
    """`env.per_rollout_option` is a reset option the env reads (its class's ``RESET_OPTIONS``): every reset of the
    run would refuse it otherwise, deep inside the warm start or the first rollout. An env that declares none, or
    an id the registry does not know (refused elsewhere), is not checked here."""
    option = cfg.env.per_rollout_option
    if not option:
        return
    import gymnasium as gym

    from ragen_envs.registration import find_spec

    try:
        entry = find_spec(cfg.env.id).entry_point
        cls = gym.envs.registration.load_env_creator(entry) if isinstance(entry, str) else entry
    except (gym.error.Error, ImportError, AttributeError, ValueError):
        return
    ask = getattr(cls, "unknown_reset_option", None)  # the envs' own rule (ragen_envs.base.TextAgentEnv)
    hint = ask(option) if callable(ask) else None
    if hint is not None:
        raise ConfigError(f"env.per_rollout_option {option!r}: {cfg.env.id} has no such reset option{hint}")


# ---------------------------------------------------------------------------------------------- the Python API's checks
#: The config keys a built :class:`Trainer` reads afresh at every step, so a change between its construction and
#: :meth:`Trainer.fit` (or between two ``fit()`` calls) takes effect: the run's length and stopping rules, the
#: measurement and checkpoint cadences, the progress bar, the rows per forward pass. Every other key was read when
#: the trainer built its models, envs, sampler settings and logs; a change to it on a built trainer would be
#: ignored (or break it), so :meth:`Trainer.fit` and :meth:`Trainer.train_step` refuse it (build a new Trainer).
#: A subset of ``ragen_core.training.config.RESUME_KEYS``: the keys a resume may change.
LIVE_KEYS = ("run.steps", "run.max_minutes", "run.progress", "run.save_every", "run.keep_every", "eval.every",
             "eval.until", "mi.every", "mi.until", "mi.batch_tokens", "mi.probe_every", "mi.probe_until",
             "filter.max_empty_steps", "algo.micro_batch_size")


def _short(value: Any) -> str:
    """``value``'s repr, cut to 80 characters, and its type: what an error message says was given."""
    text = repr(value)
    return f"{text[:77] + '...' if len(text) > 80 else text} ({type(value).__name__})"


def _check_arguments(cfg: Any, run_dir: Any, policy: Any, resume: Any, on_step: Any) -> None:
    """TypeError naming the first :class:`Trainer` argument of the wrong kind (ValueError for an empty run_dir),
    before anything is loaded or made."""
    if not isinstance(cfg, TrainConfig):
        raise TypeError(f"cfg must be a ragen_core.training.config.TrainConfig (load_config(path, overrides), or "
                        f"TrainConfig() with its fields set); got {_short(cfg)}")
    if not isinstance(run_dir, (str, os.PathLike)):
        raise TypeError(f"run_dir must be a folder path (str or os.PathLike: a new or empty folder, or a run folder "
                        f"with resume=True), e.g. Path(cfg.run.out_dir) / cfg.run.name; got {_short(run_dir)}")
    if str(run_dir) == "":
        raise ValueError("run_dir must be a folder path; got '' (an empty path would be the current folder)")
    if policy is not None:
        missing = [name for name in ("model", "tokenizer", "generate", "forward_logprobs", "encode_chat")
                   if not hasattr(policy, name)]
        if missing or not isinstance(policy.model, torch.nn.Module):
            raise TypeError(f"policy must be None (the trainer loads cfg.model.path) or a built Policy "
                            f"(ragen_core.policy.load_policy(path), HFPolicy.from_pretrained(path)) whose .model is "
                            f"a torch.nn.Module; got {_short(policy)}"
                            + (f", which has no {', '.join(missing)}" if missing else ""))
    if not isinstance(resume, bool):
        raise TypeError(f"resume must be True or False (True: continue the run in run_dir from its latest "
                        f"checkpoint); got {_short(resume)}")
    if on_step is not None and not callable(on_step):
        raise TypeError(f"on_step must be a callable taking one metrics dict, or None; got {_short(on_step)}")


def _check_env_and_model(cfg: TrainConfig, policy: Any) -> None:
    """ConfigError unless ``env.id`` is a registered env id with ``env.kwargs`` a table, and (when no policy is
    given) ``model.path`` is a model folder or a built-in tiny model: gymnasium and transformers would otherwise
    fail later, with their own words."""
    import gymnasium as gym

    import ragen_envs  # noqa: F401  (registers the ragen/ ids)

    if not isinstance(cfg.env.id, str):
        raise ConfigError(f"env.id must be an env id (text; `ragen envs` lists them); got {_short(cfg.env.id)}")
    from ragen_envs.registration import find_spec

    try:
        find_spec(cfg.env.id)  # as gym.make finds it ("module:id" imports the module that registers the id)
    except gym.error.Error as e:
        raise ConfigError(f"env.id: {e} (`ragen envs` lists the ids)") from None
    if not isinstance(cfg.env.kwargs, dict):
        raise ConfigError(f"env.kwargs must be a table (dict) of the env's keyword arguments; "
                          f"got {_short(cfg.env.kwargs)}")
    if policy is None and cfg.model.path not in TINY_PATHS and not Path(cfg.model.path).expanduser().is_dir():
        raise ConfigError(f"model.path {cfg.model.path!r} is not a folder: give a local transformers model folder "
                          f"(weights, config and tokenizer), or tiny for the offline tiny model (tiny-base: the tiny "
                          f"model pre-trained to copy and look up), or pass policy=")


def images_dropped_warning(env: Any, policy: Any, cfg: TrainConfig) -> str | None:
    """The warning for an env with pictures trained by a policy that takes none (no ``image_token``): the pictures
    are dropped and the policy reads the text alone, which for ``obs_format="image"`` is one fixed sentence, so
    nothing it sees depends on the state (``ragen eval`` refuses the same pair). None when the pair fits."""
    from ragen_envs import contract

    if not contract.vision(env) or getattr(policy, "image_token", None) is not None:
        return None
    return (f"{cfg.env.id} shows its state in pictures, but the model ({cfg.model.path!r}) takes no images: they are "
            "dropped and the policy reads the text alone (with env.kwargs.obs_format='image' a fixed sentence, so "
            "it cannot learn the task); use a vision model (model.path='tiny' picks the tiny vision model for such "
            "an env) or a text env id")


def _make_envs(cfg: TrainConfig, n: int) -> list[Any]:
    """``n`` envs of the config (:func:`ragen_core.rollout.make_envs`); an env that refuses ``env.kwargs`` is a
    ConfigError naming them (an unknown name gets the accepted ones)."""
    import gymnasium as gym

    try:
        envs = make_envs(cfg.env.id, n, cfg.env.kwargs)
    except (TypeError, ValueError, gym.error.Error) as e:
        from ragen_envs.registration import kwarg_error

        raise ConfigError(f"env.kwargs {cfg.env.kwargs!r} for {cfg.env.id}: "
                          f"{kwarg_error(cfg.env.id, dict(cfg.env.kwargs), e)}") from None
    return envs


def _check_run_dir(run_dir: Path, resume: bool) -> None:
    """The run folder suits the call: not a file; with `resume`, it holds a checkpoint (FileNotFoundError);
    without, it holds no run (ValueError: a new run would overwrite its config, metrics and checkpoints)."""
    if run_dir.exists() and not run_dir.is_dir():
        raise ValueError(f"run_dir {run_dir} is a file, not a folder: give a new or empty folder (or a run folder "
                         f"with resume=True)")
    if resume:
        if not (run_dir / LATEST).is_file():
            raise FileNotFoundError(f"no checkpoint to resume from: {run_dir / LATEST} does not exist (a run stopped "
                                    f"before its first checkpoint has nothing to resume: start it with resume=False)")
        return
    checkpoints = sorted(run_dir.glob("checkpoints/*.pt"))
    if checkpoints:
        raise ValueError(f"run_dir {run_dir} already holds a run ({checkpoints[-1].relative_to(run_dir)}): pass "
                         f"resume=True to continue it, or give a new or empty folder (a new run would overwrite its "
                         f"config.toml, metrics.jsonl and checkpoints)")


def _check_resume_config(cfg: TrainConfig, run_dir: Path) -> dict[str, tuple[Any, Any]]:
    """ConfigError unless `cfg` is the config of the run in `run_dir` (its ``config.toml``) up to the keys a resume
    may change (:func:`ragen_core.training.config.resume_changes`, the rule of ``ragen train --resume``)."""
    path = run_dir / "config.toml"
    if not path.is_file():
        raise ConfigError(f"resume: {path} does not exist (is {run_dir} a run folder?): a resume is checked "
                          f"against the run's own config")
    return resume_changes(load_config(path), cfg)


def _changed_keys(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> dict[str, tuple]:
    """``{"section.key": (old, new)}`` for the keys whose values differ between two :func:`config_to_dict`."""
    return {f"{section}.{key}": (before[section][key], value)
            for section, values in after.items() for key, value in values.items()
            if value != before[section][key]}


# ---------------------------------------------------------------------------------------------- the trainer
def _check_demonstrator(cfg: TrainConfig) -> None:
    """The env serves every demonstrator hook the warm start will call
    (:func:`ragen_core.training.sft.check_demonstrator`), as a ConfigError naming the ``warm_start`` key."""
    from ragen_core.training.sft import check_demonstrator

    try:
        check_demonstrator(cfg)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def _enable_activation_checkpointing(model: Any) -> None:
    """`model.gradient_checkpointing = true`: transformers' activation checkpointing, through the method of the
    installed version (``activation_checkpointing_enable`` since transformers 5.x; ``gradient_checkpointing_enable``,
    which v5 keeps as a deprecated alias that v6 removes, before it). A model with neither gets a warning that the
    setting is ignored, not silence."""
    enable = getattr(model, "activation_checkpointing_enable", None) or getattr(
        model, "gradient_checkpointing_enable", None)
    if enable is None:
        warnings.warn(f"model.gradient_checkpointing = true is ignored: {type(model).__name__} has no activation "
                      "checkpointing (no activation_checkpointing_enable or gradient_checkpointing_enable method)",
                      stacklevel=3)
        return
    enable()


class Trainer:
    """The policy, critic, reference, optimisers and RNG streams of one run (see the module docstring).

    From Python (a notebook), as ``ragen train`` runs it::

        cfg = load_config(resolve_config("bandit_tiny")[0], ["run.steps=20"])  # or TrainConfig(), fields set
        trainer = Trainer(cfg, "runs/my-run")      # checks everything, then makes the folder
        history = trainer.fit()                    # warm start, RL steps, plots, summary: metrics.jsonl's records
        trainer = Trainer(cfg, "runs/my-run", resume=True)   # later: continue it from its latest checkpoint

    Everything is checked before the run folder is made (a failure leaves no folder behind), all but the env kwargs
    before the policy is loaded: the arguments
    (TypeError naming the one of the wrong kind), the config (:meth:`TrainConfig.validate`, again: a config changed
    after loading is checked like a loaded one; :func:`check_runnable`; the env id and kwargs; ``model.path`` when no
    policy is given: ConfigError naming the key), the run folder (ValueError when a new run would overwrite one that
    holds a run) and, with `resume`, the run's own ``config.toml`` (ConfigError for a key a resume may not change,
    the rule of ``ragen train --resume``).

    The config object stays the caller's: a key of :data:`LIVE_KEYS` changed after construction takes effect (and
    is written to ``config.toml``), any other is a ConfigError at the next :meth:`fit` / :meth:`train_step`.

    Args:
        cfg: the run's TrainConfig.
        run_dir: the run folder: new or empty (made after every check passed), or a run folder with `resume`.
        policy: an already-built Policy (tests, the demo); None loads `cfg.model.path`.
        resume: restore the latest checkpoint of `run_dir`; `cfg` may differ from the run's ``config.toml`` only in
            ``ragen_core.training.config.RESUME_KEYS`` (``config.toml`` then records the new values).
        on_step: called with every record logged to ``metrics.jsonl`` (the warm start's, each step's, each
            validation's), after it is written (the demo's live table).
    """

    def __init__(self, cfg: TrainConfig, run_dir: str | Path, policy: Any = None, resume: bool = False,
                 on_step: Callable[[dict[str, Any]], None] | None = None):
        _check_arguments(cfg, run_dir, policy, resume, on_step)
        cfg.validate()  # a config built in code, or changed after load_config, is checked like a loaded one
        self.cfg = cfg
        self.algo = get_algorithm(cfg.algo.name)  # the algorithm's table entry: read by every part below
        self.loss_agg_mode = self.algo.resolve_loss_agg_mode(cfg.algo.loss_agg_mode)
        self.run_dir = Path(run_dir)
        # Before the run folder is made: a config that cannot run leaves nothing behind.
        check_runnable(cfg)
        _check_env_and_model(cfg, policy)
        if not resume:  # a resumed run's warm start is behind it
            _check_demonstrator(cfg)
        _check_run_dir(self.run_dir, resume)
        #: The config changes this resume accepted (``{key: (old, new)}``; empty for a new run).
        self.resume_changes: dict[str, tuple[Any, Any]] = (
            _check_resume_config(cfg, self.run_dir) if resume else {})
        #: The config as last checked (:meth:`_check_config`): what a later change is compared with.
        self._config_seen = config_to_dict(cfg)
        #: A fit() or train_step() of this trainer stopped part-way (Ctrl-C, an error): its in-memory state may be
        #: half-updated, so the next fit() goes back to the last checkpoint (:meth:`_restore_after_interrupt`).
        self._interrupted = False
        self.device = resolve_device(cfg.run.device)
        # Models: the policy (and its optimiser), a critic if the algorithm has one, a frozen reference if KL is on.
        if policy is None:
            policy = load_policy(policy_path(cfg), device=self.device, dtype=cfg.model.dtype)
        self.policy = policy
        self.model = policy.model
        policy.fast = cfg.model.fast_forward  # a Policy member; backends without a lean forward ignore it
        if cfg.model.fused_training:
            _check_fused_training(policy, self.device, cfg)
        policy.fused_training = cfg.model.fused_training
        # The count in force from here on (provenance.json and resume_log.jsonl record it): "auto" that is not one
        # thread is torch's default, set again, since an earlier Trainer of this process may have changed it.
        self.threads = cpu_threads(cfg.run.threads, self.model, self.device) or TORCH_DEFAULT_THREADS
        torch.set_num_threads(self.threads)
        if cfg.model.gradient_checkpointing:
            _enable_activation_checkpointing(self.model)
        self.state = TrainState()
        # Envs: P x G for training, one per validation episode.
        P, G = cfg.rollout.groups, cfg.rollout.group_size
        self.envs = _make_envs(cfg, P * G)
        for hazard in (format_penalty_warning(self.envs[0]), images_dropped_warning(self.envs[0], policy, cfg),
                       *ignored_settings(cfg)):
            if hazard:
                warnings.warn(hazard, stacklevel=2)
        self.val_envs = _make_envs(cfg, cfg.eval.episodes)
        self.settings = RolloutSettings.from_config(cfg.rollout)
        self.val_settings = RolloutSettings.from_config(cfg.rollout, greedy=cfg.eval.greedy)
        self.rng = RNGStreams(cfg.run.seed)
        self.optimizer = make_optimizer([p for p in self.model.parameters() if p.requires_grad], cfg.algo,
                                        fused=cfg.model.fused_training)
        self.critic: ValueModel | None = None
        self.critic_optimizer: Any = None
        if self.algo.critic:
            self._build_critic()
        self.ref_policy = None
        from ragen_core.math.mi import MIZScoreEMA

        self.ema = MIZScoreEMA(alpha=cfg.mi.ema_alpha, eps=cfg.mi.ema_eps)
        self.probe = None
        if cfg.mi.probe_prompts:
            from ragen_core.training.probe import build_probe

            try:
                self.probe = build_probe(cfg.env.id, cfg.env.kwargs, cfg.mi.probe_prompts, cfg.mi.probe_group_size,
                                         cfg.mi.probe_seed, self.settings, cfg.env.per_rollout_option)
            except ValueError as e:  # too few distinct levels for mi.probe_prompts: a setting, not a bug
                raise ConfigError(f"mi.probe_prompts: {e}") from None
        (self.run_dir / "checkpoints").mkdir(parents=True, exist_ok=True)  # every check passed: make the folder
        #: Where :meth:`say` writes the run's progress lines (None: nowhere; `ragen train` sets stderr).
        self.messages = None
        self.resumed = resume
        #: This step's update takes its old log-probs from its own forward (:meth:`old_logprobs_from_update`).
        self._old_from_update = False
        #: The step of the last checkpoint written by this process (None before the first).
        self.saved_step: int | None = None
        with self._writing():  # a resume rewrites the logs and config.toml: not while another process trains here
            self.log = RunLog(self.run_dir, tensorboard=cfg.run.tensorboard, on_step=on_step)
            self.rollouts_file = RolloutsFile(self.run_dir / ROLLOUTS, cfg.run.rollouts_steps, resume)
            if resume:
                self.load_checkpoint()
                # What ran from here on: the log of resumes, and config.toml holds the values in force.
                record_resume(self.run_dir, self.state.step, self.resume_changes)
                (self.run_dir / "config.toml").write_text(dump_toml(cfg))
            elif cfg.algo.kl_coef > 0:
                self._make_reference()

    def _writing(self) -> Any:
        """The run folder's lock, held while this trainer writes there (construction, :meth:`fit`,
        :meth:`train_step`, the checkpoints): two processes writing one run folder would interleave its
        ``metrics.jsonl`` and overwrite each other's checkpoints. A context manager
        (:func:`ragen_core.locks.holding_folder`): released at its end, exceptions included; taken only where
        this process does not hold it already (``ragen train`` locks its run folder before it builds the Trainer).

        Raises:
            FolderLocked: another process holds the lock (one line saying what to do).
        """
        return holding_folder(self.run_dir, busy=(
            f"run_dir {self.run_dir} is being written by another process right now (a Trainer or `ragen train` "
            f"training there): two would interleave its metrics.jsonl and checkpoints; wait for that one to finish "
            f"(then resume=True continues the run), or give another run_dir"))

    def _build_critic(self) -> None:
        """A fresh critic on the policy's current backbone (again after the warm start)."""
        self.critic = ValueModel(self.model).to(self.device)
        from ragen_core.training.sft import with_float32_master

        self.critic_optimizer = with_float32_master(self.critic.parameters(), lambda ps: torch.optim.AdamW(
            ps, lr=self.cfg.model.critic_lr, weight_decay=self.cfg.algo.weight_decay))

    def _make_reference(self) -> None:
        ref = copy.copy(self.policy)
        ref.model = copy.deepcopy(self.model).eval().requires_grad_(False)
        self.ref_policy = ref

    # ------------------------------------------------------------------ one step
    def train_step(self) -> dict[str, Any]:
        """One RL step: rollout -> filter -> (MI) -> compact -> score -> advantages -> update (-> validation);
        returns its metrics record.

        :meth:`fit` runs the steps of a run (and logs and checkpoints them); a step called here is neither logged
        nor checkpointed, so :meth:`fit` refuses to continue a trainer that took one (RuntimeError).

        Raises:
            ConfigError: the config changed since the trainer was built in a key it does not read at every step
                (:data:`LIVE_KEYS`), or is no longer valid.
            RuntimeError: the previous step (or fit()) was interrupted part-way: its model, optimiser and RNG
                streams may be half-updated (:meth:`load_checkpoint` goes back to the last checkpoint).
            NonFiniteError: (a ConfigError) the step's advantages, losses or gradient norms hold a NaN or an inf;
                raised before the optimiser step, naming the step and the quantities.
        """
        if self._interrupted:
            back = (f"call trainer.load_checkpoint() to go back to the last checkpoint (step {self.saved_step}) or "
                    f"trainer.fit() (which does that itself), or build a new Trainer" if self.saved_step is not None
                    else "nothing was checkpointed yet (load_checkpoint() has nothing to go back to): build a new "
                         "Trainer, with a freshly loaded policy")
            raise RuntimeError(f"the last train_step() or fit() of this Trainer was interrupted part-way, so its "
                               f"model, optimiser and RNG streams may be half-updated: {back}")
        self._check_config()
        # The run's thread count, as fit() sets it: another Trainer of this process (a notebook's earlier cell) may
        # have set its own since this one was built, and the count changes the last bits of sums.
        torch.set_num_threads(self.threads)
        try:
            with self._writing():  # its rollouts.jsonl
                return self._train_step()
        except BaseException:
            self._interrupted = True
            raise

    def _train_step(self) -> dict[str, Any]:
        """The body of :meth:`train_step` (numbered as in the module docstring)."""
        cfg = self.cfg
        step = self.state.step + 1
        metrics: dict[str, Any] = {"step": step}
        t0 = time.perf_counter()

        # 1. rollout
        batch = self.collect()
        metrics.update(batch.summary())
        self.rollouts_file.add(step, batch, self.policy)

        # 2. filter (and DAPO's refill of the dropped groups)
        kept, filter_metrics = self.filter_with_metrics(batch)
        filter_kept = kept  # of `batch` (a DAPO refill renumbers the groups of the batch it trains on)
        metrics.update(filter_metrics)
        metrics[Filter.GROUPS_TOTAL] = float(batch.groups)
        train_batch = batch
        if cfg.algo.dynamic_sampling:
            train_batch, kept, refill_rounds = self.refill(batch, kept)
            metrics[Filter.REFILL_ROUNDS] = float(refill_rounds)
        t_rollout = time.perf_counter() - t0

        # 3. diagnostics on the whole batch (kept and dropped groups)
        t1 = time.perf_counter()
        if cadence_due(step, cfg.mi.every, cfg.mi.until):
            metrics.update(self.mi_diagnostics(batch, filter_kept))
        t_mi = time.perf_counter() - t1

        # 4. compact, or skip an empty batch (or, under filter.empty_step = "regularise", train every group on the
        # regularisers alone when no group has reward variance)
        regularise_only = self._regulariser_only_step(train_batch, kept)
        if regularise_only:
            kept = torch.arange(train_batch.groups)
        metrics.update(self._count_empty(kept.numel() == 0, regularise_only))
        t_score = t_update = 0.0
        if kept.numel() > 0:
            rows, images, compact_metrics = self.kept_rows(train_batch, kept)
            metrics.update(compact_metrics)

            # 5. score the kept rows (the old log-probs only where the update cannot take them from its own
            # first forward: see old_logprobs_from_update)
            t2 = time.perf_counter()
            self._old_from_update = cfg.algo.recompute_old_logprobs and self.old_logprobs_from_update(rows)
            metrics[Perf.OLD_LOGPROB_PASS] = float(cfg.algo.recompute_old_logprobs and not self._old_from_update)
            if cfg.algo.recompute_old_logprobs and not self._old_from_update:
                rows["old_logprobs"] = self._score(self.policy, rows, images)
            if self.ref_policy is not None:
                rows["ref_logprobs"] = self._score(self.ref_policy, rows, images)
            if self.critic is not None:
                rows["old_values"] = self._values(rows)

            # 6. advantages (the algorithm's entry)
            rows["advantages"], returns = compute_advantages(
                self.algo, rows, train_batch.rewards_pg, values=rows.get("old_values"), gamma=cfg.algo.gamma,
                lam=cfg.algo.lam)
            if regularise_only:  # the task term is zero by construction, whatever the algorithm's baseline
                rows["advantages"] = torch.zeros_like(rows["advantages"])
            if returns is not None:
                rows["returns"] = returns
            t_score = time.perf_counter() - t2
            m = rows["loss_mask"] != 0
            advs = rows["advantages"]
            metrics[Filter.KEPT_ZERO_ADV_SHARE] = zero_advantage_share(advs, m, rows["row_group"])
            # Undefined without a trained token (every kept response empty): null, as every undefined metric is.
            metrics[Loss.ADVANTAGE_MEAN] = float(advs[m].mean()) if m.any() else None
            mean = metrics[Loss.ADVANTAGE_MEAN]
            if mean is not None and not math.isfinite(mean):
                # Finite rewards can overflow float32 on the way (a group's sum, RLOO's G / (G - 1) scaling).
                top = float(train_batch.rewards_pg.abs().max())
                raise self._diverged(step, f"the advantages overflow float32 (their mean is {mean}, the largest "
                                           f"|episode return| {top:.3g})", "smaller rewards")
            metrics[Loss.ADVANTAGE_STD] = float(advs[m].std(unbiased=False)) if m.any() else None
            if self.loss_agg_mode == TRAJ_MEAN:
                rows["token_weights"] = trajectory_token_weights(rows["row_traj"], rows["loss_mask"])
                # The net push on the model's own samples: 0 for zero-mean group advantages.
                metrics[Loss.WEIGHTED_ADVANTAGE_MEAN] = (
                    float((advs * rows["token_weights"])[m].mean()) if m.any() else None)

            # 7. update
            t3 = time.perf_counter()
            upd = self.update(rows, images)
            self._old_from_update = False
            t_update = time.perf_counter() - t3
            metrics.update(upd)
            if Loss.ENTROPY in upd:
                metrics[Collapse.TOKEN_ENTROPY] = upd[Loss.ENTROPY]
            metrics[Perf.TOKENS_TRAINED] = float(m.sum())

        metrics.update({Perf.ROLLOUT_S: t_rollout, Perf.MI_S: t_mi, Perf.SCORE_S: t_score, Perf.UPDATE_S: t_update,
                        Perf.STEP_S: time.perf_counter() - t0})
        self.state.step = step

        # 8. validation, and the held-out MI probe
        if cadence_due(step, cfg.eval.every, cfg.eval.until):  # the last step's validation: see fit()
            metrics.update(self._timed_evaluate())
        if self.probe_due(step):
            metrics.update(self.probe_diagnostics(step))
        return metrics

    def probe_due(self, step: int) -> bool:
        """Whether the held-out probe measures after `step` updates: every ``mi.probe_every`` steps (0: ``mi.every``)
        up to ``mi.probe_until`` (0: no limit), and, with a limit, at the run's last step (``run.steps``)."""
        from ragen_core.training.probe import probe_due

        mi = self.cfg.mi
        return self.probe is not None and probe_due(step, self.cfg.run.steps, mi.probe_every or mi.every or 1,
                                                    mi.probe_until)

    @torch.no_grad()
    def probe_diagnostics(self, step: int) -> dict[str, float]:
        """The fixed held-out MI probe (ragen_core.training.probe) after `step` updates; its own sampler, seeded by
        (run.seed, step), leaves the training streams untouched."""
        from ragen_core.training.probe import probe_metrics

        if self.probe is None:
            return {}
        t = time.perf_counter()
        out = probe_metrics(self.policy, self.probe, sample_seed=1_000_003 * (self.cfg.run.seed + 1) + step,
                            span=self.cfg.mi.span, batch_tokens=self.cfg.mi.batch_tokens, **self._probe_templates())
        out[Perf.PROBE_S] = time.perf_counter() - t
        return out

    def _probe_templates(self) -> dict[str, Any]:
        """The warm start's template reasoning(s) and filler words, for the probe's template share (computed
        once; the template is the demonstrator's reasoning about fixed reference levels)."""
        if not hasattr(self, "_templates"):
            from ragen_core.training.sft import FILLER_WORDS, demonstrator_templates

            ws = self.cfg.warm_start
            self._templates = {"templates": demonstrator_templates(self.cfg) if ws.sft_episodes > 0 else None,
                               "filler_words": FILLER_WORDS, "n_filler": int(ws.filler_words)}
        return self._templates

    # ------------------------------------------------------------------ 1-2. rollouts and filtering
    def _group_seeds(self, n_groups: int) -> list[int]:
        base = self.cfg.env.train_seed + self.state.next_seed_offset
        self.state.next_seed_offset += n_groups
        return [base + i for i in range(n_groups)]

    def collect(self, policy: Any = None) -> RolloutBatch:
        """One rollout batch of P groups x G on fresh train seeds."""
        cfg = self.cfg
        seeds = self._group_seeds(cfg.rollout.groups)
        self.model.eval()
        with torch.no_grad():
            return rollout(policy or self.policy, self.envs, seeds, cfg.rollout.group_size, self.settings,
                           generator=self.rng.sample, reset_options=self._reset_options(seeds))

    def _reset_options(self, seeds: Sequence[int]) -> list[dict[str, Any]] | None:
        """Per-rollout reset options: `env.per_rollout_option` gets a distinct integer per rollout."""
        return per_rollout_options(self.cfg.env.per_rollout_option, seeds, self.cfg.rollout.group_size)

    def filter(self, batch: RolloutBatch):
        """SNR-aware filtering of one batch (None when disabled or G < 2)."""
        fc = self.cfg.filter
        if not fc.enabled or batch.group_size < 2:
            return None
        return filter_groups(batch.rewards_pg, fc.spec, generator=self.rng.filter)

    def filter_with_metrics(self, batch: RolloutBatch) -> tuple[torch.Tensor, dict[str, float]]:
        """The kept group indices and the filter's decision metrics (:data:`Filter.DECISION`), the same keys with
        the filter off (or G < 2): every group kept, and the reward-variance statistics (NaN where undefined)."""
        res = self.filter(batch)
        if res is not None:
            return res.kept, res.as_metrics(Filter.PREFIX)
        # The variance as the filter would define it (filter.ddof), so that a run with the filter off logs the same
        # quantity as one with it on (it used ddof=1 whatever filter.ddof said).
        ddof = self.cfg.filter.spec.ddof
        rv = rv_statistics(reward_variance(batch.rewards_pg, ddof=ddof)) if batch.group_size >= max(2, ddof + 1) else {}
        metrics = {Filter.KEPT_GROUPS: float(batch.groups), Filter.KEPT_FRACTION: 1.0, Filter.EMPTY: 0.0,
                   Filter.RV_MEAN: rv.get("rv_mean", math.nan), Filter.RV_STD: rv.get("rv_std", math.nan),
                   Filter.RV_HETEROGENEITY: rv.get("rv_heterogeneity", math.nan),
                   Filter.ZERO_FRACTION: rv.get("zero_fraction", math.nan),
                   Filter.NAN_GROUPS: rv.get("n_nan", math.nan)}
        return torch.arange(batch.groups), metrics

    def refill(self, batch: RolloutBatch, kept: torch.Tensor) -> tuple[RolloutBatch, torch.Tensor, int]:
        """DAPO dynamic sampling: extra rounds until P groups pass the filter (or the round limit).

        With the filter disabled, dynamic sampling drops zero-variance groups, as DAPO does: those of `batch` (whose
        `kept` is then every group) as well as those of the extra rounds.
        """
        cfg = self.cfg
        P, G = cfg.rollout.groups, cfg.rollout.group_size
        if not cfg.filter.enabled:
            # Without this, `kept` (every group) already held P groups, no round ran, and the zero-variance groups
            # were trained on: dynamic sampling did nothing at all.
            kept = _with_reward_variance(batch)
        groups = [batch.trajectories[i * G : (i + 1) * G] for i in kept.tolist()]
        rounds = 0
        while len(groups) < P and rounds < cfg.algo.max_refill_rounds:
            rounds += 1
            extra = self.collect()
            res = self.filter(extra)
            ok = _with_reward_variance(extra) if res is None else res.kept
            groups += [extra.trajectories[i * G : (i + 1) * G] for i in ok.tolist()]
        groups = groups[:P]
        trajs = []
        for gi, group in enumerate(groups):
            for traj in group:
                traj.group = gi
                trajs.append(traj)
        if not trajs:
            return batch, kept, rounds
        new = build_batch(trajs, len(groups), G, self.settings, pad_id=pad_token_id(self.policy.tokenizer),
                          full_context=cfg.rollout.context == "full", max_turns=self.settings.max_turns)
        return new, torch.arange(len(groups)), rounds

    # ------------------------------------------------------------------ 3. MI diagnostics
    @torch.no_grad()
    def mi_diagnostics(self, batch: RolloutBatch, kept: torch.Tensor | None = None) -> dict[str, Any]:
        """Cross-score the first turn of every group (kept and dropped) -> `collapse/` metrics.

        With `kept` (the filter's kept group indices), also the within-group covariance of a trace's return with
        its pointwise MI (:func:`ragen_core.training.probe.pmi_return_association`) over the kept groups and over
        the dropped ones: ``collapse/pmi_return_cov_kept`` / ``_dropped`` (and ``_corr_``): which way the task
        gradient of the groups trained on pushes input dependence, and which way that of the groups left out would
        have."""
        from ragen_core.math.metrics import regime_from_proxies, regime_resolution
        from ragen_core.math.mi import flatten_proxies, mi_proxies, mi_seq_null
        from ragen_core.training.probe import policy_cross_score

        if batch.groups < 2:
            return {}
        if batch.images is not None:
            return {Collapse.MI_SKIPPED_VISION: 1.0}
        prompts, traces = batch.mi_inputs(span=self.cfg.mi.span)
        eos = getattr(self.policy.tokenizer, "eos_token_id", None)
        stand_in = int(eos if eos is not None else pad_token_id(self.policy.tokenizer))
        empty = 0
        for row in traces:
            for k, z in enumerate(row):
                if not z:
                    # An empty trace has no tokens to score; stand in the end-of-turn token (counted).
                    row[k] = [stand_in]
                    empty += 1
        self.model.eval()
        L, lengths = policy_cross_score(self.policy, prompts, traces, self.cfg.mi.batch_tokens)
        keys = [tuple(p) for p in prompts]
        stats = mi_proxies(L, lengths, prompt_ids=keys)
        out = flatten_proxies(stats, prefix=Collapse.PREFIX)
        out[Collapse.MI_ZSCORE_EMA] = self.ema.update(stats)
        out[Collapse.REGIME] = regime_from_proxies(stats)
        null = mi_seq_null(L, seed=self.state.step)
        resolved, _ = regime_resolution(null, stats["mi_upper_bound"], stats["n_prompts"], stats["group_size"])
        out[Collapse.REGIME_RESOLVED] = float(resolved)
        out[Collapse.MI_SEQ_P_VALUE] = null["p_value"]
        out[Collapse.EMPTY_TRACES] = float(empty)
        if kept is not None:
            from ragen_core.training.probe import pmi_return_association

            mask = torch.zeros(batch.groups, dtype=torch.bool)
            mask[kept.long()] = True
            for cov_key, corr_key, sel in ((Collapse.PMI_RETURN_COV_KEPT, Collapse.PMI_RETURN_CORR_KEPT, mask),
                                           (Collapse.PMI_RETURN_COV_DROPPED, Collapse.PMI_RETURN_CORR_DROPPED, ~mask)):
                out[cov_key], out[corr_key] = pmi_return_association(L, batch.rewards_pg, groups=sel)
        return out

    # ------------------------------------------------------------------ 4. empty steps, compaction
    def _regulariser_only_step(self, batch: RolloutBatch, kept: torch.Tensor) -> bool:
        """Whether this step trains on the regularisers alone: ``filter.empty_step = "regularise"``, the filter on,
        it kept nothing, and no group has reward variance (sum V = 0; NaN rewards still skip)."""
        fc = self.cfg.filter
        if fc.empty_step != "regularise" or kept.numel() > 0 or not fc.enabled or batch.group_size < 2:
            return False
        rv = reward_variance(batch.rewards_pg)
        return bool(torch.isfinite(rv).all()) and not float(rv.sum()) > 0.0

    def _count_empty(self, empty: bool, regularise_only: bool = False) -> dict[str, float]:
        if regularise_only:
            self.state.regulariser_only_total += 1
        extra = ({Filter.REGULARISER_ONLY: float(regularise_only),
                  Filter.REGULARISER_ONLY_TOTAL: float(self.state.regulariser_only_total)}
                 if self.cfg.filter.empty_step == "regularise" else {})
        if empty:
            self.state.empty_streak += 1
            self.state.empty_total += 1
            return {Filter.SKIPPED: 1.0, Filter.EMPTY_STREAK: float(self.state.empty_streak),
                    Filter.EMPTY_TOTAL: float(self.state.empty_total), **extra}
        self.state.empty_streak = 0
        return {Filter.SKIPPED: 0.0, Filter.EMPTY_STREAK: 0.0, Filter.EMPTY_TOTAL: float(self.state.empty_total),
                **extra}

    def kept_rows(self, batch: RolloutBatch, kept: torch.Tensor):
        """The row tensors (and images) of the kept groups, and the `filter/` row and token counts."""
        rows = batch.row_tensors()
        images = batch.images
        n_rows_before = rows["input_ids"].shape[0]
        tokens_before = int(rows["attention_mask"].sum())
        if kept.numel() < batch.groups:
            keep_rows = torch.isin(rows["row_group"], kept).nonzero().flatten()
            rows = select_groups_rows(rows, kept)
            if images is not None:
                images = [images[int(i)] for i in keep_rows]
        metrics = {Filter.ROWS_KEPT: float(rows["input_ids"].shape[0]), Filter.ROWS_TOTAL: float(n_rows_before),
                   Filter.TOKENS_KEPT_FRACTION: float(rows["attention_mask"].sum()) / max(tokens_before, 1)}
        return rows, images, metrics

    # ------------------------------------------------------------------ 5. scoring
    def old_logprobs_from_update(self, rows: dict[str, torch.Tensor]) -> bool:
        """Whether the update can take the old log-probs from its own forward passes instead of a scoring pass.

        True when the update is one epoch of one mini-batch: every micro-batch's forward then runs on the
        parameters that sampled the batch (the optimiser steps once, after all of them), so the recomputed old
        log-probs would be those very values, and the first (only) PPO ratio is exactly 1. TRL skips the pass
        at ``num_iterations=1`` for the same reason. With more epochs or mini-batches, later forwards run on
        updated parameters, and the pass is needed.
        """
        algo = self.cfg.algo
        return algo.old_logprobs_from_update and algo.epochs == 1 and rows["input_ids"].shape[0] <= algo.mini_batch_size

    def _micro_batches(self, n: int) -> list[torch.Tensor]:
        mb = self.cfg.algo.micro_batch_size
        return [torch.arange(i, min(i + mb, n)) for i in range(0, n, mb)]

    def _slice(self, rows: dict[str, torch.Tensor], idx: torch.Tensor, images: list | None):
        """Rows `idx`, trimmed to their longest sequence (right padding), moved to the device."""
        sub = {k: v.index_select(0, idx) for k, v in rows.items()}
        t = int(sub["attention_mask"].sum(dim=1).max())
        out = {k: (v[:, :t] if v.dim() == 2 else v).to(self.device) for k, v in sub.items()}
        imgs = [images[int(i)] for i in idx] if images is not None else None
        return out, imgs

    @torch.no_grad()
    def _score(self, policy: Any, rows: dict[str, torch.Tensor], images: list | None) -> torch.Tensor:
        out = torch.zeros_like(rows["old_logprobs"])
        policy.model.eval()
        for idx in self._micro_batches(rows["input_ids"].shape[0]):
            mb, imgs = self._slice(rows, idx, images)
            lp = policy.forward_logprobs(mb["input_ids"], mb["attention_mask"], images=imgs,
                                         score_mask=mb["loss_mask"] != 0, **self._temp_kw()).logprobs
            out[idx, : lp.shape[1]] = lp.float().cpu() * (mb["loss_mask"] != 0).cpu()
        return out

    @torch.no_grad()
    def _values(self, rows: dict[str, torch.Tensor]) -> torch.Tensor:
        out = torch.zeros_like(rows["old_logprobs"])
        self.critic.eval()
        for idx in self._micro_batches(rows["input_ids"].shape[0]):
            mb, _ = self._slice(rows, idx, None)
            v = self.critic(mb["input_ids"], mb["attention_mask"])
            out[idx, : v.shape[1]] = v.float().cpu() * (mb["loss_mask"] != 0).cpu()
        return out

    def _temp_kw(self) -> dict[str, float]:
        """Score at the sampling temperature (HFPolicy's `temperature`), so PPO ratios compare like with like."""
        t = self.cfg.rollout.temperature
        return {} if t == 1.0 else {"temperature": t}

    # ------------------------------------------------------------------ 7. update
    def update(self, rows: dict[str, torch.Tensor], images: list | None) -> dict[str, float]:
        """PPO-style epochs over mini-batches of the kept rows; returns the `loss/` metrics.

        Each of ``algo.epochs`` passes shuffles the rows and splits them into mini-batches of
        ``algo.mini_batch_size`` rows. A mini-batch accumulates its gradient over micro-batches of
        ``algo.micro_batch_size`` rows, each weighted by its share of the mini-batch (tokens for token-mean; for the
        sequence-level modes, rows with a generated token, the rows their mean counts) so that the sum is the
        mini-batch's gradient whatever the micro-batch size, and then takes one optimiser step, unless the KL early
        stop fires first (then this step's updates end). The loss of a micro-batch is ``pg_loss - entropy_coef *
        entropy (+ kl_coef * kl)``, the entropy a token-mean weighted by the token share in every mode, and the
        critic's value loss when there is one.
        The `loss/` metrics are each mini-batch's value (its micro-batches' values weighted as the backward weights
        them: by `w` for the policy, total and KL losses, by the token share for the token-mean ones), averaged over
        the mini-batches (the gradient norms over the optimiser steps); so ``algo.micro_batch_size``, memory only,
        changes none of them (an unweighted mean over micro-batches moved ``loss/entropy`` by 6%).
        """
        cfg = self.cfg.algo
        mode, by_trajectory = token_loss_mode(self.loss_agg_mode)
        norm_c = float(self.cfg.rollout.max_turns * self.cfg.rollout.max_new_tokens)  # Dr.GRPO's constant C
        grad_clip = cfg.grad_clip if cfg.grad_clip > 0 else float("inf")
        lr_frac = self._set_learning_rates()
        stats: dict[str, list[float]] = {}
        mini_sums: dict[str, float] = {}  # the mini-batch's micro-batch values, weighted

        def add(key: str, value: float) -> None:  # once per optimiser step
            stats.setdefault(key, []).append(float(value))

        def add_weighted(key: str, value: float, weight: float) -> None:  # once per micro-batch
            mini_sums[key] = mini_sums.get(key, 0.0) + weight * float(value)

        updates = 0
        stopped_early = False
        parts = GradParts(self.model) if cfg.grad_parts else None
        before = parts.snapshot() if parts is not None else None
        for mini in self._minibatches(rows["input_ids"].shape[0]):
            mini_mask = rows["loss_mask"][mini] != 0
            mini_tokens = float(mini_mask.sum())
            if mini_tokens == 0:
                continue
            # The rows the sequence-mean modes average over: those with a generated token (aggregate_loss leaves
            # the others out), so that the micro-batches' weighted losses add up to the mini-batch's loss exactly.
            mini_rows = float(mini_mask.any(dim=1).sum())
            # Accumulate the mini-batch's gradient, micro-batch by micro-batch.
            self.model.train()
            self.optimizer.zero_grad(set_to_none=True)
            if self.critic is not None:
                self.critic.train()
                self.critic_optimizer.zero_grad(set_to_none=True)
            mini_kl = 0.0  # its approximate KL to the sampling policy (token-weighted), for the early stop
            mini_sums.clear()
            for idx in mini.split(cfg.micro_batch_size):
                mb, imgs = self._slice(rows, idx, images)
                mask = mb["loss_mask"]
                n_tok = float((mask != 0).sum())
                if n_tok == 0:
                    continue
                w_tokens = n_tok / mini_tokens
                w = w_tokens if mode == "token-mean" else float((mask != 0).any(dim=1).sum()) / mini_rows
                out = self.policy.forward_logprobs(mb["input_ids"], mb["attention_mask"], images=imgs,
                                                   with_entropy=True, score_mask=mask != 0, **self._temp_kw())
                logp = out.logprobs.float()
                # One epoch of one mini-batch: the parameters have not moved yet, so this forward is the old policy's.
                old_logp = logp.detach() if self._old_from_update else mb["old_logprobs"]
                adv = mb["advantages"] * mb["token_weights"] if by_trajectory else mb["advantages"]
                pg_loss, pg_stats = losses.ppo_policy_loss(
                    logp, old_logp, adv, mask, clip_eps_low=cfg.clip_low,
                    clip_eps_high=cfg.clip_high, dual_clip_c=cfg.dual_clip or None, loss_agg_mode=mode,
                    norm_constant=norm_c)
                entropy = aggregate_loss(out.entropy.float(), mask, "token-mean")
                # The bonus is the mini-batch's token-mean entropy in every mode: its micro-batch weight is the token
                # share, which the backward's weight `w` is only under token-mean.
                bonus = cfg.entropy_coef * entropy if w == w_tokens else cfg.entropy_coef * entropy * (w_tokens / w)
                loss = pg_loss - bonus
                kl_part = None
                if self.ref_policy is not None:
                    kl_mat = losses.kl_penalty(logp, mb["ref_logprobs"], kind=cfg.kl_estimator)
                    kl = aggregate_loss(kl_mat, mask, mode, norm_constant=norm_c)
                    kl_part = cfg.kl_coef * kl
                    loss = loss + kl_part
                    add_weighted(Loss.KL, kl.item(), w)
                if parts is None:
                    (loss * w).backward()
                else:  # each part's own gradient, summed into .grad: the same total to float rounding
                    parts.backward(w, task=pg_loss, entropy=-bonus, kl=kl_part)
                add_weighted(Loss.POLICY, pg_loss.item(), w)
                add_weighted(Loss.ENTROPY, entropy.item(), w_tokens)
                add_weighted(Loss.TOTAL, loss.item(), w)
                add_weighted(Loss.CLIP_FRACTION, pg_stats["clipfrac"], w_tokens)
                add_weighted(Loss.DUAL_CLIP_FRACTION, pg_stats["dual_clipfrac"], w_tokens)
                add_weighted(Loss.APPROX_KL, pg_stats["approx_kl"], w_tokens)
                mini_kl += pg_stats["approx_kl"] * n_tok / mini_tokens
                if self.critic is not None:
                    values = self.critic(mb["input_ids"], mb["attention_mask"])
                    v_loss, v_stats = losses.value_loss(
                        values, mb["old_values"], mb["returns"], mask,
                        clip_range=cfg.value_clip or None, loss_agg_mode="token-mean")
                    (v_loss * (n_tok / mini_tokens)).backward()
                    add_weighted(Loss.VALUE, v_loss.item(), w_tokens)
                    add_weighted(Loss.VALUE_CLIP_FRACTION, v_stats["vf_clipfrac"], w_tokens)
            for key, value in mini_sums.items():  # the mini-batch was computed whole, stopped or not
                add(key, value)
            if cfg.target_kl > 0 and mini_kl > 1.5 * cfg.target_kl:
                # The policy has moved far enough from the one that sampled the batch: stop this step's
                # updates before applying this mini-batch (the early stop of Spinning Up / SB3's target_kl).
                stopped_early = True
                break
            # Clip the accumulated gradients (`algo.grad_clip`; 0 = none) and step the policy (and critic).
            params = [p for p in self.model.parameters() if p.grad is not None]
            if parts is not None:
                for key, norm in parts.norms().items():
                    add(key, norm)
                parts.reset()
            norms = {Loss.GRAD_NORM: float(torch.nn.utils.clip_grad_norm_(params, grad_clip))}
            if self.critic is not None:
                norms[Loss.CRITIC_GRAD_NORM] = float(torch.nn.utils.clip_grad_norm_(self.critic.parameters(),
                                                                                     grad_clip))
            # Before any weight moves: a NaN or inf loss or gradient norm would reach the weights (clipping by an
            # inf norm zeroes the step, or makes it NaN) and every later step and checkpoint. Values at hand, so
            # one check per optimiser step.
            bad = {k: v for k, v in {**mini_sums, **norms}.items() if not math.isfinite(v)}
            if bad:
                raise self._diverged(self.state.step + 1, ", ".join(f"{k} = {v}" for k, v in bad.items()) +
                                     " before the optimiser step")
            for key, norm in norms.items():
                add(key, norm)
            self.optimizer.step()
            if self.critic is not None:
                self.critic_optimizer.step()
            updates += 1
        self.model.eval()
        result = {k: float(np.mean(v)) for k, v in stats.items()}
        if parts is not None:
            result[Loss.UPDATE_NORM] = parts.distance_from(before)
        result[Loss.UPDATES] = float(updates)
        result[Loss.LR] = cfg.lr * lr_frac
        result[Loss.KL_EARLY_STOP] = float(stopped_early)
        return result

    def _diverged(self, step: int, what: str, fix: str = "") -> NonFiniteError:
        """The one-line error of `step` (0: the warm start) that produced `what`, a NaN or an inf: which step, the
        last good checkpoint, and the settings to change (`fix`, or the learning rates')."""
        a, ws = self.cfg.algo, self.cfg.warm_start
        warm = step == 0 and ws.sft_episodes > 0
        if not fix and step == 0:  # before any RL step: the warm start, or the policy as it was given
            fix = (f"a smaller warm_start.lr (now {ws.lr:g})" if warm else
                   "a policy whose weights are finite (model.path, or the policy passed to the Trainer)")
        fix = fix or (f"a smaller algo.lr (now {a.lr:g}), algo.grad_clip > 0 (now {a.grad_clip:g}) or smaller "
                      f"algo.entropy_coef / algo.kl_coef / rewards")
        kept = (f"{LATEST} still holds step {self.saved_step}" if self.saved_step is not None else
                "no checkpoint was written")
        return NonFiniteError(f"training diverged by step {step}{' (the warm start)' if warm else ''}: {what}; "
                              f"{kept}; start a new run with {fix}")

    def _set_learning_rates(self) -> float:
        """Set this step's learning rates; returns the schedule's fraction of the base rate.

        The schedule is a function of the step alone, so a resumed run continues it without extra state.
        """
        frac = lr_fraction(self.cfg.algo.lr_schedule, self.state.step + 1, self.cfg.run.steps)
        for group in self.optimizer.param_groups:
            group["lr"] = self.cfg.algo.lr * frac
        if self.critic_optimizer is not None:
            for group in self.critic_optimizer.param_groups:
                group["lr"] = self.cfg.model.critic_lr * frac
        return frac

    def _minibatches(self, n: int) -> Iterator[torch.Tensor]:
        """Row indices of each mini-batch, epoch after epoch (one shuffle per epoch, drawn only when reached:
        an early stop leaves the update generator where it was)."""
        for _ in range(self.cfg.algo.epochs):
            perm = torch.randperm(n, generator=self.rng.update)
            for start in range(0, n, self.cfg.algo.mini_batch_size):
                yield perm[start : start + self.cfg.algo.mini_batch_size]

    # ------------------------------------------------------------------ 8. validation
    @torch.no_grad()
    def evaluate(self, record: bool = True, on_turn: Callable[[int], None] | None = None) -> dict[str, float]:
        """Held-out validation: `eval.episodes` distinct seeds from `env.val_seed`, one rollout each.

        With `record`, the per-episode outcomes are appended to ``val_outcomes.jsonl`` in the run folder.
        `on_turn` is called after each turn of the rollout (a progress bar).
        """
        batch = validation_rollout(self.policy, self.val_envs, self.cfg, self.val_settings, self.state.step,
                                   on_turn=on_turn)
        s = batch.summary()
        #: The per-episode successes of the last validation (shared step-0 measurements store them).
        self._last_val_success = [int(x) for x in batch.success.tolist()]
        if record:
            self.log.log_val_outcomes(self.state.step, validation_seeds(self.cfg), self._last_val_success)
        return {Val.SUCCESS: s[Rollout.SUCCESS], Val.RETURN: s[Rollout.RETURN],
                Val.FORMAT_VALID: s[Rollout.FORMAT_VALID], Val.RESPONSE_LENGTH: s[Rollout.RESPONSE_LENGTH]}

    def _timed_evaluate(self, progress_label: str = "") -> dict[str, float]:
        """:meth:`evaluate` with its time; `progress_label` shows a bar over its turns (with `run.progress`): a
        batched rollout plays one turn of all its episodes at a time, so the bar's total is `rollout.max_turns`
        (an upper bound: a rollout whose episodes all end early closes it sooner)."""
        t = time.perf_counter()
        bar = None
        if progress_label and self.cfg.run.progress:
            bar = _progress(self.cfg.rollout.max_turns, 0, True, desc=progress_label, unit="turn")
        try:
            m = self.evaluate(on_turn=None if bar is None else lambda _turn: bar.update(1))
        finally:
            if bar is not None:
                bar.close()
        m[Perf.EVAL_S] = time.perf_counter() - t
        return m

    # ------------------------------------------------------------------ the loop
    def should_stop(self) -> bool:
        n = self.cfg.filter.max_empty_steps
        return n > 0 and self.state.empty_streak >= n

    def _start(self) -> None:
        """A fresh run: config and empty logs, warm start, a checkpoint, then the step-0 measurements."""
        cfg = self.cfg
        config_text = dump_toml(cfg)
        (self.run_dir / "config.toml").write_text(config_text)
        write_provenance(self.run_dir, config_text)
        self.log.start()
        if cfg.warm_start.sft_episodes > 0:
            from ragen_core.training.warm_cache import cached_warm_start

            sft_metrics = cached_warm_start(self.policy, cfg, device=self.device)
            self.log.log({"step": 0, **sft_metrics})
            if cfg.algo.kl_coef > 0:
                self._make_reference()  # the reference is the warm-started model
            if self.critic is not None:
                self._build_critic()  # the critic starts from the warm-started backbone too
        # Checkpoint right after the warm start: a run stopped from here on resumes without training it again.
        self.save_checkpoint()
        self._step0_measurements()

    def say(self, text: str) -> None:
        """One progress line for the person running `ragen train` (above the progress bar; nothing when no one
        listens: :attr:`messages` None)."""
        if self.messages is None:
            return
        if self.cfg.run.progress:
            from tqdm.auto import tqdm

            tqdm.write(text, file=self.messages)
        else:
            print(text, file=self.messages, flush=True)

    def _say_measurements(self, metrics: dict[str, Any], bar: Any) -> None:
        """A line for each validation and probe measurement in `metrics`."""
        step = metrics.get("step")
        if isinstance(metrics.get(Val.SUCCESS), (int, float)):
            self.say(f"step {step}: validation success {100 * metrics[Val.SUCCESS]:.1f}% "
                     f"({self.cfg.eval.episodes} held-out episodes"
                     f"{', after the warm start' if step == 0 else ''})")
        if isinstance(metrics.get(Probe.RETRIEVAL_MARGIN), (int, float)):
            self.say(f"step {step}: probe retrieval margin {metrics[Probe.RETRIEVAL_MARGIN]:.3f} (0 = chance, "
                     f"1 = ceiling), token entropy {metrics.get(Probe.TOKEN_ENTROPY, float('nan')):.3f} nats")

    def _step0_measurements(self) -> None:
        """The "before" validation and probe at step 0 that the run has not logged yet, then a checkpoint.

        Validation and probe draw from their own generators (seeded by run.seed and the step), so running them
        after a resume from the post-warm-start checkpoint gives the numbers an uninterrupted run gives.
        """
        from ragen_core.training.warm_cache import cached_step0

        cfg = self.cfg
        logged = {k for rec in self.log.history if rec.get("step") == 0 for k in rec}
        if cfg.eval.at_start and cfg.eval.every and Val.SUCCESS not in logged:
            def validate() -> dict[str, Any]:
                metrics = self._timed_evaluate(progress_label="validation at step 0")
                return {"metrics": metrics, "success": self._last_val_success}

            t = time.perf_counter()
            # every arm of a seed starts from the same point
            value, hit = cached_step0(cfg, "validation", validate, self.model)
            if hit:  # this run's own outcomes file gets the step-0 lines an own validation would have written
                self.log.log_val_outcomes(0, validation_seeds(cfg), [int(x) for x in value["success"]])
                value["metrics"][Perf.EVAL_S] = time.perf_counter() - t  # the time spent here: reading the cache
            row = {"step": 0, **value["metrics"]}
            self.log.log(row)
            self._say_measurements(row, None)
        if self.probe is not None and not any(k.startswith(Probe.PREFIX) for k in logged):
            t = time.perf_counter()
            value, hit = cached_step0(cfg, "probe", lambda: self.probe_diagnostics(0), self.model)  # where RL starts
            if hit:
                value[Perf.PROBE_S] = time.perf_counter() - t
            row = {"step": 0, **value}
            self.log.log(row)
            self._say_measurements(row, None)
        self.save_checkpoint()

    def fit(self) -> list[dict[str, Any]]:
        """Run the run: warm start (if configured, fresh runs only), the training loop up to ``run.steps``, the
        last validation, plots and summary; returns the records of ``metrics.jsonl`` (a new list each call).

        Call it again after a Ctrl-C (or an error) part-way, in a notebook as with ``ragen train --resume``: it
        goes back to the last checkpoint (the state, the RNG streams and the logs of that step) and continues, as
        an uninterrupted run would have. Again after a finished run, it trains nothing more unless ``run.steps``
        was raised (the keys it re-reads: :data:`LIVE_KEYS`).

        Raises:
            ConfigError: the config is invalid, or changed since the trainer was built outside :data:`LIVE_KEYS`, or
                ``run.steps`` is below the steps trained (or changed after steps trained under a linear schedule).
            RuntimeError: the trainer took steps by :meth:`train_step` outside fit() (they are in neither the log
                nor a checkpoint), or the last fit() stopped before the run's first checkpoint (nothing to go back
                to; the policy may be partly trained: build a new Trainer).
            ValueError: a new run whose folder got a run (a checkpoint) since the trainer was built.
            FolderLocked: another process writes the run folder now (:meth:`_writing`).
        """
        # The run's thread count again: another Trainer of this process may have set its own since this one was built
        # (the count changes the last bits of sums, and provenance records this one).
        torch.set_num_threads(self.threads)
        with self._writing():
            try:
                return self._fit_locked()
            finally:
                self._close_tensorboard()

    def _fit_locked(self) -> list[dict[str, Any]]:
        """:meth:`fit`, under the run folder's lock."""
        if self._interrupted:
            self._restore_after_interrupt()
        if self.saved_step is None and not self.resumed:  # a new run: the folder may hold one made since __init__
            _check_run_dir(self.run_dir, resume=False)
        done = self.saved_step if self.saved_step is not None else 0
        if self.state.step != done:
            fix = ("call trainer.load_checkpoint() to drop them and continue from the last checkpoint (step "
                   f"{self.saved_step}), or build a new Trainer" if self.saved_step is not None else
                   "the run folder has no config.toml, warm start or step-0 measurements for them either: build a "
                   "new Trainer and call fit() first")
            raise RuntimeError(f"this Trainer is at step {self.state.step}, after train_step() calls outside fit() "
                               f"that are in neither metrics.jsonl nor a checkpoint (last checkpoint: "
                               f"{'none' if self.saved_step is None else f'step {self.saved_step}'}), so fit() "
                               f"cannot continue them as one run: {fix}")
        self._check_config(in_fit=True)
        if self.saved_step is not None or self.resumed:  # a run under way: config.toml holds the values in force
            self._write_config()
        try:
            return list(self._fit())
        except BaseException:
            self._interrupted = True
            raise

    def _close_tensorboard(self) -> None:
        """Flush and close the TensorBoard writer (``run.tensorboard``) at the end of :meth:`fit`, also when it
        fails: the writer buffers its events, and one left open may lose them when the process exits. The log opens
        a new writer (a new events file in the same folder) at its next record."""
        self.log.close()

    def _restore_after_interrupt(self) -> None:
        """After a fit() or train_step() that stopped part-way: back to the last checkpoint, as a resume does."""
        if self.saved_step is None:
            raise RuntimeError("the last fit() of this Trainer stopped before the run's first checkpoint (in the warm "
                               "start or before it), so there is nothing to go back to and its policy may be partly "
                               "trained: build a new Trainer, with a freshly loaded policy, to start the run again "
                               "(the same run_dir is fine)")
        self.load_checkpoint()

    def _check_config(self, in_fit: bool = False) -> None:
        """The config as it is now (the caller's object is the trainer's, and may have changed since): valid
        (:meth:`TrainConfig.validate`), and changed since the last check in :data:`LIVE_KEYS` only; ``run.steps``
        fixed once steps trained under ``algo.lr_schedule=linear`` (its rate at every step depends on it) and, for
        `in_fit`, not below the steps trained. A run under way gets ``config.toml`` rewritten with a change.
        ConfigError naming the key otherwise."""
        cfg = self.cfg
        if not isinstance(cfg, TrainConfig):
            raise TypeError(f"Trainer.cfg must be a TrainConfig; got {_short(cfg)}")
        now = config_to_dict(cfg)
        if now == self._config_seen and not in_fit:
            return  # unchanged since it was last validated: a step pays 1.3 ms here instead of 8 for validate()
        cfg.validate()
        changes = _changed_keys(self._config_seen, now)
        for key, (before, after) in changes.items():
            if key not in LIVE_KEYS:
                raise ConfigError(f"{key} changed from {before!r} to {after!r} after the Trainer was built: the "
                                  f"trainer read it when it built its models, envs and logs, so the change would "
                                  f"not take effect; build a new Trainer for it (a built one re-reads only "
                                  f"{', '.join(LIVE_KEYS)})")
        if "run.steps" in changes and cfg.algo.lr_schedule == "linear" and self.state.step > 0:
            before, after = changes["run.steps"]
            raise ConfigError(f"run.steps changed from {before} to {after} after {self.state.step} steps trained with "
                              f"algo.lr_schedule=linear, whose learning rate at every step depends on run.steps: "
                              f"start a new run instead")
        if in_fit and cfg.run.steps < self.state.step:
            raise ConfigError(f"run.steps={cfg.run.steps} is below the {self.state.step} steps this run has "
                              f"already trained: keep or raise it")
        self._config_seen = now
        if changes and (self.saved_step is not None or self.resumed):
            self._write_config()

    def _write_config(self) -> None:
        """``config.toml`` with the values in force (written only when they differ from the file's)."""
        text = dump_toml(self.cfg)
        path = self.run_dir / "config.toml"
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)

    def _fit(self) -> list[dict[str, Any]]:
        """The body of :meth:`fit`; returns the log's history."""
        cfg = self.cfg
        t_start = time.perf_counter()  # run.max_minutes counts from here (warm start included)
        if self.state.step == 0:
            if self.resumed:  # from the checkpoint after the warm start: what step 0 still lacks
                self._step0_measurements()
            else:
                self._start()
        bar = _progress(cfg.run.steps, self.state.step, cfg.run.progress)
        if bar is not None:
            self.say(BAR_LEGEND)
        stopped = ""
        try:
            while self.state.step < cfg.run.steps:
                metrics = self.train_step()
                self.log.log(metrics)
                self._say_measurements(metrics, bar)
                step = self.state.step
                # A numbered copy (run.keep_every) is made by a save, so its steps save too, whatever save_every is.
                if (cfg.run.save_every and (step % cfg.run.save_every == 0 or step == cfg.run.steps)) or \
                        (cfg.run.keep_every and step % cfg.run.keep_every == 0):
                    self.save_checkpoint()
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix({label: f"{metrics[k]:.3g}" for k, label in BAR_FIELDS.items()
                                     if isinstance(metrics.get(k), float)})
                if self.state.step >= cfg.run.steps:  # done: a limit reached on the last step stops nothing
                    break
                if self.should_stop():
                    stopped = (f"stopped after {self.state.empty_streak} consecutive empty steps "
                               f"(filter.max_empty_steps={cfg.filter.max_empty_steps})")
                    break
                if cfg.run.max_minutes and time.perf_counter() - t_start > 60 * cfg.run.max_minutes:
                    stopped = f"stopped at the time limit run.max_minutes={cfg.run.max_minutes:g}"
                    break
        finally:
            if bar is not None:
                bar.close()
        history = self.log.history
        last = history[-1] if history else {}
        validated_at_step0 = self.state.step == 0 and any(  # run.steps=0: the step-0 validation is the "after"
            r.get("step") == 0 and Val.SUCCESS in r for r in history)
        final: dict[str, Any] = {}
        if cfg.eval.every and Val.SUCCESS not in last and not validated_at_step0:
            # Always end with a validation of the last step (the "after" of the run), also when run.steps is not
            # a multiple of eval.every.
            final.update(self._timed_evaluate())
        if cfg.mi.probe_until and self.probe is not None and Probe.RETRIEVAL_MARGIN not in last:
            # A probe limited to its early window still measures the run's end, also when the run stopped early.
            final.update(self.probe_diagnostics(self.state.step))
        if final:
            final = {"step": self.state.step, **final}
            self.log.log(final)
            self._say_measurements(final, None)
        if self.saved_step != self.state.step:
            self.save_checkpoint()
        if self.rollouts_file.steps:
            # After the last checkpoint and with its own sampler: a resumed, longer run draws what an uninterrupted
            # one does. This batch is sampled by the final weights, the ones `ragen export` writes.
            gen = torch.Generator(device="cpu").manual_seed(cfg.run.seed + 20_000 + self.state.step)
            seeds = [cfg.env.train_seed + self.state.next_seed_offset + i for i in range(cfg.rollout.groups)]
            self.model.eval()
            with torch.no_grad():
                batch = rollout(self.policy, self.envs, seeds, cfg.rollout.group_size, self.settings,
                                generator=gen, reset_options=self._reset_options(seeds))
            self.rollouts_file.add(self.state.step, batch, self.policy, final=True)
        write_plots(self.run_dir, history)
        write_summary(self.run_dir, cfg, history, stopped)
        return history

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """Everything a resumed run needs, as one dict (see ragen_core.training.checkpoint)."""
        return {
            **self.state.state_dict(),
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "critic": self.critic.state_dict() if self.critic is not None else None,
            "critic_optimizer": self.critic_optimizer.state_dict() if self.critic_optimizer is not None else None,
            "reference": self.ref_policy.model.state_dict() if self.ref_policy is not None else None,
            "ema": self.ema.state_dict(),
            "rng": self.rng.state_dict(),
        }

    def _check_fits(self, state: dict[str, Any]) -> None:
        """CheckpointError (one line naming the first difference) when the checkpoint's model or critic weights are
        not this trainer's (a policy of another architecture or size was passed): torch's ``load_state_dict``
        copies the tensors that match before it raises on the rest, leaving the passed policy half overwritten."""
        parts = [("model", self.model)] + ([("critic", self.critic)] if self.critic is not None
                                           and state.get("critic") is not None else [])
        for name, module in parts:
            saved, own = state.get(name), module.state_dict()
            if not isinstance(saved, dict):
                raise CheckpointError(f"{self.run_dir / LATEST}: it holds no {name} weights")
            problem = next((f"{k} is missing" for k in own if k not in saved), None) or next(
                (f"{k} is not in this {name}" for k in saved if k not in own), None) or next(
                (f"{k}: saved {tuple(saved[k].shape)} {saved[k].dtype}, this {name} {tuple(t.shape)} {t.dtype}"
                 for k, t in own.items() if (tuple(saved[k].shape), saved[k].dtype) != (tuple(t.shape), t.dtype)),
                None)
            if problem is not None:
                raise CheckpointError(f"{self.run_dir / LATEST} does not fit the {name} given to this Trainer "
                                      f"({problem}): resume with the policy the run was trained with")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._check_fits(state)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.critic is not None and state["critic"] is not None:
            self.critic.load_state_dict(state["critic"])
            self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        if state["reference"] is not None:
            self._make_reference()
            self.ref_policy.model.load_state_dict(state["reference"])
        elif self.cfg.algo.kl_coef > 0:
            self._make_reference()
        self.ema.load_state_dict(state["ema"])
        self.rng.load_state_dict(state["rng"])
        self.state.load_state_dict(state)

    def save_checkpoint(self) -> Path:
        """Write `checkpoints/latest.pt` atomically (and a numbered copy every `run.keep_every` steps).

        NonFiniteError, writing nothing, when the weights hold a NaN or an inf (a warm start that diverged, a step
        whose finite gradient overflowed the weights)."""
        try:
            with self._writing():
                path = save_checkpoint(self.run_dir, self.state_dict(), self.state.step, self.cfg.run.keep_every)
        except NonFiniteError as e:
            raise self._diverged(self.state.step, str(e)) from None
        self.saved_step = self.state.step
        return path

    def load_checkpoint(self) -> None:
        """Restore the latest checkpoint; the metrics logged after it belong to the lost step and are dropped.

        The way back after an interrupted :meth:`train_step` (``fit()`` takes it by itself), or to drop steps taken
        by :meth:`train_step` outside ``fit()``.

        Raises:
            ConfigError: `run.steps` is below the steps the checkpoint has trained (before anything is restored or
                rewritten: such a run would train nothing and report "N of M" steps with N > M).
        """
        with self._writing():  # it rewrites the logs
            self._load_checkpoint()

    def _load_checkpoint(self) -> None:
        """:meth:`load_checkpoint`, under the run folder's lock."""
        state = load_checkpoint(self.run_dir)
        done = int(state.get("step", 0))
        if self.cfg.run.steps < done:
            raise ConfigError(f"run.steps={self.cfg.run.steps} is below the {done} steps this run has already "
                              f"trained: a resume may keep or raise run.steps, not lower it")
        self._check_fits(state)  # before anything is restored or rewritten
        self.log.rewind(done)
        self.load_state_dict(state)
        self.saved_step = self.state.step
        self.resumed = True  # fit() continues from here: no second warm start at step 0
        self._interrupted = False  # the state is the checkpoint's, whatever was half-done before


#: The progress bar's fields: metric -> its short name on the bar (explained once by BAR_LEGEND).
BAR_FIELDS = {Rollout.SUCCESS: "train_succ", Filter.KEPT_FRACTION: "kept", Collapse.TOKEN_ENTROPY: "tok_H",
              Collapse.MI_EST: "MI"}
BAR_LEGEND = ("progress bar: train_succ = success of this step's sampled training rollouts (validation is reported "
              "on its own lines), kept = share of groups the filter kept, tok_H = token entropy (nats), "
              "MI = in-batch MI estimate (nats/token)")
#: The rollouts file of a run folder (the format of `ragen diagnose`).
ROLLOUTS = "rollouts.jsonl"


class RolloutsFile:
    """``rollouts.jsonl``: the first-turn rollouts of the last `steps` training steps, one JSON line per
    trajectory in the format of ``ragen diagnose``: ``group`` (``"s<step>-g<i>"``: a prompt group of one step),
    ``reward`` (the episode's return), ``prompt`` and ``response`` (the first turn's text, the prompt with its chat
    template), ``model`` (:func:`ragen_core.policy.identity.weights_sha256` of the weights that sampled it),
    ``step`` and ``final`` (true for the batch sampled by the final weights at the end of the run).

    While the file holds fewer than `steps` batches, a step's batch is written after them; once it holds `steps`,
    the file is rewritten whole (a temporary file renamed over it) from the batches it keeps, read back from the
    file, and the new one. So a run whose `steps` covers all its steps writes each batch once, not the whole file
    at every step, and no batch stays in memory, only its step and its place in the file (:attr:`batches`). A
    write cut short by a crash leaves a cut last line, which a resume drops, as it does the metrics'.

    The file describes this run only: a resume (`resume`) keeps the batches it holds, a new run removes a file left
    in its folder (another run's rollouts), and ``steps = 0`` (keep none) removes it, resumed or not: its batches,
    and its final one above all, were sampled by weights this run has since moved on from, and ``ragen diagnose``
    would read them as this run's. A resume that removes one says so (a warning)."""

    def __init__(self, path: Path, steps: int, resume: bool = False):
        self.path = Path(path)
        self.steps = int(steps)
        #: The batches the file keeps, oldest first, as ``(step, offset, size)``: where each one's lines are in the
        #: file, in bytes (size 0: a batch without a first turn, which the next step drops from the window).
        self.batches: list[tuple[int, int, int]] = []
        #: The bytes the file holds after the batches (the final batch); None while the file is not the batches'
        #: text (a resumed run's, until its first write: :attr:`_held` holds them).
        self._tail: int | None = 0
        #: A resumed run's batches (their lines, by offset) until its first write.
        self._held: dict[int, bytes] = {}
        if not (resume and self.steps) and self.path.is_file():
            if resume:
                warnings.warn(f"removed {self.path}: run.rollouts_steps=0 keeps no rollouts, and the file held "
                              f"those of the run's steps before this resume (set run.rollouts_steps > 0 to keep "
                              f"them)", stacklevel=3)
            self.path.unlink()
        if self.steps and self.path.is_file():  # a resumed run keeps what it had
            # Read as the metrics are on a resume: a damaged last line is left out, any other is CheckpointError
            # naming it (it was a JSONDecodeError traceback).
            rows = jsonl_records(self.path)
            by_step: dict[Any, list[dict[str, Any]]] = {}
            for r in rows:
                if not r.get("final"):
                    by_step.setdefault(r.get("step"), []).append(r)
            offset = 0
            for step, step_rows in list(by_step.items())[-self.steps:]:
                data = _jsonl_bytes(step_rows)
                self._held[offset] = data
                self.batches.append((step, offset, len(data)))
                offset += len(data)
            self._tail = None

    def add(self, step: int, batch: RolloutBatch, policy: Any, final: bool = False) -> None:
        if not self.steps:
            return
        from ragen_core.policy.identity import weights_sha256

        sha = weights_sha256(policy.model)
        tok = policy.tokenizer
        rows = []
        for traj in batch.trajectories:
            if not traj.turns:
                continue
            turn = traj.turns[0]
            rows.append({"group": f"{'final' if final else f's{step}'}-g{traj.group}", "reward": traj.episode_return,
                         "prompt": tok.decode(list(turn.prompt_ids), skip_special_tokens=False),
                         "response": turn.response_text, "model": sha, "step": step,
                         **({"final": True} if final else {})})
        data = _jsonl_bytes(rows)
        if final:  # after every batch of the window
            kept = self.batches
        else:  # the last steps - 1 batches before this step (none of a later one: a resumed run's lost steps)
            kept = [b for b in self.batches if b[2] and b[0] < step][-(self.steps - 1):] if self.steps > 1 else []
        end = sum(size for _, _, size in kept)
        if self._tail == 0 and kept == self.batches and (end == 0 or self._size() >= end):
            # The file is the kept batches: this one goes after them (over whatever a write cut short left there).
            with open(self.path, "r+b" if end else "wb") as f:
                f.seek(end)
                f.write(data)
                f.truncate()
        else:
            parts = self._read(kept)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_bytes(b"".join(parts) + data)
            tmp.replace(self.path)
            rewritten, end = [], 0
            for (s, _, _), part in zip(kept, parts):
                rewritten.append((s, end, len(part)))
                end += len(part)
            kept, self._held = rewritten, {}
        if final:
            self.batches, self._tail = kept, len(data)
        else:
            self.batches, self._tail = [*kept, (step, end, len(data))], 0

    def _size(self) -> int:
        try:
            return self.path.stat().st_size
        except FileNotFoundError:
            return -1

    def _read(self, batches: list[tuple[int, int, int]]) -> list[bytes]:
        """The lines of `batches`: a resumed run's from memory (before its first write), else from the file. A file
        that no longer holds them (changed by something other than the run) gives none, with a warning."""
        if self._tail is None:
            return [self._held[offset] for _, offset, _ in batches]
        if not batches:
            return []
        parts = []
        try:
            with open(self.path, "rb") as f:
                for _, offset, size in batches:
                    f.seek(offset)
                    parts.append(f.read(size))
        except FileNotFoundError:
            parts = []
        if [len(p) for p in parts] != [size for _, _, size in batches]:
            warnings.warn(f"{self.path} no longer holds the rollouts of steps {batches[0][0]}-{batches[-1][0]} this "
                          f"run wrote there (it was changed or removed by something else): it starts again from "
                          f"this step's", stacklevel=4)
            return [b"" for _ in batches]
        return parts


def _jsonl_bytes(rows: list[dict[str, Any]]) -> bytes:
    """`rows` as JSON lines (ASCII: ``json.dumps`` escapes the rest)."""
    return "".join(json.dumps(r) + "\n" for r in rows).encode("utf-8")


def _progress(total: int, done: int, enabled: bool, desc: str = "train", unit: str = "step"):
    if not enabled:
        return None
    from ragen_core.progress import progress_bar

    return progress_bar(total, initial=done, desc=desc, unit=unit)
