"""What a Dask worker tells the run's main process, through Dask itself (no shared folder): the
counts of its loops and the plan lines, as events on one topic that flows/dask_progress.py sums.

A worker's own `retbench` logger stays at WARNING, so without these a `--dask` run would show no
plan line and no progress. `RetbenchWorker` is the worker plug-in the run registers: it starts
the reporting, forgets a previous run's stop request and, on a local cluster, leaves Ctrl-C to
the main process (the terminal sends SIGINT to the whole process group).
"""
from __future__ import annotations

import logging
import signal
import threading
import time

from retbench.tasks.progress import Progress, clear_stop, observe, request_stop

TOPIC = "retbench-progress"
_EVERY = 0.5  # seconds between two count events of one loop: the main process prints every 10 s
_last_sent: dict[str, float] = {}
_guard = threading.Lock()


def _worker():
    """This process's Dask worker, or None (the plain runner, the main process)."""
    try:
        from distributed import get_worker

        return get_worker()
    except (ImportError, ValueError):
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


try:
    from distributed.diagnostics.plugin import WorkerPlugin
except ImportError:  # the 'dask' extra is not installed: nothing registers the plug-in then
    WorkerPlugin = object


class RetbenchWorker(WorkerPlugin):
    """Set up each worker of a `--dask` run, those that join later too (a restarted one)."""

    name = "retbench"

    def __init__(self, ignore_sigint: bool, quiet: bool = True):
        self.ignore_sigint, self.quiet = ignore_sigint, quiet

    def setup(self, worker) -> None:
        observe(send_counts)
        clear_stop()  # a stop asked of an earlier run on this worker is not this run's
        if self.quiet:  # Dask's own INFO lines (connections, plug-ins): shown with --debug only
            logging.getLogger("distributed").setLevel(logging.WARNING)
        if self.ignore_sigint:
            # A local cluster's workers are in the terminal's process group: Ctrl-C reaches them
            # too, and a worker dying of it lost its batch and left the main process waiting.
            # The main process decides, and asks the workers to stop after their batch.
            try:
                signal.signal(signal.SIGINT, signal.SIG_IGN)
            except ValueError:  # not the worker's main thread: nothing to change from here
                pass
