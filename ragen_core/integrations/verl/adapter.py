"""verl adapter (``pip install ragen2[verl]``): SNR-aware filtering, MI collapse metrics and ``ragen/`` envs in verl.

Tested against verl 0.9.1 (``version.SUPPORTED_VERL_RANGE`` accepts the 0.9 series from 0.9.1). verl is
imported only inside :func:`register`, so importing this module never needs verl; it checks the version first
and raises :class:`UnsupportedVerlVersionError` naming the supported range (``RAGEN2_ALLOW_UNTESTED_VERL=1``
turns the refusal into a warning). The logic lives in verl-free modules: ``core`` (filtering, removal,
advantages, and what the glue modules share), ``mi`` (collapse metrics), ``env`` (the env as a chat)
and ``version`` (the version check).

Imports point one way: this module imports ``trainer`` and ``agent`` (inside :func:`register`), and
those import only the verl-free modules and verl, never this one.

What :func:`register` adds to verl, by verl's own registries:

- advantage estimator ``ragen_snr`` (``verl.trainer.ppo.core_algos.register_adv_est``): GRPO-family advantages
  (``algorithm.ragen_filter.estimator``) on the kept groups. With ``mode: mask`` it filters itself and gives the
  dropped groups advantage 0 (as verl PR #7894, for any verl trainer); with ``mode: remove`` (default) it
  expects the trainer below to have removed them already, and says so if it has not. The registered object is
  a :class:`RagenSNREstimator`, which owns this process's ``core.StepHandoff``: the trainer below finds it
  in verl's registry and tells it, each step, its global step and whether it removed the dropped groups.
- trainer mode ``ragen_snr_sync`` (``verl.trainer.ppo.v1.register_trainer``, a subclass of ``PPOTrainerSync``):
  after the rewards are known and before the batch is balanced over data-parallel ranks, it reads ``uid``,
  ``rm_scores`` and ``response_mask`` from the TransferQueue, filters with ``core.filter_rows``, clears
  the dropped groups' keys and goes on with the kept keys only (``KVBatchMeta.select_keys``), so old/ref
  log-probs, values and the actor/critic updates never see them. An empty selection skips both updates.
  Every ``ragen_mi.every`` steps it logs the MI proxies of ``mi.mi_metrics``.
- agent loop ``ragen_env_agent`` (``verl.experimental.agent_loop.register``, a subclass of ``AgentLoopBase``;
  verl 0.9 removed ``BaseInteraction``): plays one ``ragen/`` episode per dataset row through the rollout server.

verl runs the trainer and the agent loops in Ray workers, so the registrations must happen there: pass
``+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=ragen_core.integrations.verl.register``
(docs/scale_out.md, section verl), and point ``actor_rollout_ref.rollout.agent.agent_loop_config_path`` at a file naming
``ragen_core.integrations.verl.agent.RagenEnvAgentLoop`` (scripts/verl/agent_loop.yaml).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import torch

from ragen_core.integrations.verl.core import (
    ADV_ESTIMATOR_NAME,
    AGENT_LOOP_NAME,
    TRAINER_MODE,
    StepHandoff,
    filter_spec_from_algorithm,
    group_advantages,
    masked_group_advantages,
    random_generator,
)
from ragen_core.integrations.verl.version import (
    SUPPORTED_VERL_RANGE,
    TESTED_VERL_VERSION,
    UnsupportedVerlVersionError,
    check_verl_version,
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
    "RagenSNREstimator",
    "filter_spec_from_algorithm",
]


def ragen_snr_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray | None = None,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
    config: Any = None,
    handoff: StepHandoff | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl advantage estimator ``ragen_snr`` (the signature of verl's outcome estimators).

    Args:
        token_level_rewards, response_mask: ``[B, T]`` tensors (numpy arrays are read as tensors).
        index: ``[B]`` uids (verl passes ``non_tensor_batch["uid"]``).
        epsilon: the grpo std constant.
        norm_adv_by_std_in_grpo: False turns ``estimator: grpo`` into ``dr_grpo`` (verl's meaning).
        config: verl's ``config.algorithm``, read for ``ragen_filter``.
        handoff: the step state shared with the trainer mode (``core.StepHandoff``; one per training run,
            as :class:`RagenSNREstimator` holds it). It gives the step that seeds ``strategy: random``
            (``core.random_generator``) and says whether the trainer removed the dropped groups. None: a
            one-off call, at step 1, with nothing removed.

    Returns:
        ``(advantages, returns)``, both ``[B, T]`` (equal, as verl's outcome estimators).
    """
    if index is None:
        raise ValueError("the ragen_snr estimator needs the uid of every row (non_tensor_batch['uid'])")
    token_level_rewards, response_mask = torch.as_tensor(token_level_rewards), torch.as_tensor(response_mask)
    handoff = StepHandoff() if handoff is None else handoff
    step = handoff.next_step()
    spec = filter_spec_from_algorithm(config)
    estimator = "dr_grpo" if spec.estimator == "grpo" and not norm_adv_by_std_in_grpo else spec.estimator
    device = token_level_rewards.device
    r, m = token_level_rewards.detach().cpu(), response_mask.detach().cpu()
    if spec.mode == "mask" and spec.enable:
        gen = random_generator(spec, step)
        adv, _ = masked_group_advantages(r, m, index, replace(spec, estimator=estimator, norm_eps=epsilon), gen)
    else:
        if spec.enable and not handoff.removed:
            raise RuntimeError(f"algorithm.ragen_filter.mode=remove needs trainer.v1.trainer_mode={TRAINER_MODE} "
                               "(which removes the dropped groups before this estimator runs); with another trainer "
                               "use algorithm.ragen_filter.mode=mask")
        handoff.removed = False
        adv = group_advantages(r, m, index, estimator, epsilon)
    adv = adv.to(device=device, dtype=token_level_rewards.dtype if token_level_rewards.is_floating_point()
                 else torch.float32)
    return adv, adv


class RagenSNREstimator:
    """The callable :func:`register` puts in verl's registry as ``ragen_snr``.

    :func:`ragen_snr_advantage` bound to one ``core.StepHandoff`` (``.handoff``), created here: one per
    process, found by the trainer mode through verl's registry, so the estimator counts the steps and hears from
    the trainer without any module-level state.
    """

    def __init__(self, handoff: StepHandoff | None = None) -> None:
        self.handoff = StepHandoff() if handoff is None else handoff

    def __call__(self, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """:func:`ragen_snr_advantage` (verl's estimator arguments) with this estimator's ``handoff``."""
        return ragen_snr_advantage(*args, handoff=self.handoff, **kwargs)


def register() -> None:
    """Register the estimator, the trainer mode and the agent loop with verl (idempotent; a Ray setup hook)."""
    check_verl_version()
    from verl.trainer.ppo import core_algos

    if not isinstance(core_algos.ADV_ESTIMATOR_REGISTRY.get(ADV_ESTIMATOR_NAME), RagenSNREstimator):
        core_algos.register_adv_est(ADV_ESTIMATOR_NAME)(RagenSNREstimator())
    from ragen_core.integrations.verl import agent as verl_agent
    from ragen_core.integrations.verl import trainer as verl_trainer

    verl_trainer.register_trainer_mode()
    verl_agent.register_agent_loop()
