"""The strict JSONL/JSON loader shared by the task envs (ragen_envs.data.loading)."""

from __future__ import annotations

import json

import pytest

from ragen_envs.data import FIXTURES_DIR, Field, fixture_path, load_records, validate_record

SCHEMA = {"target": int, "nums": Field(list, item_type=int)}


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_jsonl_loads_in_order_skipping_blank_lines_and_keeping_extra_fields(tmp_path):
    rows = [{"target": 24, "nums": [3, 3, 8, 8]}, {"target": 10, "nums": [1, 2, 3, 4], "source": "x"}]
    path = _write(tmp_path, "a.jsonl", json.dumps(rows[0]) + "\n\n  \n" + json.dumps(rows[1]) + "\n")
    assert load_records(path, SCHEMA) == rows


@pytest.mark.parametrize(
    "line, field, expected",
    [
        ('{"nums": [1, 2]}', "'target'", "missing field"),
        ('{"target": "24", "nums": [1, 2]}', "'target'", "expected int, got str"),
        ('{"target": true, "nums": [1, 2]}', "'target'", "expected int, got bool"),
        ('{"target": 2.5, "nums": [1, 2]}', "'target'", "expected int, got float"),
        ('{"target": null, "nums": [1, 2]}', "'target'", "got null"),
        ('{"target": 3, "nums": "1 2"}', "'nums'", "expected a list of int, got str"),
        ('{"target": 3, "nums": [1, "2"]}', "'nums[1]'", "expected int, got str"),
    ],
)
def test_a_bad_record_names_file_line_and_field(tmp_path, line, field, expected):
    good = '{"target": 1, "nums": [1]}'
    path = _write(tmp_path, "bad.jsonl", f"{good}\n{good}\n\n{line}\n{good}\n")
    with pytest.raises(ValueError) as err:
        load_records(path, SCHEMA)
    message = str(err.value)
    assert f"{path}:4" in message  # physical line 4 (the blank line counts)
    assert field in message and expected in message


def test_invalid_json_names_the_line(tmp_path):
    path = _write(tmp_path, "x.jsonl", '{"target": 1, "nums": [1]}\n{"target": 1, "nums": [1,]}\n')
    with pytest.raises(ValueError, match=r"x\.jsonl:2: invalid JSON"):
        load_records(path, SCHEMA)


def test_a_record_that_is_not_an_object_is_rejected(tmp_path):
    path = _write(tmp_path, "x.jsonl", "[1, 2]\n")
    with pytest.raises(ValueError, match=r"x\.jsonl:1: record: expected a JSON object, got list"):
        load_records(path, SCHEMA)


def test_json_array_reports_the_line_where_the_record_starts(tmp_path):
    records = [{"target": i, "nums": [i, i + 1]} for i in range(4)]
    records[2]["nums"] = [1, None]
    text = json.dumps(records, indent=2)
    path = _write(tmp_path, "d.json", text)
    # Independent reference: the line on which the third '{' of the file stands.
    starts = [n for n, line in enumerate(text.splitlines(), start=1) if line.strip() == "{"]
    with pytest.raises(ValueError) as err:
        load_records(path, SCHEMA)
    assert f"{path}:{starts[2]}:" in str(err.value) and "'nums[1]'" in str(err.value)


def test_json_array_and_wrapped_array_match_json_loads(tmp_path):
    records = [{"target": i, "nums": list(range(1, i + 2)), "k": {"a": [1, 2]}} for i in range(5)]
    plain = _write(tmp_path, "p.json", json.dumps(records, indent=1))
    wrapped = _write(tmp_path, "w.json", json.dumps({"data": records}))
    assert load_records(plain, SCHEMA) == json.loads(plain.read_text()) == records
    assert load_records(wrapped, SCHEMA) == records
    two_keys = _write(tmp_path, "t.json", json.dumps({"data": records, "meta": 1}))
    with pytest.raises(ValueError, match="one key"):
        load_records(two_keys, SCHEMA)


def test_nested_schema_and_checks_and_optional_fields(tmp_path):
    schema = {
        "goal": Field(dict, schema={"price": float, "options": Field(list, item_type=str)}),
        "name": Field(str, check=lambda v: None if v.strip() else "must not be empty"),
        "note": Field(str, required=False, nullable=True),
    }
    ok = {"goal": {"price": 3, "options": ["red"]}, "name": "a"}  # int accepted for float
    path = _write(tmp_path, "n.jsonl", json.dumps(ok) + "\n" + json.dumps({**ok, "note": None}) + "\n")
    assert len(load_records(path, schema)) == 2
    cases = [
        ({**ok, "goal": {"price": 1.0, "options": ["red", 3]}}, "'goal.options[1]'"),
        ({**ok, "goal": {"options": []}}, "missing field 'goal.price'"),
        ({**ok, "name": "  "}, "'name': must not be empty"),
        ({**ok, "note": 5}, "'note'"),
    ]
    for record, expected in cases:
        path = _write(tmp_path, "n.jsonl", json.dumps(record) + "\n")
        with pytest.raises(ValueError, match=expected.replace("[", r"\[").replace("]", r"\]")):
            load_records(path, schema)


def test_file_level_errors(tmp_path):
    with pytest.raises(ValueError, match="not found"):
        load_records(tmp_path / "missing.jsonl", SCHEMA)
    with pytest.raises(ValueError, match="unknown data set format"):
        load_records(_write(tmp_path, "x.csv", "a,b\n"), SCHEMA)
    with pytest.raises(ValueError, match="no records"):
        load_records(_write(tmp_path, "e.jsonl", "\n\n"), SCHEMA)
    with pytest.raises(ValueError, match="no records"):
        load_records(_write(tmp_path, "e.json", "[]"), SCHEMA)
    with pytest.raises(ValueError, match="array of objects"):
        load_records(_write(tmp_path, "s.json", '"hello"'), SCHEMA)
    with pytest.raises(ValueError, match="non-empty mapping"):
        load_records(_write(tmp_path, "a.jsonl", "{}\n"), {})
    with pytest.raises(ValueError, match="must be a type"):
        load_records(_write(tmp_path, "a.jsonl", "{}\n"), {"x": "int"})


def test_validate_record_directly():
    validate_record({"target": 1, "nums": [2]}, SCHEMA, "here")
    with pytest.raises(ValueError, match="^here: missing field 'nums'"):
        validate_record({"target": 1}, SCHEMA, "here")


def test_fixtures_exist_and_fixture_path_rejects_unknown_names():
    assert (FIXTURES_DIR / "countdown_sample.jsonl").is_file()
    assert fixture_path("math_sample.jsonl").is_file()
    with pytest.raises(ValueError, match="countdown_sample.jsonl"):
        fixture_path("nope.jsonl")


# ----------------------------------------------------------------------------------------------- hostile files
@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\u0085"])
def test_unicode_line_separators_inside_strings_are_valid_jsonl(tmp_path, separator):
    # json.dumps(ensure_ascii=False) writes these raw inside strings; only "\n" separates records.
    records = [{"target": 1, "nums": [1], "note": f"a{separator}b"}, {"target": 2, "nums": [2]}]
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    assert separator in text
    path = _write(tmp_path, "u.jsonl", text)
    assert load_records(path, SCHEMA) == records
    # A later bad record still gets its physical line number (line 3, not 4 or 5).
    path = _write(tmp_path, "u.jsonl", text + '{"target": "x", "nums": [3]}\n')
    with pytest.raises(ValueError, match=r"u\.jsonl:3: field 'target'"):
        load_records(path, SCHEMA)


def test_code_loader_line_numbers_count_only_newlines(tmp_path):
    from ragen_envs.code import load_tasks

    good = {"problem": "p\u2028q", "tests": [{"input": "1\n", "output": "1\n"}]}
    bad = {"problem": "p", "tests": [{"input": 1, "output": "1\n"}]}
    path = _write(tmp_path, "c.jsonl", json.dumps(good, ensure_ascii=False) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(ValueError, match=r"c\.jsonl:2: field 'tests\[0\]\.input'"):
        load_tasks(path)


def _long_int_line(n: int = 5000) -> str:
    return '{"target": ' + "7" * n + ', "nums": [1]}'


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
@pytest.mark.parametrize(
    "bad, expected",
    [
        (_long_int_line(), "integer with more than"),
        ('{"target": 1, "nums": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested deeper than"),
        ('{"target": 1, "nums": ' + "[" * 100_000, "nested deeper than"),
        ('{"target": 1, "nums": [1], "deep": ' + "{\"a\": " * 500 + "1" + "}" * 500 + "}", "nested deeper than"),
    ],
    ids=["5000-digit-int", "100k-brackets", "100k-open-brackets", "500-objects"],
)
def test_hostile_json_gives_an_error_naming_file_and_line(tmp_path, suffix, bad, expected):
    good = '{"target": 1, "nums": [1]}'
    if suffix == ".jsonl":
        text, line = f"{good}\n{good}\n\n{bad}\n{good}\n", 4
    else:
        text, line = f"[\n{good},\n{good},\n{bad},\n{good}\n]\n", 4
    path = _write(tmp_path, "h" + suffix, text)
    with pytest.raises(ValueError) as err:
        load_records(path, SCHEMA)
    assert type(err.value) is ValueError  # not a RecursionError, not the bare int-limit message
    assert f"{path}:{line}:" in str(err.value) and expected in str(err.value), str(err.value)


def test_brackets_inside_strings_do_not_count_as_nesting(tmp_path):
    record = {"target": 1, "nums": [1], "text": "[" * 5000 + "{" * 5000 + '\\"['}
    path = _write(tmp_path, "s.jsonl", json.dumps(record) + "\n")
    assert load_records(path, SCHEMA) == [record]
    deep_ok = {"target": 1, "nums": [1], "d": json.loads("[" * 90 + "]" * 90)}
    path = _write(tmp_path, "d.json", json.dumps([deep_ok]))
    assert load_records(path, SCHEMA) == [deep_ok]


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_non_utf8_bytes_name_the_line(tmp_path, suffix):
    good = b'{"target": 1, "nums": [1]}'
    bad = b'{"target": 1, "nums": [1], "x": "caf\xe9"}'
    if suffix == ".jsonl":
        data, line = good + b"\n" + good + b"\n" + bad + b"\n", 3
    else:
        data, line = b"[\n" + good + b",\n" + good + b",\n" + bad + b"\n]", 4
    path = tmp_path / ("b" + suffix)
    path.write_bytes(data)
    column = bad.index(b"\xe9") + 1
    with pytest.raises(
        ValueError, match=rf"b\{suffix}:{line}: not valid UTF-8 \(byte 0xe9 at byte {column} of the line\)"
    ):
        load_records(path, SCHEMA)


def test_strict_json_loads_contract():
    from ragen_envs.data import strict_json

    assert strict_json.loads('{"a": [[1]], "s": "[[[["}') == {"a": [[1]], "s": "[[[["}
    for text in ("[" * 101 + "]" * 101, "[" * 10**6, "1" * 5000, "{", "[1,]", '"\\ud800"x'):
        with pytest.raises(strict_json.JSONValueError):
            strict_json.loads(text)
    assert strict_json.loads("[" * 100 + "]" * 100, max_depth=100) is not None
    assert strict_json.too_deep_at('[\n[\n[1]]]', 2) == 3
