"""ONNX Runtime backend for a local sentence-transformers model (Transformer + Pooling
[+ Normalize]): exported once from the model folder, fp32 or dynamically quantised int8, kept
content-addressed in a cache folder (never next to the packaged weights), and run with the
model's own tokenizer and pooling.

sentence-transformers' own ONNX path (`backend="onnx"`, `export_dynamic_quantized_onnx_model`)
needs optimum-onnx, which requires transformers < 4.58 while this environment has 5.x; so the
recipe is optimum's done by hand: torch.onnx's TorchScript exporter (`dynamo=False`: onnxruntime's
BERT fusions match its graph, not the dynamo exporter's), onnxruntime.transformers' optimizer
(fused Attention, EmbedLayerNormalization, SkipLayerNormalization, BiasGelu), then for int8
`quantize_dynamic` (QInt8 weights per output channel, on MatMul and Attention only).
Texts are encoded longest first, as sentence-transformers does, so a batch pads to similar lengths.
"""
from __future__ import annotations

import json
import os
from functools import cached_property
from pathlib import Path

import numpy as np

from retbench.tasks.devices import (ORT_CUDA, DeviceUnavailable, Engine, host_has, index_of, kind_of, missing_device,
                                    onnx_engines, torch_cuda_devices, torch_mps)
from retbench.tasks.store.build import build_folder_once
from retbench.tasks.store.files import file_sha256, stable_hash, write_json

BACKENDS = ("torch", "onnx", "onnx-int8")  # "auto" (the default) resolves to onnx or torch: resolve_backend
# Part of the export's cache key (so of the fingerprint): change it when the recipe changes.
EXPORT_RECIPE = "onnx-export-v3: torchscript export, bert fusions, dynamic int8 per channel on MatMul/Attention"
_POOLING = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls"}


def resolve_backend(backend: str, model_path: Path, device: str = "cpu") -> str:
    """The backend `choose_engine` picks (auto resolved)."""
    return choose_engine(backend, model_path, device).backend


def choose_engine(backend: str, model_path: Path, device: str = "cpu") -> Engine:
    """The engine for `backend` on `device`, or a DeviceUnavailable naming what this host lacks.

    cpu: auto is onnx (fp32) when the model's structure allows it and the onnx extra is installed,
    else torch. cuda: auto is ONNX Runtime's CUDAExecutionProvider when onnxruntime offers it and the
    structure allows, else torch on the device; mps: torch on the device (ONNX Runtime has no MPS
    engine). On a GPU auto never falls back to the CPU: without an engine for the device it refuses."""
    from retbench.tasks.extras import installed, require

    kind = kind_of(device)
    if backend not in ("auto", "torch"):
        require("onnx", f"backend: {backend}")
    missing = missing_device(device)
    if missing is not None:
        raise missing
    if kind == "cpu":
        if backend != "auto":
            return Engine(backend, device, "set in the spec")
        # Without the onnx extra, auto is torch: the same vectors to 0.9999998 cosine, slower on short texts.
        why_not = unsupported(model_path) or (None if installed("onnx") else "the onnx extra is not installed")
        if why_not:
            return Engine("torch", device, f"auto on cpu: torch, as ONNX Runtime cannot run it ({why_not})")
        return Engine("onnx", device, "auto on cpu: ONNX Runtime's CPU engine, faster than torch there, as the "
                                      "model's structure allows it (Transformer + Pooling (+ Normalize))")
    torch_has = torch_mps() if kind == "mps" else torch_cuda_devices() > index_of(device)
    ort_has = kind == "cuda" and installed("onnx") and ORT_CUDA in onnx_engines()
    if backend == "onnx-int8":
        raise DeviceUnavailable(device, "backend onnx-int8 runs on ONNX Runtime's CPU engine only (its dynamically "
                                        "quantised operators are made for the CPU)",
                                "use backend onnx or torch on the GPU, or device: cpu for onnx-int8")
    if backend == "onnx" and not ort_has:
        why = ("ONNX Runtime has no MPS engine" if kind == "mps" else
               f"backend onnx there needs ONNX Runtime's {ORT_CUDA} (the onnxruntime-gpu package); {host_has()}")
        raise DeviceUnavailable(device, why, "use backend: torch or auto on the GPU")
    if backend == "torch" and not torch_has:
        raise DeviceUnavailable(device, f"backend torch there needs torch built with CUDA; {host_has()}",
                                f"use backend: auto or onnx, which run on {ORT_CUDA}")
    if backend != "auto":
        return Engine(backend, device, "set in the spec")
    structure = unsupported(model_path)
    if ort_has and structure is None:
        return Engine("onnx", device, f"auto on {device}: ONNX Runtime's {ORT_CUDA}, which onnxruntime offers, as "
                                      "the model's structure allows it")
    if torch_has:
        other = ("ONNX Runtime has no MPS engine" if kind == "mps" else
                 f"ONNX Runtime cannot run the model ({structure})" if ort_has else
                 f"ONNX Runtime offers no {ORT_CUDA}")
        return Engine("torch", device, f"auto on {device}: torch on the device ({other})")
    raise DeviceUnavailable(device, f"torch sees no CUDA device and ONNX Runtime cannot run the model ({structure})",
                            "set device: cpu, or install torch built with CUDA")


def default_cache_dir() -> Path:
    return Path(os.environ.get("RETBENCH_ONNX_CACHE", Path.home() / ".cache" / "retbench" / "onnx"))


def _structure(model_path: Path) -> tuple[list[str], dict]:
    """(modules.json's class names, the pooling module's config)."""
    modules = json.loads((model_path / "modules.json").read_text())
    kinds = [m["type"].rsplit(".", 1)[-1] for m in modules]
    pooling_dir = next((m["path"] for m in modules if m["type"].endswith("Pooling")), None)
    config = json.loads((model_path / pooling_dir / "config.json").read_text()) if pooling_dir is not None else {}
    return kinds, config


def unsupported(model_path: Path) -> str | None:
    """Why this sentence-transformers folder cannot run on the ONNX backend; None when it can
    (Transformer + mean or CLS pooling, + Normalize: what `encode` reproduces)."""
    if not (Path(model_path) / "modules.json").is_file():
        return "no modules.json (not a sentence-transformers folder)"
    return _unsupported_structure(*_structure(Path(model_path)))


def _unsupported_structure(kinds: list[str], config: dict) -> str | None:
    if kinds[:2] != ["Transformer", "Pooling"] or any(k != "Normalize" for k in kinds[2:]):
        return f"the ONNX backend handles Transformer + Pooling (+ Normalize) models; this one has {kinds}"
    modes = [mode for key, mode in _POOLING.items() if config.get(key)]
    other = [k for k, v in config.items() if k.startswith("pooling_mode") and v is True and k not in _POOLING]
    if len(modes) != 1 or other:
        return (f"pooling {sorted(k for k, v in config.items() if v is True)} is not supported by the ONNX backend "
                "(mean or cls only)")
    return None


class OnnxEncoder:
    """`encode(texts)` -> pooled float32 vectors, as the sentence-transformers model computes them."""

    def __init__(self, model_path: Path, backend: str, weights_hash: str, max_seq_length: int | None,
                 cache_dir: Path | None = None, threads: int | None = None, device: str = "cpu"):
        if backend not in BACKENDS[1:]:
            raise ValueError(f"ONNX backend must be one of {BACKENDS[1:]} (got {backend!r})")
        self.model_path, self.backend, self.weights_hash = Path(model_path), backend, weights_hash
        self.max_seq_length, self.threads, self.device = max_seq_length, threads, device
        self.cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
        kinds, config = _structure(self.model_path)
        reason = _unsupported_structure(kinds, config)
        if reason:
            raise ValueError(f"{self.model_path}: {reason}: use backend: torch")
        self.pooling = next(mode for key, mode in _POOLING.items() if config.get(key))
        self.normalize = "Normalize" in kinds

    @cached_property
    def folder(self) -> Path:
        """The exported model's folder, made once per (weights, backend, exporter versions)."""
        from importlib.metadata import version

        # The installed versions without importing them: a cached rerun must not pay for torch's
        # import (~2 s) to find an export that exists; the strings equal torch.__version__ etc.
        versions = {"torch": version("torch"), "onnxruntime": version("onnxruntime")}
        key = stable_hash(EXPORT_RECIPE, self.weights_hash, self.backend, versions)
        folder = self.cache_dir / f"{self.model_path.name}-{self.backend}-{key[:16]}"

        def build(tmp: Path) -> None:
            import logging

            # One opaque call of ~20 s (a quiet 2-core machine): said before it starts, not left silent.
            logging.getLogger("retbench").info(
                f"exporting {self.model_path.name} to ONNX ({self.backend}), once per machine and model, into {folder}")
            tmp.mkdir(parents=True)
            exported, fused = tmp / "exported.onnx", tmp / "model.onnx" if self.backend == "onnx" else tmp / "fp32.onnx"
            _export(self.model_path, exported)
            fusions = _optimize(self.model_path, exported, fused)
            exported.unlink()
            if self.backend == "onnx-int8":
                import onnx
                from onnxruntime.quantization import QuantType, quantize_dynamic

                # Per output channel: with one scale per tensor MiniLM's vectors fell to cosine 0.89
                # of torch's (worst of 96 Cranfield documents), per channel 0.97. The embedding
                # tables stay float (a lookup: quantising them saves no time, costs accuracy). The fused ops carry no shape
                # information for the quantizer: their outputs are float.
                quantize_dynamic(str(fused), str(tmp / "model.onnx"), weight_type=QuantType.QInt8, per_channel=True,
                                 op_types_to_quantize=["MatMul", "Attention"],
                                 extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
                fused.unlink()
            write_json(tmp / "export.json", {"weights_sha256": self.weights_hash, "backend": self.backend,
                                             "recipe": EXPORT_RECIPE, "fused_operators": fusions, **versions})

        build_folder_once(self.cache_dir, folder, ("model.onnx", "export.json"), build)
        return folder

    @cached_property
    def sha256(self) -> str:
        return file_sha256(self.folder / "model.onnx")

    @cached_property
    def tokenizer(self):
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(self.model_path), local_files_only=True)

    @cached_property
    def session(self):
        import onnxruntime

        options = onnxruntime.SessionOptions()
        # As many threads as torch uses (one per core this process may run on), set explicitly:
        # onnxruntime's own default counts physical cores, torch's the affinity mask.
        options.intra_op_num_threads = self.threads or len(os.sched_getaffinity(0))
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        if kind_of(self.device) != "cuda":
            return onnxruntime.InferenceSession(str(self.folder / "model.onnx"), options, providers=["CPUExecutionProvider"])
        # The CPU engine is listed second for the few shape operators ONNX Runtime places there
        # itself; but when the CUDA engine cannot start (its CUDA or cuDNN libraries missing),
        # ONNX Runtime runs the whole model on the CPU with a warning: refused instead.
        session = onnxruntime.InferenceSession(str(self.folder / "model.onnx"), options, providers=[
            (ORT_CUDA, {"device_id": index_of(self.device)}), "CPUExecutionProvider"])
        if session.get_providers()[0] != ORT_CUDA:
            raise DeviceUnavailable(self.device, f"ONNX Runtime could not start its {ORT_CUDA} (it would run on the "
                                                 "CPU: the CUDA or cuDNN libraries onnxruntime-gpu needs are missing?)",
                                    "use backend: torch, or fix onnxruntime-gpu's CUDA libraries")
        return session

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        inputs = {i.name for i in self.session.get_inputs()}
        # Longest first (by characters, as sentence-transformers sorts): a batch pads to its longest text.
        order = np.argsort([-len(text) for text in texts], kind="stable")
        parts = []
        for start in range(0, len(texts), batch_size):
            encoded = self.tokenizer([texts[i] for i in order[start : start + batch_size]], padding=True, truncation=True,
                                     max_length=self.max_seq_length, return_tensors="np")
            feed = {name: np.asarray(encoded[name], dtype=np.int64) for name in inputs}
            hidden = self.session.run(None, feed)[0]
            if self.pooling == "cls":
                pooled = hidden[:, 0]
            else:
                mask = encoded["attention_mask"][:, :, None].astype(np.float32)
                pooled = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
            if self.normalize:
                pooled = pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
            parts.append(pooled.astype(np.float32))
        if not parts:
            return np.zeros((0, 0), np.float32)
        out = np.empty((len(texts), parts[0].shape[1]), np.float32)
        out[order] = np.concatenate(parts)
        return out


def _export(model_path: Path, target: Path) -> None:
    """torch.onnx (TorchScript exporter) export of the Transformer module: token ids in, last hidden state out."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_path), local_files_only=True)
    model = AutoModel.from_pretrained(str(model_path), local_files_only=True, attn_implementation="eager").eval()
    example = tokenizer(["an example sentence", "and a second, longer example sentence"], padding=True, return_tensors="pt")
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in example]

    class LastHiddenState(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask, token_type_ids=None):
            given = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
            return self.inner(**{n: given[n] for n in names}).last_hidden_state

    axes = {n: {0: "batch", 1: "sequence"} for n in [*names, "last_hidden_state"]}
    with torch.no_grad():
        torch.onnx.export(LastHiddenState(model).eval(), tuple(example[n] for n in names), str(target), input_names=names,
                          output_names=["last_hidden_state"], dynamic_axes=axes, opset_version=17, dynamo=False)


def _optimize(model_path: Path, source: Path, target: Path) -> dict[str, int]:
    """onnxruntime's BERT graph fusions (offline, CPU); returns the fused operators it made."""
    from onnxruntime.transformers import optimizer

    config = json.loads((model_path / "config.json").read_text())
    model = optimizer.optimize_model(str(source), model_type="bert", num_heads=config["num_attention_heads"],
                                     hidden_size=config["hidden_size"])
    model.save_model_to_file(str(target))
    return {name: count for name, count in model.get_fused_operator_statistics().items() if count}
