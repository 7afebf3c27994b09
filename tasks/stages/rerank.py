"""Rerank the top N documents of any first-stage run, scoring each (query, chunk text) pair once.

Score cache, like the embedding cache (tasks/stages/embed.py):
    rerank/<kind>-<fingerprint hash>/fingerprint.json
    rerank/<kind>-<fingerprint hash>/shard-<time>-<random>.parquet   (key, score, seconds, tokens, search_units)
The key is sha256(fingerprint hash, query text, chunk text), so any system, run or dataset that
asks for a pair already scored gets it from the cache. Scored calls are a shard (with a checksum
sidecar) within a second of completing, under the folder's flock, so a failure keeps every earlier
call; a damaged shard is quarantined and its pairs are scored again. The pairs of all queries are
scored together (plan_batches): a cross-encoder gets them length-sorted in its own batch size.

A document is reranked on the text of the chunk the first stage ranked it by (MaxP's best chunk).
A pair's `seconds` is its share of the call that scored it, so a cached rerun still reports the
latency the rerank step adds per query.
"""
from __future__ import annotations

import functools
import hashlib
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import polars as pl
import pyarrow as pa

from retbench.tasks.analysis.cost import weakest_source
from retbench.tasks.analysis.equivalence import quantile_band
from retbench.tasks.analysis.runs import RUN_SCHEMA, trec_order
from retbench.tasks.progress import Progress, stop_requested
from retbench.tasks.rerankers.base import RerankBatch, Reranker
from retbench.tasks.stages.embed import cached_vectors
from retbench.tasks.store.build import StageResult, build_once, need_work
from retbench.tasks.store.files import stable_hash, write_json, write_parquet
from retbench.tasks.store import shards
from retbench.tasks.store.integrity import parquet_readable

log = logging.getLogger("retbench.rerank")

SCORE_SCHEMA = pa.schema([("key", pa.string()), ("score", pa.float64()), ("seconds", pa.float64()),
                          ("tokens", pa.float64()), ("token_source", pa.string()), ("search_units", pa.float64())])


@dataclass(frozen=True, kw_only=True)
class RerankResult(StageResult):
    """A reranked run file (RUN_SCHEMA) and what making it took."""

    system: str
    reranker: str
    top_n: int
    queries: int
    pairs: int  # (query, document) pairs reranked
    scored: int  # pairs the reranker scored in this call (0 when everything was cached)
    from_cache: int
    # Added seconds per query (p50, p95, mean, max, queries): the sum of the own latencies of the
    # calls that scored its pairs, i.e. what the query waits with its batches sent one after another.
    latency: dict
    tokens: int  # over all pairs, scored now or earlier (what the run costs, not this call)
    token_source: str
    search_units: float


def fingerprint_hash(reranker: Reranker) -> tuple[dict, str]:
    fingerprint = reranker.fingerprint()
    return fingerprint, stable_hash("rerank", fingerprint)


def pair_key(fp_hash: str, query: str, text: str) -> str:
    digest = hashlib.sha256()
    for part in (fp_hash, query, text):
        digest.update(part.encode("utf-8"))
        digest.update(b"\0")
    return digest.hexdigest()


def cache_dir(store: str | Path, reranker: Reranker, fp_hash: str) -> Path:
    return Path(store) / "rerank" / f"{reranker.kind}-{fp_hash[:16]}"


def rerank_run(run: pl.DataFrame, reranker: Reranker, reranker_name: str, queries: pl.DataFrame,
               chunks: pl.DataFrame | str | Path, store: str | Path, *, system: str, top_n: int = 100,
               batch_size: int | None = None, keep_tail: bool = True, force: bool = False,
               progress: Callable[[str], None] | None = None) -> RerankResult:
    """The first-stage `run` with each query's top `top_n` documents re-ordered by the reranker.

    `queries`: query_id, text; `chunks`: chunk_id, text (a frame or a parquet path). With
    `keep_tail`, documents below the top N follow in their first-stage order (scores below the
    lowest reranked one), so a measure deeper than N is not cut short. `force` scores every pair
    again (the new scores win)."""
    # Documents per call: the argument, else the reranker's own option (HTTP kinds), else 32.
    batch_size = batch_size or getattr(reranker, "documents_per_request", None) or 32
    if top_n < 1 or batch_size < 1:
        raise ValueError(f"top_n ({top_n}) and batch_size ({batch_size}) must be >= 1")
    if hasattr(reranker, "attach_embedding_cache"):  # embedding-rescore: vectors through the store's cache
        reranker.attach_embedding_cache(functools.partial(cached_vectors, store=Path(store), progress=progress))
    fingerprint, fp_hash = fingerprint_hash(reranker)
    ranked = trec_order(run)
    top = _pairs(ranked.filter(pl.col("rank") <= top_n), queries, chunks, fp_hash)
    tail = ranked.filter(pl.col("rank") > top_n) if keep_tail else ranked.clear()
    key = stable_hash("rerank-run-v1", fp_hash, system, reranker_name, top_n, keep_tail,
                      top.select("query_id", "doc_id", "key").rows(),
                      tail.select("query_id", "doc_id", "chunk_id", "score").rows())
    path = Path(store) / "runs" / f"{key}.parquet"
    directory = cache_dir(store, reranker, fp_hash)
    counts: dict = {}

    def build(tmp: str) -> dict:
        with shards.writing(directory):
            if not (directory / "fingerprint.json").exists():
                write_json(directory / "fingerprint.json", fingerprint)
            live = heal_scores(directory, store)
            scored = _score_missing(reranker, top, set() if force else live, directory, batch_size, reranker_name, progress)
            cached = read_scores(directory, top["key"].unique().to_list())
        reranked = _reranked(ranked, top, tail, cached, system, reranker_name)
        write_parquet(reranked, tmp)
        facts = _facts(top, cached)
        counts.update(scored=scored, from_cache=top["key"].n_unique() - scored, **facts)
        return dict(counts)

    built = build_once(store, path, build, parse=parquet_readable, force=force)
    facts = counts
    if not facts:  # found in the store: nothing scored now; its facts from its metadata, else from the cache
        known = built.metadata if "latency" in built.metadata else _facts(top, read_scores(directory, top["key"].unique().to_list()))
        facts = {**known, "scored": 0, "from_cache": top["key"].n_unique()}
    return RerankResult(path=str(path), key=key, computed=built.computed, seconds=built.seconds, system=system,
                        reranker=reranker_name, top_n=top_n, queries=top["query_id"].n_unique(), pairs=top.height,
                        scored=int(facts["scored"]), from_cache=int(facts["from_cache"]), latency=facts["latency"],
                        tokens=int(facts["tokens"]), token_source=facts["token_source"],
                        search_units=float(facts["search_units"]))


def _pairs(top: pl.DataFrame, queries: pl.DataFrame, chunks, fp_hash: str) -> pl.DataFrame:
    """The top rows with the query text, the chunk text and the pair's cache key."""
    if not isinstance(chunks, pl.DataFrame):
        chunks = pl.read_parquet(chunks, columns=["chunk_id", "text"])
    if top["chunk_id"].null_count():
        doc = top.filter(pl.col("chunk_id").is_null()).row(0, named=True)
        raise ValueError(f"run row for query {doc['query_id']!r}, document {doc['doc_id']!r} names no chunk: "
                         "the reranker reads the ranked chunk's text")
    joined = (top.join(queries.select("query_id", pl.col("text").alias("query_text")), on="query_id", how="left")
                 .join(chunks.select("chunk_id", pl.col("text").alias("chunk_text")), on="chunk_id", how="left"))
    for column, what in (("query_text", "query_id"), ("chunk_text", "chunk_id")):
        if joined[column].null_count():
            missing = joined.filter(pl.col(column).is_null())[what][0]
            raise ValueError(f"the run names {what} {missing!r}, which has no text in the "
                             f"{'queries' if what == 'query_id' else 'chunks'} given to the rerank stage")
    keys = [pair_key(fp_hash, q, t) for q, t in zip(joined["query_text"], joined["chunk_text"])]
    return joined.with_columns(key=pl.Series(keys, dtype=pl.String))


# Calls that complete within this many seconds of the last shard share the next one: embedding-rescore
# hands back every query's scores at once, and a shard per query was an fsynced file (and sidecar) each.
KEEP_EVERY = 1.0


def _score_missing(reranker, top: pl.DataFrame, live: set[str], directory: Path, batch_size: int, name: str,
                   progress) -> int:
    """Score the pairs whose key is not cached, kept as shards as calls complete (at most a second
    of scored calls waits to be written); pairs scored."""
    missing = top.filter(~pl.col("key").is_in(list(live))).unique("key", keep="first", maintain_order=True)
    if missing.is_empty():
        if progress:
            progress(f"{name}: all {top.height} pairs served from cache, 0 scored")
        return 0
    need_work(f"rerank {missing.height} pairs with {name}")
    planned = plan_batches(reranker, missing, batch_size)
    shown = Progress(f"rerank {name}", missing.height, unit="pairs", emit=progress or log.info)
    written: list[Path] = []
    pending: list[pa.Table] = []
    kept_at = time.monotonic()

    def write_pending() -> int:
        """The scored calls not yet on disk into one shard; how many pairs that was."""
        count = sum(table.num_rows for table in pending)
        if pending:
            written.append(_write_table(directory, pa.concat_tables(pending)))
            pending.clear()
        return count

    def keep() -> None:
        nonlocal kept_at
        count = write_pending()
        if count:
            kept_at = time.monotonic()
            shown.advance(count)  # the pairs are on disk: a stop requested now keeps them

    try:
        for index, batch in _run_batches(reranker, [work for work, _ in planned]):
            pending.append(_score_table(planned[index][1], batch))
            if stop_requested() or time.monotonic() - kept_at >= KEEP_EVERY:
                keep()
        keep()
        shown.finish()
    finally:
        write_pending()  # a later call failed: what was scored stays
        if len(written) > 1:  # also after a failure: what was scored stays, in fewer files
            _merge(directory, written)
    return missing.height


def plan_batches(reranker, missing: pl.DataFrame, batch_size: int) -> list[tuple[object, list[str]]]:
    """The calls that score `missing` (query_text, chunk_text, key; one row per key), as (work, keys).

    A reranker that scores any mix of pairs (`score_pairs`: a local cross-encoder) gets the pairs
    of all queries together, sorted by length (a forward pass pads to its longest pair) in calls
    of its own `pair_batch_size`: work is a list of (query, document). Any other gets one query's
    documents per call, `batch_size` at a time (an API's request has one query; embedding-rescore
    embeds everything it is given at once anyway): work is (query, documents)."""
    if hasattr(reranker, "score_pairs"):
        size = int(getattr(reranker, "pair_batch_size", None) or batch_size)
        rows = sorted(zip(missing["query_text"], missing["chunk_text"], missing["key"]),
                      key=lambda row: len(row[0]) + len(row[1]))
        return [([(q, d) for q, d, _ in rows[start:start + size]], [k for _, _, k in rows[start:start + size]])
                for start in range(0, len(rows), size)]
    planned: list[tuple[object, list[str]]] = []
    for (query_id,), group in missing.group_by("query_id", maintain_order=True):
        texts, keys = group["chunk_text"].to_list(), group["key"].to_list()
        for start in range(0, len(texts), batch_size):
            planned.append(((group["query_text"][0], texts[start:start + batch_size]), keys[start:start + batch_size]))
    return planned


def _run_batches(reranker, work: list):
    """(index into `work`, RerankBatch) per call, in completion order."""
    if hasattr(reranker, "score_pairs"):
        for index, pairs in enumerate(work):
            yield index, reranker.score_pairs(pairs)
        return
    if hasattr(reranker, "score_batches"):
        yield from reranker.score_batches(work)
        return
    for index, (query, docs) in enumerate(work):
        if hasattr(reranker, "score_batch"):
            yield index, reranker.score_batch(query, docs)
        else:
            started = time.perf_counter()
            scores = reranker.score(query, docs)
            yield index, RerankBatch(np.asarray(scores, dtype=np.float64), time.perf_counter() - started)


def _score_table(keys: list[str], batch: RerankBatch) -> pa.Table:
    """A call's rows: each pair's score and its share of the call's seconds, tokens and units."""
    from retbench.tasks.rerankers.base import checked_scores

    n = len(keys)
    scores = checked_scores(batch.scores, n, f"reranker batch of {n}")
    return pa.table({"key": keys, "score": scores, "seconds": np.full(n, batch.seconds / n),
                     "tokens": np.full(n, batch.tokens / n), "token_source": [batch.token_source] * n,
                     "search_units": np.full(n, batch.search_units / n)},
                    schema=SCORE_SCHEMA)


def _write_table(directory: Path, table: pa.Table, stamp: int | None = None) -> Path:
    return shards.write_shard(directory, table, stamp)


def _merge(directory: Path, paths: list[Path]) -> None:
    shards.merge_shards(directory, paths)


shard_paths = shards.shard_paths


def heal_scores(directory: Path, store: str | Path) -> set[str]:
    """The cached keys, after the shard folder's scan (damaged shards quarantined, temp files
    of killed writers removed). Call with the folder's lock held."""
    keys: set[str] = set()
    for _, head in shards.scan_shards(directory, store, ["key"]):
        keys.update(head.column("key").to_pylist())
    return keys


def read_scores(directory: Path, keys: list[str]) -> pl.DataFrame:
    """key, score, seconds, tokens, search_units for `keys`; a newer shard wins over an older one."""
    paths = shard_paths(directory)
    if not paths:
        return pl.DataFrame(schema={f.name: pl.String if f.name in ("key", "token_source") else pl.Float64 for f in SCORE_SCHEMA})
    frames = [pl.read_parquet(p).filter(pl.col("key").is_in(keys)) for p in paths]
    return pl.concat(frames).unique("key", keep="last", maintain_order=True)


def _reranked(ranked: pl.DataFrame, top: pl.DataFrame, tail: pl.DataFrame, cached: pl.DataFrame,
              system: str, reranker_name: str) -> pl.DataFrame:
    scored = top.join(cached.select("key", pl.col("score").alias("rerank_score")), on="key", how="left")
    if scored["rerank_score"].null_count():
        raise RuntimeError(f"{scored['rerank_score'].null_count()} reranked pairs have no cached score")
    head = scored.with_columns(score=pl.col("rerank_score"))
    floor = head.group_by("query_id").agg(floor=pl.col("score").min())
    # Below the top N, first-stage order under the lowest reranked score: floor - 1, floor - 2, ...
    rest = tail.join(floor, on="query_id", how="left").with_columns(
        score=pl.col("floor").fill_null(0.0) - (pl.col("rank") - pl.col("rank").min().over("query_id") + 1).cast(pl.Float64))
    columns = ["query_id", "provider", "index", "nprobe", "rank", "doc_id", "chunk_id", "score"]
    both = pl.concat([head.select(columns), rest.select(columns)]) if rest.height else head.select(columns)
    label = pl.col("index").cast(pl.String) + f"+{reranker_name}"
    return trec_order(both.with_columns(provider=pl.lit(system), index=label)).select(list(RUN_SCHEMA)).cast(RUN_SCHEMA)


def _facts(top: pl.DataFrame, cached: pl.DataFrame) -> dict:
    """Latency per query (its pairs' seconds) and cost over every pair of the run."""
    per_pair = top.select("query_id", "key").join(cached, on="key", how="left")
    per_query = per_pair.group_by("query_id").agg(pl.col("seconds").sum())["seconds"].to_numpy()
    latency = {"queries": int(len(per_query)), "p50": float(np.percentile(per_query, 50)) if len(per_query) else 0.0,
               "p95": float(np.percentile(per_query, 95)) if len(per_query) else 0.0,
               "mean": float(per_query.mean()) if len(per_query) else 0.0,
               "max": float(per_query.max()) if len(per_query) else 0.0}
    if len(per_query):  # the p95's noise band, for the verdict's "cheaper" claims
        latency["p95_low"], latency["p95_high"] = quantile_band(per_query, 0.95)
    return {"pairs": top.height, "latency": latency, "tokens": int(round(per_pair["tokens"].sum())),
            "token_source": weakest_source(*per_pair["token_source"].unique().to_list()),
            "search_units": round(float(per_pair["search_units"].sum()), 6)}
