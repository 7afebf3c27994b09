"""IVF with product-quantised codes (faiss.IndexIVFPQ): m sub-quantizers of nbits each, so a
vector costs m * nbits / 8 bytes; searched like IVF with nprobe."""
from __future__ import annotations

import math

from retbench.tasks.indexes.base import Parameter
from retbench.tasks.indexes.ivf import IVFSearch, default_nlist, probe_grid


def default_pq_m(dim: int) -> int:
    """The divisor of dim closest to dim/8 (the larger on a tie), at most 64."""
    divisors = [m for m in range(1, min(dim, 64) + 1) if dim % m == 0]
    return min(divisors, key=lambda m: (abs(m - dim / 8), -m))


def default_pq_nbits(n_vectors: int) -> int:
    # k-means wants >= 39 points per centroid: 2^nbits centroids per sub-quantizer.
    return int(min(8, max(4, math.floor(math.log2(max(n_vectors, 2) / 39)))))


class IVFPQ(IVFSearch):
    name = "ivfpq"
    build_parameters = (Parameter("nlist"), Parameter("m", required=True), Parameter("nbits"),
                        Parameter("train_size", "train"), Parameter("seed", default=0, minimum=None))
    query_grid_default = (1, 4, 16)

    def plan(self, entry, n_vectors):
        """An `indexes.ivfpq` entry: nlist, nbits and the sample derived from the number of
        vectors as the sweep derives them (m must be given: the dimension is not known yet)."""
        params, queries, notes = super().plan(entry, n_vectors)
        nlist = params.get("nlist") or default_nlist(n_vectors)
        nbits = params.get("nbits") or default_pq_nbits(n_vectors)
        train = min(n_vectors, params.get("train_size") or max(256 * nlist, 39 * 2 ** nbits))
        return {**params, "nlist": nlist, "nbits": nbits, "train_size": train}, queries, notes

    def factory(self, dim, params):
        import faiss

        if dim % params["m"]:
            raise ValueError(f"IVF-PQ m={params['m']} must divide the dimension {dim}")
        return faiss.IndexIVFPQ(faiss.IndexFlatIP(dim), dim, params["nlist"], params["m"], params["nbits"],
                                faiss.METRIC_INNER_PRODUCT)

    def bytes_per_vector(self, dim, params):
        return params["m"] * params["nbits"] / 8 + 8  # the code and its id in its list

    def sweep_grid(self, pq, n_vectors, dim):
        all_defaults = pq.nlist is pq.m is pq.nbits is pq.train_size is None
        if all_defaults and n_vectors < 39 * 16:
            return []  # too few vectors to train even 4-bit codes; asked for explicitly, it is an error below
        grid = []
        for nlist in pq.nlist or [default_nlist(n_vectors)]:
            for m in pq.m or [default_pq_m(dim)]:
                if dim % m:
                    raise ValueError(f"sweep.ivfpq.m={m} must divide the vector dimension {dim}")
                for nbits in pq.nbits or [default_pq_nbits(n_vectors)]:
                    for train in pq.train_size or [None]:
                        train = min(n_vectors, train or max(256 * nlist, 39 * 2 ** nbits))
                        if nlist > n_vectors or train < max(nlist, 2 ** nbits):
                            raise ValueError(f"sweep.ivfpq: nlist={nlist}, nbits={nbits} need at least "
                                             f"{max(nlist, 2 ** nbits)} training vectors (have {train} of {n_vectors})")
                        grid.append(({"nlist": nlist, "m": m, "nbits": nbits, "train_size": train, "seed": pq.seed},
                                     probe_grid(pq.nprobe, nlist)))
        return grid
