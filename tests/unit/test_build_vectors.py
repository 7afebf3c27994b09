"""retbench.tasks.stages.build_vectors: indexes built from the flat index's storage and file are the same
bytes as indexes built from a loaded matrix, and the reader can fill a caller's array."""
import faiss
import numpy as np
import pytest

from retbench.tasks.stages.index import IndexSettings as AnnSettings
from retbench.tasks.stages.build_vectors import CachedVectors
from retbench.tasks.stages.embed import read_vectors
from retbench.tasks.stages.index import build_faiss_index
from retbench.tasks.stages.sweep import SyntheticDataset, write_embedding_set


@pytest.fixture(scope="module")
def cached(tmp_path_factory):
    store = tmp_path_factory.mktemp("store")
    data = SyntheticDataset(d=16, nb=1200, nq=5, clusters=8, seed=3)
    # Shuffled ids, so set order is not file order, and unnormalised rows of varied norms.
    vectors = data.documents() * np.random.default_rng(0).uniform(0.5, 3.0, (1200, 1)).astype(np.float32)
    ids = [f"c{i}" for i in np.random.default_rng(1).permutation(1200)]
    return store, write_embedding_set(store, "synthetic", {"kind": "test"}, "document", ids, vectors)


def test_read_vectors_fills_the_given_array(cached):
    _, doc_set = cached
    ids, matrix, _ = read_vectors(doc_set)
    out = np.full((doc_set.count, doc_set.dim), np.nan, dtype=np.float32)
    ids2, filled, _ = read_vectors(doc_set, out=out)
    assert filled is out and ids2 == ids and np.array_equal(out, matrix)
    with pytest.raises(ValueError, match="C-contiguous float32 array of shape"):
        read_vectors(doc_set, out=np.empty((doc_set.count, doc_set.dim), dtype=np.float64))


@pytest.mark.parametrize("settings", [
    AnnSettings("ivf", nlist=8, train_size=600, seed=0),
    AnnSettings("ivfpq", nlist=4, m=4, nbits=5, train_size=1200, seed=1),
    AnnSettings("hnsw", M=8, ef_construction=20),
])
def test_indexes_from_the_flat_file_match_indexes_from_the_matrix(cached, settings, tmp_path):
    _, doc_set = cached
    _, matrix, _ = read_vectors(doc_set)
    flat_path = tmp_path / "flat.faiss"
    source = CachedVectors(doc_set, flat_path)
    with pytest.raises(FileNotFoundError, match="flat index must be built"):
        source[0:2]

    flat, _, _ = build_faiss_index(source, AnnSettings("flat"))
    expected_flat, _, _ = build_faiss_index(matrix, AnnSettings("flat"))
    assert source.report is not None and source.report.copied_bytes == matrix.nbytes
    assert bytes(faiss.serialize_index(flat)) == bytes(faiss.serialize_index(expected_flat))
    faiss.write_index(flat, str(flat_path))
    del flat

    built, _, _ = build_faiss_index(source, settings)
    expected, _, _ = build_faiss_index(matrix, settings)
    assert bytes(faiss.serialize_index(built)) == bytes(faiss.serialize_index(expected))
