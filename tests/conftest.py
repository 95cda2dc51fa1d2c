"""Suite-wide test settings and the shared tiny-model fixtures.

`make test` runs two pytest workers on two cores; letting each worker's torch use two threads
oversubscribes the machine and turns millisecond forwards of the tiny models into seconds. Tiny models
gain nothing from intra-op threads anyway, so every test module runs on one torch thread.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

try:
    import torch
except ImportError:  # pragma: no cover - torch is a dependency; keep collection robust anyway
    torch = None

if torch is not None:
    torch.set_num_threads(1)

# `make test` (what CI runs) sets HYPOTHESIS_PROFILE=ci: the property tests then run a fixed, reproducible set
# of examples (derandomized, which also turns off the example database), so a red run is reproducible from its
# log. A CI that runs pytest directly with CI set gets the same profile; other local runs keep exploring new
# random examples.
from hypothesis import settings  # noqa: E402

settings.register_profile("ci", derandomize=True, print_blob=True)
_HYPOTHESIS_PROFILE = os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else None)
if _HYPOTHESIS_PROFILE:
    settings.load_profile(_HYPOTHESIS_PROFILE)

#: The size of the tiny Qwen2 the trainer, rollout and SFT tests build (a forward takes about a millisecond).
TINY_SIZE: dict[str, Any] = dict(hidden=32, layers=2, heads=2, kv_heads=1)


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    """One torch thread per test module, restored afterwards (code under test may change it, e.g. the demo)."""
    if torch is None:  # pragma: no cover
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def make_tiny_model(tmp_path_factory) -> Callable[..., Path]:
    """Factory: `make_tiny_model(*corpus, **build_kwargs)` builds a tiny model in a fresh temporary folder.

    The tokenizer is trained on the built-in format sample plus the `corpus` strings (the words a test's env
    prints); sizes default to `TINY_SIZE`, any `build_tiny_model` keyword overrides them. Returns the folder.
    """
    from ragen_core.policy import build_tiny_model

    def make(*corpus: str, **build_kwargs: Any) -> Path:
        return build_tiny_model(tmp_path_factory.mktemp("tiny"), corpus=list(corpus), **{**TINY_SIZE, **build_kwargs})

    return make


@pytest.fixture(scope="session")
def make_tiny_policy(make_tiny_model) -> Callable[..., Any]:
    """Factory: `make_tiny_policy(*corpus, **build_kwargs)` is `HFPolicy` over `make_tiny_model(...)`."""
    from ragen_core.policy import HFPolicy

    def make(*corpus: str, **build_kwargs: Any) -> Any:
        return HFPolicy.from_pretrained(make_tiny_model(*corpus, **build_kwargs))

    return make
