"""Latency profile of an embedding provider: texts/second and per-call percentiles
per batch size, and for HTTP providers a sweep over concurrent requests.

Plain function, no Prefect: the flow calls `profile_latency` once per provider and
concatenates the tables into `latency`.
"""
from __future__ import annotations

import time
from typing import Literal, Sequence

import numpy as np
import polars as pl
from pydantic import BaseModel, ConfigDict, Field, field_validator

LATENCY_COLUMNS = ["provider", "kind", "batch_size", "concurrency", "iterations", "calls",
                   "texts_per_second", "p50_ms", "p95_ms", "p99_ms"]


class LatencySpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    batch_sizes: list[int] = Field(default_factory=lambda: [1, 10, 50, 100])
    iterations: int = Field(3, ge=1, description="timed rounds per setting (each round: `concurrency` calls)")
    warmup: int = Field(1, ge=0, description="untimed calls first (model load, connection set-up)")
    concurrency: list[int] = Field(default_factory=lambda: [1, 2, 4], description="HTTP providers only; local ones run 1")
    sweep_batch_sizes: list[int] | None = Field(
        None, description="batch sizes swept over `concurrency` (others run at 1); default: all of batch_sizes")
    role: Literal["query", "document"] = "document"
    texts: int = Field(200, ge=1, description="distinct texts drawn from the corpus; calls cycle through them")

    @field_validator("batch_sizes", "concurrency")
    @classmethod
    def _positive(cls, values: list[int]) -> list[int]:
        if not values or any(v < 1 for v in values):
            raise ValueError("must be a non-empty list of positive integers")
        return sorted(set(values))


def profile_latency(provider, provider_name: str, texts: Sequence[str], spec: LatencySpec | None = None) -> pl.DataFrame:
    """The `latency` rows of one provider (vectors are discarded, nothing is cached)."""
    spec = spec or LatencySpec()
    pool = [t for t in texts[: spec.texts] if t] or ["empty"]
    concurrent = hasattr(provider, "timed_calls")
    rows = []
    for batch_size in spec.batch_sizes:
        swept = concurrent and (spec.sweep_batch_sizes is None or batch_size in spec.sweep_batch_sizes)
        for concurrency in (spec.concurrency if swept else [1]):
            calls = spec.iterations * concurrency
            # Different texts in every call, so a server-side cache cannot flatter the numbers.
            batches = [_take(pool, (i * batch_size) % len(pool), batch_size) for i in range(calls)]
            if concurrent:
                latencies, wall = provider.timed_calls(batches, spec.role, concurrency, warmup=spec.warmup)
            else:
                latencies, wall = _sequential(provider, batches, spec.role, spec.warmup)
            ms = np.asarray(latencies) * 1000.0
            p50, p95, p99 = np.percentile(ms, [50, 95, 99])
            rows.append({
                "provider": provider_name, "kind": provider.kind, "batch_size": batch_size,
                "concurrency": concurrency, "iterations": spec.iterations, "calls": calls,
                "texts_per_second": batch_size * calls / wall if wall > 0 else float("inf"),
                "p50_ms": float(p50), "p95_ms": float(p95), "p99_ms": float(p99),
            })
    return pl.DataFrame(rows, schema={
        "provider": pl.String, "kind": pl.String, "batch_size": pl.Int64, "concurrency": pl.Int64,
        "iterations": pl.Int64, "calls": pl.Int64, "texts_per_second": pl.Float64,
        "p50_ms": pl.Float64, "p95_ms": pl.Float64, "p99_ms": pl.Float64,
    })


def _take(pool: list[str], start: int, n: int) -> list[str]:
    return [pool[(start + i) % len(pool)] for i in range(n)]


def _sequential(provider, batches: list[list[str]], role: str, warmup: int) -> tuple[list[float], float]:
    for i in range(warmup):
        provider.encode(batches[i % len(batches)], role)
    latencies = []
    started = time.perf_counter()
    for batch in batches:
        t0 = time.perf_counter()
        provider.encode(batch, role)
        latencies.append(time.perf_counter() - t0)
    return latencies, time.perf_counter() - started
