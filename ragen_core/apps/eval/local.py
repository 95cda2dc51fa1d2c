"""The in-process path: a model loaded here plays the episodes through ``ragen_core.rollout.rollout``, batched.

The same call as a training run's validation (``trainer.validation_rollout``): ``rollout(policy, envs, seeds, G,
settings, generator=..., reset_options=per_rollout_options(...))`` plays P groups x G episodes in lock-step with one
batched ``policy.generate`` per turn, under ``torch.no_grad``. ``--workers W`` sets the batch: ``P = max(1, W // G)``
seeds per call, cut from the evaluation's first seed (:func:`batches`). Greedy decoding (``--temperature 0``) gives
the validation's episodes exactly; sampling draws from a ``torch.Generator`` seeded with the first seed of each
batch, so an evaluation is reproducible for the same ``--workers``, an interrupted and resumed one included (its
batches are the uninterrupted one's).

The model (:class:`ModelSource`): ``tiny`` (the built-in tiny model; its vision build for an env with images, as
``trainer.policy_path`` chooses), a transformers folder, or a run folder, whose policy is its ``ragen export``
(``RUN_DIR/model``, written on first use and again when the run has trained further, as ``ragen diagnose --model
RUN_DIR`` does) loaded with the run's dtype, lean-forward and thread settings. The exported folder is also what the
MI proxies score with (``ragen_core.apps.diagnose.mi_report``).

``rollout()`` keeps each turn's validity flags but not the env's ``info``; :class:`InfoRecorder` wraps each env to
keep it for ``episodes.jsonl``.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch

from ragen_core.apps.eval.plan import EnvPlan, Key
from ragen_core.apps.eval.records import TurnRecord, episode_record
from ragen_core.episode import per_rollout_options
from ragen_core.rollout import make_envs, rollout
from ragen_envs.contract import observes_images

__all__ = ["InfoRecorder", "LocalModel", "ModelSource", "batches", "run_local"]


class InfoRecorder(gym.Wrapper):
    """An env that keeps the ``info`` of each step since its last reset (``infos``); an exception is recorded as
    ``{"env_error": ...}`` and re-raised (``ragen_core.episode.safe_step`` contains it, as in training)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.infos: list[dict[str, Any]] = []

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self.infos = []
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any):
        try:
            out = self.env.step(action)
        except Exception as exc:
            self.infos.append({"env_error": f"{type(exc).__name__}: {exc}"[:500]})
            raise
        self.infos.append(out[4])
        return out


@dataclass
class LocalModel:
    """A loaded policy, the folder it came from (what the MI proxies load), its weights hash and whether it takes
    images."""

    policy: Any
    folder: Path
    sha: str
    vision: bool


@dataclass
class ModelSource:
    """``MODEL`` of the command line: ``tiny``, a transformers folder or a run folder (module docstring).

    ``run_config`` is the run's config (its model section sets dtype, lean forward and threads)."""

    model: str
    device: str = "cpu"
    run_config: Any = None
    _loaded: dict[str, LocalModel] = field(default_factory=dict)

    def folder_for(self, env_id: str, env_kwargs: dict[str, Any]) -> Path:
        """The model folder that plays `env_id`."""
        from ragen_core.apps.export import exported_model, is_run_dir
        from ragen_core.policy import TINY_BASE, default_tiny_base_dir, default_tiny_model_dir

        if self.model == TINY_BASE:  # text only: built once per machine (about half an hour), then cached
            if observes_images(env_id, env_kwargs):
                raise ValueError(f"tiny-base is a text model; {env_id} shows images (evaluate tiny-vision or a "
                                 "vision model folder on it)")
            return default_tiny_base_dir()
        if self.model in ("tiny", "tiny-vision"):
            return default_tiny_model_dir(vision=self.model == "tiny-vision" or observes_images(env_id, env_kwargs))
        if is_run_dir(self.model):
            return exported_model(self.model)
        return Path(self.model)

    def load(self, env_id: str, env_kwargs: dict[str, Any]) -> LocalModel:
        """The policy for `env_id` (loaded once per folder)."""
        from ragen_core.policy import load_policy
        from ragen_core.policy.identity import weights_sha256
        from ragen_core.training.trainer import TORCH_DEFAULT_THREADS, cpu_threads, resolve_device

        folder = self.folder_for(env_id, env_kwargs)
        key = str(folder.resolve())
        if key not in self._loaded:
            cfg = self.run_config
            device = resolve_device(self.device)
            policy = load_policy(folder, device=device, dtype=cfg.model.dtype if cfg is not None else None)
            if cfg is not None:
                policy.fast = cfg.model.fast_forward
                if cfg.model.fused_training:
                    policy.fused_training = _fused_training_here(policy, device, cfg)
            # auto that is not one thread is torch's default, set again: an earlier model may have changed it
            threads = cpu_threads(cfg.run.threads if cfg is not None else 0, policy.model, device)
            torch.set_num_threads(threads or TORCH_DEFAULT_THREADS)
            policy.model.eval()
            self._loaded[key] = LocalModel(policy, folder, weights_sha256(policy.model),
                                           getattr(policy, "image_token", None) is not None)
        return self._loaded[key]


def _fused_training_here(policy: Any, device: Any, cfg: Any) -> bool:
    """Whether a run trained with `model.fused_training` is evaluated through its fused layers, as its own validations
    were (they round differently from the operator path); where they cannot run here, a warning says why and the
    operator path scores it."""
    from ragen_core.policy.fast_qwen2 import fused_training_blocker

    why = fused_training_blocker(policy, device, cfg.model.fast_forward)
    if why is not None:
        warnings.warn(f"the run trained with model.fused_training = true, which cannot run here ({why}): evaluating "
                      "through the operator path, whose float rounding differs from the run's validations",
                      stacklevel=3)
        return False
    return True


def _turns(traj: Any, infos: Sequence[dict[str, Any]]) -> list[TurnRecord]:
    return [TurnRecord(response=t.response_text, reward=t.reward,
                       info=infos[j] if j < len(infos) else {"env_error": t.env_error},
                       finish_reason=t.finish_reason, format_valid=t.format_valid, action_valid=t.action_valid,
                       prompt_tokens=len(t.prompt_ids), completion_tokens=len(t.response_ids))
            for j, t in enumerate(traj.turns)]


def batches(seeds: range, wanted: set[int], per_call: int) -> list[range]:
    """The batches of `seeds` that hold a `wanted` seed: ``seeds`` cut into runs of `per_call` from its start.

    The cut depends on the evaluation's seed range only, never on which seeds are still missing: a resumed
    evaluation replays exactly the batches an uninterrupted one plays (the same seeds, so the same sampler seed and
    batch), so sampling gives the same episodes, whichever episodes the interruption left out."""
    starts = sorted({seeds.start + (s - seeds.start) // per_call * per_call for s in wanted if s in seeds})
    return [range(b, min(b + per_call, seeds.stop)) for b in starts]


@torch.no_grad()
def run_local(source: ModelSource, plans: dict[str, EnvPlan], keys: Sequence[Key], group_size: int, workers: int,
              on_record: Callable[[dict[str, Any]], None], seeds: range | None = None) -> None:
    """Play `keys` in process, env after env, ``max(1, workers // G)`` seeds per batched rollout; each finished
    line goes to `on_record` as its batch ends. The batches are cut from the evaluation's `seeds` (default: the
    range of the keys' seeds) by :func:`batches`: a batch with some episodes already recorded (a resumed
    evaluation) is played whole and only its missing episodes are recorded."""
    g = int(group_size)
    per_call = max(1, int(workers) // g)
    pending = set(keys)
    if seeds is None:
        seeds = range(min(k.seed for k in keys), max(k.seed for k in keys) + 1) if keys else range(0)
    for env_id, plan in plans.items():
        chunks = batches(seeds, {k.seed for k in keys if k.env == env_id}, per_call)
        if not chunks:
            continue
        model = source.load(env_id, plan.env_kwargs)
        tok = model.policy.tokenizer
        envs = [InfoRecorder(e) for e in make_envs(env_id, max(map(len, chunks)) * g, plan.env_kwargs)]
        for chunk in map(list, chunks):
            gen = torch.Generator(device="cpu").manual_seed(int(chunk[0]))
            opts = per_rollout_options(plan.per_rollout_option, chunk, g)
            t0 = time.perf_counter()
            batch = rollout(model.policy, envs, chunk, g, plan.settings, generator=gen, reset_options=opts)
            # Episodes of one batch play in lock-step: each one's latency is the batch's wall time.
            dt = time.perf_counter() - t0
            for i, traj in enumerate(batch.trajectories):
                key = Key(env_id, int(traj.seed), int(traj.index_in_group))
                if key not in pending:
                    continue
                prompt = tok.decode(list(traj.turns[0].prompt_ids), skip_special_tokens=False)
                on_record(episode_record(key, turns=_turns(traj, envs[i].infos), messages=traj.messages,
                                         success=traj.success, prompt=prompt, model=model.sha, latency_s=dt))
