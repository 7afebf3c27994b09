"""`retbench check`'s estimate (tasks/stages/estimate.py): the store's size from rows, dimensions
and index kinds, and the time per text from this machine's latency profile or from texts embedded
now (its value is the machine's, so what it is made of is asserted, and which source it came from)."""
import dataclasses

import polars as pl
import pytest

from retbench.tasks.config.spec import load_spec
from retbench.tasks.providers import create_provider
from retbench.tasks.providers.fingerprint import full_fingerprint
from retbench.tasks.stages.embed import fingerprint_hash
from retbench.tasks.stages.estimate import (MEASURED_NOW, PROFILED, estimate_first_run, index_sizes, summary,
                                            timed_batches)
from retbench.tasks.stages.measurements import latency_table, latency_texts_key
from retbench.tasks.stages.preflight import chunk_tables, plan_run, preflight

from tests.unit.test_preflight import spec_file


def _planned(spec):
    dataset, key = preflight(spec, create_folders=False)
    return plan_run(spec, dataset, key), chunk_tables(spec, dataset, key), dataset.queries["text"].to_list()


def test_index_sizes_follow_rows_dimension_and_kind(tmp_path):
    spec = load_spec(spec_file(tmp_path))  # ivf: null
    assert index_sizes(spec, 100, 32) == ({"flat": 100 * 32 * 4}, ())
    spec = spec.model_copy(update={"indexes": spec.indexes.model_validate({"ivf": {"nlist": 4}, "hnsw": {"M": 8}})})
    sizes, unsized = index_sizes(spec, 1000, 32)
    # IVF: each vector and its int64 id, plus nlist float32 centroids.
    assert sizes == {"flat": 1000 * 32 * 4, "ivf": 1000 * (32 * 4 + 8) + 4 * 32 * 4} and unsized == ("hnsw",)


def test_without_a_profile_the_time_is_measured_only_when_asked(tmp_path):
    spec = load_spec(spec_file(tmp_path))  # hashing, dim 32; 3 chunks + 2 queries, one text twice
    plan, chunks, queries = _planned(spec)
    [plain] = estimate_first_run(spec, plan, chunks, queries)
    assert (plain.texts, plain.dim, plain.seconds_per_text, plain.source) == (4, 32, None, None)
    assert plain.cache_bytes == int(4 * 32 * 4 * 1.5) and plain.index_bytes == {"flat": 3 * 32 * 4}
    assert "h: time not estimated (4 texts to embed; no latency profile of this machine in the store" in summary([plain])
    [now] = estimate_first_run(spec, plan, chunks, queries, measure_now=True)
    assert now.source == MEASURED_NOW and now.seconds_per_text > 0
    # few texts: all of them timed, documents and queries apart, after a warm-up call
    assert "3 document texts and 2 queries embedded now" in now.detail and now.queries == 2
    assert now.embed_seconds == 2 * now.seconds_per_text + 2 * now.query_seconds_per_text
    assert "to embed 4 texts [measured now]" in summary([now])
    cached = dataclasses.replace(plain, texts=0, index_bytes={}, index_seconds=None, search_seconds=None)
    assert "h: nothing to embed (every text is in the cache), 32-dimensional; nothing new on disk." in summary([cached])


def test_a_latency_profile_in_the_store_gives_the_time_without_embedding(tmp_path):
    path = spec_file(tmp_path)
    path.write_text(path.read_text() + "latency: {batch_sizes: [1, 10, 100]}\n")
    spec = load_spec(path)
    plan, chunks, queries = _planned(spec)
    provider = create_provider("hashing", {"dim": 32})
    section = spec.latency.model_dump(mode="json")
    rates = {1: 100.0, 10: 400.0, 100: 900.0}  # texts per second by batch size
    profile = pl.DataFrame({"batch_size": list(rates), "concurrency": [1, 1, 1], "role": ["document"] * 3,
                            "texts_per_second": list(rates.values())})
    latency_table(spec.store_dir, fingerprint_hash(full_fingerprint(provider)), section,
                  latency_texts_key(next(iter(chunks.values()))["text"].to_list(), queries, section), lambda: profile)
    [estimate] = estimate_first_run(spec, plan, chunks, queries)
    # The provider's batch_size is 64: the profile's batch of 10 is the nearest below it.
    assert estimate.source == PROFILED and estimate.seconds_per_text == 1 / 400.0


def test_the_timed_batches_are_the_runs_own_at_each_quarter_cut_to_a_window():
    texts = ["x" * n for n in range(100, 0, -1)]  # 100 texts, lengths 1..100, in no useful order

    def lengths(batches):
        return [[len(t) for t in batch] for batch in batches]

    def by(size):
        return lambda ordered: [list(range(i, min(i + size, len(ordered)))) for i in range(0, len(ordered), size)]

    # Ten batches of 10 in length order: the 2nd, 4th, 7th and 9th, one at each quarter.
    assert lengths(timed_batches(texts, by(10))) == [list(range(11, 21)), list(range(31, 41)),
                                                     list(range(61, 71)), list(range(81, 91))]
    # Two batches of 50: both, each cut to its middle 32 texts.
    assert lengths(timed_batches(texts, by(50))) == [list(range(10, 42)), list(range(60, 92))]
    # No plan: windows of 32.
    assert lengths(timed_batches(texts)) == [list(range(1, 33)), list(range(33, 65)), list(range(65, 97)),
                                             [97, 98, 99, 100]]
    assert timed_batches(["b", "aaa", "cc"]) == [["b", "cc", "aaa"]]  # too few for windows: all of them


def test_index_and_search_are_counted_in_multiply_adds():
    """Flat: queries x rows x dim. IVF: 25 k-means rounds over the sample, every vector assigned,
    and per query the centroids plus the opened lists (nprobe of nlist, nprobe beyond nlist clipped)."""
    from retbench.tasks.stages.estimate_search import SearchWork

    flat = SearchWork(rows=1000, dim=8, queries=10)
    assert (flat.index_multiply_adds(), flat.search_multiply_adds()) == (0.0, 10 * 1000 * 8)
    ivf = SearchWork(rows=1000, dim=8, queries=10, nlist=20, train_rows=500, nprobes=(1, 4, 40))
    assert ivf.index_multiply_adds() == 10 * 500 * 20 * 8 + 1000 * 20 * 8  # IndexIVF's 10 k-means iterations
    # FAISS trains on at most 256 points per list: 100,000 rows into 20 lists train on 5,120.
    big = SearchWork(rows=100_000, dim=8, queries=10, nlist=20, train_rows=100_000)
    assert big.index_multiply_adds() == 10 * 5120 * 20 * 8 + 100_000 * 20 * 8
    opened = [1, 4, 20]
    assert ivf.search_multiply_adds() == 10 * 1000 * 8 + sum(10 * (20 + p * 1000 / 20) * 8 for p in opened)
    index_seconds, search_seconds = ivf.seconds()
    assert 0 < index_seconds and 0 < search_seconds  # at this machine's measured speed


def test_the_latency_profile_counts_its_calls(tmp_path):
    from retbench.tasks.stages.estimate import profile_seconds
    from retbench.tasks.stages.latency import QUERY_CALLS

    path = spec_file(tmp_path)
    path.write_text(path.read_text() + "latency: {batch_sizes: [1, 10], iterations: 2, warmup: 1}\n")
    spec = load_spec(path)
    local = create_provider("hashing", {"dim": 32})  # one call at a time: concurrency is not swept
    # (1 warm-up + 2 rounds) x (1 + 10) document texts, then 1 + QUERY_CALLS queries one per call.
    assert profile_seconds(spec, local, 0.01, 0.001) == pytest.approx(3 * 11 * 0.01 + (1 + QUERY_CALLS) * 0.001)
