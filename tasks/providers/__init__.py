"""Embedding providers: one small file each, found by `kind` in a registry.

A provider only turns texts into vectors (protocol and defaults: tasks/providers/base.py).
Batching, normalisation, caching and progress live once, in tasks/stages/embed.py.
"""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from retbench.tasks.providers.base import Provider, Role
from retbench.tasks.registry import Registry


def _builtin() -> dict[str, type[Provider]]:
    # Imported on first lookup, so `import retbench.tasks.providers` stays cheap.
    from retbench.tasks.providers.cohere import CohereProvider
    from retbench.tasks.providers.e5_multilingual import E5MultilingualProvider
    from retbench.tasks.providers.finetuned import FinetunedProvider
    from retbench.tasks.providers.hashing import HashingProvider
    from retbench.tasks.providers.ollama import OllamaProvider
    from retbench.tasks.providers.openai_compatible import OpenAICompatibleProvider
    from retbench.tasks.providers.precomputed import PrecomputedProvider
    from retbench.tasks.providers.python_callable import PythonProvider
    from retbench.tasks.providers.sentence_transformers import SentenceTransformersProvider
    from retbench.tasks.providers.tei import TEIProvider
    from retbench.tasks.providers.voyage import VoyageProvider

    return {provider.kind: provider for provider in (
        E5MultilingualProvider, FinetunedProvider, HashingProvider, SentenceTransformersProvider,
        CohereProvider, OllamaProvider, OpenAICompatibleProvider, TEIProvider, VoyageProvider, PythonProvider,
        PrecomputedProvider)}


_REGISTRY: Registry[type[Provider]] = Registry("provider", _builtin)
kind_origins = _REGISTRY.origins  # kind -> built-in, an entry point, a spec plug-in (`retbench plugins`)
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
    from retbench.tasks.providers.truncated import with_dimensions

    return with_dimensions(provider, dimensions)


__all__ = ["Provider", "Role", "register", "create_provider", "known_kinds", "options_model", "provider_class"]
