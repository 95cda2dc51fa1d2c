"""Play every registered env with its oracle agent and with a random agent.

`python -m ragen_core.apps.env_demo [--episodes N] [--seed S] [--max-turns T]` (the `train` extra: it prints with
rich) prints one rendered oracle episode
(Sokoban) and a table of success rates and mean returns. The oracle of each env is the env's own
solver (Sokoban: shortest solution; FrozenLake: the action that maximises the probability of
reaching the goal; Bandit: the arm with the higher expected payoff; task envs: a reference answer).
The random agent answers, well formatted, with uniformly drawn action names (or an empty guess for
free-form tasks), so the gap between the two columns is what an RL agent can learn.

Every episode stops after `--max-turns` turns (default 20) if the env has not ended it; such an episode counts as a
failure, and a note under the table says, per env, how many were cut (2048's game runs for hundreds of turns, so
its oracle's 0% at the default is the cap, not the solver).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

import ragen_envs
from ragen_core.apps.play import MAX_SEED


def _response(answer: str) -> str:
    return f"<think>I decide from the current state.</think><answer>{answer}</answer>"


def oracle_answer(env: gym.Env) -> str:
    """The answer text the env's own solver/oracle would give now: this turn's actions of its demonstrator
    (`oracle_step()`, declared on `ragen_envs.base.TextAgentEnv`), joined by ``||``."""
    return " || ".join(env.unwrapped.oracle_step()[1])


def random_answer(env: gym.Env, rng: np.random.Generator) -> str:
    """A well-formatted answer made of uniformly drawn action names (free-form tasks: a guess of 0)."""
    base = env.unwrapped
    vocab = list(getattr(base, "arm_names", None) or base.ACTIONS)
    if not vocab:
        return "0"
    k = 1 if hasattr(base, "arm_names") else int(rng.integers(1, base.max_actions_per_turn + 1))
    return " || ".join(vocab[int(i)] for i in rng.integers(0, len(vocab), size=k))


@dataclass
class AgentStats:
    successes: int = 0
    episodes: int = 0
    total_return: float = 0.0

    @property
    def success_rate(self) -> float:
        return self.successes / max(1, self.episodes)

    @property
    def mean_return(self) -> float:
        return self.total_return / max(1, self.episodes)


@dataclass(frozen=True)
class Episode:
    """One played episode: its success, return, and whether `max_turns` cut it before the env ended it."""

    success: bool
    total: float
    cut: bool


def play_episode(env: gym.Env, agent: Callable[[gym.Env], str], seed: int, max_turns: int = 20, show=None) -> Episode:
    """Play one episode of at most `max_turns` turns. `show(text)` receives the rendered turns."""
    obs, info = env.reset(seed=seed)
    total = 0.0
    ended = False
    for turn in range(1, max_turns + 1):
        answer = agent(env)
        if show:
            show(f"Turn {turn}:\n{obs['text'] if isinstance(obs, dict) else obs}\n> {answer}")
        obs, reward, terminated, truncated, info = env.step(_response(answer))
        total += reward
        if terminated or truncated:
            ended = True
            break
    if show:
        show(f"Final state:\n{obs['text'] if isinstance(obs, dict) else obs}\n"
             f"success={info['success']} return={total:+.2f}" + ("" if ended else f" (cut at {max_turns} turns)"))
    return Episode(bool(info["success"]), total, cut=not ended)


def run_episode(env: gym.Env, agent: Callable[[gym.Env], str], seed: int, max_turns: int = 20, show=None):
    """Play one episode (:func:`play_episode`); returns (success, return)."""
    episode = play_episode(env, agent, seed, max_turns=max_turns, show=show)
    return episode.success, episode.total


def cut_note(env_id: str, cuts: dict[str, int], episodes: int, max_turns: int) -> str | None:
    """The line under the table for an env whose episodes the turn cap cut (they count as failures), or None."""
    if not any(cuts.values()):
        return None
    counts = " and ".join(f"{n} of {episodes} {name}" for name, n in cuts.items() if n)
    return (f"{env_id}: {counts} episodes stopped at {max_turns} turns before the env ended them (counted as "
            f"failures; --max-turns N plays longer)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=50, help="episodes per env and agent")
    parser.add_argument("--seed", type=int, default=0, help=f"first seed (an integer in [0, {MAX_SEED}])")
    parser.add_argument("--max-turns", type=int, default=20,
                        help="turns an episode may last before the demo stops it (counted as a failure)")
    args = parser.parse_args(argv)
    if args.episodes < 1:
        parser.error(f"--episodes must be an integer >= 1; got {args.episodes}")
    if args.max_turns < 1:
        parser.error(f"--max-turns must be an integer >= 1; got {args.max_turns}")
    if not 0 <= args.seed <= MAX_SEED:  # numpy's generator refuses a negative seed (a traceback before)
        parser.error(f"--seed must be an integer in [0, {MAX_SEED}] (2**32 - 1, the largest seed); got {args.seed}")

    from ragen_core.apps.install import missing_train_modules

    if missing_train_modules(("rich",)):  # a base install (envs only): one line, not a ModuleNotFoundError
        print("the env demo prints its tables with rich, a module of the training extra (missing: rich): "
              "pip install 'ragen2[train]' (from a clone: pip install -e '.[train]'; docs/install.md)",
              file=sys.stderr)
        return 2
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if Console().is_terminal else 120)
    rng = np.random.default_rng(args.seed)
    ids = ragen_envs.env_ids()
    if "ragen/Sokoban-v0" in ids:
        console.rule("One Sokoban episode played by the solver")
        env = gym.make("ragen/Sokoban-v0")
        # The env's text as it is: rich would read its brackets as markup (`[/]` is a MarkupError) and bold its digits.
        run_episode(env, oracle_answer, seed=args.seed, max_turns=args.max_turns,
                    show=lambda text: console.print(text, markup=False, highlight=False))

    table = Table(title=f"Oracle vs random agent, {args.episodes} episodes per cell")
    for col in ("env", "oracle success", "oracle return", "random success", "random return", "episodes/s"):
        table.add_column(col, justify="left" if col == "env" else "right")
    notes = []
    for env_id in ids:
        env = gym.make(env_id)
        stats = {"oracle": AgentStats(), "random": AgentStats()}
        cuts = {"oracle": 0, "random": 0}
        start = time.perf_counter()
        for name, agent in (("oracle", oracle_answer), ("random", lambda e: random_answer(e, rng))):
            for ep in range(args.episodes):
                episode = play_episode(env, agent, seed=args.seed + 1000 + ep, max_turns=args.max_turns)
                s = stats[name]
                s.episodes += 1
                s.successes += episode.success
                s.total_return += episode.total
                cuts[name] += episode.cut
        notes.append(cut_note(env_id, cuts, args.episodes, args.max_turns))
        rate = 2 * args.episodes / (time.perf_counter() - start)
        table.add_row(
            env_id,
            f"{stats['oracle'].success_rate:.0%}",
            f"{stats['oracle'].mean_return:+.2f}",
            f"{stats['random'].success_rate:.0%}",
            f"{stats['random'].mean_return:+.2f}",
            f"{rate:.0f}",
        )
        env.close()
    console.print(table)
    for note in filter(None, notes):
        console.print(note)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
