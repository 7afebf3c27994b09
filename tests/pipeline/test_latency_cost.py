"""Latency profile, cost ledger and storage footprint."""
from __future__ import annotations

from datetime import date

import faiss
import numpy as np
import pytest

from retbench.tasks.analysis.cost import PricingSpec, cost_row, cost_table, storage_table, weakest_source
from retbench.tasks.stages.embed import embed_texts
from retbench.tasks.stages.latency import LATENCY_COLUMNS, QUERY_CALLS, LatencySpec, profile_latency, profile_query_latency
from retbench.tasks.providers import create_provider
from retbench.support.faulty_server import FaultyServer

TEXTS = [f"document {i} about refunds and invoices" for i in range(40)]


def test_latency_table_for_a_local_provider():
    spec = LatencySpec(batch_sizes=[1, 10], iterations=3, warmup=1, concurrency=[1, 4])
    table = profile_latency(create_provider("hashing", {"dim": 64}), "hash", TEXTS, spec)
    assert table.columns == LATENCY_COLUMNS
    # Local providers are not swept over concurrency.
    assert table.select("batch_size", "concurrency", "calls").rows() == [(1, 1, 3), (10, 1, 3)]
    assert (table["texts_per_second"] > 0).all()
    assert (table["p50_ms"] <= table["p95_ms"]).all() and (table["p95_ms"] <= table["p99_ms"]).all()


def test_query_latency_is_one_query_per_call_with_a_noise_band():
    queries = [f"query {i}" for i in range(7)]
    row = profile_query_latency(create_provider("hashing", {"dim": 64}), "hash", queries).row(0, named=True)
    assert (row["role"], row["batch_size"], row["calls"]) == ("query", 1, QUERY_CALLS)
    # 60 calls bound the p95 at both ends: the band holds it and lies within the calls' range.
    assert row["p95_ms_low"] <= row["p95_ms"] <= row["p95_ms_high"]
    assert row["p50_ms"] <= row["p95_ms"]


def test_concurrency_sweep_against_a_slow_server():
    with FaultyServer(dim=8) as server:
        server.fault("slow", seconds=0.15, times=None)
        provider = create_provider("openai-compatible", {"base_url": server.base_url + "/v1", "model": "m", "timeout": 5})
        spec = LatencySpec(batch_sizes=[5], iterations=2, warmup=1, concurrency=[1, 4])
        table = profile_latency(provider, "slow", TEXTS, spec)
        bodies = [s.texts for s in server.seen]
    one, four = table.sort("concurrency").rows(named=True)
    assert (one["calls"], four["calls"]) == (2, 8)
    assert one["p50_ms"] >= 150 and four["p50_ms"] >= 150
    # The server sleeps in parallel, so 4 concurrent requests move ~4x the texts per second.
    assert four["texts_per_second"] > 2.5 * one["texts_per_second"]
    # Warm-up plus timed calls, and the calls do not all repeat the same texts.
    assert len(bodies) == 1 + 2 + 1 + 8 and len({tuple(b) for b in bodies}) > 1


def test_latency_spec_validation():
    with pytest.raises(ValueError):
        LatencySpec(batch_sizes=[0])
    assert LatencySpec(concurrency=[4, 1, 4]).concurrency == [1, 4]


def test_cost_ledger_from_two_runs(tmp_path):
    pricing = PricingSpec(usd_per_million_tokens=0.02, price_date=date(2025, 1, 15), projected_documents=1_000_000)
    docs = [f"w{i} " * (i + 1) for i in range(10)]  # i+1 words: the fake server reports words as usage
    queries = ["a b", "c d e"]
    with FaultyServer(dim=8) as server:
        provider = create_provider("openai-compatible", {"base_url": server.base_url + "/v1", "model": "m"})

        def run():
            d = embed_texts(provider, "api", [f"d{i}" for i in range(10)], docs, "document", tmp_path, batch_size=4)
            q = embed_texts(provider, "api", ["q0", "q1"], queries, "query", tmp_path)
            return cost_row("api", provider.kind, pricing, d, q, corpus_documents=5)

        first, second = run(), run()
    doc_tokens = sum(range(1, 11))  # 55 words
    assert first["token_source"] == "usage" and first["corpus_tokens"] == doc_tokens
    assert first["corpus_usd"] == pytest.approx(doc_tokens * 0.02 / 1e6)
    assert first["usd_per_1000_queries"] == pytest.approx((2 + 3) / 2 * 1000 * 0.02 / 1e6)
    assert first["usd_saved_by_cache"] == 0 and first["usd_this_run"] == pytest.approx((55 + 5) * 0.02 / 1e6)
    # 5 source documents -> 11 tokens per document -> 11M tokens for a million documents.
    assert first["projected_usd"] == pytest.approx(11 * 1_000_000 * 0.02 / 1e6)

    # The rerun embeds nothing: it costs nothing, the cache saved the whole bill (estimated, and says so).
    assert second["tokens_embedded_this_run"] == 0 and second["usd_this_run"] == 0
    assert second["token_source"] == "estimate"
    estimated = sum(-(-len(t) // 4) for t in docs) + sum(-(-len(t) // 4) for t in queries)
    assert second["tokens_from_cache"] == estimated
    assert second["usd_saved_by_cache"] == pytest.approx(estimated * 0.02 / 1e6)

    table = cost_table([first, second])
    assert table.height == 2 and table["price_date"].to_list() == [date(2025, 1, 15)] * 2


def test_local_provider_has_tokens_but_no_price(tmp_path):
    provider = create_provider("hashing", {"dim": 16})
    d = embed_texts(provider, "h", ["a"], ["twelve chars"], "document", tmp_path)
    q = embed_texts(provider, "h", ["q"], ["abc"], "query", tmp_path)
    row = cost_row("h", "hashing", None, d, q)
    assert (row["corpus_tokens"], row["token_source"], row["corpus_usd"], row["projected_usd"]) == (3, "estimate", None, None)
    assert cost_table([row])["corpus_usd"].dtype.is_float()


def test_weakest_token_source():
    assert weakest_source("usage", "tokenizer", "none") == "tokenizer"
    assert weakest_source("usage", "estimate") == "estimate"
    assert weakest_source("none") == "none"


def test_storage_measures_real_index_files(tmp_path):
    n, dim = 500, 32
    vectors = np.random.default_rng(0).standard_normal((n, dim)).astype(np.float32)
    flat = faiss.IndexFlatIP(dim)
    flat.add(vectors)
    faiss.write_index(flat, str(tmp_path / "flat.faiss"))
    quantizer = faiss.IndexFlatIP(dim)
    ivf = faiss.IndexIVFFlat(quantizer, dim, 8, faiss.METRIC_INNER_PRODUCT)
    ivf.train(vectors)
    ivf.add(vectors)
    faiss.write_index(ivf, str(tmp_path / "ivf_nlist-8_train-500_seed-0.faiss"))

    table = storage_table([("p", n, dim, [tmp_path / "flat.faiss", tmp_path / "ivf_nlist-8_train-500_seed-0.faiss"])])
    assert table["raw_vector_bytes"].to_list() == [n * dim * 4] * 2
    sizes = dict(zip(table["index"], table["index_bytes"]))
    assert sizes == {"flat": (tmp_path / "flat.faiss").stat().st_size,
                     "ivf_nlist-8_train-500_seed-0": (tmp_path / "ivf_nlist-8_train-500_seed-0.faiss").stat().st_size}
    # A flat index is the raw vectors plus a small header; IVF adds ids (8 bytes each) and centroids.
    assert n * dim * 4 < sizes["flat"] < n * dim * 4 + 1024
    assert sizes["ivf_nlist-8_train-500_seed-0"] > n * (dim * 4 + 8)
    with pytest.raises(FileNotFoundError):
        storage_table([("p", n, dim, [tmp_path / "missing.faiss"])])


def test_sweep_can_be_limited_to_some_batch_sizes():
    with FaultyServer(dim=8) as server:
        provider = create_provider("openai-compatible", {"base_url": server.base_url + "/v1", "model": "m"})
        spec = LatencySpec(batch_sizes=[1, 4], iterations=1, warmup=0, concurrency=[1, 2], sweep_batch_sizes=[4])
        table = profile_latency(provider, "p", TEXTS, spec)
    assert table.select("batch_size", "concurrency").rows() == [(1, 1), (4, 1), (4, 2)]
