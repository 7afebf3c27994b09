"""The signal handling of `retbench run` (flows/interrupts.py) as plain functions: a first signal
asks for a stop, a second ends the process at once after its children; queued stage calls refuse."""
import signal

import pytest

from retbench.flows import interrupts
from retbench.tasks.progress import Interrupted, clear_stop, stop_requested, stop_signal


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    clear_stop()
    monkeypatch.setattr(interrupts, "_received", [])
    monkeypatch.setattr(interrupts, "_children", [])
    yield
    clear_stop()


class Exited(Exception):
    pass


def test_exit_codes_follow_the_shell():
    assert (interrupts.exit_code(signal.SIGINT), interrupts.exit_code(signal.SIGTERM), interrupts.exit_code(None)) == (130, 143, 130)


def test_the_first_signal_asks_for_a_stop_and_the_second_ends_at_once_with_the_children(monkeypatch):
    ended = []
    interrupts.end_with_process(lambda: ended.append("api server"))

    def fake_exit(code):
        raise Exited(code)

    monkeypatch.setattr(interrupts.os, "_exit", fake_exit)
    interrupts.received(signal.SIGTERM)
    assert stop_requested() and stop_signal() == signal.SIGTERM and ended == []
    with pytest.raises(Exited) as exited:
        interrupts.received(signal.SIGINT)
    assert ended == ["api server"] and exited.value.args == (130,)  # the second signal's code


def test_a_stage_call_queued_behind_a_stop_refuses_to_start(monkeypatch):
    quieted = []
    monkeypatch.setattr(interrupts, "quiet_stops", lambda: quieted.append(True))  # not pytest's handlers
    call = interrupts.refusing_after_stop(lambda x: x + 1, lambda: "index-minilm")
    assert call(1) == 2
    interrupts.received(signal.SIGINT)
    with pytest.raises(Interrupted, match="^interrupted before index-minilm: "):
        call(1)
    assert quieted == [True]  # its traceback is kept out of the logs


def test_the_tracebacks_of_a_stop_are_dropped_and_other_failures_kept():
    import logging

    def record(error):
        return logging.LogRecord("prefect", logging.ERROR, __file__, 1, "failed", None, (type(error), error, None))

    quiet = interrupts.QuietStops()
    assert not quiet.filter(record(Interrupted("embed minilm documents", 8, 400, "texts", signal.SIGTERM)))
    assert not quiet.filter(record(RuntimeError("retbench: interrupted during embed minilm documents: ...")))
    assert quiet.filter(record(RuntimeError("index file is damaged")))


def test_a_second_signal_prints_the_stop_line_of_the_loop_in_flight_before_ending(monkeypatch):
    from retbench.tasks.progress import Progress

    written = []
    monkeypatch.setattr(interrupts.os, "write", lambda fd, data: written.append((fd, data.decode())))
    monkeypatch.setattr(interrupts.os, "_exit", lambda code: (_ for _ in ()).throw(Exited(code)))
    monkeypatch.setattr(interrupts, "_describers", [])
    loop = Progress("embed minilm documents", 3000, emit=lambda line: None)
    loop.done = 376  # kept so far; the next advance would stop it
    loop.advance(8)
    interrupts.received(signal.SIGINT)
    with pytest.raises(Exited) as exited:
        interrupts.received(signal.SIGINT)
    assert exited.value.args == (130,)
    assert written == [(2, "retbench: interrupted during embed minilm documents: 384 of 3,000 texts kept; rerun to continue\n")]


def test_a_dask_runs_describer_gives_the_stop_line_summed_over_parts(monkeypatch):
    summed = Interrupted("embed minilm documents", 256, 357, "texts", signal.SIGINT)
    monkeypatch.setattr(interrupts, "_describers", [])
    interrupts.describe_stop_with(lambda: summed)
    Interrupted("embed minilm documents", 128, 357, "texts", signal.SIGINT)  # one part's, as a worker raised it
    assert interrupts.current_stop() is summed
    interrupts.forget(lambda signum: None, interrupts._describers[0])
    assert str(interrupts.current_stop()) == "interrupted during embed minilm documents: 128 of 357 texts kept; rerun to continue"
