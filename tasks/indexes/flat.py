"""Exact search: every vector compared with the query (faiss.IndexFlatIP), the reference every
other kind is measured against."""
from __future__ import annotations

import time

from retbench.tasks.indexes.base import ADD_BATCH, IndexKind


class Flat(IndexKind):
    name = "flat"

    def factory(self, dim, params):
        import faiss

        return faiss.IndexFlatIP(dim)

    def build(self, vectors, params):
        started = time.perf_counter()
        index = self.factory(vectors.shape[1], params)
        fill_flat(index, vectors)
        return index, 0.0, time.perf_counter() - started


def fill_flat(index, vectors) -> None:
    """Size the storage once and write the rows into it: adding batch by batch would regrow it
    by doubling, holding the old and the new buffer at once."""
    import faiss
    import numpy as np

    n, dim = vectors.shape
    index.codes.resize(n * dim * 4)
    index.ntotal = n
    storage = faiss.rev_swig_ptr(index.codes.data(), n * dim * 4).view(np.float32).reshape(n, dim)
    if hasattr(vectors, "fill_rows"):
        vectors.fill_rows(storage)
        return
    for start in range(0, n, ADD_BATCH):
        storage[start:start + ADD_BATCH] = vectors[start:start + ADD_BATCH]
