"""Scalar-quantised and binary indexes: the Hamming ranking and re-scoring by hand, the build and
retrieval path, and their rows in the ANN sweep."""
import json

import faiss
import numpy as np
import polars as pl
import pytest

from retbench.tasks.indexes.binary_codes import BinarySearch, build_binary_index, sign_codes
from retbench.tasks.stages.index import IndexSettings, build_index, load_index, set_query_params
from retbench.tasks.stages.retrieve import retrieve
from retbench.tasks.stages.sweep import SweepSpec, SyntheticDataset, resolve_grid, run_sweep
from retbench.tasks.stages.vectors import l2_normalized

# q's sign bits 11111110. Hamming distances: d0 01111111 -> 2, d1 10001110 -> 3, d2 00000000 -> 7.
# Float inner products (before normalising): q.d0 = -0.09 + 5 * 0.01 - 0.01 = -0.05,
# q.d1 = 0.81 - 3 * 0.01 + 3 * 0.01 + 0.01 = 0.82, q.d2 = -(0.9 + 6 * 0.1 - 0.1) = -1.4:
# Hamming ranks d0, d1, d2; the floats rank d1, d0, d2.
QUERY = [[0.9, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, -0.1]]
DOCS = [[-0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1],
        [0.9, -0.1, -0.1, -0.1, 0.1, 0.1, 0.1, -0.1],
        [-1.0] * 8]


def _tiny():
    docs, query = l2_normalized(np.array(DOCS)), l2_normalized(np.array(QUERY))
    return BinarySearch(build_binary_index(docs), vectors=docs), docs, query


def test_sign_codes_pack_eight_components_per_byte():
    assert sign_codes(np.array(QUERY)).tolist() == [[0b11111110]]
    assert sign_codes(np.array(DOCS)).ravel().tolist() == [0b01111111, 0b10001110, 0]
    # 10 components: two bytes, the six padding bits zero.
    assert sign_codes(np.ones((1, 10))).tolist() == [[255, 0b11000000]]


def test_hamming_ranking_by_hand():
    index, _, query = _tiny()
    scores, ids = index.search(query, 3)
    assert ids.tolist() == [[0, 1, 2]]
    np.testing.assert_allclose(scores, [[1 - 2 * 2 / 8, 1 - 2 * 3 / 8, 1 - 2 * 7 / 8]])  # 0.5, 0.25, -0.75


def test_rescoring_reorders_the_hamming_candidates_by_float_score():
    index, docs, query = _tiny()
    index.rescore = 2  # candidates d0, d1 (Hamming), re-scored: d1 wins
    scores, ids = index.search(query, 1)
    assert ids.tolist() == [[1]]
    np.testing.assert_allclose(scores, [[float(query[0] @ docs[1])]], rtol=1e-6)
    assert float(query[0] @ docs[1]) == pytest.approx(0.82 / np.linalg.norm(QUERY) / np.linalg.norm(DOCS[1]), rel=1e-5)
    # rescore=1 still re-scores max(rescore, k) = 2 candidates for k=2.
    index.rescore = 1
    assert index.search(query, 2)[1].tolist() == [[1, 0]]
    # Every candidate re-scored: exactly the float ranking.
    index.rescore = 3
    assert index.search(query, 3)[1].tolist() == [[1, 0, 2]]
    index.vectors = None
    with pytest.raises(ValueError, match="needs the float vectors"):
        index.search(query, 1)


def test_index_files_of_the_new_kinds(tmp_path):
    assert IndexSettings("sq", qtype="fp16").file_name == "sq_qtype-fp16.faiss"
    assert IndexSettings("sq", qtype="8bit", train_size=500).file_name == "sq_qtype-8bit_train-500_seed-0.faiss"
    assert IndexSettings("binary").file_name == "binary.faiss"
    assert IndexSettings("sq", qtype="fp16").build_params() == {"qtype": "fp16"}
    with pytest.raises(ValueError, match="qtype must be one of fp16, 8bit"):
        IndexSettings("sq", qtype="4bit")
    with pytest.raises(ValueError, match="give train_size"):
        IndexSettings("sq", qtype="8bit")

    data = SyntheticDataset(d=12, nb=300, nq=10, seed=1)  # 12 components: binary codes padded to 16 bits
    doc_set, query_set, chunks_path, qrels = data.write(tmp_path)
    vectors = data.documents()
    built = {s.kind + (dict(s.params).get("qtype") or ""): build_index(doc_set, s, tmp_path) for s in
             (IndexSettings("flat"), IndexSettings("sq", qtype="fp16"), IndexSettings("sq", qtype="8bit", train_size=300),
              IndexSettings("binary"))}
    assert built["binary"].size_bytes < 300 * 2 + 200  # two bytes a vector plus the header
    assert 300 * 12 <= built["sq8bit"].size_bytes < built["sqfp16"].size_bytes < built["flat"].size_bytes
    again = build_index(doc_set, IndexSettings("binary"), tmp_path)  # reused: its dimension check knows the padding
    assert not again.computed
    binary = load_index(built["binary"].path, expected_dim=12)
    assert isinstance(binary, BinarySearch) and binary.d == 16 and binary.ntotal == 300
    fp16 = load_index(built["sqfp16"].path, expected_dim=12)
    scores, ids = fp16.search(vectors[:3], 1)
    assert ids.ravel().tolist() == [0, 1, 2]
    np.testing.assert_allclose(scores.ravel(), 1.0, atol=2e-3)

    # Retrieval: re-scoring every candidate returns the flat run; without, a different one.
    flat_run = pl.read_parquet(retrieve(built["flat"], doc_set, query_set, chunks_path, 10, None, tmp_path).path)
    full = retrieve(built["binary"], doc_set, query_set, chunks_path, 10, None, tmp_path, rescore=300)
    hamming = retrieve(built["binary"], doc_set, query_set, chunks_path, 10, None, tmp_path)
    assert full.index == "binary-rescore300" and hamming.index == "binary" and full.key != hamming.key
    full_run = pl.read_parquet(full.path)
    assert full_run["doc_id"].to_list() == flat_run["doc_id"].to_list()
    np.testing.assert_allclose(full_run["score"].to_numpy(), flat_run["score"].to_numpy(), rtol=1e-5)
    with pytest.raises(ValueError, match="binary indexes only"):
        retrieve(built["flat"], doc_set, query_set, chunks_path, 10, None, tmp_path, rescore=10)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("compressed")
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        data = SyntheticDataset(d=32, nb=1200, nq=40, clusters=12, seed=5)
        doc_set, query_set, chunks_path, qrels = data.write(root / "store")
        spec = SweepSpec(ivf=None, hnsw=None, ivfpq=None, binary={"rescore": [0, 100, 1200]}, k=10, depth=20,
                         repeats=1, latency_queries=5, bootstrap=200, project_vectors=1_000_000)
        result = run_sweep(doc_set, query_set, chunks_path, qrels, spec, root / "store", root / "out")
    finally:
        faiss.omp_set_num_threads(threads)
    return result, pl.read_parquet(result.path)


def _row(table, kind, build=None, **query):
    rows = table.filter(pl.col("index_kind") == kind)
    if build is not None:
        rows = rows.filter(pl.col("build_params").str.contains(build))
    if query:
        rows = rows.filter(pl.col("query_params") == json.dumps(query, separators=(",", ":")))
    assert rows.height == 1
    return rows.row(0, named=True)


def test_sweep_rows_for_scalar_quantisation_and_binary(sweep):
    result, table = sweep
    assert table.height == 1 + 2 + 3 and (result.built, result.reused) == (4, 0)
    flat, fp16, sq8 = _row(table, "flat"), _row(table, "sq", "fp16"), _row(table, "sq", "8bit")
    hamming, rescored, everything = (_row(table, "binary", rescore=r) for r in (0, 100, 1200))
    # Bytes per vector: 4, 2, 1 bytes a component, 1 bit a component (plus headers / SQ8's ranges).
    assert flat["bytes_per_vector"] == pytest.approx(128, abs=1)
    assert fp16["bytes_per_vector"] == pytest.approx(64, abs=1)
    assert sq8["bytes_per_vector"] == pytest.approx(32, abs=1)
    assert hamming["bytes_per_vector"] == pytest.approx(4, abs=0.2)
    assert (hamming["rescore_bytes_per_vector"], rescored["rescore_bytes_per_vector"]) == (0, 128)
    assert hamming["projected_index_bytes"] == pytest.approx(hamming["bytes_per_vector"] * 1_000_000)
    # fp16 is all but exact on unit vectors; re-scoring every candidate is exact.
    assert fp16["neighbour_recall@10"] >= 0.99 and abs(fp16["delta_ndcg@10"]) < 0.01
    assert everything["neighbour_recall@10"] == 1.0 and everything["delta_ndcg@10"] == 0.0
    assert (everything["delta_ndcg@10_ci_low"], everything["delta_ndcg@10_ci_high"]) == (0.0, 0.0)
    # Sign bits alone lose neighbours; re-scoring 100 candidates wins most back.
    assert hamming["neighbour_recall@10"] < rescored["neighbour_recall@10"] <= 1.0
    assert hamming["neighbour_recall@10"] < sq8["neighbour_recall@10"]
    for row in (fp16, sq8, hamming, rescored):
        assert row["delta_ndcg@10_ci_low"] <= row["delta_ndcg@10"] <= row["delta_ndcg@10_ci_high"]


def test_grid_families_and_their_defaults():
    grid = dict(resolve_grid(SweepSpec(ivf=None, hnsw=None, ivfpq=None), 250_000, 64))
    assert list(grid) == [IndexSettings("flat"), IndexSettings("sq", qtype="fp16"),
                          IndexSettings("sq", qtype="8bit", train_size=100_000), IndexSettings("binary")]
    assert grid[IndexSettings("binary")] == [{"rescore": 0}, {"rescore": 100}]
    grid = dict(resolve_grid(SweepSpec(ivf=None, hnsw=None, ivfpq=None, sq={"qtype": ["8bit"]}, binary=None), 500, 8))
    assert list(grid)[1].file_name == "sq_qtype-8bit_train-500_seed-0.faiss"
    with pytest.raises(ValueError):
        SweepSpec(sq={"qtype": ["int4"]})
    with pytest.raises(ValueError, match=">= 0"):
        SweepSpec(binary={"rescore": [-1]})


def test_set_query_params_on_a_binary_index():
    index, _, _ = _tiny()
    set_query_params(index, {"rescore": 50})
    assert index.rescore == 50
    set_query_params(index, {})
    assert index.rescore == 0
