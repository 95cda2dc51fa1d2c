"""`ragen/Code-v0`: write a Python program that passes hidden tests (DeepCoder / TACO style)."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ragen_envs import protocol
from ragen_envs.base import TextAgentEnv
from ragen_envs.code import sandbox
from ragen_envs.code.tasks import (
    CodeTask,
    CodeTaskConfig,
    CodeTest,
    answer_passes,
    generate_task,
    load_tasks,
    plan_sentence,
)
from ragen_envs.data import record_index
from ragen_envs.spaces import fit_observation
from ragen_envs.validation import require_bool, require_int, require_path

# The first fenced block, ```python / ```py / ``` (the language tag is optional). The blanks after the tag
# belong to the tag's group: two adjacent `[ \t]*` (with the tag left out) split a run of blanks in
# quadratically many ways, which made a fence followed by 16,000 blanks and no newline cost 0.4 s per step.
_FENCE = re.compile(r"```[ \t]*(?:(?:python3?|py)[ \t]*)?\n(.*?)```", re.IGNORECASE | re.ASCII | re.DOTALL)
_SHOW_CHARS = 400  # how much of a failing test the repair feedback shows per field
# A test is started only with at least this much of the submission's wall budget left (a run's own
# start-up takes ~50 ms, so less could not finish anyway).
_MIN_RUN_SECONDS = 0.05


def extract_program(answer: str) -> str | None:
    """The program inside an answer: the first ```python fenced block if there is one, else the text.

    Returns None when nothing but whitespace remains.
    """
    m = _FENCE.search(answer)
    code = m.group(1) if m else answer
    if not m and code.strip().startswith("```"):
        # An unterminated fence: drop the opening line, keep the code.
        code = code.strip().split("\n", 1)[1] if "\n" in code.strip() else ""
    code = code.strip("\n")
    return code if code.strip() else None


def _clip(text: str, n: int = _SHOW_CHARS) -> str:
    return text if len(text) <= n else text[:n] + f"... [{len(text) - n} more characters]"


class CodeEnv(TextAgentEnv):
    """Code generation with hidden tests, judged in a sandbox.

    ## Description

    The agent reads a programming problem and answers with a Python 3 program. The program runs in
    the sandbox of `ragen_envs.code.sandbox` (a separate process tree: network, PID, IPC and mount
    namespaces, a minimal read-only root holding only the interpreter, an unprivileged per-run uid, a
    seccomp filter, per-process and whole-run (cgroup) limits; see that module and docs/security.md)
    against the task's hidden tests. Whatever the program does or prints, a test gets a verdict: no
    answer makes `step` raise. Tasks are either stdin/stdout programs (TACO /
    DeepCoder / Codeforces style) or a function to define (LeetCode style, called with JSON
    arguments). This is RAGEN's code-generation testbed; the env never executes model text in its
    own process.

    Each task has hidden tests (they judge: reward and success) and public tests (the statement's
    example; the tests repair feedback may reveal). A hidden test is never shown and never repeats a
    public test's input, so neither a program that memorises the example nor a lookup table of
    revealed tests earns anything for what it memorised. Generated tasks are checked at generation: a
    constant answer, the identity and such lookup tables each fail at least one hidden test
    (`ragen_envs.code.tasks.passing_standins`), and so does every wrong reading of the statement its
    family lists (the other rule variants, the textbook version, a missing branch, an off-by-one, ...:
    `ragen_envs.code.tasks.wrong_readings`), so a program that ignores the task's parameters does not
    succeed.

    Tasks come from a procedural generator (default: ten parameterised families such as sum of
    multiples, reverse words, FizzBuzz variants, maximum subarray, gcd/lcm, rotate, palindromes,
    prime counting; expected outputs computed by an in-process reference solver) or from a data
    set file in the public formats (`dataset=path`, see `ragen_envs.code.tasks`).

    ## Action Space

    The model's raw response (`spaces.Text`, any Unicode). The `<answer>` holds the program, either
    bare or in a fenced block (```` ```python ... ``` ````); the whole answer is one action (it is not
    split on `||`). A response without a well-formed `<answer>` costs the format penalty and runs
    nothing.

    ## Observation Space

    Text (`spaces.Text`, at most 16,384 characters): the problem statement with one example test
    and, after a submission, the judgement ("k/n hidden tests passed" and, with `multi_turn_repair`,
    the first failing *public* test: input, expected and actual output or the error; when every
    public test passes, or the task has none, only the counts of the hidden tests' verdicts).

    ## Starting State

    A task drawn with `self.np_random` (generator) or a record of the data set chosen with it; the
    same seed gives the same task. `options={"index": i}` picks record i of a data set.

    ## Rewards

    reward = (hidden tests passed) / (hidden tests), in [0, 1], plus the format penalty (-0.1) for a
    malformed response. Public tests never count.

    Judging: stdout is compared line by line (`sandbox.outputs_match`); a function's return value
    with `ragen_envs.code.tasks.values_equal`: an int expected value needs an int of that value (or a
    float of exactly that value; never a bool, never a float within a tolerance), a float expected
    value takes `math.isclose` (an int too large for a float is wrong), bools equal only bools, and
    any exception in the comparison fails the test.

    One submission has one wall budget (`submission_wall_seconds`, default the per-test wall limit)
    across all its runs, hidden tests first, then the public tests of repair feedback: each run gets
    min(per-test limit, budget left), and once the budget is used up the remaining tests fail with
    "time limit" without running (a sleeping program costs one budget per step, not one per test).

    With `multi_turn_repair` the reward of a turn is the *improvement* of the best pass fraction so
    far (max(0, best_after - best_before)), so the episode return is the best fraction reached and
    resubmitting the same partial program earns nothing.

    ## Episode End

    Single turn (default): terminated after the first response (a malformed one included: it runs
    nothing and costs the format penalty). Repair mode: terminated when every hidden test passes or when
    `max_turns` turns (default 3) are used up; a malformed response uses up a turn. The env never
    truncates by itself (no future reward remains when the last turn is used).

    ## Information

    Besides the base keys (`action_is_valid`, `success`, `format_penalty`, ...): `reset` adds
    `instructions`, `task_family`, `task_style` ("stdin" | "function"), `num_tests`; a step that ran a
    program adds `verdicts` (one per test: "passed", "wrong answer", "runtime error", "time limit",
    "memory limit", "output limit", "sandbox error"), `tests_passed`, `tests_total`, `pass_fraction`,
    `best_pass_fraction`, `test_results` (per test: verdict, detail, wall_time, exit_code, run_id,
    stderr_tail; never the expected outputs; tests skipped for want of budget have run_id ""),
    `submission_wall_time` and `sandbox` (the isolation mode). All of these describe the hidden tests.

    ## Arguments

        gym.make("ragen/Code-v0", dataset=None, multi_turn_repair=False, max_turns=None,
                 num_tests=6, max_len=8, max_value=50, families=None, style="mixed",
                 limits=None, submission_wall_seconds=None, num_public_tests=3, action_format="tagged")

    - `dataset`: path of a `.jsonl` / `.json` file (TACO/DeepCoder format) or None for the generator.
    - `multi_turn_repair`: show the first failing public test and allow resubmission (up to `max_turns`).
    - `num_tests`, `num_public_tests`, `max_len`, `max_value`, `families`, `style`: generator knobs
      (`CodeTaskConfig`; a generated task can hold more than `num_tests` hidden tests when extra ones
      were needed to defeat the stand-ins and wrong readings). A config whose public tests use up
      every input it can draw (e.g. very many public tests on tiny inputs) makes `reset` raise
      RuntimeError: no hidden test would be left to pay.
    - `limits`: `sandbox.Limits` or a dict of overrides (defaults: 2 s CPU, 4 s wall, 512 MiB, 1 MiB output).
    - `submission_wall_seconds`: wall budget of one submission across all its test runs (default:
      `limits.wall_seconds`).
    - `hide_dataset`: cover the data set file with an empty mount inside the sandbox (default True).

    ## Version History

    - v0: initial version (generator with ten families, TACO/DeepCoder loaders, namespace sandbox,
      optional multi-turn repair). Since then, within v0: public tests separate from hidden tests
      (the example and repair feedback are public; seeds give different tasks than before), stand-in
      checks at generation, exact int judging, one wall budget per submission; later hidden tests
      that defeat each family's wrong readings (new input drawers: seeds give different tasks), no
      hidden test repeating a public input in any config, count_primes's n at most 10**6.

    ## Text format

        Problem:
        Write a function rotate(xs, k) that returns a new list: the list xs rotated left by k positions ...
        Example: rotate([1, 2, 3], 1) returns [2, 3, 1]
        Submission style: define the function rotate(...); it is called with the test's arguments.

    and after a submission in repair mode:

        Result of submission 1: 4/6 hidden tests passed.
        First failing test (visible test #2, wrong answer):
        Arguments: [[5, 1], 3]
        Expected: [1, 5]
        Got: null
        Submit a corrected program.

    ## Training hooks

    `oracle_step()` (a one-line plan of the reference program, then the program) and `random_action(rng)` (a
    stand-in program that runs but ignores the task).

    ## Action format

        <think> rotate by slicing </think>
        <answer>
        ```python
        def rotate(xs, k):
            ...
        ```
        </answer>
    """

    #: The reset options this env reads (``reset(options=...)``); any other key is refused.
    RESET_OPTIONS: ClassVar[frozenset[str] | None] = frozenset({"index"})

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 4}
    ROLE: ClassVar[str] = "You are a careful Python programmer solving a programming problem."

    def __init__(
        self,
        *,
        dataset: str | Path | None = None,
        multi_turn_repair: bool = False,
        max_turns: int | None = None,
        num_tests: int = 6,
        max_len: int = 8,
        max_value: int = 50,
        families: tuple[str, ...] | list[str] | None = None,
        style: str = "mixed",
        limits: sandbox.Limits | dict[str, Any] | None = None,
        submission_wall_seconds: float | None = None,
        num_public_tests: int = 3,
        hide_dataset: bool = True,
        action_format: protocol.ActionFormat = "tagged",
        format_penalty: float = protocol.FORMAT_PENALTY,
        render_mode: str | None = None,
    ):
        multi_turn_repair = require_bool("multi_turn_repair", multi_turn_repair)
        hide_dataset = require_bool("hide_dataset", hide_dataset)
        dataset = require_path("dataset", dataset, allow_none=True)
        if max_turns is None:
            max_turns = 3 if multi_turn_repair else 1
        elif require_int("max_turns", max_turns, 1) != 1 and not multi_turn_repair:
            raise ValueError(
                "max_turns > 1 needs multi_turn_repair=True (a single-turn episode ends at the first submission)"
            )
        super().__init__(
            action_format=action_format,
            max_actions_per_turn=1,
            turn_limit=require_int("max_turns", max_turns, 1),  # the last turn terminates (Episode End)
            format_penalty=format_penalty,
            render_mode=render_mode,
            split_actions=False,
        )
        self.multi_turn_repair = multi_turn_repair
        self.config = CodeTaskConfig(
            num_tests=num_tests,
            max_len=max_len,
            max_value=max_value,
            families=families,
            style=style,
            num_public_tests=num_public_tests,
        )
        self.limits = sandbox.Limits.coerce(limits)
        if submission_wall_seconds is None:
            submission_wall_seconds = self.limits.wall_seconds
        if (
            isinstance(submission_wall_seconds, bool)
            or not isinstance(submission_wall_seconds, (int, float))
            or not math.isfinite(submission_wall_seconds)
            or not _MIN_RUN_SECONDS <= submission_wall_seconds <= 3600
        ):
            raise ValueError(
                f"submission_wall_seconds must be a number of seconds in [{_MIN_RUN_SECONDS}, 3600], "
                f"got {submission_wall_seconds!r}"
            )
        self.submission_wall_seconds = float(submission_wall_seconds)
        self._budget_left = self.submission_wall_seconds
        self.dataset_path = None if dataset is None else Path(dataset).resolve()
        self.tasks: list[CodeTask] | None = load_tasks(self.dataset_path) if self.dataset_path else None
        self._hide = (str(self.dataset_path),) if (self.dataset_path and hide_dataset) else ()
        # Fail at construction, not mid-rollout, when no sandbox works on this machine.
        self.isolation = sandbox.sandbox_isolation()
        self.task: CodeTask | None = None
        self._submissions = 0
        self._best = 0.0
        self._last: dict[str, Any] | None = None

    # ------------------------------------------------------------------ task
    def _reset_task(self, options: dict[str, Any]) -> dict[str, Any]:
        if self.tasks is not None:
            self.task = self.tasks[record_index(options, len(self.tasks), self.np_random)]
        else:
            self.task = generate_task(self.np_random, self.config)
        self._submissions = 0
        self._best = 0.0
        self._last = None
        return {"task_family": self.task.family, "task_style": self.task.style, "num_tests": len(self.task.tests)}

    def _match_action(self, piece: str) -> str | None:
        # Before reset() there is no task to judge a program against: nothing is an action (as in SearchQA,
        # WebShop, Sudoku and 2048), so a step then is the defined "no valid action" step, not a crash.
        if self.task is None:
            return None
        return extract_program(piece)

    def _answer_example(self) -> str:
        return "```python\nprint(sum(map(int, input().split())))\n```"

    def _task_instructions(self) -> str:
        lim = self.limits
        lines = [
            "Solve the programming problem with a Python 3 program (standard library only).",
            "Put the complete program inside <answer> </answer>, optionally in a ```python fenced block.",
            "Depending on the problem, the program either reads standard input and prints to standard output, "
            "or defines the requested function (which is then called with the test's arguments).",
            f"It is run on hidden tests with limits of {lim.cpu_seconds:g} s CPU, {lim.wall_seconds:g} s wall time, "
            f"{lim.memory_bytes // 2**20} MiB memory and no network; the reward is the fraction of tests passed.",
        ]
        if self.multi_turn_repair:
            lines.append(
                f"After each submission you see the first failing test and may submit a corrected program "
                f"(up to {self.turn_limit} submissions)."
            )
        return "\n".join(lines)

    # ------------------------------------------------------------------ judging
    def _run_test(self, program: str, test: CodeTest, wall: float) -> tuple[str, sandbox.RunResult, str]:
        """Run one test with `wall` seconds of wall time; returns (verdict, run result, the program's
        answer as text, for feedback). Whatever the answer holds, the comparison gives a verdict."""
        task = self.task
        limits = dataclasses.replace(self.limits, wall_seconds=wall)
        if task.fn_name is None:
            res = sandbox.run_program(program, test.input, limits=limits, hide_paths=self._hide)
            got = res.stdout
            answer = res.stdout
        else:
            res = sandbox.run_function(program, task.fn_name, list(test.args), limits=limits, hide_paths=self._hide)
            try:
                got = json.dumps(res.value) if res.has_value else ""
            except Exception:  # e.g. an int past Python's str-conversion limit
                got = "<unprintable value>"
            answer = res.value
        if res.verdict != "ok":
            return res.verdict, res, got
        return ("passed" if answer_passes(task, test, answer) else "wrong answer"), res, got

    def _run_tests(
        self, program: str, tests: tuple[CodeTest, ...], stop_at_failure: bool
    ) -> list[tuple[str, sandbox.RunResult | None, str]]:
        """Run `tests` within what is left of the submission's wall budget (`self._budget_left`).

        Each run gets min(per-test wall limit, budget left); once less than `_MIN_RUN_SECONDS` is
        left, the remaining tests get "time limit" without running (result None).
        """
        out: list[tuple[str, sandbox.RunResult | None, str]] = []
        for test in tests:
            if self._budget_left < _MIN_RUN_SECONDS:
                out.append(("time limit", None, ""))
                continue
            t0 = time.monotonic()
            verdict, res, got = self._run_test(program, test, min(self.limits.wall_seconds, self._budget_left))
            self._budget_left -= time.monotonic() - t0
            out.append((verdict, res, got))
            if stop_at_failure and verdict != "passed":
                break
        return out

    def _not_run_detail(self) -> str:
        return f"not run: the submission's wall budget of {self.submission_wall_seconds:g} s was used up"

    def _execute(self, action: str) -> tuple[float, bool]:
        self._budget_left = self.submission_wall_seconds
        t0 = time.monotonic()
        hidden = self._run_tests(action, self.task.tests, stop_at_failure=False)
        verdicts = [v for v, _, _ in hidden]
        results = [
            {
                "verdict": verdict,
                "detail": res.detail if res is not None else self._not_run_detail(),
                "wall_time": round(res.wall_time, 4) if res is not None else 0.0,
                "exit_code": res.exit_code if res is not None else None,
                "run_id": res.run_id if res is not None else "",
                "stderr_tail": res.stderr[-500:] if res is not None else "",
            }
            for verdict, res, _ in hidden
        ]
        passed = verdicts.count("passed")
        frac = passed / len(verdicts)
        all_passed = passed == len(verdicts)
        # Repair feedback comes from the public tests only (the first one that fails): a hidden test
        # is never shown, so a lookup table of what the feedback revealed cannot pass the judging tests.
        feedback = None
        if self.multi_turn_repair and not all_passed and self.task.public_tests:
            public = self._run_tests(action, self.task.public_tests, stop_at_failure=True)
            for i, (verdict, res, got) in enumerate(public):
                if verdict != "passed":
                    feedback = (i, verdict, res, got)
                    break
        self._submissions += 1
        improvement = max(0.0, frac - self._best)
        self._best = max(self._best, frac)
        self._last = {
            "verdicts": verdicts,
            "tests_passed": passed,
            "tests_total": len(verdicts),
            "pass_fraction": frac,
            "best_pass_fraction": self._best,
            "test_results": results,
            "submission_wall_time": round(time.monotonic() - t0, 4),
            "sandbox": self.isolation.mode,
            "feedback": feedback,
        }
        if self.multi_turn_repair:
            return improvement, all_passed
        return frac, True

    def _step_info(self, info: dict[str, Any]) -> dict[str, Any]:
        if info["action_is_valid"] and self._last is not None:
            return {k: v for k, v in self._last.items() if k != "feedback"}
        return {}

    def _is_success(self) -> bool:
        return self._last is not None and self._last["tests_passed"] == self._last["tests_total"]

    # ------------------------------------------------------------------ text
    def _describe_test(self, test: CodeTest) -> list[str]:
        if self.task.fn_name is None:
            return [f"Input:\n{_clip(test.input.rstrip())}", f"Expected output:\n{_clip(test.output.rstrip())}"]
        return [f"Arguments: {_clip(json.dumps(list(test.args)))}", f"Expected: {_clip(json.dumps(test.expected))}"]

    def _feedback_lines(self, last: dict[str, Any]) -> list[str]:
        """Repair feedback: the first failing public test in full, else only counts of the hidden
        tests' verdicts (a hidden test's input, expected answer and the program's output or stderr,
        which could echo the input, are never shown)."""
        task = self.task
        failing = Counter(v for v in last["verdicts"] if v != "passed")
        counts = ", ".join(f"{n} {v}" for v, n in sorted(failing.items()))
        if last["feedback"] is None:
            if not task.public_tests:
                return [f"Hidden tests failed ({counts}); their contents are not shown."]
            return [f"Every visible test passes, but hidden tests failed ({counts}); their contents are not shown."]
        i, verdict, res, got = last["feedback"]
        lines = [f"First failing test (visible test #{i + 1}, {verdict}):"]
        lines += self._describe_test(task.public_tests[i])
        if verdict == "wrong answer":
            lines.append(("Got:\n" if task.fn_name is None else "Got: ") + _clip(got.rstrip()))
        elif res is None:
            lines.append(f"Error: {self._not_run_detail()}")
        else:
            lines.append(f"Error: {_clip(res.detail)}")
            tail = res.stderr.strip().splitlines()[-3:]
            if tail and verdict == "runtime error":
                lines.append(_clip("\n".join(tail)))
        return lines

    def _state_text(self) -> str:
        if self.task is None:
            return "No task yet: call reset()."
        task = self.task
        style = (
            "Submission style: a program that reads standard input and writes standard output."
            if task.fn_name is None
            else f"Submission style: define the function {task.fn_name}(...); it is called with the test's arguments."
        )
        parts = ["Problem:", task.problem, style]
        last = self._last
        if last is not None:
            parts.append(
                f"Result of submission {self._submissions}: "
                f"{last['tests_passed']}/{last['tests_total']} hidden tests passed."
            )
            if self.multi_turn_repair and last["tests_passed"] < last["tests_total"]:
                parts += self._feedback_lines(last)
                if not (self._terminated or self._truncated) and self._turn < self.turn_limit:
                    parts.append("Submit a corrected program.")
        # Data sets and program output may hold characters outside the observation space.
        return fit_observation("\n".join(parts))

    # ------------------------------------------------------------------ oracle
    def reference_solution(self) -> str | None:
        """The reference program of the current task (None for data set records without solutions)."""
        if self.task is None:
            raise RuntimeError("call reset() before asking for the reference solution")
        return self.task.reference

    def oracle(self) -> list[str] | None:
        """[the reference solution in a ```python fenced block], the answer of an oracle (None if unknown)."""
        ref = self.reference_solution()
        if ref is None:
            return None
        return [f"```python\n{ref.rstrip()}\n```"]

    # ------------------------------------------------------------------ training hooks
    def oracle_step(self, reasoning: str = "full") -> tuple[str, list[str]]:
        """(reasoning, [the reference program in a fenced block]): a one-line plan from the task's family and
        parameters (`ragen_envs.code.tasks.plan_sentence`, e.g. ``Reverse the words, then lower case.``), then
        `oracle()`'s answer. ValueError for a data set task without a reference program."""
        answer = self.oracle()
        if answer is None:
            raise ValueError(f"this {self.task.family} task has no reference program to demonstrate (a data set "
                             "record without 'solutions'); use warm_start.policy='random'")
        return plan_sentence(self.task), answer

    def random_action(self, rng: np.random.Generator) -> str:
        """An uninformed program (the random-action hook), drawn uniformly among one-line stand-ins that run but
        ignore the task: for stdin tasks echo the input, print 0 or print the first line reversed; for function
        tasks return the first argument, 0 or None (`def rotate(*args): return 0`). Bare, as a person would type
        it at `ragen play` (the env takes bare programs and fenced blocks alike)."""
        if self.task is None:
            raise RuntimeError("call reset() before asking for a random action")
        if self.task.fn_name is None:
            programs = ["print(input())", "print(0)", "print(input()[::-1])"]
        else:
            programs = [f"def {self.task.fn_name}(*args): return {r}" for r in ("args[0]", "0", "None")]
        return programs[int(rng.integers(len(programs)))]
