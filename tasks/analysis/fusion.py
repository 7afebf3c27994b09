"""Hybrid runs: reciprocal rank fusion of two or more run frames (RUN_SCHEMA), normalised score
fusion of two, and the choice of the score-fusion weight on the dev split only, reported on test.

Both fuse per query over the union of the runs' documents. RRF gives a document
1 / (k + rank) for each run that holds it (nothing for a run that does not: Cormack et al. 2009).
Score fusion gives alpha * a + (1 - alpha) * b on per-query normalised scores; a document missing
from one run gets that run's floor for the query (its lowest normalised score; 0 when the run has
nothing for the query), i.e. it is treated as no better than the worst document the run returned.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Sequence

import polars as pl

from retbench.tasks.analysis.metrics import evaluate, parse_measure
from retbench.tasks.analysis.runs import RUN_SCHEMA, trec_order

Normalization = Literal["minmax", "zscore"]


def _ranked(run: pl.DataFrame, what: str) -> pl.DataFrame:
    """query_id, doc_id, chunk_id, score, rank in trec order (ranks recomputed, not trusted)."""
    missing = {"query_id", "doc_id", "score"} - set(run.columns)
    if missing:
        raise ValueError(f"run {what} lacks column(s) {sorted(missing)} (a run frame has {list(RUN_SCHEMA)})")
    if run.select(pl.struct("query_id", "doc_id").is_duplicated().any()).item():
        dup = run.filter(pl.struct("query_id", "doc_id").is_duplicated()).row(0, named=True)
        raise ValueError(f"run {what} ranks document {dup['doc_id']!r} twice for query {dup['query_id']!r}")
    if run["score"].is_nan().any() or run["score"].is_infinite().any():
        raise ValueError(f"run {what} has non-finite scores")
    frame = run.select("query_id", "doc_id", pl.col("chunk_id") if "chunk_id" in run.columns else pl.lit(None, pl.String).alias("chunk_id"),
                       pl.col("score").cast(pl.Float64))
    return trec_order(frame)


def _as_run(fused: pl.DataFrame, name: str, label: str, depth: int | None) -> pl.DataFrame:
    run = trec_order(fused.with_columns(provider=pl.lit(name), index=pl.lit(label), nprobe=pl.lit(None, dtype=pl.Int64)))
    if depth is not None:
        run = run.filter(pl.col("rank") <= depth)
    return run.select(list(RUN_SCHEMA)).cast(RUN_SCHEMA)


def _union(a: pl.DataFrame, b: pl.DataFrame, value: str) -> pl.DataFrame:
    joined = a.select("query_id", "doc_id", "chunk_id", pl.col(value).alias("a")).join(
        b.select("query_id", "doc_id", pl.col("chunk_id").alias("chunk_b"), pl.col(value).alias("b")),
        on=["query_id", "doc_id"], how="full", coalesce=True)
    # The chunk that stands for the document: the first run's, else the second's.
    return joined.with_columns(chunk_id=pl.coalesce("chunk_id", "chunk_b")).drop("chunk_b")


def reciprocal_rank_fusion(a: pl.DataFrame, b: pl.DataFrame, *more: pl.DataFrame, k: int = 60, name: str = "rrf",
                           depth: int | None = None) -> pl.DataFrame:
    """RRF of two or more runs: score = sum over runs holding the document of 1 / (k + rank),
    added in the order the runs are given."""
    if k < 1:
        raise ValueError(f"RRF k must be >= 1 (got {k})")
    runs = [a, b, *more]
    what = ["a", "b"] + [f"#{i}" for i in range(3, len(runs) + 1)]
    ranked = [_ranked(run, label).with_columns(rrf=1.0 / (k + pl.col("rank"))) for run, label in zip(runs, what)]
    fused = _union(ranked[0], ranked[1], "rrf").rename({"a": "rrf0", "b": "rrf1"})
    for i, run in enumerate(ranked[2:], start=2):
        # The chunk that stands for the document: that of the first run holding it.
        fused = fused.join(run.select("query_id", "doc_id", pl.col("chunk_id").alias("chunk_next"), pl.col("rrf").alias(f"rrf{i}")),
                           on=["query_id", "doc_id"], how="full", coalesce=True)
        fused = fused.with_columns(chunk_id=pl.coalesce("chunk_id", "chunk_next")).drop("chunk_next")
    score = pl.col("rrf0").fill_null(0.0)
    for i in range(1, len(ranked)):
        score = score + pl.col(f"rrf{i}").fill_null(0.0)
    fused = fused.with_columns(score=score)
    return _as_run(fused.select("query_id", "doc_id", "chunk_id", "score"), name, f"rrf-k{k}", depth)


def normalized_scores(run: pl.DataFrame, method: Normalization) -> pl.DataFrame:
    """The run's scores normalised per query: min-max to [0, 1], or z-scores (population std).
    A query whose scores are all equal gets 0 for every document (no evidence either way)."""
    s = pl.col("score")
    if method == "minmax":
        spread = s.max().over("query_id") - s.min().over("query_id")
        value = pl.when(spread > 0).then((s - s.min().over("query_id")) / spread).otherwise(0.0)
    elif method == "zscore":
        std = s.std(ddof=0).over("query_id")
        value = pl.when(std > 0).then((s - s.mean().over("query_id")) / std).otherwise(0.0)
    else:
        raise ValueError(f"unknown normalisation {method!r} (minmax, zscore)")
    return run.with_columns(norm=value)


def score_fusion(a: pl.DataFrame, b: pl.DataFrame, *, alpha: float, normalization: Normalization = "minmax",
                 name: str = "fusion", depth: int | None = None) -> pl.DataFrame:
    """alpha * norm(a) + (1 - alpha) * norm(b) per query; a missing document gets that run's floor."""
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha must be in [0, 1] (got {alpha})")
    na = normalized_scores(_ranked(a, "a"), normalization)
    nb = normalized_scores(_ranked(b, "b"), normalization)
    floors = (na.group_by("query_id").agg(floor_a=pl.col("norm").min())
              .join(nb.group_by("query_id").agg(floor_b=pl.col("norm").min()), on="query_id", how="full", coalesce=True))
    fused = _union(na, nb, "norm").join(floors, on="query_id", how="left").with_columns(
        score=alpha * pl.coalesce("a", "floor_a", pl.lit(0.0)) + (1 - alpha) * pl.coalesce("b", "floor_b", pl.lit(0.0)))
    return _as_run(fused.select("query_id", "doc_id", "chunk_id", "score"), name, f"{normalization}-a{alpha:g}", depth)


@dataclass(frozen=True)
class AlphaChoice:
    """The weight chosen on dev, what every weight scored there, and the chosen weight on test."""

    alpha: float
    measure: str
    normalization: str
    dev_scores: dict[float, float]  # alpha -> mean measure over the dev queries
    dev_queries: int
    test_score: float | None  # None when there are no test queries
    test_queries: int
    run: pl.DataFrame = field(repr=False)  # the fused run at the chosen alpha, every query

    def manifest(self) -> dict:
        """Plain values for the run manifest."""
        return {"alpha": self.alpha, "measure": self.measure, "normalization": self.normalization,
                "chosen_on": "dev", "dev_queries": self.dev_queries, "test_queries": self.test_queries,
                "dev_scores": {f"{a:g}": s for a, s in self.dev_scores.items()}, "test_score": self.test_score}


def choose_alpha(a: pl.DataFrame, b: pl.DataFrame, qrels: pl.DataFrame, queries: pl.DataFrame, *,
                 alphas: Sequence[float] = tuple(i / 10 for i in range(11)), measure: str = "ndcg@10",
                 normalization: Normalization = "minmax", name: str = "fusion", depth: int | None = None) -> AlphaChoice:
    """Sweep alpha on the dev queries only (queries' `split` column), keep the best (ties: the
    smaller alpha), and score that one alpha on the test queries. Queries without hits score 0."""
    if "split" not in queries.columns:
        raise ValueError("queries need a `split` column (dev/test) to choose alpha on dev only")
    canonical = str(parse_measure(measure))
    dev_ids = queries.filter(pl.col("split") == "dev")["query_id"]
    test_ids = queries.filter(pl.col("split") == "test")["query_id"]
    dev_qrels = qrels.filter(pl.col("query_id").is_in(dev_ids.implode()) & (pl.col("grade") > 0))
    if dev_qrels.is_empty():
        raise ValueError("no judged dev query: alpha can only be chosen on dev queries with judgments "
                         f"({dev_ids.len()} dev queries, {test_ids.len()} test queries)")
    scores: dict[float, float] = {}
    for alpha in sorted(set(alphas)):
        fused = score_fusion(a.filter(pl.col("query_id").is_in(dev_ids.implode())),
                             b.filter(pl.col("query_id").is_in(dev_ids.implode())),
                             alpha=alpha, normalization=normalization, name=name, depth=depth)
        scores[alpha] = _mean(fused, dev_qrels, canonical)
    best = max(scores.values())
    chosen = min(alpha for alpha, value in scores.items() if value == best)
    run = score_fusion(a, b, alpha=chosen, normalization=normalization, name=name, depth=depth)
    test_qrels = qrels.filter(pl.col("query_id").is_in(test_ids.implode()) & (pl.col("grade") > 0))
    test_score = _mean(run.filter(pl.col("query_id").is_in(test_ids.implode())), test_qrels, canonical) if test_qrels.height else None
    return AlphaChoice(alpha=chosen, measure=canonical, normalization=normalization, dev_scores=scores,
                       dev_queries=dev_qrels["query_id"].n_unique(), test_score=test_score,
                       test_queries=test_qrels["query_id"].n_unique(), run=run)


def _mean(run: pl.DataFrame, qrels: pl.DataFrame, measure: str) -> float:
    if run.is_empty():
        return 0.0
    return float(evaluate(run, qrels, [measure], complete=True).means()[measure])
