"""A dataset with train queries, scored with split: all: the train queries keep their split in
per_query and in the breakdown's split slice, and what is tuned on dev stays on dev."""
import polars as pl

from retbench.tasks.analysis.breakdown import breakdown_table
from retbench.tasks.analysis.fusion import choose_alpha
from retbench.tasks.analysis.runs import RUN_SCHEMA
from retbench.tasks.analysis.score import score_runs
from retbench.tasks.datasets.model import CORPUS_SCHEMA, QRELS_SCHEMA, QUERIES_SCHEMA

CORPUS = pl.DataFrame([("d1", "", "one", "en"), ("d2", "", "two", "en")], schema=CORPUS_SCHEMA, orient="row")
QUERIES = pl.DataFrame([("a", "alpha", "en", "c", "train"), ("b", "beta", "en", "c", "train"),
                        ("v", "delta", "en", "c", "dev"), ("t", "theta", "en", "c", "test")],
                       schema=QUERIES_SCHEMA, orient="row")
QRELS = pl.DataFrame([(q, "d1", 1) for q in "abvt"], schema=QRELS_SCHEMA, orient="row")


def _run(first: dict[str, str], provider: str = "m") -> pl.DataFrame:
    """d1 or d2 first for each query, the other second."""
    rows = [(q, provider, "flat", None, rank, doc, f"{doc}#0", 1.0 - rank / 10)
            for q, top in first.items() for rank, doc in enumerate([top, "d2" if top == "d1" else "d1"], 1)]
    return pl.DataFrame(rows, schema=RUN_SCHEMA, orient="row")


def test_train_queries_are_scored_under_their_own_split():
    # a and v find d1 first (MRR 1), b and t second (MRR 0.5).
    per_query = score_runs(_run({"a": "d1", "b": "d2", "v": "d1", "t": "d2"}), QRELS, QUERIES, ["mrr"])
    assert dict(per_query.select("query_id", "split").iter_rows()) == {"a": "train", "b": "train", "v": "dev", "t": "test"}
    table = breakdown_table(per_query, QUERIES, QRELS, CORPUS, resamples=10)
    by_split = {r["slice"]: (r["mean"], r["n"]) for r in table.filter(pl.col("slice_kind") == "split").iter_rows(named=True)}
    assert by_split == {"train": (0.75, 2), "dev": (1.0, 1), "test": (0.5, 1)}


def test_fusion_alpha_is_still_chosen_on_dev_only():
    # Run a ranks d1 first only for v; run b only for the train queries and t. On dev, alpha 1
    # (all a) is best; had the train queries counted, the smaller alphas would have won.
    a = _run({"a": "d2", "b": "d2", "v": "d1", "t": "d2"}, "a")
    b = _run({"a": "d1", "b": "d1", "v": "d2", "t": "d1"}, "b")
    choice = choose_alpha(a, b, QRELS, QUERIES, alphas=(0.0, 1.0), measure="mrr")
    assert (choice.alpha, choice.dev_queries, choice.test_queries) == (1.0, 1, 1)
    assert choice.dev_scores == {0.0: 0.5, 1.0: 1.0}
