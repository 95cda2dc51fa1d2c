"""The compiled decoding step (`ragen_core.policy.native`, `csrc/decode_step.cpp`) against the Python step it replaces.

The compiled step makes the Python step's operator calls from C++, so it must give the same numbers bit for bit:
every step's logits and the caches it writes, in float32 and bfloat16, with rows dropping out (the cache compacts
and the slot order differs from the rows'), and the tokens `HFPolicy.generate` samples. Where it cannot be built
(no compiler, a compile error, a broken cached library) or is switched off, decoding falls back to the Python step
and says why in one line.
"""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from ragen_core.policy import HFPolicy, native
from ragen_core.policy.fast_qwen2 import DecodeState, FastQwen2
from ragen_core.policy.native import KERNEL, SWITCH
from ragen_core.policy.tiny import default_tiny_model_dir

HAVE_COMPILER = shutil.which(os.environ.get("CXX") or "c++") is not None
needs_compiler = pytest.mark.skipif(not HAVE_COMPILER, reason="no C++ compiler on PATH: the Python step runs")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    """The shipped tiny model (hidden 128, 2 layers, 4 heads, 2 key/value heads, vocabulary 1028)."""
    return HFPolicy.from_pretrained(default_tiny_model_dir(tmp_path_factory.mktemp("tiny-cache")))


def _prompts(groups: int, per_group: int, seed: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(groups):
        n = int(torch.randint(130, 151, (1,), generator=gen))
        out += [torch.randint(5, 1028, (n,), generator=gen).tolist()] * per_group
    return out


def _state(fast: FastQwen2, prompts, max_new: int, pad_id: int, compiled: bool, monkeypatch) -> DecodeState:
    """The compiled operator-for-operator step (the claim here is bit-equality; the fused float32 step has its own
    tests, tests/policy/test_fused_decode.py) or the Python step."""
    monkeypatch.setenv(SWITCH, "1" if compiled else "0")
    monkeypatch.setenv(KERNEL, "ops")
    state = fast.start_decoding(prompts, max_new, pad_id)
    assert (state._native is not None) == compiled, native.native_decode_status()
    return state


@needs_compiler
def test_the_compiled_step_is_built_and_taken_where_a_compiler_is(monkeypatch):
    monkeypatch.delenv(SWITCH, raising=False)
    monkeypatch.delenv(KERNEL, raising=False)
    assert native.native_decode_step() is not None, native.native_decode_status()
    assert native.native_decode_step("fused") is not None, native.native_decode_status()
    assert native.native_decode_status().startswith("compiled step (fused; ")


@needs_compiler
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows,groups,max_new", [(32, 8, 48), (7, 7, 30), (1, 1, 12)])
def test_every_step_equals_the_python_step_bit_for_bit(policy, monkeypatch, dtype, rows, groups, max_new):
    """Both steps fed the same tokens and the same shrinking row sets: every step's logits, and at the end every
    cache column written, are equal bit for bit."""
    model = policy.model if dtype == torch.float32 else copy.deepcopy(policy.model).to(dtype)
    fast = FastQwen2(model)
    prompts = _prompts(groups, rows // groups, seed=rows)
    compiled = _state(fast, prompts, max_new, policy.pad_token_id, True, monkeypatch)
    python = _state(fast, prompts, max_new, policy.pad_token_id, False, monkeypatch)
    gen = torch.Generator().manual_seed(rows + 7)
    last = torch.randint(1, max_new + 1, (rows,), generator=gen)
    last[0] = max_new
    live, tokens, moved = torch.arange(rows), compiled.next_tokens, False
    for step in range(max_new):
        got, want = compiled.step(live, tokens), python.step(live, tokens)
        assert got.dtype == want.dtype == dtype
        assert torch.equal(got, want), f"step {step}: max |diff| {float((got.float() - want.float()).abs().max())}"
        moved |= compiled._where is not None
        tokens = torch.randint(0, got.shape[1], (live.numel(),), generator=gen)
        keep = last[live] > step + 1
        live, tokens = live[keep], tokens[keep]
        if not live.numel():
            break
    if rows > 1:
        assert moved, "no row ever moved: the slot order was not exercised"
    cols = compiled.width + compiled.steps
    for (kc, vc), (kp, vp) in zip(compiled.cache, python.cache):
        assert torch.equal(kc[:, :, :cols], kp[:, :, :cols]) and torch.equal(vc[:, :, :cols], vp[:, :, :cols])


@needs_compiler
@pytest.mark.parametrize("mode", ["greedy", "temperature", "top_p"])
def test_generation_samples_the_same_tokens_either_way(policy, monkeypatch, mode):
    prompts = _prompts(4, 4, seed=3)
    out = {}
    monkeypatch.setenv(KERNEL, "ops")
    for compiled in (True, False):
        monkeypatch.setenv(SWITCH, "1" if compiled else "0")
        gens = policy.generate(prompts, max_new_tokens=40, temperature=1.0, top_p=0.9 if mode == "top_p" else 1.0,
                               greedy=mode == "greedy", generator=torch.Generator().manual_seed(11))
        out[compiled] = [(g.response_ids, g.response_logprobs, g.finish_reason) for g in gens]
    assert out[True] == out[False]


def test_switched_off_the_python_step_runs(policy, monkeypatch):
    for value in ("0", "off", "False", " no "):
        monkeypatch.setenv(SWITCH, value)
        assert native.native_decode_step() is None
        assert native.native_decode_status().startswith(f"python step ({SWITCH}=")
        state = FastQwen2(policy.model).start_decoding(_prompts(1, 2, seed=1), 4, policy.pad_token_id)
        assert state._native is None


def test_no_compiler_gives_the_python_step_and_says_why(tmp_path):
    build = native.build(cache_dir=tmp_path, compiler=str(tmp_path / "no-such-c++"))
    assert build.op is None
    assert "no C++ compiler found" in build.status and "\n" not in build.status
    assert not (tmp_path / "native").exists()  # nothing was written


@needs_compiler
def test_a_source_that_does_not_compile_gives_the_python_step_and_the_first_error(tmp_path):
    bad = tmp_path / "bad.cpp"
    bad.write_text("#include <ATen/ATen.h>\nint broken( {\n")
    build = native.build(cache_dir=tmp_path / "cache", source=bad)
    assert build.op is None
    assert build.status.startswith("the compile failed (exit ") and "\n" not in build.status
    leftovers = [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]
    assert leftovers == []  # the failed build's temporary files are gone and no library was put in place


def _in_fresh_process(code: str) -> subprocess.CompletedProcess:
    """Run `code` in a new interpreter (a process that has loaded no build yet: a loaded operator stays loaded)."""
    head = f"import sys\nsys.path.insert(0, {str(ROOT)!r})\nfrom ragen_core.policy import native\n"
    return subprocess.run([sys.executable, "-c", head + textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=900)


@needs_compiler
def test_a_broken_cached_library_is_reported_not_loaded(tmp_path):
    text = native.SOURCE.read_text()
    cxx = shutil.which(os.environ.get("CXX") or "c++")
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    library = tmp_path / "native" / native.build_key(text, cxx, version) / "decode_step.so"
    library.parent.mkdir(parents=True)
    library.write_bytes(b"not a shared library")
    done = _in_fresh_process(f"""
        b = native.build(cache_dir={str(tmp_path)!r})
        print(b.op is None)
        print(b.status)
    """)
    assert done.returncode == 0, done.stderr
    is_none, status = done.stdout.strip().splitlines()
    assert is_none == "True"
    assert status.startswith(f"cannot load {library}") and "delete it to rebuild" in status


@needs_compiler
def test_two_processes_building_at_once_both_load_the_same_library(tmp_path):
    """The study's forked runs and the test workers may build at the same moment into one cache: each writes its own
    temporary file and renames it into place, so both load a whole library."""
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        from ragen_core.policy import native
        b = native.build(cache_dir={str(tmp_path)!r})
        print(b.status)
        sys.exit(0 if b.op is not None else 1)
    """)
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]  # started together: both find no library and compile
    outs = [p.communicate(timeout=900) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    paths = {out.strip().splitlines()[-1] for out, _ in outs}
    assert len(paths) == 1 and Path(paths.pop()).is_file()
    assert [p.name for p in tmp_path.rglob(".build-*")] == []


def test_an_unusable_cache_folder_gives_the_python_step_and_says_why(tmp_path):
    """A file where the build folder should be (or a folder that cannot be written): no exception, one line."""
    blocker = tmp_path / "cache"
    blocker.mkdir()
    (blocker / "native").write_text("a file, not a folder")
    build = native.build(cache_dir=blocker)
    assert build.op is None and "\n" not in build.status
    if HAVE_COMPILER:  # (without one, the build stops before the folder: "no C++ compiler found")
        assert build.status.startswith(f"cannot create the build folder {blocker / 'native'}")


@needs_compiler
def test_a_full_or_unwritable_build_folder_is_reported(tmp_path, monkeypatch):
    """Writing the temporary build fails (a full disk, a folder without write permission): one line, no exception."""
    def refuse(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(native.tempfile, "TemporaryDirectory", refuse)
    build = native.build(cache_dir=tmp_path / "fresh")
    assert build.op is None
    assert build.status.startswith(f"cannot build in {tmp_path / 'fresh' / 'native'}") and "No space" in build.status
