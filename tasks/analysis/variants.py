"""Chunking and query variants against their baseline: paired differences per language pair and
category, and, in the failure log, which variant surfaced a relevant chunk the failing one missed.
"""
from __future__ import annotations

import polars as pl

from retbench.tasks.analysis.breakdown import language_pairs, paired_comparison

FLAT = "flat"
VARIANT_MEASURES = ("ndcg@10", "recall@10")
VARIANT_SLICES = ("all", "language_pair", "category")

VARIANT_COMPARISON_SCHEMA = {
    "setting": pl.String,
    "baseline": pl.String,
    "variant_kind": pl.String,
    "slice_kind": pl.String,
    "slice": pl.String,
    "measure": pl.String,
    "n": pl.Int64,
    "mean_variant": pl.Float64,
    "mean_baseline": pl.Float64,
    "diff": pl.Float64,
    "ci_low": pl.Float64,
    "ci_high": pl.Float64,
    "p_value": pl.Float64,
}
SURFACED = pl.Struct({"setting": pl.String, "rank": pl.Int64, "doc_id": pl.String, "chunk_id": pl.String})


def variant_comparisons(per_query: pl.DataFrame, settings: pl.DataFrame, queries: pl.DataFrame, qrels: pl.DataFrame,
                        corpus: pl.DataFrame, measures=VARIANT_MEASURES, resamples: int = 1000,
                        permutations: int = 10000, seed: int = 0, level: float = 0.95) -> pl.DataFrame:
    """Every variant setting minus its baseline under exact search, on the whole query set and per
    language pair and category: paired bootstrap CI of the mean difference and a sign-flip test
    (diff > 0: the variant is better)."""
    measures = [m for m in measures if m in set(per_query["measure"].unique())]
    scored = per_query.filter((pl.col("index") == FLAT) & pl.col("measure").is_in(measures))
    pairs = language_pairs(queries, qrels, corpus)
    slices = (queries.select("query_id", "category")
              .join(pairs.select("query_id", "language_pair"), on="query_id", how="left")
              .with_columns(all=pl.lit("all")))
    present = set(scored["provider"].unique())
    rows = []
    for setting, baseline, kind in settings.filter(pl.col("baseline").is_not_null()).select(
            "setting", "baseline", "variant_kind").iter_rows():
        if setting not in present or baseline not in present:
            continue
        for slice_kind in VARIANT_SLICES:
            for (value,), part in slices.group_by(slice_kind, maintain_order=True):
                subset = scored.filter(pl.col("query_id").is_in(part["query_id"].implode()))
                if subset.filter(pl.col("provider") == setting).height == 0:
                    continue
                compared = paired_comparison(subset, (setting, FLAT, None), (baseline, FLAT, None),
                                             resamples, permutations, seed, level)
                for row in compared.iter_rows(named=True):
                    rows.append((setting, baseline, kind, slice_kind, str(value), row["measure"], row["n"],
                                 row["mean_a"], row["mean_b"], row["diff"], row["ci_low"], row["ci_high"],
                                 row["p_value"]))
    return pl.DataFrame(rows, schema=VARIANT_COMPARISON_SCHEMA, orient="row")


def surfaced_by(failures: pl.DataFrame, run: pl.DataFrame, qrels: pl.DataFrame, settings: pl.DataFrame, k: int,
                relevance_level: int = 1) -> pl.DataFrame:
    """`failures` plus `surfaced_by`: the other settings of the same provider (chunking or query
    variants, or the baseline), at the same index and nprobe, that put a relevant document in
    their top k for this query, with its rank and the chunk that matched (empty: none did)."""
    provider_of = settings.select(pl.col("setting").alias("provider"), base=pl.col("provider"))
    relevant = qrels.filter(pl.col("grade") >= relevance_level).select("query_id", "doc_id")
    first = (
        run.join(relevant, on=["query_id", "doc_id"])
        .filter(pl.col("rank") <= k)
        .sort("rank")
        .group_by("provider", "index", "nprobe", "query_id", maintain_order=True).first()
        .join(provider_of, on="provider")
        .with_columns(_nprobe=pl.col("nprobe").fill_null(-1))
        .select("base", "index", "_nprobe", "query_id",
                hit=pl.struct(setting="provider", rank="rank", doc_id="doc_id", chunk_id="chunk_id"))
    )
    keyed = (failures.with_row_index("_row").join(provider_of, on="provider", how="left")
             .with_columns(_nprobe=pl.col("nprobe").fill_null(-1)))
    found = (
        keyed.select("_row", "provider", "base", "index", "_nprobe", "query_id")
        .join(first, on=["base", "index", "_nprobe", "query_id"])
        .filter(pl.col("hit").struct.field("setting") != pl.col("provider"))
        .group_by("_row").agg(surfaced_by=pl.col("hit"))
    )
    return (
        keyed.join(found, on="_row", how="left")
        .with_columns(pl.col("surfaced_by").fill_null(pl.lit([], dtype=pl.List(SURFACED))).cast(pl.List(SURFACED)))
        .sort("_row").drop("_row", "base", "_nprobe")
    )
