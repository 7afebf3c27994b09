"""A local sentence-transformers CrossEncoder folder (no download: local_files_only)."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from retbench.tasks.rerankers.base import RerankBatch, checked_scores
from retbench.tasks.store.files import file_sha256

_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".onnx")


class CrossEncoderOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str = Field(description="path to a local sentence-transformers CrossEncoder folder")
    max_length: int | None = Field(None, ge=8, description="tokens per (query, document) pair; default: the model's")
    activation: Literal["model", "none"] = Field(
        "model", description="'model': the model's own activation (sigmoid for one label); 'none': raw logits")
    device: str = Field("cpu", description="cpu, cuda, cuda:N or mps; a device this host lacks is refused before any work")
    batch_size: int = Field(32, ge=1, description="pairs per forward pass")

    @field_validator("device")
    @classmethod
    def _known_device(cls, value: str) -> str:
        from retbench.tasks.devices import checked_device

        return checked_device(value)


class CrossEncoderReranker:
    kind = "cross-encoder"

    def __init__(self, **options):
        self.options = CrossEncoderOptions(**options)
        self.path = Path(self.options.model)
        if not self.path.is_dir():
            raise FileNotFoundError(f"cross-encoder model folder not found: {self.path}")
        self._model = None

    def fingerprint(self) -> dict:
        files = sorted(p for p in self.path.rglob("*") if p.is_file() and p.suffix in _WEIGHT_SUFFIXES)
        if not files:
            raise FileNotFoundError(f"no weight files ({', '.join(_WEIGHT_SUFFIXES)}) under {self.path}")
        o = self.options
        # The folder name and weight hashes, not the absolute path: the same weights elsewhere are the same model.
        return {"kind": self.kind, "model": self.path.name, "max_length": o.max_length, "activation": o.activation,
                "weights": ",".join(f"{p.relative_to(self.path)}:{file_sha256(p)}" for p in files)}

    def model(self):
        if self._model is None:
            from sentence_transformers import CrossEncoder

            self._model = CrossEncoder(str(self.path), device=self.options.device, max_length=self.options.max_length,
                                       local_files_only=True)
        return self._model

    @property
    def pair_batch_size(self) -> int:
        """Pairs per call: the rerank stage sends the length-sorted pairs of all queries this many at a time."""
        return self.options.batch_size

    def score(self, query: str, documents: list[str]) -> np.ndarray:
        return self.score_batch(query, documents).scores

    def score_batch(self, query: str, documents: list[str]) -> RerankBatch:
        return self.score_pairs([(query, d) for d in documents])

    def score_pairs(self, pairs: list[tuple[str, str]]) -> RerankBatch:
        """One score per (query, document) pair, from any mix of queries."""
        import torch

        model = self.model()
        started = time.perf_counter()
        kwargs = {"activation_fn": torch.nn.Identity()} if self.options.activation == "none" else {}
        scores = model.predict(list(pairs), batch_size=self.options.batch_size, show_progress_bar=False, **kwargs)
        return RerankBatch(checked_scores(scores, len(pairs), f"cross-encoder {self.path.name}"),
                           time.perf_counter() - started)
