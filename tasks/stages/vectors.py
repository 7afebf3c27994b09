"""The pipeline's one L2 normalisation. Vectors are normalised once, when they enter the
embedding cache; indexes and searches then use them as they are (inner product = cosine)."""
from __future__ import annotations

import numpy as np


def l2_normalized(vectors: np.ndarray) -> np.ndarray:
    """A float32, C-ordered copy with unit-length rows; an all-zero row (a text with no
    hashable features) stays zero rather than NaN."""
    out = np.array(vectors, dtype=np.float32, order="C", copy=True)
    norms = np.sqrt(np.einsum("ij,ij->i", out, out))[:, None]
    out /= np.where(norms == 0, 1.0, norms)
    return out


def truncated(vectors: np.ndarray, dimensions: int) -> np.ndarray:
    """The first `dimensions` components of each row, re-normalised to unit length (Matryoshka
    style; honest for a model not trained for it: the prefix then just loses information)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim != 2 or vectors.shape[1] < dimensions:
        raise ValueError(f"cannot keep {dimensions} dimensions of vectors shaped {vectors.shape}")
    return l2_normalized(vectors[:, :dimensions])
