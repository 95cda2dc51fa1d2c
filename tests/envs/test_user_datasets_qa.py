"""Users' own data sets given to the task envs: files as users have them, records no answer can earn,
and the per-file caches (keyed by the content, safe across threads)."""

from __future__ import annotations

import json
import math
import os
import sys
import threading

import pytest

from ragen_envs.code.tasks import MAX_PROBLEM_CHARS, load_tasks
from ragen_envs.countdown.env import CountdownEnv, reachable_bound
from ragen_envs.data import Field, load_records
from ragen_envs.data.cache import BuildCache, file_version
from ragen_envs.math.env import MAX_QUERY_CHARS, MathEnv
from ragen_envs.searchqa.env import SearchQAEnv, normalize_answer, question_room
from ragen_envs.searchqa.retriever import cached_file_retriever

COUNTDOWN = {"target": int, "nums": list}
REC = {"target": 24, "nums": [3, 3, 8, 8]}


def _write(path, data):
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return path


def _math_record(gold: str) -> str:
    return json.dumps({"query": "q?", "response": f"So. The answer is: {gold}", "type": "t"})


def _error(call) -> str:
    with pytest.raises(ValueError) as exc:
        call()
    return str(exc.value)


# ------------------------------------------------------------------------------------------- file forms
@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_a_byte_order_mark_is_skipped(tmp_path, suffix):
    body = json.dumps(REC) if suffix == ".jsonl" else json.dumps([REC])
    path = _write(tmp_path / f"d{suffix}", b"\xef\xbb\xbf" + body.encode() + b"\r\n")
    assert load_records(path, COUNTDOWN) == [REC]


def test_crlf_blank_lines_and_a_last_line_without_newline_match_the_json_module(tmp_path):
    lines = [json.dumps({"target": i, "nums": [i, 1]}) for i in range(4)]
    text = "\r\n".join([lines[0], "", lines[1], "  \t", lines[2]]) + "\r\n" + lines[3]
    path = _write(tmp_path / "d.jsonl", text)
    assert load_records(path, COUNTDOWN) == [json.loads(x) for x in lines]


@pytest.mark.parametrize(
    "name, text, where",
    [
        ("d.jsonl", '{"target": 24, "nums": [3]}\n{"target": 24, "target": 5, "nums": [1]}\n', ":2: field 'target'"),
        ("d.jsonl", '{"target": 24, "nums": [{"a": 1, "a": 2}]}\n', ":1: field 'a'"),
        ("d.json", '[\n{"target": 24, "nums": [3]},\n{"nums": [3], "nums": [4], "target": 1}\n]', ":3: field 'nums'"),
        ("d.json", '{"data": [{"target": 24, "nums": [3]}], "data": [{"target": 1, "nums": [1]}]}', ":1: field 'data'"),
    ],
)
def test_a_key_given_twice_is_refused_naming_file_line_and_key(tmp_path, name, text, where):
    path = _write(tmp_path / name, text)
    message = _error(lambda: load_records(path, COUNTDOWN))
    assert f"{path}{where}" in message and "twice" in message


@pytest.mark.parametrize("tail", ["[{\"target\": 1, \"nums\": [1]}]", "garbage", "{}"])
def test_text_after_a_json_array_is_refused_not_dropped(tmp_path, tail):
    path = _write(tmp_path / "d.json", json.dumps([REC]) + "\n" + tail)
    assert f"{path}:2: invalid JSON (text after the data set's array" in _error(lambda: load_records(path, COUNTDOWN))


def test_an_object_of_several_arrays_a_gz_a_directory_a_loop_and_a_missing_file_name_the_path(tmp_path):
    several = _write(tmp_path / "s.json", json.dumps({"train": [REC], "test": [REC]}))
    assert "found keys ['test', 'train']" in _error(lambda: load_records(several, COUNTDOWN))
    gz = _write(tmp_path / "d.jsonl.gz", b"\x1f\x8b")
    assert "unknown data set format '.gz'" in _error(lambda: load_records(gz, COUNTDOWN))
    (tmp_path / "dir.jsonl").mkdir()
    assert str(tmp_path / "dir.jsonl") in _error(lambda: load_records(tmp_path / "dir.jsonl", COUNTDOWN))
    os.symlink(tmp_path / "b.jsonl", tmp_path / "a.jsonl")
    os.symlink(tmp_path / "a.jsonl", tmp_path / "b.jsonl")
    for call in (lambda: load_records(tmp_path / "a.jsonl", COUNTDOWN), lambda: file_version(tmp_path / "a.jsonl")):
        assert str(tmp_path / "a.jsonl") in _error(call)  # file_version raised RuntimeError before
    assert "not a regular file" in _error(lambda: file_version(tmp_path / "dir.jsonl"))
    assert "file not found" in _error(lambda: file_version(tmp_path / "missing.jsonl"))


def test_records_come_back_as_the_json_module_reads_them(tmp_path):
    records = [
        {"target": 10**40, "nums": [1], "answer": "１２\u0301 שלום \u2028x", "e": "", "nan": float("nan")},
        {"target": -3, "nums": [0], "big": 2**70, "nested": [[["a"]]]},
    ]
    text = "\n".join(json.dumps(r, ensure_ascii=False) for r in records)
    path = _write(tmp_path / "d.jsonl", text)
    got = load_records(path, COUNTDOWN)
    expected = [json.loads(line) for line in text.split("\n")]
    assert json.dumps(got) == json.dumps(expected)  # NaN survives as NaN; nothing cut or converted
    assert got[0]["target"] == 10**40 and got[1]["big"] == 2**70


# ------------------------------------------------------------------------------------------- unearnable records
def test_countdown_refuses_a_target_beyond_every_value_of_its_numbers(tmp_path):
    assert reachable_bound([1, 1]) == 2 and reachable_bound([3, 3, 8, 8]) == 8 * 3 * 3 * 8 * 8
    path = _write(tmp_path / "c.jsonl", json.dumps(REC) + "\n" + json.dumps({"target": 10**30, "nums": [3, 3, 8, 8]}))
    message = _error(lambda: CountdownEnv(dataset=path))
    assert f"{path}:2: field 'target'" in message and "at most 4608" in message
    # At the bound itself the record is played (and solved: 2 * 3 = 6 is not it, but (1 + 1) is for [1, 1]).
    edge = _write(tmp_path / "e.jsonl", json.dumps({"target": 2, "nums": [1, 1]}))
    env = CountdownEnv(dataset=edge)
    env.reset(seed=0)
    assert env.step(f"<think>x</think><answer>{env.oracle()[0]}</answer>")[1] == 1.0


@pytest.mark.parametrize(
    "gold, needle",
    [("</answer>", "holds a tag"), ("<think>", "holds a tag"), ("a\x07b", "holds a control character")],
)
def test_math_refuses_a_gold_no_response_can_give(tmp_path, gold, needle):
    path = _write(tmp_path / "m.jsonl", _math_record(gold))
    message = _error(lambda: MathEnv(dataset=path))
    assert f"{path}:1: field 'response'" in message and needle in message


@pytest.mark.parametrize(
    "gold, needle",
    [("1" * 513, "longer than 512 characters"), ("2^(10^10)", "exponent"), ("(" * 30 + "1" + ")" * 30, "nested"),
     ("|".join("ab" for _ in range(12)), "'|' characters")],
)
def test_math_refuses_a_gold_the_checker_refuses_before_comparing(tmp_path, gold, needle):
    path = _write(tmp_path / "m.jsonl", _math_record(gold))
    message = _error(lambda: MathEnv(dataset=path))
    assert f"{path}:1: field 'response'" in message and needle in message and "could earn it" in message


def test_math_a_gold_at_the_checker_s_length_limit_loads_and_earns_the_reward(tmp_path):
    gold = "1" * 512
    env = MathEnv(dataset=_write(tmp_path / "m.jsonl", _math_record(gold)))
    env.reset(seed=0)
    assert env.step(f"<think>x</think><answer>{gold}</answer>")[1] == 1.0


@pytest.mark.parametrize("gold", ["１２", "e\u0301t\u00e9", "שלום", "x||y", "\U0001f600"])
def test_math_unicode_golds_load_and_the_gold_earns_the_reward(tmp_path, gold):
    path = _write(tmp_path / "m.jsonl", _math_record(gold))
    env = MathEnv(dataset=path)
    env.reset(seed=0)
    assert env.step(f"<think>x</think><answer>{gold}</answer>")[1] == 1.0


def test_math_refuses_a_query_the_observation_would_cut(tmp_path):
    rec = {"query": "x" * (MAX_QUERY_CHARS + 1), "response": "The answer is: 1", "type": "t"}
    path = _write(tmp_path / "m.jsonl", json.dumps({**rec, "query": "ok"}) + "\n" + json.dumps(rec))
    assert f"{path}:2: field 'query': is {MAX_QUERY_CHARS + 1} characters" in _error(lambda: MathEnv(dataset=path))
    fits = _write(tmp_path / "f.jsonl", json.dumps({**rec, "query": "y" * MAX_QUERY_CHARS}))
    env = MathEnv(dataset=fits)
    obs, _ = env.reset(seed=0)
    env.step("<think>x</think><answer>2</answer>")
    assert env._state_text().endswith("y" * MAX_QUERY_CHARS)  # after the feedback line, still whole


def test_searchqa_refuses_a_gold_no_response_can_give_and_plays_unicode_golds(tmp_path):
    bad = _write(tmp_path / "b.jsonl", json.dumps({"question": "Who?", "answer": "Jo\x07hn", "context": ["Jo hn."]}))
    assert f"{bad}:1: field 'answer': cannot be given by any response" in _error(lambda: SearchQAEnv(dataset=bad))
    for gold in ["１９５６", "Beyonce\u0301", "שלום", "AC||DC", "\U0001f600 band"]:
        record = {"question": "Who?", "answer": gold, "context": [f"About {gold}."]}
        path = _write(tmp_path / "g.jsonl", json.dumps(record))
        env = SearchQAEnv(dataset=path)
        env.reset(seed=0)
        _, reward, _, _, info = env.step(f"<think>x</think><answer>finish[{normalize_answer(gold)}]</answer>")
        assert reward == 1.0 and info["exact_match"], gold


def test_searchqa_refuses_a_question_that_pushes_the_results_out(tmp_path):
    room = question_room(3, 600)
    rec = {"question": "w" * (room + 1), "answer": "x", "context": ["x y."]}
    path = _write(tmp_path / "q.jsonl", json.dumps(rec))
    assert f"{path}:1: field 'question': is {room + 1} characters" in _error(lambda: SearchQAEnv(dataset=path))
    fits = _write(tmp_path / "f.jsonl", json.dumps({**rec, "question": "w " * (room // 2) + "alpha?"[: room % 2]}))
    env = SearchQAEnv(dataset=fits)
    env.reset(seed=0)
    obs = env.step("<think>x</think><answer>search[x]</answer>")[0]
    assert "[1] x y." in obs and "truncated" not in obs


def test_code_refuses_function_names_no_program_defines_and_cut_statements(tmp_path):
    def load(rec):
        return lambda: load_tasks(_write(tmp_path / "t.jsonl", json.dumps(rec)))

    fn = {"problem": "p", "tests": [{"input": [1], "output": 1}]}
    assert "is a Python keyword" in _error(load({**fn, "fn_name": "class"}))
    assert "Python defines it as 'find'" in _error(load({**fn, "fn_name": "\ufb01nd"}))
    long = {"problem": "p" * (MAX_PROBLEM_CHARS + 1), "tests": [{"input": "1", "output": "1"}]}
    assert ":1: field 'problem'" in _error(load(long))
    assert len(load_tasks(_write(tmp_path / "ok.jsonl", json.dumps({**long, "problem": "p" * MAX_PROBLEM_CHARS})))) == 1


# ------------------------------------------------------------------------------------------- caches
def _corpus(path, word):
    return _write(path, json.dumps({"id": "c1", "text": f"{word} passage"}) + "\n")


def test_a_corpus_rewritten_with_the_same_size_and_times_is_read_again(tmp_path):
    path = _corpus(tmp_path / "c.jsonl", "alpha")
    stamp = os.stat(path)
    first = cached_file_retriever(path)
    _corpus(path, "gamma")  # same size
    os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # as `touch -r`, `cp -p` or `tar` leave it
    second = cached_file_retriever(path)
    assert second is not first and second.passages[0].text == "gamma passage"
    assert cached_file_retriever(path) is second  # unchanged: reused


def test_a_data_set_rewritten_in_place_gets_a_new_index(tmp_path):
    def write(answer):
        record = {"question": "Who?", "answer": answer, "context": [f"{answer} is it."]}
        return _write(tmp_path / "d.jsonl", json.dumps(record))

    path = write("Alpha")
    stamp = os.stat(path)
    assert SearchQAEnv(dataset=path).retriever.search("Alpha")
    write("Gamma")
    os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    env = SearchQAEnv(dataset=path)
    assert env.retriever.search("Gamma") and not env.retriever.search("Alpha")


def test_the_build_cache_is_safe_across_threads_and_a_changed_file_is_not_kept(tmp_path):
    cache: BuildCache[int] = BuildCache(size=2)
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            for i in range(2000):
                assert cache.get((k, i % 5), lambda i=i: k * 1000 + i % 5) == k * 1000 + i % 5
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often, so that an unlocked eviction races (KeyError before)
    try:
        threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors and len(cache._items) <= 2

    path = _corpus(tmp_path / "c.jsonl", "alpha")
    files: BuildCache[str] = BuildCache()

    def build_while_edited() -> str:
        text = path.read_text()
        _corpus(path, "gamma")  # the file changes while it is read
        return text

    assert "alpha" in files.get_for_file(path, build_while_edited)
    assert "gamma" in files.get_for_file(path, path.read_text)  # the mixed build was not kept


def test_envs_on_different_files_built_in_threads_each_get_their_own(tmp_path):
    paths = [_corpus(tmp_path / f"c{i}.jsonl", f"word{i}") for i in range(6)]
    ds = _write(tmp_path / "d.jsonl", json.dumps({"question": "Who?", "answer": "word0"}))
    got: dict[int, str] = {}
    errors: list[BaseException] = []

    def build(i: int) -> None:
        try:
            got[i] = SearchQAEnv(dataset=ds, corpus=paths[i]).retriever.passages[0].text
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=build, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and got == {i: f"word{i} passage" for i in range(6)}


def test_a_one_record_data_set_plays_that_record(tmp_path):
    path = _write(tmp_path / "one.jsonl", json.dumps(REC))
    env = CountdownEnv(dataset=path)
    for seed in range(3):
        _, info = env.reset(seed=seed)
        assert (info["target"], info["nums"], info["index"]) == (24, [3, 3, 8, 8], 0)


# ------------------------------------------------------------------------------------------- numbers JSON has not
@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e999"])
@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_a_number_json_does_not_allow_is_refused_in_a_field_the_env_reads(tmp_path, literal, suffix):
    schema = {"target": float, "nums": Field(list, item_type=float)}
    good = '{"target": 1.5, "nums": [1, 2.5]}'
    for bad, field in ((f'{{"target": {literal}, "nums": [1]}}', "'target'"),
                       (f'{{"target": 2, "nums": [1, {literal}]}}', "'nums[1]'")):
        text = f"{good}\n{bad}\n" if suffix == ".jsonl" else f"[{good},\n{bad}]"
        path = _write(tmp_path / f"d{suffix}", text)
        message = _error(lambda path=path: load_records(path, schema))
        assert f"{path}:2: field {field}: expected a finite number" in message, message
    # A field the schema does not name is kept as the json module reads it (the env never looks at it).
    path = _write(tmp_path / "x.jsonl", f'{{"target": 1, "nums": [1], "extra": {literal}}}\n')
    assert not math.isfinite(load_records(path, schema)[0]["extra"])


def test_webshop_refuses_a_nan_price_and_an_infinite_price_bound(tmp_path):
    from ragen_envs.webshop.catalog import load_goals, load_products

    product = {"asin": "A1", "title": "t", "price": 3.0, "category": "c", "attributes": ["x"]}
    for literal in ("NaN", "Infinity"):
        text = json.dumps(product).replace("3.0", literal)
        path = _write(tmp_path / "p.jsonl", text + "\n")
        assert f"{path}:1: field 'price'" in _error(lambda path=path: load_products(path))
        goal = json.dumps({"instruction": "buy", "attributes": ["x"], "price_upper": 1.0}).replace("1.0", literal)
        path = _write(tmp_path / "g.jsonl", goal + "\n")
        assert f"{path}:1: field 'price_upper'" in _error(lambda path=path: load_goals(path))


@pytest.mark.parametrize("gold", ["AT||T", "a|||b c", "Rock || Roll", "x [y] || z", "Page||One"])
def test_searchqa_oracles_earn_a_gold_or_title_holding_the_action_separator(tmp_path, gold):
    """'||' separates two actions in an answer block; the oracle wrote such golds and titles as they were, so
    its `finish[...]` (and `search[...]`) split in two and its demonstrations scored nothing."""
    passage = [gold, [f"The company is {gold}."]]
    record = {"question": "Which company?", "answer": gold, "context": [passage], "supporting_passages": [passage]}
    path = _write(tmp_path / "s.jsonl", json.dumps(record) + "\n")
    env = SearchQAEnv(dataset=path)
    for pick in (lambda: env.oracle()[0], lambda: env.oracle_step()[1][0]):
        env.reset(seed=0)
        done, reward = False, 0.0
        while not done:
            _, reward, terminated, truncated, info = env.step(f"<think>x</think><answer>{pick()}</answer>")
            assert info["action_is_valid"], info
            done = terminated or truncated
        assert reward == 1.0


@pytest.mark.parametrize("asin, size, field", [("A||1", "S", "asin"), ("A1", "S||M", "options"),
                                               ("A1", "S", "options")])
def test_webshop_refuses_a_product_no_response_could_click(tmp_path, asin, size, field):
    """WebShop answers one action a turn, but the parser splits at '||' first: an ASIN or option holding it could
    never be clicked, by the oracle either (its demonstrations scored the format penalty)."""
    from ragen_envs.webshop.catalog import load_products

    name = "fit||cut" if (asin, size) == ("A1", "S") else "size"
    product = {"asin": asin, "title": "red shirt", "price": 10.0, "category": "c", "attributes": ["cotton"],
               "options": {name: [size, "L"]}}
    path = _write(tmp_path / "p.jsonl", json.dumps(product) + "\n")
    message = _error(lambda: load_products(path))
    assert f"{path}:1: field '{field}'" in message and "separator of two actions" in message
    # Brackets are fine: the click matcher reads them (the oracle's click on such a product earns the reward).
    product.update(asin="A[1]", options={"size": ["S [x]", "L"]})
    assert load_products(_write(tmp_path / "q.jsonl", json.dumps(product) + "\n"))[0].asin == "A[1]"
