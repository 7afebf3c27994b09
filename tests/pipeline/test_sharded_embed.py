"""Sharded embedding (tasks/stages/embed_shards.py): parts by content key give the single call's
vectors and counts, a failed part loses only its in-flight batch, and one process keeps an HTTP
provider's requests in flight at most `concurrency` however many parts it runs at once."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from retbench.tasks.providers import create_provider
from retbench.tasks.stages.embed import embed_texts, read_vectors, shard_paths
from retbench.tasks.stages.embed_shards import embed_part, finish_embedding, plan_embedding, shard_of
from retbench.tasks.store.shards import journal_batches, journal_path, pending_paths

TEXTS = [f"document {i} about {'webhooks' if i % 3 else 'billing'} and item {i * 7 % 11}" for i in range(200)]
TEXTS[50] = TEXTS[10]  # a repeated text is embedded once, in one part
IDS = [f"d{i}" for i in range(200)]


def sharded(provider, store: Path, shards: int, batch: int, order=None, texts=TEXTS, ids=IDS, force=False):
    plan = plan_embedding(provider, "h", ids, texts, "document", store, shards, batch, force=force)
    order = order or range(shards)
    parts = [embed_part(provider, plan, i, shards, batch) for i in order]
    return plan, finish_embedding(plan, parts)


def test_a_texts_shard_is_its_content_key_modulo_the_shard_count():
    key = "00000000000000a" + "f" * 49  # int("00000000000000a", 16) == 10
    assert [shard_of(key, n) for n in (1, 3, 4, 7)] == [0, 1, 2, 3]


def test_parts_in_any_order_give_the_single_calls_vectors_and_counts(tmp_path):
    provider = create_provider("hashing", {"dim": 48})
    single = embed_texts(provider, "h", IDS, TEXTS, "document", tmp_path / "single", batch_size=16)
    plan, result = sharded(provider, tmp_path / "sharded", shards=4, batch=16, order=[3, 1, 0, 2])
    assert len(plan.parts) == 4 and plan.missing == 199
    assert (result.embedded, result.from_cache, result.repeated, result.count) == (199, 0, 1, 200)
    assert (result.embedded, result.from_cache, result.repeated) == (single.embedded, single.from_cache, single.repeated)
    assert result.key == single.key and result.dim == single.dim == 48
    ids_a, a = read_vectors(single)[:2]
    ids_b, b = read_vectors(result)[:2]
    assert ids_a == ids_b == IDS and np.array_equal(a, b)
    assert pending_paths(result.cache_dir) == []  # every part done and removed
    assert len(shard_paths(result.cache_dir)) == 4  # one merged shard per part

    # A rerun plans no part; texts added later land in parts by their own key.
    _, again = sharded(provider, tmp_path / "sharded", shards=4, batch=16)
    assert (again.embedded, again.from_cache) == (0, 200)  # as the single call counts: every cached copy
    more = TEXTS + ["a new document about refunds"]
    plan, grown = sharded(provider, tmp_path / "sharded", shards=4, batch=16, texts=more, ids=IDS + ["d200"])
    assert (grown.embedded, grown.from_cache, len(plan.parts)) == (1, 200, 1)


def test_few_missing_texts_make_few_parts(tmp_path):
    provider = create_provider("hashing", {"dim": 16})
    plan = plan_embedding(provider, "h", IDS[:40], TEXTS[:40], "document", tmp_path, 8, 16)
    assert len(plan.parts) == 3  # ceil(40 / 16): no part smaller than about a batch
    assert embed_part(provider, plan, 5, 8, 16).embedded == 0  # a part task with no part does nothing


def test_a_failed_part_loses_only_its_in_flight_batch_and_the_next_run_finishes_it(tmp_path):
    provider = create_provider("hashing", {"dim": 32})
    good = provider.encode_batches

    calls = {"n": 0}

    def dying(batches, role):
        for item in good(batches, role):
            calls["n"] += 1
            if calls["n"] == 3:
                raise RuntimeError("worker lost")
            yield item

    provider.encode_batches = dying
    plan = plan_embedding(provider, "h", IDS, TEXTS, "document", tmp_path, 1, 16)
    with pytest.raises(RuntimeError, match="worker lost"):
        embed_part(provider, plan, 0, 1, 16)
    assert len(pending_paths(plan.cache_dir)) == 1  # the part stays for whoever comes next
    # Its journal holds the two batches that completed before the failure.
    assert sum(b.num_rows for b in journal_batches(Path(plan.parts[0]))) == 32
    journal = journal_path(Path(plan.parts[0]))
    whole = journal.read_bytes()
    journal.write_bytes(whole[:-200])  # as if killed while writing the second batch: it is dropped
    assert sum(b.num_rows for b in journal_batches(Path(plan.parts[0]))) == 16
    journal.write_bytes(whole)
    provider.encode_batches = good

    # The next run claims the part left behind (the journal's rows are not in the cache yet, so
    # all 199 count as missing) and embeds only what the two finished batches did not hold.
    plan2, result = sharded(provider, tmp_path, shards=4, batch=16)
    assert plan2.missing == 199 and plan2.parts == plan.parts
    assert result.embedded == 199 - 32
    reference = embed_texts(provider, "h", IDS, TEXTS, "document", tmp_path / "ref", batch_size=16)
    assert np.array_equal(read_vectors(result)[1], read_vectors(reference)[1])
    assert pending_paths(plan.cache_dir) == []


def test_a_retried_part_skips_the_batches_written_before_it_failed(tmp_path):
    provider = create_provider("hashing", {"dim": 32})
    good = provider.encode_batches
    calls = {"n": 0}

    def dying(batches, role):
        for item in good(batches, role):
            calls["n"] += 1
            if calls["n"] == 4:
                raise RuntimeError("worker lost")
            yield item

    provider.encode_batches = dying
    plan = plan_embedding(provider, "h", IDS, TEXTS, "document", tmp_path, 1, 16)
    with pytest.raises(RuntimeError):
        embed_part(provider, plan, 0, 1, 16)
    provider.encode_batches = good
    retried = embed_part(provider, plan, 0, 1, 16)  # Dask's retry on another worker: same plan, same part
    assert retried.embedded == 199 - 3 * 16
    assert finish_embedding(plan, [retried]).embedded == 199 - 48


def test_one_process_keeps_an_http_providers_requests_within_its_concurrency(tmp_path):
    from retbench.support.latency_server import latency_server, stats, vector_for

    with latency_server(latency=0.05, dim=24) as url:
        provider = create_provider("openai-compatible", {"base_url": url, "model": "m", "encoding_format": "base64",
                                                         "concurrency": 2, "batch_size": 8})
        plan = plan_embedding(provider, "h", IDS, TEXTS, "document", tmp_path, 4, 8)
        # Four part tasks at once in one process (a Dask worker with four threads).
        with ThreadPoolExecutor(4) as pool:
            parts = list(pool.map(lambda i: embed_part(provider, plan, i, 4, 8), range(4)))
        seen = stats(url)
    result = finish_embedding(plan, parts)
    assert result.embedded == seen["texts"] == 199
    assert seen["max_in_flight"] <= 2
    ids, vectors = read_vectors(result)[:2]
    expected = np.stack([vector_for(text, 24) for text in TEXTS])
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(vectors, expected, rtol=0, atol=1e-6)
