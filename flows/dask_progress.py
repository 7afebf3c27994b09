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
    kept: int = 0  # of the plan's total, kept by a stopped run (journals) before any part started
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
                one = self._set(message["what"], message.get("unit", "texts"), message.get("keeps", True))
                one.planned, one.kept = message["total"], message.get("kept", 0)
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
        # The plan's total when it is known: fixed at the start, as the plain runner's
        # (without it, as a loop outside the embed parts counts: the loops' own totals).
        total = one.planned if one.planned is not None else sum(loop.total for loop in one.loops.values())
        # A part retried on another worker counts its kept rows again: the sum is capped at the
        # total and never shown going down.
        shown.total = max(shown.total, total)
        loops = one.loops.values()
        if one.planned is not None:
            # What the plan found kept, plus each loop's new work: a part that has not started
            # yet still has its journal's texts counted, as the plain runner's one loop has.
            done, before = one.kept + sum(loop.done - loop.before for loop in loops), one.kept
        else:
            done, before = sum(loop.done for loop in loops), sum(loop.before for loop in loops)
        shown.done = max(shown.done, min(shown.total, done))
        shown.before = min(shown.done, before)
        if all(loop.state == "finished" for loop in one.loops.values()) and shown.done >= shown.total:
            if not one.finished:
                one.finished = True
                shown.finish()
        else:
            shown.show()

    def stopped(self) -> list[Interrupted]:
        """A stop per set one of whose loops a stop ended, with the counts of all its parts."""
        with self._lock:
            return [Interrupted(one.shown.what, one.shown.done, one.shown.total, one.shown.unit, stop_signal(),
                                one.shown.keeps)
                    for one in self.sets.values() if any(loop.state == "stopped" for loop in one.loops.values())]

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
