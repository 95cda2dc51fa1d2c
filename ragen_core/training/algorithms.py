"""The algorithm table: one declarative entry per `algo.name`, read by the config check and the trainer.

=========  ======  ============================  ===================================  ================
name       critic  advantage                     loss aggregation                     dynamic sampling
=========  ======  ============================  ===================================  ================
ppo        yes     GAE over the critic, whitened  `algo.loss_agg_mode` (token-mean)    no
grpo       no      advantages.grpo               `algo.loss_agg_mode` (token-mean)    no
dr_grpo    no      advantages.dr_grpo            seq-mean-token-sum-norm, fixed       no
dapo       no      advantages.grpo               token-mean, fixed                    allowed
rloo       no      advantages.rloo               `algo.loss_agg_mode` (token-mean)    no
=========  ======  ============================  ===================================  ================

Clipping is the config's for every algorithm (`algo.clip_low` / `algo.clip_high` / `algo.dual_clip`): the defaults
0.2 / 0.28 / 3 are the paper's clip-higher and dual clip, used by all of them. So ``dapo`` differs from ``grpo`` in
exactly two ways, both read from its entry: the loss aggregation is fixed to token-mean (``grpo`` reads
`algo.loss_agg_mode`, whose default is also token-mean) and `algo.dynamic_sampling` is allowed. With the defaults
(dynamic sampling off) the two run identically; the run's ``summary.md`` says so.

Adding an algorithm is one entry in :data:`ALGORITHMS` (and a trainer test): an advantage estimator on the
``[P, G]`` episode returns (or ``critic=True`` for GAE), a loss aggregation, whether it may refill dropped groups.
A config that names a combination an entry forbids is rejected by :func:`config_errors` (``ConfigError`` in
``ragen_core.training.config``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ragen_core.math import advantages as adv_lib

__all__ = [
    "AUTO",
    "Algorithm",
    "ALGORITHMS",
    "get_algorithm",
    "config_errors",
    "traj_token_view",
    "compute_advantages",
    "token_loss_mode",
]

#: `algo.loss_agg_mode = "auto"`: the algorithm's own aggregation (its entry's `loss_agg_mode`).
AUTO = "auto"


def token_loss_mode(loss_agg_mode: str) -> tuple[str, bool]:
    """The mode :func:`ragen_core.math.losses.ppo_policy_loss` aggregates with, and whether the advantages are first
    multiplied by :func:`ragen_core.math.advantages.trajectory_token_weights`.

    ``traj-mean-token-mean`` (each trajectory counts equally, whatever its token count) is not an aggregation of
    its own: it is ``token-mean`` over trajectory-weighted advantages, which for a positive weight is exactly a
    reweighting of each token's clipped loss (see ``trajectory_token_weights``). Every other mode passes through
    unweighted.
    """
    if loss_agg_mode == adv_lib.TRAJ_MEAN:
        return "token-mean", True
    return loss_agg_mode, False


def _grpo_or_centred(returns_pg: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """GRPO advantages (``eps`` added to the group std); with G = 1 (no group std) the centred returns (all 0)."""
    if returns_pg.shape[1] >= 2:
        return adv_lib.grpo(returns_pg, eps=eps)
    return returns_pg - returns_pg.mean(dim=1, keepdim=True)


@dataclass(frozen=True)
class Algorithm:
    """One row of the algorithm table."""

    name: str
    #: One line for summaries and error messages.
    summary: str
    #: Train a value model (ragen_core.training.trainer.ValueModel) and use token-level GAE over its values.
    critic: bool = False
    #: Outcome advantages from the ``[P, G]`` episode returns (None iff `critic`).
    group_advantage: Callable[..., torch.Tensor] | None = None
    #: `group_advantage` divides by the group std and takes the constant added to it as ``eps=`` (see
    #: :meth:`group_advantages`).
    takes_std_eps: bool = False
    #: Loss aggregation (verl's names); with `fixed_loss_agg` the config may not name another one.
    loss_agg_mode: str = "token-mean"
    fixed_loss_agg: bool = False
    #: `algo.dynamic_sampling` (DAPO's refill of the groups the filter dropped) is allowed.
    dynamic_sampling: bool = False
    #: Smallest `rollout.group_size` the advantage is defined for: 2 for every group-relative estimator (with one
    #: rollout per group, the return minus its own group mean is 0, so every advantage is 0 and only the entropy
    #: bonus trains); 1 for the critic's GAE, which needs no group.
    min_group_size: int = 1

    def __post_init__(self) -> None:
        if self.critic == (self.group_advantage is not None):
            raise ValueError(f"{self.name}: exactly one of critic (GAE) or group_advantage must be set")
        if self.loss_agg_mode not in adv_lib.TRAINER_LOSS_AGG_MODES:
            raise ValueError(f"{self.name}: unknown loss_agg_mode {self.loss_agg_mode!r}")

    def group_advantages(self, returns_pg: torch.Tensor, std_eps: float = 1e-6) -> torch.Tensor:
        """The entry's advantages of the ``[P, G]`` returns; ``std_eps`` is the constant added to the group std by
        the entries that divide by it (`takes_std_eps`; verl's ``epsilon``), unused by the others."""
        if self.group_advantage is None:
            raise ValueError(f"{self.name} has no group advantage (it trains a critic)")
        if self.takes_std_eps:
            return self.group_advantage(returns_pg, eps=std_eps)
        return self.group_advantage(returns_pg)

    def resolve_loss_agg_mode(self, configured: str) -> str:
        """The aggregation a run uses: the config's, unless it is "auto" or the entry fixes it."""
        return self.loss_agg_mode if configured == AUTO or self.fixed_loss_agg else configured

    def describe(self, algo_cfg: Any) -> str:
        """What this entry makes a run with the `[algo]` section `algo_cfg` do (one line of summary.md)."""
        mode = self.resolve_loss_agg_mode(algo_cfg.loss_agg_mode)
        parts = [self.summary, f"loss aggregation {mode}" + (" (fixed)" if self.fixed_loss_agg else "")]
        if self.dynamic_sampling:
            parts.append(f"dynamic sampling {'on' if algo_cfg.dynamic_sampling else 'off'}")
        return "; ".join(parts)


ALGORITHMS: dict[str, Algorithm] = {
    a.name: a
    for a in (
        Algorithm("ppo", "critic + token-level GAE (gamma, lambda), advantages whitened over the batch",
                  critic=True),
        Algorithm("grpo", "group-normalised returns (advantages.grpo), no critic",
                  group_advantage=_grpo_or_centred, takes_std_eps=True, min_group_size=2),
        Algorithm("dr_grpo", "group-centred returns without std (advantages.dr_grpo), constant length normaliser "
                  "C = max_turns * max_new_tokens", group_advantage=adv_lib.dr_grpo,
                  loss_agg_mode="seq-mean-token-sum-norm", fixed_loss_agg=True, min_group_size=2),
        Algorithm("dapo", "GRPO advantages with DAPO's token-level loss and dynamic sampling; "
                  "with dynamic sampling off it runs exactly as grpo with token-mean",
                  group_advantage=_grpo_or_centred, takes_std_eps=True, loss_agg_mode="token-mean", fixed_loss_agg=True,
                  dynamic_sampling=True, min_group_size=2),
        Algorithm("rloo", "REINFORCE leave-one-out baseline (advantages.rloo), no critic",
                  group_advantage=adv_lib.rloo, min_group_size=2),
    )
}


def get_algorithm(name: str) -> Algorithm:
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise ValueError(f"unknown algorithm {name!r}; known: {', '.join(ALGORITHMS)}") from None


def config_errors(algo_cfg: Any, group_size: int) -> list[tuple[str, str]]:
    """``(key, message)`` for each thing an `[algo]` section asks that its table entry forbids."""
    if algo_cfg.name not in ALGORITHMS:
        return [("algo.name", f"must be one of {', '.join(ALGORITHMS)}; got {algo_cfg.name!r}")]
    a = ALGORITHMS[algo_cfg.name]
    errors = []
    modes = (AUTO, *adv_lib.TRAINER_LOSS_AGG_MODES)
    if algo_cfg.loss_agg_mode not in modes:
        errors.append(("algo.loss_agg_mode", f"must be one of {', '.join(modes)}; got {algo_cfg.loss_agg_mode!r}"))
    elif a.fixed_loss_agg and algo_cfg.loss_agg_mode not in (AUTO, a.loss_agg_mode):
        free = ", ".join(n for n, x in ALGORITHMS.items() if not x.fixed_loss_agg)
        errors.append(("algo.loss_agg_mode", f"is fixed to {a.loss_agg_mode} by algo.name={a.name}; got "
                       f"{algo_cfg.loss_agg_mode!r} (leave it \"auto\", or use an algorithm that reads it: {free})"))
    if algo_cfg.dynamic_sampling and not a.dynamic_sampling:
        allowed = ", ".join(n for n, x in ALGORITHMS.items() if x.dynamic_sampling)
        errors.append(("algo.dynamic_sampling", f"is not part of algo.name={a.name} (allowed with: {allowed})"))
    if group_size < a.min_group_size:
        errors.append(("rollout.group_size", f"must be >= {a.min_group_size} for algo.name={a.name} (its advantage "
                       f"compares the rollouts of a group); got {group_size}"))
    return errors


# ---------------------------------------------------------------------------------------------- advantages
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


def _gae_advantages(rows: dict[str, torch.Tensor], values: torch.Tensor, gamma: float,
                    lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE over each trajectory's generated tokens in order, whitened over the batch (verl's masked_whiten)."""
    r_idx, c_idx, vmask, _ = traj_token_view(rows["row_traj"], rows["loss_mask"])
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


def compute_advantages(
    algo: str | Algorithm,
    rows: dict[str, torch.Tensor],
    returns_pg: torch.Tensor,
    *,
    values: torch.Tensor | None = None,
    gamma: float = 1.0,
    lam: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Token advantages ``[R, T]`` (and, with a critic, the value targets ``[R, T]``) for the rows of a batch.

    - critic (``ppo``): GAE over each trajectory's generated tokens in order (rows of one trajectory are
      concatenated, observation tokens skipped), rewards from ``rows["token_rewards"]``, ``values`` ``[R, T]``
      from the critic; the advantages are then whitened over all generated tokens of the batch (verl's
      ``masked_whiten``), the returns (value targets) are not.
    - otherwise the entry's ``group_advantage(returns_pg)`` of the trajectory, on every generated token.

    ``returns_pg`` ``[P, G]`` are the episode returns of the *whole* batch (group statistics need all G
    rollouts of a group; filtering drops whole groups, so the kept groups' statistics are unchanged); the group
    size G is ``returns_pg.shape[1]``.
    """
    spec = algo if isinstance(algo, Algorithm) else get_algorithm(algo)
    if spec.critic:
        if values is None:
            raise ValueError(f"{spec.name} needs critic values")
        return _gae_advantages(rows, values, gamma, lam)
    a = spec.group_advantage(returns_pg)
    per_row = a.reshape(-1)[rows["row_traj"]]
    return per_row[:, None] * (rows["loss_mask"] != 0).to(per_row.dtype), None
