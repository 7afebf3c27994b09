"""The `--dask` run's progress in its main process: the workers' counts (tasks/worker_events.py),
summed per set over all its parts and workers, printed by the plain runner's `Progress` (a line
at most every 10 s, with rate and ETA), and the kept counts a stop reports.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Callable

from retbench.tasks.progress import Interrupted, Progress, stop_signal


@dataclass
class _Loop:
    done: int
    before: int
    total: int
    state: str


@dataclass
class _Set:
    shown: Progress
    planned: int | None = None  # the plan's total: fixed at the start, whatever the parts report
    loops: dict[str, _Loop] = field(default_factory=dict)
    finished: bool = False


class DaskProgress:
    """Feed it the events of the progress topic (`handle`); it prints through `emit`."""

    def __init__(self, emit: Callable[[str], None], every: float | None = None):
        self.emit, self.every = emit, every
        self.sets: dict[str, _Set] = {}
        self._lock = threading.Lock()

    def handle(self, event) -> None:
        """A `Client.subscribe_topic` handler: `event` is (scheduler time, message)."""
        message = event[1] if isinstance(event, tuple) else event
        with self._lock:
            if message.get("kind") == "plan":
                self.emit(message["line"])
                self._set(message["what"], message.get("unit", "texts"), message.get("keeps", True)).planned = message["total"]
            elif message.get("kind") == "counts":
                self._count(message)

    def _set(self, what: str, unit: str, keeps: bool) -> _Set:
        if what not in self.sets:
            self.sets[what] = _Set(Progress(what, 0, unit, every=self.every, emit=self.emit, keeps=keeps))
        return self.sets[what]

    def _count(self, message: dict) -> None:
        one = self._set(message["what"], message["unit"], message["keeps"])
        one.loops[message["id"]] = _Loop(message["done"], message["before"], message["total"], message["state"])
        shown = one.shown
        total = max(one.planned or 0, sum(loop.total for loop in one.loops.values()))
        # A part retried on another worker counts its kept rows again: the sum is capped at the
        # total and never shown going down.
        shown.total = max(shown.total, total)
        shown.done = max(shown.done, min(shown.total, sum(loop.done for loop in one.loops.values())))
        shown.before = min(shown.done, sum(loop.before for loop in one.loops.values()))
        if all(loop.state == "finished" for loop in one.loops.values()) and shown.done >= shown.total:
            if not one.finished:
                one.finished = True
                shown.finish()
        else:
            shown.show()

    def kept(self, stop: Interrupted) -> Interrupted:
        """`stop` (one part's, as a worker raised it) with the counts of all parts of its set."""
        with self._lock:
            one = self.sets.get(stop.what)
            if one is None or stop.done is None:
                return stop
            shown = one.shown
            return Interrupted(stop.what, shown.done, shown.total, shown.unit, stop.signum or stop_signal(), stop.keeps)

    def in_flight(self) -> Interrupted | None:
        """What a second Ctrl-C reports: the set that counted last and is not finished."""
        with self._lock:
            running = [one for one in self.sets.values() if one.loops and not one.finished]
            if not running:
                return None
            shown = running[-1].shown
            return Interrupted(shown.what, shown.done, shown.total, shown.unit, stop_signal(), shown.keeps)

    def settled(self) -> bool:
        """Every loop that reported has stopped or finished (after a stop: the counts are final)."""
        with self._lock:
            return all(loop.state != "advance" for one in self.sets.values() for loop in one.loops.values())
