import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from retbench.tasks.providers.fingerprint import full_fingerprint
from retbench.tasks.stages.embed import cache_key, embed_texts, fingerprint_hash, load_vectors, shard_paths
from retbench.tasks.providers import Provider, create_provider


def test_cache_key_changes_with_role_text_and_fingerprint():
    fp = fingerprint_hash({"kind": "x", "revision": "1"})
    other_fp = fingerprint_hash({"kind": "x", "revision": "2"})
    base = cache_key(fp, "query", "reset password")
    assert base == cache_key(fp, "query", "reset password")
    assert base != cache_key(fp, "document", "reset password")
    assert base != cache_key(fp, "query", "reset passwords")
    assert base != cache_key(other_fp, "query", "reset password")
    # The separator keeps ("ab", "c") and ("a", "bc") apart.
    assert cache_key(fp, "query", "ab") != cache_key(fp + "a", "query", "b")


def test_fingerprint_changes_with_model_revision(tmp_path):
    a = create_provider("sentence-transformers", {"revision": "2024-01"})
    b = create_provider("sentence-transformers", {"revision": "2024-02"})
    assert fingerprint_hash(full_fingerprint(a)) != fingerprint_hash(full_fingerprint(b))
    c = create_provider("sentence-transformers", {"query_prefix": "query: "})
    assert fingerprint_hash(full_fingerprint(c)) != fingerprint_hash(full_fingerprint(create_provider("sentence-transformers")))
    assert full_fingerprint(a)["dim"] == 384 and full_fingerprint(a)["max_seq_length"] == 256


def test_second_run_embeds_nothing_and_edit_reembeds_only_changed(tmp_path):
    provider = create_provider("hashing", {"dim": 64})
    ids = [f"d{i}" for i in range(10)]
    texts = [f"document number {i} about webhooks" for i in range(10)]
    first = embed_texts(provider, "h", ids, texts, "document", tmp_path, batch_size=3)
    assert (first.embedded, first.from_cache) == (10, 0)
    # Batches were merged into one shard once the call finished.
    assert len(shard_paths(first.cache_dir)) == 1

    second = embed_texts(provider, "h", ids, texts, "document", tmp_path, batch_size=3)
    assert (second.embedded, second.from_cache) == (0, 10)
    assert second.key == first.key

    texts[4] = "an edited document about billing"
    third = embed_texts(provider, "h", ids, texts, "document", tmp_path, batch_size=3)
    assert (third.embedded, third.from_cache) == (1, 9)

    # Same texts as queries are different rows.
    as_queries = embed_texts(provider, "h", ids, texts, "query", tmp_path)
    assert as_queries.embedded == 10


def test_vectors_round_trip_in_set_order_and_normalised(tmp_path):
    provider = create_provider("hashing", {"dim": 32})
    texts = ["alpha beta", "gamma", "alpha beta", "delta epsilon"]  # a repeated text is embedded once
    result = embed_texts(provider, "h", ["a", "b", "c", "d"], texts, "document", tmp_path)
    assert result.embedded == 3
    ids, vectors = load_vectors(result)
    assert ids == ["a", "b", "c", "d"]
    assert vectors.dtype == np.float32 and vectors.shape == (4, 32)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(vectors[0], vectors[2])
    expected = provider.encode(["gamma"], "document")[0]
    np.testing.assert_allclose(vectors[1], expected / np.linalg.norm(expected), rtol=1e-6)


def test_cache_shards_store_float32_fixed_size_lists_with_zstd(tmp_path):
    provider = create_provider("hashing", {"dim": 16})
    result = embed_texts(provider, "h", ["a"], ["some text"], "document", tmp_path)
    shard = shard_paths(result.cache_dir)[0]
    vector_type = pq.read_schema(shard).field("vector").type
    assert isinstance(vector_type, pa.FixedSizeListType)
    assert vector_type.list_size == 16 and str(vector_type.value_type) == "float"
    assert pq.ParquetFile(shard).metadata.row_group(0).column(1).compression == "ZSTD"


def test_crash_mid_run_keeps_finished_batches(tmp_path):
    class FailsOnThirdBatch(Provider):
        kind = "hashing"

        def __init__(self):
            self.inner = create_provider("hashing", {"dim": 16})
            self.calls = 0

        def fingerprint(self):
            return self.inner.fingerprint()

        def encode(self, texts, role):
            self.calls += 1
            if self.calls == 3:
                raise RuntimeError("model crashed")
            return self.inner.encode(texts, role)

    ids = [str(i) for i in range(10)]
    texts = [f"text {i}" for i in range(10)]
    with pytest.raises(RuntimeError):
        embed_texts(FailsOnThirdBatch(), "h", ids, texts, "document", tmp_path, batch_size=3)
    rerun = embed_texts(create_provider("hashing", {"dim": 16}), "h", ids, texts, "document", tmp_path, batch_size=3)
    assert (rerun.embedded, rerun.from_cache) == (4, 6)


def test_provider_returning_nan_is_refused(tmp_path):
    class NaNProvider(Provider):
        kind = "nan"

        def fingerprint(self):
            return {"kind": "nan"}

        def encode(self, texts, role):
            return np.full((len(texts), 4), np.nan)

    with pytest.raises(ValueError, match="non-finite"):
        embed_texts(NaNProvider(), "bad", ["a"], ["x"], "query", tmp_path)
