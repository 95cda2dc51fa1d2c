"""A description of the machine a benchmark ran on, stored next to every result."""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch is imported by setup_torch only: describing the machine must not need it
    import torch


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo (Linux), else platform.processor()."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _cpu_arithmetic() -> str | None:
    """The instruction set torch's kernels dispatch to and the core's family and model
    (:func:`ragen_core.training.provenance.cpu_arithmetic`): results of two machines with the same model name can
    differ in their last bits, and timings by the vector width. None without torch."""
    try:
        from ragen_core.training.provenance import cpu_arithmetic

        return cpu_arithmetic()
    except ImportError:
        return None


def _commit() -> str | None:
    """The git commit of this checkout (with "+changes" when tracked files differ), None outside one."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(root), "diff", "--quiet", "HEAD", "--"], capture_output=True,
                               timeout=30).returncode != 0
    except (OSError, subprocess.SubprocessError):
        return None
    return (head.stdout.strip() + ("+changes" if dirty else "")) if head.returncode == 0 else None


def load_average() -> float | None:
    """The machine's 1-minute load average (Linux), None elsewhere: how busy the cores were with other work."""
    try:
        with open("/proc/loadavg", encoding="utf-8") as fh:
            return float(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def describe_machine() -> dict[str, object]:
    """cpu, cores, platform, python, numpy/torch versions (when importable), date (UTC)."""
    info: dict[str, object] = {
        "cpu": cpu_model(),
        "cpu_arithmetic": _cpu_arithmetic(),
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d"),
    }
    info["commit"] = _commit()
    for module in ("numpy", "torch", "gymnasium", "transformers"):
        try:
            info[module] = __import__(module).__version__
        except ImportError:
            pass
    return info


def setup_torch(parser: argparse.ArgumentParser, args: argparse.Namespace) -> torch.device:
    """Apply a benchmark's `--threads` and check its `--device` (a parser error for a bad value); returns the device."""
    import torch

    if args.threads < 1:
        parser.error(f"--threads must be >= 1; got {args.threads}")
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda but CUDA is not available")
    return device


def torch_result_header(benchmark: str, quick: bool, device: torch.device) -> dict[str, Any]:
    """The first fields of a torch benchmark's result: its name, the UTC time, the quick flag, the machine (with
    torch's thread count and the CUDA device's name), the device and the thread count."""
    import torch

    machine: dict[str, Any] = describe_machine()
    machine["torch_threads"] = torch.get_num_threads()
    machine["cuda"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {
        "benchmark": benchmark,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "quick": quick,
        "machine": machine,
        "device": str(device) if device.type == "cpu" else f"{device} ({machine['cuda']})",
        "torch_threads": torch.get_num_threads(),
    }


def _int_at_least(low: int, what: str):
    """An argparse `type` for an integer >= `low`: argparse turns its ArgumentTypeError into one usage line that
    names the option (exit 2), where a 0 or negative count used to crash deep inside (the median of no timings, a
    division by zero) or be read as "the default" (`args.repeats or 2`) after minutes of set-up."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer {what}; got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected an integer {what}; got {value}")
        return value

    return parse


#: Counts that must be at least one (repetitions, seeds, workers, steps, episodes, sizes, threads).
positive_int = _int_at_least(1, ">= 1")
#: Counts that may be zero (warm-up rounds, a first seed).
non_negative_int = _int_at_least(0, ">= 0")


def check_output_path(parser: argparse.ArgumentParser, path, option: str = "--out") -> None:
    """Refuse an output path that cannot be written (a parser error, exit 2) before the benchmark runs, not after:
    `path` an existing folder, or a path below an existing file. A benchmark runs for minutes to hours and wrote its
    result last, so such a path used to lose the whole run to a traceback inside `write_result`."""
    from pathlib import Path

    if path is None:
        return
    path = Path(path)
    if path.is_dir():
        parser.error(f"{option} {path}: is a folder; give the path of the JSON file to write")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                parser.error(f"{option} {path}: {parent} is a file, not a folder")
            break
