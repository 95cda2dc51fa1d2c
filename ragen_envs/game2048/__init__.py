"""2048 for LLM agents: the standard rules, board size and target tile as knobs, an expectimax oracle.

    from ragen_envs.game2048 import Game2048Env, move, best_move

    env = Game2048Env(size=3, target=64)
"""

from ragen_envs.game2048.env import Game2048Env, check_board
from ragen_envs.game2048.oracle import best_move
from ragen_envs.game2048.rules import DIRECTIONS, legal_moves, move, slide_row_left, spawn

__all__ = ["DIRECTIONS", "Game2048Env", "best_move", "check_board", "legal_moves", "move", "slide_row_left", "spawn"]
