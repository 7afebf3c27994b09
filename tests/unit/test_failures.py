"""Failure log: hand-made runs that put each query in a known failure class."""
import math

import polars as pl
import pytest

from retbench.tasks.analysis.failures import FAILURE_SCHEMA, failure_counts, failure_table
from retbench.tasks.analysis.runs import RUN_SCHEMA

FLAT = ("m", "flat", None)
IVF = ("m", "ivf", 1)


def _run(rankings: dict[tuple, dict[str, list[str]]]) -> pl.DataFrame:
    """{setting: {query: [doc ids best first]}} -> a run table with descending scores.

    The rank column is deliberately scrambled: rankings must come from score and doc id."""
    rows = []
    for (provider, index, nprobe), per_query in rankings.items():
        for query_id, docs in per_query.items():
            for position, doc_id in enumerate(docs):
                rows.append((query_id, provider, index, nprobe, 99 - position, doc_id, f"{doc_id}#0", 1.0 - position / 100))
    return pl.DataFrame(rows, schema=RUN_SCHEMA, orient="row")


def _fillers(n: int, prefix: str = "n") -> list[str]:
    return [f"{prefix}{i:02d}" for i in range(n)]


QUERIES = pl.DataFrame({
    "query_id": ["qa", "qb", "qc", "qd"],
    "text": ["found first", "found late", "never found", "found beyond k"],
    "language": ["en", "hi", "hinglish", "en"],
    "category": ["c1", "c2", "c2", "c3"],
    "split": ["dev", "test", "dev", "test"],
})
QRELS = pl.DataFrame({
    "query_id": ["qa", "qb", "qb", "qc", "qd"],
    "doc_id": ["ra", "rb", "n00", "rc", "rd"],
    "grade": [2, 1, 0, 1, 1],  # qb's n00 is judged non-relevant (grade 0)
}, schema={"query_id": pl.String, "doc_id": pl.String, "grade": pl.Int64})

RANKINGS = {
    FLAT: {
        "qa": ["ra", *_fillers(11)],
        "qb": [*_fillers(7), "rb", *_fillers(4, "m")],   # relevant at rank 8
        "qc": _fillers(12),                              # relevant never retrieved
        "qd": [*_fillers(11), "rd"],                     # relevant at rank 12, beyond k = 10
    },
    IVF: {
        "qa": ["ra", *_fillers(11)],
        "qb": _fillers(12),                              # the index lost what exact search found
        "qc": _fillers(12),
        "qd": _fillers(12),                              # lost too, but exact had it beyond k only
    },
}


def _per_query(run: pl.DataFrame) -> pl.DataFrame:
    # nDCG@10 by hand for single-relevant queries: 1 / log2(rank + 1) if rank <= 10 else 0.
    rows = []
    for setting, per_query in RANKINGS.items():
        for query_id, docs in per_query.items():
            relevant = {d for q, d, g in QRELS.iter_rows() if q == query_id and g > 0}
            ranks = [i + 1 for i, d in enumerate(docs[:10]) if d in relevant]
            gain = 1 / math.log2(ranks[0] + 1) if ranks else 0.0
            rows.append((*setting, query_id, "ndcg@10", gain))
    return pl.DataFrame(rows, schema={"provider": pl.String, "index": pl.String, "nprobe": pl.Int64,
                                      "query_id": pl.String, "measure": pl.String, "value": pl.Float64}, orient="row")


@pytest.fixture()
def failures():
    run = _run(RANKINGS)
    return failure_table(run, _per_query(run), QUERIES, QRELS)


def _row(failures, setting, query_id):
    provider, index, nprobe = setting
    match = failures.filter((pl.col("index") == index) & (pl.col("query_id") == query_id))
    assert match.height == 1, f"{setting} {query_id}: {match.height} rows"
    return match.row(0, named=True)


def test_only_queries_below_threshold_are_logged(failures):
    assert failures.schema == pl.Schema(FAILURE_SCHEMA)
    logged = set(failures.select("index", "query_id").iter_rows())
    assert logged == {("flat", "qb"), ("flat", "qc"), ("flat", "qd"), ("ivf", "qb"), ("ivf", "qc"), ("ivf", "qd")}


def test_misranked_query(failures):
    row = _row(failures, FLAT, "qb")
    assert row["failure_class"] == "misranked"
    assert row["first_relevant_rank"] == 8
    assert row["value"] == pytest.approx(1 / math.log2(9))
    assert (row["query_text"], row["query_language"], row["category"], row["split"]) == ("found late", "hi", "c2", "test")
    top = row["top_k"]
    assert [hit["rank"] for hit in top] == list(range(1, 11))
    assert top[0] == {"rank": 1, "doc_id": "n00", "chunk_id": "n00#0", "score": 1.0, "grade": 0, "relevant": False}
    assert top[1]["grade"] is None and top[1]["relevant"] is False  # unjudged
    assert top[7]["doc_id"] == "rb" and top[7]["grade"] == 1 and top[7]["relevant"] is True
    assert row["exact_first_relevant_rank"] is None  # exact search is not compared with itself


def test_absent_queries(failures):
    never = _row(failures, FLAT, "qc")
    assert never["failure_class"] == "absent" and never["first_relevant_rank"] is None
    beyond = _row(failures, FLAT, "qd")
    assert beyond["failure_class"] == "absent" and beyond["first_relevant_rank"] == 12
    assert beyond["relevant_judged"] == 1
    assert [hit["doc_id"] for hit in beyond["top_k"]] == _fillers(10)


def test_ann_lost_takes_precedence_over_absent(failures):
    lost = _row(failures, IVF, "qb")
    assert lost["failure_class"] == "ann_lost"
    assert lost["first_relevant_rank"] is None and lost["exact_first_relevant_rank"] == 8
    # exact search found qd's relevant document only beyond k: the index lost nothing that counted
    assert _row(failures, IVF, "qd")["failure_class"] == "absent"
    assert _row(failures, IVF, "qc")["failure_class"] == "absent"


def test_ties_are_ordered_like_trec_eval():
    run = _run({FLAT: {"qb": ["a", "b", "rb"]}}).with_columns(score=pl.lit(0.5))
    per_query = pl.DataFrame({"provider": ["m"], "index": ["flat"], "nprobe": pl.Series([None], dtype=pl.Int64),
                              "query_id": ["qb"], "measure": ["ndcg@10"], "value": [0.5]})
    row = failure_table(run, per_query, QUERIES, QRELS, threshold=0.6).row(0, named=True)
    # equal scores: doc id descending, so "rb" comes first
    assert [hit["doc_id"] for hit in row["top_k"]] == ["rb", "b", "a"]
    assert row["first_relevant_rank"] == 1 and row["failure_class"] == "misranked"


def test_measure_threshold_and_k_are_configurable():
    run = _run(RANKINGS)
    per_query = _per_query(run)
    # With k = 5, qb's relevant doc (rank 8) is outside the top k: absent, not misranked,
    # and under IVF no longer ann_lost (exact search had it at 8 > 5).
    small_k = failure_table(run, per_query, QUERIES, QRELS, k=5)
    assert _row(small_k, FLAT, "qb")["failure_class"] == "absent"
    assert _row(small_k, IVF, "qb")["failure_class"] == "absent"
    assert all(len(t) == 5 for t in small_k["top_k"])
    # A threshold of 0.3 lets qb (0.315) pass.
    assert ("flat", "qb") not in set(failure_table(run, per_query, QUERIES, QRELS, threshold=0.3)
                                     .select("index", "query_id").iter_rows())
    with pytest.raises(ValueError, match="no measure 'recall@10'"):
        failure_table(run, per_query, QUERIES, QRELS, measure="recall@10")


def test_failure_counts(failures):
    counts = {(i, c): n for _, i, _, c, n in failure_counts(failures).iter_rows()}
    assert counts == {("flat", "absent"): 2, ("flat", "misranked"): 1, ("ivf", "absent"): 2, ("ivf", "ann_lost"): 1}
