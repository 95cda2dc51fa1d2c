"""Write verl train/val parquet files for a ragen/ env: one row per episode seed (docs/scale_out.md, section verl).

Each row carries the env's opening chat as ``prompt`` (verl filters and batches by its length) and the episode in
``extra_info`` (read by ``ragen_core.integrations.verl.env.episode_from_extra_info``). Training seeds start at
10000, validation seeds at 123 (docs/protocol.md). Usage:

    python scripts/verl/make_env_data.py OUT_DIR [--env ragen/Sokoban-v0] [--train 1024] [--val 64]
"""

from __future__ import annotations

import argparse
import os

import pandas as pd

from ragen_core.integrations.verl.env import EnvEpisode


def rows(env_id: str, first_seed: int, n: int, max_turns: int, length_limit: int, split: str) -> list[dict]:
    out = []
    for i in range(n):
        seed = first_seed + i
        extra = {"env_id": env_id, "seed": seed, "max_turns": max_turns, "length_limit": length_limit,
                 "split": split, "index": i}
        out.append({"data_source": env_id, "agent_name": "ragen_env_agent",
                    "prompt": EnvEpisode(env_id, seed, max_turns=max_turns, length_limit=length_limit).start(),
                    "reward_model": {"style": "env", "ground_truth": ""}, "extra_info": extra})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--env", default="ragen/Sokoban-v0")
    ap.add_argument("--train", type=int, default=1024)
    ap.add_argument("--val", type=int, default=64)
    ap.add_argument("--max-turns", type=int, default=5)
    ap.add_argument("--length-limit", type=int, default=400)
    a = ap.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    for split, seed, n in (("train", 10000, a.train), ("val", 123, a.val)):
        pd.DataFrame(rows(a.env, seed, n, a.max_turns, a.length_limit, split)).to_parquet(
            os.path.join(a.out_dir, f"{split}.parquet"))
    print(f"wrote {a.train} train and {a.val} val rows of {a.env} to {a.out_dir}")


if __name__ == "__main__":
    main()
