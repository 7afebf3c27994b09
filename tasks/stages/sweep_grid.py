"""ANN sweep, the grid: the indexes to build and the query parameters to try on each, from the
`sweep:` spec and what each index kind declares (tasks/indexes); flat first, the reference.

Build-time parameters (IVF nlist and training sample, HNSW M and efConstruction, IVF-PQ nlist,
m, nbits, SQ type) each get one persisted index; query-time parameters (nprobe, efSearch, the
binary index's float re-scoring depth) are swept on the loaded index without rebuilding.
"""
from __future__ import annotations

from retbench.tasks.config.sweep import SweepSpec
from retbench.tasks.indexes import index_kind
from retbench.tasks.indexes.ivfpq import default_pq_m, default_pq_nbits  # noqa: F401  (re-exported)
from retbench.tasks.stages.index import IndexSettings


def resolve_grid(spec: SweepSpec, n_vectors: int, dim: int) -> list[tuple[IndexSettings, list[dict]]]:
    """(build settings, query-parameter dicts) per index to build, flat first, then each kind
    the spec names in its order; a setting asked twice is built once."""
    grid: list[tuple[IndexSettings, list[dict]]] = [(IndexSettings("flat"), [{}])]
    for kind, section in spec.index_sections():
        for params, queries in index_kind(kind).sweep_grid(section, n_vectors, dim):
            grid.append((IndexSettings(kind, **params), queries))
    unique: dict[IndexSettings, list[dict]] = {}
    for settings, queries in grid:
        unique.setdefault(settings, queries)
    return list(unique.items())
