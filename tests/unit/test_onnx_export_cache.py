"""The ONNX export's cache folder is found by the installed versions of torch and onnxruntime,
without importing either: a cached rerun on `backend: onnx` must not pay for torch's import."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import json, sys
from pathlib import Path
import retbench.tasks.providers.onnx_backend as onnx_backend

def fake_export(model_path, target):  # the real one needs torch; the folder's key is the point here
    Path(target).write_bytes(b"exported")

def fake_optimize(model_path, source, target):
    Path(target).write_bytes(b"fused")
    return {}

onnx_backend._export, onnx_backend._optimize = fake_export, fake_optimize
model, cache = Path(sys.argv[1]), Path(sys.argv[2])
first = onnx_backend.OnnxEncoder(model, "onnx", "weights", 128, cache).folder
again = onnx_backend.OnnxEncoder(model, "onnx", "weights", 128, cache).folder
print(json.dumps({"first": str(first), "again": str(again), "export": json.loads((first / "export.json").read_text()),
                  "imported": sorted(m for m in ("torch", "onnxruntime") if m in sys.modules)}))
"""


def test_an_export_is_keyed_by_installed_versions_without_importing_them(tmp_path):
    from importlib.metadata import version

    model = tmp_path / "model"
    (model / "1_Pooling").mkdir(parents=True)
    (model / "modules.json").write_text(json.dumps([
        {"type": "sentence_transformers.models.Transformer", "path": ""},
        {"type": "sentence_transformers.models.Pooling", "path": "1_Pooling"}]))
    (model / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": True}))
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(model), str(tmp_path / "cache")], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["imported"] == []
    assert result["first"] == result["again"] and Path(result["first"]).name.startswith("model-onnx-")
    # the same strings torch.__version__ and onnxruntime.__version__ give ("2.13.0+cpu"): exports made
    # before keep their key
    assert result["export"]["torch"] == version("torch") and "+" in version("torch")
    assert result["export"]["onnxruntime"] == version("onnxruntime")


def _model(folder: Path, modules: list[str], pooling: dict) -> Path:
    (folder / "1_Pooling").mkdir(parents=True)
    paths = {"Transformer": "", "Pooling": "1_Pooling", "Normalize": "2_Normalize", "Dense": "2_Dense"}
    (folder / "modules.json").write_text(json.dumps(
        [{"type": f"sentence_transformers.models.{kind}", "path": paths[kind]} for kind in modules]))
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    return folder


def test_backend_auto_is_onnx_for_what_the_export_reproduces_and_torch_for_the_rest(tmp_path):
    from retbench.tasks.providers.onnx_backend import resolve_backend, unsupported

    mean = {"pooling_mode_mean_tokens": True}
    exportable = _model(tmp_path / "a", ["Transformer", "Pooling", "Normalize"], mean)
    dense = _model(tmp_path / "b", ["Transformer", "Pooling", "Dense"], mean)
    max_pooled = _model(tmp_path / "c", ["Transformer", "Pooling"], {"pooling_mode_max_tokens": True})
    assert unsupported(exportable) is None and resolve_backend("auto", exportable) == "onnx"
    assert "Dense" in unsupported(dense) and resolve_backend("auto", dense) == "torch"
    assert "pooling_mode_max_tokens" in unsupported(max_pooled) and resolve_backend("auto", max_pooled) == "torch"
    assert resolve_backend("torch", exportable) == "torch" and resolve_backend("onnx-int8", dense) == "onnx-int8"
    assert resolve_backend("auto", tmp_path) == "torch"  # no modules.json: a bare transformers folder


def test_the_packaged_minilm_runs_on_onnx_by_default_and_on_torch_when_asked():
    from retbench.tasks.providers.sentence_transformers import SentenceTransformersProvider

    assert SentenceTransformersProvider().backend == "onnx"
    assert SentenceTransformersProvider(backend="torch").backend == "torch"
    assert SentenceTransformersProvider().first_use_modules() == ("onnxruntime", "transformers")
