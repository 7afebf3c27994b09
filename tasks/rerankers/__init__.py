"""Rerankers: one small file per kind, found by `kind` in a registry (like tasks/providers).

A reranker only scores (query, document) pairs. Top-N selection, the score cache, latency and
cost live once, in tasks/stages/rerank.py.
"""
from __future__ import annotations

from typing import Any, Callable

from tasks.rerankers.base import RerankBatch, Reranker, RerankerError

_REGISTRY: dict[str, Callable[..., Reranker]] = {}


def register(kind: str):
    def decorator(factory: Callable[..., Reranker]):
        if kind in _REGISTRY:
            raise ValueError(f"reranker kind {kind!r} is registered twice")
        _REGISTRY[kind] = factory
        return factory

    return decorator


def known_kinds() -> list[str]:
    _load_builtin()
    return sorted(_REGISTRY)


def create_reranker(kind: str, options: dict[str, Any] | None = None) -> Reranker:
    """Build the reranker `kind` from its options (validated by its own Options model)."""
    _load_builtin()
    if kind not in _REGISTRY:
        raise ValueError(f"unknown reranker kind {kind!r} (known: {', '.join(sorted(_REGISTRY))})")
    return _REGISTRY[kind](**(options or {}))


def _load_builtin() -> None:
    # Importing registers them; lazily, so importing the package loads no model library.
    from tasks.rerankers import cross_encoder, embedding_rescore  # noqa: F401
    from tasks.rerankers import cohere_rerank, jina_rerank, tei_rerank, voyage_rerank  # noqa: F401


__all__ = ["Reranker", "RerankBatch", "RerankerError", "register", "create_reranker", "known_kinds"]
