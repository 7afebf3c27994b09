"""HNSW graph (faiss.IndexHNSWFlat): M links per vector, built with efConstruction candidates;
a query explores efSearch candidates."""
from __future__ import annotations

from retbench.tasks.indexes.base import IndexKind, Parameter


class HNSW(IndexKind):
    name = "hnsw"
    # Defaults (the sweep's) for an `indexes.hnsw` entry that leaves them out.
    build_parameters = (Parameter("M", default=32), Parameter("ef_construction", "efc", default=40))
    query_parameter = "ef_search"  # FAISS names it efSearch
    query_grid_default = (16, 32, 64, 128, 256)

    def owns(self, index):
        import faiss

        return isinstance(faiss.downcast_index(index), faiss.IndexHNSW)

    def factory(self, dim, params):
        import faiss

        index = faiss.IndexHNSWFlat(dim, params["M"], faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = params["ef_construction"]
        return index

    def bytes_per_vector(self, dim, params):
        return 4.0 * dim + 2 * 4 * params["M"]  # the vector, and about 2M links of 4 bytes at level 0

    def set_query_params(self, index, query_params):
        super().set_query_params(index, {_faiss_name(k): v for k, v in query_params.items()})

    def search_parameters(self, index, query_params, selector=None):
        import faiss

        ef = query_params.get("ef_search") or query_params.get("efSearch") or faiss.downcast_index(index).hnsw.efSearch
        return faiss.SearchParametersHNSW(sel=selector, efSearch=ef) if selector is not None else \
            faiss.SearchParametersHNSW(efSearch=ef)

    def sweep_grid(self, section, n_vectors, dim):
        return [({"M": M, "ef_construction": efc}, [{"ef_search": e} for e in section.ef_search])
                for M in section.M for efc in section.ef_construction]


def _faiss_name(name: str) -> str:
    return {"ef_search": "efSearch"}.get(name, name)
