"""Strict loading of user data sets: JSONL / JSON files validated against a small schema.

Every task env that accepts `dataset=PATH` reads it with `load_records(path, schema)`. The point is
that a bad user file fails *at load time* with a message that names the file, the line and the field,
instead of a KeyError in the middle of a rollout:

    >>> schema = {"target": int, "nums": Field(list, item_type=int)}
    >>> records = load_records("countdown.jsonl", schema)
    ValueError: countdown.jsonl:3: field 'nums': expected a list of int, got str ('1 2 3')

File formats (chosen by the suffix; `.gz` is not supported):

- `.jsonl` / `.ndjson`: one JSON object per line; blank lines are skipped. Line numbers are the
  physical lines of the file (1-based).
- `.json`: either a top-level array of objects, or an object with a single key holding that array
  (e.g. `{"data": [...]}`, as some HF exports do). Line numbers are the line on which each object
  *starts*, so an error still points into the file. Nothing but whitespace may follow the array (a
  second array written after the first used to be dropped without a word).

Both may start with a UTF-8 byte order mark (Windows editors write one); it is skipped. Lines may end
in `\r\n`. An object that holds a key twice is refused (naming the key): `json` would keep only the
last value and drop the other silently.

A schema maps field names to either a type, a tuple of types, or a `Field` (below). Validation rules:

- a missing required field, a value of the wrong type, a list element of the wrong type, or a failed
  `check` raises `ValueError` naming `file:line`, the field (dotted for nested objects, with the index
  for list elements: `goal.options[2]`) and what was expected;
- `bool` is never accepted where `int`/`float` is asked for (JSON `true` is not a number), but an
  `int` is accepted where `float` is asked for (JSON writes 3.0 as 3 in many tools);
- a number that is not finite (`NaN`, `Infinity`, `1e999`: Python's `json` reads them, JSON does not
  allow them) is refused in a field the schema names, where a NaN would pass every range check; fields not
  named in the schema are kept as they are (schemas describe what the env needs, not everything the
  public format may carry);
- an empty file (no record) is an error: an env cannot sample from it.

The records come back as plain `dict`s in file order; nothing is converted.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ragen_envs.data import strict_json
from ragen_envs.validation import require_int

__all__ = ["Field", "Schema", "load_numbered_records", "load_records", "validate_record"]

TypeSpec = type | tuple[type, ...]


@dataclass(frozen=True)
class Field:
    """How one field of a record is validated.

    Attributes:
        type: the accepted JSON type(s): `str`, `int`, `float`, `bool`, `list`, `dict` or a tuple of them.
        required: whether the field must be present (an absent optional field is not checked).
        item_type: for `list` fields, the accepted type(s) of every element.
        schema: for `dict` fields (or lists of dicts, with `item_type=dict`), a nested schema.
        check: extra validation of the value, returning an error message or None when the value is
            fine (e.g. `lambda v: None if v else "must not be empty"`).
        nullable: whether JSON `null` is accepted.
    """

    type: TypeSpec
    required: bool = True
    item_type: TypeSpec | None = None
    schema: Mapping[str, Any] | None = None
    check: Callable[[Any], str | None] | None = None
    nullable: bool = False


#: field name -> type, tuple of types, or Field
Schema = Mapping[str, type | tuple | Field]

_TYPE_NAMES = {str: "str", int: "int", float: "float", bool: "bool", list: "list", dict: "object"}


def _as_field(spec: Any, name: str) -> Field:
    if isinstance(spec, Field):
        return spec
    if isinstance(spec, type) or (isinstance(spec, tuple) and all(isinstance(t, type) for t in spec)):
        return Field(spec)
    raise ValueError(f"schema entry {name!r} must be a type, a tuple of types or a Field, got {spec!r}")


def _types(spec: TypeSpec) -> tuple[type, ...]:
    types = spec if isinstance(spec, tuple) else (spec,)
    if float in types and int not in types:
        types = (*types, int)  # JSON writers print 3.0 as 3
    return types


def _type_ok(value: Any, spec: TypeSpec) -> bool:
    types = _types(spec)
    if isinstance(value, bool) and bool not in types:
        return False  # bool is a subclass of int in Python, but not a number in JSON
    return isinstance(value, types)


def _not_finite(value: Any, field: Field, where: str, path: str) -> ValueError | None:
    """The error for a float that is NaN or infinite (None otherwise). Python's `json` reads the non-JSON `NaN`,
    `Infinity` and `1e999` as floats; a NaN compares false with everything, so it would pass every range
    check of a field the env reads (a price, a target) and then play as no real value does."""
    if isinstance(value, float) and not math.isfinite(value):
        return ValueError(f"{where}: field {path!r}: expected a finite number, got {_show(value)} (JSON has no NaN "
                          "or infinity)")
    return None


def _type_name(spec: TypeSpec) -> str:
    types = spec if isinstance(spec, tuple) else (spec,)
    return " or ".join(_TYPE_NAMES.get(t, t.__name__) for t in types)


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _got(value: Any) -> str:
    kind = "null" if value is None else _TYPE_NAMES.get(type(value), type(value).__name__)
    return f"{kind} ({_show(value)})"


def validate_record(record: Any, schema: Schema, where: str, prefix: str = "") -> None:
    """Check one decoded record against `schema`; raise ValueError(`where: field ...`) on the first problem.

    Args:
        record: the decoded JSON value (must be an object).
        schema: field -> type / tuple of types / Field.
        where: the location prefix of error messages, e.g. "data.jsonl:12".
        prefix: dotted path of the enclosing field for nested schemas.
    """
    if not isinstance(record, dict):
        what = f"field {prefix!r}" if prefix else "record"
        raise ValueError(f"{where}: {what}: expected a JSON object, got {_got(record)}")
    for name, spec in schema.items():
        field = _as_field(spec, name)
        path = f"{prefix}.{name}" if prefix else name
        if name not in record:
            if field.required:
                raise ValueError(f"{where}: missing field {path!r} (expected {_type_name(field.type)})")
            continue
        _validate_value(record[name], field, where, path)


def _validate_value(value: Any, field: Field, where: str, path: str) -> None:
    if value is None:
        if field.nullable:
            return
        raise ValueError(f"{where}: field {path!r}: expected {_type_name(field.type)}, got null")
    if not _type_ok(value, field.type):
        expected = _type_name(field.type)
        if field.item_type is not None:
            expected = f"a list of {_type_name(field.item_type)}"
        raise ValueError(f"{where}: field {path!r}: expected {expected}, got {_got(value)}")
    if (error := _not_finite(value, field, where, path)) is not None:
        raise error
    if isinstance(value, list) and field.item_type is not None:
        for i, item in enumerate(value):
            item_path = f"{path}[{i}]"
            if not _type_ok(item, field.item_type):
                raise ValueError(
                    f"{where}: field {item_path!r}: expected {_type_name(field.item_type)}, got {_got(item)}"
                )
            if (error := _not_finite(item, field, where, item_path)) is not None:
                raise error
            if field.schema is not None and isinstance(item, dict):
                validate_record(item, field.schema, where, item_path)
    elif isinstance(value, dict) and field.schema is not None:
        validate_record(value, field.schema, where, path)
    if field.check is not None:
        problem = field.check(value)
        if problem:
            raise ValueError(f"{where}: field {path!r}: {problem} (got {_show(value)})")


def _decode_line(path: Path, lineno: int, raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{path}:{lineno}: not valid UTF-8 (byte 0x{raw[exc.start]:02x} at byte {exc.start + 1} of the line)"
        ) from None


_BOM = b"\xef\xbb\xbf"


def _json_error(path: Path, lineno: int, exc: strict_json.JSONValueError) -> ValueError:
    if isinstance(exc, strict_json.DuplicateKeyError):
        return _duplicate_key_error(path, lineno, exc)
    where = f" at column {exc.colno}" if exc.colno is not None else ""
    return ValueError(f"{path}:{lineno}: invalid JSON ({exc.msg}{where})")


def _duplicate_key_error(path: Path, lineno: int, exc: strict_json.DuplicateKeyError) -> ValueError:
    return ValueError(
        f"{path}:{lineno}: field {exc.key!r}: given twice in one object; JSON keeps only the last value, "
        "so the other would be lost: keep one"
    )


def _iter_jsonl(path: Path, data: bytes):
    # Records are separated by "\n" only: U+2028, U+0085 and friends are valid inside JSON strings
    # (json.dumps(ensure_ascii=False) writes them raw), so str.splitlines() would cut records apart.
    for lineno, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        line = _decode_line(path, lineno, raw)
        try:
            yield lineno, strict_json.loads(line, unique_keys=True)
        except strict_json.JSONValueError as exc:
            raise _json_error(path, lineno, exc) from None


def _iter_json(path: Path, text: str):
    """Yield (start line, record) for a top-level array (or an object wrapping exactly one array).

    The array is decoded element by element with `raw_decode`, which gives each element's offset and
    so the line it starts on.
    """
    decoder = json.JSONDecoder(object_pairs_hook=strict_json.unique_object)
    n = len(text)

    def skip_ws(i: int) -> int:
        while i < n and text[i] in " \t\r\n":
            i += 1
        return i

    def line_of(i: int) -> int:
        return text.count("\n", 0, i) + 1

    deep = strict_json.too_deep_at(text, strict_json.MAX_DEPTH + 2)  # +2: the array (and its wrapper)
    if deep is not None:
        raise ValueError(f"{path}:{deep}: invalid JSON (nested deeper than {strict_json.MAX_DEPTH} levels)")
    long_int = strict_json.long_integer_at(text)
    if long_int is not None:
        raise ValueError(
            f"{path}:{long_int}: invalid JSON (integer with more than {strict_json.int_digit_limit()} digits, "
            "Python's int conversion limit)"
        )
    i = skip_ws(0)
    if i < n and text[i] == "{":
        keys, arrays = _wrapper_keys(path, text)
        if len(keys) != 1 or len(arrays) != 1:
            if len(set(keys)) != len(keys):
                twice = next(k for k in keys if keys.count(k) > 1)
                raise ValueError(
                    f"{path}:1: field {twice!r}: given twice in the wrapper object; JSON keeps only the last "
                    "value, so the other would be lost: keep one"
                )
            raise ValueError(
                f"{path}:1: a .json data set must be an array of objects or an object with one key holding "
                f"that array; found keys {sorted(keys)[:5]}"
            )
        # Locate the array in the text so that line numbers stay right (the only key precedes it).
        key_at = text.find(json.dumps(arrays[0]))
        if key_at < 0:  # the key was written with other escapes: fall back to the first '['
            key_at = 0
        i = text.index("[", key_at)
    if i >= n or text[i] != "[":
        raise ValueError(f"{path}:{line_of(i)}: a .json data set must be an array of objects")
    i = skip_ws(i + 1)
    if i < n and text[i] == "]":
        return
    while True:
        try:
            record, end = decoder.raw_decode(text, i)
        except strict_json.DuplicateKeyError as exc:
            raise _duplicate_key_error(path, line_of(i), exc) from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg} at column {exc.colno})") from None
        yield line_of(i), record
        i = skip_ws(end)
        if i < n and text[i] == ",":
            i = skip_ws(i + 1)
            continue
        if i < n and text[i] == "]":
            _expect_end(path, text, i + 1, line_of)
            return
        raise ValueError(f"{path}:{line_of(i)}: invalid JSON (expected ',' or ']' after an array element)")


class _Pairs(list):
    """A JSON object decoded as its (key, value) pairs, repeated keys included."""


def _wrapper_keys(path: Path, text: str) -> tuple[list[str], list[str]]:
    """The top-level object's keys in file order, repeats included, and those holding an array.

    The whole text is decoded here once, so its syntax is checked; the records are decoded (and
    checked for repeated keys, with their lines) one by one afterwards."""
    try:
        pairs = json.loads(text, object_pairs_hook=_Pairs)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg})") from None
    keys = [k for k, _ in pairs]
    arrays = [k for k, v in pairs if isinstance(v, list) and not isinstance(v, _Pairs)]
    return keys, arrays


def _expect_end(path: Path, text: str, i: int, line_of: Callable[[int], int]) -> None:
    """Refuse anything but whitespace after the data set's array (and its wrapper's closing brace).

    `raw_decode` stops at the array's end, so text after it (a second array, a cut-and-paste leftover)
    was dropped without a word."""
    rest = text[i:]
    stripped = rest.lstrip(" \t\r\n")
    if stripped.startswith("}"):  # the wrapper object's end: json.loads has checked its syntax already
        stripped = stripped[1:].lstrip(" \t\r\n")
    if stripped:
        at = len(text) - len(stripped)
        raise ValueError(
            f"{path}:{line_of(at)}: invalid JSON (text after the data set's array: {_show(stripped[:40])}); "
            "a .json data set holds one array"
        )


def load_records(path: str | Path, schema: Schema) -> list[dict[str, Any]]:
    """Load a `.jsonl` or `.json` data set and validate every record against `schema`.

    Args:
        path: the file (suffix `.jsonl`, `.ndjson` or `.json`).
        schema: field -> type / tuple of types / `Field` (module docstring).

    Returns:
        The records, as dicts, in file order.

    Raises:
        ValueError: the file is missing, unreadable, of an unknown suffix, not valid JSON, empty, or a
            record breaks the schema; the message names `file:line` and the field.
    """
    return [record for _, record in load_numbered_records(path, schema)]


def load_numbered_records(path: str | Path, schema: Schema) -> list[tuple[int, dict[str, Any]]]:
    """`load_records`, with the line on which each record starts: `[(line, record), ...]`."""
    if not isinstance(schema, Mapping) or not schema:
        raise ValueError("schema must be a non-empty mapping of field name -> type / Field")
    fields = {name: _as_field(spec, name) for name, spec in schema.items()}
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".jsonl", ".ndjson", ".json"):
        raise ValueError(f"{path}: unknown data set format {suffix!r}; accepted: .jsonl, .ndjson, .json")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ValueError(f"{path}: data set file not found") from None
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the data set ({exc})") from None

    if data.startswith(_BOM):
        data = data[len(_BOM):]
    if suffix == ".json":
        try:
            rows = _iter_json(path, data.decode("utf-8"))
        except UnicodeDecodeError as exc:
            lineno = data.count(b"\n", 0, exc.start) + 1
            column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
            raise ValueError(
                f"{path}:{lineno}: not valid UTF-8 (byte 0x{data[exc.start]:02x} at byte {column} of the line)"
            ) from None
    else:
        rows = _iter_jsonl(path, data)
    records: list[tuple[int, dict[str, Any]]] = []
    for lineno, record in rows:
        validate_record(record, fields, f"{path}:{lineno}")
        records.append((lineno, record))
    if not records:
        raise ValueError(f"{path}: the data set has no records")
    return records


def record_index(options: dict[str, Any], n: int, rng: np.random.Generator) -> int:
    """Which of `n` records an episode plays: `options["index"]` when given (ValueError unless an
    integer in [0, n - 1]), else one drawn uniformly with `rng` (the env's `np_random`)."""
    index = options.get("index")
    if index is None:
        return int(rng.integers(n))
    return require_int("options['index']", index, 0, n - 1)
