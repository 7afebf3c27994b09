"""Rerankers: one small file per kind, found by `kind` in a registry (like tasks/providers).

A reranker only scores (query, document) pairs. Top-N selection, the score cache, latency and
cost live once, in tasks/stages/rerank.py.
"""
from __future__ import annotations

from typing import Any, Callable

from retbench.tasks.rerankers.base import RerankBatch, Reranker, RerankerError
from retbench.tasks.registry import Registry


def _builtin() -> dict[str, Callable[..., Reranker]]:
    # Imported on first lookup, so importing the package loads no model library.
    from retbench.tasks.rerankers.cohere_rerank import CohereReranker
    from retbench.tasks.rerankers.cross_encoder import CrossEncoderReranker
    from retbench.tasks.rerankers.embedding_rescore import EmbeddingRescoreReranker
    from retbench.tasks.rerankers.jina_rerank import JinaReranker
    from retbench.tasks.rerankers.python_callable import PythonReranker
    from retbench.tasks.rerankers.tei_rerank import TeiReranker
    from retbench.tasks.rerankers.voyage_rerank import VoyageReranker

    return {reranker.kind: reranker for reranker in (
        CrossEncoderReranker, EmbeddingRescoreReranker, CohereReranker, JinaReranker, TeiReranker, VoyageReranker,
        PythonReranker)}


_REGISTRY: Registry[Callable[..., Reranker]] = Registry("reranker", _builtin)
kind_origins = _REGISTRY.origins  # kind -> built-in, an entry point, a spec plug-in (`retbench plugins`)
register = _REGISTRY.register
known_kinds = _REGISTRY.kinds


def create_reranker(kind: str, options: dict[str, Any] | None = None) -> Reranker:
    """Build the reranker `kind` from its options (validated by its own Options model)."""
    return _REGISTRY.get(kind)(**(options or {}))


def reranker_options_model(kind: str):
    """The pydantic model of a reranker kind's `options`, or None if it declares none."""
    return getattr(_REGISTRY.get(kind), "Options", None)


__all__ = ["Reranker", "RerankBatch", "RerankerError", "register", "create_reranker", "known_kinds"]
