"""What an approximate index loses against exact search on the same vectors:
top-k overlap per query, and the change in every metric."""
from __future__ import annotations

import polars as pl

from retbench.tasks.analysis.score import SETTING


def topk_overlap(run: pl.DataFrame, ks: list[int]) -> pl.DataFrame:
    """Per query and approximate setting: |approx top-k ∩ exact top-k| / |exact top-k|.

    The exact top-k can hold fewer than k documents on a tiny corpus; dividing by
    its size keeps a perfect approximate index at 1.0.
    """
    exact = run.filter(pl.col("index") == "flat").select("provider", "query_id", "rank", "doc_id")
    approx = run.filter(pl.col("index") != "flat")
    parts = []
    for k in ks:
        exact_k = exact.filter(pl.col("rank") <= k)
        sizes = exact_k.group_by("provider", "query_id").agg(exact_size=pl.len())
        shared = (
            approx.filter(pl.col("rank") <= k)
            .join(exact_k.select("provider", "query_id", "doc_id"), on=["provider", "query_id", "doc_id"], how="semi")
            .group_by([*SETTING, "query_id"]).agg(shared=pl.len())
        )
        settings = approx.select(*SETTING, "query_id").unique()
        parts.append(
            settings.join(sizes, on=["provider", "query_id"], how="left")
            .join(shared, on=[*SETTING, "query_id"], how="left", nulls_equal=True)
            .with_columns(k=pl.lit(k), overlap=(pl.col("shared").fill_null(0) / pl.col("exact_size")).fill_nan(1.0).fill_null(1.0))
            .select(*SETTING, "query_id", "k", "overlap")
        )
    if not parts:
        return pl.DataFrame(schema={"provider": pl.String, "index": pl.String, "nprobe": pl.Int64, "query_id": pl.String, "k": pl.Int64, "overlap": pl.Float64})
    return pl.concat(parts).sort([*SETTING, "k", "query_id"])


def exact_vs_approximate(summary: pl.DataFrame, overlap: pl.DataFrame) -> pl.DataFrame:
    """One row per approximate setting and measure: exact mean, approximate mean, delta."""
    exact = summary.filter(pl.col("index") == "flat").select("provider", "measure", exact=pl.col("value"))
    approx = summary.filter(pl.col("index") != "flat").select(*SETTING, "measure", approximate=pl.col("value"))
    metric_rows = approx.join(exact, on=["provider", "measure"], how="left")
    overlap_rows = (
        overlap.group_by([*SETTING, "k"]).agg(approximate=pl.col("overlap").mean())
        .with_columns(measure=pl.format("overlap@{}", pl.col("k")), exact=pl.lit(1.0))
        .select(*SETTING, "measure", "approximate", "exact")
    )
    return (
        pl.concat([overlap_rows, metric_rows.select(*SETTING, "measure", "approximate", "exact")])
        .with_columns(delta=pl.col("approximate") - pl.col("exact"))
        .select(*SETTING, "measure", "exact", "approximate", "delta")
        .sort([*SETTING, "measure"])
    )
