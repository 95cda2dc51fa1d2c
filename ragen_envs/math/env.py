"""MetaMathQA-style math: answer a word or algebra problem, retry after a wrong answer (multi-turn)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ragen_envs.base import TextAgentEnv
from ragen_envs.data import Field, load_records, record_index
from ragen_envs.data.cache import BuildCache
from ragen_envs.math.answer import ANSWER_MARKER, answer_guard, extract_gold
from ragen_envs.math.checker import CHECK_TIMEOUT_S, WorkerLease, check_answer_bounded
from ragen_envs.math.generator import PROBLEM_KINDS, MathConfig, generate_problem, key_computation
from ragen_envs.protocol import FORMAT_PENALTY, ActionFormat, parse_response
from ragen_envs.spaces import MAX_OBSERVATION_CHARS
from ragen_envs.validation import require_int

INCORRECT_FEEDBACK = "Incorrect. Please think again."
CORRECT_FEEDBACK = "Correct!"


#: The longest reasoning `MathEnv.oracle_step` copies from a worked solution.
ORACLE_REASONING_CHARS = 120
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def last_sentence(worked: str, limit: int = ORACLE_REASONING_CHARS) -> str:
    """The last sentence of a worked solution before "The answer is:", clipped to `limit` characters
    (``The answer follows.`` when there is none)."""
    body = worked.rsplit(ANSWER_MARKER, 1)[0].strip()
    sentences = [x for x in re.split(r"(?<=[.!?])\s+", body) if x.strip()]
    if not sentences:
        return "The answer follows."
    text = " ".join(sentences[-1].split())
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


#: One validated record list per data set file version, per process (shared by the envs that read the file).
_DATASETS: BuildCache[list[dict[str, Any]]] = BuildCache()


def _load_dataset(path: str | Path) -> list[dict[str, Any]]:
    """The records of a data set file, read and validated once per file version (`BuildCache.get_for_file`)."""
    return _DATASETS.get_for_file_or_build(path, lambda: load_records(path, METAMATHQA_SCHEMA), "data set")


def _has_gold(response: str) -> str | None:
    """Why a record's `response` cannot be played, or None: it must hold a gold answer that an answer can
    earn. The gold is written in an `<answer>` block as a model would write it: a gold holding a tag
    (`</answer>`, `<think>`) makes the block malformed, so no response can carry it, and one holding a
    control character comes back with a space there (the parser neutralises them), which the checker is
    then asked about (only such rare golds cost a check at load). A gold past the checker's cost guards
    (`answer_guard`: longer than `MAX_ANSWER_CHARS`, huge powers, deep brackets) could not be earned either:
    every answer that equals it is refused before it is compared."""
    try:
        gold = extract_gold(response)
    except ValueError as exc:
        return str(exc)
    parsed = parse_response(f"<answer>{gold}</answer>", lambda piece: piece, action_format="answer",
                            max_actions=1, split_actions=False)
    if parsed.answer is None:
        return f"its answer {_clip(gold)} holds a tag, so no <answer> block can give it ({parsed.format_error})"
    written = parsed.answer.strip()
    refused = answer_guard(written)
    if refused is not None:  # the checker refuses such an answer before comparing it with anything
        return (f"its answer {_clip(gold)} is one the checker refuses to parse ({refused}), so no response "
                "could earn it")
    if written != gold and check_answer_bounded(written, gold).rule is None:
        return (f"its answer {_clip(gold)} holds a control character: a response gives it as {_clip(written)}, "
                "which the checker does not accept, so no response could earn it")
    return None


def _clip(text: str, n: int = 40) -> str:
    return repr(text if len(text) <= n else text[: n - 3] + "...")


#: The longest `query` a record may have: the observation shows it after the feedback line, whole
#: (`MathEnv._state_text` keeps the observation 100 characters under the space's bound).
MAX_QUERY_CHARS = MAX_OBSERVATION_CHARS - 100 - len(f"{INCORRECT_FEEDBACK}\nQuestion: ")


def _query_problem(query: str) -> str | None:
    if not query.strip():
        return "must not be empty"
    if len(query) > MAX_QUERY_CHARS:
        return (f"is {len(query)} characters; an observation shows at most {MAX_QUERY_CHARS}, so the question "
                "would be shown cut")
    return None


#: The public MetaMathQA record (extra fields such as `original_question` are kept and ignored).
METAMATHQA_SCHEMA = {
    "query": Field(str, check=_query_problem),
    "response": Field(str, check=_has_gold),
    "type": str,
}


class MathEnv(TextAgentEnv):
    """MetaMathQA-style math problems with retries: reward 1/2^attempt for the first correct answer.

    ## Description
    RAGEN's MetaMathQA task: the agent reads a math problem (a GSM-style word problem or a MATH-style
    algebra question) and answers it; a wrong answer gets "Incorrect. Please think again." and another
    try. Problems come from a seeded procedural generator (default: exact answers computed with
    sympy, difficulty knobs below) or from a file in the MetaMathQA format `{query, response, type}`,
    whose gold answer is the text after "The answer is:" in `response`. Answers are checked by
    mathematical equivalence (`ragen_envs.math.answer`: math-verify plus a few rules of ours), so
    `1/2`, `0.5`, `\\frac{1}{2}` and `50%` are all right for 1/2 and `0.49` is wrong.

    ## Action Space
    `Text` (Unicode, up to 16,384 characters): the model's raw response; the `<answer>` block holds the
    final answer (a number, fraction, expression, LaTeX or a short text), not split on `||`. Any non-empty
    answer is an action (a wrong one is just wrong).

    ## Observation Space
    `Text` (Unicode, 1 to 16,384 characters): `"Question: <problem>"`, preceded after an answer by the
    feedback line ("Incorrect. Please think again." or "Correct!").

    ## Starting State
    A problem drawn with `self.np_random` (generator) or a record chosen uniformly with `self.np_random`
    (`options={"index": i}` picks record i of the data set).

    ## Rewards
    `1 / 2**attempt` for a correct answer, where `attempt` counts the turns before it from 0 (1, 0.5,
    0.25, ...); 0 for a wrong answer. Every turn counts as an attempt, including a turn whose response
    was malformed. The base class adds the format penalty (-0.1) on a turn with a malformed response or an
    empty answer (no answer is checked on that turn); it is never added to a checked answer. An answer
    whose check does not finish within `check_timeout` seconds (or that makes the checker process fail)
    is wrong and costs the format penalty too (`info["check_error"]` says why); answers refused by the
    checker's cost guards (`ragen_envs.math.answer.answer_guard`, e.g. `(((9**64)**64)**64)**64`) are
    simply wrong. An answer must state exactly one value (`ragen_envs.math.grammar`): lead-in words, one
    math span, unit words; a hedge (`5 or 6`, `5 (4)`, two boxes), a denial or any word outside those closed
    lists is wrong.

    ## Episode End
    Terminates at the first correct answer, or when `max_turns` turns have been used (the task gives no
    more attempts, so the episode *terminates*: nothing is left to bootstrap from). Never truncates.

    ## Information
    The shared keys (`action_is_valid`, `actions_executed`, `success`, `format_penalty`, `format_error`,
    `dropped_actions`, `actions_left`, `turn`; `instructions` on reset), plus `type` and `kind` (the
    problem kind, or "dataset") on reset, and after every step `attempts` (turns used), `correct`
    (whether this turn's answer was right, None when no answer was checked), `match_rule` (which
    equivalence rule accepted it) and `check_error` (None, "refused: <why>", "timeout" or
    "checker failed: <why>"). `success` is True once the problem is solved.

    ## Arguments
    ```python
    import gymnasium as gym
    import ragen_envs
    env = gym.make("ragen/MetaMathQA-v0", kinds=("linear_equation", "change"), max_value=50, steps=3)
    env = gym.make("ragen/MetaMathQA-v0", dataset="MetaMathQA-395K.json", max_turns=3)
    ```
    - `max_turns`: answer attempts per episode (default 5).
    - `kinds`, `max_value`, `steps`: generator knobs (`ragen_envs.math.generator.MathConfig`).
    - `dataset`: `.jsonl` / `.json` file of `{query, response, type}` records (strictly validated:
      ValueError naming file, line and field; `response` must contain "The answer is:" followed by an
      answer an `<answer>` block can give: no tag, no control character the checker then misses;
      `query` must fit the observation whole, at most `MAX_QUERY_CHARS` characters).
    - `check_timeout`: hard limit on checking one answer, in seconds of CPU time (default 4; the check runs
      in a worker process that is killed when the limit passes, so it holds in any thread; CPU time, so that
      the verdict does not depend on how busy the machine is: `ragen_envs.math.checker`).
    - `action_format` ("tagged" default, "answer", "plain"), `format_penalty` (-0.1), `render_mode`
      (None or "ansi").

    ## Version History
    - v0: first version (RAGEN's retry protocol and 1/2^attempt reward; math-verify equivalence).

    ## Text format
    `Question: Solve for $x$: $3x + 2 = 5x - 4$.`; after a wrong answer
    `Incorrect. Please think again.\\nQuestion: ...`.

    ## Action format
    `<think> ... </think> <answer> 3 </answer>`; LaTeX is fine (`<answer> \\frac{7}{4} </answer>`).

    ## Training hooks
    `oracle_step()` (the gold answer after the key computation, e.g. ``3 * 4 = 12, 20 - 12 = 8.``) and
    `random_action(rng)` (a number of the question, drawn uniformly: an uninformed guess).
    """

    #: The reset options this env reads (``reset(options=...)``); any other key is refused.
    RESET_OPTIONS: ClassVar[frozenset[str] | None] = frozenset({"index"})

    ROLE: ClassVar[str] = "You are a careful math solver."

    def __init__(
        self,
        *,
        max_turns: int = 5,
        kinds: tuple[str, ...] = PROBLEM_KINDS,
        max_value: int = 20,
        steps: int = 2,
        dataset: str | Path | None = None,
        check_timeout: float = CHECK_TIMEOUT_S,
        action_format: ActionFormat = "tagged",
        format_penalty: float = FORMAT_PENALTY,
        render_mode: str | None = None,
    ):
        max_turns = require_int("max_turns", max_turns, 1)
        super().__init__(
            action_format=action_format,
            max_actions_per_turn=1,
            turn_limit=max_turns,  # the attempt limit is a task rule: it terminates (see Episode End)
            format_penalty=format_penalty,
            render_mode=render_mode,
            split_actions=False,
        )
        if (
            isinstance(check_timeout, bool)
            or not isinstance(check_timeout, (int, float))
            or not 0 < check_timeout <= 600
        ):
            raise ValueError(f"check_timeout must be a number of seconds in (0, 600], got {check_timeout!r}")
        self.check_timeout = float(check_timeout)
        self.config = MathConfig(kinds=tuple(kinds), max_value=max_value, steps=steps)
        self.dataset_path = None if dataset is None else Path(dataset)
        self.records = None if dataset is None else _load_dataset(dataset)
        self.query = ""
        self.gold = ""
        self.problem_type = ""
        self.kind = ""
        self.solved = False
        self.params: dict[str, Any] | None = None
        self.worked = ""
        self._feedback: str | None = None
        self._correct: bool | None = None
        self._rule: str | None = None
        self._check_error: str | None = None
        # The process's one checker worker (shared by every env) imports sympy while the env is set up; the
        # lease keeps it running until the env is closed or collected (`ragen_envs.math.checker`).
        self._checker = WorkerLease()

    # ------------------------------------------------------------------ hooks
    def _reset_task(self, options: dict[str, Any]) -> dict[str, Any]:
        # The checker process imports sympy while the episode starts (again in a forked vector-env worker,
        # after a check killed it, or after `close()`), so the first answer does not wait for it.
        self._checker.acquire()
        extra: dict[str, Any] = {}
        if self.records is not None:
            index = record_index(options, len(self.records), self.np_random)
            record = self.records[index]
            self.query, self.gold = record["query"], extract_gold(record["response"])
            self.problem_type, self.kind = record["type"], "dataset"
            self.params, self.worked = None, record["response"]
            extra["index"] = index
        else:
            item = generate_problem(self.np_random, self.config)
            self.query, self.gold = item["query"], item["answer"]
            self.problem_type, self.kind = item["type"], item["kind"]
            self.params, self.worked = item["params"], item["response"]
        self.solved = False
        self._feedback = None
        self._correct = None
        self._rule = None
        self._check_error = None
        return {"type": self.problem_type, "kind": self.kind, **extra}

    def _match_action(self, piece: str) -> str | None:
        # Free-form answer: any non-empty text is an answer (checked in _execute).
        piece = piece.strip()
        return piece or None

    def _execute(self, action: str) -> tuple[float, bool]:
        attempt = self._turn - 1  # the base counted this turn already; attempts are numbered from 0
        self._rule, self._check_error = check_answer_bounded(action, self.gold, self.check_timeout)
        self._correct = self._rule is not None
        if self._correct:
            self.solved = True
            self._feedback = CORRECT_FEEDBACK
            return 1.0 / 2**attempt, True
        self._feedback = INCORRECT_FEEDBACK
        hit_limit = self._check_error is not None and not self._check_error.startswith("refused")
        return (self.format_penalty_value if hit_limit else 0.0), False

    def _state_text(self) -> str:
        question = f"Question: {self.query}"
        text = question if self._feedback is None else f"{self._feedback}\n{question}"
        # A user data set may hold a huge query; the observation space is bounded.
        return text[: MAX_OBSERVATION_CHARS - 100]

    def _task_instructions(self) -> str:
        return (
            "Solve the math problem. Put only the final answer in the answer block: a number, a fraction, "
            "an expression or LaTeX (e.g. 3, 7/4, \\frac{7}{4}, x^2 + 1); no units, no working.\n"
            f'If your answer is wrong you are told "{INCORRECT_FEEDBACK}" and may try again, up to '
            f"{self.turn_limit} attempts in total. A correct answer on attempt k (counting from 0) earns "
            "1/2^k."
        )

    def _answer_example(self) -> str:
        return "\\frac{7}{4}"

    def _is_success(self) -> bool:
        return self.solved

    def _begin_step(self) -> None:
        self._correct, self._rule, self._check_error = None, None, None

    def _step_info(self, info: dict[str, Any]) -> dict[str, Any]:
        return {
            "attempts": self._turn,
            "correct": self._correct,
            "match_rule": self._rule,
            "check_error": self._check_error,
        }

    def close(self) -> None:
        """Release this env's hold on the shared checker worker (the last env closed stops it); a later
        reset takes it again."""
        checker = getattr(self, "_checker", None)  # None: __init__ refused its arguments before taking it
        if checker is not None:
            checker.release()
        super().close()

    # ------------------------------------------------------------------ extras
    def oracle(self) -> list[str]:
        """[the gold answer of the current problem] (the text after "The answer is:")."""
        return [self.gold]

    # ------------------------------------------------------------------ training hooks
    def oracle_step(self, reasoning: str = "full") -> tuple[str, list[str]]:
        """(reasoning, [the gold answer]): the key computation of the problem, then the answer.

        Generated problems of the one-line kinds: `ragen_envs.math.generator.key_computation` from the
        problem's parameters (``3 * 4 = 12, 20 - 12 = 8.``, ``7 + 3 = 10, 10 * 2 = 20.``); the other kinds
        and data set records: the last sentence of the worked solution, clipped to
        `ORACLE_REASONING_CHARS` characters.
        """
        if not self.query:
            raise RuntimeError("call reset() before asking for the oracle")
        text = key_computation(self.kind, self.params) if self.params is not None else None
        return text or last_sentence(self.worked, ORACLE_REASONING_CHARS), [self.gold]

    def random_action(self, rng: np.random.Generator) -> str:
        """An uninformed answer (the random-action hook): one of the numbers written in the question, drawn
        uniformly (`12`), or an integer from 0 to `max_value` when it has none. Draws only from `rng`."""
        if not self.query:
            raise RuntimeError("call reset() before asking for a random action")
        numbers = _NUMBER.findall(self.query)
        if not numbers:
            return str(int(rng.integers(0, self.config.max_value + 1)))
        return numbers[int(rng.integers(len(numbers)))]


__all__ = ["ANSWER_MARKER", "METAMATHQA_SCHEMA", "MathEnv", "last_sentence"]
