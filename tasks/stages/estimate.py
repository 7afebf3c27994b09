"""`retbench check --estimate`: the first run's embedding time per provider, measured now on a few
of the run's own texts, and the store's size on disk from rows, dimensions and index kinds.

An estimate, said as one: the per-text time of a few batches after one warm-up call, times the
texts a run would embed; each index's size from the vectors it holds. The embed stage sorts texts by
length so that a batch pads little; the batches timed here are runs of neighbours in that order, one
at each quarter of the lengths (random texts in one batch pad to the longest: 3.5x too slow on the sample). It loads each model (what a
plain `check` never does), so it is asked for with a flag."""
from __future__ import annotations

import time
from dataclasses import dataclass

import polars as pl

from retbench.tasks.config.spec import BenchmarkSpec

WINDOWS = 4  # batches timed, one per quarter of the texts sorted by length
WINDOW = 8  # texts per timed batch: neighbours in length, as the embed stage's batches are
FLOAT_BYTES = 4  # vectors are float32 in the cache and in flat and IVF indexes
ID_BYTES = 8  # an IVF list stores an int64 id beside each vector
# A cache row on disk per float32 byte of its vector: its content key, token count and Parquet's
# pages beside the vector; dense floats do not compress (measured on the sample: 2,309 bytes per
# 384-dimensional row for minilm and for e5-small, 1.50x; the hashing provider's sparse vectors
# compress to far less, so for them this is an upper bound).
CACHE_BYTES_PER_FLOAT_BYTE = 1.5


@dataclass(frozen=True)
class ProviderEstimate:
    provider: str
    texts: int  # what the run would embed (not in the cache)
    dim: int
    load_seconds: float
    seconds_per_text: float
    sampled: int
    cache_bytes: int
    index_bytes: dict[str, int]  # index kind -> bytes, for the kinds sized here
    unsized: tuple[str, ...]  # index kinds switched on whose size is not estimated

    @property
    def embed_seconds(self) -> float:
        return self.texts * self.seconds_per_text

    def line(self) -> str:
        indexes = ", ".join(f"{kind} {_bytes(n)}" for kind, n in self.index_bytes.items())
        unsized = f"; not sized: {', '.join(self.unsized)}" if self.unsized else ""
        return (f"{self.provider}: ~{_duration(self.embed_seconds)} to embed {self.texts:,} texts "
                f"({1000 * self.seconds_per_text:.1f} ms per text over {self.sampled} texts embedded now in batches "
                f"of neighbours in length, after one warm-up call; model made in {self.load_seconds:.1f} s), {self.dim}-dimensional; on disk ~"
                f"{_bytes(self.cache_bytes)} of cached vectors and indexes {indexes or 'none'}{unsized}.")


def timed_batches(texts: list[str]) -> list[list[str]]:
    """WINDOWS runs of WINDOW texts, neighbours in length order, centred on each quarter of it."""
    ordered = sorted(texts, key=len)
    if len(ordered) <= WINDOWS * WINDOW:
        return [ordered] if ordered else []
    batches = []
    for quarter in range(WINDOWS):
        centre = int((quarter + 0.5) * len(ordered) / WINDOWS)
        start = min(max(0, centre - WINDOW // 2), len(ordered) - WINDOW)
        batches.append(ordered[start:start + WINDOW])
    return batches


def estimate_first_run(spec: BenchmarkSpec, plan, chunks: dict[str, pl.DataFrame]) -> list[ProviderEstimate]:
    """One estimate per provider of `plan` (tasks/stages/preflight.py RunPlan), from `chunks`
    (chunking name -> chunk_id, text) as the run would embed them."""
    from retbench.tasks.providers import create_provider

    texts = [t for table in chunks.values() for t in table["text"].to_list() if t.strip()]
    batches = timed_batches(texts)
    estimates = []
    for provider_spec, work in zip(spec.providers, plan.providers):
        if work.note:  # a fine-tuned model does not exist before its fine-tune stage
            continue
        started = time.perf_counter()
        provider = create_provider(provider_spec.kind, provider_spec.options, provider_spec.dimensions)
        vectors = provider.encode(batches[0][:1], "document")  # loads the model: the load's time, not a text's
        loaded = time.perf_counter() - started
        started = time.perf_counter()
        for batch in batches:
            provider.encode(batch, "document")
        timed = sum(len(batch) for batch in batches)
        per_text = (time.perf_counter() - started) / timed
        dim = int(vectors.shape[1])
        rows = sum(table.height for table in chunks.values())
        sizes, unsized = index_sizes(spec, rows, dim)
        estimates.append(ProviderEstimate(provider_spec.name, work.missing, dim, loaded, per_text,
                                          timed, int(work.missing * dim * FLOAT_BYTES * CACHE_BYTES_PER_FLOAT_BYTE),
                                          sizes, unsized))
    return estimates


def index_sizes(spec: BenchmarkSpec, rows: int, dim: int) -> tuple[dict[str, int], tuple[str, ...]]:
    """Bytes of the flat and IVF index files over `rows` vectors of `dim` (what FAISS stores: the
    float32 vectors; IVF adds an id per vector and its centroids), and the other kinds switched on."""
    sizes = {"flat": rows * dim * FLOAT_BYTES}
    if spec.indexes.ivf is not None:
        from retbench.tasks.stages.index import plan_indexes

        ivf = [s for s in plan_indexes(True, spec.indexes.ivf, rows).settings if s.kind == "ivf"]
        if ivf:
            nlist = dict(ivf[0].params).get("nlist") or 1
            sizes["ivf"] = rows * (dim * FLOAT_BYTES + ID_BYTES) + nlist * dim * FLOAT_BYTES
    return sizes, tuple(spec.indexes.other_kinds())


def summary(estimates: list[ProviderEstimate]) -> str:
    if not estimates:
        return "Estimate: no provider to estimate (a fine-tuned model is trained first)."
    total = sum(e.embed_seconds + e.load_seconds for e in estimates)
    disk = sum(e.cache_bytes + sum(e.index_bytes.values()) for e in estimates)
    return (f"Estimate (measured now, --estimate: each model was loaded and embedded a few texts): embedding "
            f"~{_duration(total)} in all, ~{_bytes(disk)} in the store. " + " ".join(e.line() for e in estimates)
            + " Not estimated: indexing, retrieval, scoring, the side stages (latency profile, sweep), BM25 and "
              "rerankers.")


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _bytes(n: int) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"
