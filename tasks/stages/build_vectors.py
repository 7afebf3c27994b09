"""An embedding set's vectors as index builders read them, held in memory at most once: the flat
index is filled straight from the cache, and every later index reads its rows from the flat file.

Why: a loaded matrix plus the index built from it is two copies of the vectors (three while a
growing index reallocates). Here the flat index's own storage is the only full copy, and once
that index is written, IVF / IVF-PQ / HNSW builds read their rows from its file batch by
batch (plain reads, not a memory map), so the resident set is the index being built plus one batch.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import faiss
import numpy as np

from retbench.tasks.stages.embed import EmbeddingSet, LoadReport, read_vectors

class CachedVectors:
    """Row source for retbench.tasks.stages.index.build_faiss_index (the cache's rows are unit vectors
    already: tasks/stages/vectors.py).

    ``fill_rows(out)`` writes all rows into a flat index's storage (the first build); indexing
    (``source[rows]``) reads them back from ``flat_path``, which must exist by then.
    """

    def __init__(self, embedding_set: EmbeddingSet, flat_path: str | Path):
        self.embedding_set = embedding_set
        self.flat_path = Path(flat_path)
        self.shape = (embedding_set.count, embedding_set.dim)
        self.report: LoadReport | None = None
        self.load_seconds = 0.0

    def fill_rows(self, out: np.ndarray) -> None:
        started = time.perf_counter()
        _, _, self.report = read_vectors(self.embedding_set, out=out)
        self.load_seconds += time.perf_counter() - started

    def __getitem__(self, rows) -> np.ndarray:
        if not self.flat_path.exists():
            raise FileNotFoundError(f"{self.flat_path}: the flat index must be built before indexes read rows from it")
        flat = FlatFile(self.flat_path)
        if flat.shape != self.shape:
            raise ValueError(f"{self.flat_path} holds {flat.shape[0]} x {flat.shape[1]} vectors, expected {self.shape[0]} x {self.shape[1]}")
        if isinstance(rows, slice):
            start, stop, step = rows.indices(self.shape[0])
            if step == 1:
                return flat.read_range(start, stop)
            rows = np.arange(start, stop, step)
        return flat.reconstruct_batch(np.asarray(rows))


class FlatFile:
    """Rows of a written flat index, read with pread: no mapping, so nothing stays resident.

    (A memory map is no good here: the kernel maps whole page-cache folios around each
    fault, and gathering a few thousand scattered rows paged in the entire file.)
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        # Mapped, only the header is read (faiss >= 1.11; older ones read the whole index here).
        flat = faiss.read_index(str(self.path), getattr(faiss, "IO_FLAG_MMAP_IFC", 0))
        try:
            n, d = flat.ntotal, flat.d
            if not isinstance(flat, faiss.IndexFlat):
                raise ValueError(f"{self.path} is not a flat index")
            self.shape = (n, d)
            self.row_bytes = d * 4
            # faiss writes the flat index's storage last: its rows end the file.
            self.offset = self.path.stat().st_size - n * self.row_bytes
            with open(self.path, "rb") as handle:
                if n and not (np.array_equal(self._rows(handle.fileno(), [0, n - 1]), np.vstack([flat.reconstruct(0), flat.reconstruct(n - 1)]))):
                    raise ValueError(f"{self.path}: unexpected flat index layout (faiss {faiss.__version__})")
        finally:
            del flat

    def _rows(self, fd: int, rows) -> np.ndarray:
        out = np.empty((len(rows), self.shape[1]), dtype=np.float32)
        view = memoryview(out).cast("B")
        for i, row in enumerate(rows):
            got = os.preadv(fd, [view[i * self.row_bytes:(i + 1) * self.row_bytes]], self.offset + int(row) * self.row_bytes)
            if got != self.row_bytes:
                raise OSError(f"{self.path}: short read at row {row}")
        return out

    def reconstruct_batch(self, rows: np.ndarray) -> np.ndarray:
        """The listed rows (any order, repeats allowed), as faiss's reconstruct_batch."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        if len(rows) and (rows.min() < 0 or rows.max() >= self.shape[0]):
            raise IndexError(f"{self.path}: row out of range 0..{self.shape[0] - 1}")
        unique, inverse = np.unique(rows, return_inverse=True)
        with open(self.path, "rb") as handle:
            return self._rows(handle.fileno(), unique)[inverse]

    def read_range(self, start: int, stop: int) -> np.ndarray:
        out = np.empty((max(stop - start, 0), self.shape[1]), dtype=np.float32)
        with open(self.path, "rb") as handle:
            handle.seek(self.offset + start * self.row_bytes)
            if handle.readinto(memoryview(out).cast("B")) != out.nbytes:
                raise OSError(f"{self.path}: short read of rows {start}..{stop}")
        return out

