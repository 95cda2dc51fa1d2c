"""TRL's micro-batched step with the adapter's removal: the gradient of masking, the compute of the kept rows."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("trl")

from benchmarks import bench_trl_filtering as b  # noqa: E402


def _grad(trainer, make) -> torch.Tensor:
    trainer.model.zero_grad(set_to_none=True)
    b.trl_step(trainer, make, keep_grad=True)
    grads = [p.grad.reshape(-1) for p in trainer.model.parameters() if p.grad is not None]
    trainer.model.zero_grad(set_to_none=True)
    return torch.cat(grads)


def test_removed_rows_give_the_masked_gradient_with_fewer_rows(tmp_path):
    torch.manual_seed(0)
    p, g = 4, 4
    trainer, dataset = b.build_trainer(p, g, per_device=8, max_new_tokens=8, output_dir=tmp_path)
    output = b.sample_batch(trainer, dataset, g)
    rewards = b.synthetic_rewards(p, g, seed=0)
    v = b.variant_batches(trainer, output, rewards)
    infos = v["infos"]
    assert infos["none"]["rows"] == p * g and infos["top_p0.9_masked"]["rows"] == p * g
    assert infos["top_p0.9_removed"]["rows"] < p * g
    assert infos["top_p0.9_removed"]["tokens_kept_fraction"] == pytest.approx(
        infos["top_p0.9_masked"]["tokens_kept_fraction"])
    masked, removed, every = (_grad(trainer, v["makers"][n]) for n in ("top_p0.9_masked", "top_p0.9_removed", "none"))
    scale = float(masked.abs().max())
    assert scale > 0
    assert float((masked - removed).abs().max()) <= 1e-4 * scale  # the same update ...
    assert float((masked - every).abs().max()) > 1e-2 * scale  # ... which is not the unfiltered one
    table = b.markdown([{"P": p, "G": g, "per_device": 8, "steps_per_generation": 2,
                         "variants": b.summarize({n: [1.0, 1.1] for n in b.VARIANTS}, infos)}])
    assert "top_p0.9_removed" in table
