"""The offline default: re-score a first stage's documents with a second embedding provider
(cosine of query and document vectors, e.g. multilingual e5 re-scoring MiniLM's top 100).

It is not a cross-encoder: no package on the index here ships cross-encoder weights that load
offline, so this is the reranker that runs with no download. Vectors go through the embedding
cache (tasks.stages.embed.embed_texts), so texts another stage embedded are not embedded again.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from tasks.rerankers import register
from tasks.rerankers.base import RerankBatch, checked_scores


class EmbeddingRescoreOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    provider: str = Field("e5-multilingual", description="embedding provider kind (tasks.providers)")
    provider_options: dict[str, Any] = Field(default_factory=dict)
    batch_size: int = Field(64, ge=1, description="texts per embedding call")


class EmbeddingRescoreReranker:
    kind = "embedding-rescore"

    def __init__(self, **options):
        from tasks.providers import create_provider

        self.options = EmbeddingRescoreOptions(**options)
        self.provider = create_provider(self.options.provider, self.options.provider_options)
        self.store: Path | None = None

    def attach_store(self, store: str | Path) -> None:
        """The store whose embedding cache holds the vectors (the rerank stage calls this)."""
        self.store = Path(store)

    def fingerprint(self) -> dict:
        from tasks.stages.embed import full_fingerprint

        return {"kind": self.kind, "provider": full_fingerprint(self.provider)}

    def score(self, query: str, documents: list[str]) -> np.ndarray:
        return next(self.score_batches([(query, documents)]))[1].scores

    def score_batches(self, batches: Sequence[tuple[str, list[str]]]) -> Iterator[tuple[int, RerankBatch]]:
        """All queries and all documents are embedded in two calls (batching is what makes a
        bi-encoder cheap); each batch's seconds are its share of that time, by pairs."""
        from tasks.stages.embed import embed_texts, load_vectors

        if self.store is None:
            raise RuntimeError("embedding-rescore needs the store for its embedding cache: call attach_store(store)")
        started = time.perf_counter()
        queries = sorted({q for q, _ in batches})
        documents = sorted({d for _, docs in batches for d in docs})
        name = f"rerank-{self.options.provider}"
        q_set = embed_texts(self.provider, name, [f"q{i}" for i in range(len(queries))], queries, "query",
                            self.store, batch_size=self.options.batch_size)
        d_set = embed_texts(self.provider, name, [f"d{i}" for i in range(len(documents))], documents, "document",
                            self.store, batch_size=self.options.batch_size)
        q_vectors = dict(zip(queries, load_vectors(q_set)[1]))
        d_rows = {d: i for i, d in enumerate(documents)}
        d_vectors = load_vectors(d_set)[1]
        pairs = sum(len(docs) for _, docs in batches) or 1
        seconds = time.perf_counter() - started
        for index, (query, docs) in enumerate(batches):
            scores = d_vectors[[d_rows[d] for d in docs]] @ q_vectors[query] if docs else np.zeros(0)
            yield index, RerankBatch(checked_scores(scores, len(docs), "embedding-rescore"), seconds * len(docs) / pairs)


register("embedding-rescore")(EmbeddingRescoreReranker)
