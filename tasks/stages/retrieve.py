"""Search every query in one index and turn chunk hits into a document ranking.

A document takes its best chunk's score (MaxP), one entry per document, *before*
the ranking is cut, and the chunk depth grows until every query has enough
distinct documents: a top-k of chunks can hold far fewer than k documents.

Run files (`runs/<key>.parquet`) have a `.sha256` sidecar and are computed under an flock on
`.<key>.parquet.lock`; a damaged run file is quarantined and computed again.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import faiss
import numpy as np
import polars as pl

import pyarrow.parquet as pq

from retbench.tasks.analysis.runs import RUN_SCHEMA, trec_order
from retbench.tasks.analysis.trec import check_trec_tokens
from retbench.tasks.indexes import index_kind
from retbench.tasks.indexes.sharded import ExactSearch
from retbench.tasks.stages.embed import EmbeddingSet, load_vectors
from retbench.tasks.stages.filters import search_with_filters
from retbench.tasks.stages.index import BuiltIndex, build_index, load_index
from retbench.tasks.stages.maxp import document_run, search_documents
from retbench.tasks.stages.sharded_index import build_sharded_index
from retbench.tasks.stages.sharded_search import SHARDABLE, CacheRows, sharded_search
from retbench.tasks.store.build import StageResult, build_once
from retbench.tasks.store.files import stable_hash, write_text
from retbench.tasks.store.integrity import parquet_readable, recorded_checksum, verify

log = logging.getLogger("retbench")


@dataclass(frozen=True, kw_only=True)
class RunResult(StageResult):
    """A run file in the store: the ranked documents of every query from one index setting."""

    provider: str
    index: str
    nprobe: int | None
    queries: int
    search_seconds: float  # FAISS search plus MaxP, when computed; 0 when reused
    # Every query-time parameter of the search as sorted (name, value) pairs, nprobe included: the
    # `params` column of its Setting (tasks/config/setting.py). `index` keeps the kind's run label.
    query_params: tuple = ()


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
    shards: int | None = None,
) -> RunResult:
    """`filters_path`: the dataset's metadata-filter groups (tasks/stages/filters.py); its
    queries search only the chunks of the documents their filter allows. `rescore` (binary
    indexes only): Hamming candidates re-scored with the float vectors. `query_params`: any
    other query-time parameter of the index's kind (tasks/indexes), e.g. {"ef_search": 64}.
    `shards` (flat and IVF, without filters): searched by that many Dask workers, each holding
    one row range of the vectors (tasks/stages/sharded_search.py); the run is the same file, so
    it does not name it."""
    if rescore and not built.settings.is_binary:
        raise ValueError(f"rescore={rescore} applies to binary indexes only, not {built.settings.kind}")
    params = {**({} if rescore is None else {"rescore": rescore}),
              **{k: v for k, v in (query_params or {}).items() if k != "nprobe"}}
    if built.shards and (not shards or filters_path):  # no shards to search: the whole index, built in one process
        log.warning(f"{built.settings.kind} index built for {built.shards} shards but searched in one process "
                    f"({'the dataset has metadata filters' if filters_path else 'no indexes.shards'}): building it whole")
        built = build_index(doc_set, built.settings, store)
    index_file = Path(built.path)
    if not verify(index_file, store, None):  # damaged since the index stage: quarantined, build it again
        built = (build_sharded_index(doc_set, built.settings, store, built.shards) if built.shards
                 else build_index(doc_set, built.settings, store))
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
                                                    filters_path, params, shards)
        pq.write_table(run.to_arrow(), tmp, compression="zstd")

    made = build_once(store, path, build, parse=parquet_readable, force=force)
    return RunResult(path=str(path), key=key, computed=made.computed, seconds=made.seconds, provider=built.provider,
                     index=index_label(built.settings.kind, params), nprobe=nprobe, queries=query_set.count,
                     search_seconds=searched["seconds"],
                     query_params=tuple(sorted({**params, **({} if nprobe is None else {"nprobe": nprobe})}.items())))


def index_label(kind: str, query_params: dict | None) -> str:
    """The run's `index` column: the kind, and its query parameters but nprobe, as the kind
    writes them (the re-scoring depth of a binary search: `binary-rescore100`)."""
    return index_kind(kind).run_label(query_params or {})


def _document_run_of(built, doc_set, query_set, chunks_path, depth, nprobe, index_file,
                     filters_path=None, query_params=None, shards=None) -> tuple[pl.DataFrame, float]:
    chunk_ids = pl.read_parquet(doc_set.path, columns=["id"])["id"].to_list()
    chunks = pl.read_parquet(chunks_path, columns=["chunk_id", "doc_id"])
    chunk_doc = pl.DataFrame({"chunk_id": chunk_ids}).join(chunks, on="chunk_id", how="left", maintain_order="left")
    if chunk_doc["doc_id"].null_count():
        raise RuntimeError(f"embedding set {doc_set.key[:12]} names chunks not in {chunks_path}")
    doc_ids = chunk_doc["doc_id"].to_numpy()
    query_ids, query_vectors = load_vectors(query_set)

    kind = built.settings.index_kind
    params = {**({} if nprobe is None else {"nprobe": nprobe}), **(query_params or {})}
    sharded = bool(shards) and kind.name in SHARDABLE and not filters_path
    if shards and not sharded:
        log.warning(f"indexes.shards: {built.settings.kind} searched in one process "
                    f"({'the dataset has metadata filters' if filters_path else 'only flat and ivf are sharded'})")
    index = None if sharded else load_index(index_file, expected_dim=query_vectors.shape[1])
    if params.get("rescore"):  # binary codes: the float vectors re-score the best Hamming candidates
        index.vectors = load_vectors(doc_set)[1]
    if index is not None:
        kind.set_query_params(index, params)
    if sharded:  # the shards are loaded before the clock starts, as a loaded index is
        searcher = _sharded(built, doc_set, index_file, shards, nprobe)
    elif kind.name in SHARDABLE:  # the same canonical order of ties as a sharded search
        searcher = ExactSearch(ntotal=index.ntotal, d=index.d, index=index,
                               ivf=index if kind.name == "ivf" else None, nprobe=nprobe)
    else:
        searcher = index
    started = time.perf_counter()
    # Integer codes: factorising a million string ids on every search would dominate it.
    doc_codes = chunk_doc["doc_id"].rank("dense").to_numpy().astype(np.int64) - 1
    if filters_path:
        hits = search_with_filters(index, query_vectors, query_ids, doc_codes, doc_ids, depth,
                                   pl.read_parquet(filters_path), nprobe,
                                   search_parameters=lambda selector: kind.search_parameters(index, params, selector))
    else:
        hits = search_documents(searcher, query_vectors, doc_codes, depth)
    seconds = time.perf_counter() - started

    run = document_run(hits, doc_codes, pl.Series(query_ids), pl.Series(doc_ids), pl.Series(chunk_ids)).with_columns(
        provider=pl.lit(built.provider), index=pl.lit(index_label(built.settings.kind, query_params)), nprobe=pl.lit(nprobe, dtype=pl.Int64),
    ).select(list(RUN_SCHEMA)).cast(RUN_SCHEMA)
    return run, seconds


def _sharded(built, doc_set, index_file: Path, shards: int, nprobe: int | None) -> ExactSearch:
    """The set's rows over `shards` workers; IVF shards fill empty copies of the built index's
    trained quantizer (its file is mapped, its lists never read)."""
    ivf = None
    if built.settings.kind == "ivf":
        ivf = faiss.read_index(str(index_file), faiss.IO_FLAG_MMAP)
        nprobe = nprobe or faiss.extract_index_ivf(ivf).nprobe
    key = (doc_set.key, index_file.name, recorded_checksum(index_file), shards)
    return sharded_search(CacheRows(doc_set), shards, ivf=ivf, nprobe=nprobe, key=key)


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
