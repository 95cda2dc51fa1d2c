"""The small-scale trainer: `ragen train CONFIG [key=value ...] [--resume RUN_DIR]`.

One training step, top to bottom (CleanRL style; every piece of math is a pure function of `ragen_core`):

    1. rollout        P groups x G multi-turn episodes (ragen_core.rollout.rollout)
    2. filter         SNR-aware filtering on the [P, G] returns (ragen_core.filtering.filter_groups,
                      docs/science.md section 4); dropped groups are physically removed (filtering.compact);
                      an empty batch skips the update (counted; stop after `filter.max_empty_steps` in a row)
    3. score          old log-probs (and reference log-probs, critic values) of the kept rows
    4. advantages     PPO: critic + GAE (advantages.gae); GRPO / DAPO: advantages.grpo; Dr.GRPO: advantages.dr_grpo
    5. update         PPO clipped loss (losses.ppo_policy_loss, clip-higher + dual clip) - entropy bonus
                      + KL to the reference (losses.kl_penalty, off by default); critic: losses.value_loss
    6. diagnostics    every `mi.every` steps: cross-score the whole batch (mi.cross_score) -> MI proxies,
                      MI-ZScore-EMA, H(Z|X) estimate, regime (docs/science.md section 2)
    7. validation     every `eval.every` steps on held-out seeds (validation seed 123)
    8. bookkeeping    metrics.jsonl, checkpoint (model, critic, optimisers, reference, RNG states, EMA, step)

Algorithms (`algo.name`):

- ``ppo`` (paper default): critic (a copy of the policy's backbone + a linear value head) and token-level GAE with
  gamma = lambda = 1; loss aggregation `algo.loss_agg_mode`.
- ``grpo``: group-normalised returns, no critic; `algo.loss_agg_mode`.
- ``dr_grpo``: group-centred returns without std normalisation and the constant length normaliser
  (``seq-mean-token-sum-norm`` with C = max_turns * max_new_tokens), whatever `algo.loss_agg_mode` says.
- ``dapo``: GRPO advantages, clip-higher (`algo.clip_high`), token-level loss (``token-mean``, fixed), optional
  dynamic sampling (`algo.dynamic_sampling`): extra rollout rounds refill the groups the filter dropped (with
  the filter disabled, dynamic sampling drops zero-variance groups, as DAPO does).

Metrics are namespaced: ``rollout/`` ``filter/`` ``collapse/`` ``loss/`` ``perf/`` ``val/``.
The run folder holds ``config.toml`` (resolved), ``metrics.jsonl``, ``checkpoints/``, PNG plots and ``summary.md``.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ragen_core import advantages as adv_lib
from ragen_core import losses
from ragen_core.config import ConfigError, TrainConfig, dump_toml, load_config
from ragen_core.filtering import compact, filter_groups, reward_variance, rv_statistics
from ragen_core.rollout import RolloutBatch, RolloutSettings, build_batch, make_envs, rollout


def _require_tensorboard() -> None:
    """Fail at start-up, not after the first step, when TensorBoard logging is asked for but missing."""
    try:
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401
    except ImportError as exc:
        raise ConfigError(
            "run.tensorboard = true needs the tensorboard package: pip install 'ragen2[tensorboard]'"
        ) from exc


__all__ = [
    "Trainer",
    "ValueModel",
    "load_policy",
    "traj_token_view",
    "compute_advantages",
    "select_groups_rows",
    "add_arguments",
    "run",
    "main",
]

#: Per-episode validation outcomes, one JSON line per validation: {"step", "seeds", "success": [0/1, ...]}.
VAL_OUTCOMES = "val_outcomes.jsonl"


# ---------------------------------------------------------------------------------------------- models
def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def load_policy(path: str, device: torch.device, dtype: str = "float32", vision: bool = False) -> Any:
    """An `HFPolicy` for a local model path, or for the offline tiny model when `path` is "tiny"."""
    from ragen_core.policy import load_policy as _load

    if path == "tiny" and vision:
        path = "tiny-vision"
    return _load(path, device=device, dtype=dtype)


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
def traj_token_view(row_traj: torch.Tensor, loss_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor,
                                                                                torch.Tensor, torch.Tensor]:
    """Index maps from row tokens to per-trajectory token sequences.

    The generated tokens of one trajectory may span several rows (one row per turn in windowed contexts).
    Returns ``(rows, cols, mask, traj_ids)``: ``rows``/``cols`` ``[N, L]`` long indices into the ``[R, T]`` row
    tensors listing each trajectory's generated tokens in order (rows in batch order, which is turn order),
    ``mask`` ``[N, L]`` bool, and ``traj_ids`` ``[N]`` (the distinct values of ``row_traj``, in first-seen order).
    """
    traj_ids: list[int] = []
    per: dict[int, list[tuple[int, int]]] = {}
    m = loss_mask != 0
    for r in range(row_traj.shape[0]):
        t = int(row_traj[r])
        if t not in per:
            per[t] = []
            traj_ids.append(t)
        per[t].extend((r, int(c)) for c in m[r].nonzero().flatten())
    n = len(traj_ids)
    length = max([len(per[t]) for t in traj_ids] + [1])
    rows = torch.zeros(n, length, dtype=torch.long)
    cols = torch.zeros(n, length, dtype=torch.long)
    mask = torch.zeros(n, length, dtype=torch.bool)
    for i, t in enumerate(traj_ids):
        pos = per[t]
        if pos:
            rows[i, : len(pos)] = torch.tensor([p[0] for p in pos])
            cols[i, : len(pos)] = torch.tensor([p[1] for p in pos])
            mask[i, : len(pos)] = True
    return rows, cols, mask, torch.tensor(traj_ids, dtype=torch.long)


def compute_advantages(
    algo: str,
    rows: dict[str, torch.Tensor],
    returns_pg: torch.Tensor,
    group_size: int,
    values: torch.Tensor | None = None,
    gamma: float = 1.0,
    lam: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Token advantages ``[R, T]`` (and PPO returns ``[R, T]``) for the row tensors of a (compacted) batch.

    - ``ppo``: GAE over each trajectory's generated tokens in order (rows of one trajectory are concatenated,
      observation tokens skipped), rewards from ``rows["token_rewards"]``, ``values`` ``[R, T]`` from the critic;
      the advantages are then whitened over all generated tokens of the batch (verl's ``masked_whiten``), the
      returns (value targets) are not.
    - ``grpo`` / ``dapo``: ``advantages.grpo(returns_pg)`` of the trajectory, on every generated token.
    - ``dr_grpo``: ``advantages.dr_grpo(returns_pg)``.

    ``returns_pg`` ``[P, G]`` are the episode returns of the *whole* batch (group statistics need all G
    rollouts of a group; filtering drops whole groups, so the kept groups' statistics are unchanged).
    """
    loss_mask = rows["loss_mask"]
    if algo == "ppo":
        if values is None:
            raise ValueError("ppo needs critic values")
        r_idx, c_idx, vmask, _ = traj_token_view(rows["row_traj"], loss_mask)
        rew = rows["token_rewards"][r_idx, c_idx] * vmask
        val = values[r_idx, c_idx] * vmask
        adv_v, ret_v = adv_lib.gae(rew, val, vmask, gamma=gamma, lam=lam)
        # Whiten over the batch's generated tokens, as verl does: with a critic that starts at 0 the raw GAE
        # advantages are close to the returns (all positive on Sokoban), which would push every sampled token up.
        adv_v = adv_lib.masked_whiten(adv_v, vmask)
        adv = torch.zeros_like(rows["token_rewards"])
        ret = torch.zeros_like(rows["token_rewards"])
        adv[r_idx[vmask], c_idx[vmask]] = adv_v[vmask].to(adv.dtype)
        ret[r_idx[vmask], c_idx[vmask]] = ret_v[vmask].to(ret.dtype)
        return adv, ret
    if algo in ("grpo", "dapo"):
        a = adv_lib.grpo(returns_pg) if group_size >= 2 else returns_pg - returns_pg.mean(dim=1, keepdim=True)
    elif algo == "dr_grpo":
        a = adv_lib.dr_grpo(returns_pg)
    else:
        raise ValueError(f"unknown algorithm {algo!r}")
    per_row = a.reshape(-1)[rows["row_traj"]]
    return per_row[:, None] * (loss_mask != 0).to(per_row.dtype), None


def select_groups_rows(rows: dict[str, torch.Tensor], kept_groups: torch.Tensor) -> dict[str, torch.Tensor]:
    """Physically remove the rows of dropped groups (filtering.compact, one row per 'group' of size 1).

    Kept rows stay in batch order (so the turns of a trajectory stay in order); padding columns that no kept row
    uses are cut.
    """
    keep = torch.isin(rows["row_group"], kept_groups)
    kept_rows = keep.nonzero().flatten()
    return compact(rows, kept_rows, group_size=1, mask_key="attention_mask")


def _metrics_jsonable(d: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        if isinstance(v, (np.floating, np.integer)):
            v = v.item()
        if isinstance(v, float) and not math.isfinite(v):
            v = None
        out[k] = v
    return out


# ---------------------------------------------------------------------------------------------- the trainer
@dataclass
class StepState:
    """Counters saved with every checkpoint."""

    step: int = 0
    next_seed_offset: int = 0
    empty_streak: int = 0
    empty_total: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)


class Trainer:
    """Holds the policy, critic, reference, optimisers and RNG streams of one run (see the module docstring).

    Args:
        cfg: a validated TrainConfig.
        run_dir: the run folder (created).
        policy: an already-built Policy (tests, the demo); None loads `cfg.model.path`.
        resume: restore the latest checkpoint of `run_dir`.
        on_step: called with each step's metrics dict (the demo's live table).
    """

    def __init__(self, cfg: TrainConfig, run_dir: str | Path, policy: Any = None, resume: bool = False,
                 on_step: Callable[[dict[str, Any]], None] | None = None):
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "checkpoints").mkdir(exist_ok=True)
        self.on_step = on_step
        self.device = resolve_device(cfg.run.device)
        self._check_seed_ranges()
        self.policy = policy if policy is not None else load_policy(
            cfg.model.path, self.device, cfg.model.dtype, vision="Vision" in cfg.env.id)
        self.model = self.policy.model
        if cfg.model.gradient_checkpointing and hasattr(self.model, "gradient_checkpointing_enable"):
            self.model.gradient_checkpointing_enable()
        self.state = StepState()
        P, G = cfg.rollout.groups, cfg.rollout.group_size
        self.envs = make_envs(cfg.env.id, P * G, cfg.env.kwargs)
        self.val_envs = make_envs(cfg.env.id, cfg.eval.episodes, cfg.env.kwargs)
        self.settings = RolloutSettings.from_config(cfg.rollout)
        self.val_settings = RolloutSettings.from_config(cfg.rollout, greedy=cfg.eval.greedy)
        # Explicit RNG streams (all checkpointed): sampling, mini-batch order, the random filter.
        self.sample_gen = torch.Generator(device="cpu").manual_seed(cfg.run.seed)
        self.update_gen = torch.Generator(device="cpu").manual_seed(cfg.run.seed + 1)
        self.filter_gen = torch.Generator(device="cpu").manual_seed(cfg.run.seed + 2)

        self.optimizer = torch.optim.AdamW([p for p in self.model.parameters() if p.requires_grad],
                                           lr=cfg.algo.lr, weight_decay=cfg.algo.weight_decay, eps=cfg.algo.adam_eps)
        self.critic: ValueModel | None = None
        self.critic_optimizer = None
        if cfg.algo.name == "ppo":
            self.critic = ValueModel(self.model).to(self.device)
            self.critic_optimizer = torch.optim.AdamW(self.critic.parameters(), lr=cfg.model.critic_lr,
                                                      weight_decay=cfg.algo.weight_decay)
        self.ref_policy = None
        from ragen_core.mi import MIZScoreEMA

        self.ema = MIZScoreEMA(alpha=cfg.mi.ema_alpha, eps=cfg.mi.ema_eps)
        self._tb = None
        if cfg.run.tensorboard:
            _require_tensorboard()
        if resume:
            self.load_checkpoint()
        elif cfg.algo.kl_coef > 0:
            self._make_reference()

    # ------------------------------------------------------------------ setup helpers
    def _check_seed_ranges(self) -> None:
        """Validation seeds must not be trained on (RL or warm start)."""
        cfg = self.cfg
        val = range(cfg.env.val_seed, cfg.env.val_seed + cfg.eval.episodes)
        ws = range(cfg.warm_start.seed, cfg.warm_start.seed + cfg.warm_start.sft_episodes)
        if ws and max(ws.start, val.start) < min(ws.stop, val.stop):
            raise ConfigError(f"warm_start.seed: warm-start seeds {ws.start}..{ws.stop - 1} overlap the validation "
                              f"seeds {val.start}..{val.stop - 1}")
        # Train seeds are train_seed, train_seed + 1, ... (one per group, never reused).
        if val.stop > cfg.env.train_seed:
            raise ConfigError(f"env.val_seed: validation seeds {val.start}..{val.stop - 1} overlap the train seed "
                              f"stream starting at env.train_seed={cfg.env.train_seed}")

    def _make_reference(self) -> None:
        ref = copy.copy(self.policy)
        ref.model = copy.deepcopy(self.model).eval().requires_grad_(False)
        self.ref_policy = ref

    # ------------------------------------------------------------------ rollouts
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
                           generator=self.sample_gen, reset_options=self._reset_options(seeds))

    def _reset_options(self, seeds: Sequence[int]) -> list[dict[str, Any]] | None:
        """Per-rollout reset options: `env.per_rollout_option` gets a distinct integer per rollout."""
        name = self.cfg.env.per_rollout_option
        if not name:
            return None
        g = self.cfg.rollout.group_size
        return [{name: int(seeds[i // g]) * g + i % g} for i in range(len(seeds) * g)]

    def filter(self, batch: RolloutBatch):
        """SNR-aware filtering of one batch (None when disabled or G < 2)."""
        fc = self.cfg.filter
        if not fc.enabled or batch.group_size < 2:
            return None
        return filter_groups(batch.rewards_pg, strategy=fc.strategy, value=fc.value, score=fc.score,
                             include_zero=fc.include_zero, order=fc.order, eps=fc.eps, generator=self.filter_gen)

    def _dynamic_sampling(self, batch: RolloutBatch, kept: torch.Tensor) -> tuple[RolloutBatch, torch.Tensor, int]:
        """DAPO dynamic sampling: extra rounds until P groups pass the filter (or the round limit)."""
        cfg = self.cfg
        P, G = cfg.rollout.groups, cfg.rollout.group_size
        groups = [batch.trajectories[i * G : (i + 1) * G] for i in kept.tolist()]
        rounds = 0
        while len(groups) < P and rounds < cfg.algo.max_refill_rounds:
            rounds += 1
            extra = self.collect()
            res = self.filter(extra)
            if res is None:  # filter disabled: DAPO's own rule, drop zero-variance groups
                v = reward_variance(extra.rewards_pg)
                ok = (v > 1e-10).nonzero().flatten()
            else:
                ok = res.kept
            groups += [extra.trajectories[i * G : (i + 1) * G] for i in ok.tolist()]
        groups = groups[:P]
        trajs = []
        for gi, group in enumerate(groups):
            for traj in group:
                traj.group = gi
                trajs.append(traj)
        if not trajs:
            return batch, kept, rounds
        new = build_batch(trajs, len(groups), G, self.settings, pad_id=_pad_id(self.policy),
                          full_context=self.cfg.rollout.context == "full", max_turns=self.settings.max_turns)
        return new, torch.arange(len(groups)), rounds

    # ------------------------------------------------------------------ scoring
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
            lp = policy.forward_logprobs(mb["input_ids"], mb["attention_mask"], images=imgs, **self._temp_kw()).logprobs
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

    # ------------------------------------------------------------------ update
    def loss_agg_mode(self) -> str:
        if self.cfg.algo.name == "dr_grpo":
            return "seq-mean-token-sum-norm"
        if self.cfg.algo.name == "dapo":
            return "token-mean"
        return self.cfg.algo.loss_agg_mode

    def update(self, rows: dict[str, torch.Tensor], images: list | None) -> dict[str, float]:
        """PPO-style epochs over mini-batches of the kept rows; returns `loss/` metrics."""
        cfg = self.cfg.algo
        mode = self.loss_agg_mode()
        norm_c = float(self.cfg.rollout.max_turns * self.cfg.rollout.max_new_tokens)
        n = rows["input_ids"].shape[0]
        stats: dict[str, list[float]] = {}

        def add(k: str, v: float) -> None:
            stats.setdefault(k, []).append(float(v))

        updates = 0
        stopped_early = False
        for _ in range(cfg.epochs):
            if stopped_early:
                break
            perm = torch.randperm(n, generator=self.update_gen)
            for start in range(0, n, cfg.mini_batch_size):
                mini = perm[start : start + cfg.mini_batch_size]
                mini_tokens = float((rows["loss_mask"][mini] != 0).sum())
                if mini_tokens == 0:
                    continue
                mini_kl = 0.0
                self.model.train()
                self.optimizer.zero_grad(set_to_none=True)
                if self.critic is not None:
                    self.critic.train()
                    self.critic_optimizer.zero_grad(set_to_none=True)
                for j in range(0, mini.numel(), cfg.micro_batch_size):
                    idx = mini[j : j + cfg.micro_batch_size]
                    mb, imgs = self._slice(rows, idx, images)
                    mask = mb["loss_mask"]
                    n_tok = float((mask != 0).sum())
                    if n_tok == 0:
                        continue
                    # Weight of this micro-batch in the mini-batch's aggregate (exact for token-mean,
                    # row-proportional for the sequence-level modes).
                    w = n_tok / mini_tokens if mode == "token-mean" else idx.numel() / mini.numel()
                    out = self.policy.forward_logprobs(mb["input_ids"], mb["attention_mask"], images=imgs,
                                                       with_entropy=True, **self._temp_kw())
                    logp = out.logprobs.float()
                    pg_loss, pg_stats = losses.ppo_policy_loss(
                        logp, mb["old_logprobs"], mb["advantages"], mask, clip_eps_low=cfg.clip_low,
                        clip_eps_high=cfg.clip_high, dual_clip_c=cfg.dual_clip or None, loss_agg_mode=mode,
                        norm_constant=norm_c)
                    entropy = adv_lib.aggregate_loss(out.entropy.float(), mask, "token-mean")
                    loss = pg_loss - cfg.entropy_coef * entropy
                    if self.ref_policy is not None:
                        kl_mat = losses.kl_penalty(logp, mb["ref_logprobs"], kind=cfg.kl_estimator)
                        kl = adv_lib.aggregate_loss(kl_mat, mask, mode, norm_constant=norm_c)
                        loss = loss + cfg.kl_coef * kl
                        add("loss/kl", kl.item())
                    (loss * w).backward()
                    add("loss/policy", pg_loss.item())
                    add("loss/entropy", entropy.item())
                    add("loss/total", loss.item())
                    add("loss/clip_fraction", pg_stats["clipfrac"])
                    add("loss/dual_clip_fraction", pg_stats["dual_clipfrac"])
                    add("loss/approx_kl", pg_stats["approx_kl"])
                    mini_kl += pg_stats["approx_kl"] * n_tok / mini_tokens
                    if self.critic is not None:
                        values = self.critic(mb["input_ids"], mb["attention_mask"])
                        v_loss, v_stats = losses.value_loss(values, mb["old_values"], mb["returns"], mask,
                                                            clip_range=cfg.value_clip or None, loss_agg_mode="token-mean")
                        (v_loss * (n_tok / mini_tokens)).backward()
                        add("loss/value", v_loss.item())
                        add("loss/value_clip_fraction", v_stats["vf_clipfrac"])
                if cfg.target_kl > 0 and mini_kl > 1.5 * cfg.target_kl:
                    # The policy has moved far enough from the one that sampled the batch: stop this step's
                    # updates before applying this mini-batch (the early stop of Spinning Up / SB3's target_kl).
                    stopped_early = True
                    break
                params = [p for p in self.model.parameters() if p.grad is not None]
                gn = torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip if cfg.grad_clip > 0 else float("inf"))
                add("loss/grad_norm", float(gn))
                self.optimizer.step()
                if self.critic is not None:
                    cg = torch.nn.utils.clip_grad_norm_(self.critic.parameters(),
                                                        cfg.grad_clip if cfg.grad_clip > 0 else float("inf"))
                    add("loss/critic_grad_norm", float(cg))
                    self.critic_optimizer.step()
                updates += 1
        self.model.eval()
        out = {k: float(np.mean(v)) for k, v in stats.items()}
        out["loss/updates"] = float(updates)
        out["loss/kl_early_stop"] = float(stopped_early)
        return out

    # ------------------------------------------------------------------ MI diagnostics
    @torch.no_grad()
    def mi_diagnostics(self, batch: RolloutBatch) -> dict[str, Any]:
        """Cross-score the first turn of every group (kept and dropped) -> `collapse/` metrics."""
        from ragen_core.metrics import regime_from_proxies
        from ragen_core.mi import cross_score, flatten_proxies, mi_proxies

        if batch.groups < 2:
            return {}
        if batch.images is not None:
            return {"collapse/mi_skipped_vision": 1.0}
        prompts, traces = batch.mi_inputs(span=self.cfg.mi.span)
        fallback = _pad_id(self.policy)
        eos = getattr(self.policy.tokenizer, "eos_token_id", None)
        empty = 0
        for row in traces:
            for k, z in enumerate(row):
                if not z:
                    # An empty trace has no tokens to score; stand in the end-of-turn token (counted).
                    row[k] = [int(eos if eos is not None else fallback)]
                    empty += 1
        self.model.eval()
        L, lengths = cross_score(self.model, prompts, traces, batch_tokens=self.cfg.mi.batch_tokens,
                                 return_lengths=True)
        keys = [tuple(p) for p in prompts]
        stats = mi_proxies(L, lengths, prompt_ids=keys)
        out = flatten_proxies(stats, prefix="collapse/")
        out["collapse/mi_zscore_ema"] = self.ema.update(stats)
        out["collapse/regime"] = regime_from_proxies(stats)
        out["collapse/empty_traces"] = float(empty)
        return out

    # ------------------------------------------------------------------ validation
    @torch.no_grad()
    def evaluate(self, record: bool = True) -> dict[str, float]:
        """Held-out validation: `eval.episodes` distinct seeds from `env.val_seed`, one rollout each.

        With `record`, the per-episode outcomes are appended to ``val_outcomes.jsonl`` in the run folder.
        """
        cfg = self.cfg
        seeds = [cfg.env.val_seed + i for i in range(cfg.eval.episodes)]
        gen = torch.Generator(device="cpu").manual_seed(cfg.run.seed + 10_000 + self.state.step)
        self.model.eval()
        opts = None
        if cfg.env.per_rollout_option:
            opts = [{cfg.env.per_rollout_option: s} for s in seeds]
        batch = rollout(self.policy, self.val_envs, seeds, 1, self.val_settings, generator=gen, reset_options=opts)
        s = batch.summary()
        if record:  # per-episode outcomes (the same seeds every time), for paired before/after comparisons
            with open(self.run_dir / VAL_OUTCOMES, "a", encoding="utf-8") as f:
                f.write(json.dumps({"step": self.state.step, "seeds": seeds,
                                    "success": [int(x) for x in batch.success.tolist()]}) + "\n")
        return {"val/success": s["rollout/success"], "val/return": s["rollout/return"],
                "val/format_valid": s["rollout/format_valid"], "val/response_length": s["rollout/response_length"]}

    # ------------------------------------------------------------------ one step
    def train_step(self) -> dict[str, Any]:
        """Rollout -> filter -> compact -> score -> advantages -> update (-> MI, validation)."""
        cfg = self.cfg
        step = self.state.step + 1
        metrics: dict[str, Any] = {"step": step}
        t0 = time.perf_counter()
        batch = self.collect()
        t_rollout = time.perf_counter() - t0
        metrics.update(batch.summary())

        rv = rv_statistics(reward_variance(batch.rewards_pg)) if batch.group_size >= 2 else {}
        res = self.filter(batch)
        P = batch.groups
        if res is not None:
            kept = res.kept
            metrics.update(res.as_metrics("filter/"))
        else:
            kept = torch.arange(P)
            metrics.update({"filter/kept_groups": float(P), "filter/kept_fraction": 1.0, "filter/empty": 0.0})
            for k in ("rv_mean", "rv_std", "rv_heterogeneity", "zero_fraction"):
                if k in rv:
                    metrics[f"filter/{k}"] = rv[k]
        refill_rounds = 0
        if cfg.algo.dynamic_sampling:
            train_batch, kept, refill_rounds = self._dynamic_sampling(batch, kept)
            metrics["filter/refill_rounds"] = float(refill_rounds)
        else:
            train_batch = batch
        t_rollout = time.perf_counter() - t0

        t1 = time.perf_counter()
        if cfg.mi.every and step % cfg.mi.every == 0:
            metrics.update(self.mi_diagnostics(batch))
        t_mi = time.perf_counter() - t1

        if kept.numel() == 0:
            self.state.empty_streak += 1
            self.state.empty_total += 1
            metrics.update({"filter/skipped": 1.0, "filter/empty_streak": float(self.state.empty_streak),
                            "filter/empty_total": float(self.state.empty_total)})
            t_score = t_update = 0.0
        else:
            self.state.empty_streak = 0
            metrics.update({"filter/skipped": 0.0, "filter/empty_streak": 0.0,
                            "filter/empty_total": float(self.state.empty_total)})
            rows = train_batch.row_tensors()
            images = train_batch.images
            n_rows_before = rows["input_ids"].shape[0]
            tokens_before = int(rows["attention_mask"].sum())
            if kept.numel() < train_batch.groups:
                keep_rows = torch.isin(rows["row_group"], kept).nonzero().flatten()
                rows = select_groups_rows(rows, kept)
                if images is not None:
                    images = [images[int(i)] for i in keep_rows]
            metrics["filter/rows_kept"] = float(rows["input_ids"].shape[0])
            metrics["filter/rows_total"] = float(n_rows_before)
            metrics["filter/tokens_kept_fraction"] = float(rows["attention_mask"].sum()) / max(tokens_before, 1)

            t2 = time.perf_counter()
            if cfg.algo.recompute_old_logprobs:
                rows["old_logprobs"] = self._score(self.policy, rows, images)
            if self.ref_policy is not None:
                rows["ref_logprobs"] = self._score(self.ref_policy, rows, images)
            values = None
            if self.critic is not None:
                values = self._values(rows)
                rows["old_values"] = values
            advs, rets = compute_advantages(cfg.algo.name, rows, train_batch.rewards_pg, train_batch.group_size,
                                            values=values, gamma=cfg.algo.gamma, lam=cfg.algo.lam)
            rows["advantages"] = advs
            if rets is not None:
                rows["returns"] = rets
            t_score = time.perf_counter() - t2
            m = rows["loss_mask"] != 0
            metrics["loss/advantage_mean"] = float(advs[m].mean()) if m.any() else 0.0
            metrics["loss/advantage_std"] = float(advs[m].std(unbiased=False)) if m.any() else 0.0
            t3 = time.perf_counter()
            upd = self.update(rows, images)
            t_update = time.perf_counter() - t3
            metrics.update(upd)
            if "loss/entropy" in upd:
                metrics["collapse/token_entropy"] = upd["loss/entropy"]
            metrics["perf/tokens_trained"] = float(m.sum())

        metrics.update({"perf/rollout_s": t_rollout, "perf/mi_s": t_mi, "perf/score_s": t_score,
                        "perf/update_s": t_update, "perf/step_s": time.perf_counter() - t0})
        self.state.step = step
        if cfg.eval.every and step % cfg.eval.every == 0:
            t4 = time.perf_counter()
            metrics.update(self.evaluate())
            metrics["perf/eval_s"] = time.perf_counter() - t4
        return metrics

    # ------------------------------------------------------------------ loop
    def should_stop(self) -> bool:
        n = self.cfg.filter.max_empty_steps
        return n > 0 and self.state.empty_streak >= n

    def fit(self) -> list[dict[str, Any]]:
        """Warm start (if configured, fresh runs only), the training loop, plots and summary."""
        cfg = self.cfg
        t_start = time.perf_counter()  # run.max_minutes counts from here (warm start included)
        fresh = self.state.step == 0 and not self.state.history
        if fresh:
            (self.run_dir / "config.toml").write_text(dump_toml(cfg))
            (self.run_dir / "metrics.jsonl").write_text("")
            (self.run_dir / VAL_OUTCOMES).write_text("")
            if cfg.warm_start.sft_episodes > 0:
                from ragen_core.sft import warm_start

                sft_metrics = warm_start(self.policy, cfg, device=self.device)
                self._log({"step": 0, **sft_metrics})
                if cfg.algo.kl_coef > 0:
                    self._make_reference()  # the reference is the warm-started model
                if self.critic is not None:
                    # The critic starts from the warm-started backbone too.
                    self.critic = ValueModel(self.model).to(self.device)
                    self.critic_optimizer = torch.optim.AdamW(self.critic.parameters(), lr=cfg.model.critic_lr,
                                                              weight_decay=cfg.algo.weight_decay)
            if cfg.eval.at_start and cfg.eval.every:
                t = time.perf_counter()
                m = {"step": 0, **self.evaluate()}
                m["perf/eval_s"] = time.perf_counter() - t
                self._log(m)
            self.save_checkpoint()
        bar = _progress(cfg.run.steps, self.state.step, cfg.run.progress)
        stopped = ""
        try:
            while self.state.step < cfg.run.steps:
                metrics = self.train_step()
                self._log(metrics)
                if cfg.run.save_every and (self.state.step % cfg.run.save_every == 0 or
                                           self.state.step == cfg.run.steps):
                    self.save_checkpoint()
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix({k.split("/")[-1]: f"{metrics[k]:.3g}" for k in
                                     ("rollout/success", "filter/kept_fraction", "collapse/token_entropy",
                                      "collapse/mi_est") if isinstance(metrics.get(k), float)})
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
        last = self.state.history[-1] if self.state.history else {}
        if stopped and cfg.eval.every and "val/success" not in last:
            # Always end with a validation number (the "after" of the run).
            t = time.perf_counter()
            m = {"step": self.state.step, **self.evaluate()}
            m["perf/eval_s"] = time.perf_counter() - t
            self._log(m)
        if not cfg.run.save_every or self.state.step % max(cfg.run.save_every, 1):
            self.save_checkpoint()
        write_plots(self.run_dir, self.state.history)
        write_summary(self.run_dir, cfg, self.state.history, stopped)
        return self.state.history

    def _log(self, metrics: dict[str, Any]) -> None:
        metrics = _metrics_jsonable(metrics)
        self.state.history.append(metrics)
        with open(self.run_dir / "metrics.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(metrics) + "\n")
        if self.cfg.run.tensorboard:
            self._tensorboard(metrics)
        if self.on_step is not None:
            self.on_step(metrics)

    def _tensorboard(self, metrics: dict[str, Any]) -> None:
        """Mirror the numeric metrics to TensorBoard (`run.tensorboard = true`, extra `tensorboard`)."""
        if self._tb is None:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(self.run_dir / "tensorboard"))
        for k, v in metrics.items():
            if k != "step" and isinstance(v, (int, float)):
                self._tb.add_scalar(k, v, metrics["step"])

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self) -> Path:
        """Write `checkpoints/latest.pt` atomically (and a numbered copy every `run.keep_every` steps)."""
        state = {
            "step": self.state.step,
            "next_seed_offset": self.state.next_seed_offset,
            "empty_streak": self.state.empty_streak,
            "empty_total": self.state.empty_total,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "critic": self.critic.state_dict() if self.critic is not None else None,
            "critic_optimizer": self.critic_optimizer.state_dict() if self.critic_optimizer is not None else None,
            "reference": self.ref_policy.model.state_dict() if self.ref_policy is not None else None,
            "ema": self.ema.state_dict(),
            "rng": {
                "sample": self.sample_gen.get_state(),
                "update": self.update_gen.get_state(),
                "filter": self.filter_gen.get_state(),
                "torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            },
        }
        path = self.run_dir / "checkpoints" / "latest.pt"
        tmp = path.with_suffix(".tmp")
        torch.save(state, tmp)
        tmp.replace(path)
        keep = self.cfg.run.keep_every
        if keep and self.state.step and self.state.step % keep == 0:
            torch.save(state, self.run_dir / "checkpoints" / f"step_{self.state.step:06d}.pt")
        return path

    def load_checkpoint(self) -> None:
        path = self.run_dir / "checkpoints" / "latest.pt"
        if not path.is_file():
            raise FileNotFoundError(f"no checkpoint to resume from: {path} does not exist")
        state = torch.load(path, map_location="cpu", weights_only=False)
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
        self.sample_gen.set_state(state["rng"]["sample"])
        self.update_gen.set_state(state["rng"]["update"])
        self.filter_gen.set_state(state["rng"]["filter"])
        torch.set_rng_state(state["rng"]["torch"])
        if state["rng"]["cuda"] is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["rng"]["cuda"])
        self.state.step = int(state["step"])
        self.state.next_seed_offset = int(state["next_seed_offset"])
        self.state.empty_streak = int(state["empty_streak"])
        self.state.empty_total = int(state["empty_total"])
        # Metrics after the checkpoint belong to the lost step: drop them.
        mpath = self.run_dir / "metrics.jsonl"
        history = []
        if mpath.is_file():
            for line in mpath.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    rec = json.loads(line)
                    if rec.get("step", 0) <= self.state.step:
                        history.append(rec)
        self.state.history = history
        mpath.write_text("".join(json.dumps(r) + "\n" for r in history))
        vpath = self.run_dir / VAL_OUTCOMES
        if vpath.is_file():
            kept = [line for line in vpath.read_text(encoding="utf-8").splitlines()
                    if line.strip() and json.loads(line)["step"] <= self.state.step]
            vpath.write_text("".join(line + "\n" for line in kept))


def _pad_id(policy: Any) -> int:
    tok = policy.tokenizer
    pad = getattr(tok, "pad_token_id", None)
    if pad is None:
        pad = getattr(tok, "eos_token_id", None)
    return int(pad) if pad is not None else 0


def _progress(total: int, done: int, enabled: bool):
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=done, desc="train", unit="step", dynamic_ncols=True, leave=False)


# ---------------------------------------------------------------------------------------------- outputs
def _series(history: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for rec in history:
        v = rec.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            xs.append(int(rec["step"]))
            ys.append(float(v))
    return xs, ys


def write_plots(run_dir: Path, history: list[dict[str, Any]]) -> list[Path]:
    """success.png, entropy_mi.png, filter.png from the metrics history."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for key, label in (("rollout/success", "train (sampled)"), ("val/success", "validation")):
        xs, ys = _series(history, key)
        if xs:
            ax.plot(xs, ys, marker="o" if key.startswith("val") else None, label=label)
    ax.set_xlabel("step")
    ax.set_ylabel("success rate")
    ax.set_ylim(-0.02, 1.02)
    ax.legend()
    ax.set_title("Success")
    fig.tight_layout()
    paths.append(run_dir / "success.png")
    fig.savefig(paths[-1], dpi=100)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 3.5))
    xs, ys = _series(history, "collapse/token_entropy")
    ax.plot(xs, ys, color="tab:blue", label="token entropy (nats)")
    xs, ys = _series(history, "collapse/cond_entropy_est")
    if xs:
        ax.plot(xs, ys, color="tab:cyan", marker="s", label="H(Z|X) est. (nats/token)")
    ax.set_xlabel("step")
    ax.set_ylabel("entropy")
    ax2 = ax.twinx()
    xs, ys = _series(history, "collapse/mi_seq_est")
    if xs:
        ax2.plot(xs, ys, color="tab:red", marker="o", label="MI-Seq-Est (nats)")
    xs, ys = _series(history, "collapse/retrieval_acc")
    if xs:
        ax2.plot(xs, ys, color="tab:orange", marker="^", label="Retrieval-Acc")
    ax2.set_ylabel("mutual information proxies")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=7, loc="best")
    ax.set_title("Entropy vs mutual information")
    fig.tight_layout()
    paths.append(run_dir / "entropy_mi.png")
    fig.savefig(paths[-1], dpi=100)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 3.5))
    xs, ys = _series(history, "filter/rv_mean")
    ax.plot(xs, ys, label="RV mean")
    xs, ys = _series(history, "filter/rv_heterogeneity")
    ax.plot(xs, ys, label="RV heterogeneity (std/mean)")
    ax.set_xlabel("step")
    ax2 = ax.twinx()
    xs, ys = _series(history, "filter/kept_fraction")
    ax2.plot(xs, ys, color="tab:green", linestyle="--", label="kept fraction")
    ax2.set_ylim(-0.02, 1.02)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=7, loc="best")
    ax.set_title("Reward variance and filtering")
    fig.tight_layout()
    paths.append(run_dir / "filter.png")
    fig.savefig(paths[-1], dpi=100)
    plt.close(fig)
    return paths


def _first_last(history: list[dict[str, Any]], key: str) -> tuple[float | None, float | None]:
    _, ys = _series(history, key)
    return (ys[0], ys[-1]) if ys else (None, None)


def _fmt(v: float | None, digits: int = 3) -> str:
    return "n/a" if v is None else f"{v:.{digits}f}"


def write_summary(run_dir: Path, cfg: TrainConfig, history: list[dict[str, Any]], stopped: str = "") -> Path:
    """summary.md: what was run, the numbers at start and end, where the files are."""
    steps = [r["step"] for r in history if r.get("step", 0) > 0]
    lines = [f"# Run `{cfg.run.name}`", "",
             f"- env `{cfg.env.id}`, model `{cfg.model.path}`, algorithm `{cfg.algo.name}`, "
             f"{cfg.rollout.groups} groups x {cfg.rollout.group_size} rollouts, up to {cfg.rollout.max_turns} turns "
             f"({cfg.rollout.context} context)",
             f"- filter: {'off' if not cfg.filter.enabled else f'{cfg.filter.strategy} {cfg.filter.value}'}; "
             f"steps run: {max(steps) if steps else 0} of {cfg.run.steps}" + (f"; {stopped}" if stopped else ""),
             f"- empty (skipped) steps: {int(sum(r.get('filter/skipped', 0) or 0 for r in history))}", "",
             "| metric | start | end |", "|---|---|---|"]
    for key, label in (("val/success", "validation success"), ("rollout/success", "train success"),
                       ("rollout/format_valid", "format-valid rate"), ("rollout/return", "mean return"),
                       ("collapse/token_entropy", "token entropy (nats)"),
                       ("collapse/cond_entropy_est", "H(Z|X) estimate"), ("collapse/mi_est", "MI-Est"),
                       ("collapse/mi_seq_est", "MI-Seq-Est"), ("collapse/retrieval_acc", "Retrieval-Acc"),
                       ("filter/kept_fraction", "kept fraction"), ("filter/rv_heterogeneity", "RV heterogeneity")):
        a, b = _first_last(history, key)
        lines.append(f"| {label} | {_fmt(a)} | {_fmt(b)} |")
    regimes = [r["collapse/regime"] for r in history if isinstance(r.get("collapse/regime"), str)]
    if regimes:
        lines += ["", f"Regime at the first / last MI check: {regimes[0]} / {regimes[-1]}."]
    lines += ["", "Files: `config.toml`, `metrics.jsonl`, `checkpoints/latest.pt`, `success.png`, `entropy_mi.png`, "
              "`filter.png`."]
    path = run_dir / "summary.md"
    path.write_text("\n".join(lines) + "\n")
    return path


# ---------------------------------------------------------------------------------------------- CLI
def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """`ragen train` arguments: CONFIG [key=value ...] [--resume RUN_DIR] [--run-dir DIR]."""
    parser.add_argument("config", nargs="?", default=None, help="TOML config file (optional with --resume)")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides, e.g. algo.lr=1e-6")
    parser.add_argument("--resume", metavar="RUN_DIR", default=None,
                        help="continue the run in RUN_DIR from its latest checkpoint (its config.toml is used)")
    parser.add_argument("--run-dir", default=None, help="exact run folder (default: run.out_dir/run.name[-N])")
    return parser


def _new_run_dir(cfg: TrainConfig) -> Path:
    base = Path(cfg.run.out_dir) / cfg.run.name
    if not base.exists():
        return base
    i = 1
    while Path(f"{base}-{i}").exists():
        i += 1
    return Path(f"{base}-{i}")


def run(args: argparse.Namespace) -> int:
    """Run `ragen train` from parsed arguments; returns an exit code."""
    config, overrides = args.config, list(args.overrides)
    if config is not None and "=" in config:  # `ragen train --resume DIR key=value`: no CONFIG given
        overrides.insert(0, config)
        config = None
    try:
        if args.resume:
            run_dir = Path(args.resume)
            cfg_path = run_dir / "config.toml"
            if not cfg_path.is_file():
                print(f"error: {cfg_path} does not exist (is {run_dir} a run folder?)", file=sys.stderr)
                return 2
            cfg = load_config(cfg_path, overrides)
        else:
            if config is None:
                print("error: a CONFIG file is required (or --resume RUN_DIR)", file=sys.stderr)
                return 2
            cfg = load_config(config, overrides)
            run_dir = Path(args.run_dir) if args.run_dir else _new_run_dir(cfg)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        return 2
    trainer = Trainer(cfg, run_dir, resume=bool(args.resume))
    if args.resume:
        (run_dir / "config.toml").write_text(dump_toml(cfg))
    trainer.fit()
    print(f"run folder: {run_dir}")
    print((run_dir / "summary.md").read_text())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = add_arguments(argparse.ArgumentParser(prog="ragen train", description=__doc__.split("\n\n")[0]))
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
