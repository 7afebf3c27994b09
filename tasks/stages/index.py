"""FAISS indexes over one embedding set: exact (flat), approximate (IVF, HNSW, IVF-PQ) and
compressed (scalar quantisation fp16/8-bit, binary sign codes searched by Hamming distance).

One settings type for every kind; its file name is its key: files are named by their
build-time parameters under a folder named by the embedding set,
`indexes/<set key>/ivf_nlist-32_train-8192_seed-0.faiss`, so a look at the folder tells what
was built, and the flow and the ANN sweep share every file. Query-time parameters (nprobe,
efSearch) never name a file.

Each file is made by `tasks.store.build.build_once` (lock, checksum sidecar, quarantine of a
damaged file) with a `<file>.json` holding its build and train seconds, so a reused index
still reports how long it took to make. Vectors come from the cache already L2-normalised
(tasks/stages/vectors.py), so inner product is cosine and nothing is normalised here.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import faiss
import numpy as np

from tasks.stages.binary_codes import BinarySearch, build_binary_index, padded_bits
from tasks.stages.embed import EmbeddingSet, load_vectors
from tasks.store.build import StageResult, build_once
from tasks.store.integrity import faiss_dimension

KINDS = ("flat", "ivf", "hnsw", "ivfpq", "sq", "binary")
SQ_TYPES = {"fp16": faiss.ScalarQuantizer.QT_fp16, "8bit": faiss.ScalarQuantizer.QT_8bit}
# Query-time parameter of each kind, as FAISS's ParameterSpace names it (binary: ours,
# the number of Hamming candidates re-scored with the float vectors).
QUERY_PARAMETER = {"flat": None, "ivf": "nprobe", "ivfpq": "nprobe", "hnsw": "efSearch", "sq": None, "binary": "rescore"}
_BUILD_PARAMS = {
    "flat": (),
    "ivf": ("nlist", "train_size", "seed"),
    "hnsw": ("M", "ef_construction"),
    "ivfpq": ("nlist", "m", "nbits", "train_size", "seed"),
    "sq": ("qtype", "train_size", "seed"),
    "binary": (),
}
_BINARY_FOURCC = b"IBxF"  # faiss.write_index_binary's tag for IndexBinaryFlat


@dataclass(frozen=True)
class IndexSettings:
    """Build-time parameters of one index; the file name is derived from them alone."""

    kind: str
    nlist: int | None = None
    train_size: int | None = None
    seed: int = 0
    M: int | None = None
    ef_construction: int | None = None
    m: int | None = None
    nbits: int | None = None
    qtype: str | None = None  # sq: fp16 | 8bit

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown index kind {self.kind!r} (known: {', '.join(KINDS)})")
        if self.kind == "sq" and self.qtype not in SQ_TYPES:
            raise ValueError(f"sq index: qtype must be one of {', '.join(SQ_TYPES)} (got {self.qtype!r})")
        if self.kind == "sq" and self.qtype == "8bit" and not self.train_size:
            raise ValueError("sq index: qtype 8bit is trained (per-component ranges): give train_size")

    @property
    def file_name(self) -> str:
        if self.kind == "flat":
            return "flat.faiss"
        if self.kind == "ivf":
            return f"ivf_nlist-{self.nlist}_train-{self.train_size}_seed-{self.seed}.faiss"
        if self.kind == "hnsw":
            return f"hnsw_M-{self.M}_efc-{self.ef_construction}.faiss"
        if self.kind == "binary":
            return "binary.faiss"
        if self.kind == "sq":
            if self.qtype == "fp16":  # nothing to train: no sample names it
                return "sq_qtype-fp16.faiss"
            return f"sq_qtype-{self.qtype}_train-{self.train_size}_seed-{self.seed}.faiss"
        return f"ivfpq_nlist-{self.nlist}_m-{self.m}_nbits-{self.nbits}_train-{self.train_size}_seed-{self.seed}.faiss"

    def build_params(self) -> dict[str, int]:
        """The parameters that matter for this kind, in a fixed order (the sweep table's `build_params`)."""
        names = ("qtype",) if self.kind == "sq" and self.qtype == "fp16" else _BUILD_PARAMS[self.kind]
        return {name: getattr(self, name) for name in names}

    @property
    def is_binary(self) -> bool:
        return self.kind == "binary"


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
                "dim": embedding_set.dim, "settings": asdict(settings), "faiss": faiss.__version__}

    built = build_once(store, path, build, parse=lambda p: read_back(str(p)), force=force)
    if not built.computed:
        check_dimension(path, padded_bits(embedding_set.dim) if settings.is_binary else embedding_set.dim)
    return BuiltIndex(
        path=str(path), key=f"{embedding_set.key[:32]}/{settings.file_name}", computed=built.computed,
        seconds=built.seconds, provider=embedding_set.provider, settings=settings, vectors=embedding_set.count,
        dim=embedding_set.dim, size_bytes=path.stat().st_size,
        build_seconds=built.metadata.get("build_seconds"), train_seconds=built.metadata.get("train_seconds"),
    )


_ADD_BATCH = 65_536  # rows added at a time: FAISS copies what it is given, so no full-size copy


def build_faiss_index(vectors: np.ndarray, settings: IndexSettings) -> tuple[faiss.Index, float, float]:
    """(index, train seconds, build seconds = train + add) over unit vectors, inner product
    (binary: a faiss.IndexBinaryFlat of their sign bits).

    `vectors` is a matrix, or a row source with `shape` and row indexing whose `fill_rows(out)`, when
    it has one, writes every row into the flat index's storage (tasks/stages/build_vectors.py).
    """
    n, dim = vectors.shape
    started = time.perf_counter()
    if settings.is_binary:
        index = build_binary_index(vectors, _ADD_BATCH)
        return index, 0.0, time.perf_counter() - started
    if settings.kind == "flat":
        index = faiss.IndexFlatIP(dim)
        _fill_flat(index, vectors)
        seconds = time.perf_counter() - started
        return index, 0.0, seconds
    if settings.kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, settings.M, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = settings.ef_construction
    elif settings.kind == "sq":
        index = faiss.IndexScalarQuantizer(dim, SQ_TYPES[settings.qtype], faiss.METRIC_INNER_PRODUCT)
    elif settings.kind == "ivf":
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, settings.nlist, faiss.METRIC_INNER_PRODUCT)
    else:
        if dim % settings.m:
            raise ValueError(f"IVF-PQ m={settings.m} must divide the dimension {dim}")
        index = faiss.IndexIVFPQ(faiss.IndexFlatIP(dim), dim, settings.nlist, settings.m, settings.nbits,
                                 faiss.METRIC_INNER_PRODUCT)
    if settings.kind in ("ivf", "ivfpq") or (settings.kind == "sq" and settings.qtype != "fp16"):
        # SQ8 learns each component's range from the sample; a later vector outside it is clipped.
        rng = np.random.default_rng(settings.seed)
        rows = np.sort(rng.choice(n, size=min(n, settings.train_size), replace=False))
        if settings.kind != "sq":
            index.cp.seed = settings.seed
        index.train(np.ascontiguousarray(vectors[rows], dtype=np.float32))
    train_seconds = time.perf_counter() - started
    for start in range(0, n, _ADD_BATCH):
        index.add(np.ascontiguousarray(vectors[start : start + _ADD_BATCH], dtype=np.float32))
    return index, train_seconds, time.perf_counter() - started


def _fill_flat(index: faiss.IndexFlat, vectors) -> None:
    """Size the storage once and write the rows into it: adding batch by batch would regrow it
    by doubling, holding the old and the new buffer at once."""
    n, dim = vectors.shape
    index.codes.resize(n * dim * 4)
    index.ntotal = n
    storage = faiss.rev_swig_ptr(index.codes.data(), n * dim * 4).view(np.float32).reshape(n, dim)
    if hasattr(vectors, "fill_rows"):
        vectors.fill_rows(storage)
        return
    for start in range(0, n, _ADD_BATCH):
        storage[start:start + _ADD_BATCH] = vectors[start:start + _ADD_BATCH]


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


def set_query_params(index: faiss.Index | BinarySearch, params: dict[str, int]) -> None:
    if isinstance(index, BinarySearch):
        index.rescore = int(params.get("rescore") or 0)
        return
    for name, value in params.items():
        faiss.ParameterSpace().set_index_parameter(index, {"ef_search": "efSearch"}.get(name, name), value)


@dataclass(frozen=True)
class IndexPlan:
    """The indexes a run builds for `n_vectors` chunks, the nprobe values it searches the IVF
    index with, and what the plan had to change or say about the spec (logged, and kept in
    the manifest)."""

    settings: tuple[IndexSettings, ...]
    nprobe: tuple[int, ...]
    notes: tuple[str, ...]


def plan_indexes(flat: bool, ivf, n_vectors: int) -> IndexPlan:
    """Flat always (the reference); IVF unless `ivf` is None or cannot be built on this many
    vectors, in which case it is skipped with the reason rather than failing after the
    embeddings are paid for."""
    settings, notes = [IndexSettings("flat")], []
    if ivf is None:
        return IndexPlan(tuple(settings), (), ("ivf: off (indexes.ivf is null)",))
    try:
        resolved = resolve_ivf(n_vectors, ivf.nlist, ivf.train_size, ivf.seed)
    except ValueError as error:
        notes.append(f"ivf skipped: {error}; set indexes.ivf.nlist to at most {n_vectors} (or null for the default)")
        return IndexPlan(tuple(settings), (), tuple(notes))
    if resolved.nlist == 1:
        notes.append(f"ivf: nlist=1 on {n_vectors} vectors (fewer than 78), so every query probes the one list and "
                     "the 'approximate' index returns exactly what flat search returns")
    probes = sorted({min(p, resolved.nlist) for p in ivf.nprobe})
    clipped = sorted(p for p in ivf.nprobe if p > resolved.nlist)
    if clipped:
        notes.append(f"ivf: nprobe {clipped} exceed nlist={resolved.nlist} and search every list, as nprobe="
                     f"{resolved.nlist} does; searched once as nprobe={resolved.nlist}")
    settings.append(resolved)
    return IndexPlan(tuple(settings), tuple(probes), tuple(notes))
