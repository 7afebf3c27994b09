"""Progress lines (every 10 s, counts and ETA) and the stop request checked between batches."""
import pickle
import signal

import pytest

from retbench.tasks.progress import Interrupted, Progress, clear_stop, first_interruption, request_stop


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


@pytest.fixture(autouse=True)
def no_stop_left_behind():
    clear_stop()
    yield
    clear_stop()


def test_a_line_at_most_every_ten_seconds_with_counts_and_eta():
    clock, lines = Clock(), []
    progress = Progress("embed minilm", 3000, emit=lines.append, clock=clock)
    clock.now = 4.0
    progress.advance(500)
    assert lines == []  # 4 s: too early
    clock.now = 12.0
    progress.advance(716)  # 1,216 done in 12 s: 1,784 left at 101.3 per s = 17.6 s
    assert lines == ["embed minilm: 1,216/3,000 texts (41%), 12s elapsed, ETA 18s"]
    clock.now = 15.0
    progress.advance(100)
    assert len(lines) == 1  # 3 s after the last line
    clock.now = 200.0
    progress.advance(1684)
    assert len(lines) == 1  # the last batch: no "ETA 0s" line, finish() says it
    progress.finish()
    assert lines[-1] == "embed minilm: 3,000/3,000 texts (100%), 3m20s elapsed"


def test_a_short_loop_stays_silent():
    lines = []
    progress = Progress("rerank e5", 10, unit="pairs", emit=lines.append, clock=Clock())
    progress.advance(10)
    progress.finish()
    assert lines == []


def test_a_stop_request_ends_the_loop_after_the_batch_it_kept():
    progress = Progress("embed minilm", 3000, emit=lambda line: None, clock=Clock())
    progress.advance(64)
    request_stop(signal.SIGTERM)
    request_stop(signal.SIGINT)  # the first signal is the one reported
    with pytest.raises(Interrupted) as stopped:
        progress.advance(64)
    assert (stopped.value.done, stopped.value.signum) == (128, signal.SIGTERM)
    assert str(stopped.value) == "interrupted during embed minilm: 128 of 3,000 texts kept; rerun to continue"


def test_units_kept_by_a_stopped_run_are_said_apart_and_not_in_the_rate():
    clock, lines = Clock(), []
    progress = Progress("embed minilm documents", 1000, emit=lines.append, clock=clock, every=0)
    progress.already(400)  # the journal of a run stopped earlier
    clock.now = 10.0
    progress.advance(100)  # 100 in 10 s: the 500 left take 50 s
    clock.now = 60.0
    progress.advance(500)
    progress.finish()
    # The count is of what was left (600), its total fixed: it ends at 600/600, not at 1,000/1,000.
    assert lines == ["embed minilm documents: 100/600 texts (17%; 400 more already kept), 10s elapsed, ETA 50s",
                     "embed minilm documents: 600/600 texts (100%; 400 more already kept), 1m00s elapsed"]
    request_stop(signal.SIGINT)
    with pytest.raises(Interrupted) as stopped:
        progress.check_stop()
    # A stop still counts every unit kept, this run's and the earlier one's.
    assert str(stopped.value) == "interrupted during embed minilm documents: 1,000 of 1,000 texts kept; rerun to continue"


def test_a_measurement_stopped_says_it_is_done_again():
    progress = Progress("latency minilm", 1110, emit=lambda line: None, clock=Clock(), keeps=False)
    progress.advance(10)
    request_stop(signal.SIGINT)
    with pytest.raises(Interrupted) as stopped:
        progress.advance(100)
    assert str(stopped.value) == ("interrupted during latency minilm after 110 of 1,110 texts "
                                  "(done again by the next run); rerun to continue")


def test_the_reported_stop_is_the_loop_in_flight_not_the_stages_refused_after_it():
    request_stop(signal.SIGTERM)
    refused = Interrupted.before("embed-minilm-query-plan")
    assert first_interruption() is refused  # nothing else yet
    assert str(refused) == ("interrupted before embed-minilm-query-plan: the stages finished so far are kept; "
                            "rerun to continue")
    in_flight = Interrupted("embed minilm documents", 32, 400, "texts", signal.SIGTERM)
    Interrupted.before("index-minilm")
    assert first_interruption() is in_flight
    assert pickle.loads(pickle.dumps(in_flight)).args == in_flight.args


def test_the_seconds_between_lines_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("RETBENCH_PROGRESS_EVERY", "0")
    assert Progress("sweep minilm", 5, "steps").every == 0.0
    monkeypatch.delenv("RETBENCH_PROGRESS_EVERY")
    assert Progress("sweep minilm", 5, "steps").every == 10.0
