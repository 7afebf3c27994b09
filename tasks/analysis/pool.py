"""The judging pool of a run (issue 32 item 3): what TREC pooling would send to assessors, the
union of every setting's top `depth` documents that have no judgment, one row per (query,
document), in the order that fixes the most holes first.

The order: more settings first (a pair every setting ranked is a hole in every setting's
judged@depth); among pairs as many settings ranked, the higher sum of 1/rank first (ranked
high, and by several); then the best rank; then query id and document id, so the order is total.
"""
from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from retbench.tasks.datasets.document_text import document_text

RUN_COLUMNS = ("setting", "query_id", "doc_id", "chunk_id", "score")
POOL_SCHEMA = {
    "pool_rank": pl.Int64,               # 1 = judge first
    "query_id": pl.String,
    "doc_id": pl.String,
    "chunk_id": pl.String,               # the chunk of the best-ranking setting (null when the run has none)
    "settings": pl.Int64,                # how many settings ranked the document in their top depth
    "reciprocal_rank_sum": pl.Float64,   # sum over those settings of 1 / rank
    "best_rank": pl.Int64,
    "ranked_by": pl.List(pl.Struct({"setting": pl.String, "rank": pl.Int64})),  # best rank first
}


def top_ranked(run: pl.DataFrame | pl.LazyFrame, depth: int, queries: Sequence[str] | None = None) -> pl.DataFrame:
    """Each setting's top `depth` documents per query (setting, query_id, doc_id, chunk_id, rank),
    ranked as the score stage ranks them: score descending in single precision, ties by doc id
    descending (trec_eval's order, tasks/analysis/runs.py; the precision of metrics.py), so the
    top `depth` is the one judged@depth counts. `setting` names one ranking (a provider, index and
    query parameters, or a system); `queries` keeps those queries only."""
    if depth < 1:
        raise ValueError(f"depth must be at least 1 (got {depth})")
    frame = run.lazy()
    missing = [c for c in RUN_COLUMNS if c not in frame.collect_schema().names()]
    if missing:
        raise ValueError(f"run: missing columns {missing} (found {frame.collect_schema().names()})")
    if queries is not None:
        frame = frame.filter(pl.col("query_id").is_in(pl.Series(list(queries), dtype=pl.String).implode()))
    return (
        frame.select(*RUN_COLUMNS[:-1], score=pl.col("score").cast(pl.Float32))
        .sort(["setting", "query_id", "score", "doc_id"], descending=[False, False, True, True])
        .with_columns(rank=pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over(["setting", "query_id"]))
        .filter(pl.col("rank") <= depth)
        .select("setting", "query_id", "doc_id", "chunk_id", "rank")
        .collect()
    )


def judging_pool(top: pl.DataFrame, qrels: pl.DataFrame) -> pl.DataFrame:
    """The unjudged pairs of `top` (top_ranked's table): a pair is judged when qrels has a row
    for it, of any grade, as judged@k counts it. One row per (query, document) in POOL_SCHEMA,
    ordered as the module docstring says, pool_rank numbering that order from 1."""
    unjudged = top.join(qrels.select("query_id", "doc_id").unique(), on=["query_id", "doc_id"], how="anti")
    pairs = (
        unjudged.sort(["query_id", "doc_id", "rank", "setting"])
        .group_by("query_id", "doc_id", maintain_order=True)
        .agg(
            chunk_id=pl.col("chunk_id").first(),
            settings=pl.col("setting").n_unique().cast(pl.Int64),
            reciprocal_rank_sum=(1.0 / pl.col("rank")).sum(),
            best_rank=pl.col("rank").min(),
            ranked_by=pl.struct("setting", "rank"),
        )
        .sort(["settings", "reciprocal_rank_sum", "best_rank", "query_id", "doc_id"],
              descending=[True, True, False, False, False])
        .with_columns(pool_rank=pl.int_range(1, pl.len() + 1, dtype=pl.Int64))
    )
    return pairs.select(list(POOL_SCHEMA)).cast(POOL_SCHEMA)


def judged_share(top: pl.DataFrame, qrels: pl.DataFrame) -> pl.DataFrame:
    """setting, queries, judged: each setting's mean share of judged documents in its top depth
    over the queries it retrieved for (judged@depth as the score stage computes it for those
    queries), before the pool is judged; after, every one is 1."""
    judged = qrels.select("query_id", "doc_id").unique().with_columns(judged=pl.lit(True))
    return (
        top.join(judged, on=["query_id", "doc_id"], how="left")
        .group_by("setting", "query_id").agg(share=pl.col("judged").fill_null(False).mean())
        .group_by("setting").agg(queries=pl.len().cast(pl.Int64), judged=pl.col("share").mean())
        .sort("setting")
    )


def with_texts(pool: pl.DataFrame, queries: pl.DataFrame, corpus: pl.DataFrame,
               chunks: pl.DataFrame | None = None) -> pl.DataFrame:
    """`pool` with `query` (the query's text), `document` (title, blank line, text: what the
    chunker cut), `text` (the chunk that ranked the document, or the whole document when the pair
    has no chunk id or `chunks` does not hold it) and `start`, `end` (the chunk's offsets in
    `document`, null without a chunk)."""
    docs = corpus.filter(pl.col("doc_id").is_in(pool["doc_id"].unique().implode()))
    whole = pl.DataFrame({"doc_id": docs["doc_id"],
                          "document": [document_text(t, x) for t, x in docs.select("title", "text").iter_rows()]},
                         schema={"doc_id": pl.String, "document": pl.String})
    missing = set(pool["doc_id"].unique().to_list()) - set(whole["doc_id"].to_list())
    if missing:
        raise ValueError(f"the run ranks documents that are not in its dataset's corpus: {sorted(missing)[:5]} "
                         f"({len(missing)} in all)")
    if chunks is None:
        chunks = pl.DataFrame(schema={"chunk_id": pl.String, "start": pl.Int64, "end": pl.Int64, "text": pl.String})
    chunk_text = chunks.select("chunk_id", "start", "end", chunk_text="text").filter(
        pl.col("chunk_id").is_in(pool["chunk_id"].drop_nulls().unique().implode()))
    return (
        pool.join(queries.select("query_id", query="text"), on="query_id", how="left", maintain_order="left")
        .join(chunk_text, on="chunk_id", how="left", maintain_order="left")
        .join(whole, on="doc_id", how="left", maintain_order="left")
        .with_columns(text=pl.coalesce("chunk_text", "document"), query=pl.col("query").fill_null(""))
        .drop("chunk_text")
    )


def grade_scale(qrels: pl.DataFrame, default: int = 3) -> int:
    """The highest grade a judge can give: the qrels' highest grade when it is at least 1 (a
    binary collection grades 0-1, a graded one 0-3 or 0-4), else `default`."""
    top = qrels["grade"].max() if qrels.height else None
    return int(top) if top is not None and top >= 1 else default


def ranked_by_text(ranked_by: list[dict]) -> str:
    """"minilm flat #1; bm25 bm25 #4": which settings ranked the document, at which rank."""
    return "; ".join(f"{r['setting']} #{r['rank']}" for r in ranked_by)
