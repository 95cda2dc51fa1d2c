"""The lean forward's decoding step compiled from C++: the same operator calls without the interpreter around them.

A decoding step of the tiny model (:meth:`ragen_core.policy.fast_qwen2.DecodeState.step`) is about 90 small
operator calls on 1-128 rows of width 128, so a fifth of its time is Python: the interpreter and the bindings
around each call. `csrc/decode_step.cpp` makes the same ATen calls, in the same order, on the same tensors, from
C++; it writes no arithmetic of its own, so its logits are the Python step's bit for bit (tests compare every
step's, in float32 and bfloat16) and no result of a run changes, only its time (docs/performance.md, "The decoding
step").

The library is built on first use with the system's C++ compiler (``$CXX``, else ``c++``) against the installed
torch's headers (about 15 s, once per machine: the build is cached under ``<cache root>/native/<key>/``, where the
key hashes the source, the torch build and the compiler) and loaded with ``torch.ops.load_library``. The build is
written to a temporary file and renamed into place, so processes that build at once do not see each other's
half-written files. Where it cannot be built (no compiler, a failed compile) or is switched off
(``RAGEN2_NATIVE_DECODE=0``), :func:`native_decode_step` returns None and decoding runs the Python step, which
computes the same numbers; :func:`native_decode_status` says which, and why.

Only CPU decoding takes it: the same calls would run on a GPU, but this path has never been run on one.

The same library holds the fused float32 decoding step (:func:`decode_kernel`) and the element-wise pieces of the
fused training step (:func:`training_ops`, used by :mod:`ragen_core.policy.fused_train` when `model.fused_training`
is on); both compute with loops of their own, so their numbers differ from ATen's by float rounding.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

#: The environment variable that switches the compiled step off ("0", "false", "no" or "off").
SWITCH = "RAGEN2_NATIVE_DECODE"
#: The environment variable that picks the compiled step float32 decoding takes (:func:`decode_kernel`).
KERNEL = "RAGEN2_DECODE_KERNEL"
#: Its values: the fused step (default) and the operator-for-operator one.
KERNELS = ("fused", "ops")
#: The C++ source, shipped with the package.
SOURCE = Path(__file__).resolve().parent / "csrc" / "decode_step.cpp"
#: How long one compile may take before the Python step is used instead (a loaded machine: 15 s is usual).
COMPILE_TIMEOUT_S = 600
_OFF = {"0", "false", "no", "off"}


@dataclass(frozen=True)
class NativeBuild:
    """The outcome of building and loading the compiled steps: `op` (the operator-for-operator step; None where the
    library is not available), `status` (one line: where the library lives, or why there is none) and `fused`."""

    op: Callable | None
    status: str
    #: The fused float32 step of the same library (None where `op` is).
    fused: Callable | None = None
    #: The library's operator namespace (``torch.ops.<namespace>``), whose ``train_*`` operators are the fused
    #: training step's element-wise pieces (:mod:`ragen_core.policy.fused_train`); None where `op` is.
    ops: Any = None


_lock = threading.Lock()
#: One build per cache root and process (a test may point ``$RAGEN2_CACHE`` elsewhere; the study's runs, forked
#: from a process that built it, inherit the loaded library).
_builds: dict[Path, NativeBuild] = {}


def switched_off() -> bool:
    """True where ``RAGEN2_NATIVE_DECODE`` is 0 / false / no / off (read at each call, so a test can flip it)."""
    return os.environ.get(SWITCH, "").strip().lower() in _OFF


def decode_kernel() -> str:
    """Which compiled step float32 decoding takes: ``"fused"`` (the default) or ``"ops"`` (``RAGEN2_DECODE_KERNEL=ops``:
    the Python step's operator calls made from C++, its logits bit for bit). Read at each call. Any other value of
    the variable is refused with the two it takes."""
    value = os.environ.get(KERNEL, "").strip().lower() or "fused"
    if value not in KERNELS:
        raise ValueError(f"{KERNEL}={os.environ.get(KERNEL)!r}: expected one of {', '.join(KERNELS)}")
    return value


def native_decode_step(kernel: str = "ops") -> Callable | None:
    """The compiled decoding step, built and loaded on first use and kept for the process: `kernel` ``"ops"``
    (``torch.ops.<namespace>.decode_step``: the Python step's operator calls, its logits bit for bit) or ``"fused"``
    (``decode_step_fused``: float32 only, the same function with its own loops for the norms, RoPE and attention,
    logits equal up to float rounding). None where it is switched off or cannot be built (:func:`native_decode_status`
    says why)."""
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {', '.join(KERNELS)}; got {kernel!r}")
    if switched_off():
        return None
    build = _loaded()
    return build.op if kernel == "ops" else build.fused


def training_ops() -> tuple[Any, str]:
    """``(ops, status)``: the compiled training pieces (``torch.ops.<namespace>``: ``train_rms_forward`` and the
    others of :mod:`ragen_core.policy.fused_train`; None where the library cannot be built) and one line saying
    where the library lives or why there is none. ``RAGEN2_NATIVE_DECODE`` does not switch them off: it names the
    decoding step, and `model.fused_training` is chosen by the config."""
    build = _loaded()
    return build.ops, build.status


def decode_path() -> str:
    """The step float32 CPU decoding runs in this process: ``"fused"``, ``"ops"`` (both compiled) or ``"python"``
    (switched off, or no library). Other dtypes take ``"ops"`` where ``"fused"`` is named. Recorded in each run's
    provenance and in the warm-start cache key: the fused step's logits differ from the other two's by float rounding
    (which can move a sampled token), the other two are the same bits."""
    if switched_off() or _loaded().op is None:
        return "python"
    return decode_kernel()


def native_decode_status() -> str:
    """One line: which decoding step runs, and why (the library's path, the switch, or the build's error)."""
    if switched_off():
        return f"python step ({SWITCH}={os.environ.get(SWITCH)!r} switches the compiled step off)"
    build = _loaded()
    if build.op is None:
        return "python step: " + build.status
    kind = "fused" if decode_kernel() == "fused" else "operator calls"
    return f"compiled step ({kind}; float32, else operator calls): {build.status}"


def _loaded() -> NativeBuild:
    from ragen_core.policy.tiny import cache_root

    root = cache_root()
    with _lock:
        if root not in _builds:
            _builds[root] = build(cache_dir=root)
        return _builds[root]


def _compiler(compiler: str | None) -> str | None:
    name = compiler or os.environ.get("CXX") or "c++"
    return shutil.which(name)


def _flags() -> list[str]:
    from torch.utils import cpp_extension

    abi = int(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True))
    includes = [f"-I{p}" for p in cpp_extension.include_paths()]
    libs = [f"-L{p}" for p in cpp_extension.library_paths()]
    rpath = [f"-Wl,-rpath,{p}" for p in cpp_extension.library_paths()]
    # -O2 and nothing that changes floating point: the source only calls ATen, but no flag should ever let a
    # compiler contract or reorder arithmetic that the Python step does not.
    return ["-O2", "-std=c++20", "-fPIC", "-shared", "-w", f"-D_GLIBCXX_USE_CXX11_ABI={abi}", *includes, *libs,
            *rpath]


def build_key(source: str, compiler_path: str, compiler_version: str) -> str:
    """The cache key of a build: the source, the torch build it is compiled against, the compiler and the flags
    (16 hex digits; also the operator's namespace, so builds of different keys can be loaded in one process)."""
    h = hashlib.sha256()
    for part in (source, torch.__version__, str(getattr(torch.version, "git_version", "")), sys.platform,
                 compiler_path, compiler_version, " ".join(_flags())):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def build(cache_dir: str | os.PathLike | None = None, compiler: str | None = None,
          source: Path = SOURCE) -> NativeBuild:
    """Compile (where not cached) and load the decoding step of `source`; never raises: a failure gives
    ``NativeBuild(None, why)``. `cache_dir`: the project's cache root (``$RAGEN2_CACHE``, else ``~/.cache/ragen2``);
    `compiler`: a C++ compiler's name or path (``$CXX``, else ``c++``)."""
    cxx = _compiler(compiler)
    if cxx is None:
        return NativeBuild(None, f"no C++ compiler found ({compiler or os.environ.get('CXX') or 'c++'!r} is not on "
                                 "PATH; set CXX to one)")
    try:
        text = source.read_text()
        version = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return NativeBuild(None, f"cannot read the source or run the compiler {cxx}: {exc}")
    from ragen_core.policy.tiny import cache_root

    key = build_key(text, cxx, version.splitlines()[0] if version else "")
    namespace = f"ragen2_decode_{key}"
    folder = cache_root(cache_dir) / "native" / key
    library = folder / "decode_step.so"
    if not library.is_file():
        problem = _compile(cxx, text.replace("RAGEN2_NAMESPACE", namespace), folder, library)
        if problem is not None:
            return NativeBuild(None, problem)
    try:
        if not hasattr(torch.ops, namespace) or not hasattr(getattr(torch.ops, namespace), "decode_step"):
            torch.ops.load_library(str(library))
        ops = getattr(torch.ops, namespace)
        op, fused = ops.decode_step, ops.decode_step_fused
    except (OSError, RuntimeError, AttributeError) as exc:
        return NativeBuild(None, f"cannot load {library}: {str(exc).splitlines()[0] if str(exc) else exc!r}; "
                                 "delete it to rebuild")
    return NativeBuild(op, str(library), fused, ops)


def _compile(cxx: str, text: str, folder: Path, library: Path) -> str | None:
    """Compile `text` into `library` (written to a temporary file in `folder`, then renamed); None on success, else
    one line saying what failed."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"cannot create the build folder {folder}: {exc}"
    try:
        with tempfile.TemporaryDirectory(dir=folder, prefix=".build-") as tmp:
            src = Path(tmp) / "decode_step.cpp"
            out = Path(tmp) / "decode_step.so"
            src.write_text(text)
            cmd = [cxx, str(src), "-o", str(out), *_flags(), "-lc10", "-ltorch_cpu"]
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                return f"the compile ran past {COMPILE_TIMEOUT_S} s ({cxx})"
            if done.returncode != 0 or not out.is_file():
                errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]
                first = (errors or done.stderr.strip().splitlines() or ["no output"])[0]
                return f"the compile failed (exit {done.returncode}, {cxx}): {first[:300]}"
            os.replace(out, library)
    except OSError as exc:  # an unwritable or full cache folder, or a compiler that cannot be started
        return f"cannot build in {folder}: {exc}"
    return None
