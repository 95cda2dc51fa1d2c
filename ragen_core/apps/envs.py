"""`ragen envs [--markdown]`: every registered env id with its one-line description (base install, no torch).

``--markdown`` prints the table of docs/envs.md instead (id, description, the env's own knobs: the keyword
arguments ``gym.make`` accepts beyond the protocol's shared ones, and its class), so that page is generated
from the registry and the classes, never typed by hand.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

PROG = "ragen envs"
#: Keyword arguments every env takes from the protocol (docs/protocol.md), left out of the per-env knobs.
SHARED_KWARGS = frozenset({"action_format", "format_penalty", "max_turns", "render_mode", "split_actions",
                           "turn_limit", "vision", "max_actions_per_turn"})


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="List the registered env ids.")
    p.add_argument("--markdown", action="store_true", help="print the Markdown table of docs/envs.md")
    return p


def markdown_table() -> str:
    """The env table of docs/envs.md, from the registry and the env classes."""
    import gymnasium as gym

    import ragen_envs  # noqa: F401  (registers the ids)
    from ragen_envs.registration import ENV_SPECS, accepted_kwargs

    lines = ["| id | what it is | its own knobs (`gym.make` kwargs) | class |", "|---|---|---|---|"]
    for spec in ENV_SPECS:
        knobs = [k for k in accepted_kwargs(spec.id) if k not in SHARED_KWARGS and k not in spec.kwargs]
        entry = gym.spec(spec.id).entry_point
        cls = entry if isinstance(entry, str) else f"{entry.__module__}:{entry.__qualname__}"
        lines.append(f"| `{spec.id}` | {spec.description} | {', '.join(f'`{k}`' for k in knobs) or '-'} | "
                     f"`{cls.replace(':', '.')}` |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    """Print one line per env id, `ID  DESCRIPTION` (or the Markdown table); returns 0."""
    args = build_parser(prog).parse_args(argv)
    if args.markdown:
        print(markdown_table(), end="")
        return 0
    from ragen_envs.registration import ENV_SPECS

    width = max(len(spec.id) for spec in ENV_SPECS)
    for spec in ENV_SPECS:
        print(f"{spec.id:<{width}}  {spec.description}")
    return 0


if __name__ == "__main__":
    # a closed stdout pipe (`| head`) ends it quietly, as `ragen envs` does
    from ragen_core.apps.cli import run_command

    raise SystemExit(run_command("envs", sys.argv[1:]))
