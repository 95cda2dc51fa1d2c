"""A stand-in chat-completions server for the client tests: a real HTTP server on 127.0.0.1 (a free port, its own
threads) that answers each ``POST /v1/chat/completions`` with the next scripted behaviour, and records every request.

Behaviours (tuples): ``("ok", text)`` a chat completion with `text`; ``("status", code, detail)`` an HTTP error with
``{"detail": detail}`` and a ``retry-after-ms: 10`` header (the openai client then retries after 10 ms instead of its
0.5 s backoff: the tests stay fast); ``("hang", seconds)`` no answer for that long (a timeout), then an answer;
``("nochoices",)`` a 200 whose body has no choices. When the script is empty, `default` answers.

This is not a mock of the client: the openai package talks HTTP to it over a socket, retries and times out as it would
with any server. The end-to-end tests use the real `transformers serve`.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ANSWER = "<think>I pick one.</think><answer>Up</answer>"


class StandIn:
    """``with StandIn(script) as s:`` serves at ``s.url``; ``s.requests`` holds the chat request bodies."""

    def __init__(self, script: list[tuple] | None = None, default: tuple = ("ok", ANSWER), model: str = "standin",
                 list_models: bool = True, fingerprint: bool = False):
        self.script = list(script or [])
        self.default = default
        self.model = model
        self.list_models = list_models
        #: List the model as `transformers serve` does (with a "status" field).
        self.fingerprint = fingerprint
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> StandIn:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    def next_behaviour(self, body: dict[str, Any]) -> tuple:
        with self.lock:
            self.requests.append(body)
            return self.script.pop(0) if self.script else self.default

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _send(self, code: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(code)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout): nothing to answer

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path.rstrip("/").endswith("/models") and standin.list_models:
                    entry = {"id": standin.model, "object": "model", "owned_by": "local", "created": 0}
                    if standin.fingerprint:
                        entry["status"] = {"value": "loaded"}
                    self._send(200, {"object": "list", "data": [entry]})
                else:
                    self._send(404, {"detail": "not found"})

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, {"detail": "not found"})
                    return
                if body.get("model") != standin.model:
                    with standin.lock:
                        standin.requests.append(body)
                    self._send(404, {"error": {"message": f"The model `{body.get('model')}` does not exist."}})
                    return
                kind, *args = standin.next_behaviour(body)
                if kind == "status":
                    self._send(args[0], {"detail": args[1]}, {"retry-after-ms": "10"})
                elif kind == "nochoices":
                    self._send(200, {"id": "x", "object": "chat.completion", "created": 0, "model": standin.model,
                                     "choices": []})
                else:
                    if kind == "hang":
                        time.sleep(args[0])
                    text = args[0] if kind == "ok" else ANSWER
                    self._send(200, completion(standin.model, text))

        return Handler


def completion(model: str, text: str, finish_reason: str = "stop") -> dict[str, Any]:
    """A chat.completion body."""
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "finish_reason": finish_reason,
                         "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}
