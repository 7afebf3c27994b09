"""Estimated seconds of the index and retrieve stages, from what FAISS computes and this machine's
speed at it, measured now in a fraction of a second.

Both stages are inner products of float32 vectors: flat search scores every query against every
vector (queries x rows x dim multiply-adds); an IVF index trains k-means on its sample (25
iterations of sample x nlist x dim, FAISS's default), assigns every vector to a list (rows x nlist x
dim), and a query then scores the nlist centroids and the nprobe lists it opens (nlist x dim +
nprobe x rows / nlist x dim). The speed is that of a flat search on random vectors of the same
dimension, so it counts this machine's cores, its BLAS and whatever else it is doing now."""
from __future__ import annotations

import time
from dataclasses import dataclass
from functools import lru_cache

# An IVF index trains its coarse quantizer with its own clustering parameters (IndexIVF.cp), not
# faiss.ClusteringParameters()' defaults: 10 iterations (not 25), on at most 256 points per list
# (FAISS samples the rest away). With 25 and every row, NPL's IVF build was estimated at 3.0x.
KMEANS_ITERATIONS = 10  # faiss.IndexIVFFlat(...).cp.niter
MAX_POINTS_PER_CENTROID = 256  # faiss.IndexIVFFlat(...).cp.max_points_per_centroid
CALIBRATION_ROWS, CALIBRATION_QUERIES = 20_000, 256


@lru_cache(maxsize=8)
def multiply_adds_per_second(dim: int) -> float:
    """Float32 multiply-adds per second of a FAISS flat inner-product search of `dim` dimensions."""
    import faiss
    import numpy as np

    rng = np.random.default_rng(0)
    rows = rng.standard_normal((CALIBRATION_ROWS, dim), dtype=np.float32)
    queries = rng.standard_normal((CALIBRATION_QUERIES, dim), dtype=np.float32)
    index = faiss.IndexFlatIP(dim)
    index.add(rows)
    index.search(queries[:8], 10)  # the first call pays for thread start-up
    started = time.perf_counter()
    index.search(queries, 100)
    seconds = max(time.perf_counter() - started, 1e-6)
    return CALIBRATION_ROWS * CALIBRATION_QUERIES * dim / seconds


@dataclass(frozen=True)
class SearchWork:
    """What one provider's indexes hold and are asked: `nlist` 0 when it has no IVF index."""

    rows: int
    dim: int
    queries: int
    nlist: int = 0
    train_rows: int = 0
    nprobes: tuple[int, ...] = ()

    def index_multiply_adds(self) -> float:
        if not self.nlist:
            return 0.0  # a flat index is its vectors, copied in
        trained = min(self.train_rows, MAX_POINTS_PER_CENTROID * self.nlist)
        return KMEANS_ITERATIONS * trained * self.nlist * self.dim + self.rows * self.nlist * self.dim

    def search_multiply_adds(self) -> float:
        flat = self.queries * self.rows * self.dim
        ivf = sum(self.queries * (self.nlist + min(p, self.nlist) * self.rows / self.nlist) * self.dim
                  for p in self.nprobes) if self.nlist else 0.0
        return flat + ivf

    def seconds(self) -> tuple[float, float]:
        """(index, retrieve) seconds at this machine's measured speed."""
        rate = multiply_adds_per_second(self.dim)
        return self.index_multiply_adds() / rate, self.search_multiply_adds() / rate
