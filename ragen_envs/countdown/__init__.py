"""Countdown: reach a target with + - * / using every given number exactly once (RAGEN's arithmetic task).

Modules: `expression` (safe AST-whitelist parser, exact rational evaluation), `solver` (exhaustive
solver), `generator` (seeded instances, each proven solvable), `env` (`CountdownEnv`, id
`ragen/Countdown-v0`).
"""

from ragen_envs.countdown.expression import ExpressionError, ParsedExpression, parse_expression
from ragen_envs.countdown.generator import CountdownConfig, generate_countdown, generate_dataset
from ragen_envs.countdown.solver import CountdownSolver, is_solvable, solve

__all__ = [
    "CountdownConfig",
    "CountdownSolver",
    "ExpressionError",
    "ParsedExpression",
    "generate_countdown",
    "generate_dataset",
    "is_solvable",
    "parse_expression",
    "solve",
]
