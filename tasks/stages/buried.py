"""The buried-answer signal: did a relevant document rank low because the chunk holding the
answer was diluted by the text around it?

For a query q, a relevant document d and a setting s (its document run under exact search):
- chunk_rank: d's rank in s's run (d scored by its best chunk, MaxP); null when d is not
  in the run's `depth` documents;
- passage_score: the best cosine between q and d's passages, a passage being at most
  PASSAGE_WORDS words cut at sentence ends (the "sentence" chunker with max_words=PASSAGE_WORDS);
- passage_rank: 1 + the number of other documents in s's run scoring above passage_score, i.e.
  the rank d would take were it represented by its best-matching passage alone;
- buried: chunk_rank is beyond k (or null) while passage_rank is within k.
Passages of the relevant documents only are embedded, once per provider (the cache is shared
with every chunking whose chunks coincide with a passage).
"""
from __future__ import annotations

import numpy as np
import polars as pl

from retbench.tasks.stages.chunk import ChunkConfig, chunk_corpus

PASSAGE_WORDS = 40

BURIED_SCHEMA = {
    "provider": pl.String,  # setting label
    "query_id": pl.String,
    "doc_id": pl.String,
    "grade": pl.Int64,
    "chunk_rank": pl.Int64,
    "chunk_id": pl.String,
    "chunk_score": pl.Float64,
    "passage_rank": pl.Int64,
    "passage_id": pl.String,
    "passage_score": pl.Float64,
    "buried": pl.Boolean,
}


def relevant_passages(corpus: pl.DataFrame, qrels: pl.DataFrame, relevance_level: int = 1) -> pl.DataFrame:
    """chunk_id (`<doc>#<i>`), doc_id, text of the passages of every document judged relevant."""
    relevant = qrels.filter(pl.col("grade") >= relevance_level)["doc_id"].unique()
    docs = corpus.filter(pl.col("doc_id").is_in(relevant.implode()))
    return chunk_corpus(docs, ChunkConfig("sentence", max_words=PASSAGE_WORDS)).select("chunk_id", "doc_id", "text")


def buried_table(run: pl.DataFrame, query_ids: list[str], query_vectors: np.ndarray, passages: pl.DataFrame,
                 passage_ids: list[str], passage_vectors: np.ndarray, qrels: pl.DataFrame, k: int,
                 relevance_level: int = 1) -> pl.DataFrame:
    """BURIED_SCHEMA rows for every (query, relevant document) of one setting's exact-search run."""
    label = run["provider"][0]
    relevant = qrels.filter(pl.col("grade") >= relevance_level).select("query_id", "doc_id", "grade")
    doc_of = dict(passages.select("chunk_id", "doc_id").iter_rows())
    passage_docs = np.array([doc_of[p] for p in passage_ids])
    rows_of_doc: dict[str, np.ndarray] = {d: np.flatnonzero(passage_docs == d) for d in np.unique(passage_docs)}
    query_row = {q: i for i, q in enumerate(query_ids)}
    scores_by_query = {q: g for (q,), g in run.select("query_id", "doc_id", "chunk_id", "rank", "score")
                       .group_by("query_id")}
    rows = []
    for query_id, doc_id, grade in relevant.iter_rows():
        if query_id not in query_row or doc_id not in rows_of_doc:
            continue
        candidates = rows_of_doc[doc_id]
        sims = passage_vectors[candidates] @ query_vectors[query_row[query_id]]
        best = int(np.argmax(sims))
        passage_score = float(sims[best])
        hits = scores_by_query.get(query_id, pl.DataFrame(schema={"doc_id": pl.String, "chunk_id": pl.String,
                                                                     "rank": pl.Int64, "score": pl.Float64}))
        mine = hits.filter(pl.col("doc_id") == doc_id)
        others = hits.filter(pl.col("doc_id") != doc_id)["score"].to_numpy()
        passage_rank = 1 + int((others > passage_score).sum())
        chunk_rank = mine["rank"][0] if mine.height else None
        buried = (chunk_rank is None or chunk_rank > k) and passage_rank <= k
        rows.append((label, query_id, doc_id, grade, chunk_rank, mine["chunk_id"][0] if mine.height else None,
                     float(mine["score"][0]) if mine.height else None, passage_rank, passage_ids[candidates[best]],
                     passage_score, buried))
    return pl.DataFrame(rows, schema=BURIED_SCHEMA, orient="row")


def failures_with_buried(failures: pl.DataFrame, buried: pl.DataFrame) -> pl.DataFrame:
    """`failures` plus, per row, the relevant document whose passage ranks best in the same setting
    under exact search: buried_doc, buried_chunk_rank, buried_passage_rank, buried_passage_id and
    `buried` (true when any relevant document of the query is buried in that setting)."""
    per_query = (
        buried.sort("passage_rank", "doc_id")
        .group_by("provider", "query_id", maintain_order=True)
        .agg(buried=pl.col("buried").any(),
             buried_doc=pl.col("doc_id").sort_by(~pl.col("buried"), "passage_rank").first(),
             buried_chunk_rank=pl.col("chunk_rank").sort_by(~pl.col("buried"), "passage_rank").first(),
             buried_passage_rank=pl.col("passage_rank").sort_by(~pl.col("buried"), "passage_rank").first(),
             buried_passage_id=pl.col("passage_id").sort_by(~pl.col("buried"), "passage_rank").first())
    )
    return failures.join(per_query, on=["provider", "query_id"], how="left", maintain_order="left")
