"""Training configuration: dataclasses with the paper's defaults, TOML files and `key=value` overrides.

A run is described by one :class:`TrainConfig`, made of small sections::

    [run]       name, output folder, seed, number of steps, device, logging/checkpoint cadence
    [model]     policy path ("tiny" = the offline tiny model), dtype, critic learning rate
    [env]       env id and kwargs, train / validation seeds (RAGEN: 10000 / 123)
    [rollout]   P groups x G rollouts, and ragen_core.rollout.RolloutOptions: turns, context, sampling, rewards
    [algo]      an entry of ragen_core.training.algorithms (ppo | grpo | dr_grpo | dapo | rloo), learning
                rate, clipping, entropy / KL coefficients, GAE
    [filter]    SNR-aware filtering (docs/science.md section 4): on/off, the fields of one
                ragen_core.math.filtering.FilterSpec (strategy, keep rate, score, ...), empty-step policy
    [mi]        MI diagnostics cadence and EMA constants (docs/science.md section 2)
    [eval]      validation cadence and size
    [warm_start] supervised warm start on oracle trajectories

Defaults are the official ones of docs/science.md section 6 (8 groups x 16 rollouts, temperature 1, actor lr 1e-6,
entropy 0.001, KL off, clip 0.2 / 0.28, GAE gamma = lambda = 1, up to 5 turns, 2 actions per turn) and
top-p filtering with rho = 0.9.

Loading::

    cfg = load_config("configs/sokoban_tiny.toml", ["algo.name=grpo", "rollout.groups=4"])

Unknown sections or keys, in a file or an override, raise :class:`ConfigError` naming the key and listing
the accepted ones; values are type-checked (ints are accepted where floats are expected), and every numeric key is
checked against its declared range (:data:`BOUNDS`: finite, >= 0 or >= 1 as the key needs, and for the counts and
lengths the code sizes its work by, at most what it can run: :mod:`ragen_core.limits`) in one place.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import sys
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragen_core.limits import (
    FLOAT32_MAX,
    MAX_BATCH,
    MAX_FILLER_WORDS,
    MAX_TURNS,
    max_new_tokens_problem,
    path_positions,
)
from ragen_core.math.filtering import FilterSpec, FilterSpecError
from ragen_core.math.losses import KL_ESTIMATORS
from ragen_core.rollout import RolloutOptions
from ragen_core.training.algorithms import ALGORITHMS as _ALGORITHM_TABLE
from ragen_core.training.algorithms import AUTO, config_errors
from ragen_core.training.demonstrators import NOISE_ACTIONS, REASONING_STYLES, TEMPLATE_ANSWERS
from ragen_envs.validation import MAX_SEED, require_int

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = [
    "ALGORITHMS",
    "ConfigError",
    "RunConfig",
    "ModelConfig",
    "EnvConfig",
    "RolloutConfig",
    "AlgoConfig",
    "FilterConfig",
    "MIConfig",
    "EvalConfig",
    "WarmStartConfig",
    "TrainConfig",
    "load_config",
    "apply_overrides",
    "config_to_dict",
    "config_from_dict",
    "dump_toml",
    "RESUME_KEYS",
    "resume_changes",
    "Bound",
    "BOUNDS",
    "MAX_SEED",
    "SEED_KEYS",
    "seed_range_problem",
    "numeric_keys",
    "read_config_file",
]

#: The trainer's algorithms (the table of ragen_core.training.algorithms).
ALGORITHMS = tuple(_ALGORITHM_TABLE)
#: `algo.lr_schedule` values (see `AlgoConfig.lr_schedule` and `ragen_core.training.trainer.lr_fraction`).
LR_SCHEDULES = ("constant", "linear")
#: `algo.optimizer` values (see `AlgoConfig.optimizer`).
OPTIMIZERS = ("adamw", "sgd")
#: `filter.empty_step` values (see `FilterConfig.empty_step`).
EMPTY_STEPS = ("skip", "regularise")


class ConfigError(ValueError):
    """A configuration file or override is invalid (unknown key, wrong type, value out of range)."""


@dataclass
class RunConfig:
    """Where and how long a run goes."""

    name: str = "run"
    #: Parent folder of run folders; the run folder is `out_dir/name` (a suffix is added if it exists).
    out_dir: str = "runs"
    seed: int = 0
    steps: int = 200
    #: "auto" (cuda if available), "cpu" or "cuda".
    device: str = "auto"
    #: torch CPU threads for this process (torch.set_num_threads); 0 = auto: one thread for a model of fewer than
    #: AUTO_ONE_THREAD_PARAMETERS parameters on the CPU (the tiny model: its matrix products are too small to
    #: split, and on a machine whose cores other jobs share, more threads than free cores make every step many
    #: times slower), else torch's default (its count when the trainer module was imported: OMP_NUM_THREADS, else
    #: one per core), set again by each Trainer. The count changes the last bits of sums, not only the speed.
    threads: int = 0
    #: Checkpoint every this many steps (1 = killing the process loses at most the current step).
    save_every: int = 1
    #: ``rollouts.jsonl`` in the run folder keeps the first-turn rollouts of this many last steps (and, at the end,
    #: a batch sampled by the final weights), in the format of ``ragen diagnose``; 0 = no file.
    rollouts_steps: int = 2
    #: Also keep a numbered copy of the checkpoint every this many steps (0 = only the latest).
    keep_every: int = 0
    #: Stop training (then validate once more) when this many minutes have passed; 0 = no limit.
    max_minutes: float = 0.0
    #: Show a progress bar.
    progress: bool = True
    #: Also write TensorBoard events (needs the `tensorboard` extra).
    tensorboard: bool = False


@dataclass
class ModelConfig:
    """The policy (and critic) backend."""

    #: Local path of a transformers causal LM, or "tiny" for the offline tiny model (built on first use), or
    #: "tiny-base" for the tiny model pre-trained to copy and look up (ragen_core.policy.tiny_base; built once per
    #: machine, about 28 CPU-minutes).
    path: str = "tiny"
    #: "float32" or "bfloat16" (bf16 only makes sense on a GPU).
    dtype: str = "float32"
    #: Critic learning rate (PPO only; verl's default critic lr is 1e-5).
    critic_lr: float = 1e-5
    #: Gradient checkpointing for real models on small GPUs.
    gradient_checkpointing: bool = False
    #: Run the model through the lean forward (ragen_core.policy.fast_qwen2) where the architecture allows it:
    #: logits and the last layer only where they are read, shared prompts computed once. The same function as
    #: transformers' forward (to float rounding); false runs transformers' forward everywhere. Speed only.
    fast_forward: bool = True
    #: Train through fused kernels (ragen_core.policy.fused_train): each lean-forward layer as two autograd nodes
    #: whose element-wise work (RMSNorms, RoPE, SwiGLU and their backwards) is compiled, and AdamW's fused step.
    #: The layers are taken wherever the lean forward runs them (SFT, the update, scoring passes, generation's
    #: prefill; not the decoding step or cross-scoring). Float32 on the CPU, the lean forward on. The same
    #: function to float rounding, but other rounding: a run draws other numbers from the same seed, so it is off
    #: by default (docs/performance.md). Speed only.
    fused_training: bool = False


@dataclass
class EnvConfig:
    """The environment family and its seeds (docs/protocol.md: train seed 10000, validation seed 123)."""

    id: str = "ragen/Sokoban-v0"
    kwargs: dict[str, Any] = field(default_factory=dict)
    train_seed: int = 10000
    val_seed: int = 123
    #: Name of a reset option that gets a distinct integer per rollout (e.g. "payoff_seed" for the bandit, so
    #: that rollouts sharing a seed still draw independent payoffs); "" = none.
    per_rollout_option: str = ""


@dataclass
class RolloutConfig(RolloutOptions):
    """P groups x G rollouts per step, multi-turn (RAGEN prompt layout).

    The other keys (turns, context, sampling, reward placement, length limit, system prompt) are the fields of
    :class:`ragen_core.rollout.RolloutOptions`, defined and checked there once, and read by
    ``RolloutSettings.from_config``.
    """

    groups: int = 8
    group_size: int = 16


@dataclass
class AlgoConfig:
    """The RL algorithm and its optimisation hyper-parameters."""

    #: An entry of the algorithm table (ragen_core.training.algorithms): "ppo" (value head + GAE, paper default),
    #: "grpo", "dr_grpo", "dapo" (token-level loss, dynamic sampling allowed), "rloo".
    name: str = "ppo"
    lr: float = 1e-6
    weight_decay: float = 0.0
    #: PPO epochs over each batch.
    epochs: int = 1
    #: Rows per optimiser step (a multiple of micro_batch_size is not required).
    mini_batch_size: int = 32
    #: Rows per forward/backward pass (gradient accumulation within a mini-batch): memory only, in every loss mode
    #: (the micro-batches are weighted so that their gradients add up to the mini-batch's, to float rounding).
    micro_batch_size: int = 8
    #: Stop a step's remaining mini-batch updates once the mean approx-KL (old || new) of a mini-batch exceeds
    #: 1.5 x target_kl (Spinning Up's early stop); 0 = off (the paper's setting).
    target_kl: float = 0.0
    clip_low: float = 0.2
    clip_high: float = 0.28
    #: Dual-clip constant c (> 1), 0 disables.
    dual_clip: float = 3.0
    #: verl's names: token-mean, seq-mean-token-mean, seq-mean-token-sum, seq-mean-token-sum-norm; "auto" = the
    #: algorithm's (token-mean, except dr_grpo: seq-mean-token-sum-norm). dr_grpo and dapo fix theirs.
    loss_agg_mode: str = AUTO
    entropy_coef: float = 0.001
    #: KL to a frozen reference (off by default, as the paper).
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    gamma: float = 1.0
    lam: float = 1.0
    value_clip: float = 0.5
    grad_clip: float = 1.0
    #: AdamW's epsilon: gradients much smaller than it get proportionally small updates instead of the full
    #: lr-sized step Adam gives every parameter (see docs/training.md: why small-scale RL needs it larger).
    adam_eps: float = 1e-8
    #: The policy's optimiser: "adamw" (default) or "sgd" (plain gradient descent, no momentum): its update is
    #: lr times the gradient, so a regulariser's coefficient scales its share of the update (Adam divides a lone
    #: gradient by its own running scale, so 0.001 and 0.01 of an entropy bonus step alike; docs/collapse.md).
    optimizer: str = "adamw"
    #: Log the update's gradient split into its parts, loss/grad_norm_task, loss/grad_norm_entropy,
    #: loss/grad_norm_kl (each part's own backward pass: about 2-3x the backward cost; the sum is the gradient
    #: the optimiser gets, to float rounding) and loss/update_norm (||theta_after - theta_before||).
    grad_parts: bool = False
    #: "constant" (the paper's) or "linear": the learning rate (and the critic's) falls linearly from `lr` at
    #: step 1 to `lr / run.steps` at the last step (CleanRL's `anneal_lr`); it damps the late oscillation of
    #: small-batch runs.
    lr_schedule: str = "constant"
    #: Recompute old log-probs with a teacher-forced pass (exact PPO ratio; the sampling log-probs differ
    #: from the model's under top-p or temperature != 1).
    recompute_old_logprobs: bool = True
    #: With recompute_old_logprobs, take the old log-probs from the update's own forward when the update is one
    #: epoch of one mini-batch (its forwards then run on the parameters that sampled the batch, so a separate
    #: scoring pass would compute the same values: the first PPO ratio is exactly 1, as TRL at num_iterations=1).
    #: false: always run the scoring pass.
    old_logprobs_from_update: bool = True
    #: DAPO dynamic sampling: roll out extra groups to refill the ones the filter dropped (algorithms whose
    #: table entry allows it: dapo).
    dynamic_sampling: bool = False
    #: At most this many extra rollout rounds per step for dynamic sampling.
    max_refill_rounds: int = 3


@dataclass
class FilterConfig:
    """SNR-aware filtering (docs/science.md section 4), applied between rollout and update.

    What it keeps is one :class:`ragen_core.math.filtering.FilterSpec` (``spec``), whose fields are keys of the
    ``[filter]`` section itself: ``strategy``, ``value``, ``score``, ``include_zero``, ``order``, ``ddof``, ``eps``
    (defaults: top-p at 0.9 on the sample variance, the paper's). Change it with
    ``dataclasses.replace(cfg.filter.spec, ...)``, or with ``filter.KEY=value`` overrides.
    """

    enabled: bool = True
    spec: FilterSpec = field(default_factory=FilterSpec)
    #: Stop after this many consecutive empty steps (official code: 5); 0 = never stop.
    max_empty_steps: int = 5
    #: What a step does when the filter keeps nothing because no group has reward variance (sum V = 0):
    #: "skip" (no update: the official code's rule, the default) or "regularise" (update on every group with the
    #: task term zero, advantages set to 0, so that the entropy bonus and the KL act alone: the paper's
    #: low-variance regime, docs/collapse.md). Such a step is counted in filter/regulariser_only_total, and does
    #: not count as empty for max_empty_steps.
    empty_step: str = "skip"

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _SPEC_KEYS:  # a plain attribute would be silently ignored: the spec is what the trainer reads
            raise AttributeError(f"filter.{name} is a field of the frozen filter.spec; set "
                                 f"filter.spec = dataclasses.replace(filter.spec, {name}=...)")
        super().__setattr__(name, value)


_SPEC_KEYS = frozenset(f.name for f in dataclasses.fields(FilterSpec))


@dataclass
class MIConfig:
    """MI diagnostics (docs/science.md section 2): in-batch cross-scoring every `every` steps."""

    every: int = 5
    #: In-batch MI only up to step N (at the `every` cadence); 0 = no limit. For runs whose analysis reads the
    #: in-batch values of an early window only (measurement only: cross-scoring draws no random numbers, and the
    #: EMA of the window's measurements is the one an unlimited run logs there).
    until: int = 0
    #: Token budget per cross-scoring forward pass.
    batch_tokens: int = 8192
    ema_alpha: float = 0.9
    ema_eps: float = 1e-3
    #: Z = "reasoning" (response through </think>) or "response" (the whole first-turn response).
    span: str = "reasoning"
    #: A fixed held-out probe (ragen_core.training.probe): N distinct first-turn prompts cross-scored every
    #: `probe_every`
    #: steps and at step 0, logged as probe/*; 0 = no probe (its cost is logged as perf/probe_s).
    probe_prompts: int = 0
    #: Samples per probe prompt (G of the probe).
    probe_group_size: int = 4
    #: Probe every N steps (0 = use `every`).
    probe_every: int = 0
    #: Probe only up to step N (at the `probe_every` cadence) and once more at the run's last step; 0 = no limit.
    #: For runs whose analysis reads the probe's early window and its end only (measurement only: the probe has
    #: its own sampler, so training is the same).
    probe_until: int = 0
    #: First seed of the probe's levels (disjoint from the train, validation and warm-start seeds).
    probe_seed: int = 5000


@dataclass
class EvalConfig:
    """Validation on held-out seeds (stream seeded by env.val_seed)."""

    every: int = 10
    #: Validate only up to step N (at the `every` cadence) and at the run's last step (which every run
    #: validates); 0 = no limit. For runs whose analysis reads the success after the warm start and at the end
    #: only (measurement only: validation has its own sampler).
    until: int = 0
    #: Number of validation episodes (distinct seeds, one rollout each).
    episodes: int = 32
    greedy: bool = True
    #: Also validate before the first step (the "before" number of a run).
    at_start: bool = True


@dataclass
class WarmStartConfig:
    """Supervised warm start on scripted trajectories written in the response format."""

    #: Number of scripted episodes (0 = no warm start).
    sft_episodes: int = 0
    #: "oracle" (solver / optimal actions) or "random" (uniformly random valid actions: teaches the format
    #: without the task, e.g. for learning tests).
    policy: str = "oracle"
    #: A noisy demonstrator (oracle policy only): the probability that its answer is `noise_action` instead of
    #: the oracle's, the reasoning staying the oracle's (ragen_core.training.sft.oracle_response); 0 = the oracle.
    action_noise: float = 0.0
    #: What the noisy demonstrator answers: "random" (a random valid action) or "first" (the first action of
    #: the env's list / the first arm shown: a habit that ignores the state).
    noise_action: str = "random"
    epochs: int = 2
    lr: float = 1e-3
    batch_size: int = 16
    #: Seed stream of the warm-start episodes (distinct from train and validation seeds).
    seed: int = 777
    #: Sokoban oracle reasoning text: "full" (sentences naming the cells) or "plan" (short: the cells, the
    #: solver's first push and the next move); see ragen_core.training.sft.oracle_response.
    reasoning: str = "full"
    #: Input dependence of the demonstrator's reasoning, q: with probability q it reasons about the state it
    #: sees, otherwise it writes the reasoning of one fixed reference level (same form and length, no
    #: dependence on the input); the answer is the demonstrator's either way. 1 = always state-derived.
    #: q < 1 starts RL with reasoning that is input-dependent but off the MI ceiling (docs/collapse.md).
    reasoning_dependence: float = 1.0
    #: What the demonstrator answers after its template (q < 1): "demonstrator" (the same answer as after
    #: state-derived reasoning, noise included), "oracle" (the oracle's action, never the noise): then the
    #: template traces pay more on average than the state-derived ones, whose answers carry the action noise
    #: (the "template that pays" of the collapse testbed, docs/collapse.md), or "reference" (the move of the
    #: template's own reference level, the answer its reasoning implies: an answer that follows the reasoning, so
    #: that losing input dependence costs success).
    template_answer: str = "demonstrator"
    #: The number of reference levels the template is drawn from (uniformly, per episode): 1 = one fixed text;
    #: R > 1 gives the template log R nats of its own, input-independent diversity (docs/collapse.md).
    template_levels: int = 1
    #: Input-independent diversity: the demonstrator opens every reasoning with this many words drawn uniformly
    #: from ragen_core.training.sft.FILLER_WORDS (independently of the state), so that the reasoning's entropy has a
    #: part that does not depend on the input (docs/collapse.md). 0 = none.
    filler_words: int = 0
    #: Learning-rate schedule: "constant" or "linear" (5% warm-up, then linear decay to 0).
    schedule: str = "constant"
    #: A folder where warm-started weights are cached by everything the warm start reads
    #: (ragen_core.training.warm_cache):
    #: runs that differ only after the warm start (filter variants of one seed) train it once. "" = no cache.
    cache_dir: str = ""


@dataclass
class TrainConfig:
    """A full training run (see the module docstring)."""

    run: RunConfig = field(default_factory=RunConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    filter: FilterConfig = field(default_factory=FilterConfig)
    mi: MIConfig = field(default_factory=MIConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig)

    def validate(self) -> TrainConfig:
        """Range checks and the algorithm table's rules; raises ConfigError naming the key.

        Every numeric key is checked first, against its declared :data:`BOUNDS` (one place, one wording); what
        follows are the rules that tie keys together or read a non-numeric one.
        """
        _check_types(self)
        _check_numbers(self)
        _check_sizes(self)
        _check_run_name(self.run.name)
        _check(self.run.device in ("auto", "cpu", "cuda") or self.run.device.startswith("cuda:"),
               "run.device", "must be auto, cpu, cuda or cuda:N")
        _check(self.model.dtype in ("float32", "bfloat16"), "model.dtype", "must be float32 or bfloat16")
        try:
            self.rollout.check()
        except ValueError as e:  # its messages start with the option's name
            raise ConfigError(f"rollout.{e}") from None
        for key, what in config_errors(self.algo, self.rollout.group_size):
            raise ConfigError(f"{key} {what}")
        _one_of("algo.kl_estimator", self.algo.kl_estimator, KL_ESTIMATORS)
        _one_of("algo.lr_schedule", self.algo.lr_schedule, LR_SCHEDULES)
        _one_of("algo.optimizer", self.algo.optimizer, OPTIMIZERS)
        _check(isinstance(self.algo.grad_parts, bool), "algo.grad_parts", "must be true or false")
        if self.filter.enabled:
            # The filter ranks groups by their reward variance: one rollout per group has none (the trainer would
            # keep every group and log NaN variances), so filtering needs G >= 2 (and G > filter.ddof).
            _check(self.rollout.group_size >= 2, "rollout.group_size",
                   f"must be >= 2 with filter.enabled=true (the filter ranks groups by their reward variance, which "
                   f"one rollout per group does not define); got {self.rollout.group_size} (or set "
                   f"filter.enabled=false)")
            try:
                self.filter.spec.check_group_size(self.rollout.group_size)
            except FilterSpecError as e:
                raise ConfigError(f"filter.{e.field} {e.problem} (rollout.group_size)") from None
        _one_of("filter.empty_step", self.filter.empty_step, EMPTY_STEPS)
        _one_of("mi.span", self.mi.span, ("reasoning", "response"))
        _one_of("warm_start.policy", self.warm_start.policy, ("oracle", "random"))
        _one_of("warm_start.noise_action", self.warm_start.noise_action, NOISE_ACTIONS)
        _one_of("warm_start.reasoning", self.warm_start.reasoning, REASONING_STYLES)
        _one_of("warm_start.template_answer", self.warm_start.template_answer, TEMPLATE_ANSWERS)
        _one_of("warm_start.schedule", self.warm_start.schedule, ("linear", "constant"))
        return self


@dataclass(frozen=True)
class Bound:
    """The accepted values of one numeric config key (an entry of :data:`BOUNDS`).

    A value is accepted when it is a finite number (an integer for an int key) in the interval from `low` to
    `high` (None: unbounded; `open_low` / `open_high` exclude that end), or exactly `off`, a value outside the
    interval that switches the feature off (``algo.dual_clip = 0``). No key accepts NaN or an infinity: none of
    them means "no limit" (where a key has a no-limit value, it is 0 and says so in `note`), and a NaN or an
    infinity reaches the optimiser, a loop count or a time limit unnoticed (``algo.lr = inf`` trains every
    weight to inf and exits 0).
    """

    low: float | None = 0
    high: float | None = None
    open_low: bool = False
    open_high: bool = False
    off: float | None = None
    #: What a special value means (``0 = no limit``); shown in the error message.
    note: str = ""

    def accepts(self, value: Any, integer: bool) -> bool:
        """Whether `value` is accepted for a key of type int (`integer`) or float."""
        if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
            return False
        if self.off is not None and value == self.off:
            return True
        if isinstance(value, float) and not math.isfinite(value):  # an int is finite (and may not fit a float)
            return False
        if self.low is not None and (value < self.low or (self.open_low and value == self.low)):
            return False
        return self.high is None or (value < self.high or (not self.open_high and value == self.high))

    def describe(self, integer: bool) -> str:
        """The accepted values in words: ``an integer >= 1``, ``0 or a finite number > 1``, ``a finite number in
        [0, 1)``."""
        kind = "an integer" if integer else "a finite number"
        low, high = _number(self.low), _number(self.high)
        if self.low is not None and self.high is not None:
            text = f"{kind} in {'(' if self.open_low else '['}{low}, {high}{')' if self.open_high else ']'}"
        elif self.low is not None:
            text = f"{kind} {'>' if self.open_low else '>='} {low}"
        elif self.high is not None:
            text = f"{kind} {'<' if self.open_high else '<='} {high}"
        else:
            text = kind
        return f"{_number(self.off)} or {text}" if self.off is not None else text


def _number(value: float | None) -> str:
    """A bound as written in a message: an int in full (``4294967295``), a float in ``:g`` form (``0.5``)."""
    if value is None:
        return ""
    return str(value) if isinstance(value, int) else f"{value:g}"


#: The config keys that are seeds, each in [0, MAX_SEED] (:data:`ragen_envs.validation.MAX_SEED`, 2**32 - 1, where
#: the reason is written).
SEED_KEYS = ("run.seed", "env.train_seed", "env.val_seed", "warm_start.seed", "mi.probe_seed")
_SEED_NOTE = "a seed: at most 2**32 - 1"
#: Why a batch count is at most MAX_BATCH (ragen_core.limits).
_BATCH_NOTE = "episodes of one batch: torch's CUDA attention kernels run at most 65535 rows"


def seed_range_problem(flag: str, first: Any, count: int = 1, count_flag: str = "") -> str | None:
    """Why the seeds ``first .. first + count - 1`` that command-line flags ask for cannot be used (one line), or
    None: `first` (given by `flag`) is not an integer >= 0, or the last seed is above :data:`MAX_SEED` (`count_flag`
    names the flag that gave `count`, when there is one)."""
    if isinstance(first, bool) or not isinstance(first, int) or first < 0:
        return f"{flag} must be an integer >= 0; got {_shown(first)}"
    last = first + count - 1
    if last <= MAX_SEED:
        return None
    if count <= 1 or not count_flag or first > MAX_SEED:
        return f"{flag} must be an integer <= {MAX_SEED} (2**32 - 1, the largest seed); got {_shown(first)}"
    return (f"{flag} {first} with {count_flag} {count} reaches seed {last}, above the largest seed {MAX_SEED} "
            f"(2**32 - 1): lower {flag} or {count_flag}")

#: The declared range of every numeric key of the config (``section.key``; :func:`numeric_keys` lists them), checked
#: in one place (:func:`_check_numbers`, the first thing :meth:`TrainConfig.validate` does). A numeric field without an
#: entry here makes every validation fail (KeyError), so a new field cannot go unchecked. Seeds are in [0, MAX_SEED]
#: (numpy, torch and gymnasium refuse negative ones; :data:`MAX_SEED` says why the top); learning rates, coefficients
#: and cadences are >= 0; counts and sizes >= 1.
#:
#: Upper bounds: a count that the code sizes work by before the first result (envs, seeds and rows built up front,
#: tables preallocated) is at most what the code can run, each limit defined with its reason in
#: :mod:`ragen_core.limits`: episodes of one batch (rollout.groups x rollout.group_size, eval.episodes, mi.probe_prompts
#: x mi.probe_group_size, warm_start.sft_episodes) at most MAX_BATCH (65,535: torch's CUDA attention kernels run at
#: most that many rows), rollout.max_turns at most MAX_TURNS (10,000: the envs' own turn cap), warm_start.filler_words
#: at most MAX_FILLER_WORDS (5,461: beyond, the words fill the 16,384 characters of a response that the envs read);
#: rollout.max_new_tokens at most the positions of the model (``model.path``) when they are known without loading it
#: (:func:`_check_sizes`); learning rates at most float32's largest number (beyond, the optimiser step raised an
#: overflow traceback). Beyond these, a value was an out-of-memory traceback or hours of set-up before anything
#: ran. Counts that only loop over work the run does (run.steps, algo.epochs, warm_start.epochs, algo.max_refill_rounds)
#: and budgets bounded by the data they split (mi.batch_tokens, algo.mini_batch_size, algo.micro_batch_size,
#: warm_start.batch_size) have no upper bound: a larger value allocates nothing more.
_LR_NOTE = "float32's largest number; any rate near it diverges at once"

BOUNDS: dict[str, Bound] = {
    "run.seed": Bound(0, MAX_SEED, note=_SEED_NOTE),
    "run.steps": Bound(0),
    "run.threads": Bound(0, note="0 = auto"),
    "run.save_every": Bound(0, note="0 = only at the end"),
    "run.rollouts_steps": Bound(0, note="0 = no rollouts.jsonl"),
    "run.keep_every": Bound(0, note="0 = only the latest checkpoint"),
    "run.max_minutes": Bound(0, note="0 = no limit"),
    "model.critic_lr": Bound(0, high=FLOAT32_MAX, note=_LR_NOTE),
    "env.train_seed": Bound(0, MAX_SEED, note=_SEED_NOTE),
    "env.val_seed": Bound(0, MAX_SEED, note=_SEED_NOTE),
    "rollout.max_turns": Bound(1, MAX_TURNS, note="the envs' own turn cap"),
    "rollout.max_new_tokens": Bound(1),
    "rollout.temperature": Bound(0, open_low=True),
    "rollout.top_p": Bound(0, 1, open_low=True),
    "rollout.length_limit": Bound(0, note="0 = rollout.max_new_tokens"),
    "rollout.groups": Bound(1, MAX_BATCH, note=_BATCH_NOTE),
    "rollout.group_size": Bound(1, MAX_BATCH, note=_BATCH_NOTE),
    "algo.lr": Bound(0, open_low=True, high=FLOAT32_MAX, note=_LR_NOTE),
    "algo.weight_decay": Bound(0),
    "algo.epochs": Bound(1),
    "algo.mini_batch_size": Bound(1),
    "algo.micro_batch_size": Bound(1),
    "algo.target_kl": Bound(0, note="0 = off"),
    "algo.clip_low": Bound(0, 1, open_high=True),
    "algo.clip_high": Bound(0),
    "algo.dual_clip": Bound(1, open_low=True, off=0, note="0 = off"),
    "algo.entropy_coef": Bound(0),
    "algo.kl_coef": Bound(0, note="0 = no KL"),
    "algo.gamma": Bound(0, 1),
    "algo.lam": Bound(0, 1),
    "algo.value_clip": Bound(0, note="0 = no value clipping"),
    "algo.grad_clip": Bound(0, note="0 = no clipping"),
    "algo.adam_eps": Bound(0, open_low=True),
    "algo.max_refill_rounds": Bound(0),
    "filter.value": Bound(0, open_low=True, note="a keep rate in (0, 1], or a count for strategy top_k_abs"),
    "filter.ddof": Bound(0),
    "filter.eps": Bound(0),
    "filter.max_empty_steps": Bound(0, note="0 = never stop"),
    "mi.every": Bound(0, note="0 = never"),
    "mi.until": Bound(0, note="0 = no limit"),
    "mi.batch_tokens": Bound(1),
    "mi.ema_alpha": Bound(0, 1, open_high=True),
    "mi.ema_eps": Bound(0),
    "mi.probe_prompts": Bound(2, MAX_BATCH, off=0, note="0 = no probe; a probe needs at least 2 prompts; "
                                                      + _BATCH_NOTE),
    "mi.probe_group_size": Bound(1, MAX_BATCH, note=_BATCH_NOTE),
    "mi.probe_every": Bound(0, note="0 = mi.every"),
    "mi.probe_until": Bound(0, note="0 = no limit"),
    "mi.probe_seed": Bound(0, MAX_SEED, note=_SEED_NOTE),
    "eval.every": Bound(0, note="0 = never"),
    "eval.until": Bound(0, note="0 = no limit"),
    "eval.episodes": Bound(1, MAX_BATCH, note=_BATCH_NOTE),
    "warm_start.sft_episodes": Bound(0, MAX_BATCH, note="0 = no warm start; its demonstrations are held in memory "
                                                        "as one token batch, about 40 bytes a token: 65535 episodes "
                                                        "of two 300-token turns are 1.6 GB"),
    "warm_start.action_noise": Bound(0, 1),
    "warm_start.epochs": Bound(1),
    "warm_start.lr": Bound(0, high=FLOAT32_MAX, note=_LR_NOTE),
    "warm_start.batch_size": Bound(1),
    "warm_start.seed": Bound(0, MAX_SEED, note=_SEED_NOTE),
    "warm_start.reasoning_dependence": Bound(0, 1),
    "warm_start.template_levels": Bound(1),
    "warm_start.filler_words": Bound(0, MAX_FILLER_WORDS, note="3 characters or more each: more would fill the "
                                                               "16384 characters of a response that the envs read"),
}


def numeric_keys() -> dict[str, type]:
    """Every numeric key of the config schema, ``section.key -> int | float`` (the keys :data:`BOUNDS` covers)."""
    out: dict[str, type] = {}
    for section, cls in _field_types(TrainConfig).items():
        for key, (_, typ) in _section_keys(cls).items():
            if typ in (int, float):
                out[f"{section}.{key}"] = typ
    return out


def _check_types(cfg: TrainConfig) -> None:
    """ConfigError naming the first key whose value is not of its declared type (the rule a file or an override
    meets when it is read, :func:`_coerce`), for a config built or changed in code: ``filter.enabled = "false"``
    is a non-empty string, which would switch the filter on."""
    values = config_to_dict(cfg)
    for section, cls in _field_types(TrainConfig).items():
        for key, (_, typ) in _section_keys(cls).items():
            _coerce(f"{section}.{key}", values[section][key], typ)


def _check_numbers(cfg: TrainConfig) -> None:
    """ConfigError naming the first numeric key outside its :data:`BOUNDS` entry, and the accepted range."""
    values = config_to_dict(cfg)
    for key, typ in numeric_keys().items():
        bound = BOUNDS[key]  # KeyError: a numeric field was added without declaring its range
        section, name = key.split(".")
        value = values[section][name]
        if not bound.accepts(value, integer=typ is int):
            note = f" ({bound.note})" if bound.note else ""
            raise ConfigError(f"{key} must be {bound.describe(integer=typ is int)}{note}; got {_shown(value)}")


def _check_sizes(cfg: TrainConfig) -> None:
    """ConfigError for the size limits that tie keys together (:mod:`ragen_core.limits`): the episodes of one
    batch, P x G of a step's rollout and N x G of the probe's, at most MAX_BATCH; ``rollout.max_new_tokens`` at most
    the positions of ``model.path`` (a tiny model, or a model folder's config.json; not checked when the folder is
    not there yet)."""
    batches = {("rollout.groups", "rollout.group_size"): (cfg.rollout.groups, cfg.rollout.group_size),
               ("mi.probe_prompts", "mi.probe_group_size"): (cfg.mi.probe_prompts, cfg.mi.probe_group_size)}
    for (a, b), (x, y) in batches.items():
        _check(x * y <= MAX_BATCH, a, f"x {b} must be at most {MAX_BATCH} ({_BATCH_NOTE}); got {x} x {y} = {x * y}")
    problem = max_new_tokens_problem("rollout.max_new_tokens", cfg.rollout.max_new_tokens,
                                     path_positions(cfg.model.path), f"model.path {cfg.model.path!r}")
    if problem is not None:
        raise ConfigError(problem)


def _shown(value: Any) -> str:
    """`value` as a message shows it: its repr, or for an integer of more than 30 digits its first digits and its
    length (``10**400`` would fill the screen)."""
    text = repr(value)
    if isinstance(value, int) and len(text) > 30:
        return f"{text[:12]}... (an integer of {len(text.lstrip('-'))} digits)"
    return text


def _check_run_name(name: str) -> None:
    """`run.name` is one folder name: the run folder is ``run.out_dir/run.name``, so an empty name would make it
    ``run.out_dir`` itself (taken: ``run.out_dir-1`` beside it), and a separator or ``..`` would put it elsewhere."""
    _check(isinstance(name, str) and name not in ("", ".", "..") and "/" not in name and "\\" not in name,
           "run.name", f"must be a plain folder name (not empty, no / or \\, not . or ..): the run folder is "
           f"run.out_dir/run.name; got {name!r}")


def _check(ok: bool, key: str, what: str) -> None:
    if not ok:
        raise ConfigError(f"{key} {what}")


def _one_of(key: str, value: Any, choices: tuple[str, ...]) -> None:
    _check(value in choices, key, f"must be one of {', '.join(choices)}; got {value!r}")


#: The keys `ragen train --resume RUN_DIR key=value` may change: they decide how long the run goes, how often it is
#: measured, saved and shown, and where or in what memory layout it computes, never what it trains on or how it
#: updates (the run's identity). Anything else is a ConfigError: start a new run instead.
RESUME_KEYS: dict[str, str] = {
    "run.steps": "train for more (or fewer) steps; not under algo.lr_schedule=linear, whose rate depends on it",
    "run.max_minutes": "the time limit",
    "run.progress": "the progress bars",
    "run.save_every": "checkpoint cadence",
    "run.rollouts_steps": "how many last steps rollouts.jsonl keeps",
    "run.keep_every": "numbered checkpoint copies",
    "run.tensorboard": "the TensorBoard mirror of the metrics",
    "run.device": "where it computes (cpu, cuda; each rounds floats its own way)",
    "run.threads": "torch CPU threads (speed; sums split differently: last-bit rounding)",
    "eval.every": "validation cadence",
    "eval.until": "validation's last cadence step",
    "mi.every": "MI diagnostics cadence (measurement only)",
    "mi.until": "in-batch MI's last cadence step (measurement only)",
    "mi.batch_tokens": "token budget of a cross-scoring pass (speed/memory; the measurement's rounding)",
    "mi.probe_every": "probe cadence (measurement only)",
    "mi.probe_until": "the probe's last cadence step (measurement only)",
    "filter.max_empty_steps": "the empty-step stopping rule",
    "algo.micro_batch_size": "rows per forward/backward pass (gradient accumulation: memory; last-bit rounding)",
    "model.gradient_checkpointing": "activation memory only",
    "model.fast_forward": "the lean forward of the tiny model's architecture (speed; float rounding)",
    "model.fused_training": "fused training kernels (speed; float rounding)",
}


def resume_changes(saved: TrainConfig, new: TrainConfig) -> dict[str, tuple[Any, Any]]:
    """The keys that differ between a run's saved config and the one a resume asks for: ``{key: (old, new)}``.

    Raises:
        ConfigError: naming the first key outside :data:`RESUME_KEYS` that differs (a resume may not change what
            the run is), and ``run.steps`` under a linear learning-rate schedule.
    """
    old_d, new_d = config_to_dict(saved), config_to_dict(new)
    changes: dict[str, tuple[Any, Any]] = {}
    for section, values in new_d.items():
        for key, value in values.items():
            before = old_d[section][key]
            if value != before:
                changes[f"{section}.{key}"] = (before, value)
    for key, (before, value) in changes.items():
        if key not in RESUME_KEYS:
            raise ConfigError(
                f"{key} cannot change when resuming (saved {before!r}, asked {value!r}): it changes what the run "
                f"trains, so start a new run instead; a resume may change only {', '.join(RESUME_KEYS)}")
    if "run.steps" in changes and saved.algo.lr_schedule == "linear":
        raise ConfigError("run.steps cannot change when resuming a run with algo.lr_schedule=linear: its learning "
                          "rate at every step depends on run.steps; start a new run instead")
    return changes


# ---------------------------------------------------------------------------------------------- (de)serialise
@functools.cache
def _field_types(cls: type) -> dict[str, Any]:
    """``{field: annotation}`` of a dataclass (cached: the schema is fixed, and every config check reads it;
    callers must not change the dict)."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _section_keys(cls: type) -> dict[str, tuple[str | None, Any]]:
    """The keys of a section: ``key -> (owner, type)``. A field whose type is a dataclass (``filter.spec``) is
    inlined: its own fields are keys of the section, with that field as owner; the other fields have owner None."""
    keys: dict[str, tuple[str | None, Any]] = {}
    for name, typ in _field_types(cls).items():
        if dataclasses.is_dataclass(typ):
            keys.update((key, (name, sub)) for key, sub in _field_types(typ).items())
        else:
            keys[name] = (None, typ)
    return keys


def _coerce(key: str, value: Any, typ: Any) -> Any:
    """Check `value` against the annotation `typ` (int -> float allowed)."""
    origin = typing.get_origin(typ)
    if typ is bool:
        if isinstance(value, bool):
            return value
    elif typ is int:
        try:
            return require_int(key, value)
        except ValueError as e:
            raise ConfigError(str(e)) from None
    elif typ is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                return float(value)
            except OverflowError:  # an integer beyond any float: no key takes it (they are all finite)
                raise ConfigError(f"{key} must be a finite number; got {_shown(value)}") from None
    elif typ is str:
        if isinstance(value, str):
            return value
    elif origin is dict or typ is dict:
        if isinstance(value, dict):
            return dict(value)
    else:  # pragma: no cover - every field above is one of these
        return value
    name = getattr(typ, "__name__", str(typ))
    hint = ""
    if typ is str and isinstance(value, (bool, int, float)):  # a number or a bool where text is meant
        hint = f": quote it, {key.split('.')[-1]} = \"{_toml_value(value)}\" in a file"
    raise ConfigError(f"{key} must be of type {name}; got {value!r} ({type(value).__name__}){hint}")


def config_from_dict(data: dict[str, Any], base: TrainConfig | None = None) -> TrainConfig:
    """Build a TrainConfig from nested dicts (as TOML gives), starting from `base` or the defaults."""
    return config_from_nested(base if base is not None else TrainConfig(), data)


def config_from_nested(cfg: TrainConfig, data: dict[str, Any]) -> TrainConfig:
    """A copy of `cfg` with the sections/keys of `data` replaced (unknown keys raise ConfigError)."""
    sections = {f.name: f for f in dataclasses.fields(TrainConfig)}
    out = {}
    for name in sections:
        out[name] = copy.copy(getattr(cfg, name))
    for sec_name, sec_data in data.items():
        if sec_name not in sections:
            raise ConfigError(f"unknown config section {sec_name!r}; accepted sections: {', '.join(sections)}")
        if not isinstance(sec_data, dict):
            raise ConfigError(f"config section {sec_name!r} must be a table of key = value pairs")
        section = out[sec_name]
        keys = _section_keys(type(section))
        inlined: dict[str, dict[str, Any]] = {}
        for key, value in sec_data.items():
            if key not in keys:
                raise ConfigError(f"unknown config key {sec_name}.{key}; accepted keys in [{sec_name}]: "
                                  f"{', '.join(keys)}")
            owner, typ = keys[key]
            value = _coerce(f"{sec_name}.{key}", value, typ)
            if owner is None:
                setattr(section, key, value)
            else:
                inlined.setdefault(owner, {})[key] = value
        for owner, values in inlined.items():
            # All keys of the frozen part at once: it validates itself, and its messages start with the field name.
            try:
                setattr(section, owner, dataclasses.replace(getattr(section, owner), **values))
            except ValueError as e:
                raise ConfigError(f"{sec_name}.{e}") from None
    return TrainConfig(**out)


def _parse_value(text: str) -> Any:
    """A TOML value (number, bool, quoted string, inline table, array); bare words are strings."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def apply_overrides(cfg: TrainConfig, overrides: list[str] | tuple[str, ...]) -> TrainConfig:
    """Apply `section.key=value` overrides (values parsed as TOML; bare words are strings; a text key takes the
    text as written unless it is a quoted TOML string, so `run.name=123` is the name "123").

    `env.kwargs.NAME=value` sets one env keyword argument.
    """
    return config_from_nested(cfg, _nested_overrides(overrides, cfg.env.kwargs))


def _nested_overrides(overrides: list[str] | tuple[str, ...], env_kwargs: Any) -> dict[str, Any]:
    """`section.key=value` overrides as nested dicts; `env.kwargs.NAME` overrides update a copy of `env_kwargs`."""
    nested: dict[str, Any] = {}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like section.key=value")
        key, raw = item.split("=", 1)
        key = key.strip()
        parts = key.split(".")
        if len(parts) < 2 or not all(parts):
            raise ConfigError(f"override key {key!r} must be section.key (e.g. algo.lr=1e-6)")
        try:
            value = _parse_value(raw.strip())
        except ValueError as e:  # tomllib's own limit: an integer of more than 4300 digits
            raise ConfigError(f"{key}: {str(e).split(';')[0]}") from None
        if len(parts) > 2:
            if parts[:2] != ["env", "kwargs"] or len(parts) != 3:
                raise ConfigError(f"unknown config key {key!r}: only env.kwargs.NAME may have three parts")
            kwargs = nested.setdefault("env", {}).setdefault("kwargs", dict(env_kwargs))
            kwargs[parts[2]] = value
            continue
        if not isinstance(value, str) and _key_type(parts[0], parts[1]) is str:
            # A text key given a number or a bool (`run.name=123`): on a command line the text is what was meant.
            value = raw.strip()
        nested.setdefault(parts[0], {})[parts[1]] = value
    return nested


def _key_type(section: str, key: str) -> Any:
    """The annotation of config key `section.key` (None when there is no such key: the caller names it)."""
    cls = _field_types(TrainConfig).get(section)
    if cls is None or not dataclasses.is_dataclass(cls):
        return None
    return _section_keys(cls).get(key, (None, None))[1]


def read_config_file(path: str | Path) -> dict[str, Any]:
    """The tables of a TOML config file (``{}`` for an empty one); ConfigError, one line, when it is missing,
    unreadable, not UTF-8 (TOML's encoding) or not TOML."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {str(p)!r} does not exist")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{p}: not UTF-8 text (byte {e.object[e.start:e.start + 1]!r} at offset {e.start}); "
                          "a TOML config file must be UTF-8") from None
    except OSError as e:
        raise ConfigError(f"{p}: cannot be read: {e.strerror or e}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{p}: invalid TOML: {e}") from None
    except ValueError as e:  # an integer of more than 4300 digits (Python's limit; the rest says how to lift it)
        raise ConfigError(f"{p}: {str(e).split(';')[0]}") from None


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> TrainConfig:
    """Defaults <- TOML file (if given) <- overrides; validated.

    The overrides are merged into the file's tables before anything is built, so that settings checked together
    (`filter.strategy` and `filter.value`) are checked on their final values.
    """
    data = read_config_file(path) if path is not None else {}
    env = data.get("env")
    kwargs = env.get("kwargs") if isinstance(env, dict) else None
    nested = _nested_overrides(list(overrides), kwargs if isinstance(kwargs, dict) else TrainConfig().env.kwargs)
    for sec_name, values in nested.items():
        section = data.setdefault(sec_name, {})
        if isinstance(section, dict):
            section.update(values)
        # else: config_from_nested names the section that is not a table
    return config_from_nested(TrainConfig(), data).validate()


def config_to_dict(cfg: TrainConfig) -> dict[str, Any]:
    """Nested plain dict (JSON/TOML ready): ``{section: {key: value}}``, the keys of the config file (the fields of
    ``filter.spec`` are keys of ``[filter]``)."""
    _check_sections(cfg)
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cfg):
        section = dataclasses.asdict(getattr(cfg, f.name))
        keys = _section_keys(type(getattr(cfg, f.name)))
        out[f.name] = {key: section[key] if owner is None else section[owner][key] for key, (owner, _) in keys.items()}
    return out


def _check_sections(cfg: TrainConfig) -> None:
    """ConfigError naming the first section (or inlined part, ``filter.spec``) of a config built or changed in code
    that is not of its declared dataclass: ``cfg.filter.spec = {"strategy": "top_k"}`` or ``cfg.algo = None`` used to
    fail as a KeyError or TypeError inside :func:`config_to_dict`, which every check and the trainer call first."""
    for section, cls in _field_types(TrainConfig).items():
        value = getattr(cfg, section)
        if not isinstance(value, cls):
            raise ConfigError(f"{section} must be the [{section}] section, a ragen_core.training.config."
                              f"{cls.__name__}; got {_short_repr(value)}")
        for name, typ in _field_types(cls).items():
            part = getattr(value, name)
            if dataclasses.is_dataclass(typ) and not isinstance(part, typ):
                raise ConfigError(f"{section}.{name} must be a {typ.__name__} (set it with dataclasses.replace("
                                  f"cfg.{section}.{name}, ...) or {typ.__name__}(...)); got {_short_repr(part)}")


def _short_repr(value: Any) -> str:
    """``value``'s repr (cut to 80 characters) and its type, as a message shows what was given."""
    text = repr(value)
    return f"{text[:77] + '...' if len(text) > 80 else text} ({type(value).__name__})"


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")


def dump_toml(cfg: TrainConfig) -> str:
    """The resolved config as TOML text (loads back to an equal config)."""
    lines: list[str] = []
    for section, values in config_to_dict(cfg).items():
        lines.append(f"[{section}]")
        for key, value in values.items():
            lines.append(f"{key} = {_toml_value(value)}")
        lines.append("")
    return "\n".join(lines)
