"""The rerank stage's calls: all queries' pairs together, length-sorted, in the reranker's batch
size, each pair scored once, nothing scored on a rerun, the same scores and order as one query at
a time; embedding-rescore embeds each document once across queries."""
from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from retbench.tasks.analysis.runs import RUN_SCHEMA, trec_order
from retbench.tasks.progress import Interrupted, clear_stop, request_stop
from retbench.tasks.rerankers import create_reranker
from retbench.tasks.rerankers.base import RerankBatch
from retbench.tasks.stages.rerank import rerank_run

# q4 asks what q1 asks: its pairs are q1's, scored once.
QUERIES = pl.DataFrame({"query_id": ["q1", "q2", "q3", "q4"],
                        "text": ["wing flutter", "heat transfer in a wing", "shock", "wing flutter"]})
WORDS = ["wing", "heat", "flutter", "shock", "transfer", "boundary", "layer"]
CHUNKS = pl.DataFrame({"chunk_id": [f"d{i}#0" for i in range(7)],
                       "text": [" ".join(WORDS[: i + 1]) + " x" * (7 - i) for i in range(7)]})


def first_stage(depth: int = 5) -> pl.DataFrame:
    offsets = {"q1": 0, "q2": 1, "q3": 2, "q4": 0}  # q4 ranks q1's documents
    rows = [(q, f"d{(j + offsets[q]) % 7}", float(depth - j)) for q in QUERIES["query_id"] for j in range(depth)]
    frame = pl.DataFrame(rows, schema={"query_id": pl.String, "doc_id": pl.String, "score": pl.Float64}, orient="row")
    return trec_order(frame.with_columns(provider=pl.lit("e5"), index=pl.lit("flat"), nprobe=pl.lit(None, pl.Int64),
                                         chunk_id=pl.col("doc_id") + "#0")).select(list(RUN_SCHEMA))


def shared_words(query: str, document: str) -> float:
    return float(len(set(query.split()) & set(document.split())))  # small integers: many ties


class OneQueryAtATime:
    """The old path's shape: a call is one query's documents."""

    kind = "fake-scorer"

    def __init__(self):
        self.calls: list = []

    def fingerprint(self) -> dict:
        return {"kind": self.kind}

    def score(self, query: str, documents: list[str]) -> np.ndarray:
        self.calls.append([(query, d) for d in documents])
        return np.array([shared_words(query, d) for d in documents])


class PairScorer(OneQueryAtATime):
    pair_batch_size = 4

    def score_pairs(self, pairs: list[tuple[str, str]]) -> RerankBatch:
        self.calls.append(list(pairs))
        return RerankBatch(np.array([shared_words(q, d) for q, d in pairs]), 0.25 * len(pairs))


def rerank(reranker, store, top_n: int = 5, **kw):
    return rerank_run(first_stage(), reranker, "fake", QUERIES, CHUNKS, store, system="s", top_n=top_n, **kw)


def test_pairs_of_all_queries_go_together_length_sorted_in_the_rerankers_batch_size(tmp_path):
    reranker = PairScorer()
    result = rerank(reranker, tmp_path)
    pairs = [pair for call in reranker.calls for pair in call]
    # 4 queries x 5 documents, q4's 5 pairs are q1's: 15 distinct pairs, each scored once.
    assert result.pairs == 20 and result.scored == 15 and len(pairs) == len(set(pairs)) == 15
    assert [len(call) for call in reranker.calls] == [4, 4, 4, 3]
    lengths = [len(q) + len(d) for q, d in pairs]
    assert lengths == sorted(lengths)
    assert any(len({q for q, _ in call}) > 1 for call in reranker.calls)  # calls mix queries
    assert result.latency["queries"] == 4 and result.latency["max"] == pytest.approx(5 * 0.25)

    again = rerank(reranker, tmp_path)
    assert again.scored == 0 and len(reranker.calls) == 4


def test_scores_order_and_ties_as_with_one_query_at_a_time(tmp_path):
    batched = pl.read_parquet(rerank(PairScorer(), tmp_path / "a", top_n=4).path)
    old = OneQueryAtATime()
    single = pl.read_parquet(rerank(old, tmp_path / "b", top_n=4, batch_size=2).path)
    assert all(len({q for q, _ in call}) == 1 and len(call) <= 2 for call in old.calls)
    assert batched.select("query_id", "rank", "doc_id").equals(single.select("query_id", "rank", "doc_id"))
    np.testing.assert_allclose(batched["score"].to_numpy(), single["score"].to_numpy(), rtol=0, atol=1e-6)
    # Ties among the reranked documents are broken as before (document id descending, as trec_eval),
    # and the tail (d4) follows under the lowest reranked score.
    q1 = batched.filter(pl.col("query_id") == "q1")
    assert q1["doc_id"].to_list() == ["d3", "d2", "d1", "d0", "d4"]
    assert q1["score"].to_list() == [2.0, 2.0, 1.0, 1.0, 0.0]


def test_a_stop_request_keeps_the_batch_done_and_a_rerun_scores_the_rest(tmp_path):
    reranker = PairScorer()
    request_stop()
    try:
        with pytest.raises(Interrupted, match="4 of 15 pairs kept"):
            rerank(reranker, tmp_path)
    finally:
        clear_stop()
    assert rerank(reranker, tmp_path).scored == 11


def test_embedding_rescore_embeds_each_document_once_across_queries(tmp_path, monkeypatch):
    monkeypatch.setenv("RETBENCH_PROGRESS_EVERY", "0")  # a progress line per batch
    reranker = create_reranker("embedding-rescore", {"provider": "hashing", "provider_options": {"dim": 32},
                                                      "batch_size": 3})
    seen: list[tuple[str, int]] = []
    encode = reranker.provider.encode
    reranker.provider.encode = lambda texts, role: seen.append((role, len(texts))) or encode(texts, role)
    lines: list[str] = []
    result = rerank(reranker, tmp_path, progress=lines.append)
    documents = sum(n for role, n in seen if role == "document")
    queries = sum(n for role, n in seen if role == "query")
    assert (documents, queries) == (7, 3)  # every chunk is in some query's top 5 (20 pairs); q4's text is q1's
    assert max(n for _, n in seen) <= 3 and result.scored == 15
    assert any(line.startswith("embed rerank-hashing documents: ") for line in lines), lines
    q1 = pl.read_parquet(result.path).filter(pl.col("query_id") == "q1").sort("doc_id")
    vectors = reranker.provider.encode
    q = vectors(["wing flutter"], "query")[0]
    d = vectors(CHUNKS.filter(pl.col("chunk_id").is_in(q1["chunk_id"].to_list())).sort("chunk_id")["text"].to_list(),
                "document")
    expected = (d / np.linalg.norm(d, axis=1, keepdims=True)) @ (q / np.linalg.norm(q))
    np.testing.assert_allclose(q1["score"].to_numpy(), expected, rtol=0, atol=1e-6)

    seen.clear()
    assert rerank(reranker, tmp_path).scored == 0 and seen == []
    # Another system over the same pairs: served by the score cache, nothing embedded.
    assert rerank_run(first_stage(), reranker, "fake", QUERIES, CHUNKS, tmp_path, system="other", top_n=5).scored == 0
    assert seen == []
