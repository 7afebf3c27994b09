"""Rerankers: one small file per kind, found by `kind` in a registry (like tasks/providers).

A reranker only scores (query, document) pairs. Top-N selection, the score cache, latency and
cost live once, in tasks/stages/rerank.py.
"""
from __future__ import annotations

from typing import Any, Callable

from tasks.rerankers.base import RerankBatch, Reranker, RerankerError
from tasks.registry import Registry


def _load_builtin() -> None:
    # Importing registers them; lazily, so importing the package loads no model library.
    from tasks.rerankers import cross_encoder, embedding_rescore  # noqa: F401
    from tasks.rerankers import cohere_rerank, jina_rerank, tei_rerank, voyage_rerank  # noqa: F401


_REGISTRY: Registry[Callable[..., Reranker]] = Registry("reranker", _load_builtin)
register = _REGISTRY.register
known_kinds = _REGISTRY.kinds


def create_reranker(kind: str, options: dict[str, Any] | None = None) -> Reranker:
    """Build the reranker `kind` from its options (validated by its own Options model)."""
    return _REGISTRY.get(kind)(**(options or {}))


def reranker_options_model(kind: str):
    """The pydantic model of a reranker kind's `options`, or None if it declares none."""
    return getattr(_REGISTRY.get(kind), "Options", None)


__all__ = ["Reranker", "RerankBatch", "RerankerError", "register", "create_reranker", "known_kinds"]
