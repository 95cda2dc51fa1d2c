"""Play every registered env with its oracle agent and with a random agent.

`python -m ragen_core.apps.env_demo [--episodes N] [--seed S]` prints one rendered oracle episode
(Sokoban) and a table of success rates and mean returns. The oracle of each env is the env's own
solver (Sokoban: shortest solution; FrozenLake: the action that maximises the probability of
reaching the goal; Bandit: the arm with the higher expected payoff; task envs: a reference answer).
The random agent answers, well formatted, with uniformly drawn action names (or an empty guess for
free-form tasks), so the gap between the two columns is what an RL agent can learn.
"""

from __future__ import annotations

import argparse
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


def run_episode(env: gym.Env, agent: Callable[[gym.Env], str], seed: int, max_turns: int = 20, show=None):
    """Play one episode; returns (success, return). `show(text)` receives the rendered turns."""
    obs, info = env.reset(seed=seed)
    total = 0.0
    for turn in range(1, max_turns + 1):
        answer = agent(env)
        if show:
            show(f"Turn {turn}:\n{obs['text'] if isinstance(obs, dict) else obs}\n> {answer}")
        obs, reward, terminated, truncated, info = env.step(_response(answer))
        total += reward
        if terminated or truncated:
            break
    if show:
        show(f"Final state:\n{obs['text'] if isinstance(obs, dict) else obs}\n"
             f"success={info['success']} return={total:+.2f}")
    return bool(info["success"]), total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=50, help="episodes per env and agent")
    parser.add_argument("--seed", type=int, default=0, help=f"first seed (an integer in [0, {MAX_SEED}])")
    args = parser.parse_args(argv)
    if args.episodes < 1:
        parser.error(f"--episodes must be an integer >= 1; got {args.episodes}")
    if not 0 <= args.seed <= MAX_SEED:  # numpy's generator refuses a negative seed (a traceback before)
        parser.error(f"--seed must be an integer in [0, {MAX_SEED}] (2**32 - 1, the largest seed); got {args.seed}")

    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if Console().is_terminal else 120)
    rng = np.random.default_rng(args.seed)
    ids = ragen_envs.env_ids()
    if "ragen/Sokoban-v0" in ids:
        console.rule("One Sokoban episode played by the solver")
        env = gym.make("ragen/Sokoban-v0")
        run_episode(env, oracle_answer, seed=args.seed, show=console.print)

    table = Table(title=f"Oracle vs random agent, {args.episodes} episodes per cell")
    for col in ("env", "oracle success", "oracle return", "random success", "random return", "episodes/s"):
        table.add_column(col, justify="left" if col == "env" else "right")
    for env_id in ids:
        env = gym.make(env_id)
        stats = {"oracle": AgentStats(), "random": AgentStats()}
        start = time.perf_counter()
        for name, agent in (("oracle", oracle_answer), ("random", lambda e: random_answer(e, rng))):
            for ep in range(args.episodes):
                success, ret = run_episode(env, agent, seed=args.seed + 1000 + ep)
                s = stats[name]
                s.episodes += 1
                s.successes += success
                s.total_return += ret
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
