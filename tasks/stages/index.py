"""FAISS indexes over one embedding set: exact (flat), approximate (IVF, HNSW, IVF-PQ) and
compressed (scalar quantisation fp16/8-bit, binary sign codes searched by Hamming distance), or
any other kind registered in tasks/indexes, which says how each is built and named.

One settings type for every kind; its file name is its key: files are named by their
build-time parameters under a folder named by the embedding set,
`indexes/<set key>/ivf_nlist-32_train-8192_seed-0.faiss`, so a look at the folder tells what
was built, and the flow and the ANN sweep share every file. Query-time parameters (nprobe,
efSearch) never name a file.

Each file is made by `retbench.tasks.store.build.build_once` (lock, checksum sidecar, quarantine of a
damaged file) with a `<file>.json` holding its build and train seconds, so a reused index
still reports how long it took to make. Vectors come from the cache already L2-normalised
(tasks/stages/vectors.py), so inner product is cosine and nothing is normalised here.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import faiss
import numpy as np

from retbench.tasks.indexes import index_kind
from retbench.tasks.indexes.binary_codes import BinarySearch, padded_bits
from retbench.tasks.indexes.ivf import default_nlist  # noqa: F401  (re-exported: tests and benchmarks import it from here)
from retbench.tasks.stages.embed import EmbeddingSet, load_vectors
from retbench.tasks.store.build import StageResult, build_once
from retbench.tasks.store.integrity import faiss_dimension

_BINARY_FOURCC = b"IBxF"  # faiss.write_index_binary's tag for IndexBinaryFlat


class IndexSettings:
    """Build-time parameters of one index of a registered kind (tasks/indexes); the file name
    is derived from them alone. `IndexSettings("ivf", nlist=32, train_size=8192)`: the kind's
    parameters not given take their declared defaults, and read as attributes (`settings.nlist`)."""

    __slots__ = ("kind", "params")

    def __init__(self, kind: str, **params: Any):
        index_kind_ = index_kind(kind)
        complete = index_kind_.complete(params)
        index_kind_.validate(complete)
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "params", tuple(complete.items()))

    def __setattr__(self, name, value):
        raise AttributeError("IndexSettings is frozen")

    def __getattr__(self, name: str):
        for key, value in object.__getattribute__(self, "params"):
            if key == name:
                return value
        raise AttributeError(f"{self.kind} index settings have no parameter {name!r}")

    def __eq__(self, other) -> bool:
        return isinstance(other, IndexSettings) and (self.kind, self.params) == (other.kind, other.params)

    def __hash__(self) -> int:
        return hash((self.kind, self.params))

    def __repr__(self) -> str:
        return f"IndexSettings({self.kind!r}" + "".join(f", {k}={v!r}" for k, v in self.params) + ")"

    def __reduce__(self):  # pickled to Dask workers
        return (_settings, (self.kind, dict(self.params)))

    @property
    def index_kind(self):
        return index_kind(self.kind)

    @property
    def file_name(self) -> str:
        return self.index_kind.file_name(dict(self.params))

    def build_params(self) -> dict[str, Any]:
        """The parameters that matter for this kind, in a fixed order (the sweep table's `build_params`)."""
        return self.index_kind.build_params(dict(self.params))

    def to_dict(self) -> dict[str, Any]:
        """The kind and every build parameter (the index's metadata and the manifest)."""
        return {"kind": self.kind, **dict(self.params)}

    @property
    def is_binary(self) -> bool:
        return self.index_kind.binary


def _settings(kind: str, params: dict) -> IndexSettings:
    return IndexSettings(kind, **params)


@dataclass(frozen=True, kw_only=True)
class BuiltIndex(StageResult):
    """An index file in the store (`key` is the embedding set's key plus the file name)."""

    provider: str
    settings: IndexSettings
    vectors: int
    dim: int
    size_bytes: int
    build_seconds: float | None  # train + add; None for a file built before metadata existed
    train_seconds: float | None
    # Searched over this many workers (`indexes.shards`): `path` is then the small file standing for
    # the index (tasks/stages/sharded_index.py) and `size_bytes` what the shards hold. None: one file.
    shards: int | None = None


def resolve_ivf(n_vectors: int, nlist: int | None, train_size: int | None, seed: int) -> IndexSettings:
    return IndexSettings("ivf", **index_kind("ivf").resolve(n_vectors, nlist, train_size, seed))


def index_path(store: Path, embedding_set: EmbeddingSet, settings: IndexSettings) -> Path:
    return Path(store) / "indexes" / embedding_set.key[:32] / settings.file_name


def build_index(
    embedding_set: EmbeddingSet,
    settings: IndexSettings,
    store: Path,
    force: bool = False,
    vectors: Callable[[], np.ndarray] | None = None,
) -> BuiltIndex:
    """The index file for these vectors and settings, built unless it is in the store.
    `vectors` supplies the matrix (called only when building); default: read the set."""
    path = index_path(store, embedding_set, settings)
    read = vectors or (lambda: load_vectors(embedding_set)[1])

    write, read_back = (faiss.write_index_binary, faiss.read_index_binary) if settings.is_binary else (faiss.write_index, faiss.read_index)

    def build(tmp: str) -> dict:
        index, train_seconds, build_seconds = build_faiss_index(read(), settings)
        write(index, tmp)
        return {"build_seconds": build_seconds, "train_seconds": train_seconds, "vectors": embedding_set.count,
                "dim": embedding_set.dim, "settings": settings.to_dict(), "faiss": faiss.__version__}

    built = build_once(store, path, build, parse=lambda p: read_back(str(p)), force=force)
    if not built.computed:
        check_dimension(path, padded_bits(embedding_set.dim) if settings.is_binary else embedding_set.dim)
    return BuiltIndex(
        path=str(path), key=f"{embedding_set.key[:32]}/{settings.file_name}", computed=built.computed,
        seconds=built.seconds, provider=embedding_set.provider, settings=settings, vectors=embedding_set.count,
        dim=embedding_set.dim, size_bytes=path.stat().st_size,
        build_seconds=built.metadata.get("build_seconds"), train_seconds=built.metadata.get("train_seconds"),
    )


def build_faiss_index(vectors: np.ndarray, settings: IndexSettings) -> tuple[faiss.Index, float, float]:
    """(index, train seconds, build seconds = train + add) over unit vectors, inner product
    (binary: a faiss.IndexBinaryFlat of their sign bits), as the settings' kind builds it.

    `vectors` is a matrix, or a row source with `shape` and row indexing whose `fill_rows(out)`, when
    it has one, writes every row into the flat index's storage (tasks/stages/build_vectors.py).
    """
    return settings.index_kind.build(vectors, dict(settings.params))


def check_dimension(path: Path, expected_dim: int) -> None:
    """An intact index of another dimension was not built from this set: refuse it with the fix."""
    dim = faiss_dimension(path)
    if dim != expected_dim:
        raise ValueError(
            f"index {path} has dimension {dim}, but its embedding set has dimension {expected_dim}: "
            f"it was not built from these vectors (copied from another store?); delete it (and {path}.sha256) "
            "and rerun to rebuild it"
        )


def is_binary_file(path: str | Path) -> bool:
    with open(path, "rb") as handle:
        return handle.read(4) == _BINARY_FOURCC


def load_index(path: str | Path, expected_dim: int | None = None) -> faiss.Index | BinarySearch:
    """A float index, or a binary one wrapped to take float queries (attach the float
    vectors as `.vectors` before searching with `rescore`)."""
    if is_binary_file(path):
        index, expected = BinarySearch(faiss.read_index_binary(str(path))), expected_dim and padded_bits(expected_dim)
    else:
        index, expected = faiss.read_index(str(path)), expected_dim
    if expected_dim is not None and index.d != expected:
        raise ValueError(f"index {path} has dimension {index.d}, but the vectors have {expected_dim}; delete it to rebuild")
    return index


def set_query_params(index: faiss.Index | BinarySearch, params: dict[str, int], kind: str | None = None) -> None:
    """Query-time parameters on a loaded index, as its kind sets them. Without a kind (a caller
    holding only the loaded index): a binary index's rescore, or FAISS's ParameterSpace names."""
    if kind is not None:
        index_kind(kind).set_query_params(index, params)
        return
    if isinstance(index, BinarySearch):
        index.rescore = int(params.get("rescore") or 0)
        return
    for name, value in params.items():
        faiss.ParameterSpace().set_index_parameter(index, {"ef_search": "efSearch"}.get(name, name), value)


@dataclass(frozen=True)
class IndexPlan:
    """The indexes a run builds for `n_vectors` chunks, the nprobe values it searches the IVF
    index with, the query-parameter dicts of every other kind, and what the plan had to change
    or say about the spec (logged, and kept in the manifest)."""

    settings: tuple[IndexSettings, ...]
    nprobe: tuple[int, ...]
    notes: tuple[str, ...]
    other_queries: tuple[tuple[IndexSettings, tuple[dict, ...]], ...] = ()
    # Of the notes, those that only restate what the spec chose (IVF off): logged at INFO, the
    # others (a setting changed or skipped) at WARNING.
    chosen: tuple[str, ...] = ()

    def query_grid(self, settings: IndexSettings) -> tuple[dict, ...]:
        """The query-parameter dicts one index is searched with (flat: one search, no parameters)."""
        if settings.kind == "ivf":
            return tuple({"nprobe": p} for p in self.nprobe)
        return dict(self.other_queries).get(settings, ({},))


IVF_OFF = "ivf: off (the spec's indexes: sets ivf: null, or names flat without ivf)"


def plan_indexes(flat: bool, ivf, n_vectors: int, others: dict[str, dict] | None = None) -> IndexPlan:
    """Flat always (the reference); IVF unless `ivf` is None or cannot be built on this many
    vectors, in which case it is skipped with the reason rather than failing after the
    embeddings are paid for. `others`: kind -> its `indexes:` entry, for any other registered
    kind (its build parameters and query-parameter list)."""
    settings, notes = [IndexSettings("flat")], []
    extra = _plan_others(others or {}, n_vectors)
    if ivf is None:
        off = IVF_OFF
        return IndexPlan(tuple(settings) + tuple(s for s, _ in extra), (), (off,), extra, chosen=(off,))
    try:
        resolved = resolve_ivf(n_vectors, ivf.nlist, ivf.train_size, ivf.seed)
    except ValueError as error:
        notes.append(f"ivf skipped: {error}; set indexes.ivf.nlist to at most {n_vectors} (or null for the default)")
        return IndexPlan(tuple(settings) + tuple(s for s, _ in extra), (), tuple(notes), extra)
    if resolved.nlist == 1:
        notes.append(f"ivf: nlist=1 on {n_vectors} vectors (fewer than 78), so every query probes the one list and "
                     "the 'approximate' index returns exactly what flat search returns")
    probes = sorted({min(p, resolved.nlist) for p in ivf.nprobe})
    clipped = sorted(p for p in ivf.nprobe if p > resolved.nlist)
    if clipped:
        notes.append(f"ivf: nprobe {clipped} exceed nlist={resolved.nlist} and search every list, as nprobe="
                     f"{resolved.nlist} does; searched once as nprobe={resolved.nlist}")
    settings.append(resolved)
    return IndexPlan(tuple(settings) + tuple(s for s, _ in extra), tuple(probes), tuple(notes), extra)


def _plan_others(others: dict[str, dict], n_vectors: int) -> tuple[tuple[IndexSettings, tuple[dict, ...]], ...]:
    planned = []
    for kind, entry in others.items():
        params, queries, _ = index_kind(kind).plan(dict(entry), n_vectors)
        planned.append((IndexSettings(kind, **params), tuple(queries)))
    return tuple(planned)
