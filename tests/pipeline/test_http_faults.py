"""Fault injection: a deliberately faulty local server (support/faulty_server.py) behind the
openai-compatible provider, through the real cache (`embed_texts`). Every fault is either
retried to success or fails with a clear error, and what was embedded before stays cached."""
from __future__ import annotations

import time
from email.utils import format_datetime
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from retbench.tasks.stages.embed_dim import DimensionChanged
from retbench.tasks.stages.embed import cached_keys, embed_texts, load_vectors, shard_paths
from retbench.tasks.providers import create_provider
from retbench.tasks.providers.http_base import (
    HttpAuthError, HttpRequestError, HttpResponseError, HttpUnavailableError, parse_retry_after,
)
from retbench.support.faulty_server import FaultyServer, vector_for

IDS = [f"d{i}" for i in range(10)]
TEXTS = [f"text {i}" for i in range(10)]  # batch_size 2: "text 6" is in the 4th of 5 batches


@pytest.fixture
def server():
    with FaultyServer(dim=8) as s:
        yield s


def provider(server, **options):
    defaults = dict(base_url=server.base_url + "/v1", model="fake", concurrency=1, max_retries=3,
                    timeout=0.5, backoff_base=0.02, backoff_max=0.1)
    return create_provider("openai-compatible", {**defaults, **options})


def embed(server, store, **options):
    return embed_texts(provider(server, **options), "fake", IDS, TEXTS, "document", store, batch_size=2)


def assert_vectors_are_the_servers(result):
    ids, vectors = load_vectors(result)
    for i, row in zip(ids, vectors):
        expected = vector_for(TEXTS[IDS.index(i)], 8)
        np.testing.assert_allclose(row, expected / np.linalg.norm(expected), rtol=1e-5)


def test_429_waits_for_retry_after_seconds_then_succeeds(server, tmp_path):
    server.fault("status", match="text 4", status=429, retry_after="1")
    result = embed(server, tmp_path)
    assert (result.embedded, result.from_cache) == (10, 0)
    first, second = server.requests_with("text 4")
    assert first.answered == 429 and second.answered == 200
    # Backoff alone would have retried within 0.1 s; the server asked for 1 s.
    assert second.at - first.at >= 0.95
    assert_vectors_are_the_servers(result)


def test_429_with_an_http_date_retry_after(server, tmp_path):
    when = datetime.now(timezone.utc) + timedelta(seconds=1)
    server.fault("status", match="text 0", status=429, retry_after=format_datetime(when, usegmt=True))
    assert embed(server, tmp_path).embedded == 10
    assert len(server.requests_with("text 0")) == 2


def test_retry_after_parsing():
    assert parse_retry_after("0") == 0.0
    assert parse_retry_after("2.5") == 2.5
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    later = format_datetime(datetime.now(timezone.utc) + timedelta(seconds=30), usegmt=True)
    assert 28 <= parse_retry_after(later) <= 30
    past = format_datetime(datetime.now(timezone.utc) - timedelta(seconds=30), usegmt=True)
    assert parse_retry_after(past) == 0.0


@pytest.mark.parametrize("status", [500, 502, 503])
def test_transient_5xx_are_retried_to_success(server, tmp_path, status):
    server.fault("status", match="text 4", status=status, times=2)
    result = embed(server, tmp_path)
    assert result.embedded == 10
    assert [s.answered for s in server.requests_with("text 4")] == [status, status, 200]


def test_each_retry_is_one_info_line_from_the_calling_thread(server, tmp_path, caplog):
    # Logged from the request thread, a retry line reached Prefect's API handler outside the run
    # context, which printed a two-line UserWarning per retry; the consuming thread logs it now.
    server.fault("status", match="text 4", status=503, times=2)
    with caplog.at_level("INFO", logger="retbench.http"):
        embed(server, tmp_path)
    lines = [r for r in caplog.records if r.name == "retbench.http"]
    assert [(r.levelname, r.threadName) for r in lines] == [("INFO", "MainThread")] * 2
    assert "HTTP 503; retry 1/3 in" in lines[0].getMessage() and "retry 2/3" in lines[1].getMessage()


def test_response_slower_than_the_timeout_is_retried(server, tmp_path):
    server.fault("slow", match="text 2", seconds=1.0)  # timeout is 0.5 s
    result = embed(server, tmp_path)
    assert result.embedded == 10
    assert len(server.requests_with("text 2")) == 2
    assert_vectors_are_the_servers(result)


def test_truncated_json_is_retried_to_success(server, tmp_path):
    server.fault("truncated", match="text 8")
    result = embed(server, tmp_path)
    assert result.embedded == 10
    assert [s.answered for s in server.requests_with("text 8")] == ["truncated", 200]


def test_embeddings_out_of_order_are_put_back_by_index(server, tmp_path):
    server.fault("shuffled", times=None)
    assert_vectors_are_the_servers(embed(server, tmp_path))


# (fault, options, error type, message pattern, requests expected for the failing batch)
PERMANENT = {
    "500-forever": (dict(kind="status", status=500, times=None), HttpUnavailableError,
                    r"127\.0\.0\.1:\d+/embeddings: gave up after 3 attempts; last error: HTTP 500", 3),
    "timeout-forever": (dict(kind="slow", seconds=0.8, times=None), HttpUnavailableError,
                        r"gave up after 3 attempts; last error: no response within 0.5s", 3),
    "truncated-forever": (dict(kind="truncated", times=None), HttpUnavailableError, r"invalid JSON in a 200 response of application/json \(\d+ bytes, starting '\{\"object\": .*truncated\?\)", 3),
    "html-page": (dict(kind="html"), HttpResponseError,
                  r"127\.0\.0\.1:\d+/embeddings: a 200 response of text/html; charset=utf-8, not JSON \(91 bytes, "
                  r"starting '<!DOCTYPE html> <html><head><title>Sign in</title></head><body>Please sign in</b'\); "
                  r"check that base_url points at the API", 1),
    "wrong-dimension": (dict(kind="wrong_dim"), HttpResponseError, r"embedding 1 of batch 3 has dimension \(7,\), expected 8", 1),
    "nan": (dict(kind="nan"), HttpResponseError, r"embedding 0 of batch 3 has non-finite values", 1),
    "wrong-count": (dict(kind="wrong_count"), HttpResponseError, r"1 embeddings for 2 inputs", 1),
    "401": (dict(kind="status", status=401), HttpAuthError, r"^401 from 127\.0\.0\.1:\d+: check the API key", 1),
    "403": (dict(kind="status", status=403), HttpAuthError, r"^403 from 127\.0\.0\.1:\d+: check", 1),
    "400": (dict(kind="status", status=400), HttpRequestError, r"^400 from 127\.0\.0\.1:\d+/embeddings: .*injected 400", 1),
    "404": (dict(kind="status", status=404), HttpRequestError, r"^404 from", 1),
}


@pytest.mark.parametrize("name", list(PERMANENT))
def test_permanent_fault_fails_clearly_keeps_earlier_batches_and_a_rerun_embeds_the_rest(server, tmp_path, name):
    fault, error_type, pattern, requests = PERMANENT[name]
    fault = dict(fault)
    server.fault(fault.pop("kind"), match="text 6", **fault)
    with pytest.raises(error_type, match=pattern):
        embed(server, tmp_path, max_retries=2)
    # Only retryable faults were retried; 4xx and invalid vectors were asked once.
    assert len(server.requests_with("text 6")) == requests
    # Batches 0-2 (texts 0-5) completed before the fault and are in the cache, merged into one shard.
    (cache_dir,) = {p.parent for p in tmp_path.glob("embeddings/*/shard-*.parquet")}
    assert len(cached_keys(cache_dir)) == 6 and len(shard_paths(cache_dir)) == 1
    assert not list(tmp_path.glob("sets/*.parquet"))  # no set file for an incomplete set

    server.clear()
    before = len(server.seen)
    rerun = embed(server, tmp_path, max_retries=2)
    assert (rerun.embedded, rerun.from_cache) == (4, 6)
    assert sorted(t for s in server.seen[before:] for t in s.texts) == TEXTS[6:]
    assert_vectors_are_the_servers(rerun)


def test_requests_run_concurrently_but_never_more_than_the_limit(server, tmp_path):
    server.fault("slow", seconds=0.3, times=None)
    ids = [f"d{i}" for i in range(16)]
    texts = [f"text {i}" for i in range(16)]
    started = time.perf_counter()
    result = embed_texts(provider(server, concurrency=3, timeout=2.0), "fake", ids, texts, "document", tmp_path, batch_size=2)
    seconds = time.perf_counter() - started
    assert result.embedded == 16
    assert server.max_active == 3
    # 8 requests of 0.3 s, 3 at a time: 3 rounds, not 8.
    assert seconds < 8 * 0.3 * 0.75


def test_failure_with_requests_in_flight_keeps_every_completed_batch(server, tmp_path):
    server.fault("status", match="text 6", status=400)  # listed first: wins over the slow fault
    server.fault("slow", seconds=0.2, times=None)
    with pytest.raises(HttpRequestError):
        embed(server, tmp_path, concurrency=3, timeout=2.0)
    (cache_dir,) = {p.parent for p in tmp_path.glob("embeddings/*/shard-*.parquet")}
    kept = len(cached_keys(cache_dir))
    assert kept >= 6  # at least the batches started before the failing one
    server.clear()
    rerun = embed(server, tmp_path, concurrency=3)
    assert (rerun.embedded, rerun.from_cache) == (10 - kept, kept)


def test_dimension_change_against_the_cache_is_refused(server, tmp_path):
    embed_texts(provider(server), "fake", ["a"], ["text 0"], "document", tmp_path)
    server.dim = 6  # the "model" behind the same URL and name changed
    (folder,) = tmp_path.glob("embeddings/*")
    with pytest.raises(DimensionChanged) as caught:
        embed_texts(provider(server), "fake", ["b"], ["text 1"], "document", tmp_path)
    assert str(caught.value) == (f"fake: the server now returns 6-d vectors; the cache holds 8-d ones (model changed?): "
                                 f"set a new model name, or remove {folder}")
    assert len(shard_paths(folder)) == 1 and len(cached_keys(folder)) == 1  # the 8-d row kept, no 6-d one


def test_wrong_dimension_against_the_requested_dimensions_is_refused(server, tmp_path):
    with pytest.raises(HttpResponseError, match=r"has dimension \(8,\), expected 16"):
        embed(server, tmp_path, dimensions=16)
