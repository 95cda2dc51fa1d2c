"""The TRL examples (examples/trl_countdown.py, examples/trl_frozenlake_tools.py) run for a few steps, and the
pieces they rest on: the public warm starts (ragen_core.integrations.warm) and the tool-calling template swap.

The examples are run through their ``main(argv)`` with small arguments; each must warm-start the tiny model far
enough that TRL trains on a non-empty filtered batch (an untrained model gives ``filter/empty`` 1 at every step,
grad norm 0), and log the adapter's filter metrics. The tool-loop layout of the demonstrations is checked
against TRL's own code (its tool-suffix rendering and its tool-call parser).
"""

from __future__ import annotations

import importlib.util
import math
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

if not os.environ.get("CI"):  # CI installs the trl extra (make test): there a missing TRL must fail, not skip
    pytest.importorskip("trl")

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

ROOT = Path(__file__).resolve().parents[2]
FROZENLAKE = {"size": 3, "max_actions": 4, "max_actions_per_turn": 1, "obs_format": "coord", "is_slippery": False}


def _example(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _check_trained(result: dict, steps: int) -> None:
    """Every step logged the filter; some step kept rows and took a finite, non-zero gradient step; the steps
    that kept nothing took none."""
    log = result["log"]
    assert len(log) == steps
    for entry in log:
        for key in ("filter/kept_groups", "filter/kept_rows", "filter/empty", "filter/kept_fraction"):
            assert key in entry and math.isfinite(entry[key]), (key, entry)
        assert "filter/rv_heterogeneity" not in entry or math.isfinite(entry["filter/rv_heterogeneity"])
    trained = [e for e in log if e["filter/empty"] == 0.0]
    assert trained, [(e["reward"], e["filter/kept_groups"]) for e in log]
    for e in trained:
        assert e["filter/kept_rows"] > 0 and math.isfinite(e["grad_norm"]) and e["grad_norm"] > 0, e
    for e in log:
        if e["filter/empty"] == 1.0:
            assert e["grad_norm"] == 0.0 and e["filter/kept_rows"] == 0.0, e
    assert result["non_empty_steps"] == len(trained)
    ws = result["warm_start"]
    assert ws["sft/loss_last"] < ws["sft/loss_first"]
    for side in ("before", "after"):
        assert 0.0 <= result[side]["success"] <= 1.0


@pytest.mark.slow
def test_countdown_example_trains_on_non_empty_batches(tmp_path, capsys):
    steps = 3
    result = _example("trl_countdown").main([
        "--steps", str(steps), "--prompts", "4", "--generations", "4", "--warm-episodes", "300",
        "--warm-epochs", "2", "--eval-episodes", "8", "--output-dir", str(tmp_path), "--cache-dir", "",
        "--threads", "1", "--quiet"])
    _check_trained(result, steps)
    out = capsys.readouterr().out
    assert out.startswith("Countdown through TRL, 3 steps of 4 x 4") and "greedy success" in out


@pytest.mark.slow
def test_frozenlake_tools_example_plays_through_tool_calls(tmp_path, capsys):
    # 2x2 maps, two moves, the call without reasoning: a warm start short enough for a test (80 episodes x 2
    # epochs) still teaches the tiny model the call.
    steps = 2
    result = _example("trl_frozenlake_tools").main([
        "--steps", str(steps), "--prompts", "2", "--generations", "4", "--size", "2", "--max-actions", "2",
        "--warm-episodes", "80", "--warm-epochs", "2", "--warm-batch", "2", "--warm-lr", "5e-3",
        "--eval-episodes", "8", "--output-dir", str(tmp_path), "--threads", "1", "--quiet"])
    _check_trained(result, steps)
    # The warm-started model calls the tool in TRL's rollouts and in greedy play (untrained: never).
    assert all(e["tools/call_frequency"] > 0 for e in result["log"])
    assert result["before"]["calls"] >= 1.0
    assert "through TRL's tool loop" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------------ the pieces
@pytest.fixture(scope="module")
def tool_tokenizer():
    from ragen_core.integrations.trl.env import use_tool_chat_template
    from ragen_core.policy import load_policy

    return use_tool_chat_template(load_policy("tiny").tokenizer)


def test_use_tool_chat_template_gives_trl_a_tool_calling_template(tool_tokenizer):
    import trl
    from trl.chat_template_utils import is_chat_template_prefix_preserving

    from ragen_core.integrations.trl.env import tool_chat_template

    path = Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja"
    assert tool_tokenizer.chat_template == path.read_text(encoding="utf-8")
    assert is_chat_template_prefix_preserving(tool_tokenizer)  # TRL's requirement for its tool loop
    with pytest.raises(ValueError, match="ships no chat template 'nope'"):
        tool_chat_template("nope")
    with pytest.raises(ValueError, match="plain file name"):
        tool_chat_template("../setup")


def test_tool_demonstrations_use_trls_layout(tool_tokenizer):
    """The demonstration's prompt is what TRL renders with the env's `act` method as the tool, each tool result
    is TRL's own suffix (`GRPOTrainer._get_tool_suffix_ids`), and each generated turn parses, with TRL's
    response schema, into the `act` call that was executed."""
    import copy

    from trl import GRPOTrainer
    from trl.chat_template_utils import add_response_schema, parse_response

    from ragen_core.integrations.trl.env import RagenEnvironment
    from ragen_core.integrations.warm import _tool_suffix_ids, tool_episode_tokens, tool_turn_ids

    env = RagenEnvironment("ragen/FrozenLake-v0", FROZENLAKE, include_instructions=False)
    ids, mask, info = tool_episode_tokens(tool_tokenizer, env, 31)
    assert len(ids) == len(mask) and info["turns"] >= 1
    prompt = tool_tokenizer.apply_chat_template(
        [{"role": "user", "content": env.reset(seed=31)}], tools=[env.act], add_generation_prompt=True,
        tokenize=True, return_dict=False)
    assert ids[: len(prompt)] == list(prompt) and not any(mask[: len(prompt)])

    trl_self = SimpleNamespace(processing_class=tool_tokenizer, chat_template=None, chat_template_kwargs={},
                               _is_vlm=False, _tokenizer=tool_tokenizer)
    message = [{"role": "tool", "name": "act", "content": "Reward: 0\nTurn 2:\nState:\n..."}]
    assert _tool_suffix_ids(tool_tokenizer, message, None) == GRPOTrainer._get_tool_suffix_ids(trl_self, message)

    parser = add_response_schema(copy.copy(tool_tokenizer))
    turn = tool_turn_ids(tool_tokenizer, {"role": "assistant", "content": "<think> x </think>", "tool_calls": [
        {"type": "function", "function": {"name": "act", "arguments": {"answer": "Right"}}}]}, [env.act])
    assert turn[-1] == tool_tokenizer.eos_token_id
    parsed = parse_response(parser, turn, prefix=list(prompt), tools=[env.act])  # as TRL parses a completion
    call = parsed["tool_calls"][0]["function"]
    assert call["name"] == "act" and call["arguments"] == {"answer": "Right"}

    # The trained spans: the turns (each ending at EOS) and the closing message; the rest is prompt / tool text.
    spans, start = [], None
    for i, m in enumerate([*mask, 0]):
        if m and start is None:
            start = i
        if not m and start is not None:
            spans.append((start, i))
            start = None
    assert len(spans) == info["turns"] + 1
    assert all(ids[b - 1] == tool_tokenizer.eos_token_id for _, b in spans)
    assert "The episode is over." in tool_tokenizer.decode(ids[spans[-1][0]: spans[-1][1]])


def test_warm_start_is_public_and_lazy():
    import subprocess
    import sys

    code = ("import sys, ragen_core; assert 'torch' not in sys.modules; f = ragen_core.warm_start; "
            "import ragen_core.integrations.warm as w; assert f is w.warm_start; "
            "assert ragen_core.warm_start_tools is w.warm_start_tools")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=120)


def test_warm_start_rejects_an_unknown_config():
    from ragen_core.integrations.warm import warm_start
    from ragen_core.training.config import ConfigError

    with pytest.raises(ConfigError, match="no such preset"):
        warm_start("no_such_preset")
    with pytest.raises(ConfigError, match="warm_start.bogus"):
        warm_start("countdown_tiny", ["warm_start.bogus=1"])
