"""``episodes.jsonl``: one JSON line per finished episode, append-only, keyed by (env id, seed, sample).

A line (every field always present; docs/eval.md, "Output files"):

- ``env``, ``seed``, ``sample`` (0..G-1): the key (:class:`~ragen_core.apps.eval.plan.Key`);
- ``group`` (``"<env>@<seed>"``), ``reward`` (the episode return; NaN for a failed episode), ``prompt`` and
  ``response`` (the first turn's), ``model`` (the weights hash of an in-process model, else None): the fields of
  ``ragen diagnose``, which reads this file as it is;
- ``success`` (None for a failed episode), ``num_turns``, ``invalid_actions`` and ``format_failures`` (turns),
  ``tokens`` (``{"prompt": sum, "completion": sum}``, None where a server did not say), ``latency_s``,
  ``finish_reasons`` (one per turn);
- ``messages``: the whole chat ([system,] user, assistant, ...; an image shown as ``<image>``), ``turns``: per turn
  ``response``, ``reward``, ``info`` (the env's, made JSON-safe), ``finish_reason``, ``format_valid``,
  ``action_valid``, ``prompt_tokens``, ``completion_tokens``, ``latency_s``;
- ``failed``: None, or ``{"reason": ..., "detail": ...}`` for an episode the model could not finish (the reasons:
  :data:`FAILURE_REASONS`); it is recorded and counted apart, never in the success rate.

Why append-only: an interrupted evaluation keeps every finished line, and ``--resume`` plays only the keys the file
lacks, so no episode is lost or played twice. A line cut short by a crash (no trailing newline) is removed before
anything is appended (:meth:`EpisodeLog.open`); a complete line that is not an episode record, or a second line of
the same episode, is refused with its line number (the file was edited or written by two evaluations at once, and
counting such a file would be wrong).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ragen_core.apps.eval.plan import Key

__all__ = ["EPISODES", "FAILURE_REASONS", "EpisodeLog", "TurnRecord", "episode_record", "failed_record", "json_safe",
           "read_episodes"]

#: The episodes file of an evaluation folder.
EPISODES = "episodes.jsonl"
#: Why an episode can fail (``failed.reason``): the server said the prompt is longer than the model's context; the
#: server refused the request otherwise (HTTP 400/413/422); the reply was not a chat completion with text; the server
#: said it generated more tokens than ``max_tokens`` asked for.
FAILURE_REASONS = ("context_length", "bad_request", "malformed_reply", "over_max_tokens")
#: Arrays in an env's info longer than this are recorded by their shape only (a picture is no log entry).
_MAX_ARRAY = 64


def json_safe(value: Any) -> Any:
    """`value` as plain JSON: numpy scalars -> Python numbers, small arrays -> lists, large ones -> a shape note,
    tuples and sets -> lists, anything else unknown -> ``str``. NaN stays NaN (Python's json writes it)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        if value.size > _MAX_ARRAY:
            return f"<array {value.dtype} {list(value.shape)}>"
        return json_safe(value.tolist())
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [json_safe(v) for v in value]
    return str(value)


@dataclass
class TurnRecord:
    """One turn of one episode, as a line's ``turns`` entry."""

    response: str
    reward: float
    info: dict[str, Any]
    finish_reason: str
    format_valid: bool
    action_valid: bool
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"response": self.response, "reward": float(self.reward), "info": json_safe(self.info),
                "finish_reason": self.finish_reason, "format_valid": bool(self.format_valid),
                "action_valid": bool(self.action_valid), "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "latency_s": self.latency_s}


def _sum_or_none(values: Iterable[int | None]) -> int | None:
    vals = list(values)
    return None if not vals or any(v is None for v in vals) else int(sum(v for v in vals if v is not None))


def episode_record(key: Key, *, turns: list[TurnRecord], messages: list[dict[str, Any]], success: bool,
                   prompt: str, model: str | None, latency_s: float,
                   failed: dict[str, str] | None = None) -> dict[str, Any]:
    """One line of ``episodes.jsonl`` (module docstring). A `failed` episode keeps the turns it played, with
    ``reward`` NaN (``ragen diagnose`` leaves NaN groups out of the variance) and ``success`` None."""
    reward = math.nan if failed else float(sum(t.reward for t in turns))
    return {
        "env": key.env, "seed": key.seed, "sample": key.sample, "group": f"{key.env}@{key.seed}",
        "reward": reward, "success": None if failed else bool(success),
        "prompt": prompt, "response": turns[0].response if turns else "", "model": model,
        "num_turns": len(turns),
        "invalid_actions": sum(not t.action_valid for t in turns),
        "format_failures": sum(not t.format_valid for t in turns),
        "tokens": {"prompt": _sum_or_none(t.prompt_tokens for t in turns),
                   "completion": _sum_or_none(t.completion_tokens for t in turns)},
        "latency_s": float(latency_s), "finish_reasons": [t.finish_reason for t in turns],
        "messages": json_safe(messages), "turns": [t.to_json() for t in turns],
        "failed": failed,
    }


def failed_record(key: Key, reason: str, detail: str, *, turns: list[TurnRecord], messages: list[dict[str, Any]],
                  prompt: str, latency_s: float) -> dict[str, Any]:
    """:func:`episode_record` of an episode that failed for `reason` (one of :data:`FAILURE_REASONS`)."""
    if reason not in FAILURE_REASONS:
        raise ValueError(f"reason must be one of {FAILURE_REASONS}; got {reason!r}")
    return episode_record(key, turns=turns, messages=messages, success=False, prompt=prompt, model=None,
                          latency_s=latency_s, failed={"reason": reason, "detail": detail[:500]})


def record_key(line: dict[str, Any]) -> Key:
    return Key(str(line["env"]), int(line["seed"]), int(line["sample"]))


#: The fields the summary reads from every line.
_NEEDED = ("env", "seed", "sample", "group", "reward", "success", "prompt", "response", "model", "num_turns",
           "tokens", "latency_s", "turns", "failed")


def _record_problem(line: Any) -> str | None:
    """Why a parsed line is not an episode record (one phrase), or None."""
    if not isinstance(line, dict):
        return f"a JSON {type(line).__name__}, not an object"
    missing = [k for k in _NEEDED if k not in line]
    if missing:
        return f"no {', '.join(missing)}"
    try:
        record_key(line)
    except (TypeError, ValueError) as e:
        return f"its key is not (env, seed, sample) ({e})"
    if line["failed"] is not None and not (isinstance(line["failed"], dict) and "reason" in line["failed"]):
        return "its 'failed' is neither null nor {\"reason\": ...}"
    return None


def read_episodes(path: str | Path) -> list[dict[str, Any]]:
    """The complete lines of an episodes file (a last line cut short by a crash is left out)."""
    p = Path(path)
    if not p.is_file():
        return []
    out = []
    for text in p.read_text(encoding="utf-8").split("\n"):
        if not text.strip():
            continue
        try:
            out.append(json.loads(text))
        except json.JSONDecodeError:
            continue  # only the cut last line can be partial (see EpisodeLog.open); it is played again
    return out


@dataclass
class EpisodeLog:
    """The append-only ``episodes.jsonl`` of an evaluation folder: the keys already in it, and :meth:`write`."""

    path: Path
    done: set[Key] = field(default_factory=set)

    @classmethod
    def open(cls, path: str | Path) -> EpisodeLog:
        """Read the keys already written; cut off a last line that a crash left without its newline.

        Raises:
            ValueError: a complete line that is not an episode record, or that repeats an episode, named by its line
                number (a crash only ever cuts the last line: anything else was done to the file).
        """
        p = Path(path)
        log = cls(p)
        if p.is_file():
            raw = p.read_bytes()
            if raw and not raw.endswith(b"\n"):
                p.write_bytes(raw[: raw.rfind(b"\n") + 1])
                raw = raw[: raw.rfind(b"\n") + 1]
            first: dict[Key, int] = {}
            for number, text in enumerate(raw.decode("utf-8", errors="replace").split("\n"), start=1):
                if not text.strip():
                    continue
                try:
                    line = json.loads(text)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{p} line {number} is not JSON ({e}): remove or repair it, then resume") from None
                problem = _record_problem(line)
                if problem is not None:
                    raise ValueError(f"{p} line {number} is not an episode record ({problem}): remove or repair it, "
                                     "then resume")
                key = record_key(line)
                if key in first:
                    raise ValueError(f"{p} line {number} repeats episode {key.env} seed {key.seed} sample "
                                     f"{key.sample} of line {first[key]} (two evaluations wrote this file?): remove "
                                     "one, then resume")
                first[key] = number
            log.done = set(first)
        return log

    def write(self, line: dict[str, Any]) -> None:
        """Append one line and flush it (a finished episode survives any later interruption)."""
        key = record_key(line)
        if key in self.done:
            raise RuntimeError(f"episode {key} is already in {self.path}")  # a bug: resume plays only what is missing
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
            f.flush()
        self.done.add(key)
