"""Sharded exact search without Dask: shard bounds, the canonical order of ties, the merge of
shard results, and flat and IVF shards giving one index's results bit for bit."""
import faiss
import numpy as np
import pytest

from retbench.tasks.indexes.sharded import (PAD_SCORE, ExactSearch, NpyRows, build_shard, canonical_search, empty_ivf_like,
                                   merge_top_k, shard_bounds)


def test_shard_bounds_cut_on_whole_blocks():
    assert shard_bounds(2500, 1) == [(0, 2500)]
    assert shard_bounds(2500, 2) == [(0, 1024), (1024, 2500)]  # 3 blocks: 1 + 2
    # More shards than blocks: one shard is empty, the rows are still covered once.
    assert shard_bounds(2500, 4) == [(0, 0), (0, 1024), (1024, 2048), (2048, 2500)]
    assert shard_bounds(10, 2, block=4) == [(0, 4), (4, 10)]
    with pytest.raises(ValueError, match="shards must be >= 1"):
        shard_bounds(10, 0)


def test_merge_orders_ties_by_id_descending_across_shards():
    # Shard A holds ids 0..2 (scores 0.9, 0.5, 0.5), shard B ids 3..5 (0.5, 0.7, 0.5). One index
    # over the six: 0.9 (0), 0.7 (4), then the four rows at 0.5 by id descending: 5, 3, 2, 1.
    a = (np.array([[0.9, 0.5, 0.5]], np.float32), np.array([[0, 2, 1]]))
    b = (np.array([[0.7, 0.5, 0.5]], np.float32), np.array([[4, 5, 3]]))
    scores, ids = merge_top_k([a, b], 3)
    assert ids.tolist() == [[0, 4, 5]]
    assert merge_top_k([a, b], 5)[1].tolist() == [[0, 4, 5, 3, 2]]
    # k beyond every row: FAISS's padding (id -1 and the lowest float) fills the end.
    scores, ids = merge_top_k([a, b], 8)
    assert ids.tolist() == [[0, 4, 5, 3, 2, 1, -1, -1]]
    assert scores[0, 6:].tolist() == [PAD_SCORE, PAD_SCORE]
    # An empty shard (no columns) and a shard padded by FAISS change nothing.
    empty = (np.empty((1, 0), np.float32), np.empty((1, 0), np.int64))
    padded = (np.array([[PAD_SCORE, PAD_SCORE]], np.float32), np.array([[-1, -1]]))
    assert merge_top_k([empty, a, padded, b], 5)[1].tolist() == [[0, 4, 5, 3, 2]]


def _tied_rows(n: int, d: int, seed: int) -> np.ndarray:
    """Rows whose components are multiples of 1/4 (inner products exact, so many tie), a third
    of them repeated far away (ties across shards)."""
    rng = np.random.default_rng(seed)
    rows = np.round(rng.standard_normal((n, d)) * 2) / 4
    rows[-n // 3:] = rows[:n // 3]
    return rows.astype(np.float32)


def test_canonical_search_takes_the_highest_ids_of_a_tie_at_the_cut():
    rows = _tied_rows(600, 4, 0)
    queries = np.round(np.random.default_rng(1).standard_normal((30, 4))).astype(np.float32)
    index = faiss.IndexFlatIP(4)
    index.add(rows)
    everything = rows @ queries.T  # exact: quarter components, small integers
    for k in (1, 7, 50):
        scores, ids = canonical_search(index.search, queries, k, index.ntotal)
        for q in range(len(queries)):
            expected = np.lexsort((-np.arange(len(rows)), -everything[:, q]))[:k]
            assert ids[q].tolist() == expected.tolist()
            assert scores[q].tolist() == everything[expected, q].tolist()


@pytest.mark.parametrize("shards", [2, 4])
def test_flat_shards_give_one_index_results_bit_for_bit(tmp_path, shards):
    rows = np.vstack([_tied_rows(1500, 16, 2), np.random.default_rng(3).standard_normal((1100, 16)).astype(np.float32)])
    np.save(tmp_path / "rows.npy", rows)
    source = NpyRows(tmp_path / "rows.npy")
    queries = np.vstack([rows[:40] + np.float32(0.01), np.random.default_rng(4).standard_normal((40, 16))]).astype(np.float32)
    whole = faiss.IndexFlatIP(16)
    whole.add(rows)
    one = ExactSearch(ntotal=len(rows), d=16, index=whole)
    parts = [build_shard(source, start, stop) for start, stop in shard_bounds(len(rows), shards)]
    assert sum(p.ntotal for p in parts) == len(rows)
    many = ExactSearch(ntotal=len(rows), d=16, search_shards=lambda q, k, a: [p.search(q, k, a) for p in parts])
    for k, searched in ((10, queries), (1100, queries), (3000, queries[:5])):  # 1100 > a shard's rows; 3000 > all
        expected, got = one.search(searched, k), many.search(searched, k)
        assert np.array_equal(got[1], expected[1])
        assert np.array_equal(got[0].view(np.int32), expected[0].view(np.int32))
    assert got[1][0, -1] == -1


def test_ivf_shards_with_one_quantizer_give_one_index_results(tmp_path):
    rng = np.random.default_rng(5)
    rows = rng.standard_normal((5000, 16)).astype(np.float32)
    rows[4000:] = rows[:1000]  # the same vector in two shards: same list, same score
    np.save(tmp_path / "rows.npy", rows)
    whole = faiss.IndexIVFFlat(faiss.IndexFlatIP(16), 16, 32, faiss.METRIC_INNER_PRODUCT)
    whole.cp.seed = 0
    whole.train(rows[rng.choice(5000, 2000, replace=False)])
    whole.add(rows)
    template = faiss.serialize_index(empty_ivf_like(whole))
    parts = [build_shard(NpyRows(tmp_path / "rows.npy"), a, b, template) for a, b in shard_bounds(5000, 3)]
    queries = np.vstack([rows[:20], rng.standard_normal((30, 16))]).astype(np.float32)
    for nprobe in (1, 4):
        one = ExactSearch(ntotal=5000, d=16, index=whole, ivf=whole, nprobe=nprobe)
        many = ExactSearch(ntotal=5000, d=16, search_shards=lambda q, k, a: [p.search(q, k, a) for p in parts],
                           ivf=empty_ivf_like(whole), nprobe=nprobe)
        for k in (10, 400):  # 400: more than one list holds, so the end is padding
            expected, got = one.search(queries, k), many.search(queries, k)
            assert np.array_equal(got[1], expected[1]) and np.array_equal(got[0], expected[0])
            assert (got[1] == -1).any() == (nprobe == 1 and k == 400)  # one list holds ~156 rows
        whole.nprobe = nprobe
        plain = whole.search(queries, 10)  # FAISS's own search: the same scores (tied rows may differ)
        assert np.array_equal(plain[0], one.search(queries, 10)[0])
