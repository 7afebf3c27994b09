"""The verdict on runs it cannot rank (issue 32, 0b): every score 0 or one tie on nearly every
query names no best from tie order; too few test queries says how small a p the test can reach."""
import itertools

import numpy as np
import polars as pl
import pytest

from retbench.tasks.analysis.degenerate import smallest_p, tied_rankings
from retbench.tasks.analysis.stats import randomization_p_value
from retbench.tasks.config.verdict import VerdictSpec
from retbench.tasks.reporting.verdict import decide, verdict_sentences
from tests.unit.test_verdict_held_out import _write_run

RUN = {"provider": pl.String, "index": pl.String, "nprobe": pl.Int64, "query_id": pl.String,
       "doc_id": pl.String, "score": pl.Float64}


def _write_runs(folder, scores: dict):
    """scores: (provider, index, nprobe) -> {query_id: [score of doc 0, doc 1, ...]}."""
    rows = [(p, i, n, q, f"d{j}", float(s))
            for (p, i, n), by_query in scores.items() for q, values in by_query.items()
            for j, s in enumerate(values)]
    pl.DataFrame(rows, schema=RUN, orient="row").write_parquet(folder / "runs.parquet")


def _real(queries, rng):
    return {q: sorted(rng.uniform(0, 20, 12), reverse=True) for q in queries}


def test_every_setting_scoring_zero_names_no_best(tmp_path):
    # The hostile probe: no query shares a word with a document. Tie order still gives one
    # setting nDCG 0.049 and the other 0.031; neither is a best, nor "as good and cheaper".
    queries = [f"test-{i}" for i in range(30)]
    rng = np.random.default_rng(0)
    _write_run(tmp_path, {("bm25", "bm25", None): {"dev": rng.uniform(0, 0.1, 10), "test": rng.uniform(0, 0.098, 30)},
                          ("tfidf", "bm25", None): {"dev": rng.uniform(0, 0.1, 10), "test": rng.uniform(0, 0.062, 30)}},
               splits={}, usd={"bm25": 0.0, "tfidf": 0.0}, bytes_={("bm25", "bm25"): 1000, ("tfidf", "bm25"): 10})
    _write_runs(tmp_path, {("bm25", "bm25", None): {q: [0.0] * 12 for q in queries},
                           ("tfidf", "bm25", None): {q: [0.0] * 12 for q in queries}})
    verdict = decide(tmp_path, "ndcg@10", VerdictSpec(margin=0.01))
    assert verdict.no_best and verdict.as_good_and_cheaper is None and verdict.candidates == []
    text = verdict_sentences(verdict)
    assert "Ranked by ties, not by retrieval: bm25 bm25: every retrieved score is 0 on all 30 queries; " \
           "tfidf bm25: every retrieved score is 0 on all 30 queries." in " ".join(text)
    assert any(s.startswith("No setting ranks the documents, so no best is named") for s in text)
    assert not any(s.startswith(("Best setting", "As good and cheaper", "It is")) for s in text)
    roles = verdict.assessment()["role"].to_list()
    assert "best" not in roles and "as good and cheaper" not in roles
    assert verdict.assessment()["ranked_by_ties"].to_list() == [True, True]


def test_a_tied_setting_is_set_aside_and_the_ranked_one_is_best(tmp_path):
    # BM25's tie order happens to score higher (0.6) than the dense model (0.4); the dense model
    # is still the best, because BM25's number is not a ranking.
    queries = [f"test-{i}" for i in range(30)]
    rng = np.random.default_rng(1)
    _write_run(tmp_path, {("bm25", "bm25", None): {"dev": rng.uniform(0.5, 0.7, 10), "test": rng.uniform(0.5, 0.7, 30)},
                          ("e5", "flat", None): {"dev": rng.uniform(0.3, 0.5, 10), "test": rng.uniform(0.3, 0.5, 30)}},
               splits={})
    tied = {q: [0.0] * 12 for q in queries[:28]} | {q: [3.0, 2.0, 1.0] for q in queries[28:]}
    _write_runs(tmp_path, {("bm25", "bm25", None): tied, ("e5", "flat", None): _real(queries, rng)})
    verdict = decide(tmp_path, "ndcg@10")
    assert not verdict.no_best and verdict.best["label"] == "e5 flat" and verdict.runner_up is None
    text = verdict_sentences(verdict)
    assert ("Ranked by ties, not by retrieval: bm25 bm25: every retrieved score is 0 on 28 of 30 queries. "
            "Its ndcg@10 comes from the order of tied documents (by id), so it is neither named best nor compared.") in text
    assert any(s.startswith("Best setting by ndcg@10: e5 flat") for s in text)
    assert "It is the only setting that ranks, so there is nothing to compare it with." in text
    # The tied setting is listed last, after the ranked one, despite its higher mean.
    assert verdict.settings["label"].to_list() == ["e5 flat", "bm25 bm25"]


def test_a_few_tied_queries_are_normal_and_say_nothing(tmp_path):
    queries = [f"test-{i}" for i in range(30)]
    rng = np.random.default_rng(2)
    _write_run(tmp_path, {("bm25", "bm25", None): {"dev": rng.uniform(0.5, 0.7, 10), "test": rng.uniform(0.5, 0.7, 30)},
                          ("e5", "flat", None): {"dev": rng.uniform(0.3, 0.5, 10), "test": rng.uniform(0.3, 0.5, 30)}},
               splits={})
    # 26 of 30 is 87%, under the "nearly all" of 90%.
    bm25 = {q: ([0.0] * 12 if i < 26 else [3.0, 2.0]) for i, q in enumerate(queries)}
    _write_runs(tmp_path, {("bm25", "bm25", None): bm25, ("e5", "flat", None): _real(queries, rng)})
    verdict = decide(tmp_path, "ndcg@10")
    assert verdict.ranked_by_ties == [] and verdict.best["label"] == "bm25 bm25"
    assert not any("Ranked by ties" in s for s in verdict_sentences(verdict))


def test_tied_rankings_counts_the_top_k_only():
    runs = pl.DataFrame([
        # q1: the top 2 tie (5, 5), a lower doc below: tied at k=2, not at k=3.
        ("a", "flat", None, "q1", "d1", 5.0), ("a", "flat", None, "q1", "d2", 5.0), ("a", "flat", None, "q1", "d3", 1.0),
        # q2: every score 0: tied and all zero at any k.
        ("a", "flat", None, "q2", "d1", 0.0), ("a", "flat", None, "q2", "d2", 0.0), ("a", "flat", None, "q2", "d3", 0.0),
        # q3: one document: nothing to tie.
        ("a", "flat", None, "q3", "d1", 0.0),
    ], schema=RUN, orient="row")
    at2 = tied_rankings(runs, 2).row(0, named=True)
    at3 = tied_rankings(runs, 3).row(0, named=True)
    assert (at2["queries"], at2["tied"], at2["all_zero"]) == (3, 2, 1)
    assert (at3["queries"], at3["tied"], at3["all_zero"]) == (3, 1, 1)
    assert tied_rankings(runs, 2, ["q2"]).row(0, named=True)["queries"] == 1


@pytest.mark.parametrize("n", range(1, 9))
def test_smallest_p_is_the_exact_sign_flip_floor(n):
    # Every sign pattern of n equal, nonzero differences: the observed one and its mirror are
    # the only two as extreme, so the exact p is 2 / 2^n (1 for n = 1).
    diffs = np.ones(n)
    extreme = sum(abs(np.dot(signs, diffs)) >= n for signs in itertools.product((-1, 1), repeat=n))
    assert smallest_p(n) == extreme / 2 ** n
    # The report's Monte-Carlo estimate of it agrees to within its own noise.
    estimate = randomization_p_value(diffs, 20000, np.random.default_rng(n))[0]
    assert estimate == pytest.approx(smallest_p(n), abs=0.02)


def test_three_test_queries_say_no_difference_can_be_significant(tmp_path):
    rng = np.random.default_rng(3)
    _write_run(tmp_path, {("big", "flat", None): {"dev": rng.uniform(0.3, 0.9, 40), "test": [0.9, 0.8, 0.85]},
                          ("small", "flat", None): {"dev": rng.uniform(0.3, 0.9, 40), "test": [0.2, 0.1, 0.15]}},
               splits={})
    verdict = decide(tmp_path, "ndcg@10")
    text = verdict_sentences(verdict)
    assert ("Only 3 test queries (fewer than verdict.min_queries, 20): the paired randomisation test cannot give "
            "a p below 0.25 (2 / 2^3), so no difference can be significant at 0.05; judge more queries.") in text
    # Even a difference of 0.7 on every query is not significant: the test's p is near its floor.
    assert verdict.versus_runner_up.p_value >= 0.2 and not verdict.versus_runner_up.significant
    assert any(s.startswith("It is not significantly different from the runner-up") for s in text)


def test_ten_test_queries_give_the_floor_and_min_queries_is_a_spec_key(tmp_path):
    rng = np.random.default_rng(4)
    _write_run(tmp_path, {("big", "flat", None): {"dev": rng.uniform(0.3, 0.9, 40), "test": rng.uniform(0.6, 0.9, 10)},
                          ("small", "flat", None): {"dev": rng.uniform(0.3, 0.9, 40), "test": rng.uniform(0.1, 0.3, 10)}},
               splits={})
    text = verdict_sentences(decide(tmp_path, "ndcg@10"))
    assert ("Only 10 test queries (fewer than verdict.min_queries, 20): the paired randomisation test cannot give "
            "a p below 0.00195 (2 / 2^10), so a difference is significant only when nearly every query moves the "
            "same way; the intervals are rough at this size.") in text
    quiet = verdict_sentences(decide(tmp_path, "ndcg@10", VerdictSpec(min_queries=10)))
    assert not any(s.startswith("Only 10 test queries") for s in quiet)
