"""`ragen eval --base-url` against a stand-in server (a real socket server, tests/apps/eval/eval_standin.py): retries
on 429, 5xx and timeouts; one line and exit status 1 when the server is gone, keeps failing or does not serve the
model; failed episodes recorded and counted apart; Ctrl-C and --resume; images as data URLs; how a reply becomes the
response text. The real `transformers serve` is in test_eval_e2e.py."""

from __future__ import annotations

import base64
import io
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
from eval_standin import ANSWER, StandIn
from PIL import Image

import ragen_envs  # noqa: F401
from ragen_core.apps.diagnose import main as diagnose
from ragen_core.apps.eval import main
from ragen_core.apps.eval.server import EpisodeFailure, openai_messages, reply_text

BANDIT = ["--config", "bandit_tiny"]  # one turn per episode: one request per episode


def _eval(standin: StandIn | None, out: Path, *extra: str, url: str | None = None) -> int:
    base = url or standin.url
    return main(["--base-url", base, "--model-name", "standin", "--out", str(out), "--max-retries", "2",
                 "--timeout", "5", "--workers", "1", "--no-progress", *extra])


def _lines(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines() if x.strip()]


def _one_error_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.startswith("ragen eval:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_429_5xx_and_timeouts_are_retried_and_every_episode_completes(tmp_path, capsys):
    script = [("status", 429, "slow down"), ("status", 503, "busy"), ("ok", ANSWER), ("hang", 2.0), ("ok", ANSWER),
              ("status", 500, "oops")]
    with StandIn(script) as s:
        code = _eval(s, tmp_path / "out", *BANDIT, "--episodes", "3", "--timeout", "0.5")
        assert code == 0, capsys.readouterr().err
        # 3 episodes: 429, 503, ok | hang (timed out), ok | 500, then the default answer.
        assert len(s.requests) == 7
    lines = _lines(tmp_path / "out")
    assert sorted(x["seed"] for x in lines) == [6000, 6001, 6002] and not any(x["failed"] for x in lines)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())["envs"]["ragen/Bandit-v0"]
    assert summary["episodes"] == 3 and summary["failed_episodes"] == 0


@pytest.mark.parametrize("behaviour, expect", [(("status", 500, "engine died"), "kept failing"),
                                               (("hang", 3.0), "timed out")])
def test_a_server_that_keeps_failing_stops_with_one_line_and_resume_finishes(tmp_path, capsys, behaviour, expect):
    out = tmp_path / "out"
    with StandIn([("ok", ANSWER)], default=behaviour) as s:
        assert _eval(s, out, *BANDIT, "--episodes", "3", "--max-retries", "1", "--timeout", "0.3") == 1
    line = _one_error_line(capsys.readouterr().err)
    assert expect in line and f"1 of 3 episodes are in {out}" in line and f"ragen eval --resume {out}" in line
    assert [x["seed"] for x in _lines(out)] == [6000]  # the finished episode is kept; the failing one is not recorded
    with StandIn() as s:  # the server is back (at another address: --resume may change --base-url)
        assert main(["--resume", str(out), "--base-url", s.url, "--no-progress"]) == 0
        assert len(s.requests) == 2  # only the two missing episodes are played
    assert sorted(x["seed"] for x in _lines(out)) == [6000, 6001, 6002]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_unreachable_server_unknown_model_and_bad_flags_are_one_line(tmp_path, capsys):
    url = f"http://127.0.0.1:{_free_port()}/v1"  # nothing listens there
    assert _eval(None, tmp_path / "a", *BANDIT, "--max-retries", "1", url=url) == 1
    line = _one_error_line(capsys.readouterr().err)
    assert f"cannot reach the server at {url}" in line and "after 2 tries" in line
    with StandIn(model="other") as s:  # it lists and serves another model (vLLM's 404 for an unknown one)
        assert _eval(s, tmp_path / "b", *BANDIT) == 1
    line = _one_error_line(capsys.readouterr().err)
    assert "does not serve model 'standin'" in line and "it lists: other" in line
    for bad, says in ((["--base-url", "http://x/v1"], "--base-url needs --model-name"),
                      (["tiny", "--base-url", "http://x/v1"], "give MODEL or --base-url, not both"),
                      (["tiny", "--envs", "ragen/Nope-v0"], "unknown env id 'ragen/Nope-v0'"),
                      (["tiny", "--temperature", "-1"], "--temperature must be >= 0"),
                      (["tiny", "--episodes", "0"], "--episodes must be >= 1"),
                      ([str(tmp_path)], "must be a transformers model folder")):
        assert main([*bad, "--out", str(tmp_path / "c")]) == 2
        assert says in _one_error_line(capsys.readouterr().err), bad
        assert not (tmp_path / "c").exists()


def test_failed_episodes_are_recorded_with_their_reason_and_counted_apart(tmp_path, capsys):
    script = [("status", 400, "The prompt has 5000 tokens, but the model takes at most 4096, prompt and answer."),
              ("nochoices",), ("status", 422, "unknown field 'stop'"), ("ok", ANSWER)]
    with StandIn(script) as s:
        assert _eval(s, tmp_path / "out", *BANDIT, "--episodes", "4") == 0
        assert len(s.requests) == 4  # refusals are not retried
    by_seed = {x["seed"]: x for x in _lines(tmp_path / "out")}
    assert by_seed[6000]["failed"]["reason"] == "context_length" and "5000 tokens" in by_seed[6000]["failed"]["detail"]
    assert by_seed[6001]["failed"]["reason"] == "malformed_reply"
    assert by_seed[6002]["failed"]["reason"] == "bad_request"
    assert by_seed[6003]["failed"] is None and by_seed[6003]["success"] is False
    assert all(math.isnan(by_seed[s]["reward"]) and by_seed[s]["success"] is None for s in (6000, 6001, 6002))
    env = json.loads((tmp_path / "out" / "summary.json").read_text())["envs"]["ragen/Bandit-v0"]
    assert (env["episodes"], env["failed_episodes"]) == (1, 3)
    assert env["failures"] == {"context_length": 1, "malformed_reply": 1, "bad_request": 1}
    assert env["success"] == 0.0 and env["mean_reward"] == pytest.approx(by_seed[6003]["reward"])
    capsys.readouterr()
    assert diagnose([str(tmp_path / "out" / "episodes.jsonl")]) == 0  # NaN rewards are valid diagnose input


def test_images_are_sent_as_data_urls_and_a_server_that_refuses_them_skips_the_env(tmp_path, capsys):
    with StandIn() as s:
        assert _eval(s, tmp_path / "a", "--envs", "ragen/Sokoban-Vision-v0", "--episodes", "1", "--max-tokens",
                     "16") == 0
        first, second = s.requests[0], s.requests[1]
    parts = first["messages"][-1]["content"]
    urls = [p["image_url"]["url"] for p in parts if p["type"] == "image_url"]
    assert len(urls) == 1 and urls[0].startswith("data:image/png;base64,")
    sent = np.asarray(Image.open(io.BytesIO(base64.b64decode(urls[0].split(",", 1)[1]))))
    obs, _ = gym.make("ragen/Sokoban-Vision-v0").reset(seed=6000)
    assert np.array_equal(sent, obs["image"])  # the env's own picture, losslessly
    assert any(p["type"] == "text" and obs["text"] in p["text"] for p in parts)
    # Full context (the default): turn 2 shows both earlier pictures, each in its own user message.
    assert sum(p["type"] == "image_url" for m in second["messages"] if isinstance(m["content"], list)
               for p in m["content"]) == 2
    line = _lines(tmp_path / "a")[0]
    assert "<image>" in line["messages"][-2]["content"] and "\ue000" not in json.dumps(line)
    capsys.readouterr()

    with StandIn(default=("status", 400, "this model does not accept image_url content")) as s:
        assert _eval(s, tmp_path / "b", "--envs", "ragen/Sokoban-Vision-v0,ragen/Bandit-v0", "--episodes", "2") == 0
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())["envs"]
    assert "does not accept image_url" in summary["ragen/Sokoban-Vision-v0"]["refused"]
    assert summary["ragen/Bandit-v0"]["failed_episodes"] == 2  # text requests refused: failures, not a refusal
    assert {x["env"] for x in _lines(tmp_path / "b")} == {"ragen/Bandit-v0"}


def test_ctrl_c_keeps_every_finished_episode_and_resume_plays_each_missing_one_once(tmp_path):
    out = tmp_path / "out"
    total = 40
    with StandIn(default=("hang", 0.3)) as s:  # each answer takes 0.3 s
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
        # A suite started in the background (`make test &`, nohup) ignores SIGINT, and an ignored signal stays
        # ignored across exec, so Python would not turn it into KeyboardInterrupt: the child gets the default back.
        proc = subprocess.Popen([sys.executable, "-m", "ragen_core.apps.eval", "--base-url", s.url, "--model-name",
                                 "standin", *BANDIT, "--episodes", str(total), "--workers", "2", "--out", str(out)],
                                stderr=subprocess.PIPE, text=True, env=env,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and (not (out / "episodes.jsonl").exists()
                                               or len(_lines(out)) < 3):
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        line = _one_error_line(err)
        kept = len(_lines(out))
        assert 3 <= kept < total and f"interrupted; {kept} of {total} episodes are in {out}" in line
        assert f"ragen eval --resume {out}" in line
        s.default = ("ok", ANSWER)
        assert main(["--resume", str(out), "--no-progress"]) == 0
    keys = [(x["env"], x["seed"], x["sample"]) for x in _lines(out)]
    assert len(keys) == len(set(keys)) == total and {k[1] for k in keys} == set(range(6000, 6000 + total))


def test_requests_carry_the_sampling_and_transformers_serve_is_asked_to_sample(tmp_path):
    with StandIn(fingerprint=True) as s:
        assert _eval(s, tmp_path / "a", *BANDIT, "--episodes", "1", "--temperature", "0.7", "--top-p", "0.9",
                     "--max-tokens", "12", "--extra-body", '{"top_k": 5}') == 0
        assert _eval(s, tmp_path / "b", *BANDIT, "--episodes", "1", "--temperature", "0") == 0
        sampled, greedy = s.requests
    assert (sampled["temperature"], sampled["top_p"], sampled["max_tokens"], sampled["stop"]) == (0.7, 0.9, 12,
                                                                                                  ["</answer>"])
    assert json.loads(sampled["generation_config"]) == {"do_sample": True} and sampled["top_k"] == 5
    assert greedy["temperature"] == 0 and "generation_config" not in greedy and greedy["max_tokens"] == 64
    assert [m["role"] for m in sampled["messages"]] == ["user"]  # bandit_tiny: no system prompt
    with StandIn() as s:  # another server: no transformers-only field
        assert _eval(s, tmp_path / "c", *BANDIT, "--episodes", "1") == 0
        assert "generation_config" not in s.requests[0] and s.requests[0]["temperature"] == 1.0


def test_without_the_openai_client_the_server_path_names_the_serve_extra(tmp_path):
    code = ("import sys; sys.modules['openai'] = None; from ragen_core.apps.eval import main; "
            f"sys.exit(main(['--base-url', 'http://127.0.0.1:1/v1', '--model-name', 'm', '--envs', 'Bandit-v0', "
            f"'--out', {str(tmp_path / 'out')!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip() == ("ragen eval --base-url needs the serve extra (missing: openai): pip install "
                                   "'ragen2[serve]' (from a clone: pip install -e '.[serve]')")
    assert not (tmp_path / "out").exists()


def test_resume_refuses_flags_that_would_change_the_episodes(tmp_path, capsys):
    with StandIn() as s:
        assert _eval(s, tmp_path / "out", *BANDIT, "--episodes", "1") == 0
    capsys.readouterr()
    assert main(["--resume", str(tmp_path / "out"), "--temperature", "0.5"]) == 2
    assert "drop --temperature" in _one_error_line(capsys.readouterr().err)
    assert main(["--resume", str(tmp_path / "nowhere")]) == 2
    assert "no eval.json" in _one_error_line(capsys.readouterr().err)
    assert _eval(None, tmp_path / "out", *BANDIT, url="http://127.0.0.1:1/v1") == 2  # --out of an existing evaluation
    assert "already holds an evaluation" in _one_error_line(capsys.readouterr().err)


# ---------------------------------------------------------------------------------------------- reply -> text
def _choice(content, finish="stop", **extra):
    message = SimpleNamespace(content=content, model_extra={k: v for k, v in extra.items() if k.startswith("reas")})
    return SimpleNamespace(message=message, finish_reason=finish,
                           model_extra={k: v for k, v in extra.items() if not k.startswith("reas")})


@pytest.mark.parametrize("content, extra, finish, want", [
    # verbatim text, cut right after the first stop string (as HFPolicy cuts it)
    ("<think>a</think><answer>Up</answer>", {}, "stop", "<think>a</think><answer>Up</answer>"),
    ("<think>a</think><answer>Up</answer> and more", {}, "stop", "<think>a</think><answer>Up</answer>"),
    # reasoning returned apart (transformers serve, vLLM's reasoning parser) is put back in front
    ("<answer>Up</answer>", {"reasoning_content": "a b"}, "stop", "<think>a b</think><answer>Up</answer>"),
    ("<answer>Up</answer>", {"reasoning": "a"}, "stop", "<think>a</think><answer>Up</answer>"),
    (None, {"reasoning_content": "only thoughts"}, "length", "<think>only thoughts</think>"),
    # a stop string the server trimmed: put back when it says it matched it, not when it says EOS
    ("<think>a</think><answer>Up", {"stop_reason": "</answer>"}, "stop", "<think>a</think><answer>Up</answer>"),
    ("<think>a</think><answer>Up", {"stop_reason": None}, "stop", "<think>a</think><answer>Up"),
    ("<think>a</think><answer>Up", {"matched_stop": "</answer>"}, "stop", "<think>a</think><answer>Up</answer>"),
    # a server that says neither: put back inside an unclosed answer on "stop", never on "length"
    ("<think>a</think><answer>Up", {}, "stop", "<think>a</think><answer>Up</answer>"),
    ("<think>a</think><answer>Up", {}, "length", "<think>a</think><answer>Up"),
    ("<think>a</think>", {}, "stop", "<think>a</think>"),
])
def test_reply_text_restores_what_the_server_took_apart(content, extra, finish, want):
    c = _choice(content, finish, **extra)
    assert reply_text(c.message, c, ("</answer>",)) == want


def test_a_reply_without_text_is_a_malformed_reply():
    c = _choice(None, "stop")
    with pytest.raises(EpisodeFailure) as failure:
        reply_text(c.message, c, ("</answer>",))
    assert failure.value.reason == "malformed_reply"


def test_openai_messages_places_each_image_where_its_placeholder_was():
    from ragen_core.apps.eval.server import IMAGE_SENTINEL

    red, blue = np.zeros((2, 2, 3), np.uint8), np.full((2, 2, 3), 200, np.uint8)
    msgs = [{"role": "system", "content": "rules"}, {"role": "user", "content": f"State:\n{IMAGE_SENTINEL}\nA"},
            {"role": "assistant", "content": "x"}, {"role": "user", "content": f"{IMAGE_SENTINEL}\nB"}]
    out = openai_messages(msgs, [red, blue])
    assert out[0] == {"role": "system", "content": "rules"} and out[2] == {"role": "assistant", "content": "x"}
    assert [p["type"] for p in out[1]["content"]] == ["text", "image_url", "text"]
    assert out[1]["content"][0]["text"] + out[1]["content"][2]["text"] == "State:\n\nA"
    decoded = [np.asarray(Image.open(io.BytesIO(base64.b64decode(m["content"][[p["type"] for p in m["content"]]
                                                                     .index("image_url")]["image_url"]["url"]
                                                                     .split(",", 1)[1]))))
               for m in (out[1], out[3])]
    assert np.array_equal(decoded[0], red) and np.array_equal(decoded[1], blue)
    with pytest.raises(ValueError):
        openai_messages(msgs, [red])
