"""Latency profile of an embedding provider: texts/second and per-call percentiles
per batch size, and for HTTP providers a sweep over concurrent requests.

Plain function, no Prefect: the flow calls `profile_latency` once per provider and
concatenates the tables into `latency`.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import polars as pl

from retbench.tasks.analysis.equivalence import quantile_band
from retbench.tasks.config.measurement import LatencySpec
from retbench.tasks.progress import Progress
from retbench.tasks.providers import Provider

LATENCY_SCHEMA = {
    "provider": pl.String, "kind": pl.String, "batch_size": pl.Int64, "concurrency": pl.Int64,
    "iterations": pl.Int64, "calls": pl.Int64, "texts_per_second": pl.Float64,
    "p50_ms": pl.Float64, "p95_ms": pl.Float64, "p99_ms": pl.Float64,
    "p95_ms_low": pl.Float64, "p95_ms_high": pl.Float64, "role": pl.String,
}
LATENCY_COLUMNS = list(LATENCY_SCHEMA)
# One query at a time, the way a search service embeds it: enough calls for a p95 with a noise band
# (with 59 calls the largest sample bounds the p95 from above at 95%).
QUERY_CALLS = 60


def _timed_row(latencies: Sequence[float], wall: float, texts: int, **setting) -> dict:
    """One `latency` row from the seconds of each call: percentiles, the p95's noise band (for the
    verdict's "cheaper" claims) and throughput over `texts` texts in `wall` seconds."""
    ms = np.asarray(latencies) * 1000.0
    p50, p95, p99 = np.percentile(ms, [50, 95, 99])
    p95_low, p95_high = quantile_band(ms, 0.95)
    return {**setting, "texts_per_second": texts / wall if wall > 0 else float("inf"),
            "p50_ms": float(p50), "p95_ms": float(p95), "p99_ms": float(p99), "p95_ms_low": p95_low, "p95_ms_high": p95_high}


def profile_latency(provider: Provider, provider_name: str, texts: Sequence[str], spec: LatencySpec | None = None,
                    progress: Callable[[str], None] | None = None) -> pl.DataFrame:
    """The `latency` rows of one provider (vectors are discarded, nothing is cached).
    Concurrency is swept only for providers whose calls may overlap (`Provider.concurrent`)."""
    spec = spec or LatencySpec()
    pool = [t for t in texts[: spec.texts] if t] or ["empty"]
    concurrent = provider.concurrent
    settings = []  # (batch size, concurrency)
    for batch_size in spec.batch_sizes:
        swept = concurrent and (spec.sweep_batch_sizes is None or batch_size in spec.sweep_batch_sizes)
        settings += [(batch_size, concurrency) for concurrency in (spec.concurrency if swept else [1])]
    # Counted in texts embedded (a batch of 100 weighs 100 of 1): the ETA then follows the work.
    shown = Progress(f"latency {provider_name}", sum(b * spec.iterations * c for b, c in settings), "texts",
                     emit=progress or (lambda line: None), keeps=False)
    rows = []
    for batch_size, concurrency in settings:
        calls = spec.iterations * concurrency
        # Different texts in every call, so a server-side cache cannot flatter the numbers.
        batches = [_take(pool, (i * batch_size) % len(pool), batch_size) for i in range(calls)]
        latencies, wall = provider.timed_calls(batches, spec.role, concurrency, warmup=spec.warmup)
        rows.append(_timed_row(latencies, wall, batch_size * calls, provider=provider_name, kind=provider.kind,
                               batch_size=batch_size, concurrency=concurrency, iterations=spec.iterations,
                               calls=calls, role=spec.role))
        shown.advance(batch_size * calls)
    shown.finish()
    return pl.DataFrame(rows, schema=LATENCY_SCHEMA)


def profile_query_latency(provider: Provider, provider_name: str, queries: Sequence[str],
                          spec: LatencySpec | None = None) -> pl.DataFrame:
    """One `latency` row: the run's own queries embedded one per call (role "query"), what the
    verdict's query latency adds to search. The document profile above measures throughput on
    corpus chunks, which for a model slow on long texts says little about a query's latency."""
    spec = spec or LatencySpec()
    pool = [q for q in queries if q] or ["empty"]
    batches = [[pool[i % len(pool)]] for i in range(QUERY_CALLS)]
    latencies, wall = provider.timed_calls(batches, "query", 1, warmup=spec.warmup)
    row = _timed_row(latencies, wall, QUERY_CALLS, provider=provider_name, kind=provider.kind, batch_size=1,
                     concurrency=1, iterations=QUERY_CALLS, calls=QUERY_CALLS, role="query")
    return pl.DataFrame([row], schema=LATENCY_SCHEMA)


def _take(pool: list[str], start: int, n: int) -> list[str]:
    return [pool[(start + i) % len(pool)] for i in range(n)]
