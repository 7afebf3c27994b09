import numpy as np
import pytest

from retbench.tasks.stages.embed import embed_texts
from retbench.tasks.stages.index import IndexSettings, build_index, default_nlist, load_index, resolve_ivf
from retbench.tasks.providers import create_provider


def test_default_nlist_keeps_39_training_points_per_list():
    assert default_nlist(100) == 2
    assert default_nlist(10_000) == 256  # 4 * sqrt(10k) = 400 > 10k // 39
    assert default_nlist(1_000_000) == 4000
    assert default_nlist(10) == 1


def test_resolve_ivf_refuses_impossible_settings():
    with pytest.raises(ValueError, match="larger than the number of vectors"):
        resolve_ivf(10, 20, None, 0)
    assert resolve_ivf(1000, 10, None, 0).train_size == 1000  # 256 * 10 capped at n


def test_index_files_named_by_parameters_and_reused(tmp_path):
    provider = create_provider("hashing", {"dim": 32})
    texts = [f"doc {i} about topic {i % 7}" for i in range(200)]
    docs = embed_texts(provider, "h", [str(i) for i in range(200)], texts, "document", tmp_path)
    settings = resolve_ivf(docs.count, 4, 100, 0)
    first = build_index(docs, settings, tmp_path)
    assert first.computed and first.path.endswith("ivf_nlist-4_train-100_seed-0.faiss")
    again = build_index(docs, settings, tmp_path)
    assert not again.computed and again.path == first.path
    flat = build_index(docs, IndexSettings("flat"), tmp_path)
    assert flat.path.endswith("flat.faiss")
    index = load_index(flat.path, expected_dim=32)
    assert index.ntotal == 200
    with pytest.raises(ValueError, match="dimension 32, but the vectors have 16"):
        load_index(flat.path, expected_dim=16)


def test_ivf_with_every_list_probed_equals_flat(tmp_path):
    provider = create_provider("hashing", {"dim": 64})
    texts = [f"document {i} words {i % 13} and {i % 5}" for i in range(300)]
    docs = embed_texts(provider, "h", [str(i) for i in range(300)], texts, "document", tmp_path)
    queries = np.asarray(provider.encode(["words 3 and 2", "document 17"], "query"), dtype=np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    flat = load_index(build_index(docs, IndexSettings("flat"), tmp_path).path)
    ivf = load_index(build_index(docs, resolve_ivf(300, 6, None, 0), tmp_path).path)
    ivf.nprobe = 6
    flat_scores, flat_ids = flat.search(queries, 20)
    ivf_scores, ivf_ids = ivf.search(queries, 20)
    np.testing.assert_allclose(ivf_scores, flat_scores, rtol=1e-5)
