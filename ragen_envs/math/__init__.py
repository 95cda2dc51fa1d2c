"""MetaMathQA-style math: procedural word/algebra problems with exact answers and equivalence checking.

Modules: `generator` (seeded problems in the `{query, response, type}` schema, answers by sympy),
`grammar` (the closed grammar an answer must fit: lead-in words, one math span, unit words), `answer`
(`is_equivalent`: the grammar, then math-verify and our sympy reader, which must agree), `checker` (the check
in a worker process, bounded by CPU time), `env` (`MathEnv`, id `ragen/MetaMathQA-v0`).
"""

from ragen_envs.math.answer import check_answer, extract_gold, is_equivalent
from ragen_envs.math.generator import PROBLEM_KINDS, MathConfig, generate_dataset, generate_problem

__all__ = [
    "PROBLEM_KINDS",
    "MathConfig",
    "check_answer",
    "extract_gold",
    "generate_dataset",
    "generate_problem",
    "is_equivalent",
]
