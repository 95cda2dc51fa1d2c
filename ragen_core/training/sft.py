"""Supervised warm start: teach a (tiny) model the response format before RL (`warm_start.sft_episodes=N`).

Scripted episodes are played through the same rollout code as RL (same prompt layout, same context mode), with
responses written by a script instead of the model:

- ``policy="oracle"``: the env's oracle (Sokoban's solver plan, FrozenLake's best move, the bandit's better arm, a
  Countdown solution, ...), with the reasoning of the env's demonstrator: its ``oracle_step(reasoning)`` hook;
- ``policy="random"``: uniformly random valid actions (teaches the format, not the task: used by learning tests
  so that RL, not the warm start, has to find the better answer): the env's ``random_step(rng)`` hook, by default
  ``I try <action>.`` with a draw of the env's ``ACTIONS`` list, or, for an env without a fixed list (Sudoku's
  placements, MetaMathQA, Code, SearchQA, WebShop), of its ``random_action(rng) -> str`` hook. Noisy
  demonstrators draw their replacement answers from the env's ``noise_answer(kind, rng)`` hook (by default the
  same way).

The hooks are declared, with their defaults, on :class:`ragen_envs.base.TextAgentEnv` and read by
:mod:`ragen_core.training.demonstrators`; nothing here depends on the env.

Each response is ``<think> reasoning </think> <answer> actions </answer>`` where the reasoning refers to the actual
state (player / box / target coordinates and the chosen direction for Sokoban, the player and goal for FrozenLake,
the two arm names for the bandit, the arithmetic for Countdown and MetaMathQA, the fact looked up for SearchQA, the
goal attributes and options matched for WebShop, the plan of the program for Code), so that the reasoning depends
on the input (high I(X;Z), docs/science.md section 1).
The model is then fine-tuned with the mean negative log-likelihood of the generated tokens (the same loss mask as
RL: prompt and observation tokens are not trained on).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ragen_core.episode import per_rollout_options
from ragen_core.rollout import Responder, RolloutBatch, RolloutSettings, make_envs, rollout
from ragen_core.training import demonstrators
from ragen_core.training.demonstrators import FILLER_WORDS, NOISE_ACTIONS, REASONING_STYLES, TEMPLATE_ANSWERS

__all__ = [
    "oracle_response",
    "random_response",
    "scripted_responder",
    "template_parts",
    "template_reasoning",
    "demonstrator_template_parts",
    "demonstrator_templates",
    "check_demonstrator",
    "Float32Master",
    "with_float32_master",
    "collect_sft_batch",
    "sft_train",
    "warm_start",
]

def _format(reasoning: str, actions: Sequence[str]) -> str:
    return f"<think> {reasoning} </think> <answer> {' || '.join(actions)} </answer>"




def _oracle_parts(env: Any, reasoning: str) -> tuple[str, list[str]]:
    """(reasoning text, the oracle's action(s) for this turn): the env's demonstrator
    (:func:`ragen_core.training.demonstrators.oracle_turn`; a ValueError naming the env when it has none)."""
    if reasoning not in REASONING_STYLES:
        raise ValueError(f"reasoning must be one of {REASONING_STYLES}; got {reasoning!r}")
    return demonstrators.oracle_turn(env, reasoning)


def oracle_response(env: Any, reasoning: str = "full", noise: float = 0.0, noise_action: str = "random",
                    rng: np.random.Generator | None = None, dependence: float = 1.0,
                    template: str | Sequence[str] | None = None, template_answer: str = "demonstrator",
                    filler_words: int = 0, template_actions: Sequence[Sequence[str]] | None = None) -> str:
    """A response with the oracle's reasoning about the current state and, usually, the oracle's action(s).

    `reasoning` (Sokoban only; other envs have one style): ``"full"`` sentences naming the player, box and
    target cells and the move(s); ``"plan"`` the short form of Sokoban's demonstrator
    (``SokobanEnv.oracle_step``: fewer tokens, and it names the push the solver's plan leads to, which a tiny model
    learns more easily).

    A noisy demonstrator (``noise`` > 0, ``warm_start.action_noise``): with probability `noise` the answer is
    replaced, while the reasoning stays the oracle's, by ``noise_action``: ``"random"`` (a uniformly random valid
    action) or ``"first"`` (the first action of the env's list, the first arm shown, or Countdown's sum of the
    numbers in the order shown: a habit that ignores the state). A model warm-started on such episodes reads the
    state and reasons correctly, but its answer only partly follows its reasoning; with ``"first"`` and
    `noise` > 0.5 its greedy answer is the habit, the same for every state. RL then has to make the action
    follow the reasoning.

    Graded input dependence (``dependence`` q < 1, ``warm_start.reasoning_dependence``): with probability 1 - q
    the reasoning is replaced by ``template``, one fixed text (or, given a sequence, one of a few fixed texts drawn
    uniformly: templates with some diversity of their own) (:func:`template_reasoning`: the oracle's reasoning
    about a fixed reference level), while the answer stays the demonstrator's. A model fitted to such episodes
    writes state-derived reasoning with probability about q and the template otherwise: its reasoning is
    input-dependent, but off the MI ceiling (retrieval about q + (1 - q)/P at P prompts).

    A template that pays (``template_answer="oracle"``): after the template the answer is the oracle's, never the
    noise; after state-derived reasoning it keeps the action noise. The template traces then earn more reward on
    average, and the task gradient favours them: the mechanism of the collapse testbed (docs/collapse.md).

    An answer that follows the reasoning (``template_answer="reference"``): after template ``r`` the answer is
    ``template_actions[r]``, the oracle's move on the reference level that template reasons about (the move the
    written reasoning implies), never the noise; after state-derived reasoning it is the demonstrator's (the oracle's
    move at ``noise`` = 0). Reasoning about the state then earns the right move, a template earns whatever its
    reference level's move happens to be worth here: input dependence is what pays, and losing it costs success.

    Input-independent diversity (``filler_words`` = k > 0): the reasoning opens with k words drawn uniformly
    from :data:`FILLER_WORDS`, independently of the state and of the branch, so that part of the reasoning's
    entropy (k log 8 nats per trace) carries no information about the input.
    """
    if not 0.0 <= noise <= 1.0:
        raise ValueError(f"noise must be a probability in [0, 1]; got {noise!r}")
    if not 0.0 <= dependence <= 1.0:
        raise ValueError(f"dependence must be a probability in [0, 1]; got {dependence!r}")
    if dependence < 1.0 and template is None:
        raise ValueError("dependence < 1 needs the template reasoning (template_reasoning(env_id, ...))")
    if noise_action not in NOISE_ACTIONS:
        raise ValueError(f"noise_action must be one of {NOISE_ACTIONS}; got {noise_action!r}")
    if template_answer not in TEMPLATE_ANSWERS:
        raise ValueError(f"template_answer must be one of {TEMPLATE_ANSWERS}; got {template_answer!r}")
    if int(filler_words) != filler_words or filler_words < 0:
        raise ValueError(f"filler_words must be a non-negative integer; got {filler_words!r}")
    texts = [template] if isinstance(template, str) else list(template or [""])
    if template_answer == "reference" and dependence < 1.0:
        if template_actions is None or len(template_actions) != len(texts):
            raise ValueError(f"template_answer='reference' needs template_actions, one action list per template "
                             f"({len(texts)}); got {None if template_actions is None else len(template_actions)}")
    text, acts = _oracle_parts(env, reasoning)
    gen = rng if rng is not None else np.random.default_rng()
    templated = dependence < 1.0 and gen.random() >= dependence  # no draw at q = 1: old warm starts replay exactly
    if templated:  # one fixed text, or one of a few fixed texts drawn uniformly (a draw only when several)
        r = int(gen.integers(len(texts))) if len(texts) > 1 else 0
        text = str(texts[r])
        if template_answer == "reference":
            acts = [str(a) for a in template_actions[r]]
    if filler_words:
        text = " ".join([FILLER_WORDS[int(i)] for i in gen.integers(len(FILLER_WORDS), size=int(filler_words))]
                        + [text])
    if noise > 0.0 and not (templated and template_answer in ("oracle", "reference")):
        if gen.random() < noise:
            acts = [demonstrators.noise_answer(env, noise_action, gen) for _ in acts]
    return _format(text, acts)


def random_response(env: Any, rng: np.random.Generator) -> str:
    """A well-formed response with a uniformly random valid action: the env's ``random_step(rng)`` (reasoning about
    the state as the oracle's where the env writes it: Sokoban, FrozenLake, Bandit; else ``I try <action>.``)."""
    return _format(*demonstrators.random_turn(env, rng))


def template_parts(env_id: str, env_kwargs: dict[str, Any], reasoning: str = "full",
                   seed: int = 0) -> tuple[str, list[str]]:
    """The oracle's turn on one fixed reference level (``env_id`` reset with ``seed``): ``(reasoning, actions)``,
    the template a partly input-dependent demonstrator writes instead of reasoning about the state it sees, and
    the move that reasoning implies (what ``template_answer="reference"`` answers after it)."""
    env = make_envs(env_id, 1, env_kwargs)[0]
    env.reset(seed=seed)
    return _oracle_parts(env, reasoning)


def template_reasoning(env_id: str, env_kwargs: dict[str, Any], reasoning: str = "full", seed: int = 0) -> str:
    """The oracle's reasoning about one fixed reference level (``env_id`` reset with ``seed``): the template a
    partly input-dependent demonstrator writes instead of reasoning about the state it sees. Same form and
    about the same length as the state-derived text, so only its dependence on the input differs."""
    return template_parts(env_id, env_kwargs, reasoning, seed)[0]


def _reference_seeds(ws: Any) -> list[int]:
    """The reference levels of the template family: the `template_levels` seeds just below the warm-start stream."""
    return [max(ws.seed - r, 0) for r in range(1, ws.template_levels + 1)]


def demonstrator_template_parts(cfg: Any) -> list[tuple[str, list[str]]] | None:
    """``(reasoning, actions)`` of each template of the warm start's family (:func:`template_parts` on the
    reference levels); None when the demonstrator always reasons about the state."""
    ws = cfg.warm_start
    if ws.reasoning_dependence >= 1.0:
        return None
    return [template_parts(cfg.env.id, cfg.env.kwargs, ws.reasoning, seed=s) for s in _reference_seeds(ws)]


def demonstrator_templates(cfg: Any) -> list[str] | None:
    """The fixed reasoning text(s) the warm start's demonstrator writes instead of reasoning about the state
    (``warm_start.reasoning_dependence`` < 1): its reasoning about the reference levels, the seeds just below the
    warm-start stream. None when the demonstrator always reasons about the state."""
    parts = demonstrator_template_parts(cfg)
    return None if parts is None else [text for text, _ in parts]


def check_demonstrator(cfg: Any) -> None:
    """Check, before anything is made, that the env of `cfg` serves every demonstrator hook its warm start will ask
    for; a ValueError of one line, naming the ``warm_start`` key, the env id and what is missing (the hook's own
    message) when it does not. Nothing to check without a warm start (``warm_start.sft_episodes = 0``).

    Which hooks a warm start asks for: the oracle's turn (``policy = "oracle"``) and the noisy demonstrator's answer
    (``action_noise`` > 0, of kind ``noise_action``), or the random policy's turn (``policy = "random"``); the
    templates of ``reasoning_dependence`` < 1 are the oracle's turns on the reference levels, whatever the policy.
    Each is called once, through :mod:`ragen_core.training.demonstrators`, on a fresh env reset as the warm start's
    first episode is (so the env itself says what it lacks: no list of envs), with a generator of its own: the
    warm start's draws are untouched.
    """
    ws = cfg.warm_start
    if not ws.sft_episodes:
        return
    env = make_envs(cfg.env.id, 1, cfg.env.kwargs)[0]
    key = f"warm_start.policy={ws.policy}"
    try:
        options = per_rollout_options(cfg.env.per_rollout_option, [ws.seed], 1)
        env.reset(seed=ws.seed, options=options[0] if options else None)
        rng = np.random.default_rng(0)
        if ws.policy == "oracle":
            _oracle_parts(env, ws.reasoning)
            if ws.action_noise > 0:
                key = f"warm_start.noise_action={ws.noise_action} (warm_start.action_noise={ws.action_noise:g})"
                demonstrators.noise_answer(env, ws.noise_action, rng)
        else:
            demonstrators.random_turn(env, rng)
        if ws.reasoning_dependence < 1.0:
            key = f"warm_start.reasoning_dependence={ws.reasoning_dependence:g} (its templates are oracle turns)"
            demonstrator_template_parts(cfg)
    except (ValueError, NotImplementedError) as e:
        raise ValueError(f"{key} on {cfg.env.id}: {e}") from None
    finally:
        env.close()


def scripted_responder(kind: str = "oracle", rng: np.random.Generator | None = None,
                       reasoning: str = "full", noise: float = 0.0, noise_action: str = "random",
                       dependence: float = 1.0, template: str | Sequence[str] | None = None,
                       template_answer: str = "demonstrator", filler_words: int = 0,
                       template_actions: Sequence[Sequence[str]] | None = None) -> Responder:
    """A :data:`ragen_core.rollout.Responder` writing oracle or random responses (`reasoning`, `noise`,
    `noise_action`, `dependence`, `template`, `template_answer`, `filler_words`, `template_actions`: see
    :func:`oracle_response`; random responses always use the full style)."""
    if reasoning not in REASONING_STYLES:
        raise ValueError(f"reasoning must be one of {REASONING_STYLES}; got {reasoning!r}")
    gen = rng if rng is not None else np.random.default_rng(0)
    if kind == "oracle":
        return lambda envs, idx: [oracle_response(e, reasoning, noise, noise_action, gen, dependence, template,
                                                  template_answer, filler_words, template_actions) for e in envs]
    if kind == "random":
        return lambda envs, idx: [random_response(e, gen) for e in envs]
    raise ValueError(f"kind must be 'oracle' or 'random'; got {kind!r}")


def collect_sft_batch(policy: Any, envs: Sequence[Any], seeds: Sequence[int], settings: RolloutSettings,
                      kind: str = "oracle", rng: np.random.Generator | None = None) -> RolloutBatch:
    """Play one scripted episode per seed (groups of size 1) and return the token batch."""
    return rollout(policy, envs, list(seeds), 1, settings, responder=scripted_responder(kind, rng))


def _low_precision(p: torch.Tensor) -> bool:
    """A bfloat16 or float16 tensor: one whose own rounding would swallow small optimiser updates."""
    return p.dtype in (torch.bfloat16, torch.float16)


class Float32Master:
    """An optimiser stepping float32 master copies of the 16-bit (bfloat16 / float16) parameters it is given.

    AdamW on bfloat16 weights rounds each update to the weight's 8-bit mantissa: an update smaller than half a
    step of that grid is lost, every step again (at lr 1e-6 about 99% of a tiny model's weights never moved, and no
    RMSNorm weight did; docs/train.md, "Precision"). Here the optimiser built by `build` steps float32 copies of the
    16-bit parameters (float32 parameters are used as they are) with the parameters' gradients in float32, and each
    step writes the copies back, rounded, into the model. A parameter written by someone else since (the warm start,
    a checkpoint loaded into the model) is copied again before the step. ``state_dict`` adds the copies under
    ``"float32_master"``, so that a resumed run continues from them; a state dict without them (an older checkpoint)
    starts them from the weights. ``param_groups`` and ``state`` are the inner optimiser's.
    """

    def __init__(self, params: Sequence[torch.nn.Parameter], build: Any) -> None:
        self.params = list(params)
        self.master = [p.detach().float().clone() if _low_precision(p) else p for p in self.params]
        self.optimizer = build(self.master)

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.optimizer.param_groups

    @property
    def state(self) -> Any:
        return self.optimizer.state

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if p.grad is not None:
                if set_to_none:
                    p.grad = None
                else:
                    p.grad.zero_()

    @torch.no_grad()
    def _resync(self) -> None:
        for p, m in zip(self.params, self.master):
            if m is not p and not torch.equal(m.to(p.dtype), p):
                m.copy_(p)

    @torch.no_grad()
    def step(self) -> None:
        self._resync()
        for p, m in zip(self.params, self.master):
            if m is not p:
                m.grad = None if p.grad is None else p.grad.float()
        self.optimizer.step()
        for p, m in zip(self.params, self.master):
            if m is not p:
                p.copy_(m)
                m.grad = None

    def state_dict(self) -> dict[str, Any]:
        # References, as torch's own state_dict gives its moments: a clone here would hold a second float32 copy of
        # every 16-bit weight on the device while the checkpoint is written (25 GB for the 3B presets).
        return {**self.optimizer.state_dict(),
                "float32_master": [None if m is p else m.detach() for p, m in zip(self.params, self.master)]}

    @torch.no_grad()
    def load_state_dict(self, state: dict[str, Any]) -> None:
        state = dict(state)
        saved = state.pop("float32_master", None) or []
        self.optimizer.load_state_dict(state)
        for i, (p, m) in enumerate(zip(self.params, self.master)):
            if m is p:
                continue
            s = saved[i] if i < len(saved) else None
            ok = isinstance(s, torch.Tensor) and s.shape == m.shape and torch.equal(s.to(p.device, p.dtype), p)
            m.copy_(s if ok else p)  # copies that do not round to the loaded weights are not theirs


def with_float32_master(params: Sequence[torch.nn.Parameter], build: Any) -> Any:
    """``build(params)`` (an optimiser) when every parameter is float32 or wider, else :class:`Float32Master` around
    it: 16-bit weights are updated through float32 copies. float32 models get exactly ``build(params)``."""
    params = list(params)
    return Float32Master(params, build) if any(_low_precision(p) for p in params) else build(params)


def sft_train(policy: Any, batch: RolloutBatch, *, epochs: int = 2, lr: float = 1e-3, batch_size: int = 16,
              generator: torch.Generator | None = None, device: torch.device | None = None,
              schedule: str = "constant", progress: bool = False, fused: bool = False) -> dict[str, float]:
    """Fine-tune on the generated tokens of `batch`: loss = -mean log p(token) over `loss_mask` (token-mean).

    `progress`: a bar over the optimiser steps with the running loss and the ETA (stderr). `fused`
    (`model.fused_training`): AdamW's fused step (other rounding); the policy's layers follow its own
    `fused_training`.

    `schedule`: ``"constant"`` (default) keeps `lr` throughout; ``"linear"`` warms the learning rate up over
    the first 5% of the optimiser steps and decays it linearly to 0 at the last one (what the demo uses: a
    tiny model trained for a few hundred steps ends better fitted than with a constant rate).

    Raises NonFiniteError, before the optimiser step, at a step whose loss or gradient norm is NaN or inf
    (:func:`_check_finite`).

    Returns ``sft/loss_first``, ``sft/loss_last`` (the mean over the first / last epoch's optimiser steps of the
    step's loss) and ``sft/mean_token_prob``: the mean over the last epoch's steps of the step's token-mean
    probability of the generated tokens, sum_t m_t exp(log p_t) / sum_t m_t (taken before the step's update).
    """
    if schedule not in ("linear", "constant"):
        raise ValueError(f"schedule must be 'linear' or 'constant'; got {schedule!r}")
    model = policy.model
    opt = with_float32_master([p for p in model.parameters() if p.requires_grad],
                              lambda params: torch.optim.AdamW(params, lr=lr, fused=fused or None))
    n = batch.input_ids.shape[0]
    total = epochs * ((n + batch_size - 1) // batch_size)
    warmup = max(1, total // 20)

    def lr_at(k: int) -> float:  # k = 0-based optimiser step
        if schedule == "constant":
            return lr
        return lr * min((k + 1) / warmup, max(0.0, (total - k) / max(total - warmup, 1)))

    k_step = 0
    dev = device or policy.device
    epoch_losses: list[float] = []
    probs: list[float] = []
    bar = None
    if progress:
        from ragen_core.progress import progress_bar

        bar = progress_bar(total, desc="warm start (SFT)", unit="step")
    model.train()
    for _ in range(epochs):
        perm = torch.randperm(n, generator=generator)
        losses_e = []
        for s in range(0, n, batch_size):
            idx = perm[s : s + batch_size]
            am = batch.attention_mask[idx]
            t = int(am.sum(dim=1).max())
            ids, am, lm = batch.input_ids[idx, :t].to(dev), am[:, :t].to(dev), batch.loss_mask[idx, :t].to(dev)
            imgs = [batch.images[int(i)] for i in idx] if batch.images is not None else None
            out = policy.forward_logprobs(ids, am, images=imgs, score_mask=lm != 0)
            m = (lm != 0).float()
            loss = -(out.logprobs.float() * m).sum() / m.sum().clamp(min=1)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            _check_finite(loss, grad_norm, k_step, total, _, epochs, lr)  # before the step: weights stay finite
            for group in opt.param_groups:
                group["lr"] = lr_at(k_step)
            opt.step()
            k_step += 1
            losses_e.append(loss.item())
            if bar is not None:
                bar.update(1)
                bar.set_postfix(epoch=f"{_ + 1}/{epochs}", loss=f"{losses_e[-1]:.3f}")
            if _ == epochs - 1:
                probs.append(float((out.logprobs.detach().float().exp() * m).sum() / m.sum().clamp(min=1)))
        epoch_losses.append(float(np.mean(losses_e)))
    if bar is not None:
        bar.close()
    model.eval()
    return {"sft/loss_first": epoch_losses[0], "sft/loss_last": epoch_losses[-1],
            "sft/mean_token_prob": float(np.mean(probs)) if probs else float("nan")}


def _check_finite(loss: torch.Tensor, grad_norm: torch.Tensor, k: int, total: int, epoch: int, epochs: int,
                  lr: float) -> None:
    """NonFiniteError (a ConfigError: ``ragen train`` prints its one line) when the loss or the gradient norm of
    optimiser step `k` (0-based, of `total`; in 0-based `epoch` of `epochs`) is NaN or inf, before that step is
    taken: a learning rate that diverged (``warm_start.lr``) would otherwise train on into NaN weights. Reads the
    two scalars (one device sync); changes no number."""
    if bool(torch.isfinite(loss.detach()) & torch.isfinite(grad_norm.detach())):
        return
    from ragen_core.training.checkpoint import NonFiniteError

    raise NonFiniteError(f"the warm start diverged at its optimiser step {k + 1} of {total} (epoch {epoch + 1} of "
                         f"{epochs}): loss = {float(loss.detach()):g}, gradient norm = {float(grad_norm):g}; that step "
                         f"was not taken and nothing was saved; lower warm_start.lr (now {lr:g})")


def warm_start(policy: Any, cfg: Any, device: torch.device | None = None) -> dict[str, float]:
    """Run the `[warm_start]` section of a TrainConfig: scripted episodes, then `sft_train`."""
    ws = cfg.warm_start
    t0 = time.perf_counter()
    settings = RolloutSettings.from_config(cfg.rollout)
    chunk = 64
    envs = make_envs(cfg.env.id, min(chunk, ws.sft_episodes), cfg.env.kwargs)
    # Levels come from the warm-start seed stream; the demonstrator's noise and the SFT order also depend on
    # run.seed, so that training seeds differ from the warm start on.
    rng = np.random.default_rng([ws.seed, cfg.run.seed])
    seeds = [ws.seed + i for i in range(ws.sft_episodes)]
    batches = []
    success = []
    parts = demonstrator_template_parts(cfg)
    template = template_actions = None
    if parts is not None:
        template = parts[0][0] if ws.template_levels == 1 else [text for text, _ in parts]
        template_actions = [acts for _, acts in parts]
    progress = bool(getattr(getattr(cfg, "run", None), "progress", False))
    bar = None
    if progress:
        from ragen_core.progress import progress_bar

        bar = progress_bar(len(seeds), desc="warm start (demonstrations)", unit="episode")
    for s in range(0, len(seeds), chunk):
        part = seeds[s : s + chunk]
        opts = per_rollout_options(cfg.env.per_rollout_option, part, 1)
        responder = scripted_responder(ws.policy, rng, ws.reasoning, ws.action_noise, ws.noise_action,
                                       ws.reasoning_dependence, template, ws.template_answer, ws.filler_words,
                                       template_actions)
        b = rollout(policy, envs, part, 1, settings, responder=responder,
                    reset_options=opts)
        batches.append(b)
        success.append(b.success.float())
        if bar is not None:
            bar.update(len(part))
    if bar is not None:
        bar.close()
    batch = _concat(batches)
    t_collect = time.perf_counter() - t0
    gen = torch.Generator().manual_seed(ws.seed + 1_000_003 * cfg.run.seed)
    stats = sft_train(policy, batch, epochs=ws.epochs, lr=ws.lr, batch_size=ws.batch_size, generator=gen,
                      device=device, schedule=ws.schedule, progress=progress,
                      fused=bool(getattr(getattr(cfg, "model", None), "fused_training", False)))
    stats.update({"sft/episodes": float(ws.sft_episodes), "sft/script_success": float(torch.cat(success).mean()),
                  "sft/tokens": float((batch.loss_mask != 0).sum()), "perf/sft_collect_s": t_collect,
                  "perf/sft_s": time.perf_counter() - t0})
    return stats


def _concat(batches: Sequence[RolloutBatch]) -> RolloutBatch:
    """Rows of several batches in one (only the fields `sft_train` reads are merged)."""
    if len(batches) == 1:
        return batches[0]
    t = max(b.input_ids.shape[1] for b in batches)

    def pad(x: torch.Tensor, value: float) -> torch.Tensor:
        return torch.nn.functional.pad(x, (0, t - x.shape[1]), value=value)

    first = batches[0]
    pad_id = int(first.input_ids[0, -1]) if first.attention_mask[0, -1] == 0 else 0
    imgs = None
    if any(b.images is not None for b in batches):
        imgs = [im for b in batches for im in (b.images or [[] for _ in range(b.input_ids.shape[0])])]
    return RolloutBatch(
        input_ids=torch.cat([pad(b.input_ids, pad_id) for b in batches]),
        attention_mask=torch.cat([pad(b.attention_mask, 0) for b in batches]),
        loss_mask=torch.cat([pad(b.loss_mask, 0) for b in batches]),
        old_logprobs=torch.cat([pad(b.old_logprobs, 0.0) for b in batches]),
        token_rewards=torch.cat([pad(b.token_rewards, 0.0) for b in batches]),
        turn_index=torch.cat([pad(b.turn_index, -1) for b in batches]),
        row_traj=torch.cat([b.row_traj for b in batches]),
        row_group=torch.cat([b.row_group for b in batches]),
        traj_group=torch.cat([b.traj_group for b in batches]),
        returns=torch.cat([b.returns for b in batches]),
        turn_rewards=torch.cat([b.turn_rewards for b in batches]),
        success=torch.cat([b.success for b in batches]),
        format_valid=torch.cat([b.format_valid for b in batches]),
        num_turns=torch.cat([b.num_turns for b in batches]),
        response_length=torch.cat([b.response_length for b in batches]),
        groups=sum(b.groups for b in batches),
        group_size=1,
        trajectories=[t_ for b in batches for t_ in b.trajectories],
        images=imgs,
    )
