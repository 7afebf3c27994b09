"""The cheaper_variants table with a held-out split: every quality value a verdict acts on is
on the test queries, worked out by hand."""
import json

import polars as pl
import pytest

from retbench.tasks.analysis.breakdown import paired_comparison
from retbench.tasks.analysis.cheaper import ON_TEST, PAIRED, SUM, SWEEP, cheaper_variants_table
from retbench.tasks.config.cheaper import CheaperVariant

SPLITS = ["dev"] * 3 + ["test"] * 3
VALUES = {"full": [1.0, 1.0, 1.0, 1.0, 0.5, 0.0],  # test mean 0.5, all 0.75
          "half": [0.0, 0.0, 0.0, 0.5, 0.5, 0.0]}  # test mean 1/6 lower than full; on all queries 7/12 lower


def _per_query(splits=SPLITS) -> pl.DataFrame:
    rows = [(p, "flat", None, f"q{i}", "ndcg@10", v, s) for p, vs in VALUES.items() for i, (v, s) in enumerate(zip(vs, splits))]
    return pl.DataFrame(rows, schema={"provider": pl.String, "index": pl.String, "nprobe": pl.Int64, "query_id": pl.String,
                                      "measure": pl.String, "value": pl.Float64, "split": pl.String}, orient="row")


STORAGE = pl.DataFrame({"provider": ["full", "half"], "vectors": [6, 6], "dim": [8, 4], "index": ["flat", "flat"],
                        "index_bytes": [240, 144], "index_bytes_per_vector": [40.0, 24.0]})
VARIANTS = [CheaperVariant("half", "full", "dimensions 4", False)]


def _sweep(with_split: bool = True) -> pl.DataFrame:
    def row(provider, kind, build, query, all_delta, test_delta, test_low, test_high, flat_test):
        out = {"provider": provider, "index_kind": kind, "build_params": json.dumps(build), "query_params": json.dumps(query),
               "bytes_per_vector": 1.0, "rescore_bytes_per_vector": 0.0, "index_bytes": 6, "queries": 6,
               "flat_ndcg@10": 0.75, "delta_ndcg@10": all_delta, "delta_ndcg@10_ci_low": -0.09, "delta_ndcg@10_ci_high": 0.0}
        if with_split:
            out |= {"queries_dev": 3, "queries_test": 3, "flat_ndcg@10_dev": 1.0, "delta_ndcg@10_dev": 0.0,
                    "delta_ndcg@10_dev_ci_low": 0.0, "delta_ndcg@10_dev_ci_high": 0.0, "flat_ndcg@10_test": flat_test,
                    "delta_ndcg@10_test": test_delta, "delta_ndcg@10_test_ci_low": test_low,
                    "delta_ndcg@10_test_ci_high": test_high}
        return out
    return pl.DataFrame([row("full", "sq", {"qtype": "8bit"}, {}, -0.05, -0.2, -0.3, -0.1, 0.5),
                         row("half", "binary", {}, {"rescore": 0}, -0.02, -0.1, -0.15, 0.0, 1 / 3)])


def _table(per_query, sweep) -> dict:
    table = cheaper_variants_table(per_query, STORAGE, VARIANTS, ["full", "half"], ["ndcg@10"], sweep=sweep,
                                   resamples=200, permutations=200)
    return {(r["provider"], r["index"]): r for r in table.iter_rows(named=True)}


def test_with_a_held_out_split_every_delta_is_on_the_test_queries():
    rows = _table(_per_query(), _sweep())
    full, sq, half, binary = rows[("full", "flat")], rows[("full", "sq")], rows[("half", "flat")], rows[("half", "binary")]
    assert full["ndcg@10"] == pytest.approx(0.5) and half["ndcg@10"] == pytest.approx(1 / 3)  # test means
    test_only = _per_query().filter(pl.col("split") == "test")
    expected = paired_comparison(test_only, ("half", "flat", None), ("full", "flat", None), 200, 200).row(0, named=True)
    assert half["delta_ndcg@10"] == pytest.approx(-1 / 6) == expected["diff"]
    assert (half["delta_ndcg@10_ci_low"], half["p_value_ndcg@10"]) == (expected["ci_low"], expected["p_value"])
    assert (half["delta_basis"], half["delta_queries"], full["delta_queries"]) == (PAIRED + ON_TEST, 3, 3)
    # The full model's compressed index: the sweep's test delta and interval, on the sweep's test flat.
    assert (sq["delta_ndcg@10"], sq["delta_ndcg@10_ci_low"], sq["delta_ndcg@10_ci_high"]) == (-0.2, -0.3, -0.1)
    assert sq["ndcg@10"] == pytest.approx(0.3) and (sq["delta_basis"], sq["delta_queries"]) == (SWEEP + ON_TEST, 3)
    # A variant's compressed index: the test flat delta plus the index's test delta.
    assert binary["delta_ndcg@10"] == pytest.approx(-1 / 6 - 0.1) and binary["delta_basis"] == SUM + ON_TEST


def test_a_sweep_without_test_columns_says_its_delta_is_on_all_queries():
    rows = _table(_per_query(), _sweep(with_split=False))
    assert rows[("full", "sq")]["delta_ndcg@10"] == -0.05 and rows[("full", "sq")]["delta_basis"] == SWEEP
    assert rows[("half", "binary")]["delta_basis"] == SUM  # a test flat delta plus an all-query index delta
    assert rows[("half", "flat")]["delta_basis"] == PAIRED + ON_TEST


def test_with_one_split_every_query_counts_as_before():
    rows = _table(_per_query(["test"] * 6), _sweep(with_split=False))
    assert rows[("half", "flat")]["delta_ndcg@10"] == pytest.approx(-7 / 12) and rows[("half", "flat")]["delta_basis"] == PAIRED
    assert rows[("full", "flat")]["ndcg@10"] == pytest.approx(0.75) and rows[("half", "flat")]["delta_queries"] == 6
    no_split = _table(_per_query().drop("split"), _sweep())
    assert no_split[("full", "sq")]["delta_ndcg@10"] == -0.05 and no_split[("full", "sq")]["delta_basis"] == SWEEP
