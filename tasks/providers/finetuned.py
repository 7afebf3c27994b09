"""A sentence-transformers model fine-tuned on train-split (else dev-split) hard negatives (tasks/stages/finetune.py):
`kind: finetuned` with `options.base` naming the spec's provider it was trained from.

The trained folder is found by `options.model`, which the fine-tune step fills in with the
content-addressed folder it built; the fingerprint carries that folder's weight hash and what
it was trained from (base fingerprint hash, triples hash, hyperparameters).
"""
from __future__ import annotations

import json
import os
from functools import cached_property
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from retbench.tasks.providers.sentence_transformers import SentenceTransformersProvider

# Provider kinds a fine-tune can start from: a local model whose weights we hold.
TUNABLE_KINDS = ("sentence-transformers",)
TRAINING_RECORD = "training.json"


class FinetunedOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    base: str = Field(description="name of the spec's provider to fine-tune (a local sentence-transformers model)")
    epochs: int = Field(1, ge=1, le=100)
    lr: float = Field(2e-5, gt=0, lt=1)
    batch_size: int = Field(16, ge=2, description="triples per step; the other triples' documents are in-batch negatives")
    seed: int = 0
    warmup_ratio: float = Field(0.1, ge=0, lt=1)
    max_seq_length: int | None = Field(128, ge=8, description="tokens per text in training; encoding uses the base's length")
    source_split: Literal["train", "dev"] | None = Field(
        None, description="the split hard negatives are mined from; default: train when the dataset has train "
                          "queries, else dev (the test split is never trained on)")
    max_per_query: int = Field(5, ge=1, description="hard negatives mined per training query")
    min_triples: int = Field(32, ge=1, description="refuse to train on fewer mined triples than this")
    max_triples: int | None = Field(256, ge=1, description="train on a seeded sample of at most this many triples "
                                                           "(bounds the training time; None: every mined triple)")
    encode_batch_size: int = Field(64, ge=1)
    threads: int | None = Field(1, ge=1, description="torch threads while training (None: torch's default, one per core)")
    model: str | None = Field(None, description="the trained folder: set by the fine-tune step, not by hand")

    def hyperparameters(self) -> dict:
        """What changes the trained weights besides the base model and the triples."""
        return {k: getattr(self, k) for k in ("epochs", "lr", "batch_size", "seed", "warmup_ratio", "max_seq_length")}


class FinetunedProvider(SentenceTransformersProvider):
    kind = "finetuned"
    Options = FinetunedOptions
    backend = "torch"  # a trained folder runs on sentence-transformers alone

    def __init__(self, **options):
        self.options = self.Options(**options)
        self._counted = {}  # plan_batches' token counts (set here: the base class's __init__ is not called)
        # folder: the store's fine-tune folder (model/ + training.json); path: its model, as
        # the sentence-transformers provider names the folder it loads and hashes.
        self.folder = Path(self.options.model) if self.options.model else None
        self.path = None if self.folder is None else self.folder / "model"
        if self.path is not None and not self.path.is_dir():
            raise FileNotFoundError(f"fine-tuned model folder not found: {self.path}")

    def engine(self):
        from retbench.tasks.devices import Engine

        return Engine("torch", "cpu", "a fine-tuned model runs on sentence-transformers (torch), on the CPU")

    def device_batch_size(self) -> tuple[int, str] | None:
        return None

    @property
    def trained(self) -> bool:
        return self.folder is not None

    def fingerprint(self) -> dict:
        record = self.training_record()
        weights = self._weights_hash
        return {
            "kind": self.kind,
            "base": record["base_fingerprint_hash"],
            "triples_sha256": record["triples_sha256"],
            "hyperparameters": record["hyperparameters"],
            "weights_sha256": weights,
            "query_prefix": record["query_prefix"],
            "document_prefix": record["document_prefix"],
            "max_seq_length": self._encode_length(record),
            "dim": record.get("dim"),
        }

    def declared_dim(self) -> int | None:
        return self.training_record().get("dim") if self.trained else None

    def training_record(self) -> dict:
        if self.folder is None:
            raise RuntimeError(f"provider kind 'finetuned' (base {self.options.base!r}) has no trained model yet: "
                               "run the fine-tune step (retbench.tasks.stages.finetune.finetune_provider), which sets options.model")
        return json.loads((self.folder / TRAINING_RECORD).read_text(encoding="utf-8"))

    def _prefix(self, role) -> str:
        record = self.training_record()
        return record["query_prefix"] if role == "query" else record["document_prefix"]

    def _max_tokens(self) -> int | None:
        return self._encode_length(self.training_record())

    def encode(self, texts: list[str], role):
        prefix = self._prefix(role)
        return self._model.encode([prefix + t for t in texts], batch_size=self.options.encode_batch_size,
                                  convert_to_numpy=True, normalize_embeddings=False, show_progress_bar=False)

    @cached_property
    def _model(self):
        self.training_record()  # the clear error when nothing was trained
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(str(self.path), device="cpu", local_files_only=True)
        length = self._encode_length(self.training_record())
        if length:
            model.max_seq_length = length
        return model

    def _encode_length(self, record: dict) -> int | None:
        # Folders trained before the encoding length was recorded encoded with the training length.
        return record.get("encode_max_seq_length", self.options.max_seq_length)
