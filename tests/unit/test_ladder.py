"""The interventions ladder on constructed tables with known answers (tasks/analysis/ladder.py)."""
from __future__ import annotations

import polars as pl
import pytest

from retbench.tasks.analysis.ladder import (Step, buried_hint, cheapest_helpful, language_hint, ladder_table, lexical_hint,
                                   next_steps)

TEST = [f"t{i:02d}" for i in range(20)]
DEV = [f"d{i:02d}" for i in range(20)]


def _rows(setting: str, values: dict[str, float], measure: str = "ndcg@10", params: str = "{}") -> list[dict]:
    return [{"setting": setting, "params": params, "query_id": q, "measure": measure, "value": v,
             "split": "test" if q.startswith("t") else "dev"} for q, v in values.items()]


def _per_query() -> pl.DataFrame:
    base = {q: 0.5 for q in TEST + DEV}
    rows = _rows("base/flat", base)
    # chunking: +0.2 on every query, dev and test
    rows += _rows("base@sent/flat", {q: 0.7 for q in TEST + DEV})
    # query variant: +0.2 on dev, +0.1/-0.1 alternating on test (mean 0): a dev gain that did not hold
    rows += _rows("base+lower/flat", {**{q: 0.7 for q in DEV}, **{q: 0.6 if i % 2 else 0.4 for i, q in enumerate(TEST)}})
    # hybrid: +0.3 everywhere, and cheaper in milliseconds than the chunking step
    rows += _rows("bm25+e5", {q: 0.8 for q in TEST + DEV})
    # reranker: +0.4 everywhere, but its dollar cost was not measured
    rows += _rows("base+rerank", {q: 0.9 for q in TEST + DEV})
    return pl.DataFrame(rows)


def _costs() -> pl.DataFrame:
    return pl.DataFrame({
        "setting": ["base/flat", "base@sent/flat", "base+lower/flat", "bm25+e5", "base+rerank"],
        "params": ["{}"] * 5,
        "usd_per_1k_queries": [0.0, 0.0, 0.0, 0.0, None],
        "query_p50_ms": [3.0, 5.0, 3.0, 4.0, 50.0],
        "index_bytes": [1000, 1500, 1000, 3000, 1000],
    })


STEPS = [Step("reranker", "base+rerank", "rerank"), Step("hybrid", "bm25+e5", "rrf"),
         Step("query", "base+lower/flat", "lowercase"), Step("chunking", "base@sent/flat", "sentences")]


def test_ladder_orders_steps_as_the_seed_and_pairs_each_with_the_baseline_on_test():
    ladder = ladder_table(_per_query(), _costs(), STEPS, "base/flat", "ndcg@10", permutations=2000)
    assert ladder["kind"].to_list() == ["chunking", "query", "hybrid", "reranker"]
    assert ladder["step"].to_list() == [1, 2, 3, 4]
    assert set(ladder["baseline"]) == {"base/flat"}
    chunking = ladder.row(0, named=True)
    assert chunking["test_gain"] == pytest.approx(0.2)
    assert chunking["test_ci_low"] == pytest.approx(0.2) and chunking["test_ci_high"] == pytest.approx(0.2)
    assert chunking["test_p_value"] < 0.01 and chunking["test_significant"]
    assert chunking["test_n"] == 20 and chunking["dev_n"] == 20
    assert chunking["added_query_p50_ms"] == pytest.approx(2.0)
    assert chunking["added_index_bytes"] == 500
    assert chunking["gain_per_added_ms"] == pytest.approx(0.1)  # 0.2 gained for 2 ms
    assert chunking["gain_per_added_usd"] is None  # nothing added in dollars: no ratio
    assert chunking["dev_gain_held_on_test"] is True


def test_a_dev_gain_that_is_gone_on_test_is_flagged_and_not_recommended():
    ladder = ladder_table(_per_query(), _costs(), STEPS, "base/flat", "ndcg@10", permutations=2000)
    query = ladder.filter(pl.col("kind") == "query").row(0, named=True)
    assert query["dev_gain"] == pytest.approx(0.2) and query["dev_significant"]
    assert query["test_gain"] == pytest.approx(0.0) and not query["test_significant"]
    assert query["dev_gain_held_on_test"] is False
    assert not query["recommended"]


def test_the_cheapest_significant_step_is_recommended_dollars_then_milliseconds():
    ladder = ladder_table(_per_query(), _costs(), STEPS, "base/flat", "ndcg@10", permutations=2000)
    # chunking (+2 ms), hybrid (+1 ms) and reranker (dollars unmeasured) all gain significantly;
    # all measured ones add $0, so milliseconds decide: the hybrid, though later on the ladder.
    assert ladder.filter(pl.col("recommended"))["setting"].to_list() == ["bm25+e5"]
    assert cheapest_helpful(ladder)["setting"] == "bm25+e5"


def test_nothing_recommended_when_no_step_gains_on_test():
    per_query = _per_query().filter(pl.col("setting").is_in(["base/flat", "base+lower/flat"]))
    ladder = ladder_table(per_query, _costs(), [Step("query", "base+lower/flat", "lowercase")], "base/flat", "ndcg@10",
                          permutations=2000)
    assert not ladder["recommended"].any()
    assert cheapest_helpful(ladder) is None


def test_a_step_with_its_own_reference_is_paired_with_it():
    per_query = pl.concat([_per_query(), pl.DataFrame(_rows("base/flat unfiltered", {q: 0.4 for q in TEST + DEV}))])
    ladder = ladder_table(per_query, _costs(), [Step("filters", "base/flat", "filters", against="base/flat unfiltered")],
                          "base/flat", "ndcg@10", permutations=2000)
    row = ladder.row(0, named=True)
    assert row["baseline"] == "base/flat unfiltered"
    assert row["test_gain"] == pytest.approx(0.1)
    assert row["added_query_p50_ms"] is None  # the unfiltered run's latency is not in the costs


def test_an_intervention_without_per_query_rows_is_refused():
    with pytest.raises(ValueError, match="'e5/flat'.*no ndcg@10 rows"):
        ladder_table(_per_query(), _costs(), [Step("model", "e5/flat", "e5")], "base/flat", "ndcg@10")


def test_hints_point_at_the_intervention_the_failure_log_calls_for():
    base = {q: 0.0 if i < 3 else 1.0 for i, q in enumerate(TEST)}  # 3 of 20 queries: BM25 finds what dense missed
    per_query = pl.DataFrame(_rows("base/flat", base, "recall@10") + _rows("bm25", {q: 1.0 for q in TEST}, "recall@10"))
    hint = lexical_hint(per_query, "base/flat", ["bm25"])
    assert hint.try_next == "hybrid" and "3 of 20" in hint.evidence
    one = pl.DataFrame(_rows("base/flat", {q: 0.0 if i < 1 else 1.0 for i, q in enumerate(TEST)}, "recall@10")
                       + _rows("bm25", {q: 1.0 for q in TEST}, "recall@10"))
    assert lexical_hint(one, "base/flat", ["bm25"]) is None  # 1 of 20 is under the 10% threshold

    breakdown = pl.DataFrame({"setting": ["base/flat"] * 3, "measure": ["ndcg@10"] * 3,
                              "slice_kind": ["all", "language_pair", "language_pair"],
                              "slice": ["all", "hi->en", "en->en"], "mean": [0.6, 0.25, 0.7], "n": [40, 4, 36]})
    hint = language_hint(breakdown, "base/flat", "ndcg@10")
    assert hint.try_next == "model" and "hi->en 0.250" in hint.evidence and "en->en" not in hint.evidence
    too_few = breakdown.with_columns(n=pl.Series([40, 2, 38]))
    assert language_hint(too_few, "base/flat", "ndcg@10") is None

    failures = pl.DataFrame({"setting": ["base/flat", "base/flat", "other"], "query_id": ["t01", "t02", "t03"],
                             "buried": [True, False, True]})
    assert buried_hint(failures, "base/flat", 20).try_next == "chunking"  # 1 of 20 = 5%
    assert buried_hint(failures, "base/flat", 40) is None  # 1 of 40 is under 5%


def test_next_steps_say_what_was_tried_already():
    ladder = ladder_table(_per_query(), _costs(), [Step("hybrid", "bm25+e5", "rrf")], "base/flat", "ndcg@10",
                          permutations=200)
    base = {q: 0.0 if i < 3 else 1.0 for i, q in enumerate(TEST)}
    per_query = pl.DataFrame(_rows("base/flat", base, "recall@10") + _rows("bm25", {q: 1.0 for q in TEST}, "recall@10"))
    sentences = next_steps([lexical_hint(per_query, "base/flat", ["bm25"]), None], ladder)
    assert len(sentences) == 1
    assert sentences[0].startswith("Try a hybrid (tried here: bm25+e5 (a significant test gain)): bm25 finds more")


def test_the_shipped_sample_spec_lists_its_interventions_in_the_seed_order():
    from retbench.support.paths import ROOT
    from retbench.tasks.config.spec import load_spec
    from retbench.tasks.reporting.ladder_section import interventions

    baseline, steps = interventions(load_spec(ROOT / "specs" / "sample.yaml"), filtered=True)
    assert baseline == "hashing/flat"
    assert [(s.kind, s.setting) for s in steps] == [
        ("filters", "hashing/flat"), ("model", "minilm/flat"), ("model", "e5-small/flat"), ("model", "bm25:bm25"),
        ("hybrid", "bm25+e5"), ("reranker", "minilm+rerank")]
    assert steps[0].against == "hashing/flat without filters"


def test_the_reports_ladder_table_says_yes_and_no_under_headers_in_words():
    from retbench.tasks.reporting.ladder_section import _shown

    ladder = pl.DataFrame({"step": [1, 2, 3], "setting": ["a", "b", "c"], "test_ci_low": [0.1, None, 0.2],
                           "dev_gain_held_on_test": [True, False, None], "recommended": [False, True, False],
                           "added_index_bytes": [2048, -5, 0], "added_query_p50_ms": [1.0, None, None],
                           "dev_p_value": [None, None, None]})
    shown = _shown(ladder)
    assert shown.columns == ["step", "setting", "gain on test, 95% CI low", "dev gain held on test",
                             "added p50 ms per query", "added index size", "recommended"]  # an all-empty column left out
    assert shown["dev gain held on test"].to_list() == ["yes", "no", None]  # no dev gain to hold: an empty cell
    assert shown["recommended"].to_list() == ["no", "yes", "no"]
