"""The worker plug-in a `--dask` run registers (flows/dask_run.py): it starts the progress
reporting of tasks/worker_events.py, forgets a previous run's stop request and, on a local
cluster, leaves Ctrl-C to the main process (the terminal sends SIGINT to the whole process group).
Its own module: importing Dask costs a plain run time it need not spend.
"""
from __future__ import annotations

import logging
import signal

from distributed.diagnostics.plugin import WorkerPlugin

from retbench.tasks.progress import clear_stop, observe
from retbench.tasks.worker_events import send_counts


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
