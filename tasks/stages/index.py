"""FAISS indexes over one embedding set: exact (IndexFlatIP) and IVF (IndexIVFFlat).

Files are named by their parameters under a folder named by the embedding set,
`indexes/<set key>/ivf_nlist-32_train-8192_seed-0.faiss`, so a look at the folder
tells what was built, and an index is rebuilt only when its inputs change.
Build-time parameters (nlist, training sample) name the file; the query-time
parameter (nprobe) does not.

Each file has a `<file>.sha256` sidecar and is built under an flock on `.<file>.lock`, so two
runs build it once; a damaged file is quarantined and rebuilt, and a file of the wrong
dimension (copied in by hand) is refused with the fix.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import faiss
import numpy as np

from tasks.stages.embed import EmbeddingSet, load_vectors
from tasks.store.integrity import faiss_dimension, file_lock, lock_for, record_checksum, verify
from tasks.store.files import atomic_write


@dataclass(frozen=True)
class IndexSettings:
    kind: str  # "flat" | "ivf"
    nlist: int | None = None
    train_size: int | None = None
    seed: int = 0

    @property
    def file_name(self) -> str:
        if self.kind == "flat":
            return "flat.faiss"
        return f"ivf_nlist-{self.nlist}_train-{self.train_size}_seed-{self.seed}.faiss"


@dataclass(frozen=True)
class BuiltIndex:
    provider: str
    settings: IndexSettings
    path: str
    vectors: int
    dim: int
    built: bool
    seconds: float
    size_bytes: int


def default_nlist(n_vectors: int) -> int:
    # ~4*sqrt(n) lists, but never fewer than 39 training points per centroid
    # (FAISS warns below that and the centroids become noise).
    return max(1, min(int(4 * math.sqrt(n_vectors)), n_vectors // 39))


def resolve_ivf(n_vectors: int, nlist: int | None, train_size: int | None, seed: int) -> IndexSettings:
    nlist = nlist or default_nlist(n_vectors)
    if nlist > n_vectors:
        raise ValueError(f"IVF nlist={nlist} is larger than the number of vectors ({n_vectors})")
    train_size = min(n_vectors, train_size or 256 * nlist)
    if train_size < nlist:
        raise ValueError(f"IVF train_size={train_size} is smaller than nlist={nlist}")
    return IndexSettings("ivf", nlist=nlist, train_size=train_size, seed=seed)


def index_path(store: Path, embedding_set: EmbeddingSet, settings: IndexSettings) -> Path:
    return Path(store) / "indexes" / embedding_set.set_key[:32] / settings.file_name


def build_index(embedding_set: EmbeddingSet, settings: IndexSettings, store: Path, force: bool = False) -> BuiltIndex:
    path = index_path(store, embedding_set, settings)
    started = time.perf_counter()
    with file_lock(lock_for(path)):
        built = force or not intact_index(path, store, embedding_set.dim)
        if built:
            _, vectors = load_vectors(embedding_set)
            index, _, _ = build_faiss_index(vectors, settings)
            atomic_write(path, lambda tmp: faiss.write_index(index, tmp))
            record_checksum(path)
    return BuiltIndex(
        provider=embedding_set.provider,
        settings=settings,
        path=str(path),
        vectors=embedding_set.count,
        dim=embedding_set.dim,
        built=built,
        seconds=time.perf_counter() - started,
        size_bytes=path.stat().st_size,
    )


_ADD_BATCH = 65_536  # rows normalised and added at a time: no full-size normalised copy


def build_faiss_index(vectors: np.ndarray, settings) -> tuple[faiss.Index, float, float]:
    """(index, train seconds, build seconds = train + add) over L2-normalised vectors, inner product.

    One builder for every kind (IndexSettings here, AnnSettings for the sweep), so an IVF
    file is identical whichever stage builds it. `vectors` is a raw matrix, or a row source
    with `shape`, row indexing and `normalised = True` (tasks.stages.build_vectors), whose
    `fill_normalised(out)`, when it has one, writes every normalised row into the flat index's storage.
    """
    n, dim = vectors.shape
    started = time.perf_counter()
    if settings.kind == "flat":
        index = faiss.IndexFlatIP(dim)
        _fill_flat(index, vectors)
        seconds = time.perf_counter() - started
        return index, 0.0, seconds
    if settings.kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, settings.M, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = settings.ef_construction
    elif settings.kind == "ivf":
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, settings.nlist, faiss.METRIC_INNER_PRODUCT)
    elif settings.kind == "ivfpq":
        if dim % settings.m:
            raise ValueError(f"IVF-PQ m={settings.m} must divide the dimension {dim}")
        index = faiss.IndexIVFPQ(faiss.IndexFlatIP(dim), dim, settings.nlist, settings.m, settings.nbits,
                                 faiss.METRIC_INNER_PRODUCT)
    else:
        raise ValueError(f"unknown index kind {settings.kind!r}")
    if settings.kind in ("ivf", "ivfpq"):
        rng = np.random.default_rng(settings.seed)
        rows = np.sort(rng.choice(n, size=settings.train_size, replace=False))
        index.cp.seed = settings.seed
        index.train(_normalized_rows(vectors, rows))
    train_seconds = time.perf_counter() - started
    for start in range(0, n, _ADD_BATCH):
        index.add(_normalized_rows(vectors, slice(start, start + _ADD_BATCH)))
    return index, train_seconds, time.perf_counter() - started


def _fill_flat(index: faiss.IndexFlat, vectors) -> None:
    """Size the storage once and write normalised rows into it: adding batch by batch would
    regrow it by doubling, holding the old and the new buffer at once."""
    n, dim = vectors.shape
    index.codes.resize(n * dim * 4)
    index.ntotal = n
    storage = faiss.rev_swig_ptr(index.codes.data(), n * dim * 4).view(np.float32).reshape(n, dim)
    if hasattr(vectors, "fill_normalised"):
        vectors.fill_normalised(storage)
        return
    for start in range(0, n, _ADD_BATCH):
        storage[start:start + _ADD_BATCH] = _normalized_rows(vectors, slice(start, start + _ADD_BATCH))


def _normalized_rows(vectors, rows) -> np.ndarray:
    batch = np.array(vectors[rows], dtype=np.float32, order="C", copy=True)
    if not getattr(vectors, "normalised", False):
        faiss.normalize_L2(batch)
    return batch


def normalized(vectors: np.ndarray) -> np.ndarray:
    """L2-normalised float32 copy (inner product = cosine)."""
    vectors = np.array(vectors, dtype=np.float32, copy=True, order="C")
    faiss.normalize_L2(vectors)
    return vectors


def intact_index(path: Path, store: Path, expected_dim: int) -> bool:
    """Is there a usable index file at `path`? Damaged: quarantined, False (rebuild).
    Intact but of another dimension: an error, since it was not built from this set."""
    if not verify(path, store, lambda p: faiss.read_index(str(p))):
        return False
    dim = faiss_dimension(path)
    if dim != expected_dim:
        raise ValueError(
            f"index {path} has dimension {dim}, but its embedding set has dimension {expected_dim}: "
            f"it was not built from these vectors (copied from another store?); delete it (and {path}.sha256) "
            "and rerun to rebuild it"
        )
    return True


def load_index(path: str | Path, expected_dim: int | None = None) -> faiss.Index:
    index = faiss.read_index(str(path))
    if expected_dim is not None and index.d != expected_dim:
        raise ValueError(f"index {path} has dimension {index.d}, but the vectors have {expected_dim}; delete it to rebuild")
    return index
