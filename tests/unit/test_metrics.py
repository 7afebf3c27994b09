"""retbench.tasks.analysis.metrics on cases small enough to compute by hand."""
import logging
import math
import re

import polars as pl
import pytest

from retbench.tasks.analysis.metrics import MEASURES, Measure, evaluate, parse_measure, precision, register


def frame(rows, cols):
    return pl.DataFrame(rows, schema=cols, orient="row")


def run_of(*rows):
    return frame(rows, {"query_id": pl.String, "doc_id": pl.String, "score": pl.Float64})


def qrels_of(*rows):
    return frame(rows, {"query_id": pl.String, "doc_id": pl.String, "grade": pl.Int64})


def values(ev, query="q"):
    return dict(ev.per_query.filter(pl.col("query_id") == query)
                .select("measure", "value").iter_rows())


# One query, ranking d1..d5 by score. Grades: d1=0, d2=2, d3 unjudged, d4=1, d5=3;
# d6 (grade 1) is judged but not retrieved. Relevant at level 1: d2, d4, d5, d6 -> R = 4.
RUN = run_of(("q", "d1", 0.9), ("q", "d2", 0.8), ("q", "d3", 0.7), ("q", "d4", 0.6),
             ("q", "d5", 0.5))
QRELS = qrels_of(("q", "d1", 0), ("q", "d2", 2), ("q", "d4", 1), ("q", "d5", 3), ("q", "d6", 1))
LOG2 = math.log2


def test_hand_computed_values():
    got = values(evaluate(RUN, QRELS, [
        "p@3", "p@10", "recall@3", "recall_cap@3", "recall_cap@10", "mrr", "mrr@1", "map",
        "map@2", "hit_rate@1", "hit_rate@2", "ndcg@3", "ndcg", "ndcg_exp@3"]))
    assert got["p@3"] == pytest.approx(1 / 3)
    assert got["p@10"] == pytest.approx(3 / 10)  # divides by k even past the ranking's end
    assert got["recall@3"] == pytest.approx(1 / 4)
    assert got["recall_cap@3"] == pytest.approx(1 / 3)  # min(k=3, R=4)
    assert got["recall_cap@10"] == pytest.approx(3 / 4)  # min(k=10, R=4)
    assert got["mrr"] == pytest.approx(1 / 2)
    assert got["mrr@1"] == 0.0
    # AP: relevant at ranks 2, 4, 5 -> (1/2 + 2/4 + 3/5) / R=4 (d6 never retrieved counts 0).
    assert got["map"] == pytest.approx((1 / 2 + 2 / 4 + 3 / 5) / 4)
    assert got["map@2"] == pytest.approx((1 / 2) / 4)
    assert got["hit_rate@1"] == 0.0 and got["hit_rate@2"] == 1.0
    # Linear gain: DCG@3 = 2/log2(3); ideal grades 3, 2, 1, 1 -> IDCG@3 = 3 + 2/log2(3) + 1/2.
    assert got["ndcg@3"] == pytest.approx((2 / LOG2(3)) / (3 + 2 / LOG2(3) + 1 / 2))
    dcg = 2 / LOG2(3) + 1 / LOG2(5) + 3 / LOG2(6)
    idcg = 3 + 2 / LOG2(3) + 1 / 2 + 1 / LOG2(5)
    assert got["ndcg"] == pytest.approx(dcg / idcg)
    # Exponential gain 2^g - 1: grades 3, 2, 1 -> gains 7, 3, 1.
    assert got["ndcg_exp@3"] == pytest.approx((3 / LOG2(3)) / (7 + 3 / LOG2(3) + 1 / 2))


def test_relevance_level_moves_binary_measures_but_not_ndcg():
    low = values(evaluate(RUN, QRELS, ["map", "p@5", "ndcg"]))
    high = values(evaluate(RUN, QRELS, ["map", "p@5", "ndcg"], relevance_level=2))
    # Level 2: relevant are d2 (rank 2) and d5 (rank 5), R = 2.
    assert high["map"] == pytest.approx((1 / 2 + 2 / 5) / 2)
    assert high["p@5"] == pytest.approx(2 / 5)
    assert high["ndcg"] == low["ndcg"]


def test_ties_rank_higher_doc_id_first_and_rank_column_is_ignored():
    run = run_of(("q", "a", 1.0), ("q", "c", 1.0), ("q", "b", 1.0)).with_columns(
        rank=pl.Series([1, 2, 3]))  # a supplied rank says "a" is first; trec_eval ignores it
    got = values(evaluate(run, qrels_of(("q", "a", 1)), ["mrr"]))
    assert got["mrr"] == pytest.approx(1 / 3)  # order c, b, a


def test_unjudged_and_negative_grades_are_not_relevant_and_have_no_gain():
    run = run_of(("q", "neg", 3.0), ("q", "unj", 2.0), ("q", "rel", 1.0))
    got = values(evaluate(run, qrels_of(("q", "neg", -1), ("q", "rel", 1)), ["mrr", "ndcg@3"]))
    assert got["mrr"] == pytest.approx(1 / 3)
    assert got["ndcg@3"] == pytest.approx(1 / LOG2(4))


def test_query_without_relevant_docs_counts_as_zero_in_the_mean():
    run = run_of(("a", "d1", 1.0), ("b", "d1", 1.0))
    qrels = qrels_of(("a", "d1", 1), ("b", "d1", 0))
    ev = evaluate(run, qrels, ["p@1"])
    assert values(ev, "b") == {"p@1": 0.0}
    assert ev.means() == {"p@1": 0.5}


def test_run_only_and_qrels_only_queries(caplog):
    run = run_of(("a", "d1", 1.0), ("r1", "d1", 1.0), ("r2", "d1", 1.0))
    qrels = qrels_of(("a", "d1", 1), ("z", "d1", 1))
    with caplog.at_level(logging.WARNING, logger="retbench.metrics"):
        ev = evaluate(run, qrels, ["p@1", "mrr"])
    assert (ev.run_only, ev.qrels_only) == (2, 1)
    assert ev.per_query["query_id"].unique().to_list() == ["a"]
    assert ev.means() == {"p@1": 1.0, "mrr": 1.0}
    assert "2 queries are in the run but not in the qrels" in caplog.text
    assert "1 queries are in the qrels but not in the run" in caplog.text

    full = evaluate(run, qrels, ["p@1", "mrr"], complete=True)
    assert values(full, "z") == {"p@1": 0.0, "mrr": 0.0}  # an empty ranking scores 0
    assert full.means() == {"p@1": 0.5, "mrr": 0.5}


def test_run_only_queries_neither_rank_nor_escape_the_duplicate_check():
    # Rows of queries only in the run stay in the ranking's arrays (under codes of their own): their
    # higher scores and tied docs with higher ids must not push an evaluated query's docs down, and
    # a doc retrieved twice there is refused as anywhere else (trec_eval reads the whole run).
    run = run_of(("m", "z", 9.0), ("m", "y", 0.5), ("q", "a", 0.5), ("q", "b", 0.25), ("n", "c", 0.5))
    qrels = qrels_of(("q", "a", 1), ("q", "b", 1))
    ev = evaluate(run, qrels, ["mrr", "map", "ndcg@10"])
    assert values(ev, "q") == {"mrr": 1.0, "map": 1.0, "ndcg@10": pytest.approx(1.0, abs=1e-12)}
    assert ev.run_only == 2
    with pytest.raises(ValueError, match="query 'm' retrieves doc 'y' more than once"):
        evaluate(run_of(("m", "y", 1.0), ("m", "y", 0.5), ("q", "a", 0.5)), qrels, ["mrr"])


def test_per_query_layout():
    ev = evaluate(run_of(("b", "d", 1.0), ("a", "d", 1.0)), qrels_of(("a", "d", 1), ("b", "d", 0)),
                  ["MRR", "p@1", "mrr"])  # duplicates by canonical name are scored once
    assert ev.per_query.schema == {"query_id": pl.String, "measure": pl.String,
                                   "value": pl.Float64}
    assert ev.per_query.rows() == [("a", "mrr", 1.0), ("b", "mrr", 0.0),
                                   ("a", "p@1", 1.0), ("b", "p@1", 0.0)]


@pytest.mark.parametrize("name, canonical", [
    ("ndcg@10", "ndcg@10"), ("nDCG@10", "ndcg@10"), ("ndcg", "ndcg"), ("P@5", "p@5"),
    ("mrr", "mrr"), ("mrr@10", "mrr@10"), ("map@100", "map@100"), (" hit_rate@3 ", "hit_rate@3"),
])
def test_parse_measure_canonical_names(name, canonical):
    assert str(parse_measure(name)) == canonical


@pytest.mark.parametrize("name, message", [
    ("ndgc@10", "unknown measure 'ndgc@10' (did you mean 'ndcg'?); known measures: ndcg[@k], ndcg_exp@k"),
    ("recall", "needs a cutoff"),
    ("p@0", "positive integer"),
    ("ndcg@x", "unknown measure"),
])
def test_parse_measure_errors(name, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_measure(name)


def test_registry_refuses_duplicates():
    with pytest.raises(ValueError, match="already registered"):
        register(Measure("p", precision, "required", "again"))
    assert MEASURES["p"].kernel is precision


def test_missing_columns_message():
    with pytest.raises(ValueError, match=r"run: missing columns \['score'\] \(found \['query_id', "
                                         r"'doc_id'\]\)"):
        evaluate(RUN.drop("score"), QRELS, ["mrr"])


@pytest.mark.parametrize("run, qrels, message", [
    (run_of(("q", "d1", 1.0), ("q", "d1", 0.5)), QRELS, "query 'q' retrieves doc 'd1' more than once"),
    (RUN, qrels_of(("q", "d1", 1), ("q", "d1", 0)), "query 'q' judges doc 'd1' more than once"),
    (run_of(("q", "d1", float("nan"))), QRELS, "query 'q' doc 'd1' has score nan"),
    (RUN.with_columns(pl.col("query_id").cast(pl.Categorical)).with_columns(
        doc_id=pl.Series([1, 2, 3, 4, 5])), QRELS, "column doc_id must be str"),
    (RUN, QRELS.with_columns(pl.col("grade").cast(pl.Float64)), "grade must be an integer"),
    (run_of(("x", "d1", 1.0)), QRELS, "no query is in both"),
])
def test_bad_input_raises(run, qrels, message):
    with pytest.raises(ValueError, match=message):
        evaluate(run, qrels, ["mrr"])


def test_relevance_level_below_one_is_refused():
    with pytest.raises(ValueError, match="relevance_level must be >= 1"):
        evaluate(RUN, QRELS, ["mrr"], relevance_level=0)
