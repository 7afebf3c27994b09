"""Approximate FAISS indexes for the ANN sweep (IVF-Flat, HNSW-Flat, IVF-PQ) plus the exact
flat reference, built once per embedding set and build parameters, and a vector loader that
reads the Parquet cache in bounded memory (one matrix), unlike `tasks.stages.embed.load_vectors`.

Files sit next to the main flow's indexes and are named by their build-time parameters only
(`hnsw_M-32_efc-40.faiss`, `ivfpq_nlist-64_m-16_nbits-8_train-16384_seed-0.faiss`); `flat.faiss`
and `ivf_nlist-N_train-T_seed-S.faiss` are the very files `tasks.stages.index` writes, built the same
way, so either side reuses the other's. Query-time parameters (nprobe, efSearch) never name a
file. Each file we build gets a `<file>.json` sidecar with its build and train seconds, so a
reused index still reports how long it took to make.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import faiss
import numpy as np

from tasks.stages.embed import EmbeddingSet, LoadReport, read_vectors
from tasks.stages.index import build_faiss_index, index_path, intact_index
from tasks.store.integrity import file_lock, lock_for, record_checksum
from tasks.store.files import atomic_write, write_json

KINDS = ("flat", "ivf", "hnsw", "ivfpq")
# Query-time parameter of each kind, as FAISS's ParameterSpace names it.
QUERY_PARAMETER = {"flat": None, "ivf": "nprobe", "ivfpq": "nprobe", "hnsw": "efSearch"}


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
        if self.kind == "ivf":  # the name tasks.stages.index.IndexSettings uses: one file for both
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
    with file_lock(lock_for(path)):
        built = force or not intact_index(path, store, embedding_set.dim)
        if built:
            index, train_seconds, build_seconds = build_faiss_index(vectors(), settings)
            atomic_write(path, lambda tmp: faiss.write_index(index, tmp))
            del index
            record_checksum(path)
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


def set_query_params(index: faiss.Index, kind: str, params: dict[str, int]) -> None:
    for name, value in params.items():
        faiss.ParameterSpace().set_index_parameter(index, {"ef_search": "efSearch"}.get(name, name), value)


def read_index(path: str | Path) -> faiss.Index:
    return faiss.read_index(str(path))


# --- reading the cache --------------------------------------------------------------------


def load_vectors_mapped(embedding_set: EmbeddingSet) -> tuple[list[str], np.ndarray, LoadReport]:
    """The set's vectors with a report of what was decoded and copied (see tasks.stages.embed.read_vectors)."""
    return read_vectors(embedding_set)
