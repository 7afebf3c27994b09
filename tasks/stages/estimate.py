"""`retbench check`'s estimate of a first run: per provider, the time to embed, index, search and
profile, and the store's size on disk from rows, dimensions and index kinds.

The time per text comes from this machine's latency profile when the store holds one for the
provider (a run with `latency:` measured it; no model is loaded), else, with `--estimate`, from a
few batches embedded now (the model is loaded); each line says which. Batches embedded now are the
run's own: the texts in length order, as the embed stage sorts them so that a batch pads little
(random texts in one batch pad to the longest: 3.5x too slow on the sample), cut into the
provider's batches (its batch size or token budget); one batch, at most WINDOW texts of it, is
timed at each quarter of that order, documents and queries apart (a query is shorter: the sample's
e5 queries embed several times faster than its chunks). The index and retrieve stages are counted
in multiply-adds at this machine's measured speed (tasks/stages/estimate_search.py). Each index's
size is the vectors it holds."""
from __future__ import annotations

import time
from dataclasses import dataclass

import polars as pl

from retbench.tasks.config.spec import BenchmarkSpec

WINDOWS = 4  # batches timed, one per quarter of the texts sorted by length
# At most this many texts of a timed batch: a call's fixed cost weighs on small batches (e5 on the
# sample: 2.4 s per text in batches of 8 against 2.0 in batches of 32 and 1.7 in 64, on a busy
# machine), so the timed batches are as large as the run's, up to this.
WINDOW = 32
FLOAT_BYTES = 4  # vectors are float32 in the cache and in flat and IVF indexes
ID_BYTES = 8  # an IVF list stores an int64 id beside each vector
# A cache row on disk per float32 byte of its vector: its content key, token count and Parquet's
# pages beside the vector; dense floats do not compress (measured on the sample: 2,309 bytes per
# 384-dimensional row for minilm and for e5-small, 1.50x; the hashing provider's sparse vectors
# compress to far less, so for them this is an upper bound).
CACHE_BYTES_PER_FLOAT_BYTE = 1.5
PROFILED, MEASURED_NOW = "latency profile", "measured now"


@dataclass(frozen=True)
class ProviderEstimate:
    provider: str
    texts: int  # what the run would embed (not in the cache), queries included
    dim: int | None  # None: not known without loading the model
    seconds_per_text: float | None  # a document's; None: no profile, and not measured now
    source: str | None  # PROFILED or MEASURED_NOW
    detail: str  # how the time per text was had
    index_bytes: dict[str, int]  # index kind -> bytes, for the kinds sized here and not yet in the store
    unsized: tuple[str, ...]  # index kinds switched on whose size is not estimated
    load_seconds: float = 0.0
    queries: int = 0  # of `texts`, the queries
    query_seconds_per_text: float | None = None  # None: as a document's
    index_seconds: float | None = None  # flat and IVF; None: the dimension is unknown
    search_seconds: float | None = None
    profile_seconds: float = 0.0  # the latency profile's texts (a `latency:` section), 0 without one

    @property
    def embed_seconds(self) -> float | None:
        if self.seconds_per_text is None:
            return None
        per_query = self.seconds_per_text if self.query_seconds_per_text is None else self.query_seconds_per_text
        return (self.texts - self.queries) * self.seconds_per_text + self.queries * per_query

    @property
    def stage_seconds(self) -> dict[str, float]:
        """Estimated seconds by stage, for the stages estimated."""
        stages = {"embed": self.embed_seconds, "index": self.index_seconds, "retrieve": self.search_seconds,
                  "latency profile": self.profile_seconds if self.seconds_per_text is not None else None}
        return {stage: seconds for stage, seconds in stages.items() if seconds}

    @property
    def cache_bytes(self) -> int | None:
        return None if self.dim is None else vector_bytes(self.texts, self.dim)

    def line(self) -> str:
        if not self.texts:
            time_said = "nothing to embed (every text is in the cache)"
        elif self.seconds_per_text is None:
            time_said = (f"time not estimated ({self.texts:,} texts to embed; no latency profile of this machine in "
                         f"the store: --estimate measures it now, loading the model)")
        else:
            per_query = (f", {1000 * self.query_seconds_per_text:.1f} per query"
                         if self.query_seconds_per_text is not None and self.queries else "")
            time_said = (f"{_about(self.embed_seconds)} to embed {self.texts:,} texts [{self.source}] "
                         f"({1000 * self.seconds_per_text:.1f} ms per document text{per_query}, {self.detail})")
        others = [f"{stage} {_about(seconds)}"
                  for stage, seconds in self.stage_seconds.items() if stage != "embed"]
        if others:
            time_said += f"; {', '.join(others)}"
        if self.dim is None:
            return f"{self.provider}: {time_said}; size not estimated (dimension unknown without the model)."
        indexes = ", ".join(f"{kind} {_bytes(n)}" for kind, n in self.index_bytes.items())
        unsized = f"; not sized: {', '.join(self.unsized)}" if self.unsized else ""
        if not self.texts and not self.index_bytes and not self.unsized:
            return f"{self.provider}: {time_said}, {self.dim}-dimensional; nothing new on disk."
        return (f"{self.provider}: {time_said}, {self.dim}-dimensional; new on disk ~{_bytes(self.cache_bytes)} of "
                f"cached vectors and indexes {indexes or 'none'}{unsized}.")


def timed_batches(texts: list[str], plan=None) -> list[list[str]]:
    """The batches to time: `texts` in length order cut by `plan` (texts -> batches of positions,
    the provider's plan_batches; default: WINDOW texts a batch), then at most WINDOWS batches, one
    at each quarter of the order, each cut to WINDOW neighbouring texts."""
    ordered = sorted(texts, key=len)
    if not ordered:
        return []
    positions = plan(ordered) if plan else [list(range(i, min(i + WINDOW, len(ordered))))
                                            for i in range(0, len(ordered), WINDOW)]
    batches = [[ordered[i] for i in batch] for batch in positions if batch]
    if len(batches) > WINDOWS:
        batches = [batches[int((quarter + 0.5) * len(batches) / WINDOWS)] for quarter in range(WINDOWS)]
    return [_middle(batch, WINDOW) for batch in batches]


def _middle(batch: list[str], n: int) -> list[str]:
    start = max(0, (len(batch) - n) // 2)
    return batch[start:start + n]


def estimate_first_run(spec: BenchmarkSpec, plan, chunks: dict[str, pl.DataFrame], queries: list[str],
                       measure_now: bool = False) -> list[ProviderEstimate]:
    """One estimate per provider of `plan` (tasks/stages/preflight.py RunPlan), from `chunks`
    (chunking name -> chunk_id, text, the baseline first) and `queries` as the run embeds them;
    `measure_now`: a provider without a latency profile embeds a few batches now."""
    from retbench.tasks.providers import create_provider

    texts = [t for table in chunks.values() for t in table["text"].to_list() if t.strip()]
    baseline = next(iter(chunks.values()))["text"].to_list()
    rows = sum(table.height for table in chunks.values())
    distinct_queries = len({q for q in queries if q.strip()})
    estimates = []
    for provider_spec, work in zip(spec.providers, plan.providers):
        if work.note:  # a fine-tuned model does not exist before its fine-tune stage
            continue
        provider = create_provider(provider_spec.kind, provider_spec.options, provider_spec.dimensions)
        dim = provider_spec.dimensions or provider.declared_dim()
        per_text = profiled_seconds_per_text(spec, provider, provider_spec.batch_size, baseline, queries)
        per_query = None
        source, detail, loaded = PROFILED, "the document rows of this machine's latency profile in the store", 0.0
        if per_text is None and measure_now:
            def planned(ordered, role="document"):
                return provider.plan_batches(ordered, role, provider_spec.batch_size)
            per_text, dim, loaded, timed = _measure_now(provider, timed_batches(texts, planned), "document")
            if distinct_queries:
                per_query, _, _, timed_queries = _measure_now(
                    provider, timed_batches(queries, lambda ordered: planned(ordered, "query")), "query", loaded=True)
                timed = f"{timed} document texts and {timed_queries} queries"
            source = MEASURED_NOW
            detail = (f"{timed} embedded now in the run's batches, cut to at most {WINDOW} neighbours in length, "
                      f"after one warm-up call; model made in {loaded:.1f} s")
        elif per_text is None:
            source = None
        sizes, unsized, unbuilt = unbuilt_index_sizes(spec, plan, provider_spec.name, rows, dim)
        # A store that holds this provider's indexes holds their runs too: neither stage runs again.
        index_seconds, search_seconds = (search_work(spec, rows, dim, distinct_queries).seconds()
                                         if dim and unbuilt else (None, None))
        # Queries are a share of the distinct texts; after a stop, the missing ones are taken to be in that share.
        missing_queries = round(distinct_queries * work.missing / max(work.distinct or work.texts, 1))
        estimates.append(ProviderEstimate(
            provider_spec.name, work.missing, dim, per_text, source, detail, sizes, unsized, loaded,
            queries=min(missing_queries, work.missing), query_seconds_per_text=per_query,
            index_seconds=index_seconds, search_seconds=search_seconds,
            # A profile in the store is reused by the run, not measured again.
            profile_seconds=profile_seconds(spec, provider, per_text, per_query) if source == MEASURED_NOW else 0.0))
    return estimates


def vector_bytes(texts: int, dim: int) -> int:
    """The cache's bytes on disk for `texts` vectors of `dim`."""
    return int(texts * dim * FLOAT_BYTES * CACHE_BYTES_PER_FLOAT_BYTE)


def unbuilt_index_sizes(spec: BenchmarkSpec, plan, provider: str, rows: int, dim: int | None
                        ) -> tuple[dict[str, int], tuple[str, ...], set[str]]:
    """(bytes by index kind, kinds not sized, kinds to build) of the indexes the run would add to
    the store for `provider`: indexes already built there are not counted again."""
    sizes, unsized = index_sizes(spec, rows, dim) if dim else ({}, ())
    unbuilt = {i.kind for i in plan.indexes if i.setting.split("@")[0] == provider and not i.built}
    return ({kind: n for kind, n in sizes.items() if kind in unbuilt},
            tuple(kind for kind in unsized if kind in unbuilt), unbuilt)


def store_bytes(spec: BenchmarkSpec, plan) -> tuple[int, list[str]]:
    """What a run of `plan` (tasks/stages/preflight.py RunPlan) adds to the store, as
    `estimate_first_run` sizes it, without timing anything: (bytes, providers not sized, their
    dimension unknown without the model or their model trained first)."""
    from retbench.tasks.providers import create_provider

    rows = sum(plan.chunks.values())
    total, unsized = 0, []
    for provider_spec, work in zip(spec.providers, plan.providers):
        dim = None
        if not work.note:
            provider = create_provider(provider_spec.kind, provider_spec.options, provider_spec.dimensions)
            dim = provider_spec.dimensions or provider.declared_dim()
        if not dim:
            unsized.append(provider_spec.name)
            continue
        sizes = unbuilt_index_sizes(spec, plan, provider_spec.name, rows, dim)[0]
        total += vector_bytes(work.missing, dim) + sum(sizes.values())
    return total, unsized


def planned_ivf(spec: BenchmarkSpec, rows: int) -> tuple[dict, tuple[int, ...]] | None:
    """The IVF index the run would build over `rows` vectors (its build parameters, the nprobe
    values searched), or None when IVF is off or cannot be built on that many."""
    if spec.indexes.ivf is None:
        return None
    from retbench.tasks.stages.index import plan_indexes

    planned = plan_indexes(True, spec.indexes.ivf, rows)
    ivf = [s for s in planned.settings if s.kind == "ivf"]
    return (dict(ivf[0].params), tuple(planned.nprobe)) if ivf else None


def search_work(spec: BenchmarkSpec, rows: int, dim: int, queries: int):
    """What the index and retrieve stages compute for one provider (flat, and IVF when switched on)."""
    from retbench.tasks.stages.estimate_search import SearchWork

    ivf = planned_ivf(spec, rows)
    if ivf is None:
        return SearchWork(rows, dim, queries)
    params, nprobes = ivf
    return SearchWork(rows, dim, queries, nlist=params.get("nlist") or 1,
                      train_rows=params.get("train_size") or rows, nprobes=nprobes)


def profile_seconds(spec: BenchmarkSpec, provider, per_text: float, per_query: float | None) -> float:
    """The latency profile's embedding time (tasks/stages/latency.py): at each batch size, warm-up
    calls and `iterations` rounds of `concurrency` calls that overlap, then the query calls."""
    from retbench.tasks.stages.latency import QUERY_CALLS

    if spec.latency is None:
        return 0.0
    section = spec.latency
    levels = len(section.concurrency) if provider.concurrent else 1
    documents = sum((section.warmup + section.iterations * levels) * size for size in section.batch_sizes)
    return documents * per_text + (section.warmup + QUERY_CALLS) * (per_query if per_query is not None else per_text)


def profiled_seconds_per_text(spec: BenchmarkSpec, provider, batch_size: int, documents: list[str],
                              queries: list[str]) -> float | None:
    """Seconds per document text from the latency profile a run of this spec measured on this
    machine (the batch size nearest below the provider's batch_size, one call at a time), or None."""
    from retbench.tasks.providers.fingerprint import full_fingerprint
    from retbench.tasks.stages.embed import fingerprint_hash
    from retbench.tasks.stages.measurements import latency_path, latency_texts_key
    from retbench.tasks.store.remote import is_remote

    if spec.latency is None or is_remote(spec.store_dir):
        return None
    section = spec.latency.model_dump(mode="json")
    path = latency_path(spec.store_dir, fingerprint_hash(full_fingerprint(provider)), section,
                        latency_texts_key(documents, queries, section))
    if not path.is_file():
        return None
    rows = pl.read_parquet(path).filter((pl.col("role") == "document") & (pl.col("concurrency") == 1))
    if rows.is_empty():
        return None
    fitting = rows.filter(pl.col("batch_size") <= batch_size).sort("batch_size")
    row = fitting.row(-1, named=True) if fitting.height else rows.sort("batch_size").row(0, named=True)
    return 1.0 / row["texts_per_second"] if row["texts_per_second"] else None


def _measure_now(provider, batches: list[list[str]], role: str, loaded: bool = False) -> tuple[float, int, float, int]:
    """(seconds per text, dimension, seconds to make the model, texts timed)."""
    started = time.perf_counter()
    vectors = provider.encode(batches[0][:1], role)  # loads the model: the load's time, not a text's
    load_seconds = 0.0 if loaded else time.perf_counter() - started
    started = time.perf_counter()
    for batch in batches:
        provider.encode(batch, role)
    timed = sum(len(batch) for batch in batches)
    return (time.perf_counter() - started) / timed, int(vectors.shape[1]), load_seconds, timed


def index_sizes(spec: BenchmarkSpec, rows: int, dim: int) -> tuple[dict[str, int], tuple[str, ...]]:
    """Bytes of the flat and IVF index files over `rows` vectors of `dim` (what FAISS stores: the
    float32 vectors; IVF adds an id per vector and its centroids), and the other kinds switched on."""
    sizes = {"flat": rows * dim * FLOAT_BYTES}
    ivf = planned_ivf(spec, rows)
    if ivf is not None:
        nlist = ivf[0].get("nlist") or 1
        sizes["ivf"] = rows * (dim * FLOAT_BYTES + ID_BYTES) + nlist * dim * FLOAT_BYTES
    return sizes, tuple(spec.indexes.other_kinds())


def summary(estimates: list[ProviderEstimate]) -> str:
    if not estimates:
        return "Estimate: no provider to estimate (a fine-tuned model is trained first)."
    timed = [e for e in estimates if e.embed_seconds is not None]
    sized = [e for e in estimates if e.dim is not None]
    total = sum(sum(e.stage_seconds.values()) + e.load_seconds for e in timed)
    disk = sum(e.cache_bytes + sum(e.index_bytes.values()) for e in sized)
    overall = [f"{_about(total)} of embedding, indexing, search and latency profile for {len(timed)} of "
               f"{len(estimates)} provider(s)" if timed else "",
               f"~{_bytes(disk)} in the store for {len(sized)} of {len(estimates)}" if sized else ""]
    return (f"Estimate of a first run: {', '.join(p for p in overall if p) or 'nothing estimable'}. "
            + " ".join(e.line() for e in estimates)
            + " Not estimated: scoring and the report (seconds on small runs), the ANN sweep, BM25, rerankers, "
              "fine-tuning and the start of the flow.")


def _about(seconds: float) -> str:
    """An estimate's time: "~2 min", but "<1 s" without the "~", which would read as "about less than"."""
    return _duration(seconds) if seconds < 1 else f"~{_duration(seconds)}"


def _duration(seconds: float) -> str:
    if seconds < 1:
        return "<1 s"
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
