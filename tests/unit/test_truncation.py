"""Dimension truncation: the cached vectors are the re-normalised prefix, in their own cache
folder, and a truncation larger than the model is refused at spec load with its key path."""
from pathlib import Path

import numpy as np
import pytest

from retbench.tasks.config.spec import SpecError, load_spec
from retbench.tasks.providers import create_provider
from retbench.tasks.providers.truncated import TruncatedProvider
from retbench.tasks.stages.embed import PrecomputedProvider, cache_dir_for, embed_texts, load_vectors
from retbench.tasks.stages.vectors import l2_normalized, truncated


def test_truncated_is_the_renormalised_prefix_by_hand():
    out = truncated(np.array([[3.0, 4.0, 12.0], [0.0, 0.0, 1.0]]), 2)
    np.testing.assert_allclose(out, [[0.6, 0.8], [0.0, 0.0]])  # 3-4-5; an all-zero prefix stays zero
    with pytest.raises(ValueError, match="cannot keep 4 dimensions"):
        truncated(np.ones((1, 3)), 4)


def test_cached_vectors_are_the_prefix_and_cached_apart(tmp_path):
    texts = [f"document {i} on topic {i % 4} with words {i * 7}" for i in range(20)]
    ids = [str(i) for i in range(20)]
    full_provider = create_provider("hashing", {"dim": 64})
    short_provider = create_provider("hashing", {"dim": 64}, dimensions=16)
    assert isinstance(short_provider, TruncatedProvider) and short_provider.kind == "hashing"
    full = embed_texts(full_provider, "h", ids, texts, "document", tmp_path)
    short = embed_texts(short_provider, "h16", ids, texts, "document", tmp_path)
    assert (full.dim, short.dim) == (64, 16)
    assert cache_dir_for(tmp_path, full_provider)[0] != cache_dir_for(tmp_path, short_provider)[0]
    assert short.embedded == 20  # nothing served from the full model's rows
    raw = full_provider.encode(texts, "document")
    np.testing.assert_allclose(load_vectors(short)[1], l2_normalized(raw[:, :16]), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(load_vectors(short)[1], truncated(load_vectors(full)[1], 16), rtol=1e-5, atol=1e-6)
    assert short_provider.fingerprint() == {**full_provider.fingerprint(), "truncate_dimensions": 16}
    again = embed_texts(create_provider("hashing", {"dim": 64}, dimensions=16), "h16", ids, texts, "document", tmp_path)
    assert again.embedded == 0 and again.from_cache == 20


def test_larger_than_the_model_is_refused():
    with pytest.raises(ValueError, match="larger than the model's dimension 32"):
        create_provider("hashing", {"dim": 32}, dimensions=64)
    # No declared dimension (an HTTP API not asked for one): refused on the first reply.
    unknown = TruncatedProvider(PrecomputedProvider({"kind": "api"}, ["a"], np.ones((1, 8), np.float32)), 16)
    with pytest.raises(ValueError, match="returned 8 dimensions; dimensions=16 cannot be kept"):
        unknown.encode(["a"], "query")


def _spec(tmp_path: Path, provider: str) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(f"name: t\ndataset: {{path: data}}\nproviders:\n  - {{name: a, kind: hashing}}\n  - {provider}\n")
    return path


def test_spec_refuses_truncation_beyond_the_declared_dimension(tmp_path):
    with pytest.raises(SpecError, match=r"providers\[1\]\.dimensions: 2048 is larger than the dimension of provider 'b' \(1024\)"):
        load_spec(_spec(tmp_path, "{name: b, kind: hashing, dimensions: 2048}"))
    with pytest.raises(SpecError, match=r"providers\[1\]\.dimensions: 512 is larger .* \(384\); expected at most 384"):
        load_spec(_spec(tmp_path, "{name: b, kind: sentence-transformers, dimensions: 512}"))
    with pytest.raises(SpecError, match=r"providers\[1\]\.dimensions: 400 is larger .* \(384\)"):
        load_spec(_spec(tmp_path, "{name: b, kind: e5-multilingual, dimensions: 400}"))
    with pytest.raises(SpecError, match=r"providers\[1\]\.dimensions: 300 is larger .* \(256\)"):
        load_spec(_spec(tmp_path, "{name: b, kind: openai-compatible, dimensions: 300, "
                                  "options: {base_url: 'http://127.0.0.1:9', model: m, dimensions: 256}}"))
    assert load_spec(_spec(tmp_path, "{name: b, kind: sentence-transformers, dimensions: 128}")).providers[1].dimensions == 128
    # An HTTP provider that declares nothing is checked on its first reply instead.
    load_spec(_spec(tmp_path, "{name: b, kind: openai-compatible, dimensions: 300, options: {base_url: 'http://127.0.0.1:9', model: m}}"))
    with pytest.raises(SpecError, match=r"providers\[1\]\.dimensions"):
        load_spec(_spec(tmp_path, "{name: b, kind: hashing, dimensions: 0}"))
