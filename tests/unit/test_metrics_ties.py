"""Ties between two relevant docs are broken by doc id as trec_eval does, not given one rank."""
import math

import polars as pl
import pytest

from retbench.tasks.analysis.metrics import evaluate


def test_relevant_docs_tied_only_with_each_other_get_distinct_ranks():
    # Found on NPL query 55 with the hashing provider: docs 3162 and 3147 (both relevant) tie at
    # ranks 9-10 and no other doc has their score; both were given rank 9.
    run = pl.DataFrame({"query_id": ["q"] * 4, "doc_id": ["x", "a", "b", "y"], "score": [0.9, 0.5, 0.5, 0.1]})
    qrels = pl.DataFrame({"query_id": ["q"] * 3, "doc_id": ["a", "b", "z"], "grade": [1, 1, 1]})
    values = dict(evaluate(run, qrels, ["ndcg@10", "map", "mrr"]).per_query.select("measure", "value").iter_rows())
    # trec_eval order: x, then b before a (tie -> doc id descending), then y; relevant at ranks 2 and 3.
    dcg = 1 / math.log2(3) + 1 / math.log2(4)
    idcg = 1 + 1 / math.log2(3) + 1 / math.log2(4)
    assert values["ndcg@10"] == pytest.approx(dcg / idcg, abs=1e-12)
    assert values["map"] == pytest.approx((1 / 2 + 2 / 3) / 3, abs=1e-12)
    assert values["mrr"] == pytest.approx(1 / 2, abs=1e-12)


def test_ties_agree_with_pytrec_eval():
    pytrec_eval = pytest.importorskip("pytrec_eval")
    run = pl.DataFrame({"query_id": ["q"] * 5 + ["r"] * 2, "doc_id": ["a", "b", "c", "d", "e", "a", "b"],
                        "score": [1.0, 1.0, 0.5, 0.5, 0.5, 2.0, 2.0]})
    qrels = pl.DataFrame({"query_id": ["q", "q", "q", "r", "r"], "doc_id": ["a", "b", "d", "a", "b"],
                          "grade": [2, 1, 1, 1, 1]})
    ours = evaluate(run, qrels, ["ndcg@10", "map"]).per_query
    reference = pytrec_eval.RelevanceEvaluator(
        {q: dict(zip(g["doc_id"], g["grade"])) for (q,), g in qrels.group_by("query_id")}, {"ndcg_cut.10", "map"}
    ).evaluate({q: dict(zip(g["doc_id"], g["score"])) for (q,), g in run.group_by("query_id")})
    for q, measure, value in ours.iter_rows():
        key = {"ndcg@10": "ndcg_cut_10", "map": "map"}[measure]
        assert value == pytest.approx(reference[q][key], abs=1e-12), (q, measure)
