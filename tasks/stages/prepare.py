"""Plain functions behind the first two stages: load + validate the dataset, chunk
the corpus. Each writes its output under the store, addressed by a hash of its
inputs, and returns a small reference; finding the output there means no work.

Both go through the store's one build routine (tasks/store/build.py): a stored output is
verified against its checksums before reuse (a damaged one is quarantined and rebuilt), and
an flock is held while it is written. The store and output directory are checked writable
before any work."""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import polars as pl

import pyarrow.parquet as pq

from tasks.config.spec import BenchmarkSpec
from tasks.stages.chunk import ChunkConfig, chunk_corpus
from tasks.stages.dataset import content_hash, load_dataset, load_saved_dataset, save_dataset
from tasks.store.build import StageResult, build_folder_once, build_once
from tasks.store.files import stable_hash
from tasks.store.integrity import ensure_writable, parquet_readable


@dataclass(frozen=True, kw_only=True)
class DatasetRef(StageResult):
    """The validated dataset in the store (`key`: its content hash), as three Parquet tables."""

    name: str
    documents: int
    queries: int
    judgments: int
    notes: tuple[str, ...]
    unjudged_queries: tuple[str, ...] = ()  # ids of queries dropped for having no judgments

    @property
    def content_hash(self) -> str:
        return self.key

    @property
    def corpus_path(self) -> str:
        return str(Path(self.path) / "corpus.parquet")

    @property
    def queries_path(self) -> str:
        return str(Path(self.path) / "queries.parquet")

    @property
    def qrels_path(self) -> str:
        return str(Path(self.path) / "qrels.parquet")


@dataclass(frozen=True, kw_only=True)
class ChunksRef(StageResult):
    chunks: int


_DATASET_FILES = ("corpus.parquet", "queries.parquet", "qrels.parquet", "dataset.json")  # dataset.json last


def check_inputs(spec: BenchmarkSpec) -> None:
    """What can be checked in milliseconds before any work (and before Prefect starts):
    the dataset and qrels paths exist, and the output and store directories are folders
    this process can write. Raises DatasetError or StoreError naming the spec key."""
    from tasks.stages.dataset import DatasetError
    from tasks.store.integrity import StoreError
    from tasks.store.remote import check_reachable, is_remote

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
    else:
        try:
            check_reachable(spec.store_dir)
        except (OSError, ValueError) as error:
            raise StoreError(str(error)) from error
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
    files = (*_DATASET_FILES[:-1], *(f"{label}.parquet" for label, _ in dataset.extra_tables()), _DATASET_FILES[-1])
    made = build_folder_once(spec.store_dir, directory, files, lambda tmp: save_dataset(dataset, tmp),
                             parse=parquet_readable, force=force)
    return DatasetRef(
        path=str(directory), key=digest, computed=made.computed, seconds=time.perf_counter() - started,
        name=dataset.name, documents=dataset.corpus.height, queries=dataset.queries.height,
        judgments=dataset.qrels.height, notes=tuple(dataset.notes), unjudged_queries=dataset.unjudged_queries,
    )


def chunk_dataset(dataset: DatasetRef, spec: BenchmarkSpec, force: bool = False, variant=None) -> ChunksRef:
    """Chunks of the corpus under `variant` (a ChunkingVariantSpec; default: the spec's first config)."""
    variant = variant or spec.chunking_variants[0]
    config = ChunkConfig(**variant.model_dump(exclude={"name"}))
    key = stable_hash("chunks-v1", dataset.key, config.name)  # only parameters that change the chunks
    path = Path(spec.store_dir) / "chunks" / f"{key[:32]}.parquet"

    def build(tmp: str) -> None:
        corpus = load_saved_dataset(dataset.path).corpus
        pq.write_table(chunk_corpus(corpus, config).to_arrow(), tmp, compression="zstd")

    made = build_once(spec.store_dir, path, build, parse=parquet_readable, force=force)
    count = pl.scan_parquet(path).select(pl.len()).collect().item()
    return ChunksRef(path=str(path), key=key, computed=made.computed, seconds=made.seconds, chunks=count)
