"""Two machines whose CPUs share a model name can round differently: the warm-start cache and the run's records
must tell them apart.

Found by re-running one seed of the study: the same code (05e2668 and today's, side by side on one machine gave
the same warm-start weights) and the same config trained a collapse config's warm start that validated at 26.6%,
where the study's record says 43.0%. The cores of both machines were named "AMD EPYC"; this one dispatches torch's
kernels to AVX2 (family 25, model 1: Zen 3). The cache key named the CPU by that name only, so a cache folder kept
across machines could have served one machine the other's weights, and the records could not say why they differ.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from ragen_core.training import provenance
from ragen_core.training.config import load_config
from ragen_core.training.provenance import cpu_arithmetic, write_provenance
from ragen_core.training.report import RESUME_LOG, record_resume
from ragen_core.training.warm_cache import cache_key, machine_arithmetic, step0_key

ROOT = Path(__file__).resolve().parents[2]


def _cpuinfo_first_core() -> dict[str, str]:
    """The first core's block of /proc/cpuinfo, parsed here independently of the code under test."""
    out: dict[str, str] = {}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return out
    for line in text.split("\n\n")[0].splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            out[k.strip()] = v.strip()
    return out


def test_cpu_arithmetic_names_the_dispatch_level_and_the_core():
    text = cpu_arithmetic()
    assert text is not None and text.startswith(torch.backends.cpu.get_cpu_capability())
    info = _cpuinfo_first_core()
    if "cpu family" in info and "model" in info:
        assert f"family {info['cpu family']} model {info['model']}" in text


def test_the_cache_key_tells_apart_cores_of_one_model_name_that_dispatch_differently(monkeypatch):
    cfg = load_config(ROOT / "configs" / "collapse_sokoban.toml", ["warm_start.sft_episodes=8"])
    monkeypatch.setattr(provenance, "cpu_model", lambda: "AMD EPYC")  # the name both machines showed
    here = cache_key(cfg), step0_key(cfg, "probe")
    other_level = "AVX2" if torch.backends.cpu.get_cpu_capability() != "AVX2" else "AVX512"
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: other_level)
    there = cache_key(cfg), step0_key(cfg, "probe")
    assert there[0] != here[0] and there[1] != here[1]
    assert machine_arithmetic("cpu")["cpu_arithmetic"].startswith(other_level)


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="reads /proc/cpuinfo (Linux)")
def test_the_cache_key_tells_apart_cores_of_another_family_or_model(monkeypatch, tmp_path):
    cfg = load_config(ROOT / "configs" / "collapse_sokoban.toml", ["warm_start.sft_episodes=8"])
    here = cache_key(cfg)
    other_model = "17" if _cpuinfo_first_core().get("model") != "17" else "1"
    fake = tmp_path / "cpuinfo"
    fake.write_text(f"processor\t: 0\nmodel name\t: {provenance.cpu_model()}\ncpu family\t: 25\n"
                    f"model\t\t: {other_model}\nstepping\t: 1\n\nprocessor\t: 1\n")
    real_read_text = Path.read_text

    def read_text(self, *a, **k):
        return real_read_text(fake if str(self) == "/proc/cpuinfo" else self, *a, **k)

    monkeypatch.setattr(Path, "read_text", read_text)
    assert cpu_arithmetic().endswith(f"family 25 model {other_model} stepping 1")
    assert cache_key(cfg) != here


def test_provenance_and_resume_records_name_the_cpu_arithmetic(tmp_path):
    record = write_provenance(tmp_path, "[run]\n")
    assert record["cpu_arithmetic"] == cpu_arithmetic()
    assert json.loads((tmp_path / "provenance.json").read_text())["cpu_arithmetic"] == cpu_arithmetic()
    record_resume(tmp_path, 3, {})
    last = json.loads((tmp_path / RESUME_LOG).read_text().splitlines()[-1])
    assert last["cpu_arithmetic"] == cpu_arithmetic()


def test_the_cache_key_and_the_provenance_name_the_decoding_step(monkeypatch, tmp_path):
    """The fused decoding step's logits differ from the others' by rounding, which can move the step-0 validation's
    and probe's sampled tokens that the cache stores: the key tells the steps apart, and provenance.json names it."""
    from ragen_core.policy.native import KERNEL, SWITCH

    cfg = load_config(ROOT / "configs" / "collapse_sokoban.toml", ["warm_start.sft_episodes=8"])
    keys, recorded = set(), set()
    for switch, kernel in (("1", "fused"), ("1", "ops"), ("0", "fused")):
        monkeypatch.setenv(SWITCH, switch)
        monkeypatch.setenv(KERNEL, kernel)
        keys.add((cache_key(cfg), step0_key(cfg, "probe")))
        recorded.add(write_provenance(tmp_path, "x = 1\n")["decoding"])
    assert len(keys) == 3
    if shutil.which(os.environ.get("CXX") or "c++"):
        assert recorded == {"fused", "ops", "python"}
