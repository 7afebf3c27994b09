"""Plain functions behind the first two stages: load + validate the dataset, chunk
the corpus. Each writes its output under the store, addressed by a hash of its
inputs, and returns a small reference; finding the output there means no work.

Both check the store and output directory are writable before any work, verify a stored
output against its checksum sidecar before reusing it (a damaged one is quarantined and
rebuilt), and hold an flock while they write."""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from tasks.stages.chunk import ChunkConfig, chunk_corpus
from tasks.stages.dataset import content_hash, load_dataset, load_saved_dataset, save_dataset
from tasks.store.integrity import ensure_writable, file_lock, lock_for, parquet_readable, record_checksum, verify
from tasks.config.spec import BenchmarkSpec
from tasks.store.files import stable_hash, write_parquet


@dataclass(frozen=True)
class DatasetRef:
    name: str
    path: str
    content_hash: str
    documents: int
    queries: int
    judgments: int
    notes: tuple[str, ...]
    computed: bool
    seconds: float
    unjudged_queries: tuple[str, ...] = ()  # ids of queries dropped for having no judgments

    @property
    def corpus_path(self) -> str:
        return str(Path(self.path) / "corpus.parquet")

    @property
    def queries_path(self) -> str:
        return str(Path(self.path) / "queries.parquet")

    @property
    def qrels_path(self) -> str:
        return str(Path(self.path) / "qrels.parquet")


@dataclass(frozen=True)
class ChunksRef:
    path: str
    key: str
    chunks: int
    computed: bool
    seconds: float


def check_inputs(spec: BenchmarkSpec) -> None:
    """What can be checked in milliseconds before any work (and before Prefect starts):
    the dataset and qrels paths exist, and the output and store directories are folders
    this process can write. Raises DatasetError or StoreError naming the spec key."""
    from tasks.stages.dataset import DatasetError
    from tasks.store.integrity import StoreError
    from tasks.store.remote import is_remote

    dataset = spec.dataset
    if not dataset.path.exists():
        raise DatasetError(f"dataset.path {dataset.path}: not found; expected the {dataset.format} collection's "
                           "folder (relative paths are read from the spec file's folder)")
    if not dataset.path.is_dir():
        raise DatasetError(f"dataset.path {dataset.path}: a file; expected the folder of the {dataset.format} collection")
    if dataset.qrels is not None and not dataset.qrels.is_file():
        raise DatasetError(f"dataset.qrels {dataset.qrels}: not found; expected a TREC qrels file")
    folders = [("output", "output_dir", Path(spec.output_dir))]
    if not is_remote(spec.store_dir):
        folders.append(("store", "store_dir", Path(spec.store_dir)))
    for what, key, folder in folders:
        # The nearest existing ancestor must be a folder: mkdir under a file fails much later.
        existing = next((p for p in (folder, *folder.parents) if p.exists()), None)
        if existing is not None and not existing.is_dir():
            shown = folder if existing == folder else f"{folder} (its parent {existing})"
            raise StoreError(f"{key} {shown} is a file, not a folder; point --{key.replace('_', '-')} "
                             f"(or {key} in the spec) at a folder")
        ensure_writable(folder, what)


def prepare_dataset(spec: BenchmarkSpec, force: bool = False) -> DatasetRef:
    started = time.perf_counter()
    ensure_writable(spec.store_dir, "store")
    ensure_writable(spec.output_dir, "output")
    dataset_spec = spec.dataset
    dataset = load_dataset(
        dataset_spec.path, dataset_spec.format, dataset_spec.split,
        qrels_path=dataset_spec.qrels, grade_map=dataset_spec.grade_map, unicode=dataset_spec.unicode,
        **dataset_spec.options,
    )
    digest = content_hash(dataset)
    directory = Path(spec.store_dir) / "datasets" / digest[:32]
    with file_lock(lock_for(directory)):
        computed = force or not _saved_intact(directory, spec.store_dir)
        if computed:
            save_dataset(dataset, directory)
            for name in _DATASET_FILES:
                record_checksum(directory / name)
    return DatasetRef(
        name=dataset.name, path=str(directory), content_hash=digest,
        documents=dataset.corpus.height, queries=dataset.queries.height, judgments=dataset.qrels.height,
        notes=tuple(dataset.notes), computed=computed, seconds=time.perf_counter() - started,
        unjudged_queries=dataset.unjudged_queries,
    )


_DATASET_FILES = ("corpus.parquet", "queries.parquet", "qrels.parquet", "dataset.json")


def _saved_intact(directory: Path, store: str) -> bool:
    """dataset.json is written last by save_dataset; every file must also match its checksum."""
    intact = [verify(directory / name, store, None if name.endswith(".json") else parquet_readable) for name in _DATASET_FILES]
    return all(intact)


def chunk_dataset(dataset: DatasetRef, spec: BenchmarkSpec, force: bool = False) -> ChunksRef:
    started = time.perf_counter()
    config = ChunkConfig(**spec.chunking.model_dump())
    key = stable_hash("chunks-v1", dataset.content_hash, config.name)  # only parameters that change the chunks
    path = Path(spec.store_dir) / "chunks" / f"{key[:32]}.parquet"
    with file_lock(lock_for(path)):
        computed = force or not verify(path, spec.store_dir, parquet_readable)
        if computed:
            corpus = load_saved_dataset(dataset.path).corpus
            write_parquet(chunk_corpus(corpus, config), path)
            record_checksum(path)
    count = pl.scan_parquet(path).select(pl.len()).collect().item()
    return ChunksRef(path=str(path), key=key, chunks=count, computed=computed, seconds=time.perf_counter() - started)
