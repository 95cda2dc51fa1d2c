"""A description of the machine a benchmark ran on, stored next to every result."""

from __future__ import annotations

import datetime as _dt
import os
import platform


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


def describe_machine() -> dict[str, object]:
    """cpu, cores, platform, python, numpy/torch versions (when importable), date (UTC)."""
    info: dict[str, object] = {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d"),
    }
    for module in ("numpy", "torch", "gymnasium", "transformers"):
        try:
            info[module] = __import__(module).__version__
        except ImportError:
            pass
    return info
