"""A `--dask` flow run's side of the cluster: one line naming it, the workers set up (progress
reporting, Ctrl-C left to this process), their progress summed here, a stop passed on to them,
and waits on their futures that give up when a stopped run's worker is gone.
"""
from __future__ import annotations

import logging
import os
import time
from typing import Callable

from retbench.flows import interrupts
from retbench.flows.dask_progress import DaskProgress
from retbench.flows.errors import ClusterLost
from retbench.tasks.progress import Interrupted, first_interruption, stop_requested
from retbench.tasks.worker_events import TOPIC, stop_worker
from retbench.tasks.worker_plugin import RetbenchWorker

log = logging.getLogger("retbench")
# Dask's loggers and prefect-dask's: their start-up and shutdown lines (scheduler, nanny,
# dashboard, jupyter-server-proxy hints) say nothing a run's reader needs; --debug shows them.
CHATTY = ("distributed", "prefect.task_runner.dask")


def _stop_wait() -> float:
    # RETBENCH_DASK_STOP_WAIT: seconds a stopped run waits for its workers' batches in flight
    # (a model still loading finishes first); past it the run ends with what is kept.
    return float(os.environ.get("RETBENCH_DASK_STOP_WAIT", "120"))


def quiet_dask(debug: bool) -> None:
    """Dask's own INFO lines out of the run's log unless --debug (before the cluster starts)."""
    if debug:
        return
    for name in CHATTY:
        logging.getLogger(name).setLevel(logging.WARNING)
    import dask

    # Passed on to the workers a local cluster starts (their logging is configured from it).
    dask.config.set({"logging": {"distributed": "warning"}})


class DaskSession:
    """Attached to the flow's DaskTaskRunner for one run (`attach`)."""

    def __init__(self, runner, emit: Callable[[str], None], debug: bool = False):
        self.runner, self.client = runner, runner.client  # starts a local cluster here, if one is to be
        self.address = self.client.scheduler.address
        self.local = getattr(runner, "address", None) is None
        self.progress = DaskProgress(emit)
        self.quiet = not debug
        self.workers_at_stop: set[str] | None = None
        self.stopped_at: float | None = None
        self.client.register_plugin(RetbenchWorker(ignore_sigint=self.local, quiet=not debug), name="retbench")
        self.client.subscribe_topic(TOPIC, self.progress.handle)

    def lost(self, error: BaseException) -> ClusterLost | None:
        """What a failure becomes when the scheduler went away during the run (its futures are
        cancelled with "scheduler-connection-lost", or the client is no longer connected); None
        for any other failure."""
        gone = "scheduler-connection-lost" in str(error) or self.client.status not in ("running", "newly-created")
        if not gone:
            return None
        if self.quiet:  # the client's reconnection attempt, cancelled as it closes, logs a traceback
            for name in ("distributed", "distributed.client"):  # the latter has a level of its own (Dask's config)
                logging.getLogger(name).setLevel(logging.CRITICAL)
        return ClusterLost(f"the Dask scheduler at {self.address} was lost during the run (stopped, or its host "
                           f"went down); what the workers finished is kept in the store: start the cluster again and "
                           f"rerun to continue from it")

    def describe(self) -> str:
        workers = self._workers()
        where = "local cluster" if self.local else "cluster"
        return (f"dask: {where} at {self.address} ({len(workers)} workers), "
                f"dashboard {self.client.dashboard_link}")

    def tell_workers_to_stop(self, signum: int) -> None:
        self.client.run(stop_worker, signum, self.quiet)
        if self.quiet:  # the cluster's close after a stop warns of busy workers it had to kill
            logging.getLogger("distributed").setLevel(logging.ERROR)

    def stop(self) -> Interrupted | None:
        """The stop to report: the workers' loops stop together (a set's parts, and maybe a
        small set beside it, its last batch just kept), so the set with the most texts still to
        embed, its counts summed over all its parts."""
        counted = self.progress.stopped()
        if counted:
            return max(counted, key=lambda stop: stop.total - stop.done)
        return first_interruption() or self.progress.in_flight()

    def settle(self, seconds: float = 5.0) -> None:
        """After a stop: wait (a few seconds at most) for every running loop's last counts."""
        deadline = time.monotonic() + seconds
        while not self.progress.settled() and time.monotonic() < deadline and not self._gone():
            time.sleep(0.1)

    def wait(self, future) -> None:
        """Until `future` (a Prefect future of a Dask task) is done, in steps. After a stop it
        gives up as soon as every loop that was counting has kept its batch in flight and
        stopped: the stage calls still queued would only start to refuse, one task run each
        (seconds on a busy machine), and closing the cluster ends them. It also gives up when a
        worker is gone (its futures may never finish) or after `_stop_wait()` seconds."""
        dask_future = getattr(future, "wrapped_future", None)
        if dask_future is None:
            return
        while not dask_future.done():
            time.sleep(0.2)
            if not stop_requested():
                continue
            if self.stopped_at is None:
                self.stopped_at = time.monotonic()
                self.workers_at_stop = self._workers()
            waited = time.monotonic() - self.stopped_at
            # A second's grace: the workers' last counts are on their way when the stop comes.
            if (waited >= 1.0 and self.progress.settled()) or self._gone() or waited > _stop_wait():
                raise self.stop() or Interrupted.before("the rest of the run")

    def _workers(self) -> set[str]:
        try:
            return set(self.client.nthreads())
        except Exception:  # noqa: BLE001  (a scheduler gone has no workers)
            return set()

    def _gone(self) -> bool:
        """A worker that was running when the stop came has left (its futures will not finish)."""
        return bool(self.workers_at_stop - self._workers()) if self.workers_at_stop else not self._workers()


_current: list[DaskSession] = []


def attach(runner, emit: Callable[[str], None], debug: bool = False) -> DaskSession:
    session = DaskSession(runner, emit, debug)
    _current[:] = [session]
    log.info(session.describe())
    interrupts.pass_stop_on(session.tell_workers_to_stop)
    interrupts.describe_stop_with(session.stop)
    return session


def detach(session: DaskSession) -> None:
    """The run is over: its stop and progress are no longer this session's business."""
    interrupts.forget(session.tell_workers_to_stop, session.stop)
    try:
        session.client.unsubscribe_topic(TOPIC)
    except Exception:  # noqa: BLE001  (a client closed already has nothing to unsubscribe)
        pass
    if session in _current:
        _current.remove(session)


def current() -> DaskSession | None:
    return _current[0] if _current else None
