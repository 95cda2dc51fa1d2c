"""verl agent loop ``ragen_env_agent``: one ``ragen/`` episode per dataset row (needs verl 0.9).

Importing this module imports verl (after ``version.check_verl_version``); ``verl.register`` imports this
module, which never imports it back. verl instantiates the class by its dotted path from the agent-loop config
file (``_target_: ragen_core.integrations.verl.agent.RagenEnvAgentLoop``).

Token layout (verl's continuous-token builder renders the chat template): the prompt is the system message and
the first user turn; the response is every later token, assistant tokens with ``response_mask`` 1 and the env's
user turns (rendered by ``ct_merge_context_msg``) with 0, so the loss sees only what the policy generated. The
episode ends when the env ends it, after ``extra_info["max_turns"]`` turns, or when the response reaches
``rollout.response_length`` tokens; its return (``env.EnvEpisode.total_reward``) is the row's
``reward_score``, which verl puts on the last response token.
"""

from __future__ import annotations

import time
from typing import Any
from uuid import uuid4

from ragen_core.integrations.verl.version import check_verl_version

check_verl_version()

from verl.experimental.agent_loop.agent_loop import (  # noqa: E402
    AgentLoopBase,
    AgentLoopOutput,
    _agent_loop_registry,
    register,
)

from ragen_core.integrations.verl.core import AGENT_LOOP_NAME  # noqa: E402
from ragen_core.integrations.verl.env import episode_from_extra_info  # noqa: E402
from ragen_core.rollout import control_tokens  # noqa: E402

__all__ = ["RagenEnvAgentLoop", "register_agent_loop"]


class RagenEnvAgentLoop(AgentLoopBase):
    """Plays ``extra_info``'s env (``env.episode_from_extra_info``) against the rollout server."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.response_length = int(self.rollout_config.response_length)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        # The tokenizer's control tokens spelled in an observation stay text, as in this package's rollout.
        episode = episode_from_extra_info(kwargs.get("extra_info"), control_tokens(self))
        messages = episode.start()
        ids = list(await self.ct_build_initial_tokens(messages))
        mask: list[int] = []
        request_id = uuid4().hex  # one per episode: the server keeps the conversation's prefix cache
        gen_time = 0.0
        while True:
            t0 = time.perf_counter()
            out = await self.server_manager.generate(request_id=request_id, prompt_ids=ids,
                                                     sampling_params=sampling_params)
            gen_time += time.perf_counter() - t0
            merged, mask, _ = await self.ct_merge_assistant_token(ids, list(out.token_ids), mask)
            ids = list(merged.token_ids)
            text = self.tokenizer.decode(out.token_ids, skip_special_tokens=True)
            messages.append({"role": "assistant", "content": text})
            user = episode.step(text)
            if user is None or len(mask) >= self.response_length:
                break
            previous = list(messages)
            messages.append(user)
            merged, new_mask, _ = await self.ct_merge_context_msg(previous, messages, ids, mask)
            if len(new_mask) >= self.response_length:
                break  # no room for another answer: the episode is cut (truncated) here
            ids, mask = list(merged.token_ids), new_mask
        n_resp = len(mask)
        response_ids = ids[len(ids) - n_resp:] if n_resp else []
        prompt_ids = ids[: len(ids) - n_resp]
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response_ids[: self.response_length],
            response_mask=mask[: self.response_length],
            reward_score=float(episode.total_reward),
            num_turns=len(messages),
            metrics={"generate_sequences": gen_time},
            extra_fields={"turn_scores": list(episode.turn_rewards), "tool_rewards": [],
                          "ragen_success": float(episode.success), "ragen_turns": float(episode.turn)},
        )


def register_agent_loop() -> None:
    """Register :class:`RagenEnvAgentLoop` under ``ragen_env_agent`` in verl's agent-loop registry (idempotent)."""
    target = f"{RagenEnvAgentLoop.__module__}.{RagenEnvAgentLoop.__qualname__}"
    if _agent_loop_registry.get(AGENT_LOOP_NAME, {}).get("_target_") != target:
        register(AGENT_LOOP_NAME)(RagenEnvAgentLoop)
