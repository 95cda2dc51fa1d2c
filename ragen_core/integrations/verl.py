"""verl adapter (``pip install ragen2[verl]``): SNR-aware filtering, MI collapse metrics and ``ragen/`` envs in verl.

Tested against verl 0.9.1 (``SUPPORTED_VERL_RANGE`` accepts the 0.9 series from 0.9.1). verl is imported only
inside the functions below, so importing this module never needs verl; each of them checks the version first
and raises :class:`UnsupportedVerlVersionError` naming the supported range (``RAGEN2_ALLOW_UNTESTED_VERL=1``
turns the refusal into a warning). The logic lives in verl-free modules: ``verl_core`` (filtering, removal,
advantages), ``verl_mi`` (collapse metrics) and ``verl_env`` (the env as a chat).

What :func:`register` adds to verl, by verl's own registries:

- advantage estimator ``ragen_snr`` (``verl.trainer.ppo.core_algos.register_adv_est``): GRPO-family advantages
  (``algorithm.ragen_filter.estimator``) on the kept groups. With ``mode: mask`` it filters itself and gives the
  dropped groups advantage 0 (as verl PR #7894, for any verl trainer); with ``mode: remove`` (default) it
  expects the trainer below to have removed them already, and says so if it has not.
- trainer mode ``ragen_snr_sync`` (``verl.trainer.ppo.v1.register_trainer``, a subclass of ``PPOTrainerSync``):
  after the rewards are known and before the batch is balanced over data-parallel ranks, it reads ``uid``,
  ``rm_scores`` and ``response_mask`` from the TransferQueue, filters with ``verl_core.filter_rows``, clears
  the dropped groups' keys and goes on with the kept keys only (``KVBatchMeta.select_keys``), so old/ref
  log-probs, values and the actor/critic updates never see them. An empty selection skips both updates.
  Every ``ragen_mi.every`` steps it logs the MI proxies of ``verl_mi.mi_metrics``.
- agent loop ``ragen_env_agent`` (``verl.experimental.agent_loop.register``, a subclass of ``AgentLoopBase``;
  verl 0.9 removed ``BaseInteraction``): plays one ``ragen/`` episode per dataset row through the rollout server.

verl runs the trainer and the agent loops in Ray workers, so the registrations must happen there: pass
``+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=ragen_core.integrations.verl.register``
(docs/scale_out.md, section verl), and point ``actor_rollout_ref.rollout.agent.agent_loop_config_path`` at a file naming
``ragen_core.integrations.verl.RagenEnvAgentLoop``.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import replace
from importlib import metadata
from typing import Any

import numpy as np
import torch

from ragen_core.integrations.verl_core import (
    FilterSpec,
    group_advantages,
    masked_group_advantages,
)

__all__ = [
    "TESTED_VERL_VERSION",
    "SUPPORTED_VERL_RANGE",
    "ADV_ESTIMATOR_NAME",
    "TRAINER_MODE",
    "AGENT_LOOP_NAME",
    "UnsupportedVerlVersionError",
    "check_verl_version",
    "register",
    "ragen_snr_advantage",
    "filter_spec_from_algorithm",
]

TESTED_VERL_VERSION = "0.9.1"
#: Half-open ``[low, high)``: the trainer hooks (``_balance_batch``, ``_update_actor``) are private in verl.
SUPPORTED_VERL_RANGE = ((0, 9, 1), (0, 10, 0))
ADV_ESTIMATOR_NAME = "ragen_snr"
TRAINER_MODE = "ragen_snr_sync"
AGENT_LOOP_NAME = "ragen_env_agent"
_OVERRIDE_ENV = "RAGEN2_ALLOW_UNTESTED_VERL"
# The trainer and the estimator run in the same process (verl's TaskRunner); the trainer tells the estimator
# that it removed the dropped groups of this step, and keeps the last filter metrics for its log.
_STATE: dict[str, Any] = {"removed": False, "mask_metrics": {}}


class UnsupportedVerlVersionError(ImportError):
    """verl is missing, or its version is outside ``SUPPORTED_VERL_RANGE``."""


def _release(version: str) -> tuple[int, ...]:
    parts: list[int] = []
    for piece in version.split(".")[:3]:
        digits = "".join(ch for ch in _prefix_digits(piece))
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts + [0] * (3 - len(parts)))


def _prefix_digits(piece: str) -> str:
    out = ""
    for ch in piece:
        if not ch.isdigit():
            break
        out += ch
    return out


def check_verl_version(version: str | None = None) -> str:
    """Return the installed verl version, or raise :class:`UnsupportedVerlVersionError` naming the range."""
    low, high = SUPPORTED_VERL_RANGE
    wanted = (f"verl>={'.'.join(map(str, low))},<{'.'.join(map(str, high))} (tested: {TESTED_VERL_VERSION}); "
              "install it with `pip install ragen2[verl]`")
    if version is None:
        try:
            version = metadata.version("verl")
        except metadata.PackageNotFoundError:
            raise UnsupportedVerlVersionError(f"the verl adapter needs {wanted}; verl is not installed") from None
    if not (low <= _release(version) < high):
        msg = f"the verl adapter supports {wanted}; found verl {version}"
        if os.environ.get(_OVERRIDE_ENV) == "1":
            warnings.warn(msg + f" ({_OVERRIDE_ENV}=1: trying anyway)", stacklevel=2)
        else:
            raise UnsupportedVerlVersionError(msg + f" (set {_OVERRIDE_ENV}=1 to try it anyway)")
    return version


def _to_container(cfg: Any) -> Any:
    try:
        from omegaconf import DictConfig, OmegaConf
    except ImportError:  # pragma: no cover - omegaconf comes with verl
        return cfg
    return OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else cfg


def filter_spec_from_algorithm(algorithm: Any) -> FilterSpec:
    """:class:`FilterSpec` from verl's ``config.algorithm`` (its ``ragen_filter`` section; defaults if absent)."""
    section = None
    if algorithm is not None:
        getter = getattr(algorithm, "get", None)
        section = getter("ragen_filter", None) if callable(getter) else getattr(algorithm, "ragen_filter", None)
    return FilterSpec.from_config(_to_container(section))


def ragen_snr_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray | None = None,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl advantage estimator ``ragen_snr`` (the signature of verl's outcome estimators).

    Args:
        token_level_rewards, response_mask: ``[B, T]``.
        index: ``[B]`` uids (verl passes ``non_tensor_batch["uid"]``).
        epsilon: the grpo std constant.
        norm_adv_by_std_in_grpo: False turns ``estimator: grpo`` into ``dr_grpo`` (verl's meaning).
        config: verl's ``config.algorithm``, read for ``ragen_filter``.

    Returns:
        ``(advantages, returns)``, both ``[B, T]`` (equal, as verl's outcome estimators).
    """
    if index is None:
        raise ValueError("the ragen_snr estimator needs the uid of every row (non_tensor_batch['uid'])")
    spec = filter_spec_from_algorithm(config)
    estimator = "dr_grpo" if spec.estimator == "grpo" and not norm_adv_by_std_in_grpo else spec.estimator
    device = token_level_rewards.device
    r, m = token_level_rewards.detach().cpu(), response_mask.detach().cpu()
    if spec.mode == "mask" and spec.enable:
        gen = torch.Generator().manual_seed(spec.seed) if spec.strategy == "random" else None
        adv, res = masked_group_advantages(r, m, index, replace(spec, estimator=estimator, norm_eps=epsilon), gen)
        _STATE["mask_metrics"] = res.metrics()
    else:
        if spec.enable and not _STATE["removed"]:
            raise RuntimeError(f"algorithm.ragen_filter.mode=remove needs trainer.v1.trainer_mode={TRAINER_MODE} "
                               "(which removes the dropped groups before this estimator runs); with another trainer "
                               "use algorithm.ragen_filter.mode=mask")
        _STATE["removed"] = False
        adv = group_advantages(r, m, index, estimator, epsilon)
    adv = adv.to(device=device, dtype=token_level_rewards.dtype if token_level_rewards.is_floating_point()
                 else torch.float32)
    return adv, adv


def register() -> None:
    """Register the estimator, the trainer mode and the agent loop with verl (idempotent; a Ray setup hook)."""
    check_verl_version()
    from verl.trainer.ppo import core_algos

    if core_algos.ADV_ESTIMATOR_REGISTRY.get(ADV_ESTIMATOR_NAME) is not ragen_snr_advantage:
        core_algos.register_adv_est(ADV_ESTIMATOR_NAME)(ragen_snr_advantage)
    from ragen_core.integrations import verl_agent, verl_trainer

    verl_trainer.register_trainer_mode()
    verl_agent.register_agent_loop()
