"""What a Dask worker tells the run's main process, through Dask itself (no shared folder): the
counts of its loops and the plan lines, as events on one topic that flows/dask_progress.py sums.

A worker's own `retbench` logger stays at WARNING, so without these a `--dask` run would show no
plan line and no progress. The worker plug-in that starts the reporting is tasks/worker_plugin.py.
"""
from __future__ import annotations

import logging
import sys
import threading
import time

from retbench.tasks.progress import Progress, request_stop

TOPIC = "retbench-progress"
_EVERY = 0.5  # seconds between two count events of one loop: the main process prints every 10 s
_last_sent: dict[str, float] = {}
_guard = threading.Lock()


def _worker():
    """This process's Dask worker, or None (the plain runner, the main process)."""
    if "distributed" not in sys.modules:  # a worker has it loaded; a plain run need not pay for it
        return None
    from distributed import get_worker

    try:
        return get_worker()
    except ValueError:
        return None


def send_counts(progress: Progress, state: str) -> None:
    """A `tasks.progress` observer: one loop's counts, at most every `_EVERY` s while it runs and
    always when it stops or finishes (so the main process's sum ends at the true count)."""
    worker = _worker()
    if worker is None:
        return
    now = time.monotonic()
    with _guard:
        if state == "advance" and now - _last_sent.get(progress.id, float("-inf")) < _EVERY:
            return
        _last_sent[progress.id] = now
        if state != "advance":
            _last_sent.pop(progress.id, None)
    worker.log_event(TOPIC, {"kind": "counts", "id": progress.id, "what": progress.what, "done": progress.done,
                             "before": progress.before, "total": progress.total, "unit": progress.unit,
                             "keeps": progress.keeps, "state": state})


def send_plan(what: str, total: int, line: str, kept: int = 0) -> bool:
    """The plan of a set embedded in parts: `total` units for `what` over all its parts, `kept`
    of them already (a stopped run's journals), and the plan line to print. False when not on a
    Dask worker (the caller logs the line itself)."""
    worker = _worker()
    if worker is None:
        return False
    worker.log_event(TOPIC, {"kind": "plan", "what": what, "total": total, "kept": kept, "line": line})
    return True


def stop_worker(signum: int | None, quiet: bool = True) -> None:
    """The run was asked to stop (`Client.run` calls this on each worker): its loops stop after
    their batch in flight, its queued stage calls refuse to start. `quiet`: the warnings of a
    worker closed while busy stay out of the log (--debug shows them)."""
    request_stop(signum)
    if quiet:
        logging.getLogger("distributed").setLevel(logging.ERROR)
