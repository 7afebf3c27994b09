"""Binary codes: one sign bit per vector component, searched by Hamming distance, with optional
float re-scoring of the best candidates (32x smaller than float32, and rough without re-scoring).

`BinarySearch` wraps a faiss.IndexBinaryFlat so the retrieval and sweep code can call
`.search(queries, k)` on float queries as on any float index and get "higher is better" scores.
"""
from __future__ import annotations

import faiss
import numpy as np


def sign_codes(vectors: np.ndarray) -> np.ndarray:
    """Packed sign bits, 8 components per byte (a component > 0 is 1; 0 and negatives are 0).
    A dimension that is not a multiple of 8 is padded with 0 bits on both sides of a
    comparison, so the padding never adds to a Hamming distance."""
    return np.packbits(np.asarray(vectors) > 0, axis=1)


def padded_bits(dim: int) -> int:
    """The dimension FAISS records for binary codes of `dim` float components."""
    return -(-dim // 8) * 8


def build_binary_index(vectors: np.ndarray, batch: int = 65_536) -> faiss.IndexBinaryFlat:
    index = faiss.IndexBinaryFlat(padded_bits(vectors.shape[1]))
    for start in range(0, vectors.shape[0], batch):  # shape, not len: a row source has no len
        index.add(np.ascontiguousarray(sign_codes(vectors[start : start + batch])))
    return index


class BinarySearch:
    """Float queries in, (scores, ids) out, like a float FAISS index.

    rescore = 0: the score is the cosine of the two sign vectors, 1 - 2 * hamming / bits.
    rescore = R > 0: the best max(R, k) Hamming candidates are scored again by the inner
    product of the float vectors (`vectors`: an array or anything with FAISS's
    `reconstruct_batch`, such as the flat index) and the best k of them are returned, so every
    returned score is a float cosine. Rows FAISS could not fill are -1 as in FAISS.
    """

    def __init__(self, index: faiss.IndexBinary, vectors=None, rescore: int = 0):
        self.index = index
        self.vectors = vectors
        self.rescore = rescore

    @property
    def ntotal(self) -> int:
        return self.index.ntotal

    @property
    def d(self) -> int:
        return self.index.d

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        wanted = max(k, self.rescore) if self.rescore else k
        distances, ids = self.index.search(np.ascontiguousarray(sign_codes(queries)), wanted)
        ids = ids.astype(np.int64)
        if not self.rescore:
            scores = (1.0 - 2.0 * distances.astype(np.float32) / self.index.d).astype(np.float32)
            return np.where(ids >= 0, scores, -np.inf).astype(np.float32), ids
        if self.vectors is None:
            raise ValueError("binary index: rescore > 0 needs the float vectors (none were attached)")
        valid = ids >= 0
        rows = _rows(self.vectors, np.where(valid, ids, 0).reshape(-1)).reshape(*ids.shape, -1)
        scores = np.einsum("qd,qkd->qk", queries, rows).astype(np.float32)
        scores = np.where(valid, scores, -np.inf).astype(np.float32)
        # Stable sort: equal float scores keep their Hamming order.
        order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
        return np.take_along_axis(scores, order, 1), np.take_along_axis(ids, order, 1)


def _rows(vectors, ids: np.ndarray) -> np.ndarray:
    if hasattr(vectors, "reconstruct_batch"):
        return vectors.reconstruct_batch(ids)
    return np.asarray(vectors[ids], dtype=np.float32)
