"""`ragen play ID`: play any text env of the suite in the terminal.

Type an action (`Up`, `Up || Left`) or a full response (`<think>..</think><answer>..</answer>`);
the game shows the rendered state, the reward and the info. `q` quits, `r` restarts the same level (same
seed), `?` shows the instructions and the state again, Ctrl-C
quits (exit status 130, no traceback); an empty line or a stray arrow key costs no turn. A bare action is
wrapped into the response format for you, so the format penalty only applies to responses you type in full.
Where Python has `readline` (not on Windows), the prompt has line editing (arrow keys, Ctrl-A/E) and history
(up arrow) of the session's lines. Bad env kwargs (`bogus=1`, `num_boxes=abc`), an env that cannot be built or
started with them (`render_mode=human` without pygame, a Sokoban `min_solution_len` no room reaches), an unknown id
(with the closest ids) and an id that is not a text env (`CartPole-v1`) are one `config error:` line on stderr and
exit status 2 (the game itself is on stdout). Typed bytes that are not text in the terminal's encoding are read as
U+FFFD, not a traceback; text the terminal cannot show is written as backslash escapes (`ragen_core.apps.cli`).
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
    err: TextIO | None = None,
) -> int:
    """Interactive loop; returns a process exit status (0, or 2 for an unknown id).

    `read_line(prompt)` reads one typed line (raises EOFError at the end); None means `input`
    (:func:`read_typed_line`), with line editing where available (`enable_line_editing`). `out`: where to print
    the game (None: the current ``sys.stdout``, looked up at call time so that a redirected or captured stdout is
    honoured). `err`: where the `config error:` line goes (None: `out` when it is given, so that a caller's one
    stream gets everything, else the current ``sys.stderr``: `ragen play nope > game.txt` shows the error, and
    `ragen play nope | cat` has it apart from the game).
    """
    err = (sys.stderr if out is None else out) if err is None else err
    out = sys.stdout if out is None else out
    if read_line is None:
        enable_line_editing()
        tolerate_undecodable_input()
        read_line = read_typed_line
    from ragen_envs.registration import find_spec

    try:
        find_spec(env_id)  # as gym.make finds it: "module:id" imports the module that registers the id
    except gym.error.Error as exc:
        why = str(getattr(exc, "reason", exc)).rstrip(".")  # play names the closest ids its own way
        print(f"config error: cannot make {env_id!r}: {why}{_closest_ids(env_id)} (`ragen envs` lists the ids)",
              file=err)
        return 2
    try:
        env = gym.make(env_id, **(kwargs or {}))
    except (gym.error.Error, TypeError, ValueError, RuntimeError) as exc:
        # RuntimeError: an env whose constructor cannot do what the kwargs ask (Sokoban's level generator finding
        # no room of `min_solution_len`) says so in its message; a traceback would bury it.
        from ragen_envs.registration import kwarg_error

        print(f"config error: {env_id} with {kwargs or {}}: {kwarg_error(env_id, kwargs or {}, exc)}", file=err)
        return 2
    try:
        if not isinstance(env.action_space, gym.spaces.Text):
            print(f"config error: {env_id} is not a text env (its actions are {env.action_space}, not typed text): "
                  "`ragen play` plays the text envs that `ragen envs` lists", file=err)
            return 2
        return _play_loop(env, env_id, episode_seed=random.randrange(2**31) if seed is None else int(seed),
                          read_line=read_line, out=out, kwargs=kwargs or {}, err=err)
    except KeyboardInterrupt:
        print("\n(interrupted: bye)", file=out)
        return 130
    finally:
        env.close()


def read_typed_line(prompt: str) -> str:
    """`input(prompt)`, where a closed stdin (`ragen play ID <&-`: ``sys.stdin`` is None) is the end of input (EOFError)
    and a closed stdout shows no prompt, instead of input()'s RuntimeError "lost sys.stdin" / "lost sys.stdout"."""
    if sys.stdin is None:
        raise EOFError
    if sys.stdout is None:
        line = sys.stdin.readline()
        if not line:
            raise EOFError
        return line.rstrip("\n")
    return input(prompt)


def tolerate_undecodable_input(stream: Any = None) -> None:
    """Make `stream` (None: ``sys.stdin``) read bytes that are not text in its encoding as U+FFFD instead of raising
    UnicodeDecodeError in `input()` (a UTF-8 locale decodes strictly; a pasted Latin-1 byte was a traceback). A
    stream without ``reconfigure`` (a test's StringIO) is left as it is."""
    stream = sys.stdin if stream is None else stream
    reconfigure = getattr(stream, "reconfigure", None)
    if callable(reconfigure):
        try:
            reconfigure(errors="replace")
        except (ValueError, OSError):  # a closed or detached stream: input() reports that itself
            pass


def _closest_ids(env_id: str) -> str:
    """" (did you mean ...?)" naming the registered ids closest to `env_id` (case and the ``ragen/`` namespace
    ignored, so that ``Sokoban-v0`` and ``ragen/sokoban`` find ``ragen/Sokoban-v0``), or "" when none is close."""
    import difflib

    ids = list(gym.registry)
    key = env_id.strip().lower().removeprefix("ragen/")
    keyed = {i.lower().removeprefix("ragen/"): i for i in ids}
    # The same name with another version or namespace first; else the one closest spelling.
    names = [i for k, i in keyed.items() if key and k.rsplit("-v", 1)[0] == key.rsplit("-v", 1)[0]]
    names = names or [keyed[c] for c in difflib.get_close_matches(key, list(keyed), n=1, cutoff=0.6)]
    return f" (did you mean {' or '.join(repr(n) for n in names[:2])}?)" if names else ""


def _play_loop(env: Any, env_id: str, episode_seed: int, read_line: Callable[[str], str], out: TextIO,
               kwargs: dict[str, Any] | None = None, err: TextIO | None = None) -> int:
    """The episodes of :func:`play` until `q` or the end of input (0), or 2 with one `config error:` line when
    an episode cannot start (:func:`_start_episode`). Every episode has a known seed, so that `r` can restart the
    same level."""
    actions = [str(a) for a in getattr(env.unwrapped, "ACTIONS", ())]
    restart = False
    while True:
        if restart:
            episode_seed -= 1
        started = _start_episode(env, env_id, episode_seed, kwargs or {}, out if err is None else err)
        if started is None:
            return 2
        obs, info = started
        print(f"{env_id}, seed {episode_seed}" + (" (restarted)" if restart else ""), file=out)
        episode_seed += 1
        restart = False
        banner = BANNER.format(example=example_action(env))  # after reset: some examples depend on the state
        instructions = info.get("instructions", "")  # every ragen/ env gives them; a text env outside may not
        if instructions:
            print(instructions, file=out)
        print("-" * 60, file=out)
        print(banner, file=out)
        _show_observation(obs, out)
        total = 0.0
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
                rules = instructions or getattr(env.unwrapped, "instructions", lambda: "")()
                if rules:
                    print(rules, file=out)
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


def _start_episode(env: Any, env_id: str, seed: int, kwargs: dict[str, Any], out: TextIO) -> tuple[Any, dict] | None:
    """`env.reset(seed=seed)`, or None after one `config error:` line when the env cannot start an episode with
    these kwargs: gymnasium's `render_mode="human"` window needs pygame (DependencyNotInstalled at the first
    reset), and an env's level generator says in a ValueError/RuntimeError what it could not build."""
    try:
        return env.reset(seed=seed)
    except (gym.error.Error, ValueError, RuntimeError) as exc:
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"config error: {env_id} with {kwargs}: cannot start an episode (seed {seed}): {why}", file=out)
        return None


# --------------------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------------------


def parse_kwargs(pairs: Sequence[str]) -> dict[str, object]:
    """`key=value` strings -> kwargs; values parsed as Python literals when possible (`4` -> 4, `grid` -> "grid").

    Raises:
        ValueError: for a string without `=` or with nothing before it.
    """
    import ast

    out: dict[str, object] = {}
    for pair in pairs:
        if "=" not in pair:
            raise ValueError(f"env kwarg {pair!r} must look like key=value")
        key, value = pair.split("=", 1)
        if not key.strip():
            raise ValueError(f"env kwarg {pair!r} has no name before '='; it must look like key=value")
        try:
            out[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[key] = value
    return out


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """`ragen play ENV_ID [--seed S] [key=value ...]`."""
    parser = argparse.ArgumentParser(
        prog=prog, description="Play a text env in the terminal: type an action (e.g. Up, or Up || Left) or a full "
        "response (<think>..</think><answer>..</answer>); the game shows the state, the reward and the info.",
        epilog="While playing: q quits, r restarts the level (same seed), ? shows the rules and the state again; "
        "an empty line costs no turn; Ctrl-D (end of input) quits, Ctrl-C quits with status 130. `ragen envs` "
        "lists the ids.")
    parser.add_argument("env_id", help="a registered id, e.g. ragen/Sokoban-v0 (`ragen envs` lists them)")
    parser.add_argument("--seed", type=int, default=None,
                        help=f"seed of the first episode (an integer in [0, {MAX_SEED}]; default: a random one)")
    parser.add_argument("env_kwargs", nargs="*", metavar="key=value", help="keyword arguments for gym.make")
    return parser


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    """Parse `argv` and :func:`play`; 2 with one `config error:` line for a kwarg that is not key=value or a
    --seed outside [0, MAX_SEED]."""
    # Intermixed: `ID --seed S key=value` (the documented order) left `key=value` unrecognised with parse_args,
    # which matches both positionals before the option and so finds none left for the kwargs after it.
    args = build_parser(prog).parse_intermixed_args(argv)
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
    # a closed stdout pipe ends it quietly, as `ragen play` does
    from ragen_core.apps.cli import run_command

    raise SystemExit(run_command("play", sys.argv[1:]))
