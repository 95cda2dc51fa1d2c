"""Suite-wide test settings.

`make test` runs two pytest workers on two cores; letting each worker's torch use two threads
oversubscribes the machine and turns millisecond forwards of the tiny models into seconds.
"""

from __future__ import annotations

import os

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

try:
    import torch
except ImportError:  # pragma: no cover - torch is a dependency; keep collection robust anyway
    torch = None

if torch is not None:
    torch.set_num_threads(1)

# CI runs the property tests on a fixed, reproducible set of examples (a red CI must be reproducible
# from its log); local runs keep exploring new random examples.
from hypothesis import settings  # noqa: E402

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
