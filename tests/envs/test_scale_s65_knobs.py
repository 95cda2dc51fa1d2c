"""Size knobs and data sets of SearchQA, WebShop, Countdown, Sudoku and MetaMathQA: cost that scales or a bound.

What a sweep of the knobs found, and what this file pins:

- SearchQA `num_entities` is at most 5,000 (a world is drawn at every reset; 100,000 ran past a minute).
- WebShop `num_products` is at most 20,000 (the catalogue is drawn and indexed when the env is built; 100,000 took
  24 s).
- Countdown's work budget charges a draw for what it costs: a pair of table values at its real price and a fixed
  cost per draw (draws of 3-4 numbers, large ones included, ran 2-4 times longer than their budget said).
- Sudoku: a random 16x16 grid restarts a search that runs into its heavy tail (about 3% of grids ran for
  minutes), and 16x16 needs 128 givens (at 120 the uniqueness checks took up to tens of seconds a reset).
- Countdown, MetaMathQA and SearchQA data sets are read and validated once per file version, not once per env.

The observations, rewards and dynamics at the defaults and at every shipped config's env settings are compared
with hashes recorded from the code before these changes.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import tomllib

import ragen_envs  # noqa: F401  (registers the ids)
import ragen_envs.data.cache as cache
from ragen_envs.countdown.generator import CountdownConfig, generate_countdown
from ragen_envs.data import fixture_path
from ragen_envs.sudoku.solver import random_solution

ROOT = Path(__file__).resolve().parents[2]
IDS = ("ragen/Countdown-v0", "ragen/MetaMathQA-v0", "ragen/SearchQA-v0", "ragen/Sudoku-v0", "ragen/WebShop-v0")


def _answer(text: str) -> str:
    return f"<think>t</think><answer>{text}</answer>"


# ------------------------------------------------------------------------------------ shipped settings unchanged
def _fingerprint(env_id: str, kwargs: dict) -> tuple[str, str]:
    """(sha256 of the reset observations of seeds 0..299, sha256 of 12 scripted episodes), 16 hex digits each.

    The episodes start at seeds 1000..1005; each is played once by the oracle (`oracle_step`) and once by a seeded
    random policy (`random_action`, or the answer "1" where the env has none), up to 12 turns: every observation,
    reward and end flag is hashed."""
    env = gym.make(env_id, **kwargs)
    u = env.unwrapped
    resets = hashlib.sha256()
    for seed in range(300):
        obs, _ = env.reset(seed=seed)
        resets.update(obs.encode())
    episodes = hashlib.sha256()
    for seed in range(6):
        for mode in ("oracle", "random"):
            obs, _ = env.reset(seed=1000 + seed)
            episodes.update(obs.encode())
            rng = np.random.default_rng(seed)
            for _ in range(12):
                if mode == "oracle":
                    acts = u.oracle_step()[1]
                    act = "||".join(acts) if len(acts) > 1 else acts[0]
                elif callable(getattr(u, "random_action", None)):
                    act = u.random_action(rng)
                else:
                    act = "1"
                obs, reward, term, trunc, _ = env.step(_answer(act))
                episodes.update(obs.encode() + repr((round(float(reward), 9), term, trunc)).encode())
                if term or trunc:
                    break
    env.close()
    return resets.hexdigest()[:16], episodes.hexdigest()[:16]


#: Recorded from the code before these changes: each shipped config's [env] of these envs, and their defaults.
RECORDED = {
    "countdown_tiny": ("f501a9b6e3dbba9a", "4d954ba82a48d861"),
    "math_tiny": ("559e25d34a8881fc", "98dafd61d5746b1f"),
    "searchqa_tiny": ("7d7468f9c8bdfb89", "0bb7fd09cbcf378e"),
    "sudoku_tiny": ("ce871f065a68a314", "06b78268ad22e1e1"),
    "webshop_tiny": ("b6a6ccb62680194e", "d35ad5cbe64763bb"),
    "default:ragen/Countdown-v0": ("7d4f0c358287ee80", "f4ead65744dccf2a"),
    "default:ragen/MetaMathQA-v0": ("e05a6fac766bc2cf", "ca6beafd379a7c94"),
    "default:ragen/SearchQA-v0": ("a45f892cf94a8a89", "a551a300f74fa8d6"),
    "default:ragen/Sudoku-v0": ("e6e5da12b193b78e", "8f8d03715cdb256f"),
    "default:ragen/WebShop-v0": ("e6fbce4d6622ecee", "da16dbd1701b61ea"),
}


def _settings() -> dict[str, tuple[str, dict]]:
    out = {}
    for path in sorted((ROOT / "configs").glob("*.toml")):
        env = tomllib.loads(path.read_text())["env"]
        if env["id"] in IDS:
            out[path.stem] = (env["id"], env.get("kwargs", {}))
    out.update({f"default:{i}": (i, {}) for i in IDS})
    return out


def test_every_shipped_config_of_these_envs_has_a_recorded_fingerprint():
    assert set(_settings()) == set(RECORDED)


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_shipped_settings_play_as_before(name):
    env_id, kwargs = _settings()[name]
    assert _fingerprint(env_id, kwargs) == RECORDED[name]


# ------------------------------------------------------------------------------------------------ bounds
def _one_line_error(env_id: str, **kwargs) -> str:
    with pytest.raises(ValueError) as info:
        gym.make(env_id, **kwargs)
    text = str(info.value)
    assert "\n" not in text
    return text


def test_searchqa_num_entities_is_bounded_where_a_reset_stays_under_a_second():
    text = _one_line_error("ragen/SearchQA-v0", num_entities=5_001)
    assert "num_entities must be an integer in [12, 5000], got 5001" in text and "every reset" in text
    assert "corpus=" in text  # what to do for a larger corpus
    _one_line_error("ragen/SearchQA-v0", num_entities=11)
    gym.make("ragen/SearchQA-v0", num_entities=5_000)  # the top is accepted (no world is drawn before reset)


def test_webshop_num_products_is_bounded_where_the_catalogue_builds_in_seconds():
    text = _one_line_error("ragen/WebShop-v0", num_products=20_001)
    assert "num_products must be an integer in [20, 20000], got 20001" in text and "products=FILE" in text
    _one_line_error("ragen/WebShop-v0", num_products=19)


def test_sudoku_16x16_needs_128_givens():
    text = _one_line_error("ragen/Sudoku-v0", size=16, givens=127)
    assert "givens must be an integer in [128, 255] for a 16x16 board, got 127" in text
    gym.make("ragen/Sudoku-v0", size=16, givens=128)


# ------------------------------------------------------------------------------------------------ Countdown
class _CallBudget:
    """Counts Python function calls (a deterministic measure of work) while active; raises once past `limit`."""

    def __init__(self, limit: int):
        self.limit, self.calls = limit, 0

    def __call__(self, frame, event, arg):
        if event in ("call", "c_call"):
            self.calls += 1
            if self.calls > self.limit:
                raise RuntimeError(f"more than {self.limit} calls")

    def run(self, fn):
        sys.setprofile(self)
        try:
            return fn()
        finally:
            sys.setprofile(None)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(num_count=3, num_range=(1, 100), target_range=(900, 100_000)),  # cheap draws, mostly unsolvable
        dict(num_count=4, num_range=(10**11, 2 * 10**11), target_range=(1, 100)),  # four numbers near 10^11
    ],
)
def test_countdown_work_budget_stands_for_the_same_computation_whatever_the_draws(kwargs):
    # Each unit of work the budget counts must stand for at most 60 Python calls, about the rate of the expensive
    # 6-number searches (40). Before, cheap 3- and 4-number draws made 70-135 calls a unit (tables and redraws that
    # the budget did not count), so the same budget meant 2-4 times more time for them.
    config = CountdownConfig(**kwargs, max_work=10_000)
    meter = _CallBudget(3_000_000)
    with pytest.raises(ValueError, match=r"solver work (\d+), over max_work") as info:
        meter.run(lambda: generate_countdown(np.random.default_rng(0), config))
    counted = int(re.search(r"solver work (\d+)", str(info.value)).group(1))
    assert meter.calls <= 60 * counted


# ------------------------------------------------------------------------------------------------ Sudoku
def _is_full_grid(grid: list[int], n: int) -> bool:
    """Every row, column and box holds 1..n (an independent check)."""
    b = int(n**0.5)
    rows = [grid[r * n:(r + 1) * n] for r in range(n)]
    cols = [[grid[r * n + c] for r in range(n)] for c in range(n)]
    boxes = [[grid[(br + i) * n + bc + j] for i in range(b) for j in range(b)]
             for br in range(0, n, b) for bc in range(0, n, b)]
    return all(sorted(u) == list(range(1, n + 1)) for u in rows + cols + boxes)


def test_a_16x16_grid_whose_first_search_runs_into_the_tail_restarts():
    # default_rng(15): the unrestarted search visits over 2,000,000 positions (minutes) before its grid.
    meter = _CallBudget(300_000)
    grid = meter.run(lambda: random_solution(np.random.default_rng(15), 16))
    assert _is_full_grid(grid, 16)


def test_4x4_and_9x9_grids_are_the_same_as_before():
    # Recorded from the code before the restarts: the grids of seeds 0..299 (no 4x4 or 9x9 try ever restarts).
    recorded = {4: "4870c5c0ffc489b6", 9: "d21fd4afc21474e1"}
    for n, digest in recorded.items():
        h = hashlib.sha256()
        for seed in range(300):
            grid = random_solution(np.random.default_rng(seed), n)
            assert _is_full_grid(grid, n)
            h.update(bytes(grid))
        assert h.hexdigest()[:16] == digest


# ------------------------------------------------------------------------------------------------ data sets
def _countdown_file(path: Path) -> None:
    rows = [{"target": a + b + c, "nums": [a, b, c]} for a, b, c in [(1, 2, 3), (4, 5, 6), (7, 8, 9)] * 50]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _copy_fixture(name: str):
    def write(path: Path) -> None:
        path.write_bytes(fixture_path(name).read_bytes())

    return write


@pytest.mark.parametrize(
    ("env_id", "write"),
    [
        ("ragen/Countdown-v0", _countdown_file),
        ("ragen/MetaMathQA-v0", _copy_fixture("math_sample.jsonl")),
        ("ragen/SearchQA-v0", _copy_fixture("searchqa_sample.jsonl")),
    ],
)
def test_a_data_set_is_read_once_per_file_version_not_once_per_env(env_id, write, tmp_path, monkeypatch):
    # Without the digest of recently written files, a file's version is its stat (the test writes it just now).
    monkeypatch.setattr(cache, "RACY_SECONDS", 0.0)
    path = tmp_path / "data.jsonl"
    write(path)
    reads: list[Path] = []
    original = Path.read_bytes

    def counting_read_bytes(self):
        if self.name == path.name:
            reads.append(self)
        return original(self)

    monkeypatch.setattr(Path, "read_bytes", counting_read_bytes)
    first = [gym.make(env_id, dataset=str(path)) for _ in range(3)]
    assert len(reads) == 1
    obs = [env.reset(seed=0, options={"index": 0})[0] for env in first]
    assert obs[0] == obs[1] == obs[2]
    # An edited file is a new version: read again.
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[-1], *lines[:-1]]) + "\n")
    gym.make(env_id, dataset=str(path))
    assert len(reads) == 2
