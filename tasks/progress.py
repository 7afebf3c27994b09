"""Progress lines for long loops (at most one every 10 s, with counts and an ETA) and the
stop request a signal handler raises, checked by the same loops between batches.

A loop that reports progress is also where a run can stop cleanly: `Progress.advance` is
called after a batch is safely written, so raising `Interrupted` there keeps every batch done.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable

_stop = threading.Event()
_stop_signal: list[int] = []


class Interrupted(Exception):
    """The run was asked to stop (SIGINT/SIGTERM or a cancelled flow run) between two batches."""

    def __init__(self, what: str, done: int, total: int, unit: str, signum: int | None):
        self.what, self.done, self.total, self.unit, self.signum = what, done, total, unit, signum
        super().__init__(f"interrupted during {what}: {done:,} of {total:,} {unit} kept; rerun to continue")


def request_stop(signum: int | None = None) -> None:
    """Ask every running loop to stop after its batch in flight (called from a signal handler)."""
    if signum is not None and not _stop_signal:
        _stop_signal.append(signum)
    _stop.set()


def stop_requested() -> bool:
    return _stop.is_set()


def stop_signal() -> int | None:
    """The signal that asked for the stop (None: not asked, or asked without a signal)."""
    return _stop_signal[0] if _stop_signal else None


def clear_stop() -> None:
    """Forget a stop request (a new run in the same process, tests)."""
    _stop.clear()
    _stop_signal.clear()


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class Progress:
    """Counts work done of `total` `unit` for `what` ("embed minilm", "rerank e5-rescore"),
    logs a line at most every `every` seconds (and one at the end if any was logged), and
    raises `Interrupted` from `advance` once a stop is requested."""

    def __init__(self, what: str, total: int, unit: str = "texts", *, every: float = 10.0,
                 emit: Callable[[str], None] | None = None, clock: Callable[[], float] = time.monotonic):
        self.what, self.total, self.unit, self.every = what, total, unit, every
        self.emit = emit or logging.getLogger("retbench.progress").info
        self.clock = clock
        self.done = 0
        self.started = self.last = clock()
        self.lines = 0

    def line(self) -> str:
        elapsed = self.clock() - self.started
        share = self.done / self.total if self.total else 1.0
        text = f"{self.what}: {self.done:,}/{self.total:,} {self.unit} ({100 * share:.0f}%), {_duration(elapsed)} elapsed"
        if 0 < self.done < self.total:
            text += f", ETA {_duration(elapsed * (self.total - self.done) / self.done)}"
        return text

    def check_stop(self) -> None:
        if _stop.is_set():
            raise Interrupted(self.what, self.done, self.total, self.unit, stop_signal())

    def advance(self, count: int = 1) -> None:
        """Record `count` more units done (after they are safely kept), maybe log, then stop if asked."""
        self.done += count
        now = self.clock()
        if now - self.last >= self.every and self.done < self.total:
            self.last = now
            self.lines += 1
            self.emit(self.line())
        self.check_stop()

    def finish(self) -> None:
        """The closing line, only when progress was shown (short loops stay silent)."""
        if self.lines:
            self.emit(self.line())
