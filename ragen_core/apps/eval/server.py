"""The server path: episodes played through any OpenAI-compatible chat-completions server, `--workers` at a time.

Each episode is a :class:`ragen_core.episode.ChatEpisode` (the code training plays envs with: system prompt,
observation text, turn limit, format reminder, parsing and rewards), laid out by the env's
:class:`~ragen_core.apps.eval.plan.EnvPlan` through :func:`ragen_core.rollout.chat_episode`. Every turn the
pending prompt is re-rendered from text (``ChatEpisode.prompt_messages``: the whole history in "full" context, the
last N turns in "window:N", none in "single_turn") and sent as one ``/chat/completions`` request; the server applies
the model's chat template. The reply becomes the response text (:func:`reply_text`) and goes to the env.

Transport: the ``openai`` package's ``AsyncOpenAI`` client, one per evaluation, with its retries (exponential backoff
from 0.5 s, at most 8 s, with jitter; a ``Retry-After`` header is obeyed up to the client's limit,
:func:`_max_retry_after`) on connection errors, timeouts, 408, 409, 429 and 5xx, ``--max-retries`` times, and a
per-request ``--timeout`` (each wait for the connection or for data).
A whole request, retries and their waits included, is cut off after :meth:`ServerClient.deadline` seconds: a server
that keeps the connection open and trickles bytes without ever finishing its reply is a timeout too, never a hang.
What happens after the retries (:func:`classify`):

- the server cannot be reached, keeps timing out, rate-limiting (429) or failing (5xx), or refuses the API key or
  the model: :class:`ServerError`, which stops the evaluation with one line; finished episodes are kept and
  ``--resume`` plays the rest;
- the request is refused for this episode (HTTP 400/413/422: a prompt longer than the model's context, ...), the
  reply is not a chat completion (not JSON, no choices, no text: :func:`parse_completion`) or the server says it
  generated more tokens than ``max_tokens`` asked for: :class:`EpisodeFailure`, recorded in ``episodes.jsonl`` with
  its reason and counted apart;
- a request with images refused with 400/422: :class:`ImagesRefused`, and the env is skipped with that reason.

Sampling: temperature 0 is sent for greedy decoding, else ``--temperature`` and ``--top-p``. ``transformers serve``
samples only when asked with ``do_sample`` (it applies a request's temperature to the model's generation config,
which is greedy unless it says otherwise), so when the model list shows it (entries with a ``status`` field: its
fingerprint) a sampled request also carries ``generation_config = {"do_sample": true}``. ``--extra-body JSON`` adds
any other server-specific field to every request (vLLM's ``top_k``, ``chat_template_kwargs``, ...).

Images (vision ids): each observation's picture goes as a PNG data URL (``{"type": "image_url"}`` content part) in
the user message that shows it; a text-only server may ignore the part (transformers serve does) or refuse it.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ragen_core.apps.eval.plan import EnvPlan, Key
from ragen_core.apps.eval.records import TurnRecord, episode_record, failed_record
from ragen_core.episode import rollout_option
from ragen_core.policy.hf import FALLBACK_GENERATION_PROMPT, FALLBACK_TEMPLATE, cut_at_stop
from ragen_core.rollout import chat_episode, make_envs, parse_context

__all__ = ["IMAGE_SENTINEL", "EpisodeFailure", "ImagesRefused", "Reply", "ServerClient", "ServerError", "classify",
           "openai_messages", "parse_completion", "play_episode", "reply_text", "run_server"]

#: The placeholder :class:`ChatEpisode` puts where an observation's image goes (a private-use character: no env
#: prints it), replaced by an ``image_url`` content part in the request and by ``<image>`` in the record.
IMAGE_SENTINEL = "\ue000image\ue000"
#: How a server says a prompt does not fit the model (vLLM, SGLang, transformers serve, llama.cpp, OpenAI).
_CONTEXT_RE = re.compile(r"context length|context window|maximum context|max_model_len|too long|prompt has \d+ "
                         r"tokens|exceeds|n_ctx|maximum number of tokens", re.IGNORECASE)


def _max_retry_after() -> float:
    """The longest ``Retry-After`` the installed openai client waits for (its ``MAX_RETRY_AFTER_DELAY``: 120 s in
    3.x, which does not retry a request whose server asks for longer; 60 s in the 1.x releases, which wait their
    own backoff instead)."""
    try:
        from openai import _constants
    except ImportError:
        return 60.0
    return float(getattr(_constants, "MAX_RETRY_AFTER_DELAY", 60.0))


class ServerError(Exception):
    """The evaluation cannot go on with this server (one line for the user); finished episodes are kept."""


class EpisodeFailure(Exception):
    """This episode cannot be finished (``reason`` in ``records.FAILURE_REASONS``); it is recorded and counted
    apart."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


class ImagesRefused(Exception):
    """The server refused a request that carried images: the env is skipped with this reason."""


@dataclass
class Reply:
    """One chat completion: the response text and what the server said about it."""

    text: str
    finish_reason: str
    prompt_tokens: int | None
    completion_tokens: int | None
    latency_s: float


# ---------------------------------------------------------------------------------------------- messages
def _data_url(image: np.ndarray) -> str:
    """A uint8 HxWx3 picture as a PNG data URL."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.asarray(image, dtype=np.uint8)).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def openai_messages(messages: Sequence[dict[str, str]], images: Sequence[np.ndarray]) -> list[dict[str, Any]]:
    """Chat messages with :data:`IMAGE_SENTINEL` placeholders -> OpenAI messages: a message that shows images gets a
    list of content parts (text, ``image_url`` with a data URL, text, ...), in order; the others keep their text.

    Raises:
        ValueError: the placeholders and `images` differ in number.
    """
    out: list[dict[str, Any]] = []
    queue = list(images)
    for m in messages:
        content = m["content"]
        if IMAGE_SENTINEL not in content:
            out.append({"role": m["role"], "content": content})
            continue
        pieces = content.split(IMAGE_SENTINEL)
        parts: list[dict[str, Any]] = []
        for i, piece in enumerate(pieces):
            if i:
                if not queue:
                    raise ValueError("more image placeholders than images")
                parts.append({"type": "image_url", "image_url": {"url": _data_url(queue.pop(0))}})
            if piece:  # the text around the picture, verbatim
                parts.append({"type": "text", "text": piece})
        out.append({"role": m["role"], "content": parts})
    if queue:
        raise ValueError(f"{len(queue)} image(s) without a placeholder")
    return out


def shown(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as a record shows them: the image placeholder written ``<image>``."""
    return [{**m, "content": str(m["content"]).replace(IMAGE_SENTINEL, "<image>")} for m in messages]


def plain_prompt(messages: Sequence[dict[str, str]]) -> str:
    """The prompt as text for a record's ``prompt`` field: without the server's chat template, the layout
    ``HFPolicy`` uses for a tokenizer without one (``"{role}: {content}\\n\\n"`` per message, then
    ``"assistant: "``)."""
    text = "".join(FALLBACK_TEMPLATE.format(role=m["role"], content=m["content"]) for m in shown(messages))
    return text + FALLBACK_GENERATION_PROMPT


def _get(obj: Any, name: str) -> Any:
    """Field `name` of a reply part: a JSON object (a dict, as :func:`parse_completion` returns it) or a pydantic
    object, its extension fields (``model_extra``) included; None when absent."""
    if isinstance(obj, dict):
        return obj.get(name)
    value = getattr(obj, name, None)
    return (getattr(obj, "model_extra", None) or {}).get(name) if value is None else value


def _extra(obj: Any, *names: str) -> Any:
    """The first non-None of `names` on a reply part (:func:`_get`)."""
    for name in names:
        value = _get(obj, name)
        if value is not None:
            return value
    return None


def _says(obj: Any, names: Sequence[str]) -> bool:
    """Whether the reply part carries any of the (extension) fields `names`, even as null."""
    fields = obj if isinstance(obj, dict) else (getattr(obj, "model_extra", None) or {})
    return any(k in fields for k in names)


def _content_text(content: Any, finish_reason: Any) -> str | None:
    """A message's ``content`` as text: a string as it is; a list of content parts (the OpenAI form some servers
    answer in) as its text parts joined in order; None when there is no text.

    Raises:
        EpisodeFailure: ``malformed_reply`` for content of any other kind (a number, an object).
    """
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [p if isinstance(p, str) else p.get("text") for p in content
                 if isinstance(p, str) or (isinstance(p, dict) and p.get("type", "text") == "text")]
        texts = [t for t in texts if isinstance(t, str)]
        return "".join(texts) if texts else None
    raise EpisodeFailure("malformed_reply", f"the reply's content is a JSON {type(content).__name__}, not text "
                                            f"(finish reason {finish_reason!r})")


def reply_text(message: Any, choice: Any, stop: Sequence[str]) -> str:
    """The response text of one reply, as the env must see it (docs/eval.md, "What a server returns").

    - Reasoning a server returns apart (``reasoning_content``: transformers serve for Qwen-family models, vLLM and
      SGLang with a reasoning parser; ``reasoning``: newer vLLM, OpenRouter) is put back in front as
      ``<think>REASONING</think>`` when the content has no ``<think>`` of its own: the env's parser needs the block.
      The whitespace at the block's edges is what the server left (it strips it); the parser ignores it.
    - A stop string the server cut off (the OpenAI convention; transformers serve keeps it) is put back when the
      server says it matched it (vLLM's ``stop_reason``, SGLang's ``matched_stop``); a server that says neither
      gets it back when the reply stopped ("stop") inside an unclosed ``<answer>`` block.
    - The text is cut right after the first stop string, as the in-process sampler cuts it
      (:func:`ragen_core.policy.hf.cut_at_stop`).

    Message and choice are JSON objects (:func:`parse_completion`) or the openai package's objects. A content given
    as a list of content parts is its text parts joined.

    Raises:
        EpisodeFailure: ``malformed_reply`` when the reply has no text at all, or content that is not text.
    """
    finish = _get(choice, "finish_reason")
    content = _content_text(_get(message, "content"), finish)
    reasoning = _extra(message, "reasoning_content", "reasoning")
    reasoning = reasoning if isinstance(reasoning, str) else None  # only text can be put back as the block
    if content is None and not reasoning:
        raise EpisodeFailure("malformed_reply", f"the reply has no text (finish reason {finish!r})")
    text = content or ""
    if reasoning and "<think>" not in text:
        text = f"<think>{reasoning}</think>{text}"
    matched = _extra(choice, "stop_reason", "matched_stop")
    says = _says(choice, ("stop_reason", "matched_stop"))
    if stop and not any(s in text for s in stop):
        if isinstance(matched, str) and matched in stop:
            text += matched
        elif not says and finish == "stop" and "</answer>" in stop \
                and text.count("<answer>") > text.count("</answer>"):
            text += "</answer>"
    return cut_at_stop(text, stop) if stop else text


def _count(value: Any) -> int | None:
    """A token count a server reported: a non-negative integer, else None (not said)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def parse_completion(body: bytes) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """A chat completion's HTTP body -> (its first choice, its ``usage`` object or None), checked for the shape the
    response text needs: a JSON object whose ``choices`` is a non-empty list of objects. Bytes that are not UTF-8
    are decoded as U+FFFD, as the in-process path decodes tokens (``errors="replace"``).

    Raises:
        EpisodeFailure: ``malformed_reply`` naming what is wrong (not JSON, not an object, no choices).
    """
    text = body.decode("utf-8", errors="replace")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        start = " ".join(text[:80].split())
        raise EpisodeFailure("malformed_reply", f"the reply is not JSON ({e}): {start!r}") from None
    if not isinstance(data, dict):
        raise EpisodeFailure("malformed_reply", f"the reply is a JSON {type(data).__name__}, not a chat completion")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise EpisodeFailure("malformed_reply", "the reply has no choices")
    if not isinstance(choices[0], dict):
        raise EpisodeFailure("malformed_reply", f"the reply's first choice is a JSON {type(choices[0]).__name__}, "
                                                "not an object")
    usage = data.get("usage")
    return choices[0], usage if isinstance(usage, dict) else None


# ---------------------------------------------------------------------------------------------- errors
def classify(exc: BaseException, url: str, model: str, retries: int, timeout: float,
             has_images: bool = False) -> Exception:
    """What an ``openai`` exception (raised after the client's retries) means here: a :class:`ServerError`
    (stop), an :class:`EpisodeFailure` (record it) or :class:`ImagesRefused` (skip the env). The message is one
    line."""
    import openai

    tries = f"after {retries + 1} tries" if retries else "with retries off"
    detail = _status_detail(exc)
    if isinstance(exc, openai.APITimeoutError):
        return ServerError(f"requests to {url} timed out {tries} (--timeout {timeout:g} s): raise --timeout or "
                           "lower --workers")
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc.__context__
        why = " ".join((f"{type(cause).__name__}: {cause}" if cause else str(exc)).split())
        return ServerError(f"cannot reach the server at {url} ({why[:200]}) {tries}")
    wait, limit = _retry_after(exc), _max_retry_after()
    if wait is not None and wait > limit and isinstance(exc, openai.APIStatusError):
        # The client does not wait that long (3.x does not retry at all): "kept answering ... after N tries" would
        # hide what the server asked for.
        return ServerError(f"the server answered HTTP {exc.status_code} and asked to retry after {wait:.0f} s "
                           f"(Retry-After), longer than the client waits ({limit:.0f} s): try again later or lower "
                           f"--workers ({detail})")
    if isinstance(exc, openai.RateLimitError):
        return ServerError(f"the server kept answering 429 (rate limit) {tries}: lower --workers ({detail})")
    if isinstance(exc, (openai.AuthenticationError, openai.PermissionDeniedError)):
        return ServerError(f"the server refused the API key (HTTP {exc.status_code}: {detail}); "
                           "pass the variable that holds it with --api-key-env")
    if isinstance(exc, openai.NotFoundError):
        return ServerError(f"the server at {url} has no model {model!r} or no /chat/completions "
                           f"(HTTP 404: {detail})")
    if isinstance(exc, openai.APIStatusError):
        code = exc.status_code
        if code >= 500 or code in (408, 409):
            return ServerError(f"the server kept failing {tries} (HTTP {code}: {detail})")
        if code in (400, 413, 422):
            if _CONTEXT_RE.search(detail):
                return EpisodeFailure("context_length", f"HTTP {code}: {detail}")
            if has_images:
                return ImagesRefused(f"the server refused a request with images (HTTP {code}: {detail})")
            return EpisodeFailure("bad_request", f"HTTP {code}: {detail}")
        return ServerError(f"the server refused the request (HTTP {code}: {detail})")
    if isinstance(exc, openai.APIResponseValidationError):
        return EpisodeFailure("malformed_reply", f"the reply is not a chat completion: {exc}")
    if isinstance(exc, openai.OpenAIError):
        return EpisodeFailure("malformed_reply", f"{type(exc).__name__}: {exc}")
    return exc if isinstance(exc, Exception) else RuntimeError(str(exc))


def _retry_after(exc: BaseException) -> float | None:
    """The seconds an error response's ``Retry-After`` header asks to wait (a number or an HTTP date), else None."""
    import email.utils

    response = getattr(exc, "response", None)
    value = response.headers.get("retry-after") if response is not None else None
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_tz(value)
        return None if when is None else float(email.utils.mktime_tz(when) - time.time())
    except (TypeError, ValueError, OverflowError):
        return None


def _status_detail(exc: BaseException) -> str:
    """The server's own error message (``detail`` / ``error.message`` of its JSON body), on one line."""
    body = getattr(exc, "body", None)
    msg: Any = None
    if isinstance(body, dict):
        msg = body.get("detail") or body.get("message") or body.get("error")
        if isinstance(msg, dict):
            msg = msg.get("message") or msg
    text = str(msg if msg is not None else getattr(exc, "message", exc))
    return " ".join(text.split())[:300]


# ---------------------------------------------------------------------------------------------- the client
class ServerClient:
    """One ``AsyncOpenAI`` client for an evaluation: :meth:`preflight`, then :meth:`complete` per turn."""

    def __init__(self, base_url: str, model: str, api_key: str, *, timeout: float, max_retries: int,
                 extra_body: dict[str, Any] | None = None):
        import openai

        self.url, self.model = base_url, model
        self.timeout, self.max_retries = float(timeout), int(max_retries)
        self.extra_body = dict(extra_body or {})
        #: "transformers" when the model list has transformers serve's fingerprint (module docstring), else "".
        self.flavour = ""
        self.client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, timeout=self.timeout,
                                         max_retries=self.max_retries)

    def _fail(self, exc: BaseException, has_images: bool = False) -> Exception:
        return classify(exc, self.url, self.model, self.max_retries, self.timeout, has_images)

    @property
    def deadline(self) -> float | None:
        """The most seconds one request may take, retries and their waits included: each try twice ``--timeout``
        (the wait for the reply, then its body), each wait between tries at most the client's longest
        ``Retry-After`` (:func:`_max_retry_after`). The
        openai client's timeout bounds each wait for data, not a reply that trickles in; this bounds the whole.
        None (no bound) with an infinite ``--timeout``."""
        total = (self.max_retries + 1) * 2 * self.timeout + self.max_retries * _max_retry_after()
        return total if math.isfinite(total) else None

    async def _call(self, request: Any) -> Any:
        """Await one client request within :attr:`deadline`; past it, :class:`ServerError`."""
        try:
            return await asyncio.wait_for(request, self.deadline)
        except asyncio.TimeoutError:
            raise ServerError(f"a request to {self.url} did not finish within {self.deadline:g} s (the server keeps "
                              f"the connection open without completing its reply; --timeout {self.timeout:g} s "
                              "bounds each wait for data): check the server, or raise --timeout") from None

    async def preflight(self) -> None:
        """Check, before anything is played, that the server answers and serves the model: the model list when it
        names the model, else one 1-token request. Raises :class:`ServerError` (one line) otherwise."""
        import openai

        listed: list[str] | None = None
        try:
            raw = await self._call(self.client.models.with_raw_response.list())
            entries = _model_entries(raw.http_response.content)
            listed = None if entries is None else [str(m.get("id")) for m in entries]
            if any(isinstance(m.get("status"), dict) for m in entries or ()):
                self.flavour = "transformers"
        except (openai.NotFoundError, openai.UnprocessableEntityError, openai.BadRequestError):
            listed = None  # a server without /models: the request below decides
        except openai.OpenAIError as exc:
            raise self._fail(exc) from None
        if listed is not None and self.model in listed:
            return
        try:
            # The raw response: its body is not parsed (a reply the client cannot parse is the episodes' concern).
            await self._call(self.client.chat.completions.with_raw_response.create(
                model=self.model, max_tokens=1, messages=[{"role": "user", "content": "ping"}]))
        except openai.OpenAIError as exc:
            # 404 (vLLM, OpenAI) or 400 (transformers serve: "Server is pinned to ...") for a model it lacks.
            if isinstance(exc, openai.APIStatusError) and exc.status_code in (400, 404, 422):
                names = f" (it lists: {', '.join(listed[:8])})" if listed else ""
                # Neither /models nor /chat/completions there: most often a URL without its API path.
                path = (f"; it has no {self.url.rstrip('/')}/models either: does --base-url lack the API path "
                        "(e.g. /v1)?" if listed is None and exc.status_code == 404 else "")
                raise ServerError(f"the server at {self.url} does not serve model {self.model!r}{names}: "
                                  f"{_status_detail(exc)}{path}") from None
            raise self._fail(exc) from None

    async def complete(self, messages: list[dict[str, Any]], plan: EnvPlan, has_images: bool) -> Reply:
        """One turn: the chat completion of `messages` with the plan's sampling and stop strings."""
        import openai

        s = plan.settings
        kwargs: dict[str, Any] = {"model": self.model, "messages": messages, "max_tokens": s.max_new_tokens,
                                  "temperature": plan.temperature, "top_p": 1.0 if s.greedy else s.top_p}
        if s.stop:
            kwargs["stop"] = list(s.stop)
        extra = dict(self.extra_body)
        if self.flavour == "transformers" and not s.greedy and "generation_config" not in extra:
            extra["generation_config"] = json.dumps({"do_sample": True})  # else it decodes greedily at any temperature
        if extra:
            kwargs["extra_body"] = extra
        t0 = time.perf_counter()
        try:
            # The raw response, parsed here (parse_completion): the client's own parsing lets a body that is not
            # JSON or not UTF-8 escape as a bare exception and takes any shape of JSON without a check.
            raw = await self._call(self.client.chat.completions.with_raw_response.create(**kwargs))
        except openai.OpenAIError as exc:
            raise self._fail(exc, has_images) from None
        latency = time.perf_counter() - t0
        choice, usage = parse_completion(raw.http_response.content)
        text = reply_text(choice.get("message"), choice, s.stop)
        completion_tokens = _count((usage or {}).get("completion_tokens"))
        if completion_tokens is not None and completion_tokens > s.max_new_tokens:
            # Training never sees a longer response; the env must not score one (the server ignores max_tokens).
            raise EpisodeFailure("over_max_tokens", f"the server generated {completion_tokens} tokens, more than "
                                                    f"the {s.max_new_tokens} asked for (max_tokens)")
        return Reply(text=text, finish_reason=str(choice.get("finish_reason") or "stop"),
                     prompt_tokens=_count((usage or {}).get("prompt_tokens")), completion_tokens=completion_tokens,
                     latency_s=latency)

    async def close(self) -> None:
        await self.client.close()


def _model_entries(body: bytes) -> list[dict[str, Any]] | None:
    """The entries of a ``/models`` listing (objects with an ``id``), or None when the body is not one."""
    try:
        data = json.loads(body.decode("utf-8", errors="replace"))
    except json.JSONDecodeError:
        return None
    entries = data.get("data") if isinstance(data, dict) else None
    return [m for m in entries if isinstance(m, dict) and "id" in m] if isinstance(entries, list) else None


# ---------------------------------------------------------------------------------------------- one episode
async def play_episode(client: ServerClient, env: Any, plan: EnvPlan, key: Key, group_size: int,
                       vision: bool) -> dict[str, Any]:
    """Play the episode `key` on `env` through the server; returns its ``episodes.jsonl`` line (a failed
    episode's line when the server refused it; :class:`ServerError` and :class:`ImagesRefused` propagate).

    The env is reset with the key's seed and the per-rollout option of sample ``key.sample`` of a group of
    `group_size` (``ragen_core.episode.rollout_option``: the formula training uses); env steps run in a thread so
    that a slow env (the code sandbox) does not hold up the other episodes' requests.
    """
    ep = chat_episode(env, plan.settings, image_token=IMAGE_SENTINEL if vision else None)
    window = parse_context(plan.settings.context)
    opts = rollout_option(plan.per_rollout_option, key.seed, key.sample, group_size)
    t0 = time.perf_counter()
    await asyncio.to_thread(ep.reset, key.seed, opts)
    turns: list[TurnRecord] = []
    prompt = ""
    while not ep.done:
        msgs, images = ep.prompt_messages(len(ep.history) if window is None else window)
        if not turns:
            prompt = plain_prompt(msgs)
        try:
            reply = await client.complete(openai_messages(msgs, images), plan, has_images=bool(images))
        except EpisodeFailure as f:
            return failed_record(key, f.reason, f.detail, turns=turns, messages=shown(ep.messages), prompt=prompt,
                                 latency_s=time.perf_counter() - t0)
        step = await asyncio.to_thread(ep.step, reply.text)
        turns.append(TurnRecord(response=reply.text, reward=step.reward, info=step.info,
                                finish_reason=reply.finish_reason, format_valid=step.format_valid,
                                action_valid=step.action_valid, prompt_tokens=reply.prompt_tokens,
                                completion_tokens=reply.completion_tokens, latency_s=reply.latency_s))
    return episode_record(key, turns=turns, messages=shown(ep.messages), success=ep.success, prompt=prompt,
                          model=None, latency_s=time.perf_counter() - t0)


# ---------------------------------------------------------------------------------------------- the pool
async def run_server(client: ServerClient, plans: dict[str, EnvPlan], keys: Sequence[Key], group_size: int,
                     workers: int, vision: dict[str, bool], on_record: Callable[[dict[str, Any]], None],
                     on_refused: Callable[[str, str], None]) -> None:
    """Play `keys` with `workers` episodes in flight; each finished line goes to `on_record` at once (from the event
    loop: one writer). An env whose images the server refuses goes to `on_refused(env_id, reason)` and its other
    episodes are skipped. The first :class:`ServerError` cancels the other workers and propagates."""
    await client.preflight()
    queue = list(keys)[::-1]  # pop() from the end: keys in order
    refused: set[str] = set()

    async def worker() -> None:
        envs: dict[str, Any] = {}  # one env per id and worker, reused across its episodes (as training does)
        while queue:
            key = queue.pop()
            if key.env in refused:
                continue
            if key.env not in envs:
                plan = plans[key.env]
                envs[key.env] = (await asyncio.to_thread(make_envs, key.env, 1, plan.env_kwargs))[0]
            try:
                line = await play_episode(client, envs[key.env], plans[key.env], key, group_size, vision[key.env])
            except ImagesRefused as exc:
                if key.env not in refused:
                    refused.add(key.env)
                    on_refused(key.env, str(exc))
                continue
            on_record(line)

    tasks = [asyncio.ensure_future(worker()) for _ in range(max(1, min(workers, len(keys))))]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            if task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await client.close()
