"""SIGINT and SIGTERM end a run cleanly: the first asks every loop to stop after its batch in
flight (tasks/progress.py), a second one ends the process at once, after its children.

Python runs signal handlers in the main thread, between bytecodes; during a run the main thread
sleeps in a lock, waiting for the stage call a worker thread runs, and a signal the kernel hands
to another thread (the model's, say) does not wake it: the handler ran only when the stage call
(one part: a provider's whole corpus) ended. So the signals are also written to a pipe
(`signal.set_wakeup_fd`, done in C by whichever thread took the signal), and a watcher thread
reading it sets the stop request at once; the loops (embed, fine-tune, sweep, latency, rerank)
raise `Interrupted` after their next batch is kept, and a stage call not yet begun refuses to
start (`refusing_after_stop`). Prefect's flow engine installs its own SIGTERM handler for the
flow run (it raises in the main thread, when that wakes); `install` runs again inside the flow
to put ours back.
"""
from __future__ import annotations

import functools
import logging
import os
import signal
import threading
from typing import Callable

from retbench.tasks.progress import Interrupted, first_interruption, in_flight, request_stop, stop_requested

_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_armed = threading.Event()
_before_flow = threading.Event()
_children: list[Callable[[], None]] = []  # each ends one child process at once (a second signal)
_received: list[int] = []
_passed_on: list[Callable[[int], None]] = []  # pass a stop request to other processes (Dask workers)
_describers: list[Callable[[], "Interrupted | None"]] = []  # the stop as seen from elsewhere (Dask: summed over parts)


def exit_code(signum: int | None) -> int:
    """The shell's convention for a process ended by a signal: 130 for SIGINT, 143 for SIGTERM."""
    return 128 + (signum or signal.SIGINT)


def end_with_process(kill: Callable[[], None]) -> None:
    """`kill` ends a child process of this run (the API server) when a second signal ends the
    run at once; the normal end stops them in their own way."""
    _children.append(kill)


def pass_stop_on(tell: Callable[[int], None]) -> None:
    """`tell(signum)` asks other processes running this run's stage calls to stop too."""
    _passed_on.append(tell)


def describe_stop_with(describe: Callable[[], "Interrupted | None"]) -> None:
    """`describe()` gives the stop to report in place of this process's own (a Dask run's, with
    the kept counts of every part); the latest registered wins."""
    _describers[:] = [describe]


def forget(tell: Callable[[int], None], describe: Callable[[], "Interrupted | None"]) -> None:
    """Undo `pass_stop_on(tell)` and `describe_stop_with(describe)` (their run is over)."""
    for registered, item in ((_passed_on, tell), (_describers, describe)):
        while item in registered:
            registered.remove(item)


def current_stop() -> "Interrupted | None":
    """The stop this run reports in its one line: a describer's, else the loop of this process
    that was stopped in flight (or the first stage that refused to start), else the loop that
    was running when a second signal came."""
    for describe in _describers:
        try:
            stop = describe()
        except Exception:  # noqa: BLE001  (the process's own account is still right, if less complete)
            stop = None
        if stop is not None:
            return stop
    stop = first_interruption()
    if stop is None and (loop := in_flight()) is not None:
        stop = Interrupted(loop.what, loop.done, loop.total, loop.unit, None, loop.keeps)
    return stop


def _tell_the_others(signum: int) -> None:
    for tell in _passed_on:
        try:
            tell(signum)
        except Exception:  # noqa: BLE001  (a worker gone already has nothing to stop)
            pass


def received(signum: int) -> None:
    """A signal arrived (the watcher thread calls this): the first asks for a stop, a second
    ends the process now; nothing more would be kept by waiting (every finished batch is on disk)."""
    _received.append(signum)
    if len(_received) == 1:
        request_stop(signum)
        if _passed_on:  # in its own thread: this one must stay free to hear a second signal
            threading.Thread(target=_tell_the_others, args=(signum,), name="retbench-stop", daemon=True).start()
        return
    for kill in _children:
        try:
            kill()
        except Exception:  # noqa: BLE001  (ending the process matters more)
            pass
    stop = current_stop()
    try:  # the same one line as a first signal's stop gives, then out
        os.write(2, f"retbench: {stop or Interrupted.before('the rest of the run')}\n".encode())
    except OSError:
        pass
    os._exit(exit_code(signum))


def _on_signal(signum: int, frame) -> None:
    # The main thread's handler: the watcher thread counts the signals; this one only ends the
    # command line's own start (imports, checks, the server's boot), where no stage runs yet.
    request_stop(signum)
    if _before_flow.is_set():
        _before_flow.clear()
        raise Interrupted.before("the first stage")


def _watch(read_end: int) -> None:
    while True:
        for signum in os.read(read_end, 64):
            if signum in _SIGNALS:
                received(signum)


def install(before_flow: bool = False) -> bool:
    """Our handlers for SIGINT and SIGTERM, and the watcher thread (main thread only; elsewhere a
    no-op); True when set. `before_flow`: until the flow's own call, a signal also raises
    `Interrupted` in the main thread at once (the command line is importing and checking)."""
    if threading.current_thread() is not threading.main_thread():
        return False
    if before_flow:
        _before_flow.set()
    else:
        _before_flow.clear()
    for signum in _SIGNALS:
        if signal.getsignal(signum) is not _on_signal:
            signal.signal(signum, _on_signal)
    if not _armed.is_set():
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)  # set_wakeup_fd's requirement: a full pipe never blocks a handler
        signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
        threading.Thread(target=_watch, args=(read_end,), name="retbench-signals", daemon=True).start()
        _armed.set()
    return True


def armed() -> bool:
    """This process's signals are ours (`retbench run` installed the handlers)."""
    return _armed.is_set()


def refusing_after_stop(fn: Callable, name: Callable[[], str]) -> Callable:
    """`fn` (a stage call) that raises `Interrupted` instead of starting once a stop is requested:
    with one stage call at a time, the calls queued behind the stopped one end at once. `name()`
    names the call in the message ("embed-minilm-query")."""

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            if stop_requested():
                raise Interrupted.before(name())
            return fn(*args, **kwargs)
        except Interrupted:
            quiet_stops()  # in this process (a Dask worker's too), before Prefect logs the failure
            raise

    return call


class QuietStops(logging.Filter):
    """Drops the records that carry a stop's traceback: each stage call that raised `Interrupted`,
    and the engine's `CancelledRun` of a deployment's run that ended Cancelled with our line.
    The run's state lines and that one line say what happened."""

    def filter(self, record: logging.LogRecord) -> bool:
        failure = record.exc_info[1] if record.exc_info else None
        return failure is None or not (isinstance(failure, Interrupted)
                                       or str(failure).startswith("retbench: interrupted"))


def quiet_stops() -> None:
    """Attach QuietStops to every logging handler configured so far (Prefect's included); the
    command line has its own filter (flows/errors.py), a deployment's flow-run process this one."""
    loggers = [logging.getLogger()] + [logger for logger in logging.Logger.manager.loggerDict.values()
                                       if isinstance(logger, logging.Logger)]
    for handler in {h for logger in loggers for h in logger.handlers}:
        if not any(isinstance(f, QuietStops) for f in handler.filters):
            handler.addFilter(QuietStops())

