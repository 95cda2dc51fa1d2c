"""Countdown: combine the given numbers with + - * / to reach the target (single turn)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ragen_envs.base import TextAgentEnv
from ragen_envs.countdown.expression import (
    MAX_LITERAL_DIGITS,
    ExpressionError,
    arithmetic_steps,
    parse_expression,
    uses_numbers_exactly,
)
from ragen_envs.countdown.generator import CountdownConfig, generate_countdown
from ragen_envs.countdown.solver import CountdownSolver
from ragen_envs.data import Field, record_index
from ragen_envs.data.cache import BuildCache
from ragen_envs.data.loading import load_numbered_records
from ragen_envs.protocol import FORMAT_PENALTY, ActionFormat
from ragen_envs.validation import require_int, require_path

#: Reward of a correct answer, and of a well-formed answer with the right numbers but the wrong value (RAGEN).
CORRECT_REWARD = 1.0
FORMAT_REWARD = 0.1

def _nums_problem(nums: list[int]) -> str | None:
    """Why a record's `nums` cannot be played, or None. An answer writes each number as an unsigned integer
    literal of at most MAX_LITERAL_DIGITS digits (a minus sign is an operation, not part of the number), so a
    negative or longer number can never be used: even the solver's own answer (`-3 + 5`) scored 0."""
    if not 1 <= len(nums) <= 7:
        return "must hold 1 to 7 numbers"
    for i, n in enumerate(nums):
        if not 0 <= n < 10**MAX_LITERAL_DIGITS:
            return (f"element {i} is {n}: numbers must be 0 to {10**MAX_LITERAL_DIGITS - 1} (an answer writes each "
                    "as an unsigned integer)")
    return None


#: The public Countdown record: {"target": int, "nums": [int, ...]} (extra fields are kept and ignored).
COUNTDOWN_SCHEMA = {
    "target": int,
    "nums": Field(list, item_type=int, check=_nums_problem),
}


def reachable_bound(nums: list[int]) -> int:
    """An upper bound on the magnitude of every value an expression over `nums` can take:
    2^(k-1) * prod(max(n, 1)) for k numbers.

    Why: write each value in lowest terms p/q and let N(S) = 2^(|S|-1) * prod_{n in S} max(n, 1). A number
    alone has |p| <= N and q = 1. Joining parts A and B (N(A + B) = 2 N(A) N(B)): a +- b has numerator
    |p1 q2 +- p2 q1| <= 2 N(A) N(B) and denominator q1 q2; a * b and a / b have numerator and denominator
    at most N(A) N(B). So |p| and q stay within N(S), and |value| <= |p| <= N(S)."""
    bound = 2 ** (len(nums) - 1)
    for n in nums:
        bound *= max(n, 1)
    return bound


#: One validated record list per data set file version, per process (shared by the envs that read the file).
_DATASETS: BuildCache[list[dict[str, Any]]] = BuildCache()


def _load_dataset(path: Path) -> list[dict[str, Any]]:
    """The records of a data set file, read and validated once per file version (`BuildCache.get_for_file`)."""

    def build() -> list[dict[str, Any]]:
        numbered = load_numbered_records(path, COUNTDOWN_SCHEMA)
        _check_targets(path, numbered)
        return [rec for _, rec in numbered]

    return _DATASETS.get_for_file_or_build(path, build, "data set")


def _check_targets(path: Path, numbered: list[tuple[int, dict[str, Any]]]) -> None:
    """ValueError naming file, line and field for a target no expression over the record's numbers can reach
    (beyond `reachable_bound`): no answer could earn its reward. (Solving every record to find the other
    unsolvable ones costs up to a minute a record for 7 numbers; `oracle()` says None for those.)"""
    for lineno, rec in numbered:
        bound = reachable_bound(rec["nums"])
        if abs(rec["target"]) > bound:
            raise ValueError(
                f"{path}:{lineno}: field 'target': {_clip_int(rec['target'])} is beyond every value the numbers "
                f"{rec['nums']} can make (at most {bound} in magnitude), so no answer could earn the reward"
            )


def _clip_int(n: int) -> str:
    text = str(n)
    return text if len(text) <= 30 else f"{text[:12]}...({len(text)} digits)"


def score_countdown(answer: str, target: int, nums: list[int]) -> tuple[float, dict[str, Any]]:
    """RAGEN's Countdown score of one answer, with the details.

    Returns (score, details): 1.0 when the expression uses every number of `nums` exactly once and equals
    `target`; 0.1 when it uses the numbers but misses the target; 0.0 when it is not a well-formed
    expression or uses other numbers. Details: `value` (str of the exact value or None), `numbers_ok`,
    `error` (why it is not well-formed, or None).
    """
    try:
        parsed = parse_expression(answer)
    except ExpressionError as exc:
        return 0.0, {"value": None, "numbers_ok": False, "error": str(exc)}
    numbers_ok = uses_numbers_exactly(parsed, nums)
    details = {"value": str(parsed.value), "numbers_ok": numbers_ok, "error": None}
    if not numbers_ok:
        return 0.0, details
    return (CORRECT_REWARD if parsed.value == target else FORMAT_REWARD), details


class CountdownEnv(TextAgentEnv):
    """Countdown: reach the target by combining every given number exactly once with + - * /.

    ## Description
    The arithmetic puzzle of RAGEN (after TinyZero): given numbers and a target, write one arithmetic
    expression that uses each number exactly once and evaluates to the target. Intermediate fractions
    are allowed (`8 / (3 - 8 / 3)` = 24); the answer is evaluated exactly with rational arithmetic.
    Instances come from a seeded procedural generator (default; every instance is proven solvable by
    an exhaustive solver) or from a JSONL/JSON file in the public `{target, nums}` format.

    ## Action Space
    `Text` (Unicode, up to 16,384 characters): the model's raw response. The `<answer>` holds an
    arithmetic expression: integers, `+ - * /`, parentheses (Unicode `× ÷ −` accepted; a trailing
    `= <integer>` is ignored). It is parsed with an AST whitelist, never `eval`ed: names, calls,
    attributes, `**`, `//`, `%`, `~` and floats are rejected (unary `-` is accepted, as in RAGEN).

    ## Observation Space
    `Text` (Unicode, 1 to 16,384 characters): `"Target: T, nums: [a, b, c, d]"`.

    ## Starting State
    One instance drawn with `self.np_random` (generator) or one record of the data set, chosen uniformly
    with `self.np_random` (`options={"index": i}` picks record i).

    ## Rewards
    RAGEN's score, then the shared format penalty:
    - 1.0: the expression uses every number exactly once and equals the target;
    - 0.1: it uses exactly the numbers but has another value;
    - 0.0: it is a well-formed expression with other numbers (missing, extra or repeated ones);
    - -0.1 (`format_penalty`, from the base class): the response is malformed, or the answer is not a
      well-formed expression. Such an answer is an invalid action (not executed, task reward 0), so the
      total is the penalty alone; the penalty is never added to a scored answer.

    ## Episode End
    Single turn (RAGEN): the episode *terminates* after the first scored answer, and also after a
    turn without a valid answer (a forfeit, `info["forfeited"]`): no reward can follow, so a critic
    must not bootstrap, and Gymnasium's `check_env` rejects an env that truncates after one step (the
    same choice as `ragen/Bandit-v0`). `max_answers > 1` lets the agent retry after invalid answers.
    Never truncates. Stepping again is a no-op (base class).

    ## Information
    The shared keys (`action_is_valid`, `actions_executed`, `success`, `format_penalty`, `format_error`,
    `dropped_actions`, `actions_left`, `turn`; `instructions` on reset), plus `target` and `nums` on reset
    and after every step, `forfeited` after every step, and after a scored answer `score` (RAGEN's
    score), `value` (exact value as a string), `numbers_ok` and `expression_error`. `success` is True
    iff the score is 1.

    ## Arguments
    ```python
    import gymnasium as gym
    import ragen_envs
    env = gym.make("ragen/Countdown-v0", num_count=4, num_range=(1, 100), target_range=(1, 100))
    env = gym.make("ragen/Countdown-v0", dataset="countdown.jsonl")   # {target, nums} per line
    ```
    - `num_count`: 3-6 numbers, or an inclusive (low, high) range (default 4).
    - `num_range`, `target_range`: inclusive ranges (default (1, 100) each).
    - `dataset`: path of a `.jsonl` / `.json` file of `{target, nums}` records (strictly validated:
      ValueError naming file, line and field; each number 0 to 10^12 - 1, as an answer can write it; a
      target beyond every value the numbers can make, `reachable_bound`, is refused; other unsolvable
      records are not looked for at load: `oracle()` is None for them).
      Overrides the generator knobs.
    - `action_format`: "tagged" (default, `<think>` then `<answer>`), "answer" or "plain".
    - `max_answers`: turns allowed to produce a valid answer (default 1: single turn).
    - `format_penalty`: default -0.1.
    - `render_mode`: None or "ansi".

    ## Version History
    - v0: first version (RAGEN-compatible scoring; exact rational evaluation; solver-verified generator).

    ## Text format
    Observation: `Target: 24, nums: [3, 3, 8, 8]`. `info["instructions"]` states the rules and the format.

    ## Action format
    `<think> ... </think> <answer> 8 / (3 - 8 / 3) </answer>`: one expression, not split on `||`.
    """

    #: The reset options this env reads (``reset(options=...)``); any other key is refused.
    RESET_OPTIONS: ClassVar[frozenset[str] | None] = frozenset({"index"})

    ROLE: ClassVar[str] = "You are solving the Countdown number puzzle."

    def __init__(
        self,
        *,
        num_count: int | tuple[int, int] = 4,
        num_range: tuple[int, int] = (1, 100),
        target_range: tuple[int, int] = (1, 100),
        dataset: str | Path | None = None,
        max_answers: int = 1,
        action_format: ActionFormat = "tagged",
        format_penalty: float = FORMAT_PENALTY,
        render_mode: str | None = None,
    ):
        max_answers = require_int("max_answers", max_answers, 1)
        super().__init__(
            action_format=action_format,
            max_actions_per_turn=1,
            turn_limit=max_answers,  # turns without a valid answer forfeit (see Episode End)
            format_penalty=format_penalty,
            render_mode=render_mode,
            split_actions=False,
        )
        # CountdownConfig validates the ranges (ValueError naming each) before anything converts them.
        self.config = CountdownConfig(num_count=num_count, num_range=num_range, target_range=target_range)
        dataset = require_path("dataset", dataset, allow_none=True)
        self.dataset_path = None if dataset is None else Path(dataset)
        self.records = None
        if dataset is not None:
            self.records = _load_dataset(self.dataset_path)
        self.forfeited = False
        self.target = 0
        self.nums: list[int] = []
        self._solution: str | None = None
        self._score: float | None = None
        self._details: dict[str, Any] = {}

    # ------------------------------------------------------------------ hooks
    def _reset_task(self, options: dict[str, Any]) -> dict[str, Any]:
        if self.records is not None:
            index = record_index(options, len(self.records), self.np_random)
            record = self.records[index]
            self.target, self.nums = int(record["target"]), [int(n) for n in record["nums"]]
            self._solution = None  # solved lazily by oracle()
            extra = {"index": index}
        else:
            item = generate_countdown(self.np_random, self.config)
            self.target, self.nums, self._solution = item["target"], item["nums"], item["solution"]
            extra = {}
        self._score = None
        self._details = {}
        self.forfeited = False
        return {"target": self.target, "nums": list(self.nums), **extra}

    def _match_action(self, piece: str) -> str | None:
        # Any well-formed expression is an action (scored by _execute); anything else is invalid.
        try:
            parse_expression(piece)
        except ExpressionError:
            return None
        return piece

    def _execute(self, action: str) -> tuple[float, bool]:
        score, details = score_countdown(action, self.target, self.nums)
        self._score, self._details = score, details
        return score, True

    def _state_text(self) -> str:
        return f"Target: {self.target}, nums: {list(self.nums)}"

    def _task_instructions(self) -> str:
        return (
            "Using the numbers given, write one arithmetic expression that equals the target. "
            "Use each number exactly once; you may use + - * / and parentheses (fractions are fine along "
            "the way, e.g. 8 / (3 - 8 / 3) = 24). Put only the expression in the answer.\n"
            f"Reward: {CORRECT_REWARD:g} if it equals the target, {FORMAT_REWARD:g} if it uses the numbers "
            "but misses the target, 0 otherwise. "
            + (
                "You have one turn."
                if self.turn_limit == 1
                else f"You have up to {self.turn_limit} turns to give a valid answer."
            )
        )

    def _answer_example(self) -> str:
        return "(1 + 2) * 3"

    def _is_success(self) -> bool:
        return self._score == CORRECT_REWARD

    def _on_turn_limit(self) -> None:
        # Forfeit: no valid answer within the allowed turns; the task is over (see Episode End).
        self.forfeited = True

    def _step_info(self, info: dict[str, Any]) -> dict[str, Any]:
        extra: dict[str, Any] = {"target": self.target, "nums": list(self.nums), "forfeited": self.forfeited}
        if self._score is not None:
            extra.update(
                score=self._score,
                value=self._details.get("value"),
                numbers_ok=self._details.get("numbers_ok"),
                expression_error=self._details.get("error"),
            )
        return extra

    # ------------------------------------------------------------------ extras
    def oracle(self) -> list[str] | None:
        """[a correct expression] for the current instance (from the generator, or solved on demand); None
        when the instance has no solution."""
        if self._solution is None:
            self._solution = CountdownSolver(self.nums).solve(self.target)
        return None if self._solution is None else [self._solution]

    # ------------------------------------------------------------------ the warm start's demonstrator
    def oracle_step(self, reasoning: str = "full") -> tuple[str, list[str]]:
        """(the arithmetic of the oracle's expression, innermost operation first, [the expression]): e.g.
        ``2 * 5 = 10, 10 - 1 = 9.`` (`arithmetic_steps`); a ValueError when the instance has no solution."""
        answer = self.oracle()
        if not answer:
            raise ValueError(f"the Countdown instance target={self.target}, nums={self.nums} has no solution to "
                             "demonstrate")
        return arithmetic_steps(answer[0]), [answer[0]]

    def noise_answer(self, kind: str, rng: np.random.Generator) -> str:
        """The habit ``"first"``: the sum of the numbers in the order shown; ``"random"``: a random expression over
        them (each number once, random operations and nesting)."""
        nums = self.nums
        if kind == "first":
            return " + ".join(str(n) for n in nums)
        order = [str(nums[int(i)]) for i in rng.permutation(len(nums))]
        expr = order[0]
        for x in order[1:]:
            op = "+-*/"[int(rng.integers(4))]
            expr = f"({expr}) {op} {x}" if rng.random() < 0.5 else f"{x} {op} ({expr})"
        return expr
