"""The index stage under `indexes.shards`: flat and IVF are searched by Dask workers that each read
one row range from the embedding cache (tasks/stages/sharded_search.py), so no process builds the
index over every row. What is written is a small file standing for the index:

- flat: an empty flat index of the set's dimension (the rows stay in the cache);
- IVF: the index trained on the sample the one-process build trains on (the same seeded rows,
  read alone from the cache), with empty lists: each worker fills a copy with its rows.

Named `<file>.sharded.faiss` beside where the full file would be, so the one-process search never
mistakes it for an index of the vectors; its `size_bytes` is what the shards hold (below).
"""
from __future__ import annotations

import time
from pathlib import Path

import faiss

from retbench.tasks.stages.embed import EmbeddingSet, read_vector_rows
from retbench.tasks.stages.index import BuiltIndex, IndexSettings, check_dimension, index_path
from retbench.tasks.stages.sharded_search import SHARDABLE
from retbench.tasks.store.build import build_once

SUFFIX = ".sharded.faiss"


def sharded_path(store: Path, embedding_set: EmbeddingSet, settings: IndexSettings) -> Path:
    full = index_path(store, embedding_set, settings)
    return full.with_name(full.name.removesuffix(".faiss") + SUFFIX)


class SampleRows:
    """An embedding set as IndexKind.trained reads it: `shape`, and its rows at a row array."""

    def __init__(self, embedding_set: EmbeddingSet):
        self.embedding_set, self.shape = embedding_set, (embedding_set.count, embedding_set.dim)

    def __getitem__(self, rows):
        return read_vector_rows(self.embedding_set, rows)


def build_sharded_index(embedding_set: EmbeddingSet, settings: IndexSettings, store: Path, shards: int,
                        force: bool = False) -> BuiltIndex:
    """The small file standing for a flat or IVF index searched over `shards` workers, built
    unless it is in the store; only an IVF's training sample is ever read."""
    if settings.kind not in SHARDABLE:
        raise ValueError(f"{settings.kind} indexes are not built in shards (only {', '.join(SHARDABLE)})")
    path = sharded_path(store, embedding_set, settings)

    def build(tmp: str) -> dict:
        started = time.perf_counter()
        index = settings.index_kind.trained(SampleRows(embedding_set), dict(settings.params))
        seconds = time.perf_counter() - started
        faiss.write_index(index, tmp)
        return {"build_seconds": seconds, "train_seconds": seconds, "vectors": embedding_set.count,
                "dim": embedding_set.dim, "settings": settings.to_dict(), "faiss": faiss.__version__, "sharded": True}

    built = build_once(store, path, build, parse=lambda p: faiss.read_index(str(p)), force=force)
    if not built.computed:
        check_dimension(path, embedding_set.dim)
    return BuiltIndex(
        path=str(path), key=f"{embedding_set.key[:32]}/{path.name}", computed=built.computed, seconds=built.seconds,
        provider=embedding_set.provider, settings=settings, vectors=embedding_set.count, dim=embedding_set.dim,
        size_bytes=sharded_bytes(settings, path.stat().st_size, embedding_set.count, embedding_set.dim, shards),
        build_seconds=built.metadata.get("build_seconds"), train_seconds=built.metadata.get("train_seconds"),
        shards=shards,
    )


def sharded_bytes(settings: IndexSettings, file_bytes: int, vectors: int, dim: int, shards: int) -> int:
    """What the shards of an index hold, as their files would be written: flat, every shard a
    flat file (the empty file's header, then its rows x dim x 4); IVF, the one-process IVF file's
    size: the trained file (quantizer, empty lists) plus each vector and its 8-byte id in its list
    and, as FAISS writes lists that are mostly non-empty, every list's 8-byte length."""
    if settings.kind == "flat":
        return shards * file_bytes + vectors * dim * 4
    return file_bytes + settings.nlist * 8 + vectors * (dim * 4 + 8)
