"""Index kinds, one small file each (flat, ivf, hnsw, ivfpq, sq, binary), found by name in a
registry; the index stage, retrieval, the sweep, filtered search and the cheaper-variants table
ask a kind what it needs instead of naming kinds. How to add one: docs/extending.md, "An index kind".

Importing this package imports no FAISS: the kind modules load it inside their methods.
"""
from __future__ import annotations

from retbench.tasks.indexes.base import IndexKind, Parameter
from retbench.tasks.registry import Registry


def _builtin() -> dict[str, IndexKind]:
    # Imported on first lookup, so `import retbench.tasks.indexes` stays cheap.
    from retbench.tasks.indexes.builtin import BUILTIN

    return {kind.name: kind for kind in BUILTIN}


_REGISTRY: Registry[IndexKind] = Registry("index", _builtin)
kind_origins = _REGISTRY.origins  # kind -> built-in, an entry point, a spec plug-in (`retbench plugins`)
known_kinds = _REGISTRY.kinds
index_kind = _REGISTRY.get


def register(kind: IndexKind) -> IndexKind:
    """Make `kind` (an IndexKind instance) known under `kind.name`; a name is registered once."""
    _REGISTRY.register(kind.name)(kind)
    return kind


def kind_of_index(index) -> IndexKind:
    """The kind a loaded index belongs to, for a caller that holds only the index (flat when no
    kind claims it)."""
    for name in known_kinds():
        if index_kind(name).owns(index):
            return index_kind(name)
    return index_kind("flat")


__all__ = ["IndexKind", "Parameter", "index_kind", "kind_of_index", "known_kinds", "register"]
