"""Embedding providers: one small file each, found by `kind` in a registry.

A provider only turns texts into vectors (protocol and defaults: tasks/providers/base.py).
Batching, normalisation, caching and progress live once, in tasks/stages/embed.py.
"""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from tasks.providers.base import Provider, Role
from tasks.registry import Registry


def _load_builtin() -> None:
    # Importing registers them; done lazily so `import tasks.providers` stays cheap.
    from tasks.providers import e5_multilingual, finetuned, hashing, sentence_transformers  # noqa: F401
    from tasks.providers import cohere, ollama, openai_compatible, tei, voyage  # noqa: F401


_REGISTRY: Registry[type[Provider]] = Registry("provider", _load_builtin)
register = _REGISTRY.register
known_kinds = _REGISTRY.kinds
provider_class = _REGISTRY.get


def options_model(kind: str) -> type[BaseModel]:
    """The pydantic model of a kind's `options` (the spec validates against it at load)."""
    return provider_class(kind).Options


def create_provider(kind: str, options: dict[str, Any] | None = None, dimensions: int | None = None) -> Provider:
    """Build the provider `kind` from its options; `dimensions` keeps the first N components
    of its vectors, re-normalised (tasks/providers/truncated.py)."""
    provider = provider_class(kind)(**(options or {}))
    if dimensions is None:
        return provider
    from tasks.providers.truncated import with_dimensions

    return with_dimensions(provider, dimensions)


__all__ = ["Provider", "Role", "register", "create_provider", "known_kinds", "options_model", "provider_class"]
