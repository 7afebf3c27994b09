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
