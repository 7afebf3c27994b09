"""Plain functions behind the first two stages: load + validate the dataset, chunk
the corpus. Each writes its output under the store, addressed by a hash of its
inputs, and returns a small reference; finding the output there means no work."""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from tasks.chunk import ChunkConfig, chunk_corpus
from tasks.dataset import content_hash, load_dataset, load_saved_dataset, save_dataset
from tasks.spec import BenchmarkSpec
from tasks.storage import stable_hash, write_parquet


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


def prepare_dataset(spec: BenchmarkSpec, force: bool = False) -> DatasetRef:
    started = time.perf_counter()
    dataset_spec = spec.dataset
    dataset = load_dataset(
        dataset_spec.path, dataset_spec.format, dataset_spec.split,
        qrels_path=dataset_spec.qrels, grade_map=dataset_spec.grade_map, **dataset_spec.options,
    )
    digest = content_hash(dataset)
    directory = Path(spec.store_dir) / "datasets" / digest[:32]
    computed = force or not (directory / "dataset.json").exists()  # dataset.json is written last by save_dataset
    if computed:
        save_dataset(dataset, directory)
    return DatasetRef(
        name=dataset.name, path=str(directory), content_hash=digest,
        documents=dataset.corpus.height, queries=dataset.queries.height, judgments=dataset.qrels.height,
        notes=tuple(dataset.notes), computed=computed, seconds=time.perf_counter() - started,
    )


def chunk_dataset(dataset: DatasetRef, spec: BenchmarkSpec, force: bool = False) -> ChunksRef:
    started = time.perf_counter()
    config = ChunkConfig(**spec.chunking.model_dump())
    key = stable_hash("chunks-v1", dataset.content_hash, config.name)  # only parameters that change the chunks
    path = Path(spec.store_dir) / "chunks" / f"{key[:32]}.parquet"
    computed = force or not path.exists()
    if computed:
        corpus = load_saved_dataset(dataset.path).corpus
        write_parquet(chunk_corpus(corpus, config), path)
    count = pl.scan_parquet(path).select(pl.len()).collect().item()
    return ChunksRef(path=str(path), key=key, chunks=count, computed=computed, seconds=time.perf_counter() - started)
