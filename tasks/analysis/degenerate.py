"""Runs a verdict cannot rank: settings whose top k is all one tied score (every score 0 when no
query shares a word with a document), whose measure then comes from the doc-id tie order alone;
and query counts too small for the paired randomisation test to reach significance."""
from __future__ import annotations

from dataclasses import dataclass

import polars as pl

SETTING = ["provider", "index", "nprobe"]
# "Nearly all": a setting with a real ranking on fewer than 1 query in 10 is not ranked by the
# verdict; a handful of tied queries (a short query, a duplicate document) is normal.
NEARLY_ALL = 0.9


@dataclass(frozen=True)
class TiedRanking:
    """How many of a setting's queries have a top k that is one tied score."""

    label: str
    queries: int       # queries the setting retrieved for, among those counted
    tied: int          # top k all one score (the order within it is doc-id order)
    all_zero: int      # ... and that score is 0

    @property
    def degenerate(self) -> bool:
        return self.queries > 0 and self.tied >= NEARLY_ALL * self.queries

    def words(self) -> str:
        if self.all_zero == self.queries:
            what = f"every retrieved score is 0 on all {self.queries} queries"
        elif self.all_zero >= NEARLY_ALL * self.queries:
            what = f"every retrieved score is 0 on {self.all_zero} of {self.queries} queries"
        else:
            what = f"the top documents all tie on one score on {self.tied} of {self.queries} queries"
        return f"{self.label}: {what}"


def tied_rankings(runs: pl.DataFrame | pl.LazyFrame, k: int, queries: list[str] | None = None) -> pl.DataFrame:
    """Per setting (provider, index, nprobe): queries, tied (top k all one score, at least 2
    documents) and all_zero (that score is 0), over `queries` when given."""
    lazy = runs.lazy()
    if queries is not None:
        lazy = lazy.filter(pl.col("query_id").is_in(pl.Series(queries, dtype=pl.String).implode()))
    top = (lazy.select(*SETTING, "query_id", "score")
           .group_by(*SETTING, "query_id")
           .agg(pl.col("score").top_k(k).alias("top"))
           .with_columns(high=pl.col("top").list.max(), low=pl.col("top").list.min(), n=pl.col("top").list.len()))
    tied = (pl.col("n") >= 2) & (pl.col("high") == pl.col("low"))
    return (top.group_by(*SETTING)
            .agg(queries=pl.len(), tied=tied.sum(), all_zero=(tied & (pl.col("high") == 0)).sum())
            .collect())


def smallest_p(n: int) -> float:
    """The smallest two-sided p the paired sign-flip randomisation test can give on n queries:
    the observed signs and their mirror image are the only 2 of the 2^n sign patterns as extreme
    as the observed mean when every query differs, so p >= 2 / 2^n. Queries on which the two
    settings tie add nothing, so with fewer differing queries the floor is higher still."""
    return min(1.0, 2.0 / 2.0 ** n)
