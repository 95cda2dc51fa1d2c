"""Sudoku for LLM agents: n x n puzzles with a unique solution (exact solver), placements `R3C5=7`.

    from ragen_envs.sudoku import SudokuEnv, generate_puzzle, count_solutions

    env = SudokuEnv(size=9, givens=30)
"""

from ragen_envs.sudoku.env import SudokuEnv, parse_board
from ragen_envs.sudoku.generator import DIFFICULTY_GIVENS, generate_puzzle
from ragen_envs.sudoku.solver import SearchBudgetExceeded, count_solutions, is_solved, singles_solve, solve

__all__ = [
    "DIFFICULTY_GIVENS",
    "SearchBudgetExceeded",
    "SudokuEnv",
    "count_solutions",
    "generate_puzzle",
    "is_solved",
    "parse_board",
    "singles_solve",
    "solve",
]
