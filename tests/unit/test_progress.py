"""Progress lines (every 10 s, counts and ETA) and the stop request checked between batches."""
import signal

import pytest

from tasks.progress import Interrupted, Progress, clear_stop, request_stop


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
