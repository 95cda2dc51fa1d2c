"""`ragen play ID`: play any text env of the suite in the terminal.

Type an action (`Up`, `Up || Left`) or a full response (`<think>..</think><answer>..</answer>`);
the game shows the rendered state, the reward and the info. `q` quits, `r` restarts the same level (same
seed), `?` shows the instructions and the state again, Ctrl-C
quits (exit status 130, no traceback); an empty line or a stray arrow key costs no turn. A bare action is
wrapped into the response format for you, so the format penalty only applies to responses you type in full.
Where Python has `readline` (not on Windows), the prompt has line editing (arrow keys, Ctrl-A/E) and history
(up arrow) of the session's lines. Bad env kwargs (`bogus=1`, `num_boxes=abc`) are one `config error:` line and
exit status 2.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

import gymnasium as gym

import ragen_envs  # noqa: F401  (registers the ids)
from ragen_envs import contract
from ragen_envs.validation import MAX_SEED

_HIDDEN_INFO = {"instructions"}
#: Terminal escape sequences (arrow keys without line editing: ``^[[A``), which are never actions.
_ESCAPES = re.compile(r"(\x1b\[?[0-9;]*[A-Za-z~]?|\^\[\[?[0-9;]*[A-Za-z~]?)")
PROG = "ragen play"
BANNER = ("commands: q quits, r restarts this level, ? shows the rules and the state; type an action "
          "(e.g. {example}) or a response")


def example_action(env: Any) -> str:
    """An action this env accepts in its current state (call after reset), in its own text: a draw of its
    ``random_action`` hook (Sudoku's placements), else
    the first actions of its ``ACTIONS`` list joined by ``||`` up to the actions allowed per turn."""
    u = env.unwrapped
    if callable(getattr(u, "random_action", None)) and not getattr(u, "ACTIONS", ()):
        import numpy as np

        return str(u.random_action(np.random.default_rng(0)))
    actions = [str(a) for a in getattr(u, "ACTIONS", ())]
    if not actions:
        return "your answer"
    # 1, not the contract's 2, for an env that declares no max_actions_per_turn: `play`'s value since it was written
    # (every ragen/ env declares one, so only an env outside the contract shows a single action).
    per_turn = contract.max_actions_per_turn(u, default=1)
    return " || ".join(actions[: max(1, min(2, per_turn))])


def wrap_response(line: str) -> str:
    """A bare action becomes a full response; a line with tags is passed through unchanged."""
    if "<answer>" in line.lower() or "<think>" in line.lower():
        return line
    return f"<think>typed by a person</think><answer>{line}</answer>"


def enable_line_editing() -> bool:
    """Import `readline` so that `input()` gets line editing and history; False where it does not exist
    (Windows, some minimal builds), in which case `input()` still works, without editing."""
    try:
        import readline  # noqa: F401  (importing it is what hooks it into input())
    except ImportError:
        return False
    return True


def _show_observation(obs: Any, out: TextIO) -> None:
    text = obs["text"] if isinstance(obs, dict) else obs
    print(text, file=out)
    if isinstance(obs, dict) and "image" in obs:
        print(f"(image observation: {obs['image'].shape[1]}x{obs['image'].shape[0]} px)", file=out)


def _show_info(info: dict[str, Any], out: TextIO) -> None:
    shown = {k: v for k, v in info.items() if k not in _HIDDEN_INFO}
    print("info: " + ", ".join(f"{k}={v!r}" for k, v in shown.items()), file=out)


def play(
    env_id: str,
    *,
    seed: int | None = None,
    kwargs: dict[str, Any] | None = None,
    read_line: Callable[[str], str] | None = None,
    out: TextIO | None = None,
) -> int:
    """Interactive loop; returns a process exit status (0, or 2 for an unknown id).

    `read_line(prompt)` reads one typed line (raises EOFError at the end); None means `input`, with line
    editing where available (`enable_line_editing`). `out`: where to print (None: the current ``sys.stdout``,
    looked up at call time so that a redirected or captured stdout is honoured).
    """
    out = sys.stdout if out is None else out
    if read_line is None:
        enable_line_editing()
        read_line = input
    try:
        gym.spec(env_id)
    except gym.error.Error as exc:
        why = str(exc).rstrip(".")
        print(f"config error: cannot make {env_id!r}: {why} (`ragen envs` lists the ids)", file=out)
        return 2
    try:
        env = gym.make(env_id, **(kwargs or {}))
    except (gym.error.Error, TypeError, ValueError) as exc:
        from ragen_envs.registration import kwarg_error

        print(f"config error: {env_id} with {kwargs or {}}: {kwarg_error(env_id, kwargs or {}, exc)}", file=out)
        return 2
    try:
        return _play_loop(env, env_id, episode_seed=random.randrange(2**31) if seed is None else int(seed),
                          read_line=read_line, out=out)
    except KeyboardInterrupt:
        print("\n(interrupted: bye)", file=out)
        return 130
    finally:
        env.close()


def _play_loop(env: Any, env_id: str, episode_seed: int, read_line: Callable[[str], str], out: TextIO) -> int:
    """The episodes of :func:`play` until `q` or the end of input. Every episode has a known seed, so that `r`
    can restart the same level."""
    actions = [str(a) for a in getattr(env.unwrapped, "ACTIONS", ())]
    restart = False
    while True:
        if restart:
            episode_seed -= 1
        obs, info = env.reset(seed=episode_seed)
        print(f"{env_id}, seed {episode_seed}" + (" (restarted)" if restart else ""), file=out)
        episode_seed += 1
        restart = False
        banner = BANNER.format(example=example_action(env))  # after reset: some examples depend on the state
        print(info["instructions"], file=out)
        print("-" * 60, file=out)
        print(banner, file=out)
        _show_observation(obs, out)
        total = 0.0
        instructions = info.get("instructions", "")
        while True:
            try:
                raw = read_line("> ")
            except EOFError:
                print(file=out)
                return 0
            line = _ESCAPES.sub("", raw).strip()
            if not line:
                # An empty line or a bare arrow key is not an answer: it costs no turn.
                if raw.strip():
                    named = ", ".join(actions) if actions else "an answer"
                    print(f"(arrow keys are not actions: type {named})", file=out)
                continue
            if line.lower() in {"q", "quit", "exit"}:
                return 0
            if line == "?":
                print(instructions or env.unwrapped.instructions(), file=out)
                print(banner, file=out)
                _show_observation(obs, out)
                continue
            if line.lower() == "r":
                restart = True
                break
            obs, reward, terminated, truncated, info = env.step(wrap_response(line))
            total += reward
            _show_observation(obs, out)
            print(f"reward: {reward:+.2f}  (episode return {total:+.2f})", file=out)
            explain = getattr(env.unwrapped, "explain_refusal", None)
            if callable(explain) and not info.get("refused"):  # Sudoku lists its own refusals
                for piece in info.get("dropped_actions") or []:
                    print(f"refused {piece!r}: {explain(str(piece))}", file=out)
            _show_info(info, out)
            if terminated or truncated:
                outcome = "solved" if info.get("success") else ("terminated" if terminated else "out of actions")
                print(f"episode over: {outcome}. New episode (q to quit).", file=out)
                print("=" * 60, file=out)
                break


# --------------------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------------------


def parse_kwargs(pairs: Sequence[str]) -> dict[str, object]:
    """`key=value` strings -> kwargs; values parsed as Python literals when possible (`4` -> 4, `grid` -> "grid").

    Raises:
        ValueError: for a string without `=`.
    """
    import ast

    out: dict[str, object] = {}
    for pair in pairs:
        if "=" not in pair:
            raise ValueError(f"env kwarg {pair!r} must look like key=value")
        key, value = pair.split("=", 1)
        try:
            out[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[key] = value
    return out


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """`ragen play ENV_ID [--seed S] [key=value ...]`."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("env_id", help="a registered id, e.g. ragen/Sokoban-v0")
    parser.add_argument("--seed", type=int, default=None,
                        help=f"seed of the first episode (an integer in [0, {MAX_SEED}]; default: a random one)")
    parser.add_argument("env_kwargs", nargs="*", metavar="key=value", help="keyword arguments for gym.make")
    return parser


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    """Parse `argv` and :func:`play`; 2 with one `config error:` line for a kwarg that is not key=value or a
    --seed outside [0, MAX_SEED]."""
    args = build_parser(prog).parse_args(argv)
    if args.seed is not None and args.seed < 0:  # gymnasium's reset takes no negative seed (a traceback before)
        print(f"config error: --seed must be an integer >= 0; got {args.seed}", file=sys.stderr)
        return 2
    if args.seed is not None and args.seed > MAX_SEED:
        print(f"config error: --seed must be an integer <= {MAX_SEED} (2**32 - 1, the largest seed); got "
              f"{args.seed}", file=sys.stderr)
        return 2
    try:
        kwargs = parse_kwargs(args.env_kwargs)
    except ValueError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2
    return play(args.env_id, seed=args.seed, kwargs=kwargs)


if __name__ == "__main__":
    raise SystemExit(main())
