"""The offline default: re-score a first stage's documents with a second embedding provider
(cosine of query and document vectors, e.g. multilingual e5 re-scoring MiniLM's top 100).

It is not a cross-encoder: no package on the index here ships cross-encoder weights that load
offline, so this is the reranker that runs with no download. Vectors go through the embedding
cache, which the rerank stage attaches (tasks/stages/embed.py cached_vectors, bound to the store),
so texts another stage embedded are not embedded again.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Iterator, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from retbench.tasks.providers.fingerprint import full_fingerprint
from retbench.tasks.rerankers.base import RerankBatch, checked_scores


class EmbeddingRescoreOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    provider: str = Field("e5-multilingual", description="embedding provider kind (retbench.tasks.providers)")
    provider_options: dict[str, Any] = Field(default_factory=dict)
    batch_size: int = Field(64, ge=1, description="texts per embedding call")


class EmbeddingRescoreReranker:
    kind = "embedding-rescore"

    def __init__(self, **options):
        from retbench.tasks.providers import create_provider

        self.options = EmbeddingRescoreOptions(**options)
        self.provider = create_provider(self.options.provider, self.options.provider_options)
        self.cached_vectors: Callable[..., np.ndarray] | None = None

    def attach_embedding_cache(self, cached_vectors: Callable[..., np.ndarray]) -> None:
        """`cached_vectors(provider, provider_name, ids, texts, role, batch_size=...)`: the vectors of
        `texts`, in order, through the store's embedding cache (the rerank stage calls this)."""
        self.cached_vectors = cached_vectors

    def fingerprint(self) -> dict:
        return {"kind": self.kind, "provider": full_fingerprint(self.provider)}

    def score(self, query: str, documents: list[str]) -> np.ndarray:
        return next(self.score_batches([(query, documents)]))[1].scores

    def score_batches(self, batches: Sequence[tuple[str, list[str]]]) -> Iterator[tuple[int, RerankBatch]]:
        """All queries and all documents are embedded in two calls (batching is what makes a
        bi-encoder cheap); each batch's seconds are its share of that time, by pairs."""
        if self.cached_vectors is None:
            raise RuntimeError("embedding-rescore needs the store's embedding cache: call attach_embedding_cache(...)"
                               " (the rerank stage does)")
        started = time.perf_counter()
        queries = sorted({q for q, _ in batches})
        documents = sorted({d for _, docs in batches for d in docs})
        name = f"rerank-{self.options.provider}"
        q_vectors = dict(zip(queries, self.cached_vectors(self.provider, name, [f"q{i}" for i in range(len(queries))],
                                                          queries, "query", batch_size=self.options.batch_size)))
        d_vectors = self.cached_vectors(self.provider, name, [f"d{i}" for i in range(len(documents))], documents,
                                        "document", batch_size=self.options.batch_size)
        d_rows = {d: i for i, d in enumerate(documents)}
        pairs = sum(len(docs) for _, docs in batches) or 1
        seconds = time.perf_counter() - started
        for index, (query, docs) in enumerate(batches):
            scores = d_vectors[[d_rows[d] for d in docs]] @ q_vectors[query] if docs else np.zeros(0)
            yield index, RerankBatch(checked_scores(scores, len(docs), "embedding-rescore"), seconds * len(docs) / pairs)
