"""Stage 1 of scripts/verl_gpu_smoke.sh: the adapter's tensor code on a CUDA device (needs torch + a GPU only).

Checks, each against a CPU run of the same function on the same inputs: filter_rows and group_advantages on
CUDA batches, masked advantages, and mi_metrics with a small random causal LM on the GPU. Prints one line per
check and exits non-zero on the first mismatch.
"""

from __future__ import annotations

import random
import sys

import numpy as np
import torch

from ragen_core.integrations.verl.core import FilterSpec, filter_rows, group_advantages, masked_group_advantages
from ragen_core.integrations.verl.mi import mi_metrics


def batch(seed: int, p: int = 64, g: int = 8, t: int = 256):
    rng = random.Random(seed)
    uids = np.array([f"u{i}" for i in range(p) for _ in range(g)], dtype=object)
    rng.shuffle(uids)
    r, m = torch.zeros(p * g, t), torch.zeros(p * g, t)
    for b in range(p * g):
        n = rng.randint(1, t)
        m[b, :n] = 1
        r[b, n - 1] = rng.choice((0.0, 0.3, 1.0, 2.0))
    return r, m, uids


def main() -> int:
    if not torch.cuda.is_available():
        print("FAIL: no CUDA device visible")
        return 1
    dev = torch.device("cuda")
    print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    r, m, uids = batch(0)
    for spec in (FilterSpec(), FilterSpec.pr7894_defaults(), FilterSpec(strategy="top_k_abs", value=16)):
        cpu, gpu = filter_rows(r, m, uids, spec), filter_rows(r.to(dev), m.to(dev), uids, spec)
        ok = torch.equal(cpu.rows, gpu.rows)
        print(f"{'ok' if ok else 'FAIL'}: filter_rows {spec.strategy} on cuda keeps {gpu.rows.numel()} rows")
        if not ok:
            return 1
    a_cpu, a_gpu = group_advantages(r, m, uids), group_advantages(r.to(dev), m.to(dev), uids)
    ok = a_gpu.device.type == "cuda" and torch.allclose(a_cpu, a_gpu.cpu(), atol=1e-6)
    print(f"{'ok' if ok else 'FAIL'}: group_advantages on cuda")
    masked, _ = masked_group_advantages(r.to(dev), m.to(dev), uids)
    ok = ok and masked.device.type == "cuda"
    print(f"{'ok' if ok else 'FAIL'}: masked_group_advantages on cuda")
    if not ok:
        return 1
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4)
    model = LlamaForCausalLM(cfg)
    gen = torch.Generator().manual_seed(1)
    prompts = torch.randint(1, 256, (32, 12), generator=gen)
    uid = np.array([f"p{i // 4}" for i in range(32)], dtype=object)
    prompts = prompts[torch.arange(32) // 4 * 4]
    pm = torch.ones_like(prompts)
    resp = torch.randint(1, 256, (32, 20), generator=gen)
    rm = (torch.arange(20)[None] < torch.randint(1, 21, (32, 1), generator=gen)).long()
    on_cpu = mi_metrics(model, prompts, pm, resp, rm, uid)
    on_gpu = mi_metrics(model.to(dev), prompts, pm, resp, rm, uid)
    gap = max(abs(on_cpu[k] - on_gpu[k]) for k in on_cpu)
    ok = gap < 1e-3
    print(f"{'ok' if ok else 'FAIL'}: mi_metrics on cuda, largest gap to cpu {gap:.2e} "
          f"(mi_est {on_gpu['collapse/mi_est']:.4f}, retrieval_acc {on_gpu['collapse/retrieval_acc']:.3f})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
