"""An embedding set's vectors as index builders read them, held in memory at most once: the flat
index is filled straight from the cache, and every later index reads its rows from the flat file.

Why: a loaded matrix plus the index built from it is two copies of the vectors (three while a
growing index reallocates). Here the flat index's own storage is the only full copy, and once
that index is written, IVF / IVF-PQ / HNSW builds page rows in from its file batch by batch,
unmapping each batch, so the resident set is the index being built plus one batch.
"""
from __future__ import annotations

import time
from pathlib import Path

import faiss
import numpy as np

from tasks.stages.embed import EmbeddingSet, LoadReport, read_vectors

_NORMALISE_BATCH = 65_536  # rows normalised at a time, as build_faiss_index adds them


class CachedVectors:
    """Row source for tasks.stages.index.build_faiss_index (``normalised``: rows come out
    L2-normalised, bit for bit what normalising the cached rows gives).

    ``fill_normalised(out)`` writes all rows into a flat index's storage (the first build); indexing
    (``source[rows]``) reads them back from ``flat_path``, which must exist by then.
    """

    normalised = True

    def __init__(self, embedding_set: EmbeddingSet, flat_path: str | Path):
        self.embedding_set = embedding_set
        self.flat_path = Path(flat_path)
        self.shape = (embedding_set.count, embedding_set.dim)
        self.report: LoadReport | None = None
        self.load_seconds = 0.0

    def fill_normalised(self, out: np.ndarray) -> None:
        started = time.perf_counter()
        _, _, self.report = read_vectors(self.embedding_set, out=out)
        self.load_seconds += time.perf_counter() - started
        for start in range(0, len(out), _NORMALISE_BATCH):
            faiss.normalize_L2(out[start:start + _NORMALISE_BATCH])  # rows are independent: same bits as a copy

    def __getitem__(self, rows) -> np.ndarray:
        if not self.flat_path.exists():
            raise FileNotFoundError(f"{self.flat_path}: the flat index must be built before indexes read rows from it")
        # A fresh read-only mapping per batch: the pages it touched leave the resident set with it.
        flat = faiss.read_index(str(self.flat_path), faiss.IO_FLAG_MMAP_IFC)
        try:
            if (flat.ntotal, flat.d) != self.shape:
                raise ValueError(f"{self.flat_path} holds {flat.ntotal} x {flat.d} vectors, expected {self.shape[0]} x {self.shape[1]}")
            return np.array(flat_rows(flat)[rows], dtype=np.float32, order="C", copy=True)
        finally:
            del flat


def flat_rows(index: faiss.IndexFlat) -> np.ndarray:
    """A (ntotal, d) float32 view of a flat index's storage (valid while the index lives)."""
    return faiss.rev_swig_ptr(index.codes.data(), index.ntotal * index.d * 4).view(np.float32).reshape(index.ntotal, index.d)
