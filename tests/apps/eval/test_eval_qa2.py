"""`ragen eval --base-url` against servers that misbehave on purpose (a real HTTP server on 127.0.0.1, written here
with http.server; the openai client talks to it over a socket): replies that are not chat completions, content as a
list of parts, token counts that are not numbers, bytes that are not UTF-8, replies longer than asked, a reply that
trickles in without end, Retry-After, base URLs, API keys, reserved --extra-body fields; and the evaluation folder:
a damaged or doubled episodes file, two evaluations of one folder at once, a summary with no finished episode, a
server failing part-way with several workers."""

from __future__ import annotations

import fcntl
import json
import math
import os
import threading
import time
from collections.abc import Callable
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from ragen_core.apps.eval import main

ANSWER = "<think>I pick one.</think><answer>Up</answer>"
BANDIT = ["--config", "bandit_tiny"]  # one turn per episode: one request per episode; max_tokens 64


def completion(content: Any = ANSWER, finish: str = "stop", usage: Any = None) -> dict[str, Any]:
    return {"id": "c", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "finish_reason": finish, "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 5} if usage is None else usage}


# A behaviour answers one chat request: it gets the handler and writes whatever it likes on the socket.
Behaviour = Callable[[BaseHTTPRequestHandler], None]


def raw(code: int, body: bytes, headers: dict[str, str] | None = None, length: int | None = None) -> Behaviour:
    """An answer of `code` with `body` as it is (`length` may claim more bytes than are sent)."""
    def send(h: BaseHTTPRequestHandler) -> None:
        h.send_response(code)
        h.send_header("content-type", "application/json")
        h.send_header("content-length", str(len(body) if length is None else length))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(body)
        h.wfile.flush()
        if length is not None and length > len(body):
            h.close_connection = True  # closes the connection in the middle of the body
    return send


def ok(content: Any = ANSWER, **kw: Any) -> Behaviour:
    return raw(200, json.dumps(completion(content, **kw)).encode())


def trickle(seconds: float) -> Behaviour:
    """A 200 whose body comes one byte at a time for `seconds`: each wait for data is short, the reply never ends."""
    def send(h: BaseHTTPRequestHandler) -> None:
        body = b" " * 10_000 + json.dumps(completion()).encode()
        h.send_response(200)
        h.send_header("content-type", "application/json")
        h.send_header("content-length", str(len(body)))
        h.end_headers()
        end = time.monotonic() + seconds
        try:
            for b in body:
                if time.monotonic() > end:
                    break
                h.wfile.write(bytes([b]))
                h.wfile.flush()
                time.sleep(0.02)
        except OSError:
            pass  # the client gave up
        h.close_connection = True
    return send


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hung up (a cancelled worker): not the client's stderr to fill


class Misbehaving:
    """``with Misbehaving([b1, b2, ...]) as s``: answers the i-th chat request with behaviour i (the last one
    repeats); lists model ``m`` at ``PREFIX/models``; anything else is a 404. ``s.headers`` holds each chat
    request's headers."""

    def __init__(self, script: list[Behaviour], prefix: str = "/v1", lists: bool = True):
        self.script, self.prefix, self.lists = script, prefix, lists
        self.count = 0
        self.headers: list[dict[str, str]] = []
        self.lock = threading.Lock()
        self.server = _QuietServer(("127.0.0.1", 0), self._handler())
        self.root = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.url = self.root + prefix

    def __enter__(self) -> Misbehaving:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        srv = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                if self.path == f"{srv.prefix}/models" and srv.lists:
                    raw(200, json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode())(self)
                else:
                    raw(404, b'{"detail": "Not Found"}')(self)

            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("content-length", 0)))
                if self.path != f"{srv.prefix}/chat/completions":
                    raw(404, b'{"detail": "Not Found"}')(self)
                    return
                with srv.lock:
                    behaviour = srv.script[min(srv.count, len(srv.script) - 1)]
                    srv.count += 1
                    srv.headers.append({k.lower(): v for k, v in self.headers.items()})
                behaviour(self)

        return Handler


def _eval(url: str, out: Path, *extra: str) -> int:
    return main(["--base-url", url, "--model-name", "m", "--out", str(out), "--max-retries", "1", "--timeout", "5",
                 "--workers", "1", "--no-progress", *BANDIT, *extra])


def _lines(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines() if x.strip()]


def _one_error_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.startswith("ragen eval:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _env(out: Path) -> dict[str, Any]:
    return json.loads((out / "summary.json").read_text())["envs"]["ragen/Bandit-v0"]


# ---------------------------------------------------------------------------------------------- replies
def test_replies_that_are_not_chat_completions_are_failed_episodes_and_the_evaluation_goes_on(tmp_path, capsys):
    script = [raw(200, b"{not json"), raw(200, b"<html>busy</html>"), raw(200, b"[1, 2]"),
              raw(200, b'{"choices": "abc"}'), raw(200, b'{"choices": [{}]}'), ok(5), ok(None), ok()]
    with Misbehaving(script) as s:
        assert _eval(s.url, tmp_path / "out", "--episodes", "8") == 0, capsys.readouterr().err
    by_seed = {x["seed"] - 6000: x for x in _lines(tmp_path / "out")}
    assert len(by_seed) == 8
    details = [by_seed[i]["failed"]["detail"] for i in range(7)]
    assert all(by_seed[i]["failed"]["reason"] == "malformed_reply" for i in range(7))
    assert "not JSON" in details[0] and "not JSON" in details[1] and "JSON list" in details[2]
    assert "no choices" in details[3] and "no text" in details[4] and "JSON int" in details[5]
    assert by_seed[7]["failed"] is None and by_seed[7]["response"] == ANSWER
    env = _env(tmp_path / "out")
    assert (env["episodes"], env["failed_episodes"], env["failures"]) == (1, 7, {"malformed_reply": 7})


def test_content_parts_odd_usage_and_bytes_that_are_not_utf8_are_read_as_text(tmp_path, capsys):
    parts = [{"type": "text", "text": "<think>I pick"}, {"type": "image_url", "image_url": {"url": "x"}},
             {"type": "text", "text": " one.</think><answer>Up</answer>"}]
    bad_bytes = json.dumps(completion("<answer>AB</answer>")).encode().replace(b"AB", b"\xff\xfeUp")
    script = [ok(parts), ok(usage={"prompt_tokens": "seven", "completion_tokens": -1}), raw(200, bad_bytes)]
    with Misbehaving(script) as s:
        assert _eval(s.url, tmp_path / "out", "--episodes", "3") == 0, capsys.readouterr().err
    by_seed = {x["seed"] - 6000: x for x in _lines(tmp_path / "out")}
    assert by_seed[0]["failed"] is None and by_seed[0]["response"] == ANSWER  # the text parts, joined in order
    assert by_seed[1]["failed"] is None and by_seed[1]["tokens"] == {"prompt": None, "completion": None}
    assert by_seed[2]["failed"] is None and by_seed[2]["response"] == "<answer>\ufffd\ufffdUp</answer>"


def test_a_reply_longer_than_max_tokens_is_not_scored(tmp_path, capsys):
    long = "<think>" + "blah " * 2000 + "</think><answer>Up</answer>"
    script = [ok(long, finish="stop", usage={"prompt_tokens": 7, "completion_tokens": 2001}),
              ok(usage={"prompt_tokens": 7, "completion_tokens": 64}), ok(finish="length")]
    with Misbehaving(script) as s:
        assert _eval(s.url, tmp_path / "out", "--episodes", "3") == 0, capsys.readouterr().err
    by_seed = {x["seed"] - 6000: x for x in _lines(tmp_path / "out")}
    assert by_seed[0]["failed"]["reason"] == "over_max_tokens" and "2001 tokens" in by_seed[0]["failed"]["detail"]
    assert math.isnan(by_seed[0]["reward"]) and by_seed[0]["success"] is None
    assert by_seed[1]["failed"] is None  # exactly max_tokens is what was asked for
    assert by_seed[2]["failed"] is None and by_seed[2]["finish_reasons"] == ["length"]
    assert _env(tmp_path / "out")["failures"] == {"over_max_tokens": 1}


# ---------------------------------------------------------------------------------------------- transport
def test_a_reply_that_trickles_in_without_end_is_a_timeout_not_a_hang(tmp_path, capsys):
    with Misbehaving([trickle(20.0)]) as s:
        t0 = time.monotonic()
        code = _eval(s.url, tmp_path / "out", "--episodes", "1", "--timeout", "0.4", "--max-retries", "0")
        took = time.monotonic() - t0
    line = _one_error_line(capsys.readouterr().err)
    assert code == 1 and took < 8, (code, took)
    assert "did not finish within 0.8 s" in line and f"ragen eval --resume {tmp_path / 'out'}" in line


def test_a_connection_closed_mid_body_and_a_silent_server_stop_with_one_line(tmp_path, capsys):
    with Misbehaving([raw(200, b'{"choices": [', length=500)]) as s:
        assert _eval(s.url, tmp_path / "a", "--episodes", "1") == 1
        assert s.count == 2  # retried once
    assert "cannot reach the server" in _one_error_line(capsys.readouterr().err)
    with Misbehaving([lambda h: time.sleep(3)]) as s:
        assert _eval(s.url, tmp_path / "b", "--episodes", "1", "--timeout", "0.3", "--max-retries", "0") == 1
    assert "timed out with retries off (--timeout 0.3 s)" in _one_error_line(capsys.readouterr().err)


def test_retry_after_in_seconds_and_as_a_date_is_obeyed_and_a_long_one_is_said(tmp_path, capsys):
    slow = b'{"detail": "slow down"}'
    for i, header in enumerate((lambda: "1", lambda: formatdate(time.time() + 3, usegmt=True))):
        with Misbehaving([raw(429, slow, {"retry-after": header()}), ok()]) as s:
            t0 = time.monotonic()
            assert _eval(s.url, tmp_path / f"a{i}", "--episodes", "1") == 0
            assert time.monotonic() - t0 >= 0.9 and s.count == 2
    with Misbehaving([raw(429, slow, {"retry-after": "3600"})]) as s:
        assert _eval(s.url, tmp_path / "b", "--episodes", "1") == 1
    capsys.readouterr()
    with Misbehaving([raw(503, slow, {"retry-after": "3600"})]) as s:
        assert _eval(s.url, tmp_path / "c", "--episodes", "1") == 1
    line = _one_error_line(capsys.readouterr().err)
    assert "HTTP 503 and asked to retry after 3600 s (Retry-After)" in line and "slow down" in line


# ---------------------------------------------------------------------------------------------- inputs
@pytest.mark.parametrize("url, says", [("127.0.0.1:8000/v1", "must be an http:// or https:// URL"),
                                       ("ftp://127.0.0.1/v1", "must be an http:// or https:// URL"),
                                       ("http:///v1", "with a host"),
                                       ("http://127.0.0.1:8000/v1/chat/completions", "is an endpoint")])
def test_a_base_url_that_cannot_be_an_api_root_is_refused_before_anything_is_written(tmp_path, capsys, url, says):
    assert _eval(url, tmp_path / "out", "--episodes", "1") == 2
    assert says in _one_error_line(capsys.readouterr().err)
    assert not (tmp_path / "out").exists()


def test_base_urls_with_a_prefix_a_trailing_slash_or_without_their_api_path(tmp_path, capsys):
    with Misbehaving([ok()], prefix="/api/v1", lists=False) as s:
        assert _eval(s.url + "/", tmp_path / "a", "--episodes", "1") == 0
        assert _eval(s.root, tmp_path / "b", "--episodes", "1") == 1
    line = _one_error_line(capsys.readouterr().err)
    assert "does not serve model 'm'" in line and "does --base-url lack the API path (e.g. /v1)?" in line
    with Misbehaving([ok()]) as s:
        https = s.url.replace("http://", "https://")  # no TLS there
        assert _eval(https, tmp_path / "c", "--episodes", "1", "--max-retries", "0") == 1
    assert f"cannot reach the server at {https}" in _one_error_line(capsys.readouterr().err)


def test_api_keys_come_from_the_environment_and_a_key_that_cannot_be_sent_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("QA2_KEY", "sk-test-123")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with Misbehaving([ok()]) as s:
        assert _eval(s.url, tmp_path / "a", "--episodes", "2", "--api-key-env", "QA2_KEY") == 0
        assert _eval(s.url, tmp_path / "b", "--episodes", "1") == 0
        assert [h["authorization"] for h in s.headers] == ["Bearer sk-test-123"] * 2 + ["Bearer EMPTY"]
        monkeypatch.setenv("OPENAI_API_KEY", "sk-default")
        assert _eval(s.url, tmp_path / "c", "--episodes", "1") == 0
        assert s.headers[-1]["authorization"] == "Bearer sk-default"
        capsys.readouterr()
        for value, says in (("sk-test\n", "trailing newline"), ("clé", "printable ASCII")):
            monkeypatch.setenv("QA2_KEY", value)
            assert _eval(s.url, tmp_path / "d", "--episodes", "1", "--api-key-env", "QA2_KEY") == 2
            assert says in _one_error_line(capsys.readouterr().err) and not (tmp_path / "d").exists()
        # A resumed evaluation reads the key again: its variable unset is one line, not a traceback.
        (tmp_path / "a" / "episodes.jsonl").write_text(_lines_text(tmp_path / "a")[0])
        monkeypatch.delenv("QA2_KEY")
        assert main(["--resume", str(tmp_path / "a"), "--no-progress"]) == 2
        assert "eval.json's api_key_env QA2_KEY: that environment variable is not set" in \
            _one_error_line(capsys.readouterr().err)
        monkeypatch.setenv("QA2_KEY", "sk-test-123")
        assert main(["--resume", str(tmp_path / "a"), "--no-progress"]) == 0
    assert len(_lines(tmp_path / "a")) == 2


def _lines_text(out: Path) -> list[str]:
    return [x + "\n" for x in (out / "episodes.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("body", ['{"model": "other"}', '{"messages": []}', '{"max_tokens": 3}',
                                  '{"temperature": 2}', '{"stream": true}', '{"top_k": 5, "stop": ["x"]}'])
def test_extra_body_may_not_replace_what_the_evaluation_sends(tmp_path, capsys, body):
    assert _eval("http://127.0.0.1:1/v1", tmp_path / "out", "--extra-body", body) == 2
    assert "--extra-body may not set" in _one_error_line(capsys.readouterr().err)
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------- the folder
def test_a_damaged_or_doubled_episodes_file_is_named_with_its_line_and_a_cut_last_line_is_replayed(tmp_path, capsys):
    out = tmp_path / "out"
    with Misbehaving([ok()]) as s:
        assert _eval(s.url, out, "--episodes", "3") == 0
        good = _lines_text(out)
        capsys.readouterr()
        for text, says in ((good[0] + '{"env": "ragen/Bandit-v0"}\n', "line 2 is not an episode record (no seed"),
                           (good[0] + "[1, 2]\n" + good[1], "line 2 is not an episode record (a JSON list"),
                           (good[0] + good[1] + good[0], "line 3 repeats episode ragen/Bandit-v0 seed 6000 "
                                                         "sample 0 of line 1"),
                           ("garbage\n" + good[1], "line 1 is not JSON")):
            (out / "episodes.jsonl").write_text(text)
            assert main(["--resume", str(out), "--no-progress"]) == 2
            assert says in _one_error_line(capsys.readouterr().err)
            assert (out / "episodes.jsonl").read_text() == text  # left as it was, for the user to repair
        (out / "episodes.jsonl").write_text(good[0] + good[1] + good[2][:40])  # a crash cut the last line
        before = s.count
        assert main(["--resume", str(out), "--no-progress"]) == 0
        assert s.count == before + 1
    assert sorted(x["seed"] for x in _lines(out)) == [6000, 6001, 6002]


def test_a_second_evaluation_of_a_folder_being_played_is_refused_and_leaves_it_alone(tmp_path, capsys):
    out = tmp_path / "out"
    with Misbehaving([ok()]) as s:
        assert _eval(s.url, out, "--episodes", "2") == 0
        (out / "episodes.jsonl").write_text(_lines_text(out)[0])
        capsys.readouterr()
        fd = os.open(out, os.O_RDONLY)  # what a running `ragen eval --resume out` holds
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            before = s.count
            assert main(["--resume", str(out), "--no-progress"]) == 2
            assert "is being played by another ragen eval" in _one_error_line(capsys.readouterr().err)
            assert s.count == before and len(_lines(out)) == 1 and (out / "eval.json").exists()
        finally:
            os.close(fd)
        assert main(["--resume", str(out), "--no-progress"]) == 0
    assert len(_lines(out)) == 2


def test_the_summary_of_an_evaluation_whose_every_episode_failed(tmp_path, capsys):
    with Misbehaving([raw(400, b'{"detail": "The prompt is too long for the context window"}')]) as s:
        assert _eval(s.url, tmp_path / "out", "--episodes", "2", "--group-size", "2") == 0
    printed = capsys.readouterr().out
    env = _env(tmp_path / "out")
    assert (env["episodes"], env["failed_episodes"], env["success"], env["mean_reward"]) == (0, 4, None, None)
    assert env["success_ci95"] == [0.0, 1.0] and env["failures"] == {"context_length": 4}
    assert env["rv"]["groups"] == 0 and env["rv"]["filter_acts"] is False
    assert "4 (context_length 4)" in printed and (tmp_path / "out" / "summary.png").stat().st_size > 0


def test_a_server_failing_part_way_loses_no_finished_episode_and_resume_plays_each_missing_one_once(tmp_path, capsys):
    out = tmp_path / "out"
    script = [ok()] * 5 + [raw(500, b'{"detail": "engine died"}')]
    with Misbehaving(script) as s:
        assert _eval(s.url, out, "--episodes", "12", "--workers", "4", "--max-retries", "0") == 1
    line = _one_error_line(capsys.readouterr().err)
    kept = _lines(out)
    assert 1 <= len(kept) <= 5 and f"{len(kept)} of 12 episodes are in {out}" in line
    assert all(x["failed"] is None for x in kept)
    with Misbehaving([ok()]) as s:
        assert main(["--resume", str(out), "--base-url", s.url, "--no-progress"]) == 0
        assert s.count == 12 - len(kept)
    keys = [(x["seed"], x["sample"]) for x in _lines(out)]
    assert len(keys) == len(set(keys)) == 12 and _env(out)["episodes"] == 12
