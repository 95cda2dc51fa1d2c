"""`VLLMPolicy`: rollouts through vLLM, training through transformers (optional extra `vllm`, GPU only).

Status: written against vLLM's documented offline API (`vllm.LLM`, `vllm.SamplingParams`,
`LLM.generate` with token prompts, `LLM.apply_model`, `LLM.reset_prefix_cache`); its logic is tested
with a stand-in engine (tests/policy/test_policy_vllm.py). It has never been run with a real vLLM on a
real GPU here (vLLM needs CUDA and cannot be installed on these machines); expect to adjust
engine arguments to the vLLM version you install.

Design. A `VLLMPolicy` holds two copies of the weights, colocated on one GPU:

- `trainer`: an `HFPolicy` (the `torch.nn.Module` the optimiser updates); `model`, `tokenizer`,
  `encode_chat`, `forward_logprobs` and `device` are delegated to it, so scoring and gradients are
  exactly those of `HFPolicy`.
- `engine`: a `vllm.LLM` built from the same directory, used only by `generate`.

Weight sync: before every `generate`, if any trainer parameter was modified in place since the last
sync (PyTorch's per-tensor `_version` counters, which every optimiser step bumps), the trainer's
`state_dict()` is pushed into the engine with the model's documented `load_weights(iterable of
(name, tensor))`, run inside the worker via `LLM.apply_model` (older vLLM: through
`llm_engine.model_executor.driver_worker.model_runner.model`), then the prefix cache is reset so no
KV computed with old weights is reused. `apply_model` runs in-process only when the engine core is
in-process: `from_pretrained` sets `VLLM_ENABLE_V1_MULTIPROCESSING=0` (unless you set it), as TRL's
colocated mode does. Tensor parallelism > 1 is not supported by this simple sync.

Sampling: `SamplingParams(temperature, top_p, max_tokens, stop, include_stop_str_in_output=True,
logprobs=0, seed)`; `logprobs=0` returns the log-prob of the sampled token only. The engine is
created with `logprobs_mode="processed_logprobs"` (vLLM >= 0.10.2) so those log-probs are of the
sampling distribution after temperature / top-p, matching `Generation.response_logprobs`; older
vLLM returns the raw model log-probs (equal when temperature = 1 and top_p = 1). One seed per prompt
is drawn from the given `torch.Generator`, so a seeded generator gives reproducible requests.
Greedy = temperature 0. EOS tokens at the end of a response are removed (with their log-probs).

Images: not supported by this backend yet (ValueError); vision envs use `HFPolicy` with the tiny
vision model.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any

import torch

from ragen_core.policy.base import Generation, Policy, PolicyOutput, SamplingRequest
from ragen_core.policy.hf import HFPolicy

_INSTALL_HINT = "VLLMPolicy needs vLLM and a CUDA GPU: pip install 'ragen2[vllm]' (or pip install vllm)"


def _import_vllm():
    try:
        import vllm
    except ImportError as exc:  # vllm is an optional extra
        raise ImportError(f"{_INSTALL_HINT}; importing vllm failed: {exc}") from exc
    return vllm


def _weights_version(model: torch.nn.Module) -> int:
    """Sum of the parameters' in-place modification counters (changes after any optimiser step)."""
    return sum(int(p._version) for p in model.parameters())


class VLLMPolicy(Policy):
    """`Policy` whose `generate` runs on a vLLM engine, synced from `trainer.model` (module docstring).

    Args:
        trainer: the `HFPolicy` being trained (same checkpoint as the engine).
        engine: a `vllm.LLM` (or any object with the same `generate` / `apply_model` /
            `reset_prefix_cache` methods, e.g. a test stand-in).
        sampling_params_cls: the `SamplingParams` class (default: `vllm.SamplingParams`).
        auto_sync: push the trainer's weights before `generate` when they changed.
    """

    def __init__(
        self, trainer: HFPolicy, engine: Any, *, sampling_params_cls: Any = None, auto_sync: bool = True
    ):
        self.trainer = trainer
        self.engine = engine
        self._sampling_params_cls = sampling_params_cls
        self.auto_sync = auto_sync
        self._synced_version: int | None = _weights_version(trainer.model)  # the engine loaded the same files
        self.sync_count = 0

    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike,
        *,
        device: str | torch.device = "cuda",
        dtype: str | torch.dtype | None = "bfloat16",
        gpu_memory_utilization: float = 0.4,
        seed: int = 0,
        engine_kwargs: dict[str, Any] | None = None,
        **hf_kwargs: Any,
    ) -> VLLMPolicy:
        """Build the trainer (`HFPolicy.from_pretrained`) and a vLLM engine on the same directory.

        `gpu_memory_utilization` is the fraction of GPU memory vLLM may take (leave room for training);
        `engine_kwargs` go to `vllm.LLM` unchanged (e.g. `max_model_len`, `enforce_eager`).
        """
        if not torch.cuda.is_available() or not str(device).startswith("cuda"):
            raise ValueError(
                f"VLLMPolicy is GPU only (device='cuda'), got device={device!r} "
                f"with torch.cuda.is_available()={torch.cuda.is_available()}"
            )
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        vllm = _import_vllm()
        trainer = HFPolicy.from_pretrained(path, device=device, dtype=dtype, **hf_kwargs)
        kwargs: dict[str, Any] = dict(
            model=str(path),
            tokenizer=str(path),
            dtype=str(trainer.model.dtype).removeprefix("torch."),
            gpu_memory_utilization=gpu_memory_utilization,
            seed=seed,
            enable_prefix_caching=True,
            logprobs_mode="processed_logprobs",
        )
        kwargs.update(engine_kwargs or {})
        try:
            engine = vllm.LLM(**kwargs)
        except TypeError:
            # vLLM < 0.10.2 has no logprobs_mode (log-probs are then the raw model ones, see docstring)
            kwargs.pop("logprobs_mode", None)
            engine = vllm.LLM(**kwargs)
        return cls(trainer, engine, sampling_params_cls=vllm.SamplingParams)

    # --------------------------------------------------------------------------- delegated parts
    @property
    def model(self) -> torch.nn.Module:
        return self.trainer.model

    @property
    def tokenizer(self) -> Any:
        return self.trainer.tokenizer

    @property
    def device(self) -> torch.device:
        return self.trainer.device

    def encode_chat(
        self, messages: Sequence[dict[str, str]], add_generation_prompt: bool = True
    ) -> list[int]:
        return self.trainer.encode_chat(messages, add_generation_prompt)

    def forward_logprobs(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **kwargs: Any
    ) -> PolicyOutput:
        return self.trainer.forward_logprobs(input_ids, attention_mask, **kwargs)

    def pad(self, sequences: Sequence[Sequence[int]], side: str = "right"):
        return self.trainer.pad(sequences, side=side)

    # ------------------------------------------------------------------------------ weight sync
    def sync_weights(self, force: bool = False) -> bool:
        """Push the trainer's weights into the engine if they changed (or `force`); True if pushed."""
        version = _weights_version(self.trainer.model)
        if not force and version == self._synced_version:
            return False
        weights = [(name, t.detach()) for name, t in self.trainer.model.state_dict().items()]
        self._load_into_engine(weights)
        reset = getattr(self.engine, "reset_prefix_cache", None)
        if callable(reset):
            reset()
        self._synced_version = version
        self.sync_count += 1
        return True

    def _load_into_engine(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        weights = list(weights)
        apply_model = getattr(self.engine, "apply_model", None)
        if callable(apply_model):
            apply_model(lambda model: model.load_weights(weights))
            return
        try:  # vLLM 0.6-0.8 (V0 engine): the model object of the driver worker
            model = self.engine.llm_engine.model_executor.driver_worker.model_runner.model
        except AttributeError as exc:
            raise RuntimeError(
                "cannot reach the vLLM model to load weights: the engine has neither apply_model() nor "
                "llm_engine.model_executor.driver_worker.model_runner.model"
            ) from exc
        model.load_weights(weights)

    # ------------------------------------------------------------------------------- generation
    def _sampling_params(self, **kwargs: Any) -> Any:
        cls = self._sampling_params_cls
        if cls is None:
            cls = self._sampling_params_cls = _import_vllm().SamplingParams
        return cls(**kwargs)

    def _sample(self, prompts: list[list[int]], request: SamplingRequest) -> list[Generation]:
        """`Policy.generate` after its checks (the contract of `HFPolicy`); see the module docstring for the vLLM
        mapping."""
        if request.images is not None and any(len(x or []) for x in request.images):
            raise ValueError("VLLMPolicy does not take images yet; use HFPolicy with a vision model")
        if self.auto_sync:
            self.sync_weights()

        generator, greedy = request.generator, request.greedy
        seed_device = generator.device if generator is not None else torch.device("cpu")
        seeds = torch.randint(0, 2**31 - 1, (len(prompts),), generator=generator, device=seed_device).tolist()
        params = [
            self._sampling_params(
                n=1,
                temperature=0.0 if greedy else float(request.temperature),
                top_p=1.0 if greedy else float(request.top_p),
                max_tokens=int(request.max_new_tokens),
                stop=list(request.stop) or None,
                include_stop_str_in_output=True,
                logprobs=0,
                seed=int(seed),
                skip_special_tokens=True,
            )
            for seed in seeds
        ]
        outputs = self.engine.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        eos = self.trainer.eos_token_ids
        gens = []
        for prompt, out in zip(prompts, outputs):
            comp = out.outputs[0]
            ids = list(comp.token_ids)
            lps = [self._token_logprob(step, tok) for step, tok in zip(comp.logprobs or [], ids)]
            if len(lps) != len(ids):
                raise RuntimeError(
                    f"vLLM returned {len(lps)} log-probs for {len(ids)} tokens; was logprobs=0 set?"
                )
            while ids and ids[-1] in eos:  # the protocol excludes EOS from the response
                ids.pop()
                lps.pop()
            reason = "length" if comp.finish_reason == "length" else "stop"
            gens.append(
                Generation(
                    text=comp.text,
                    prompt_ids=prompt,
                    response_ids=ids,
                    response_logprobs=lps,
                    finish_reason=reason,
                )
            )
        return gens

    @staticmethod
    def _token_logprob(step: Any, token: int) -> float:
        """vLLM gives, per position, a mapping token id -> Logprob (with `.logprob`) or a float."""
        entry = step[token]
        return float(getattr(entry, "logprob", entry))
