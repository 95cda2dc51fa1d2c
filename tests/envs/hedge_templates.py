"""Hostile answer templates shared by the reward-integrity tests of the envs with one winning action.

Each template wraps the winning action ``{m}`` (and, where it has one, another action ``{o}`` that does not win)
in a way that does not commit to ``{m}``: a negation, a hedge between two actions, a qualifier, or ``{m}`` run
into another action in one answer piece. An env must refuse or not execute every one of them, so that none
succeeds and none earns more than committing to a losing action. The per-env test files add their own
templates (Sudoku's digit variants, 2048's move words, the cube's notations) after these.
"""

from __future__ import annotations

#: {m}: the winning action, {o}: an action that does not win.
HEDGES: tuple[str, ...] = (
    "not {m}",
    "no {m}",
    "don't {m}",
    "{m} is wrong",
    "maybe {m}",
    "{m}?",
    "{m} or {o}",
    "{o} or {m}",
    "either {m} or {o}",
    "{m}, {o}",
    "{m} {o}",
    "{o} {m}",
    "{m}/{o}",
    "{m} | {o}",
    "{m} and {o}",
    "{m} (not {o})",
    "{m}{m}",
    "{m}-{o}",
)


def with_hedges(*specific: str) -> tuple[str, ...]:
    """The shared hedges followed by an env's own templates, without duplicates (first occurrence kept)."""
    return tuple(dict.fromkeys((*HEDGES, *specific)))
