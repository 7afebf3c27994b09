"""The reranker protocol: a fingerprint, and scores for one query's documents (higher = better)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np


class RerankerError(RuntimeError):
    """A reranker answer that cannot be used; the message says which and why."""


@dataclass(frozen=True)
class RerankBatch:
    """One scored batch: a score per document in input order, and what it cost."""

    scores: np.ndarray
    seconds: float  # the call's own latency (retries excluded)
    tokens: int = 0
    token_source: str = "none"  # usage | tokenizer | estimate | none
    search_units: float = 0.0  # Cohere-style billing unit (a query with up to 100 documents)


@runtime_checkable
class Reranker(Protocol):
    """Optional, found by the rerank stage: `score_pairs(pairs) -> RerankBatch` with `pair_batch_size`
    (scores any mix of queries' pairs: the stage batches all queries' pairs together, length-sorted),
    `score_batches(batches)` (takes every call at once: embedding-rescore, the HTTP kinds),
    `score_batch(query, documents) -> RerankBatch` (with its cost)."""

    kind: str

    def fingerprint(self) -> dict:
        """Everything that changes the scores (model, weights hash, max length, ...). Never secrets:
        it is hashed into cache keys and written to manifests."""

    def score(self, query: str, documents: list[str]) -> np.ndarray:
        """One score per document, in input order."""


def checked_scores(scores, expected: int, where: str) -> np.ndarray:
    """Scores as float64, refusing a wrong count or non-finite values (naming `where`)."""
    values = np.asarray(scores, dtype=np.float64).reshape(-1)
    if len(values) != expected:
        raise RerankerError(f"{where}: {len(values)} scores for {expected} documents")
    if not np.isfinite(values).all():
        bad = int(np.flatnonzero(~np.isfinite(values))[0])
        raise RerankerError(f"{where}: score {bad} is not finite ({values[bad]})")
    return values
