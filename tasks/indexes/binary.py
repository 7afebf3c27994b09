"""Binary codes (faiss.IndexBinaryFlat of the sign bits, tasks/indexes/binary_codes.py): 32x
smaller than float32, searched by Hamming distance; `rescore` re-scores the best candidates
with the float vectors."""
from __future__ import annotations

import time

from retbench.tasks.indexes.base import ADD_BATCH, IndexKind


class Binary(IndexKind):
    name = "binary"
    query_parameter = "rescore"  # ours: Hamming candidates re-scored with the float vectors; 0: none
    query_grid_default = (0, 100)
    binary = True

    def owns(self, index):
        from retbench.tasks.indexes.binary_codes import BinarySearch

        return isinstance(index, BinarySearch)

    def build(self, vectors, params):
        from retbench.tasks.indexes.binary_codes import build_binary_index

        started = time.perf_counter()
        index = build_binary_index(vectors, ADD_BATCH)
        return index, 0.0, time.perf_counter() - started

    def bytes_per_vector(self, dim, params):
        return -(-dim // 8)

    def search_bytes_per_vector(self, dim, query_params):
        return 4 * dim if query_params.get("rescore") else 0  # re-scoring reads the float vectors

    def set_query_params(self, index, query_params):
        index.rescore = int(query_params.get("rescore") or 0)

    def sweep_grid(self, section, n_vectors, dim):
        return [({}, [{"rescore": r} for r in section.rescore])]
