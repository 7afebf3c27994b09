"""Embedding providers: one small file each, found by `kind` in a registry.

A provider only turns texts into vectors. Batching, normalisation, caching and
progress live once, in tasks/embed.py.
"""
from __future__ import annotations

from typing import Any, Callable

from tasks.providers.base import Provider, Role

_REGISTRY: dict[str, Callable[..., Provider]] = {}


def register(kind: str):
    def decorator(factory: Callable[..., Provider]):
        if kind in _REGISTRY:
            raise ValueError(f"provider kind {kind!r} is registered twice")
        _REGISTRY[kind] = factory
        return factory

    return decorator


def known_kinds() -> list[str]:
    _load_builtin()
    return sorted(_REGISTRY)


def create_provider(kind: str, options: dict[str, Any] | None = None) -> Provider:
    """Build the provider `kind` from its options (validated by the provider itself)."""
    _load_builtin()
    if kind not in _REGISTRY:
        raise ValueError(f"unknown provider kind {kind!r} (known: {', '.join(sorted(_REGISTRY))})")
    return _REGISTRY[kind](**(options or {}))


def _load_builtin() -> None:
    # Importing registers them; done lazily so `import tasks.providers` stays cheap.
    from tasks.providers import e5_multilingual, hashing, sentence_transformers  # noqa: F401
    from tasks.providers import cohere, ollama, openai_compatible, tei, voyage  # noqa: F401


__all__ = ["Provider", "Role", "register", "create_provider", "known_kinds"]
