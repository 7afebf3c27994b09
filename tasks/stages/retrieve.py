"""Search every query in one index and turn chunk hits into a document ranking.

A document takes its best chunk's score (MaxP), one entry per document, *before*
the ranking is cut, and the chunk depth grows until every query has enough
distinct documents: a top-k of chunks can hold far fewer than k documents.

Run files (`runs/<key>.parquet`) have a `.sha256` sidecar and are computed under an flock on
`.<key>.parquet.lock`; a damaged run file is quarantined and computed again.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

import pyarrow.parquet as pq

from tasks.analysis.trec import check_trec_tokens
from tasks.indexes import index_kind
from tasks.stages.embed import EmbeddingSet, load_vectors
from tasks.stages.index import BuiltIndex, build_index, load_index
from tasks.store.build import StageResult, build_once
from tasks.store.files import stable_hash, write_text
from tasks.store.integrity import parquet_readable, recorded_checksum, verify

RUN_SCHEMA = {
    "query_id": pl.String,
    "provider": pl.String,
    "index": pl.String,
    "nprobe": pl.Int64,
    "rank": pl.Int64,
    "doc_id": pl.String,
    "chunk_id": pl.String,
    "score": pl.Float64,
}


@dataclass(frozen=True, kw_only=True)
class RunResult(StageResult):
    """A run file in the store: the ranked documents of every query from one index setting."""

    provider: str
    index: str
    nprobe: int | None
    queries: int
    search_seconds: float  # FAISS search plus MaxP, when computed; 0 when reused


def retrieve(
    built: BuiltIndex,
    doc_set: EmbeddingSet,
    query_set: EmbeddingSet,
    chunks_path: str,
    depth: int,
    nprobe: int | None,
    store: Path,
    force: bool = False,
    filters_path: str | None = None,
    rescore: int | None = None,
    query_params: dict | None = None,
) -> RunResult:
    """`filters_path`: the dataset's metadata-filter groups (tasks/stages/filters.py); its
    queries search only the chunks of the documents their filter allows. `rescore` (binary
    indexes only): Hamming candidates re-scored with the float vectors. `query_params`: any
    other query-time parameter of the index's kind (tasks/indexes), e.g. {"ef_search": 64}."""
    if rescore and not built.settings.is_binary:
        raise ValueError(f"rescore={rescore} applies to binary indexes only, not {built.settings.kind}")
    params = {**({} if rescore is None else {"rescore": rescore}),
              **{k: v for k, v in (query_params or {}).items() if k != "nprobe"}}
    index_file = Path(built.path)
    if not verify(index_file, store, None):  # damaged since the index stage: quarantined, build it again
        built = build_index(doc_set, built.settings, store)
    # Named by content, not by place: a copied or moved store keeps its runs. The index's
    # checksum stands for its bytes (a rebuilt index is a new run); the chunk file is named
    # by its own content hash.
    index_identity = recorded_checksum(index_file) or f"{index_file.stat().st_size}:{index_file.stat().st_mtime_ns}"
    key = stable_hash("run-v2", index_file.name, doc_set.key, index_identity, query_set.key,
                      Path(chunks_path).name, depth, nprobe, *([Path(filters_path).name] if filters_path else []),
                      *(part for name, value in params.items() for part in (name, value)))
    path = Path(store) / "runs" / f"{key}.parquet"
    searched = {"seconds": 0.0}

    def build(tmp: str) -> None:
        run, searched["seconds"] = _document_run_of(built, doc_set, query_set, chunks_path, depth, nprobe, index_file,
                                                    filters_path, params)
        pq.write_table(run.to_arrow(), tmp, compression="zstd")

    made = build_once(store, path, build, parse=parquet_readable, force=force)
    return RunResult(path=str(path), key=key, computed=made.computed, seconds=made.seconds, provider=built.provider,
                     index=index_label(built.settings.kind, params), nprobe=nprobe, queries=query_set.count, search_seconds=searched["seconds"])


def index_label(kind: str, query_params: dict | None) -> str:
    """The run's `index` column: the kind, and its query parameters but nprobe, as the kind
    writes them (the re-scoring depth of a binary search: `binary-rescore100`)."""
    return index_kind(kind).run_label(query_params or {})


def _document_run_of(built, doc_set, query_set, chunks_path, depth, nprobe, index_file,
                     filters_path=None, query_params=None) -> tuple[pl.DataFrame, float]:
    chunk_ids = pl.read_parquet(doc_set.path, columns=["id"])["id"].to_list()
    chunks = pl.read_parquet(chunks_path, columns=["chunk_id", "doc_id"])
    chunk_doc = pl.DataFrame({"chunk_id": chunk_ids}).join(chunks, on="chunk_id", how="left", maintain_order="left")
    if chunk_doc["doc_id"].null_count():
        raise RuntimeError(f"embedding set {doc_set.key[:12]} names chunks not in {chunks_path}")
    doc_ids = chunk_doc["doc_id"].to_numpy()
    query_ids, query_vectors = load_vectors(query_set)

    index = load_index(index_file, expected_dim=query_vectors.shape[1])
    kind = built.settings.index_kind
    params = {**({} if nprobe is None else {"nprobe": nprobe}), **(query_params or {})}
    if params.get("rescore"):  # binary codes: the float vectors re-score the best Hamming candidates
        index.vectors = load_vectors(doc_set)[1]
    kind.set_query_params(index, params)
    started = time.perf_counter()
    # Integer codes: factorising a million string ids on every search would dominate it.
    doc_codes = chunk_doc["doc_id"].rank("dense").to_numpy().astype(np.int64) - 1
    if filters_path:
        from tasks.stages.filters import search_with_filters

        hits = search_with_filters(index, query_vectors, query_ids, doc_codes, doc_ids, depth,
                                   pl.read_parquet(filters_path), nprobe,
                                   search_parameters=lambda selector: kind.search_parameters(index, params, selector))
    else:
        hits = search_documents(index, query_vectors, doc_codes, depth)
    seconds = time.perf_counter() - started

    run = document_run(hits, doc_codes, pl.Series(query_ids), pl.Series(doc_ids), pl.Series(chunk_ids)).with_columns(
        provider=pl.lit(built.provider), index=pl.lit(index_label(built.settings.kind, query_params)), nprobe=pl.lit(nprobe, dtype=pl.Int64),
    ).select(list(RUN_SCHEMA)).cast(RUN_SCHEMA)
    return run, seconds


def search_documents(index, queries: np.ndarray, chunk_doc: np.ndarray, depth: int) -> pl.DataFrame:
    """MaxP document hits as row numbers: columns query, chunk (the document's best chunk), score.

    `chunk_doc` gives each indexed chunk's document, as ids or as integer codes 0..n-1
    (cheaper: nothing to factorise). At most `depth` documents per query. The chunk depth
    starts at 2 x depth and grows 4x for the queries that still have fewer than `depth`
    distinct documents, until the index has nothing more to give them (FAISS pads with -1
    once an IVF query's probed lists are exhausted) or everything was searched.
    """
    doc_codes = chunk_doc if chunk_doc.dtype.kind in "iu" else np.unique(chunk_doc, return_inverse=True)[1]
    wanted = min(depth, int(doc_codes.max()) + 1 if len(doc_codes) else 0)
    pending = np.arange(len(queries))
    chunk_depth = min(index.ntotal, depth * 2)
    parts = []
    while len(pending):
        scores, rows = index.search(queries[pending], chunk_depth)
        hits = _max_per_doc(pending, scores, rows, doc_codes)
        found = np.bincount(hits["query"].to_numpy(), minlength=len(queries))[pending]
        finished = (found >= wanted) | (rows[:, -1] < 0) | (chunk_depth >= index.ntotal)
        parts.append(hits.filter(pl.col("query").is_in(pending[finished])))
        pending = pending[~finished]
        chunk_depth = min(index.ntotal, chunk_depth * 4)
    result = pl.concat(parts) if parts else pl.DataFrame(schema={"query": pl.Int64, "chunk": pl.Int64, "score": pl.Float64})
    # Each query's rows are contiguous and best first; exact ties on score are settled by
    # doc id later (trec_order).
    return result.group_by("query", maintain_order=True).head(depth)


def _max_per_doc(query_rows: np.ndarray, scores: np.ndarray, rows: np.ndarray, doc_codes: np.ndarray) -> pl.DataFrame:
    """A document's first hit in FAISS's best-first order is its best chunk (MaxP)."""
    valid = rows >= 0  # FAISS pads with -1 when the probed IVF lists hold fewer vectors
    chunk = rows[valid].astype(np.int64)
    frame = pl.DataFrame({
        "query": np.repeat(query_rows, rows.shape[1])[valid.ravel()].astype(np.int64),
        "chunk": chunk,
        "doc_code": doc_codes[chunk].astype(np.int64),
        "score": scores[valid].astype(np.float64),
    })
    return frame.unique(subset=["query", "doc_code"], keep="first", maintain_order=True).select("query", "chunk", "score")


def document_run(hits: pl.DataFrame, doc_codes: np.ndarray, query_ids: pl.Series, doc_ids: pl.Series,
                 chunk_ids: pl.Series) -> pl.DataFrame:
    """search_documents' hits as a ranked run: query_id, doc_id, chunk_id, score, rank.

    The trec order (score desc, then doc id desc) is sorted on integers: `doc_codes` must
    rank the doc ids in byte order (polars' dense rank does), so no string is compared.
    """
    ordered = hits.with_columns(doc_code=pl.Series(doc_codes).gather(hits["chunk"])).sort(
        ["query", "score", "doc_code"], descending=[False, True, True])
    return ordered.select(
        query_id=query_ids.gather(ordered["query"]),
        doc_id=doc_ids.gather(ordered["chunk"]),
        chunk_id=chunk_ids.gather(ordered["chunk"]),
        score="score",
        rank=pl.int_range(1, pl.len() + 1).over("query"),
    )


def trec_order(run: pl.DataFrame) -> pl.DataFrame:
    """Order and rank by score desc, then doc id desc, as trec_eval does; ranks restart per query and setting."""
    keys = [c for c in ("provider", "index", "nprobe") if c in run.columns]
    ordered = run.sort([*keys, "query_id", "score", "doc_id"], descending=[False] * len(keys) + [False, True, True], nulls_last=True)
    return ordered.with_columns(rank=pl.int_range(1, pl.len() + 1).over([*keys, "query_id"]))


def write_trec_run(run: pl.DataFrame, path: str | Path) -> Path:
    """One line per hit: `qid Q0 docno rank score tag`, tag = provider/index/nprobe, so
    `retbench eval` scores each setting as its own run. Ids with whitespace are refused: TREC
    fields are whitespace-separated, so the file would not read back (runs.parquet keeps them)."""
    tag = pl.concat_str([pl.col("provider"), pl.col("index"), pl.col("nprobe").cast(pl.String).fill_null("exact")], separator="_")
    check_trec_tokens(run.with_columns(tag=tag), ["query_id", "doc_id", "tag"], f"TREC run {path}")
    lines = trec_order(run).select(
        pl.concat_str([pl.col("query_id"), pl.lit("Q0"), pl.col("doc_id"), pl.col("rank").cast(pl.String), pl.col("score").cast(pl.String), tag], separator=" ")
    ).to_series()
    return write_text(path, "\n".join(lines.to_list()) + "\n")
