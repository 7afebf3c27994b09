"""Progress lines for long loops (at most one every 10 s, with counts and an ETA) and the
stop request a signal handler raises, checked by the same loops between batches.

A loop that reports progress is also where a run can stop cleanly: `Progress.advance` is
called after a batch is safely written, so raising `Interrupted` there keeps every batch done.
"""
from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from typing import Callable

_stop = threading.Event()
_stop_signal: list[int] = []
_raised: list["Interrupted"] = []  # every stop raised in this process, in order (first_interruption)
# Told of every count a loop makes (`observer(progress, state)`, state "advance", "stopped" or
# "finished"): a Dask worker passes its loops' counts to the run's main process this way
# (tasks/worker_events.py), which prints one summed progress line per set.
_observers: list[Callable[["Progress", str], None]] = []
_in_flight: list["Progress"] = []  # loops that counted and have not finished, oldest first


class Interrupted(Exception):
    """The run was asked to stop (SIGINT/SIGTERM or a cancelled flow run) between two batches.
    `done` is None when it stopped before a stage began (`Interrupted.before`)."""

    def __init__(self, what: str, done: int | None, total: int | None, unit: str, signum: int | None,
                 keeps: bool = True):
        self.what, self.done, self.total, self.unit, self.signum = what, done, total, unit, signum
        self.keeps = keeps
        if done is None:
            message = f"interrupted before {what}: the stages finished so far are kept; rerun to continue"
        elif keeps:
            message = f"interrupted during {what}: {done:,} of {total:,} {unit} kept; rerun to continue"
        else:  # a measurement or a training: its result is written only at its end
            message = f"interrupted during {what} after {done:,} of {total:,} {unit} (done again by the next run); rerun to continue"
        super().__init__(message)
        _raised.append(self)

    @classmethod
    def before(cls, what: str) -> "Interrupted":
        return cls(what, None, None, "", stop_signal())

    def __reduce__(self):  # picklable (a Dask worker's exception travels to the flow)
        return type(self), (self.what, self.done, self.total, self.unit, self.signum, self.keeps)


def first_interruption() -> "Interrupted | None":
    """What this process reports when a stop ended its run: the loop that was stopped in flight
    (with counts; on Dask, several parts stop at once: the last one to report), else the first
    stage that refused to start."""
    counted = [stop for stop in _raised if stop.done is not None]
    return counted[-1] if counted else _raised[0] if _raised else None


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
    _raised.clear()
    _in_flight.clear()


def observe(observer: Callable[["Progress", str], None]) -> None:
    """Call `observer(progress, state)` on every count of every loop in this process (once per observer)."""
    if observer not in _observers:
        _observers.append(observer)


def in_flight() -> "Progress | None":
    """The loop that counted last and has not finished (what a second Ctrl-C reports as kept)."""
    return _in_flight[-1] if _in_flight else None


def _default_every() -> float:
    # RETBENCH_PROGRESS_EVERY: seconds between progress lines; tests set 0 (a line per batch).
    return float(os.environ.get("RETBENCH_PROGRESS_EVERY", "10"))


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
    raises `Interrupted` from `advance` once a stop is requested. `keeps`: each unit done is
    kept (a cached batch); False for a measurement or training written only at its end."""

    def __init__(self, what: str, total: int, unit: str = "texts", *, every: float | None = None,
                 emit: Callable[[str], None] | None = None, clock: Callable[[], float] = time.monotonic,
                 keeps: bool = True):
        self.what, self.total, self.unit, self.keeps = what, total, unit, keeps
        self.every = _default_every() if every is None else every
        self.emit = emit or logging.getLogger("retbench.progress").info
        self.clock = clock
        self.done = self.before = 0  # before: units a stopped run already kept (no part of the rate)
        self.started = self.last = clock()
        self.lines = 0
        self.id = uuid.uuid4().hex  # tells this loop's counts from another's when a process sums them

    def _tell(self, state: str) -> None:
        if state == "advance":
            if self not in _in_flight:
                _in_flight.append(self)
        elif self in _in_flight:
            _in_flight.remove(self)
        for observer in list(_observers):
            try:
                observer(self, state)
            except Exception:  # noqa: BLE001  (progress shown elsewhere never stops the work)
                pass

    def already(self, count: int) -> None:
        """`count` units were done before this loop began (by a run that was stopped)."""
        self.done += count
        self.before += count

    def line(self) -> str:
        elapsed = self.clock() - self.started
        # A resumed loop counts what is left to do; what was kept before it (by a stopped run, or a
        # concurrent one) is said apart, so the count starts at 0 and ends at its total
        # ("404/404 texts (100%; 2,192 more already kept)").
        done, total = self.done - self.before, self.total - self.before
        share = done / total if total else 1.0
        text = f"{self.what}: {done:,}/{total:,} {self.unit} ({100 * share:.0f}%"
        text += f"; {self.before:,} more already kept), " if self.before else "), "
        text += f"{_duration(elapsed)} elapsed"
        if self.done < self.total and self.done > self.before:
            text += f", ETA {_duration(elapsed * (self.total - self.done) / (self.done - self.before))}"
        return text

    def check_stop(self) -> None:
        if _stop.is_set():
            self._tell("stopped")
            raise Interrupted(self.what, self.done, self.total, self.unit, stop_signal(), self.keeps)

    def advance(self, count: int = 1) -> None:
        """Record `count` more units done (after they are safely kept), maybe log, then stop if asked."""
        self.done += count
        self._tell("advance")
        self.show()
        self.check_stop()

    def show(self) -> None:
        """A line if `every` seconds passed since the last one and the work is not done."""
        now = self.clock()
        if now - self.last >= self.every and self.done < self.total:
            self.last = now
            self.lines += 1
            self.emit(self.line())

    def finish(self) -> None:
        """The closing line, only when progress was shown (short loops stay silent)."""
        self._tell("finished")
        if self.lines:
            self.emit(self.line())
