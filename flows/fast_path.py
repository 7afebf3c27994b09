"""A `retbench run` whose every stage output is already in the store runs without Prefect.

Such a run reads its caches, scores and writes the report: seconds of work, to which the
orchestrator added its own (importing Prefect ~3 s, the embedded API server's start, a task run
per stage call), three times what the run itself cost on NPL. So the command first runs the
pipeline in this process with the plain runner under `cached_only()`: the first stage call that
would embed, rerank, build an index, train or measure raises WorkNeeded, and the run then starts
over as a Prefect flow run, which redoes only the reads (milliseconds) and the work. The log lines
of the attempt are held back and dropped when it turns back, so nothing is printed twice.

What a run without the orchestrator does not make: a flow run and its task runs in Prefect's
database, and the Prefect artifacts (summary table, verdict). The output folder, the report, the
manifest and the store's history of runs are the same. `--prefect` always runs the flow.
"""
from __future__ import annotations

import logging
import logging.handlers
import sys
import uuid

log = logging.getLogger("retbench")
_FORMAT = "%(asctime)s.%(msecs)03d | %(levelname)-7s | %(name)s - %(message)s"


class _HeldBack(logging.handlers.MemoryHandler):
    """Keeps every record until `print_to` (printed) or `drop` (forgotten)."""

    def __init__(self):
        super().__init__(capacity=sys.maxsize, flushLevel=logging.CRITICAL + 1)

    def shouldFlush(self, record):
        return False

    def print_to(self, target: logging.Handler) -> None:
        self.setTarget(target)
        self.flush()

    def drop(self) -> list[logging.LogRecord]:
        """Forget the records, but return those telling of a change made to the store (a damaged
        file quarantined): the flow that takes over will not make it again, so it would go unsaid."""
        with self.lock:
            kept = [record for record in self.buffer if getattr(record, "store_changed", False)]
            self.buffer.clear()
        return kept


def run_if_cached(spec, selection, spec_path: str) -> bool:
    """Run the pipeline in this process if it needs no work; True when it did (the run is done),
    False when some stage had work to do (nothing was printed; the caller starts the flow)."""
    from retbench.tasks.pipeline import Runner, run_pipeline
    from retbench.tasks.store.build import WorkNeeded, cached_only

    held = _HeldBack()
    level = log.level
    log.addHandler(held)
    log.setLevel(quietest(log))
    try:
        with cached_only():
            result = run_pipeline(spec, selection, spec_path=spec_path, runner=Runner(), run_id=str(uuid.uuid4()))
    except WorkNeeded:
        changes = held.drop()
        if changes:
            console = _console()
            for record in changes:
                console.handle(record)
            console.flush()
        return False
    except BaseException:
        _print(held)  # what led to the failure, as the flow would have shown it; the error's line follows
        raise
    finally:
        log.removeHandler(held)
        log.setLevel(level)
    _print(held, f"nothing to compute: every stage's output was in the store, so this run ran without Prefect "
                 f"(no flow run recorded; --prefect to record one); output in {result.output_dir}")
    return True


def quietest(logger: logging.Logger) -> int:
    """INFO, or the logger's own level when a caller set it quieter (retbench.run(log=False))."""
    return max(logging.INFO, logger.level)


def _console() -> logging.Handler:
    console = logging.StreamHandler(sys.stderr)  # where Prefect's console handler writes them
    console.setFormatter(logging.Formatter(_FORMAT, datefmt="%H:%M:%S"))
    return console


def print_info(line: str) -> None:
    """One INFO line on stderr, formatted as the run's other lines (said before any logging is set up)."""
    console = _console()
    console.handle(log.makeRecord(log.name, logging.INFO, __file__, 0, line, None, None))
    console.flush()


def _print(held: _HeldBack, last: str | None = None) -> None:
    console = _console()
    held.print_to(console)
    if last:
        console.handle(log.makeRecord(log.name, logging.INFO, __file__, 0, last, None, None))
    console.flush()
