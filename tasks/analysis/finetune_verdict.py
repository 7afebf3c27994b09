"""Did fine-tuning help, and did it survive on the held-out split? Base vs fine-tuned, paired per
query, on dev and on test separately, overall and per language pair and category, with flags
for a slice made significantly worse and for a dev gain that does not hold on test."""
from __future__ import annotations

import polars as pl

from retbench.tasks.analysis.breakdown import language_pairs, paired_comparison

# Train queries, when the dataset has them, are what the model was tuned on: no verdict on it.
SPLITS = ("dev", "test")
VERDICT_SCHEMA = {
    "split": pl.String,
    "slice_kind": pl.String,
    "slice": pl.String,
    "measure": pl.String,
    "n": pl.Int64,
    "base": pl.Float64,
    "tuned": pl.Float64,
    "diff": pl.Float64,  # tuned - base
    "ci_low": pl.Float64,
    "ci_high": pl.Float64,
    "p_value": pl.Float64,
    "worse_slice": pl.Boolean,  # significantly worse: the whole interval below 0
    "gain_not_on_test": pl.Boolean,  # this slice gained significantly on dev (ci_low > 0, p < 1 - level), not on test
}


def finetune_verdict(per_query: pl.DataFrame, queries: pl.DataFrame, base_setting: tuple, tuned_setting: tuple,
                     qrels: pl.DataFrame | None = None, corpus: pl.DataFrame | None = None,
                     resamples: int = 1000, permutations: int = 10000, seed: int = 0, level: float = 0.95,
                     relevance_level: int = 1) -> pl.DataFrame:
    """One row per split x slice x measure (VERDICT_SCHEMA). `per_query`: provider, index, nprobe,
    query_id, measure, value for both settings ((provider, index, nprobe) tuples); `queries`:
    query_id, text, category, split (and language); with `qrels` and `corpus` the language-pair
    slices are added. Intervals: paired bootstrap over the slice's queries; p: sign-flip test."""
    slices = queries.select("query_id", "split", pl.col("category").fill_null("unknown"))
    kinds = ["all", "category"]
    if qrels is not None and corpus is not None:
        pairs = language_pairs(queries, qrels, corpus, relevance_level).select("query_id", "language_pair")
        slices = slices.join(pairs, on="query_id", how="left").with_columns(pl.col("language_pair").fill_null("unknown"))
        kinds.insert(1, "language_pair")
    slices = slices.with_columns(all=pl.lit("all"))
    rows = []
    for split in SPLITS:
        in_split = slices.filter(pl.col("split") == split)
        for kind in kinds:
            for value in sorted(set(in_split[kind].to_list())):
                ids = in_split.filter(pl.col(kind) == value)["query_id"]
                part = per_query.filter(pl.col("query_id").is_in(ids.implode()))
                if part.height == 0:
                    continue
                try:
                    compared = paired_comparison(part, tuned_setting, base_setting, resamples, permutations, seed, level)
                except ValueError:
                    continue  # one of the settings scored none of these queries
                for r in compared.iter_rows(named=True):
                    rows.append({"split": split, "slice_kind": kind, "slice": str(value), "measure": r["measure"],
                                 "n": r["n"], "base": r["mean_b"], "tuned": r["mean_a"], "diff": r["diff"],
                                 "ci_low": r["ci_low"], "ci_high": r["ci_high"], "p_value": r["p_value"]})
    if not rows:
        return pl.DataFrame(schema=VERDICT_SCHEMA)
    table = pl.DataFrame(rows).with_columns(worse_slice=pl.col("ci_high") < 0)
    # A significant gain: the interval above 0 and the randomization test agreeing (on a few
    # queries the percentile interval alone is too eager).
    gain = (pl.col("ci_low") > 0) & (pl.col("p_value") < 1 - level)
    dev_gain = table.filter((pl.col("split") == "dev") & gain).select("slice_kind", "slice", "measure")
    test_gain = table.filter((pl.col("split") == "test") & gain).select("slice_kind", "slice", "measure")
    on_test = table.filter(pl.col("split") == "test").select("slice_kind", "slice", "measure")
    # A slice absent from test (no such queries there) is not flagged: nothing was measured.
    lost = (dev_gain.join(on_test, on=["slice_kind", "slice", "measure"], how="semi")
            .join(test_gain, on=["slice_kind", "slice", "measure"], how="anti").with_columns(gain_not_on_test=pl.lit(True)))
    table = table.join(lost, on=["slice_kind", "slice", "measure"], how="left").with_columns(
        pl.col("gain_not_on_test").fill_null(False))
    order = pl.col("slice_kind").replace_strict(kinds, list(range(len(kinds))))
    return table.sort(["split", order, "slice", "measure"], maintain_order=True).select(list(VERDICT_SCHEMA)).cast(VERDICT_SCHEMA)
