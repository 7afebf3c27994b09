"""Score stage: per-query metrics for every (provider, index, nprobe) run, and their means."""
from __future__ import annotations

import polars as pl

from retbench.tasks.analysis.metrics import evaluate

SETTING = ["provider", "index", "nprobe"]


def score_runs(run: pl.DataFrame, qrels: pl.DataFrame, queries: pl.DataFrame, measures: list[str],
               relevance_level: int = 1) -> pl.DataFrame:
    """Per-query table: provider, index, nprobe, query_id, measure, value, plus query language/category/split.

    A judged query a setting retrieved nothing for scores 0 (trec_eval -c), so every setting is
    averaged over the same queries: BM25 finds nothing for a query with no indexed term, and a
    filtered search on an IVF index can starve a query completely (leaving it out would flatter it)."""
    parts = []
    for setting, group in run.group_by(SETTING, maintain_order=True):
        evaluation = evaluate(group.select("query_id", "doc_id", "score"), qrels, measures, relevance_level=relevance_level,
                              complete=True)
        provider, index, nprobe = setting
        parts.append(evaluation.per_query.with_columns(
            provider=pl.lit(provider), index=pl.lit(index), nprobe=pl.lit(nprobe, dtype=pl.Int64)))
    per_query = pl.concat(parts).select(*SETTING, "query_id", "measure", "value")
    meta = queries.select("query_id", pl.col("language").alias("query_language"), "category", "split")
    return per_query.join(meta, on="query_id", how="left")


def summarize(per_query: pl.DataFrame) -> pl.DataFrame:
    """Mean of each measure per setting, with the number of queries averaged."""
    return (
        per_query.group_by([*SETTING, "measure"], maintain_order=True)
        .agg(value=pl.col("value").mean(), queries=pl.len())
        .sort(SETTING, nulls_last=False)
    )
