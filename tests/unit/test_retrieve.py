import faiss
import numpy as np
import polars as pl

from retbench.tasks.analysis.runs import trec_order
from retbench.tasks.stages.maxp import search_documents


def _index(vectors):
    vectors = np.asarray(vectors, dtype=np.float32)
    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(vectors)
    return index


def test_maxp_one_entry_per_document_with_its_best_chunk():
    # Inner products with the query (1, 0): 0.9, 0.8, 0.85, 0.1, 0.7
    angles = np.arccos([0.9, 0.8, 0.85, 0.1, 0.7])
    vectors = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    chunk_doc = np.array(["d1", "d1", "d2", "d3", "d1"])
    hits = search_documents(_index(vectors), np.array([[1.0, 0.0]], dtype=np.float32), chunk_doc, depth=10)
    assert hits["chunk"].to_list() == [0, 2, 3]  # d1 by its best chunk (0), then d2, then d3
    np.testing.assert_allclose(hits["score"].to_numpy(), [0.9, 0.85, 0.1], rtol=1e-6)


def test_maxp_searches_deeper_until_k_documents_survive():
    # Document "big" owns the 50 best chunks; a chunk depth of 2*k would see only it.
    rng = np.random.default_rng(0)
    query = np.array([[1.0, 0.0]], dtype=np.float32)
    big = np.linspace(0.99, 0.6, 50)
    small = np.array([0.5, 0.4, 0.3])
    angles = np.arccos(np.concatenate([big, small]))
    vectors = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    chunk_doc = np.array(["big"] * 50 + ["a", "b", "c"])
    order = rng.permutation(len(chunk_doc))
    hits = search_documents(_index(vectors[order]), query, chunk_doc[order], depth=3)
    docs = chunk_doc[order][hits["chunk"].to_numpy()].tolist()
    assert docs == ["big", "a", "b"]


def test_maxp_cut_to_depth_and_fewer_docs_than_depth():
    vectors = np.eye(4, dtype=np.float32)
    chunk_doc = np.array(["a", "b", "c", "d"])
    hits = search_documents(_index(vectors), vectors[:2], chunk_doc, depth=2)
    assert hits.group_by("query").len().sort("query")["len"].to_list() == [2, 2]
    hits = search_documents(_index(vectors), vectors[:1], chunk_doc, depth=10)
    assert hits.height == 4


def test_trec_order_breaks_ties_by_doc_id_descending():
    run = pl.DataFrame({
        "query_id": ["q1"] * 4,
        "doc_id": ["a", "c", "b", "z"],
        "score": [0.5, 0.5, 0.9, 0.5],
    })
    ordered = trec_order(run)
    assert ordered["doc_id"].to_list() == ["b", "z", "c", "a"]
    assert ordered["rank"].to_list() == [1, 2, 3, 4]


def test_document_run_sorts_on_codes_exactly_as_trec_order_on_strings():
    from retbench.tasks.stages.maxp import document_run

    rng = np.random.default_rng(3)
    doc_ids = pl.Series(["b", "a", "B", "A", "é", "z", "a10", "a9"])
    codes = doc_ids.rank("dense").to_numpy().astype(np.int64) - 1
    hits = pl.DataFrame({
        "query": np.repeat([0, 1], 8),
        "chunk": np.concatenate([rng.permutation(8), rng.permutation(8)]),
        "score": rng.choice([0.5, 0.25, 0.125], size=16),  # many exact ties
    })
    query_ids = pl.Series(["q0", "q1"])
    ours = document_run(hits, codes, query_ids, doc_ids, doc_ids)
    reference = trec_order(pl.DataFrame({
        "query_id": query_ids.gather(hits["query"]), "doc_id": doc_ids.gather(hits["chunk"]), "score": hits["score"]}))
    assert ours.select("query_id", "doc_id", "rank").rows() == reference.select("query_id", "doc_id", "rank").rows()
