"""Expected failures (bad spec, data, options, HTTP answers, missing keys, full disk) end a
command with one line `retbench: <what, where, what to do>` and exit code 2; their
tracebacks, and Prefect's logging of them, are shown only with --debug."""
from __future__ import annotations

import logging

EXIT_EXPECTED = 2



class ClusterLost(RuntimeError):
    """A `--dask ADDRESS` run whose scheduler went away (stopped, its host down): an outcome to
    tell in one line, not a bug (flows/dask_run.py: DaskSession.lost)."""


# Prefect's run-state lines that only repeat a failure already reported (or its fallout
# in downstream tasks); dropped once an expected failure has been seen.
_STATE_ECHOES = ("Finished in state Failed", "Finished in state NotReady", "Finished in state Crashed")


def expected_failure(error: BaseException) -> BaseException | None:
    """The expected failure behind `error` (itself, or what it was raised from), else None."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if _is_expected(error):
            return error
        error = error.__cause__
    return None


def _is_expected(error: BaseException) -> bool:
    from pydantic import ValidationError

    from retbench.tasks.config.spec import SpecError
    from retbench.tasks.providers.http_base import HttpProviderError
    from retbench.tasks.providers.secrets import SecretLookupError
    from retbench.tasks.datasets.errors import DatasetError
    from retbench.tasks.progress import Interrupted
    from retbench.tasks.store.integrity import StoreError
    from retbench.flows.environment import EnvironmentFault
    from retbench.tasks.plugins import PluginError
    from retbench.tasks.user_code import UserCodeError
    from retbench.tasks.extras import MissingExtra
    from retbench.tasks.devices import DeviceUnavailable
    from retbench.tasks.store.files import DISK_FAULTS

    # Interrupted: a stop asked for by SIGINT/SIGTERM (the command line gives it exit 130/143).
    if isinstance(error, (SpecError, DatasetError, StoreError, HttpProviderError, SecretLookupError, ValidationError,
                          EnvironmentFault, Interrupted, UserCodeError, PluginError, MissingExtra,
                          DeviceUnavailable, ClusterLost)):
        return True
    # A full, read-only or forbidden disk: told with the path, the free space and the fix.
    if isinstance(error, OSError) and error.errno in DISK_FAULTS:
        return True
    # The flow's regression gate (fail_on_regression): an outcome, not a bug. Matched by
    # name so the check survives the class moving between modules.
    return any(cls.__name__ == "RegressionError" for cls in type(error).__mro__)


def one_line(error: BaseException) -> str:
    """`retbench: ...` for an expected failure, on one line (multi-line messages are joined by '; ')."""
    from pydantic import ValidationError

    from retbench.tasks.store.files import WRITE_FAULTS, DiskFault, disk_fault

    if isinstance(error, ValidationError):
        from retbench.tasks.config.spec_errors import describe

        # Provider options are validated by the provider when it is built; said in the spec's words.
        text = "invalid provider options: " + "; ".join(describe(error))
    elif isinstance(error, OSError) and error.errno in WRITE_FAULTS and error.filename and not isinstance(error, DiskFault):
        # Raised outside the store's writers (a rename while publishing, a library's own file): the same words.
        text = disk_fault(error.errno, error.filename, "the work done so far is kept", "that folder").strerror
    elif isinstance(error, OSError) and error.strerror:
        text = error.strerror + (f": {error.filename}" if error.filename else "")
    else:
        text = str(error) or type(error).__name__
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    joined = lines[0] + (" " + "; ".join(lines[1:]) if len(lines) > 1 else "") if lines else type(error).__name__
    return f"retbench: {joined}"


class QuietExpectedFailures(logging.Filter):
    """Drops log records that carry an expected failure's traceback (Prefect logs a failing
    task and flow with exc_info), and Prefect's state lines echoing that failure."""

    def __init__(self) -> None:
        super().__init__("")
        self.seen = False

    def filter(self, record: logging.LogRecord) -> bool:
        failure = record.exc_info[1] if record.exc_info else None
        if failure is not None and expected_failure(failure) is not None:
            self.seen = True
            return False
        if self.seen and record.name.startswith("prefect") and _echoes_the_failure(record.getMessage()):
            return False
        return True


def _echoes_the_failure(message: str) -> bool:
    # After the failure, the task runner cancels the stage calls still queued; Prefect reports
    # each as a crash ("Crash detected! ... CancelledError: Task run cancelled by the task runner").
    return message.startswith(_STATE_ECHOES) or (message.startswith("Crash detected!") and "CancelledError" in message)


def quiet_expected_failures() -> QuietExpectedFailures:
    """Attach one QuietExpectedFailures to every logging handler configured so far (Prefect's
    console and API handlers included: call it after Prefect is imported)."""
    quiet = QuietExpectedFailures()
    loggers = [logging.getLogger()] + [logger for logger in logging.Logger.manager.loggerDict.values()
                                       if isinstance(logger, logging.Logger)]
    for handler in {h for logger in loggers for h in logger.handlers}:
        if quiet not in handler.filters:
            handler.addFilter(quiet)
    return quiet
