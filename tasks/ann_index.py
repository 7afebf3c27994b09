"""Approximate FAISS indexes for the ANN sweep (IVF-Flat, HNSW-Flat, IVF-PQ) plus the exact
flat reference, built once per embedding set and build parameters, and a vector loader that
reads the Parquet cache in bounded memory (one matrix), unlike `tasks.embed.load_vectors`.

Files sit next to the main flow's indexes and are named by their build-time parameters only
(`hnsw_M-32_efc-40.faiss`, `ivfpq_nlist-64_m-16_nbits-8_train-16384_seed-0.faiss`); `flat.faiss`
and `ivf_nlist-N_train-T_seed-S.faiss` are the very files `tasks.index` writes, built the same
way, so either side reuses the other's. Query-time parameters (nprobe, efSearch) never name a
file. Each file we build gets a `<file>.json` sidecar with its build and train seconds, so a
reused index still reports how long it took to make.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import faiss
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from tasks.embed import EmbeddingSet, shard_paths
from tasks.index import index_path
from tasks.storage import atomic_write, write_json

KINDS = ("flat", "ivf", "hnsw", "ivfpq")
# Query-time parameter of each kind, as FAISS's ParameterSpace names it.
QUERY_PARAMETER = {"flat": None, "ivf": "nprobe", "ivfpq": "nprobe", "hnsw": "efSearch"}
_ADD_BATCH = 65_536  # rows normalised and added at a time: no full-size normalised copy


@dataclass(frozen=True)
class AnnSettings:
    """Build-time parameters of one index; the file name is derived from them alone."""

    kind: str
    nlist: int | None = None
    train_size: int | None = None
    seed: int = 0
    M: int | None = None
    ef_construction: int | None = None
    m: int | None = None
    nbits: int | None = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown index kind {self.kind!r} (known: {', '.join(KINDS)})")

    @property
    def file_name(self) -> str:
        if self.kind == "flat":
            return "flat.faiss"
        if self.kind == "ivf":  # the name tasks.index.IndexSettings uses: one file for both
            return f"ivf_nlist-{self.nlist}_train-{self.train_size}_seed-{self.seed}.faiss"
        if self.kind == "hnsw":
            return f"hnsw_M-{self.M}_efc-{self.ef_construction}.faiss"
        return f"ivfpq_nlist-{self.nlist}_m-{self.m}_nbits-{self.nbits}_train-{self.train_size}_seed-{self.seed}.faiss"

    def build_params(self) -> dict[str, int]:
        """The parameters that matter for this kind, in a fixed order (the table's `build_params`)."""
        names = {
            "flat": (),
            "ivf": ("nlist", "train_size", "seed"),
            "hnsw": ("M", "ef_construction"),
            "ivfpq": ("nlist", "m", "nbits", "train_size", "seed"),
        }[self.kind]
        return {name: getattr(self, name) for name in names}


@dataclass(frozen=True)
class BuildInfo:
    settings: AnnSettings
    path: str
    built: bool  # False: the file was already there
    build_seconds: float | None  # train + add; None for a file built elsewhere without a sidecar
    train_seconds: float | None
    index_bytes: int
    vectors: int


def ann_index_path(store: Path, embedding_set: EmbeddingSet, settings: AnnSettings) -> Path:
    return index_path(store, embedding_set, settings)


def sidecar_path(path: str | Path) -> Path:
    return Path(f"{path}.json")


def ensure_index(
    embedding_set: EmbeddingSet,
    settings: AnnSettings,
    store: Path,
    vectors: Callable[[], np.ndarray],
    force: bool = False,
) -> BuildInfo:
    """Build the index unless its file exists. `vectors` is called only when building."""
    path = ann_index_path(store, embedding_set, settings)
    built = force or not path.exists()
    if built:
        index, train_seconds, build_seconds = build(vectors(), settings)
        atomic_write(path, lambda tmp: faiss.write_index(index, tmp))
        del index
        write_json(sidecar_path(path), {
            "build_seconds": build_seconds, "train_seconds": train_seconds,
            "vectors": embedding_set.count, "dim": embedding_set.dim,
            "settings": asdict(settings), "faiss": faiss.__version__,
        })
    info = _read_sidecar(path)
    return BuildInfo(
        settings=settings,
        path=str(path),
        built=built,
        build_seconds=info.get("build_seconds"),
        train_seconds=info.get("train_seconds"),
        index_bytes=path.stat().st_size,
        vectors=embedding_set.count,
    )


def _read_sidecar(path: Path) -> dict:
    sidecar = sidecar_path(path)
    if not sidecar.exists():
        return {}
    try:
        return json.loads(sidecar.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def build(vectors: np.ndarray, settings: AnnSettings) -> tuple[faiss.Index, float, float]:
    """(index, train seconds, build seconds = train + add) over L2-normalised vectors, inner product."""
    n, dim = vectors.shape
    started = time.perf_counter()
    if settings.kind == "flat":
        index = faiss.IndexFlatIP(dim)
    elif settings.kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, settings.M, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = settings.ef_construction
    elif settings.kind == "ivf":
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, settings.nlist, faiss.METRIC_INNER_PRODUCT)
    else:
        if dim % settings.m:
            raise ValueError(f"IVF-PQ m={settings.m} must divide the dimension {dim}")
        index = faiss.IndexIVFPQ(faiss.IndexFlatIP(dim), dim, settings.nlist, settings.m, settings.nbits,
                                 faiss.METRIC_INNER_PRODUCT)
    if settings.kind in ("ivf", "ivfpq"):
        # The same sample as tasks.index draws, so an IVF file is identical whoever builds it.
        rng = np.random.default_rng(settings.seed)
        rows = np.sort(rng.choice(n, size=settings.train_size, replace=False))
        index.cp.seed = settings.seed
        index.train(_normalized_rows(vectors, rows))
    train_seconds = time.perf_counter() - started
    for start in range(0, n, _ADD_BATCH):
        index.add(_normalized_rows(vectors, slice(start, start + _ADD_BATCH)))
    return index, train_seconds, time.perf_counter() - started


def _normalized_rows(vectors: np.ndarray, rows) -> np.ndarray:
    batch = np.array(vectors[rows], dtype=np.float32, order="C", copy=True)
    faiss.normalize_L2(batch)
    return batch


def set_query_params(index: faiss.Index, kind: str, params: dict[str, int]) -> None:
    for name, value in params.items():
        faiss.ParameterSpace().set_index_parameter(index, {"ef_search": "efSearch"}.get(name, name), value)


def read_index(path: str | Path) -> faiss.Index:
    return faiss.read_index(str(path))


# --- reading the cache --------------------------------------------------------------------


@dataclass(frozen=True)
class LoadReport:
    """How the vectors came out of the cache: what was decoded and copied."""

    zero_copy: bool  # the matrix is a view of Arrow's buffers (never, see load_vectors_mapped)
    decoded_bytes: int  # float32 bytes Parquet decoded (unavoidable: the file is zstd)
    copied_bytes: int  # bytes copied after decoding: each decoded batch once into the matrix
    shards: int
    batches: int


_READ_BATCH = 8192  # rows decoded at a time: bounds the decoder's working memory


def load_vectors_mapped(embedding_set: EmbeddingSet) -> tuple[list[str], np.ndarray, LoadReport]:
    """The set's ids and (count, dim) float32 matrix in set order, as `tasks.embed.load_vectors`
    returns them, with peak memory of about one matrix.

    Each shard is streamed in small record batches (no pre-buffering of the whole column
    chunk) and every batch is copied once into a preallocated matrix, at its rows' set
    positions. Measured on pyarrow 26: decoding a whole fixed_size_list column at once (the
    zero-copy route, `read_table(..., memory_map=True)` then `flatten().to_numpy()`) peaks at
    ~4.6x the vector bytes (levels and growing builders) and keeps ~2.6x resident; streaming
    costs one copy of the bytes and peaks at the matrix plus a few batches.
    """
    wanted = pl.read_parquet(embedding_set.set_path, columns=["id", "key"])
    ids = wanted["id"].to_list()
    keys = wanted.select("key").with_row_index("position")
    del wanted
    dim = embedding_set.dim
    paths = shard_paths(Path(embedding_set.cache_dir))
    if not paths:
        raise FileNotFoundError(f"embedding cache {embedding_set.cache_dir} is empty")

    # Which set positions each shard row serves; the first shard holding a key wins, as in load_vectors.
    plans = []
    served = pl.DataFrame(schema={"key": pl.String})
    for path in paths:
        shard_keys = pl.from_arrow(pq.read_table(path, columns=["key"])).with_row_index("row")
        fresh = shard_keys.join(served, on="key", how="anti").unique(subset="key", keep="first", maintain_order=True)
        hits = fresh.join(keys, on="key", how="inner").select("row", "position").sort("row")
        if hits.height:
            plans.append((path, hits["row"].to_numpy(), hits["position"].to_numpy()))
            served = pl.concat([served, fresh.select("key")])
        del shard_keys, fresh, hits
    covered = sum(len(rows) for _, rows, _ in plans)
    if covered < len(ids):
        missing = keys.join(served, on="key", how="anti")
        raise RuntimeError(
            f"{missing.height} vectors of set {embedding_set.set_key[:12]} are missing from {embedding_set.cache_dir} "
            f"(first id: {ids[missing['position'][0]]}); rerun the embed stage"
        )
    del keys, served

    matrix = np.empty((len(ids), dim), dtype=np.float32)
    decoded = batches = 0
    for path, rows, positions in plans:
        parquet = pq.ParquetFile(path, buffer_size=1 << 20, pre_buffer=False)
        start = 0
        for batch in parquet.iter_batches(batch_size=_READ_BATCH, columns=["vector"]):
            count = batch.num_rows
            lo, hi = np.searchsorted(rows, [start, start + count])
            if hi > lo:
                block = batch.column(0).flatten().to_numpy(zero_copy_only=True).reshape(-1, dim)
                matrix[positions[lo:hi]] = block[rows[lo:hi] - start]
                decoded += block.nbytes
                batches += 1
                del block
            start += count
            del batch
    pa.default_memory_pool().release_unused()
    return ids, matrix, LoadReport(False, decoded, matrix.nbytes, len(plans), batches)
