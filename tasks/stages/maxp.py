"""Chunk hits to document hits (MaxP): a document takes its best chunk's score, and the chunk
depth grows until every query has enough distinct documents. Used by retrieve, the filtered
search (filters.py), BM25 (lexical.py) and the sweep."""
from __future__ import annotations

import numpy as np
import polars as pl


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
