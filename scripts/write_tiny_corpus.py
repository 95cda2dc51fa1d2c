"""Write a new version of the tiny model's tokenizer corpus from today's envs, and print the digests to record.

    python scripts/write_tiny_corpus.py                 # writes ragen_core/policy/data/tiny_corpus_v{N+1}.json.gz
    python scripts/write_tiny_corpus.py --version 3 --no-models

The corpus is `ragen_core.policy.tiny.generate_corpus()` (a built-in sample plus every registered env's text).
A version is written once: an existing file is never replaced (`--force` only for a version not yet shipped).
Then, in `ragen_core/policy/tiny.py`: set `TINY_CORPUS_VERSION` to the new version, add its corpus digest to
`TINY_CORPUS_SHA256` and replace `TINY_MODEL_SHA256` by the printed model digests (tests/policy/test_tiny_pinned.py
checks them). Every tiny config's numbers then move: say so where they are recorded.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    from ragen_core.policy import tiny

    parser = argparse.ArgumentParser(prog="write_tiny_corpus.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", type=int, default=None,
                        help=f"the new version (default: TINY_CORPUS_VERSION + 1 = {tiny.TINY_CORPUS_VERSION + 1})")
    parser.add_argument("--out", type=Path, default=None, help=f"folder to write into (default: {tiny.CORPUS_DIR})")
    parser.add_argument("--seeds", type=int, default=6, help="episodes per env: seeds 0..N-1 (default 6)")
    parser.add_argument("--steps", type=int, default=4, help="steps per episode (default 4)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random responses (default 0)")
    parser.add_argument("--force", action="store_true", help="replace an existing file (never a shipped version)")
    parser.add_argument("--no-models", action="store_true", help="do not build the models to print their digests")
    args = parser.parse_args(argv)

    version = tiny.TINY_CORPUS_VERSION + 1 if args.version is None else args.version
    if args.force and version in tiny.TINY_CORPUS_SHA256:
        parser.error(f"version {version} is recorded in TINY_CORPUS_SHA256 (shipped): it is never rewritten")
    seeds = tuple(range(args.seeds))
    texts, env_ids = tiny.generate_corpus(seeds=seeds, steps=args.steps, seed=args.seed)
    try:
        path = tiny.write_tiny_corpus(
            texts, version, env_ids=env_ids, directory=args.out, overwrite=args.force,
            generator={"function": "generate_corpus", "seeds": list(seeds), "steps": args.steps, "seed": args.seed},
        )
    except FileExistsError as exc:
        parser.error(str(exc))
    corpus = tiny.load_tiny_corpus(version, args.out)
    report = {"file": str(path), "version": version, "texts": len(corpus.texts), "env_ids": list(corpus.env_ids),
              "TINY_CORPUS_SHA256": {version: corpus.sha256}}
    if not args.no_models:
        digests = {}
        for kind in ("text", "vision"):
            with tempfile.TemporaryDirectory() as tmp:
                built = tiny.build_tiny_model(tmp, corpus, vision=kind == "vision")
                digests[kind] = tiny.tiny_model_digest(built)
        report["TINY_MODEL_SHA256"] = digests
    print(json.dumps(report, indent=2))
    print(f"next: TINY_CORPUS_VERSION = {version} in ragen_core/policy/tiny.py, and record the digests above",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
