"""The ONNX backend of the sentence-transformers provider: same vectors as torch (to float
precision; int8 close), its own fingerprint, one export per model kept in a cache folder outside
the package, with onnxruntime's fused BERT operators and int8 matrix products."""
import collections
import json

import numpy as np
import pytest

from retbench.tasks.config.spec import SpecError, load_spec
from retbench.tasks.providers import create_provider
from retbench.tasks.providers.onnx_backend import EXPORT_RECIPE
from retbench.tasks.stages.vectors import l2_normalized

TEXTS = ["How do I rotate an API key?", "refund", "Webhook retries use exponential backoff with jitter, up to 10 times."]


@pytest.mark.slow
def test_onnx_matches_torch_and_has_its_own_fingerprint(tmp_path):
    torch_provider = create_provider("sentence-transformers", {"backend": "torch"})
    onnx_provider = create_provider("sentence-transformers", {"backend": "onnx", "onnx_cache": str(tmp_path)})
    expected = l2_normalized(torch_provider.encode(TEXTS, "document"))
    got = l2_normalized(onnx_provider.encode(TEXTS, "document"))
    assert got.shape == (3, 384)
    np.testing.assert_allclose(got, expected, atol=1e-4)  # the same model, another engine
    fingerprint = onnx_provider.fingerprint()
    assert fingerprint["backend"] == "onnx" and len(fingerprint["onnx_sha256"]) == 64
    assert "backend" not in torch_provider.fingerprint()  # torch caches made before backends stay valid
    assert {k: v for k, v in fingerprint.items() if k not in ("backend", "onnx_sha256")} == torch_provider.fingerprint()
    assert onnx_provider.token_counts(TEXTS, "query") == torch_provider.token_counts(TEXTS, "query")
    exports = sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("."))
    assert len(exports) == 1 and "-onnx-" in exports[0]  # one export, named by model, backend and key
    export = json.loads(next(tmp_path.glob("*/export.json")).read_text())
    assert export["recipe"] == EXPORT_RECIPE
    # onnxruntime's BERT fusions took: one Attention per layer, and the embeddings' LayerNorm
    assert export["fused_operators"]["Attention"] == 6 and export["fused_operators"]["EmbedLayerNormalization"] == 1
    model_file = next(tmp_path.glob("*/model.onnx"))
    mtime = model_file.stat().st_mtime_ns
    again = create_provider("sentence-transformers", {"backend": "onnx", "onnx_cache": str(tmp_path)})
    assert again.fingerprint()["onnx_sha256"] == fingerprint["onnx_sha256"] and model_file.stat().st_mtime_ns == mtime


@pytest.mark.slow
def test_int8_quantises_the_matrix_products_and_stays_close_to_torch(tmp_path):
    import onnx

    torch_provider = create_provider("sentence-transformers")
    int8 = create_provider("sentence-transformers", {"backend": "onnx-int8", "onnx_cache": str(tmp_path)})
    texts = TEXTS + [f"A longer text about key rotation number {i}, padded out with more words." * (i + 1) for i in range(5)]
    expected = l2_normalized(torch_provider.encode(texts, "document"))
    got = l2_normalized(int8.encode(texts, "document"))
    cosines = (got * expected).sum(axis=1)
    # 8-bit weights move the vectors a little, in the texts' own order (encoded longest first)
    assert cosines.min() > 0.98 and cosines.mean() > 0.985, cosines
    ops = collections.Counter(node.op_type for node in onnx.load(str(next(tmp_path.glob("*/model.onnx")))).graph.node)
    # every layer's Q/K/V projection inside QAttention, its output and two feed-forward products as MatMulInteger;
    # no float MatMul is left; the embedding lookup stays float
    assert ops["QAttention"] == 6 and ops["MatMulInteger"] == 18 and ops["MatMul"] == 0, ops
    assert ops["EmbedLayerNormalization"] == 1 and ops["QEmbedLayerNormalization"] == 0
    fingerprint = int8.fingerprint()
    assert fingerprint["backend"] == "onnx-int8" and fingerprint["onnx_sha256"] != torch_provider.fingerprint().get("onnx_sha256")


def test_unknown_backend_is_refused_at_spec_load(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text("name: t\ndataset: {path: data}\nproviders: [{name: m, kind: sentence-transformers, options: {backend: tensorrt}}]\n")
    with pytest.raises(SpecError, match=r"providers\[0\]\.options\.backend: expected one of auto, torch, onnx, onnx-int8 \(got 'tensorrt'\)"):
        load_spec(path)
