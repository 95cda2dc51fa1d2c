"""The Policy protocol states every argument its callers pass (`forward_logprobs`) and every member they set."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import ragen_core
from ragen_core.policy.base import Policy


def _forward_logprobs_keywords() -> dict[str, list[str]]:
    """Keyword name -> where, for every ``<x>.forward_logprobs(...)`` call in ragen_core (``**kw`` skipped)."""
    root = Path(ragen_core.__file__).parent
    found: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "forward_logprobs"):
                for kw in node.keywords:
                    if kw.arg is not None:
                        found.setdefault(kw.arg, []).append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_the_protocol_states_every_keyword_its_callers_pass():
    found = _forward_logprobs_keywords()
    assert {"images", "with_entropy", "score_mask"} <= set(found)  # the scan sees the trainer, sft and the probe
    params = inspect.signature(Policy.forward_logprobs).parameters
    missing = {k: v for k, v in found.items() if k not in params}
    assert not missing, f"Policy.forward_logprobs lacks {missing}"
    # `**kw` callers pass the scoring temperature (trainer._temp_kw, the probe)
    assert "temperature" in params and "with_hidden" in params


def test_the_backends_accept_what_the_protocol_states():
    from ragen_core.policy.hf import HFPolicy
    from ragen_core.policy.vllm import VLLMPolicy

    stated = inspect.signature(Policy.forward_logprobs).parameters
    hf = inspect.signature(HFPolicy.forward_logprobs).parameters
    assert [(p.name, p.kind, p.default) for p in stated.values()] == [(p.name, p.kind, p.default) for p in hf.values()]
    vllm = inspect.signature(VLLMPolicy.forward_logprobs).parameters  # forwards to its trainer's HFPolicy
    assert any(p.kind is inspect.Parameter.VAR_KEYWORD for p in vllm.values())


def test_fast_forward_is_a_protocol_member_with_an_ignored_default():
    from ragen_core.policy.vllm import VLLMPolicy

    assert "fast" in Policy.__annotations__ and Policy.fast is False
    assert VLLMPolicy.fast is False  # no lean forward of its own: the trainer's setting is ignored, as before
