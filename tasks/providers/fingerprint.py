"""The fingerprint a provider's vectors are cached and reported under: its own, plus what the
embedding stage does to every vector. Shared by the embedding cache, the embedding-rescore
reranker, fine-tuning and the manifest."""
from __future__ import annotations

from retbench.tasks.providers.base import Provider

# Added to every provider's own fingerprint: the embedding stage (tasks/stages/embed.py) does
# these to every provider's vectors.
PIPELINE_FINGERPRINT = {"normalize": "l2", "dtype": "float32"}


def full_fingerprint(provider: Provider) -> dict:
    try:
        fingerprint = provider.fingerprint()
    except ModuleNotFoundError as error:
        # Before anything is written: a missing engine must not look like a cache problem.
        raise RuntimeError(
            f"provider kind {getattr(provider, 'kind', '?')!r} needs the Python package {error.name!r}, which is not "
            f"installed: pip install {error.name} (or reinstall retbench), then rerun"
        ) from error
    return {**fingerprint, **PIPELINE_FINGERPRINT}
