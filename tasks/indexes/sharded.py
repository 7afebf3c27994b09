"""Exact flat and IVF search over row shards of one index: every shard answers its top-k in one
canonical order (score descending, then row id descending), and the merge of those lists is the
list one index over all the rows gives in that order, ties included.

Why a canonical order: which of several rows tied at the k-th score FAISS keeps depends on its
heaps and on how many threads split the scan, so "the order one index gives" is only defined once
ties are settled by the row id. Why the bounds are aligned to 1024 rows: FAISS computes a flat
index's scores with BLAS in blocks of 1024 database rows, and the float results depend on the
block; shards cut on block edges make exactly the same BLAS calls as the whole index (measured:
unaligned shards differ in the last bit for ~1% of scores). The float results also depend on the
query batch and on the number of BLAS threads, so a shard searches the whole batch again (never a
subset) and with the caller's thread count. IVF shards share one trained quantizer and the
caller assigns the queries to lists once, so every shard probes the lists one index would.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

BLOCK_ROWS = 1024  # faiss.cvar.distance_compute_blas_database_bs: a flat search's BLAS block of database rows
PAD_SCORE = np.float32(-np.finfo(np.float32).max)  # what FAISS returns with id -1 past the last hit (inner product)

Search = Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]


def shard_bounds(n_rows: int, shards: int, block: int = BLOCK_ROWS) -> list[tuple[int, int]]:
    """`shards` row ranges (start, stop) covering 0..n_rows, cut on multiples of `block` and as
    even as whole blocks allow; a shard may be empty when there are fewer blocks than shards."""
    if shards < 1:
        raise ValueError(f"shards must be >= 1 (got {shards})")
    blocks = -(-n_rows // block)
    edges = [min(n_rows, (i * blocks // shards) * block) for i in range(shards)] + [n_rows]
    return list(zip(edges[:-1], edges[1:]))


def canonical_order(scores: np.ndarray, ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's first `k` hits by score descending, then id descending (FAISS's own order of
    tied hits within one result), padded with (PAD_SCORE, -1) up to `k`; padding sorts last."""
    scores = np.where(ids < 0, PAD_SCORE, scores).astype(np.float32, copy=False)
    order = np.lexsort((-ids, -scores), axis=-1)[:, :k]
    scores, ids = np.take_along_axis(scores, order, axis=1), np.take_along_axis(ids, order, axis=1)
    missing = k - scores.shape[1]
    if missing > 0:
        scores = np.hstack([scores, np.full((len(scores), missing), PAD_SCORE, dtype=np.float32)])
        ids = np.hstack([ids, np.full((len(ids), missing), -1, dtype=np.int64)])
    return scores, ids


def canonical_search(search: Search, queries: np.ndarray, k: int, ntotal: int) -> tuple[np.ndarray, np.ndarray]:
    """`search(queries, depth)` (a FAISS search) made tie-exact: the top `k` of every row under
    canonical_order, whichever tied rows FAISS's heaps kept.

    Asks for one hit more than `k`; a query whose k-th score equals its last returned score may
    have tied rows FAISS left out, so the depth doubles until the last score is lower (every row
    scoring as high as the k-th is then returned), the hits run out (-1) or every row is returned.
    The whole batch is searched again, not the open queries alone: FAISS's floats depend on it.
    """
    if len(queries) == 0 or k < 1 or ntotal < 1:
        return canonical_order(np.empty((len(queries), 0), np.float32), np.empty((len(queries), 0), np.int64), k)
    want = min(k, ntotal)
    depth = min(want + 1, ntotal)
    while True:
        scores, ids = search(queries, depth)
        if depth >= ntotal:
            break
        tied = (ids[:, depth - 1] >= 0) & (scores[:, want - 1] <= scores[:, depth - 1])
        if not tied.any():
            break
        depth = min(depth * 2, ntotal)
    return canonical_order(scores, ids.astype(np.int64, copy=False), k)


def merge_top_k(parts: list[tuple[np.ndarray, np.ndarray]], k: int) -> tuple[np.ndarray, np.ndarray]:
    """The top `k` of shard results (each (scores, global ids), canonical and tie-exact) in
    canonical order: what one index over all the shards' rows returns."""
    if not parts:
        raise ValueError("no shard results to merge")
    return canonical_order(np.hstack([p[0] for p in parts]), np.hstack([p[1] for p in parts]), k)


def coarse_assignment(ivf, queries: np.ndarray, nprobe: int | None) -> tuple[np.ndarray, np.ndarray]:
    """(centroid scores, list numbers) of the `nprobe` lists (None: the index's own nprobe) each
    query probes, computed once for every shard (a shard computing its own could pick another list
    on a near tie of centroids)."""
    import faiss

    ivf = faiss.extract_index_ivf(ivf)
    return faiss.downcast_index(ivf.quantizer).search(queries, nprobe or ivf.nprobe)


def raw_search(index, queries: np.ndarray, depth: int, assignment=None) -> tuple[np.ndarray, np.ndarray]:
    """One FAISS search: a flat index's, or an IVF index's over the lists `assignment` names."""
    import faiss

    if assignment is None:
        return index.search(queries, depth)
    centroid_scores, lists = assignment
    ivf = faiss.extract_index_ivf(index)
    ivf.nprobe = lists.shape[1]  # FAISS's wrapper checks the assignment's width against it
    return ivf.search_preassigned(queries, depth, lists, centroid_scores)


def empty_ivf_like(ivf):
    """A trained IVF index without vectors: the shared quantizer (copied) and empty lists, for a
    shard to add its own rows to. `ivf` may be a memory-mapped index (its lists are not read)."""
    import faiss

    ivf = faiss.extract_index_ivf(ivf)
    quantizer = faiss.downcast_index(ivf.quantizer)
    centroids = quantizer.reconstruct_n(0, quantizer.ntotal)
    copy = faiss.IndexFlat(ivf.d, ivf.metric_type)
    copy.add(centroids)
    empty = faiss.IndexIVFFlat(copy, ivf.d, ivf.nlist, ivf.metric_type)
    empty.own_fields = True
    copy.this.disown()
    empty.nprobe = ivf.nprobe
    return empty


@dataclass
class ExactSearch:
    """A flat or IVF index searched in canonical order (`search`, `ntotal`, `d` as a FAISS index
    for tasks/stages/maxp.py): one process, or shards (`search_shards(queries, k, assignment)`
    returning each shard's canonical top-k with global ids). `ivf` (IVF only) holds the trained
    quantizer the queries are assigned with; `nprobe` the lists each query probes."""

    ntotal: int
    d: int
    index: object = None  # the whole index, searched in this process
    search_shards: Callable | None = None
    ivf: object = None
    nprobe: int | None = None

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        assignment = coarse_assignment(self.ivf, queries, self.nprobe) if self.ivf is not None else None
        if self.search_shards is not None:
            return merge_top_k(self.search_shards(queries, k, assignment), k)
        return canonical_search(lambda q, depth: raw_search(self.index, q, depth, assignment), queries, k, self.ntotal)


class Shard:
    """Rows start..start+ntotal of an index, as a worker holds them: a flat index of the rows
    (ids local, offset here) or an IVF index whose ids are the global row numbers."""

    def __init__(self, index, start: int, ivf: bool):
        self.index, self.start, self.ivf = index, start, ivf

    @property
    def ntotal(self) -> int:
        return self.index.ntotal

    def search(self, queries: np.ndarray, k: int, assignment=None, threads: int | None = None):
        """This shard's canonical top-k with global ids; `threads`: the BLAS/OpenMP threads the
        caller's one-index search would use (the floats depend on it)."""
        import faiss

        if threads:
            faiss.omp_set_num_threads(threads)
        scores, ids = canonical_search(lambda q, depth: raw_search(self.index, q, depth, assignment), queries, k,
                                       self.ntotal)
        if not self.ivf:
            ids = np.where(ids >= 0, ids + self.start, -1)
        return scores, ids


def build_shard(source, start: int, stop: int, ivf_template=None) -> Shard:
    """The shard of rows start..stop of `source` (a row source: `shape` (rows, dim), `read(a, b,
    out=None)` -> rows a..b, written into `out` when given, and `batch_rows`, the rows an IVF
    shard adds at a time, None for all at once). Flat: the rows are read straight into the
    index's storage, so the shard is held once. `ivf_template`: a trained empty IVF index
    (empty_ivf_like), or its faiss.serialize_index bytes."""
    import faiss

    dim = source.shape[1]
    if ivf_template is None:
        index = faiss.IndexFlatIP(dim)
        n = stop - start
        index.codes.resize(n * dim * 4)
        index.ntotal = n
        if n:
            source.read(start, stop, out=faiss.rev_swig_ptr(index.codes.data(), n * dim * 4).view(np.float32).reshape(n, dim))
        return Shard(index, start, ivf=False)
    index = faiss.deserialize_index(ivf_template) if isinstance(ivf_template, np.ndarray) else faiss.clone_index(ivf_template)
    batch = source.batch_rows or max(stop - start, 1)
    for a in range(start, stop, batch):
        b = min(stop, a + batch)
        index.add_with_ids(np.ascontiguousarray(source.read(a, b), dtype=np.float32), np.arange(a, b, dtype=np.int64))
    return Shard(index, start, ivf=True)


class NpyRows:
    """Rows of a float32 .npy matrix read with plain reads (no memory map, whose touched pages
    would count in the reader's resident set): the benchmark's and the tests' row source."""

    batch_rows = 65_536

    def __init__(self, path):
        from pathlib import Path

        self.path = str(Path(path))
        with open(self.path, "rb") as handle:
            version = np.lib.format.read_magic(handle)
            header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, fortran, dtype = header(handle)
            self.offset = handle.tell()
        if fortran or dtype != np.float32 or len(shape) != 2:
            raise ValueError(f"{self.path}: expected a C-order float32 matrix (got {dtype} {shape})")
        self.shape = shape

    def read(self, start: int, stop: int, out: np.ndarray | None = None) -> np.ndarray:
        out = np.empty((stop - start, self.shape[1]), np.float32) if out is None else out
        with open(self.path, "rb") as handle:
            handle.seek(self.offset + start * self.shape[1] * 4)
            if handle.readinto(memoryview(out).cast("B")) != out.nbytes:
                raise OSError(f"{self.path}: short read of rows {start}..{stop}")
        return out
