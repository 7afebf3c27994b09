"""Fusion of two runs, checked against values computed by hand, and the alpha chosen on dev only."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest

from retbench.tasks.analysis.fusion import choose_alpha, normalized_scores, reciprocal_rank_fusion, score_fusion
from retbench.tasks.analysis.runs import RUN_SCHEMA
from retbench.tasks.analysis.system_ledger import systems_tables


def run(name: str, rows: list[tuple[str, str, float]]) -> pl.DataFrame:
    frame = pl.DataFrame(rows, schema={"query_id": pl.String, "doc_id": pl.String, "score": pl.Float64}, orient="row")
    return frame.with_columns(provider=pl.lit(name), index=pl.lit("flat"), nprobe=pl.lit(None, pl.Int64),
                              chunk_id=pl.col("doc_id") + f"#{name}", rank=pl.lit(0, pl.Int64)).select(list(RUN_SCHEMA))


# Run A ranks d1 (10), d2 (8), d3 (2); run B ranks d2 (0.9), d4 (0.5).
A = run("a", [("q1", "d1", 10.0), ("q1", "d2", 8.0), ("q1", "d3", 2.0)])
B = run("b", [("q1", "d2", 0.9), ("q1", "d4", 0.5)])


def as_dict(fused: pl.DataFrame) -> dict[str, float]:
    return dict(zip(fused["doc_id"].to_list(), fused["score"].to_list()))


def test_rrf_by_hand():
    fused = reciprocal_rank_fusion(A, B, k=60, name="hybrid")
    assert fused.schema == pl.Schema(RUN_SCHEMA)
    assert fused["doc_id"].to_list() == ["d2", "d1", "d4", "d3"]
    expected = {"d1": 1 / 61, "d2": 1 / 62 + 1 / 61, "d3": 1 / 63, "d4": 1 / 62}
    for doc, value in as_dict(fused).items():
        assert value == pytest.approx(expected[doc], rel=1e-12)
    assert fused["rank"].to_list() == [1, 2, 3, 4]
    assert set(fused["provider"]) == {"hybrid"} and set(fused["index"]) == {"rrf-k60"}
    # the document's chunk: the first run's, else the second's
    assert dict(zip(fused["doc_id"], fused["chunk_id"])) == {"d1": "d1#a", "d2": "d2#a", "d3": "d3#a", "d4": "d4#b"}


def test_rrf_k_changes_the_order_and_depth_cuts():
    # k = 1: d1 1/2 = .5, d2 1/3 + 1/2 = .833, d4 1/3, d3 1/4
    fused = reciprocal_rank_fusion(A, B, k=1, depth=2)
    assert fused["doc_id"].to_list() == ["d2", "d1"]
    np.testing.assert_allclose(fused["score"].to_numpy(), [1 / 3 + 1 / 2, 1 / 2])


def test_rrf_uses_trec_rank_not_the_given_rank_column():
    shuffled = A.with_columns(rank=pl.Series([3, 1, 2]))  # wrong ranks are recomputed from scores
    assert as_dict(reciprocal_rank_fusion(shuffled, B)) == as_dict(reciprocal_rank_fusion(A, B))


def test_minmax_fusion_by_hand_with_floors_for_missing_documents():
    # A: d1 1, d2 .75, d3 0; B: d2 1, d4 0. Missing: d1, d3 from B -> 0; d4 from A -> 0.
    half = score_fusion(A, B, alpha=0.5)
    assert as_dict(half) == pytest.approx({"d2": 0.875, "d1": 0.5, "d4": 0.0, "d3": 0.0})
    assert half["doc_id"].to_list() == ["d2", "d1", "d4", "d3"]  # tie broken by doc id descending
    heavy_a = score_fusion(A, B, alpha=0.9)
    assert heavy_a["doc_id"].to_list()[:2] == ["d1", "d2"]  # .9 vs .9 * .75 + .1 = .775
    assert as_dict(score_fusion(A, B, alpha=1.0))["d1"] == 1.0 and as_dict(score_fusion(A, B, alpha=0.0))["d2"] == 1.0


def test_zscore_fusion_by_hand():
    mean, std = 20 / 3, math.sqrt(((10 - 20 / 3) ** 2 + (8 - 20 / 3) ** 2 + (2 - 20 / 3) ** 2) / 3)  # population std
    za = {d: (s - mean) / std for d, s in {"d1": 10, "d2": 8, "d3": 2}.items()}
    zb = {"d2": 1.0, "d4": -1.0}  # .9 and .5: mean .7, std .2
    fused = as_dict(score_fusion(A, B, alpha=0.25, normalization="zscore"))
    assert fused["d1"] == pytest.approx(0.25 * za["d1"] + 0.75 * -1.0)  # B's floor
    assert fused["d2"] == pytest.approx(0.25 * za["d2"] + 0.75 * 1.0)
    assert fused["d3"] == pytest.approx(0.25 * za["d3"] + 0.75 * -1.0)
    assert fused["d4"] == pytest.approx(0.25 * za["d3"] + 0.75 * -1.0)  # A's floor is d3's z


def test_constant_scores_normalise_to_zero_and_a_query_only_one_run_has():
    one = run("a", [("q1", "x", 3.0), ("q1", "y", 3.0)])
    assert normalized_scores(one, "minmax")["norm"].to_list() == [0.0, 0.0]
    assert normalized_scores(one, "zscore")["norm"].to_list() == [0.0, 0.0]
    only_b = run("b", [("q2", "z", 5.0), ("q2", "w", 1.0)])
    fused = score_fusion(one, only_b, alpha=0.5)
    assert as_dict(fused.filter(pl.col("query_id") == "q2")) == pytest.approx({"z": 0.5, "w": 0.0})


def test_bad_runs_are_refused():
    with pytest.raises(ValueError, match="ranks document 'd1' twice for query 'q1'"):
        reciprocal_rank_fusion(pl.concat([A, A.head(1)]), B)
    with pytest.raises(ValueError, match="alpha must be in"):
        score_fusion(A, B, alpha=1.5)
    with pytest.raises(ValueError, match="non-finite"):
        score_fusion(A.with_columns(score=pl.lit(float("nan"))), B, alpha=0.5)


def test_alpha_is_chosen_on_dev_only_and_reported_on_test():
    # dev q1: relevant d1, which only A ranks first -> alpha 1 wins (ndcg@1 = 1; else d2 is first).
    # test q2: relevant y, which only B ranks first -> the test queries would have wanted alpha 0.
    a = pl.concat([A, run("a", [("q2", "x", 5.0), ("q2", "y", 1.0)])])
    b = pl.concat([B, run("b", [("q2", "y", 0.8), ("q2", "x", 0.2)])])
    queries = pl.DataFrame({"query_id": ["q1", "q2"], "split": ["dev", "test"]})
    qrels = pl.DataFrame({"query_id": ["q1", "q2"], "doc_id": ["d1", "y"], "grade": [1, 1]})
    choice = choose_alpha(a, b, qrels, queries, alphas=[0.0, 0.5, 1.0], measure="ndcg@1")
    assert choice.dev_scores == {0.0: 0.0, 0.5: 0.0, 1.0: 1.0}
    assert choice.alpha == 1.0 and choice.measure == "ndcg@1"
    assert (choice.dev_queries, choice.test_queries) == (1, 1)
    assert choice.test_score == 0.0  # x first on q2 at alpha 1
    assert choice.manifest()["dev_scores"] == {"0": 0.0, "0.5": 0.0, "1": 1.0}
    assert choice.run["query_id"].unique().sort().to_list() == ["q1", "q2"]
    # The systems table states where alpha was chosen and what it scored on dev and on test.
    hybrid = SimpleNamespace(system="tuned", kind="hybrid", index="fusion-minmax", setting=None, facts=choice.manifest(),
                             first=("a", "flat", None), second=("b", "flat", None))
    rrf = SimpleNamespace(**{**vars(hybrid), "system": "rrf", "facts": {"method": "rrf", "k": 60}})
    rows = systems_tables([hybrid, rrf], {}, None, None)["systems"].rows_by_key("system", named=True, unique=True)
    assert {k: v for k, v in rows["tuned"].items() if k.startswith("alpha")} == {
        "alpha": 1.0, "alpha_chosen_on": "dev", "alpha_measure": "ndcg@1", "alpha_dev_queries": 1,
        "alpha_dev_score": 1.0, "alpha_test_queries": 1, "alpha_test_score": 0.0}
    assert rows["rrf"]["alpha"] is None and rows["rrf"]["alpha_chosen_on"] is None


def test_ties_on_dev_pick_the_smaller_alpha_and_no_dev_query_is_an_error():
    queries = pl.DataFrame({"query_id": ["q1"], "split": ["dev"]})
    qrels = pl.DataFrame({"query_id": ["q1"], "doc_id": ["d2"], "grade": [1]})  # d2 first at any alpha <= .8
    choice = choose_alpha(A, B, qrels, queries, alphas=[0.2, 0.0, 0.6], measure="ndcg@1")
    assert choice.alpha == 0.0 and choice.test_score is None
    with pytest.raises(ValueError, match="no judged dev query"):
        choose_alpha(A, B, qrels, queries.with_columns(split=pl.lit("test")))


RANX_RRF = """
import json, sys
from ranx import Run, fuse
runs = [Run(r) for r in json.load(sys.stdin)]
json.dump(fuse(runs=runs, method="rrf", params={"k": 60}).to_dict(), sys.stdout)
"""


def ranx_rrf(runs: list[dict]) -> dict:
    """ranx's RRF, in a child process with numba's JIT off: compiling ranx's kernels cold (a fresh
    venv, as in CI) took 46-128 s here, for a fusion of a dozen scores that pure Python does in
    milliseconds. The arithmetic compared is the same either way. (The flag must be set before
    numba is imported, hence the child.)"""
    env = {**os.environ, "NUMBA_DISABLE_JIT": "1"}
    done = subprocess.run([sys.executable, "-c", RANX_RRF], input=json.dumps(runs), env=env,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def test_rrf_of_three_runs_equals_ranx():

    c = run("c", [("q1", "d4", 5.0), ("q1", "d3", 4.0), ("q1", "d1", 1.0), ("q2", "d7", 1.0), ("q2", "d5", 0.2)])
    a = pl.concat([A, run("a", [("q2", "d5", 1.0), ("q2", "d6", 0.5)])])
    b = pl.concat([B, run("b", [("q2", "d6", 3.0)])])
    fused = reciprocal_rank_fusion(a, b, c, k=60, name="three")
    as_ranx = [{q: dict(zip(g["doc_id"], g["score"])) for (q,), g in r.group_by("query_id")} for r in (a, b, c)]
    expected = ranx_rrf(as_ranx)
    got = {(q, d): s for q, d, s in fused.select("query_id", "doc_id", "score").rows()}
    assert set(got) == {(q, d) for q, docs in expected.items() for d in docs}
    for (q, d), value in got.items():
        assert value == pytest.approx(expected[q][d], rel=1e-12)
    # ties (d2 and d4 on q1) in trec order: doc id descending
    assert fused.filter(pl.col("query_id") == "q1")["doc_id"].to_list() == ["d4", "d2", "d1", "d3"]
    # the chunk that stands for a document is that of the first run holding it
    assert dict(zip(fused["doc_id"], fused["chunk_id"]))["d7"] == "d7#c"
    assert dict(zip(fused["doc_id"], fused["chunk_id"]))["d4"] == "d4#b"
    # two runs give what the two-run form always gave
    assert reciprocal_rank_fusion(a, b, k=60).equals(reciprocal_rank_fusion(*[a, b], k=60))
