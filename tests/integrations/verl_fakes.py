"""Stand-ins for the verl / TransferQueue calls that the verl adapter's tests need (no verl installed)."""

from __future__ import annotations

from typing import Any

import torch


class FakeTQ:
    """The TransferQueue calls of ``_balance_batch`` (kv_batch_get, kv_clear) over an in-memory row store."""

    def __init__(self, rows: dict[str, dict[str, Any]]) -> None:
        self.rows, self.cleared = rows, []

    def kv_batch_get(self, keys, partition_id, select_fields):
        def nested(name, dtype):
            return torch.nested.as_nested_tensor([self.rows[k][name].to(dtype) for k in keys], layout=torch.jagged)

        return {"uid": [self.rows[k]["uid"] for k in keys], "rm_scores": nested("rm_scores", torch.float32),
                "response_mask": nested("response_mask", torch.int64)}

    def kv_clear(self, keys, partition_id):
        self.cleared += list(keys)
