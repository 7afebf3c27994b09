"""Spec-load checks of the cheaper and fine-tuned variants of a provider, which need to know the
provider (its declared dimension, whether it can be fine-tuned): errors name the key path."""
from __future__ import annotations


def variant_errors(spec) -> list[str]:
    """Problems with `providers[i].dimensions` (larger than the model's declared dimension)."""
    from tasks.providers import create_provider

    problems = []
    for i, provider in enumerate(spec.providers):
        if provider.dimensions is None:
            continue
        try:
            declared = create_provider(provider.kind, provider.options).declared_dim()
        except (OSError, RuntimeError, ValueError):
            continue  # a model folder that is missing is reported by the embed stage, with its fix
        if declared is not None and provider.dimensions > declared:
            problems.append(f"providers[{i}].dimensions: {provider.dimensions} is larger than the dimension of "
                            f"provider {provider.name!r} ({declared}); expected at most {declared}")
    return problems
