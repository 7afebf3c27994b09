"""Which providers of a spec are cheaper variants of another one (fewer dimensions, another
engine for the same weights), so the tables can put each beside its full version."""
from __future__ import annotations

from dataclasses import dataclass

# Options that change how a model runs (or where its exports live), never which model it is.
ENGINE_OPTIONS = ("backend", "onnx_cache", "batch_size", "threads", "device")
FULL_BACKEND = "auto"  # the default; torch and onnx (fp32) compute the same vectors (cosine >= 0.9999998 on NPL)
FULL_BACKENDS = ("auto", "torch", "onnx")


@dataclass(frozen=True)
class CheaperVariant:
    provider: str  # the variant's name in the spec
    full: str  # the provider it is a cheaper version of
    change: str  # e.g. "dimensions 256", "backend onnx-int8"
    encoder_changed: bool  # another engine: texts/s can differ; truncation encodes as the full model does


def _model_options(provider) -> dict:
    return {k: v for k, v in provider.options.items() if k not in ENGINE_OPTIONS}


def _is_full(provider) -> bool:
    return provider.dimensions is None and provider.options.get("backend", FULL_BACKEND) in FULL_BACKENDS


def cheaper_variants(spec) -> list[CheaperVariant]:
    """Every provider that is the same model as a full provider of the spec (same kind, same
    options but the engine's) with `dimensions` set or another `options.backend`; its full
    version is the first such provider in the spec."""
    fulls = [p for p in spec.providers if _is_full(p)]
    out = []
    for provider in spec.providers:
        if _is_full(provider):
            continue
        full = next((f for f in fulls if f.kind == provider.kind and _model_options(f) == _model_options(provider)), None)
        if full is None:
            continue
        backend = provider.options.get("backend", FULL_BACKEND)
        changes = ([f"dimensions {provider.dimensions}"] if provider.dimensions is not None else []) + (
            [f"backend {backend}"] if backend not in FULL_BACKENDS else [])
        out.append(CheaperVariant(provider.name, full.name, ", ".join(changes), backend not in FULL_BACKENDS))
    return out
