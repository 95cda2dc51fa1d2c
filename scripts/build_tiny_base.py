"""Build the tiny base model (``model.path = "tiny-base"``) and print its cost and held-out accuracy.

    python scripts/build_tiny_base.py                      # the cached default: what load_policy("tiny-base") uses
    python scripts/build_tiny_base.py --out /tmp/tb --steps 600 --eval-every 200   # an experiment (not cached)

Run it at low priority on a shared machine (``nice -n 19``); it uses one torch thread. The default build takes
about 28 CPU-minutes (docs/training.md, "The tiny base model"). It prints one JSON line per log step and, at the
end, the meta file's contents (recipe digest, CPU and wall seconds, held-out exact match before and after).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    import torch

    from ragen_core.policy import tiny_base

    parser = argparse.ArgumentParser(prog="build_tiny_base.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None,
                        help="build into this folder (an experiment) instead of the cache (the default recipe only)")
    parser.add_argument("--cache-dir", type=Path, default=None, help="cache root (default $RAGEN2_CACHE or ~/.cache)")
    parser.add_argument("--recipe", default="{}",
                        help="JSON of BaseRecipe fields to change (with --out), e.g. '{\"steps\": 600}'")
    parser.add_argument("--steps", type=int, default=None, help="shorthand for the recipe's steps (with --out)")
    parser.add_argument("--eval-every", type=int, default=0, help="evaluate every N steps (experiments; costs CPU)")
    parser.add_argument("--eval-n", type=int, default=200, help="held-out examples per shape (default 200)")
    args = parser.parse_args(argv)

    torch.set_num_threads(1)
    changes = json.loads(args.recipe)
    if args.steps is not None:
        changes["steps"] = args.steps
    for k, v in list(changes.items()):  # JSON lists -> the recipe's tuples
        if isinstance(v, list):
            changes[k] = tuple(tuple(x) if isinstance(x, list) else x for x in v)
    recipe = dataclasses.replace(tiny_base.DEFAULT_RECIPE, **changes)
    if changes and args.out is None:
        parser.error("a changed recipe is an experiment: give --out")
    print(json.dumps({"recipe": dataclasses.asdict(recipe), "recipe_sha256": tiny_base.recipe_digest(recipe)}),
          flush=True)

    def log(metrics: dict) -> None:
        print(json.dumps(metrics), flush=True)

    if args.out is not None:
        path = tiny_base.build_tiny_base_model(args.out, recipe, log=log, eval_n=args.eval_n,
                                               eval_every=args.eval_every)
    else:
        path = tiny_base.default_tiny_base_dir(args.cache_dir, recipe, log=log)
    print(json.dumps({"path": str(path), **json.loads((path / "ragen_tiny_base.json").read_text())}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
