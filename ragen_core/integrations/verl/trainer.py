"""verl trainer mode ``ragen_snr_sync``: physical removal of low-signal groups and MI metrics (needs verl 0.9).

Importing this module imports verl (after ``version.check_verl_version``); see
``ragen_core.integrations.verl``, whose ``register`` imports this module (this module never imports it back).

One step of verl's v1 trainer (``PPOTrainer._step_once``): sample from the replay buffer -> reward -> balance
over data-parallel ranks -> old log-probs -> ref log-probs -> values -> advantages -> critic update -> actor
update. :class:`RagenSNRTrainer` acts at "balance": the rewards are final there and nothing expensive has run
on the batch yet, so every later stage runs on the kept groups only (verl pads the smaller batch up to a
multiple of the data-parallel size itself, with rows that carry no loss).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch

from ragen_core.integrations.verl.version import check_verl_version

check_verl_version()

import transfer_queue as tq  # noqa: E402  (after the version check, for a clear error first)
from verl.trainer.ppo import core_algos  # noqa: E402
from verl.trainer.ppo.v1 import PPOTrainerSync, register_trainer  # noqa: E402
from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY  # noqa: E402

from ragen_core.integrations.verl.core import (  # noqa: E402
    ADV_ESTIMATOR_NAME,
    TRAINER_MODE,
    MISettings,
    StepHandoff,
    filter_rows,
    filter_spec_from_algorithm,
    mi_settings_from_algorithm,
    random_generator,
)
from ragen_core.integrations.verl.mi import mi_metrics  # noqa: E402

__all__ = ["RagenSNRTrainer", "register_trainer_mode"]

logger = logging.getLogger(__name__)


def _estimator_handoff() -> StepHandoff | None:
    """The ``StepHandoff`` of the ``ragen_snr`` estimator registered in this process (None if there is none)."""
    handoff = getattr(core_algos.ADV_ESTIMATOR_REGISTRY.get(ADV_ESTIMATOR_NAME), "handoff", None)
    return handoff if isinstance(handoff, StepHandoff) else None


def _lengths_mask(lengths: torch.Tensor, width: int) -> torch.Tensor:
    return (torch.arange(width)[None, :] < lengths[:, None]).to(torch.long)


class RagenSNRTrainer(PPOTrainerSync):
    """``PPOTrainerSync`` that removes the dropped groups before balancing (module docstring).

    Config (all optional): ``algorithm.ragen_filter`` (``core.FilterSpec`` keys; ``mode: remove``) and
    ``algorithm.ragen_mi`` (``core.MISettings``: ``every``: steps between MI metrics, 0 = off; ``max_groups``:
    groups scored, default 8; ``model_path``: the causal LM that scores, default the actor's ``model.path``;
    ``device``: default ``cuda`` when the trainer process sees one, else ``cpu``; unknown keys are errors).
    """

    _ragen_skip_update = False
    _ragen_mi_model: Any = None

    def _balance_batch(self, batch, metrics, logging_prefix="global_seqlen", keep_minibatch=False):
        spec = filter_spec_from_algorithm(self.config.algorithm)
        self._ragen_skip_update = False
        # The ragen_snr estimator of this process (if registered) seeds strategy random with this step, and learns
        # below whether this step's dropped groups were removed.
        handoff = _estimator_handoff()
        if handoff is not None:
            handoff.begin_step(self.global_steps)
        fields = ["uid", "rm_scores", "response_mask"]
        mi_cfg = mi_settings_from_algorithm(self.config.algorithm)
        want_mi = mi_cfg.every > 0 and self.global_steps % mi_cfg.every == 0
        if want_mi:
            fields += ["prompts", "responses"]
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
        uids = np.array(list(data["uid"]), dtype=object)
        rewards = data["rm_scores"].to_padded_tensor(padding=0.0)
        resp_mask = data["response_mask"].to_padded_tensor(padding=0)
        if want_mi:
            metrics.update(self._ragen_mi(data, resp_mask, uids, mi_cfg))
        res = filter_rows(rewards, resp_mask, uids, spec, random_generator(spec, self.global_steps))
        metrics.update(res.metrics())
        if spec.mode == "remove" and spec.enable:
            if handoff is not None:
                handoff.removed = True
            if res.empty:
                # Nothing carries signal: keep the batch for the bookkeeping stages, skip both updates.
                self._ragen_skip_update = True
            else:
                kept = [batch.keys[i] for i in res.rows.tolist()]
                dropped = [batch.keys[i] for i in (~res.row_mask).nonzero().flatten().tolist()]
                if dropped:
                    tq.kv_clear(keys=dropped, partition_id=batch.partition_id)
                batch = batch.select_keys(kept)
        metrics["ragen_filter/skipped_update"] = float(self._ragen_skip_update)
        return super()._balance_batch(batch, metrics, logging_prefix=logging_prefix, keep_minibatch=keep_minibatch)

    def _ragen_mi(self, data: Any, resp_mask: torch.Tensor, uids: np.ndarray, cfg: MISettings) -> dict[str, float]:
        prompt_lengths = data["prompts"].offsets().diff()
        response_lengths = data["responses"].offsets().diff()
        prompts = data["prompts"].to_padded_tensor(padding=0)
        responses = data["responses"].to_padded_tensor(padding=0)
        prompt_mask = _lengths_mask(prompt_lengths, prompts.shape[1])
        mask = resp_mask * _lengths_mask(response_lengths, responses.shape[1])
        if self._ragen_mi_model is None:
            from transformers import AutoModelForCausalLM

            path = cfg.model_path or self.config.actor_rollout_ref.model.path
            device = cfg.device or ("cuda" if torch.cuda.is_available() else "cpu")
            self._ragen_mi_model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16 if device != "cpu"
                                                                        else torch.float32).to(device)
        return mi_metrics(self._ragen_mi_model, prompts, prompt_mask, responses, mask, uids,
                          max_groups=cfg.max_groups)

    def _update_actor(self, batch, metrics):
        if self._ragen_skip_update:
            return batch
        return super()._update_actor(batch, metrics)

    def _update_critic(self, batch, metrics):
        if self._ragen_skip_update:
            return batch
        return super()._update_critic(batch, metrics)


def register_trainer_mode() -> None:
    """Register :class:`RagenSNRTrainer` as ``trainer.v1.trainer_mode=ragen_snr_sync`` (idempotent)."""
    if TRAINER_REGISTRY.get(TRAINER_MODE) is not RagenSNRTrainer:
        register_trainer(TRAINER_MODE)(RagenSNRTrainer)
