"""Breakdowns: language pairs, bootstrap CIs with exactly known answers, paired comparisons."""
import numpy as np
import polars as pl
import pytest

from retbench.tasks.analysis.breakdown import (
    BREAKDOWN_SCHEMA,
    COMPARISON_SCHEMA,
    bootstrap_ci,
    breakdown_table,
    comparison_pairs,
    comparison_table,
    language_pairs,
    paired_comparison,
    randomization_p_value,
)


def _corpus():
    return pl.DataFrame({
        "doc_id": ["e1", "e2", "h1", "x1"],
        "title": ["Refunds", "Keys", "", None],
        "text": ["How refunds work", "Rotate API keys", "धनवापसी कैसे काम करती है", "पासवर्ड बदलें"],
        # x1 has no language: detected from its Devanagari script
        "language": ["en", "en", "hi", None],
    })


def _queries():
    return pl.DataFrame({
        "query_id": ["q1", "q2", "q3", "q4", "q5"],
        "text": ["refund", "paisa wapas kaise milega", "धनवापसी", "api key", "पासवर्ड"],
        # q2 is Hinglish (only the data can say so); q5 has no language: detected as hi
        "language": ["en", "hinglish", "hi", "en", None],
        "category": ["billing", "billing", "billing", "keys", "auth"],
        "split": ["dev", "dev", "test", "test", "test"],
    })


def _qrels():
    return pl.DataFrame({
        "query_id": ["q1", "q1", "q2", "q3", "q3", "q4", "q4", "q5"],
        "doc_id": ["e1", "h1", "e1", "h1", "e2", "e2", "h1", "x1"],
        # q3's English doc is judged non-relevant (0) and must not count; q4's Hindi doc too
        "grade": [2, 1, 1, 3, 0, 1, 0, 1],
    }, schema={"query_id": pl.String, "doc_id": pl.String, "grade": pl.Int64})


def _per_query(settings_values: dict[tuple, list[float]], measure="ndcg@10", ids=None) -> pl.DataFrame:
    parts = []
    for (provider, index, nprobe), values in settings_values.items():
        qids = ids or [f"q{i}" for i in range(len(values))]
        parts.append(pl.DataFrame({
            "provider": provider, "index": index, "nprobe": pl.Series([nprobe] * len(values), dtype=pl.Int64),
            "query_id": qids, "measure": measure, "value": pl.Series(values, dtype=pl.Float64),
        }))
    return pl.concat(parts)


# ---------------------------------------------------------------- language pairs

def test_language_pairs_mixed_hinglish_and_detected():
    pairs = language_pairs(_queries(), _qrels(), _corpus())
    got = dict(pairs.select("query_id", "language_pair").iter_rows())
    assert got == {
        "q1": "en->en+hi",      # relevant docs in both languages, joined sorted
        "q2": "hinglish->en",   # Hinglish from the data, never from detection
        "q3": "hi->hi",         # the grade-0 English doc is not relevant
        "q4": "en->en",
        "q5": "hi->hi",         # query and document languages both detected from script
    }


def test_language_pair_of_query_without_relevant_document():
    qrels = pl.DataFrame({"query_id": ["q1"], "doc_id": ["e1"], "grade": [0]})
    queries = _queries().head(1)
    assert language_pairs(queries, qrels, _corpus())["language_pair"].to_list() == ["en->none"]


def test_language_pairs_refuse_judgment_of_unknown_document():
    qrels = pl.DataFrame({"query_id": ["q1"], "doc_id": ["nope"], "grade": [1]})
    with pytest.raises(ValueError, match="'nope'.*not in the corpus"):
        language_pairs(_queries(), qrels, _corpus())


# ---------------------------------------------------------------- bootstrap CIs

def test_all_equal_values_give_a_point_interval():
    low, high = bootstrap_ci(np.full(9, 0.4), resamples=1000, seed=3)
    assert low[0] == pytest.approx(0.4) and high[0] == pytest.approx(0.4)


def test_single_query_interval_is_its_value():
    low, high = bootstrap_ci(np.array([0.7]), resamples=500)
    assert (low[0], high[0]) == (pytest.approx(0.7), pytest.approx(0.7))


def test_binary_values_match_the_exact_binomial_quantiles():
    # The bootstrap mean of 10 values, half 1 and half 0, is Binomial(10, 1/2) / 10. Its 2.5%
    # quantile is 2/10 (P(X<=1) = 11/1024 < 0.025 < P(X<=2) = 56/1024) and its 97.5% one 8/10.
    low, high = bootstrap_ci(np.array([0.0, 1.0] * 5), resamples=20000, seed=0)
    assert low[0] == pytest.approx(0.2) and high[0] == pytest.approx(0.8)


def test_two_values_span_the_whole_range():
    # Resampled means of [0, 1] are 0, 0.5, 1 with probability 1/4, 1/2, 1/4: both tails hold 25%.
    low, high = bootstrap_ci(np.array([0.0, 1.0]), resamples=2000, seed=1)
    assert (low[0], high[0]) == (0.0, 1.0)


def test_bootstrap_is_seeded():
    values = np.random.default_rng(5).random(40)
    assert bootstrap_ci(values, 1000, seed=7) == bootstrap_ci(values, 1000, seed=7)
    assert bootstrap_ci(values, 1000, seed=7)[0] != bootstrap_ci(values, 1000, seed=8)[0]


# ---------------------------------------------------------------- breakdown table

def _per_query_for_dataset():
    values = {"q1": 1.0, "q2": 0.5, "q3": 0.0, "q4": 0.25, "q5": 0.0}
    ids = list(values)
    return pl.concat([
        _per_query({("m", "flat", None): list(values.values())}, "ndcg@10", ids),
        _per_query({("m", "flat", None): [1.0, 1.0, 0.0, 1.0, 0.0]}, "recall@10", ids),
    ]).with_columns(query_language=pl.lit("en"), category=pl.lit("x"), split=pl.lit("dev"))


def test_breakdown_slices_means_and_counts():
    table = breakdown_table(_per_query_for_dataset(), _queries(), _qrels(), _corpus(), resamples=200, seed=0)
    assert table.schema == pl.Schema(BREAKDOWN_SCHEMA)
    ndcg = {(k, s): (m, n) for k, s, m, n in
            table.filter(pl.col("measure") == "ndcg@10").select("slice_kind", "slice", "mean", "n").iter_rows()}
    assert ndcg == {
        ("all", "all"): (pytest.approx(1.75 / 5), 5),
        ("language_pair", "en->en"): (0.25, 1),
        ("language_pair", "en->en+hi"): (1.0, 1),
        ("language_pair", "hi->hi"): (0.0, 2),
        ("language_pair", "hinglish->en"): (0.5, 1),
        # categories and splits come from the queries table, not from per_query's copies
        ("category", "auth"): (0.0, 1),
        ("category", "billing"): (0.5, 3),
        ("category", "keys"): (0.25, 1),
        ("split", "dev"): (0.75, 2),
        ("split", "test"): (pytest.approx(0.25 / 3), 3),
    }
    # one-query slices and all-equal slices have point intervals
    point = table.filter((pl.col("n") == 1) | (pl.col("slice") == "hi->hi"))
    assert (point["ci_low"] == point["mean"]).all() and (point["ci_high"] == point["mean"]).all()
    wide = table.filter(pl.col("slice_kind") == "all")
    assert ((wide["ci_low"] <= wide["mean"]) & (wide["mean"] <= wide["ci_high"])).all()


def test_breakdown_is_reproducible_and_independent_of_row_order():
    per_query = _per_query_for_dataset()
    first = breakdown_table(per_query, _queries(), _qrels(), _corpus(), resamples=300, seed=4)
    shuffled = per_query.sample(fraction=1.0, shuffle=True, seed=1)
    again = breakdown_table(shuffled, _queries(), _qrels(), _corpus(), resamples=300, seed=4)
    assert first.equals(again)


def test_same_slice_resamples_alike_for_every_setting():
    # Two settings with the same values on the same queries must get the same interval.
    values = list(np.random.default_rng(0).random(30))
    ids = [f"q{i:02d}" for i in range(30)]
    per_query = _per_query({("a", "flat", None): values, ("b", "ivf", 4): values}, ids=ids)
    queries = pl.DataFrame({"query_id": ids, "text": ["x"] * 30, "language": ["en"] * 30,
                            "category": ["c"] * 30, "split": ["dev"] * 30})
    qrels = pl.DataFrame({"query_id": ids, "doc_id": ["d"] * 30, "grade": [1] * 30})
    corpus = pl.DataFrame({"doc_id": ["d"], "title": [""], "text": ["x"], "language": ["en"]})
    table = breakdown_table(per_query, queries, qrels, corpus, resamples=500, seed=0).filter(pl.col("slice_kind") == "all")
    assert table["ci_low"][0] == table["ci_low"][1] and table["ci_high"][0] == table["ci_high"][1]


# ---------------------------------------------------------------- paired comparisons

def test_identical_systems_have_p_one_and_zero_interval():
    values = list(np.random.default_rng(2).random(50))
    per_query = _per_query({("a", "flat", None): values, ("b", "flat", None): values})
    row = paired_comparison(per_query, ("a", "flat", None), ("b", "flat", None)).row(0, named=True)
    assert row["diff"] == 0.0 and row["ci_low"] == 0.0 and row["ci_high"] == 0.0
    assert row["p_value"] == 1.0


def test_clearly_better_system_has_small_p_value():
    rng = np.random.default_rng(3)
    base = rng.random(60) * 0.5
    better = base + 0.2 + rng.normal(0, 0.05, 60)
    per_query = _per_query({("good", "flat", None): list(better), ("base", "flat", None): list(base)})
    row = paired_comparison(per_query, ("good", "flat", None), ("base", "flat", None)).row(0, named=True)
    assert row["diff"] == pytest.approx(float(np.mean(better - base)))
    assert 0 < row["ci_low"] < row["diff"] < row["ci_high"]
    # every one of the 10,000 sign flips falls short: p is its floor 1 / 10,001
    assert row["p_value"] == pytest.approx(1 / 10001)


def test_randomization_p_value_exact_for_two_queries():
    # diffs (1, 1): the four sign patterns give |mean| 1, 0, 0, 1, so p -> (hits + 1) / (R + 1) ~ 1/2.
    p = randomization_p_value(np.array([1.0, 1.0]), 20000, np.random.default_rng(0))
    assert p[0] == pytest.approx(0.5, abs=0.02)


def test_paired_comparison_uses_only_common_queries():
    a = _per_query({("a", "flat", None): [1.0, 1.0, 1.0]}, ids=["q1", "q2", "q3"])
    b = _per_query({("b", "flat", None): [0.0, 0.5]}, ids=["q2", "q3"])
    row = paired_comparison(pl.concat([a, b]), ("a", "flat", None), ("b", "flat", None)).row(0, named=True)
    assert row["n"] == 2 and row["mean_a"] == 1.0 and row["mean_b"] == 0.25 and row["diff"] == 0.75


def test_comparison_pairs_cover_providers_at_flat_and_ann_vs_flat():
    per_query = _per_query({
        ("x", "flat", None): [1.0], ("y", "flat", None): [1.0], ("z", "flat", None): [1.0],
        ("x", "ivf", 1): [1.0], ("x", "ivf", 4): [1.0], ("y", "ivf", 1): [1.0],
    })
    assert comparison_pairs(per_query) == [
        (("x", "flat", None), ("y", "flat", None)),
        (("x", "flat", None), ("z", "flat", None)),
        (("y", "flat", None), ("z", "flat", None)),
        (("x", "ivf", 1), ("x", "flat", None)),
        (("x", "ivf", 4), ("x", "flat", None)),
        (("y", "ivf", 1), ("y", "flat", None)),
    ]


def test_comparison_table_is_seeded_and_typed():
    rng = np.random.default_rng(4)
    per_query = pl.concat([
        _per_query({("x", "flat", None): list(rng.random(20)), ("x", "ivf", 2): list(rng.random(20))}, m)
        for m in ("ndcg@10", "recall@10")
    ])
    first = comparison_table(per_query, resamples=300, seed=1)
    assert first.schema == pl.Schema(COMPARISON_SCHEMA)
    assert first.height == 2 and first["measure"].to_list() == ["ndcg@10", "recall@10"]
    assert first.equals(comparison_table(per_query, resamples=300, seed=1))


def test_missing_setting_is_named():
    per_query = _per_query({("x", "flat", None): [1.0]})
    with pytest.raises(ValueError, match="provider='nope'"):
        paired_comparison(per_query, ("nope", "flat", None), ("x", "flat", None))
