"""A provider's vectors cut to their first N components and re-normalised (`dimensions: N` on a
spec's provider): a cheaper variant of any provider, cached apart from the full vectors."""
from __future__ import annotations

import dataclasses
from typing import Iterator, Sequence

import numpy as np

from retbench.tasks.providers.base import BatchResult, Provider, Role


class TruncatedProvider(Provider):
    """Wraps `inner`; everything but the vectors and the fingerprint is the inner provider's.
    The fingerprint gains `dimensions`, so truncated vectors get their own cache folder."""

    def __init__(self, inner: Provider, dimensions: int):
        if dimensions < 1:
            raise ValueError(f"dimensions must be a positive integer (got {dimensions})")
        declared = inner.declared_dim()
        if declared is not None and dimensions > declared:
            raise ValueError(f"dimensions={dimensions} is larger than the model's dimension {declared}")
        self.inner, self.dimensions = inner, dimensions
        self.kind, self.concurrent = inner.kind, inner.concurrent
        self.options = getattr(inner, "options", None)  # read by callers that show a provider's settings

    def fingerprint(self) -> dict:
        return {**self.inner.fingerprint(), "truncate_dimensions": self.dimensions}

    def declared_dim(self) -> int | None:
        return self.dimensions

    def encode(self, texts: list[str], role: Role) -> np.ndarray:
        return self._cut(self.inner.encode(texts, role))

    def encode_batches(self, batches: Sequence[list[str]], role: Role) -> Iterator[tuple[int, BatchResult]]:
        results = self.inner.encode_batches(batches, role)
        try:
            for index, result in results:
                yield index, dataclasses.replace(result, vectors=self._cut(result.vectors))
        finally:
            close = getattr(results, "close", None)  # a generator: stop the inner provider's requests too
            if close:
                close()

    def token_counts(self, texts: Sequence[str], role: Role) -> tuple[list[int], str]:
        return self.inner.token_counts(texts, role)

    def input_window(self) -> int | None:
        return self.inner.input_window()

    def first_use_modules(self) -> tuple[str, ...]:
        return self.inner.first_use_modules()

    def engine(self):
        return self.inner.engine()

    def device_batch_size(self) -> tuple[int, str] | None:
        return self.inner.device_batch_size()

    def plan_batches(self, texts: Sequence[str], role: Role, batch_size: int) -> list[list[int]]:
        return self.inner.plan_batches(texts, role, batch_size)

    def timed_calls(self, batches, role: Role, concurrency: int, warmup: int = 1):
        return self.inner.timed_calls(batches, role, concurrency, warmup)

    def _cut(self, vectors) -> np.ndarray:
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim == 2 and vectors.shape[1] < self.dimensions:
            # HTTP providers declare no dimension unless asked for one: found out on the first reply.
            raise ValueError(f"provider kind {self.kind!r} returned {vectors.shape[1]} dimensions; "
                             f"dimensions={self.dimensions} cannot be kept: set dimensions to at most {vectors.shape[1]}")
        # The prefix only: the embed stage re-normalises every vector before caching it
        # (tasks/stages/vectors.py l2_normalized), so the cache holds the unit-length prefix.
        return np.ascontiguousarray(vectors[:, : self.dimensions])


def with_dimensions(provider: Provider, dimensions: int | None) -> Provider:
    return provider if dimensions is None else TruncatedProvider(provider, dimensions)
