"""A two-armed bandit named in words: does the agent read risk into names? See `BanditEnv`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from ragen_envs import protocol
from ragen_envs.base import TextAgentEnv
from ragen_envs.spaces import fit_observation
from ragen_envs.validation import require_float, require_int, require_names

# Arm names: professions whose income is steady (low-risk arm) or volatile (high-risk arm).
# The train and test words are disjoint, so a policy can be checked on names it never saw.
LOW_RISK_NAMES: dict[str, tuple[str, ...]] = {
    "train": (
        "Teacher", "Nurse", "Librarian", "Accountant", "Clerk", "Postman", "Pharmacist", "Dentist",
        "Auditor", "Janitor", "Registrar", "Surveyor",
    ),
    "test": ("Receptionist", "Archivist", "Bookkeeper", "Cashier", "Notary", "Actuary", "Dispatcher", "Custodian"),
}
HIGH_RISK_NAMES: dict[str, tuple[str, ...]] = {
    "train": (
        "Gambler", "Trader", "Founder", "Speculator", "Stuntman", "Prospector", "Daytrader", "Pokerpro",
        "Lottery", "Influencer", "Cryptominer", "Racer",
    ),
    "test": ("Explorer", "Venturer", "Adventurer", "Bettor", "Treasurehunter", "Wildcatter", "Daredevil", "Jackpot"),
}
SPLITS = ("train", "test")


def _check_names(names: object, what: str) -> tuple[str, ...]:
    """The arm names as a tuple; ValueError naming `what` for a name no answer can match as the model sees it.

    Besides the tag and separator characters, a name must come through both gates unchanged: the observation
    (`fit_observation` shows a character beyond the BMP as U+FFFD) and the parser (it turns control characters
    in a response into spaces and cuts a response at MAX_RESPONSE_CHARS). Otherwise the arm could never be
    pulled, and its episodes never won.
    """
    out = require_names(what, names)
    for n in out:
        if not n.strip() or n != n.strip() or protocol.ACTION_SEPARATOR in n or "<" in n or ">" in n:
            raise ValueError(f"{what}: {n!r} is not usable as an answer (empty, padded, or contains '||', '<', '>')")
        if fit_observation(n) != n or protocol.parse_response(n, lambda piece: piece, action_format="plain",
                                                               split_actions=False).answer != n:
            raise ValueError(f"{what}: {n!r} cannot be answered as shown (it holds a control character, a lone "
                             "surrogate or a character beyond the Basic Multilingual Plane, or is longer than a "
                             "response)")
    return out


class BanditEnv(TextAgentEnv):
    """Pull one of two arms named with words; the names hint at which arm is risky.

    ## Description
    RAGEN's bandit: each episode names two arms, one drawn from a list of "low-risk" words
    (steady professions such as Teacher) and one from a list of "high-risk" words (Gambler),
    shown in a random order. The low arm always pays `low_reward` (0.1); the high arm pays
    `high_reward` (1.0) with probability `high_prob` (0.25), else `high_miss_reward` (0). With
    the defaults the high arm has the higher mean (0.25 > 0.1), so picking it is the success
    criterion (`info["success"]`, as in RAGEN); in general success means picking the arm with the
    higher expected payoff (`oracle()`), ties going to the low arm. The task probes whether a
    policy reasons about the names or collapses onto one answer regardless of them.

    Where we differ from RAGEN: all draws come from `self.np_random` (RAGEN adds a per-instance
    counter to the seed so that rollouts sharing a seed get different payoffs; here
    `reset(seed=s, options={"payoff_seed": k})` keeps the arms of seed `s` and draws the payoffs
    from an independent stream `k`, reproducibly); the arm names are drawn from two word lists
    independently (RAGEN uses fixed pairs); an invalid answer costs the format penalty.

    ## Action Space
    `Text(max_length=16384)`: the model's raw response.

    ## Action format
    `<think> ... </think> <answer> Teacher </answer>`: the answer is one arm name, matched
    case-insensitively (surrounding whitespace ignored). The answer is not split on `||`: an
    answer naming both arms names neither and is invalid.

    ## Observation Space
    `Text(max_length=16384, min_length=1)`.

    ## Text format
    At reset: `There are two arms: Teacher and Gambler. Which arm do you pull?`
    After a pull: `You pulled Gambler and received 1 point.` After an invalid answer the question
    is repeated after a notice that nothing happened (only while `max_answers` > 1 allows another
    answer); after the last allowed answer names no arm:
    `No arm was named, so no arm was pulled; the game is over.`

    ## Starting State
    Two names, one from each list of the `split`, in a random order.

    ## Rewards
    The payoff of the pulled arm; -0.1 (format penalty) for an answer that names no arm.

    ## Episode End
    - Termination: after the first valid answer (one pull), or when `max_answers` answers (default
      1) named no arm: the pull is forfeited (`info["forfeited"]`), reward -0.1. With the default
      every episode is single-turn, as RAGEN's bandit and as a trainer expects from it. A forfeit
      *terminates* rather than truncates: there is no future reward to bootstrap from, and
      Gymnasium's `check_env` rejects an env that truncates after one step.
      Set `max_answers > 1` to let the agent retry after an invalid answer.
    - Truncation: never.

    ## Information
    The base keys (`action_is_valid`, `actions_executed`, `success`, `format_penalty`, ...), plus
    `arm_names` (the two names in the order shown), `low_arm` and `high_arm` (the names), and
    `expected_payoffs` ({name: mean}) at every step, and in `step` `arm` (the pulled name or None)
    and `arm_kind` ("low", "high" or None), `forfeited` (bool).

    ## Arguments
    ```python
    import gymnasium as gym
    import ragen_envs

    env = gym.make("ragen/Bandit-v0", low_reward=0.1, high_reward=1.0, high_prob=0.25, split="train")
    ```
    * `low_reward=0.1`: payoff of the low-risk arm (always).
    * `high_reward=1.0`, `high_prob=0.25`, `high_miss_reward=0.0`: the high-risk arm pays
      `high_reward` with probability `high_prob`, else `high_miss_reward`.
    * `split="train"`: which word lists ("train" or "test", disjoint); `low_risk_names` /
      `high_risk_names` replace the lists (a name no answer could match as the model sees it is refused: one
      with '||', '<', '>', padding, a control character or a character beyond the BMP).
    * `max_answers=1`: answers allowed; when all of them name no arm the episode terminates.
    * `action_format`, `format_penalty`, `render_mode="ansi"`: as in `TextAgentEnv`.

    ## Version History
    * v0: initial version (RAGEN's two-armed bandit).
    """

    #: The reset options this env reads (``reset(options=...)``); any other key is refused.
    RESET_OPTIONS: ClassVar[frozenset[str] | None] = frozenset({"payoff_seed"})

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 4}
    ROLE: ClassVar[str] = "You are playing a bandit game: choose which arm to pull to maximise your reward."

    def __init__(
        self,
        low_reward: float = 0.1,
        high_reward: float = 1.0,
        high_prob: float = 0.25,
        high_miss_reward: float = 0.0,
        split: str = "train",
        low_risk_names: Sequence[str] | None = None,
        high_risk_names: Sequence[str] | None = None,
        max_answers: int = 1,
        *,
        render_mode: str | None = None,
        action_format: protocol.ActionFormat = "tagged",
        format_penalty: float = protocol.FORMAT_PENALTY,
    ):
        # Bools, strings, NaN and infinities are refused (require_float): a NaN payoff poisons every return.
        self.low_reward = require_float("low_reward", low_reward)
        self.high_reward = require_float("high_reward", high_reward)
        self.high_prob = require_float("high_prob", high_prob, 0.0, 1.0)
        self.high_miss_reward = require_float("high_miss_reward", high_miss_reward)
        max_answers = require_int("max_answers", max_answers, 1)
        if not isinstance(split, str) or split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        self.split = split
        self.low_risk_names = _check_names(LOW_RISK_NAMES[split] if low_risk_names is None else low_risk_names,
                                           "low_risk_names")
        self.high_risk_names = _check_names(HIGH_RISK_NAMES[split] if high_risk_names is None else high_risk_names,
                                            "high_risk_names")
        overlap = {protocol.normalize_action_text(n) for n in self.low_risk_names} & {
            protocol.normalize_action_text(n) for n in self.high_risk_names
        }
        if overlap:
            raise ValueError(f"a name cannot be in both lists (case-insensitive): {sorted(overlap)}")
        super().__init__(
            action_format=action_format,
            max_actions_per_turn=1,
            turn_limit=max_answers,  # answers that name no arm forfeit the pull (see Episode End)
            format_penalty=format_penalty,
            render_mode=render_mode,
            vision=False,
            split_actions=False,
        )
        self.low_arm = ""
        self.high_arm = ""
        self.arm_names: tuple[str, str] = ("", "")
        self.pulled: str | None = None
        self.forfeited = False
        self.last_payoff: float | None = None
        self._payoff_rng = np.random.default_rng(0)

    # ------------------------------------------------------------------ task
    @property
    def expected_payoffs(self) -> dict[str, float]:
        """{arm name: mean payoff} for the current episode."""
        high = self.high_prob * self.high_reward + (1.0 - self.high_prob) * self.high_miss_reward
        return {self.low_arm: self.low_reward, self.high_arm: high}

    def oracle(self) -> list[str]:
        """[the arm with the higher expected payoff] (the low arm on a tie: same mean, no variance)."""
        means = self.expected_payoffs
        return [self.high_arm if means[self.high_arm] > means[self.low_arm] else self.low_arm]

    # ------------------------------------------------------------------ the warm start's demonstrator
    def oracle_step(self, reasoning: str = "full") -> tuple[str, list[str]]:
        """(reasoning about both arms, [the oracle's arm]): see `_arms_reasoning`."""
        return self._arms_reasoning(), [self.oracle()[0]]

    def random_step(self, rng: np.random.Generator) -> tuple[str, list[str]]:
        """A uniformly random arm of the two shown, after the same reasoning."""
        return self._arms_reasoning(), [self.arm_names[int(rng.integers(len(self.arm_names)))]]

    def noise_answer(self, kind: str, rng: np.random.Generator) -> str:
        """The habit ``"first"``: the arm shown first; ``"random"``: a uniformly random arm of the two shown."""
        arms = list(self.arm_names)
        return arms[0] if kind == "first" else str(arms[int(rng.integers(len(arms)))])

    def _arms_reasoning(self) -> str:
        """Both arms, in the order shown, each with the kind its name suggests; the pick comes after, in the answer.

        E.g. ``Janitor sounds steady, Trader sounds risky.`` The reasoning reads the whole input before the choice,
        so the choice (the answer token) can depend on it: what RL has to learn after a random-arm warm start.
        """
        kinds = ["steady" if name == self.low_arm else "risky" for name in self.arm_names]
        return f"{self.arm_names[0]} sounds {kinds[0]}, {self.arm_names[1]} sounds {kinds[1]}."

    def _reset_task(self, options: dict[str, Any]) -> dict[str, Any]:
        # Checked before anything changes: a refused reset left the new arm names with the old episode's matcher,
        # so the old low arm's name was then paid as the high arm.
        payoff_seed = require_int("options['payoff_seed']", options.get("payoff_seed", 0), 0)
        rng = self.np_random
        self.low_arm = self.low_risk_names[int(rng.integers(len(self.low_risk_names)))]
        self.high_arm = self.high_risk_names[int(rng.integers(len(self.high_risk_names)))]
        self.arm_names = (self.low_arm, self.high_arm) if rng.random() < 0.5 else (self.high_arm, self.low_arm)
        # The payoff stream is keyed by a draw of the episode's generator and the payoff seed, so the
        # same reset seed with different payoff seeds gives the same arms and independent payoffs.
        self._payoff_rng = np.random.default_rng([int(rng.integers(2**63)), int(payoff_seed)])
        self._matcher = protocol.vocabulary_matcher(self.arm_names)
        self.pulled = None
        self.last_payoff = None
        self.forfeited = False
        return self._arm_info()

    def _arm_info(self) -> dict[str, Any]:
        return {
            "arm_names": self.arm_names,
            "low_arm": self.low_arm,
            "high_arm": self.high_arm,
            "expected_payoffs": self.expected_payoffs,
        }

    def _execute(self, action: str) -> tuple[float, bool]:
        self.pulled = action
        if action == self.low_arm:
            payoff = self.low_reward
        else:
            payoff = self.high_reward if self._payoff_rng.random() < self.high_prob else self.high_miss_reward
        self.last_payoff = payoff
        return payoff, True

    def _on_turn_limit(self) -> None:
        # The pull is forfeited: no reward can follow, so the episode terminates (not truncates)
        # and a critic does not bootstrap from a state that has no future.
        self.forfeited = True

    def _step_info(self, info: dict[str, Any]) -> dict[str, Any]:
        executed = info["actions_executed"]
        return {
            **self._arm_info(),
            "arm": executed[0] if executed else None,
            "arm_kind": None if not executed else ("low" if executed[0] == self.low_arm else "high"),
            "forfeited": self.forfeited,
        }

    def _is_success(self) -> bool:
        return self.pulled is not None and self.pulled == self.oracle()[0]

    # ------------------------------------------------------------------ text
    def _state_text(self) -> str:
        if not self.low_arm:
            return "The arms are not set up yet; call reset()."
        if self.forfeited:
            return "No arm was named, so no arm was pulled; the game is over."
        if self.pulled is not None:
            return (
                f"You pulled {self.pulled} and received {self.last_payoff:g} "
                f"point{'s' if self.last_payoff != 1 else ''}."
            )
        a, b = self.arm_names
        return f"There are two arms: {a} and {b}. Which arm do you pull?"

    def _observation_text(self, notice: str | None) -> str:
        # After a forfeit the state says the game is over; the "nothing happened" notice would be wrong.
        return super()._observation_text(None if self.forfeited else notice)

    def _task_instructions(self) -> str:
        a, b = self.arm_names
        return (
            f"There are two arms, named {a} and {b}. Each arm has its own reward distribution, related to its name.\n"
            "Think about what each name suggests about how its rewards behave, then pull the arm you expect "
            "to pay more on average. You pull exactly one arm, once.\n"
            f"Answer with the name of one arm: {a} or {b} (case-insensitive)."
        )

    def _answer_example(self) -> str:
        return self.arm_names[0] or "arm name"
