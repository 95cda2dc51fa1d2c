"""Data sets of the task envs: a strict loader for user files and tiny fixtures in the public formats.

    from ragen_envs.data import Field, load_records, fixture_path

    schema = {"target": int, "nums": Field(list, item_type=int)}
    records = load_records(fixture_path("countdown_sample.jsonl"), schema)

`fixtures/` holds a few records of each public format (Countdown `{target, nums}`, MetaMathQA
`{query, response, type}`, ...) so that every loader is tested against the real layout.
"""

from __future__ import annotations

from pathlib import Path

from ragen_envs.data.loading import Field, Schema, load_records, record_index, validate_record

FIXTURES_DIR = Path(__file__).resolve().parent / "fixtures"


def fixture_path(name: str) -> Path:
    """The path of a bundled fixture file, e.g. `fixture_path("math_sample.jsonl")`."""
    path = FIXTURES_DIR / name
    if not path.is_file():
        known = sorted(p.name for p in FIXTURES_DIR.glob("*")) if FIXTURES_DIR.is_dir() else []
        raise ValueError(f"no fixture named {name!r}; available: {', '.join(known) or 'none'}")
    return path


__all__ = ["FIXTURES_DIR", "Field", "Schema", "fixture_path", "load_records", "record_index", "validate_record"]
