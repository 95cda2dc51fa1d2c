"""Progress bars that suit where they are shown.

A terminal gets tqdm's bar, redrawn in place; a notebook gets tqdm's widget (``tqdm.auto``). Anything else, a log
file or a pipe (``ragen train ... 2> run.log``, a batch scheduler's output file), would receive every redraw of a
tqdm bar as carriage-return-separated text: one line of thousands of partial bars. There :func:`progress_bar`
returns a :class:`LogProgress` instead, which writes a plain line at most every `interval` seconds and one at the
end, each readable on its own (work that ends within `interval` writes none)::

    warm start (SFT): 1200/3000 step (40%), 12.3 step/s, 1:38 elapsed, about 2:26 left, loss=0.412

Both kinds take the calls the project makes: ``update(n)``, ``set_postfix(...)``, ``set_postfix_str(...)``,
``close()``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO

__all__ = ["LogProgress", "progress_bar", "LOG_INTERVAL_S"]

#: Seconds between two lines of a :class:`LogProgress` (the first and the last line are always written).
LOG_INTERVAL_S = 30.0


def _clock(seconds: float) -> str:
    """``h:mm:ss`` (or ``m:ss`` under an hour) of a non-negative number of seconds."""
    s = int(round(seconds))
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class LogProgress:
    """A progress report for a log file: a line once `interval` seconds have passed since the start or the last
    line (checked at each update), and a last one at :meth:`close` when any was written; work that ends within
    `interval` writes nothing (the lines around it say what it did).

    A line reads ``desc: n/total unit (pct%), rate unit/s, elapsed, about ETA left[, postfix]``; the rate and the
    time left are measured from this object's start over the units done since then (a resumed count's `initial`
    units took no time here).
    """

    def __init__(self, total: int | None, *, desc: str, unit: str, initial: int = 0, file: TextIO | None = None,
                 interval: float = LOG_INTERVAL_S, clock=time.monotonic):
        self.total = total
        self.n = int(initial)
        self.desc = desc
        self.unit = unit
        self.file = file
        self.interval = float(interval)
        self._clock = clock
        self._start = clock()
        self._initial = self.n
        self._last_line = self._start
        self._postfix = ""
        self._closed = False
        self._written = False

    # --------------------------------------------------------------------- tqdm's calls
    def update(self, n: int = 1) -> None:
        self.n += int(n)
        if self._clock() - self._last_line >= self.interval:
            self._write_line()

    def set_postfix(self, ordered_dict: Mapping[str, Any] | None = None, refresh: bool = True,
                    **kwargs: Any) -> None:
        items = {**(dict(ordered_dict) if ordered_dict else {}), **kwargs}
        self._postfix = ", ".join(f"{k}={v}" for k, v in items.items())

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        self._postfix = str(s)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self._written:
                self._write_line()

    # --------------------------------------------------------------------- the line
    def line(self) -> str:
        """The current report as one line (no newline)."""
        elapsed = self._clock() - self._start
        done_here = self.n - self._initial
        parts = [f"{self.desc}: {self.n}"]
        if self.total:
            parts[0] += f"/{self.total} {self.unit} ({100.0 * self.n / self.total:.0f}%)"
        else:
            parts[0] += f" {self.unit}"
        if done_here > 0 and elapsed > 0:
            rate = done_here / elapsed
            parts.append(f"{rate:.3g} {self.unit}/s" if rate >= 1 else f"{1 / rate:.3g} s/{self.unit}")
        parts.append(f"{_clock(elapsed)} elapsed")
        if self.total and done_here > 0 and self.n < self.total and elapsed > 0:
            parts.append(f"about {_clock((self.total - self.n) * elapsed / done_here)} left")
        if self._postfix:
            parts.append(self._postfix)
        return ", ".join(parts)

    def _write_line(self) -> None:
        out = self.file if self.file is not None else sys.stderr
        try:
            out.write(self.line() + "\n")
            out.flush()
        except (OSError, ValueError):  # a closed or broken stream: progress is not worth failing the run for
            pass
        self._written = True
        self._last_line = self._clock()


def _in_notebook() -> bool:
    """Whether tqdm chose its notebook widget (an IPython kernel with ipywidgets: ``tqdm.autonotebook`` then
    differs from the plain bar)."""
    try:
        from tqdm.autonotebook import tqdm as chosen
        from tqdm.std import tqdm as plain
    except ImportError:  # pragma: no cover - tqdm is a dependency of the train extra
        return False
    return chosen is not plain


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def progress_bar(total: int | None, *, desc: str, unit: str, initial: int = 0, leave: bool = False,
                 file: TextIO | None = None, interval: float | None = None) -> Any:
    """A tqdm bar on a terminal or in a notebook, a :class:`LogProgress` anywhere else (module docstring).

    `file`: where the report goes (default: standard error, read when the bar is made); `leave`: whether a
    terminal's bar stays on screen after it closes (a log's lines always stay); `interval`: seconds between a
    log's lines (default :data:`LOG_INTERVAL_S`).
    """
    stream = file if file is not None else sys.stderr
    if _in_notebook():
        from tqdm.auto import tqdm

        return tqdm(total=total, initial=initial, desc=desc, unit=unit, leave=leave, file=file)
    if _is_terminal(stream):
        from tqdm.std import tqdm

        return tqdm(total=total, initial=initial, desc=desc, unit=unit, dynamic_ncols=True, leave=leave,
                    file=file)
    return LogProgress(total, desc=desc, unit=unit, initial=initial, file=file,
                       interval=LOG_INTERVAL_S if interval is None else interval)
