"""Plain functions behind the first two stages: load + validate the dataset, chunk
the corpus. Each writes its output under the store, addressed by a hash of its
inputs, and returns a small reference; finding the output there means no work.

Both go through the store's one build routine (tasks/store/build.py): a stored output is
verified against its checksums before reuse (a damaged one is quarantined and rebuilt), and
an flock is held while it is written. The store and output directory are checked writable
before any work."""
from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path

import polars as pl

import pyarrow.parquet as pq

from retbench.tasks.config.spec import BenchmarkSpec
from retbench.tasks.stages.chunk import ChunkConfig, chunk_corpus
from retbench.tasks.stages.dataset import content_hash, load_saved_dataset, load_spec_dataset, save_dataset
from retbench.tasks.store.build import StageResult, build_folder_once, build_once
from retbench.tasks.store.files import file_sha256, stable_hash
from retbench.tasks.store.integrity import ensure_writable, parquet_readable

log = logging.getLogger("retbench.dataset")


@dataclass(frozen=True, kw_only=True)
class DatasetRef(StageResult):
    """The validated dataset in the store (`key`: its content hash), as three Parquet tables."""

    name: str
    documents: int
    queries: int
    judgments: int
    notes: tuple[str, ...]
    unjudged_queries: tuple[str, ...] = ()  # ids of queries dropped for having no judgments
    files: tuple[str, ...] = ()  # the stored tables, the folder's metadata file last
    # With judgments overlays merged (tasks/stages/judgments.py), `key` is the merged dataset's and
    # `base_key` the key of the dataset as read from its files; else both are the same.
    base_key: str = ""
    overlays: tuple = ()  # the Overlay records merged into the judgments, in import order
    judgments_from: tuple[tuple[str, int], ...] = ()  # (source: "dataset" or an overlay's file, judgments)
    overlays_unused: int = 0  # overlays imported for the dataset that the spec's `judgments:` leaves out

    @property
    def content_hash(self) -> str:
        return self.key

    @property
    def collection_key(self) -> str:
        """The key of the dataset as read from its files: chunks, filters and runs are keyed by it,
        so judgments added as overlays never make a run search again."""
        return self.base_key or self.key

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


def check_inputs(spec: BenchmarkSpec, create_folders: bool = True) -> None:
    """What can be checked in about a second before any work (and before Prefect starts):
    the dataset and qrels paths exist, every query filter names a document metadata field
    (and a declared one), the output and store directories are folders this process can
    write, and a spec that fine-tunes has enough judged dev queries. Raises DatasetError or
    StoreError naming the spec key or file:line. create_folders=False: the output and store
    folders are probed, not made (`retbench check` writes nothing that stays)."""
    from retbench.tasks.datasets.errors import DatasetError
    from retbench.tasks.stages.filter_fields import check_filter_fields
    from retbench.tasks.store.integrity import StoreError
    from retbench.tasks.store.remote import check_reachable, is_remote

    dataset = spec.dataset
    if not dataset.path.exists():
        from retbench.tasks.datasets.lines import packed_siblings

        packed = [p.name for p in packed_siblings(dataset.path) if p.name.startswith(dataset.path.name)]
        hint = f"; found {', '.join(packed)} beside it: unpack it there" if packed else ""
        raise DatasetError(f"dataset.path {dataset.path}: not found; expected the {dataset.format} collection's "
                           f"folder (relative paths are read from the spec file's folder){hint}")
    if not dataset.path.is_dir():
        raise DatasetError(f"dataset.path {dataset.path}: a file; expected the folder of the {dataset.format} collection")
    if dataset.qrels is not None and not dataset.qrels.is_file():
        raise DatasetError(f"dataset.qrels {dataset.qrels}: not found; expected a TREC qrels file")
    check_filter_fields(dataset.path, dataset.format, dataset.metadata_fields)
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
        ensure_writable(folder, what, create=create_folders)
    _check_secret_variables(spec)
    from retbench.tasks.stages.finetune_step import check_finetune_inputs

    check_finetune_inputs(spec)  # reads the dataset, only when the spec fine-tunes a provider


def _check_secret_variables(spec: BenchmarkSpec) -> None:
    """Every environment variable a provider or reranker reads a key from is set: a missing
    key is found before the run, not after the local stages."""
    from retbench.tasks.providers import options_model
    from retbench.tasks.providers.secrets import SecretLookupError, env_references
    from retbench.tasks.rerankers import reranker_options_model

    configured = [(f"providers[{i}].options", options_model(p.kind), p.options) for i, p in enumerate(spec.providers)]
    configured += [(f"rerankers[{i}].options", reranker_options_model(r.kind), r.options)
                   for i, r in enumerate(spec.rerankers)]
    for where, model, options in configured:
        if model is None:
            continue
        for key, variable in env_references(model.model_validate(options)):
            if not os.environ.get(variable):
                raise SecretLookupError(f"{where}.{key}: environment variable {variable} is not set (or empty); "
                                        "export it before the run (keys are read from the environment or a "
                                        "Prefect Secret block, never from the spec)")


def prepare_dataset(spec: BenchmarkSpec, force: bool = False) -> DatasetRef:
    """The dataset, parsed and validated once per content of its source files: a rerun on
    unchanged files (and an unchanged loader) reads the stored tables without parsing."""
    started = time.perf_counter()
    ensure_writable(spec.store_dir, "store")
    ensure_writable(spec.output_dir, "output")
    pointer = source_pointer(spec)
    parsed: list[DatasetRef] = []

    def parse_and_point(tmp: str) -> None:
        parsed.append(_parse_and_store(spec, force))
        Path(tmp).write_text(json.dumps(_facts(parsed[0], spec.store_dir)))

    build_once(spec.store_dir, pointer, parse_and_point, parse=lambda p: json.loads(p.read_text()), force=force)
    if parsed:
        return replace(parsed[0], seconds=time.perf_counter() - started)
    facts = json.loads(pointer.read_text())
    for note in facts["notes"]:  # said when the files were parsed; said again on every run that uses them
        log.info(note)
    directory = Path(spec.store_dir) / facts["folder"]  # relative: a moved store stays a cache
    # The tables themselves are verified (a damaged file is quarantined and parsed again).
    made = build_folder_once(spec.store_dir, directory, tuple(facts["files"]),
                             lambda tmp: save_dataset(_load(spec), tmp), parse=parquet_readable)
    return DatasetRef(path=str(directory), key=facts["key"], computed=made.computed,
                      seconds=time.perf_counter() - started, name=facts["name"], documents=facts["documents"],
                      queries=facts["queries"], judgments=facts["judgments"], notes=tuple(facts["notes"]),
                      unjudged_queries=tuple(facts["unjudged_queries"]))


def source_pointer(spec: BenchmarkSpec) -> Path:
    """Where the store notes the parsed dataset of these very source files (JSON: its folder, key,
    counts, notes); present once a run has parsed them."""
    return Path(spec.store_dir) / "datasets" / "sources" / f"{_source_key(spec)[:32]}.json"


def _load(spec: BenchmarkSpec):
    return load_spec_dataset(spec.dataset)


def _parse_and_store(spec: BenchmarkSpec, force: bool) -> DatasetRef:
    dataset = _load(spec)
    digest = content_hash(dataset)
    directory = Path(spec.store_dir) / "datasets" / digest[:32]
    files = (*_DATASET_FILES[:-1], *(f"{label}.parquet" for label, _ in dataset.extra_tables()), _DATASET_FILES[-1])
    made = build_folder_once(spec.store_dir, directory, files, lambda tmp: save_dataset(dataset, tmp),
                             parse=parquet_readable, force=force)
    return DatasetRef(
        path=str(directory), key=digest, computed=made.computed, seconds=0.0,
        name=dataset.name, documents=dataset.corpus.height, queries=dataset.queries.height,
        judgments=dataset.qrels.height, notes=tuple(dataset.notes), unjudged_queries=dataset.unjudged_queries,
        files=files,
    )


def _facts(ref: DatasetRef, store_dir) -> dict:
    return {"folder": str(Path(ref.path).relative_to(store_dir)), "key": ref.key, "files": list(ref.files), "name": ref.name, "documents": ref.documents,
            "queries": ref.queries, "judgments": ref.judgments, "notes": list(ref.notes),
            "unjudged_queries": list(ref.unjudged_queries)}


def _source_key(spec: BenchmarkSpec) -> str:
    """What the parsed dataset depends on: every source file's bytes (hashed, not parsed), the
    loader's settings, and the loader's own code (a fixed loader parses again)."""
    from retbench.tasks.stages import dataset as loader

    dataset_spec = spec.dataset
    sources = [*sorted(p for p in dataset_spec.path.rglob("*") if p.is_file()),
               *([dataset_spec.qrels] if dataset_spec.qrels is not None else [])]
    digests = [(str(source.relative_to(dataset_spec.path)) if source.is_relative_to(dataset_spec.path) else str(source),
                file_sha256(source)) for source in sources]
    settings = dataset_spec.model_dump(mode="json", exclude={"path", "qrels"})
    loader_code = [file_sha256(file) for file in loader.reader_code_files(dataset_spec.format)]
    return stable_hash("dataset-source-v2", loader_code, settings, digests)


def chunk_dataset(dataset: DatasetRef, spec: BenchmarkSpec, force: bool = False, variant=None) -> ChunksRef:
    """Chunks of the corpus under `variant` (a ChunkingVariantSpec; default: the spec's first config)."""
    variant = variant or spec.chunking_variants[0]
    config = ChunkConfig(**variant.model_dump(exclude={"name"}))
    key, path = chunks_address(spec.store_dir, dataset.collection_key, config)

    def build(tmp: str) -> None:
        corpus = load_saved_dataset(dataset.path).corpus
        pq.write_table(chunk_corpus(corpus, config).to_arrow(), tmp, compression="zstd")

    made = build_once(spec.store_dir, path, build, parse=parquet_readable, force=force)
    count = pl.scan_parquet(path).select(pl.len()).collect().item()
    return ChunksRef(path=str(path), key=key, computed=made.computed, seconds=made.seconds, chunks=count)


def chunks_address(store_dir, dataset_key: str, config: ChunkConfig) -> tuple[str, Path]:
    """(key, file) of a dataset's chunks under `config`: only parameters that change the chunks count."""
    key = stable_hash("chunks-v1", dataset_key, config.name)
    return key, Path(store_dir) / "chunks" / f"{key[:32]}.parquet"
