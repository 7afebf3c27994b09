"""Per-query failure log: every query a setting scores below a threshold, with what it retrieved
and why it failed (nothing relevant found, found but ranked low, or lost by the ANN index).

Rankings follow trec_eval's order (score descending, doc id descending), as the scores do.
"""
from __future__ import annotations

import polars as pl

from retbench.tasks.analysis.runs import trec_order

SETTING = ["provider", "index", "nprobe"]
FLAT = "flat"
CLASSES = ("ann_lost", "absent", "misranked")

HIT = pl.Struct({
    "rank": pl.Int64,
    "doc_id": pl.String,
    "chunk_id": pl.String,
    "score": pl.Float64,
    "grade": pl.Int64,  # null: unjudged
    "relevant": pl.Boolean,
})
FAILURE_SCHEMA = {
    "provider": pl.String,
    "index": pl.String,
    "nprobe": pl.Int64,
    "query_id": pl.String,
    "query_text": pl.String,
    "query_language": pl.String,
    "category": pl.String,
    "split": pl.String,
    "measure": pl.String,
    "value": pl.Float64,
    "relevant_judged": pl.Int64,
    "first_relevant_rank": pl.Int64,
    "exact_first_relevant_rank": pl.Int64,
    "failure_class": pl.String,
    "top_k": pl.List(HIT),
}
# nprobe is null for exact search; joins on it need a non-null stand-in.
_NPROBE_KEY = pl.col("nprobe").fill_null(-1).alias("_nprobe")


def _require(df: pl.DataFrame, columns, what: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{what}: missing columns {missing} (found {df.columns})")


def failure_table(run: pl.DataFrame, per_query: pl.DataFrame, queries: pl.DataFrame, qrels: pl.DataFrame,
                  measure: str = "ndcg@10", threshold: float = 0.5, k: int = 10,
                  relevance_level: int = 1) -> pl.DataFrame:
    """One row per (setting, query) whose `measure` is below `threshold`.

    Columns (FAILURE_SCHEMA): the query's text, language, category and split; its value; how
    many relevant documents it has; the 1-based rank of the first relevant document in the
    whole run (null if none retrieved) and, for ANN settings, the same under exact search of
    the same provider; `top_k`, the first k hits with score, chunk id, grade (null when
    unjudged) and relevance; and `failure_class`:

    - ann_lost: an ANN setting with no relevant document in its top k where exact search of the
      same provider had one (takes precedence over absent);
    - absent: no relevant document in the top k;
    - misranked: a relevant document is in the top k, but the ranking still scores below the
      threshold (relevant documents below non-relevant ones, or in the wrong grade order).
    """
    if k < 1:
        raise ValueError(f"k must be a positive integer (got {k})")
    _require(run, [*SETTING, "query_id", "doc_id", "chunk_id", "score"], "run")
    _require(per_query, [*SETTING, "query_id", "measure", "value"], "per_query")
    _require(queries, ["query_id", "text", "language", "category", "split"], "queries")
    _require(qrels, ["query_id", "doc_id", "grade"], "qrels")
    known = per_query["measure"].unique().to_list()
    if measure not in known:
        raise ValueError(f"per_query has no measure {measure!r} (found {sorted(known)})")

    failing = (
        per_query.filter((pl.col("measure") == measure) & (pl.col("value") < threshold))
        .select(*SETTING, "query_id", "measure", "value")
        .with_columns(_NPROBE_KEY)
    )
    judged = qrels.select("query_id", "doc_id", pl.col("grade").cast(pl.Int64))
    ranked = (
        trec_order(run.select(*SETTING, "query_id", "doc_id", "chunk_id", pl.col("score").cast(pl.Float64)))
        .join(judged, on=["query_id", "doc_id"], how="left")
        .with_columns(relevant=pl.col("grade").fill_null(-1) >= relevance_level, _nprobe=_NPROBE_KEY)
    )
    keys = ["provider", "index", "_nprobe", "query_id"]
    first = (
        ranked.filter("relevant").group_by(keys).agg(first_relevant_rank=pl.col("rank").min())
    )
    top = (
        ranked.filter(pl.col("rank") <= k)
        .sort([*keys, "rank"])
        .group_by(keys, maintain_order=True)
        .agg(top_k=pl.struct(list(HIT.to_schema())))
    )
    exact_first = (
        first.filter(pl.col("index") == FLAT)
        .select("provider", "query_id", exact_first_relevant_rank="first_relevant_rank")
    )
    relevant_judged = (
        judged.filter(pl.col("grade") >= relevance_level).group_by("query_id").agg(relevant_judged=pl.len())
    )
    meta = queries.select("query_id", query_text="text", query_language="language", category="category", split="split")

    table = (
        failing.join(first, on=keys, how="left")
        .join(top, on=keys, how="left")
        .join(exact_first, on=["provider", "query_id"], how="left")
        .join(relevant_judged, on="query_id", how="left")
        .join(meta, on="query_id", how="left")
        .with_columns(
            pl.col("relevant_judged").fill_null(0),
            pl.col("top_k").fill_null(pl.lit([], dtype=pl.List(HIT))),
            # exact search compares only against ANN settings
            exact_first_relevant_rank=pl.when(pl.col("index") != FLAT).then("exact_first_relevant_rank"),
        )
    )
    in_top = pl.col("first_relevant_rank").is_not_null() & (pl.col("first_relevant_rank") <= k)
    exact_in_top = pl.col("exact_first_relevant_rank").is_not_null() & (pl.col("exact_first_relevant_rank") <= k)
    table = table.with_columns(
        failure_class=pl.when(in_top).then(pl.lit("misranked"))
        .when((pl.col("index") != FLAT) & exact_in_top).then(pl.lit("ann_lost"))
        .otherwise(pl.lit("absent"))
    )
    return (
        table.select(list(FAILURE_SCHEMA)).cast(FAILURE_SCHEMA)
        .sort([*SETTING, "query_id"], nulls_last=False)
    )


def failure_counts(failures: pl.DataFrame) -> pl.DataFrame:
    """Failures per setting and class: provider, index, nprobe, failure_class, queries."""
    return (
        failures.group_by([*SETTING, "failure_class"]).agg(queries=pl.len())
        .sort([*SETTING, "failure_class"], nulls_last=False)
    )
