"""The pipeline's one L2 normalisation. Vectors are normalised once, when they enter the
embedding cache; indexes and searches then use them as they are (inner product = cosine)."""
from __future__ import annotations

import numpy as np


def l2_normalized(vectors: np.ndarray) -> np.ndarray:
    """A float32, C-ordered copy with unit-length rows; an all-zero row (a text with no
    hashable features) stays zero rather than NaN. A row already of unit length (within float32
    rounding) is kept bit for bit: dividing it by its norm again would move its last bits, so
    vectors read back from the cache (precomputed vectors exported from it) would not give
    exactly the same scores as the run that cached them."""
    out = np.array(vectors, dtype=np.float32, order="C", copy=True)
    norms = np.sqrt(np.einsum("ij,ij->i", out.astype(np.float64), out.astype(np.float64)))[:, None]
    unit = np.abs(norms - 1.0) <= 4 * np.finfo(np.float32).eps
    out /= np.where((norms == 0) | unit, 1.0, norms).astype(np.float32)
    return out


def truncated(vectors: np.ndarray, dimensions: int) -> np.ndarray:
    """The first `dimensions` components of each row, re-normalised to unit length (Matryoshka
    style; honest for a model not trained for it: the prefix then just loses information)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim != 2 or vectors.shape[1] < dimensions:
        raise ValueError(f"cannot keep {dimensions} dimensions of vectors shaped {vectors.shape}")
    return l2_normalized(vectors[:, :dimensions])
