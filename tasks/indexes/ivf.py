"""Inverted file (faiss.IndexIVFFlat): k-means lists built from a seeded sample; a query searches
the `nprobe` lists nearest to it."""
from __future__ import annotations

import math

from retbench.tasks.indexes.base import IndexKind, Parameter


def default_nlist(n_vectors: int) -> int:
    # ~4*sqrt(n) lists, but never fewer than 39 training points per centroid
    # (FAISS warns below that and the centroids become noise).
    return max(1, min(int(4 * math.sqrt(n_vectors)), n_vectors // 39))


def powers_of_two_upto(limit: int) -> list[int]:
    values, p = [], 1
    while p < limit:
        values.append(p)
        p *= 2
    return values + [limit]


def probe_grid(values: list[int] | None, nlist: int) -> list[dict]:
    # nprobe beyond nlist searches every list anyway: clip and drop repeats.
    probes = sorted({min(p, nlist) for p in (values or powers_of_two_upto(nlist))})
    return [{"nprobe": p} for p in probes]


class IVFSearch(IndexKind):
    """What the IVF kinds share: the nprobe query parameter and the k-means seed."""

    query_parameter = "nprobe"

    def owns(self, index):
        import faiss

        return isinstance(faiss.downcast_index(index), faiss.IndexIVF)

    def before_training(self, index, params):
        index.cp.seed = params["seed"]

    def training_rows(self, params):
        return params["train_size"]

    def search_parameters(self, index, query_params, selector=None):
        import faiss

        nprobe = query_params.get("nprobe") or faiss.extract_index_ivf(index).nprobe
        return faiss.SearchParametersIVF(sel=selector, nprobe=nprobe) if selector is not None else \
            faiss.SearchParametersIVF(nprobe=nprobe)


class IVF(IVFSearch):
    name = "ivf"
    build_parameters = (Parameter("nlist"), Parameter("train_size", "train"), Parameter("seed", default=0, minimum=None))
    query_grid_default = (1, 4, 16)

    def factory(self, dim, params):
        import faiss

        return faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, params["nlist"], faiss.METRIC_INNER_PRODUCT)

    def bytes_per_vector(self, dim, params):
        return 4.0 * dim + 8  # the vector and its id in its list

    def resolve(self, n_vectors: int, nlist: int | None, train_size: int | None, seed: int) -> dict:
        """Build parameters on `n_vectors` vectors, the defaults derived from it."""
        nlist = nlist or default_nlist(n_vectors)
        if nlist > n_vectors:
            raise ValueError(f"IVF nlist={nlist} is larger than the number of vectors ({n_vectors})")
        train_size = min(n_vectors, train_size or 256 * nlist)
        if train_size < nlist:
            raise ValueError(f"IVF train_size={train_size} is smaller than nlist={nlist}")
        return {"nlist": nlist, "train_size": train_size, "seed": seed}

    def sweep_grid(self, section, n_vectors, dim):
        grid = []
        for nlist in section.nlist or [default_nlist(n_vectors)]:
            for train in section.train_size or [None]:
                params = self.resolve(n_vectors, nlist, train, section.seed)
                grid.append((params, probe_grid(section.nprobe, params["nlist"])))
        return grid
