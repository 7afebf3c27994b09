"""The run table every first stage, fusion and reranker writes: its columns (RUN_SCHEMA) and
trec_eval's order of its rows."""
from __future__ import annotations

import polars as pl

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


def trec_order(run: pl.DataFrame) -> pl.DataFrame:
    """Order and rank by score desc, then doc id desc, as trec_eval does; ranks restart per query and setting."""
    keys = [c for c in ("provider", "index", "nprobe") if c in run.columns]
    ordered = run.sort([*keys, "query_id", "score", "doc_id"], descending=[False] * len(keys) + [False, True, True], nulls_last=True)
    return ordered.with_columns(rank=pl.int_range(1, pl.len() + 1).over([*keys, "query_id"]))
