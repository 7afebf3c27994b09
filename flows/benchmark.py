"""The benchmark flow: chunk -> embed -> index -> retrieve -> score -> report.

Each stage is a Prefect task around a plain function in tasks/; tasks pass paths
and content keys, never arrays, and each stage's output is addressed by a hash
of its inputs, so a rerun does only what is missing. `stage` stops the flow after
that stage ("rerun one stage"); `force` recomputes that stage even on a cache hit,
for the providers named in `providers` (all when empty).
"""
from __future__ import annotations

import time
import uuid
from pathlib import Path

import polars as pl
from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.runtime import flow_run
from prefect.task_runners import ThreadPoolTaskRunner

from tasks.analysis import ann, breakdown, cost as cost_mod, failures
from tasks.stages import embed as embed_mod, index as index_mod
from tasks.reporting import tables as report
from tasks.stages import retrieve as retrieve_mod, sweep as sweep_mod
from tasks.analysis import score as score_mod
from tasks.stages.dataset import load_saved_dataset
from tasks.stages.latency import LatencySpec, profile_latency
from tasks.reporting.manifest import build_manifest
from tasks.providers import create_provider
from tasks.reporting.publish import Published, publish, regressions_markdown
from tasks.store.remote import StoreMirror, default_mirror, display_uri, is_remote
from tasks.config.spec import STAGES, BenchmarkSpec, IndexesSpec, ProviderSpec, load_spec, select_providers, slug
from tasks.stages.prepare import ChunksRef, DatasetRef, chunk_dataset, prepare_dataset
from tasks.store.files import write_parquet
from tasks.stages.sweep import SweepSpec

# Our stages cache by content themselves; Prefect must not hash or persist their inputs.
stage = task(cache_policy=NO_CACHE, persist_result=False)


@stage(name="load-dataset")
def load_dataset_stage(spec: BenchmarkSpec, force: bool) -> DatasetRef:
    ref = prepare_dataset(spec, force=force)
    get_run_logger().info(f"dataset {ref.name}: {ref.documents} documents, {ref.queries} queries, {ref.judgments} judgments")
    return ref


@stage(name="chunk")
def chunk_stage(dataset: DatasetRef, spec: BenchmarkSpec, force: bool) -> ChunksRef:
    ref = chunk_dataset(dataset, spec, force=force)
    get_run_logger().info(f"{ref.chunks} chunks ({spec.chunking.strategy}){'' if ref.computed else ', from store'}")
    return ref


@stage(name="embed", task_run_name="embed-{provider.name}-{role}")
def embed_stage(provider: ProviderSpec, texts_path: str, id_column: str, role: str, store: str, force: bool) -> embed_mod.EmbeddingSet:
    logger = get_run_logger()
    texts = pl.read_parquet(texts_path, columns=[id_column, "text"])
    result = embed_mod.embed_texts(
        create_provider(provider.kind, provider.options), provider.name,
        texts[id_column].to_list(), texts["text"].to_list(), role, Path(store),
        batch_size=provider.batch_size, progress=logger.info, force=force,
    )
    logger.info(f"{provider.name} {role} texts: {result.embedded} embedded, {result.from_cache} served from cache")
    return result


@stage(name="index", task_run_name="index-{doc_set.provider}-{kind}")
def index_stage(doc_set: embed_mod.EmbeddingSet, kind: str, indexes: IndexesSpec, store: str, force: bool) -> index_mod.BuiltIndex:
    if kind == "flat":
        settings = index_mod.IndexSettings("flat")
    else:
        ivf = indexes.ivf
        settings = index_mod.resolve_ivf(doc_set.count, ivf.nlist, ivf.train_size, ivf.seed)
    get_run_logger().info(f"{doc_set.provider}: {settings.file_name}: building unless in the store "
                          f"({doc_set.count} vectors{'' if kind == 'flat' else f', training on {settings.train_size}'})")
    built = index_mod.build_index(doc_set, settings, Path(store), force=force)
    get_run_logger().info(f"{doc_set.provider}: {Path(built.path).name} {'built' if built.built else 'reused'} ({built.vectors} vectors, {built.seconds:.2f}s)")
    return built


@stage(name="retrieve", task_run_name="retrieve-{built.provider}-{built.settings.kind}")
def retrieve_stage(built: index_mod.BuiltIndex, doc_set: embed_mod.EmbeddingSet, query_set: embed_mod.EmbeddingSet,
                   chunks: ChunksRef, depth: int, nprobes: list[int], store: str, force: bool) -> list[retrieve_mod.RunResult]:
    if built.settings.kind == "flat":
        probes: list[int | None] = [None]
    else:
        # nprobe beyond nlist searches every list anyway: clip and drop repeats.
        probes = sorted({min(p, built.settings.nlist) for p in nprobes})
    return [retrieve_mod.retrieve(built, doc_set, query_set, chunks.path, depth, nprobe, Path(store), force=force) for nprobe in probes]


@stage(name="score")
def score_stage(runs: list[retrieve_mod.RunResult], dataset: DatasetRef, spec: BenchmarkSpec) -> dict[str, str]:
    saved = load_saved_dataset(dataset.path)
    run = pl.concat([pl.read_parquet(r.path) for r in runs])
    per_query = score_mod.score_runs(run, saved.qrels, saved.queries, score_mod.default_measures(spec.k))
    summary = score_mod.summarize(per_query)
    overlap = ann.topk_overlap(run, spec.k)
    cut = 10 if 10 in spec.k else max(spec.k)
    tables = {
        "summary": summary,
        "per_query": per_query,
        "breakdown": breakdown.breakdown_table(per_query, saved.queries, saved.qrels, saved.corpus, resamples=1000, seed=0),
        "comparisons": breakdown.comparison_table(per_query, resamples=1000, seed=0),
        "failures": failures.failure_table(run, per_query, saved.queries, saved.qrels, measure=f"ndcg@{cut}", threshold=0.5, k=cut),
        "ann_vs_exact": ann.exact_vs_approximate(summary, overlap),
        "ann_overlap_per_query": overlap,
        "runs": run,
    }
    output_dir = Path(spec.output_dir)
    paths = report.write_tables(output_dir, tables)
    retrieve_mod.write_trec_run(run, output_dir / "runs.trec")
    get_run_logger().info("summary\n" + report.summary_table_text(summary))
    return paths


@stage(name="latency", task_run_name="latency-{provider.name}")
def latency_stage(provider: ProviderSpec, chunks_path: str, latency: LatencySpec, output_dir: str) -> str:
    logger = get_run_logger()
    texts = pl.read_parquet(chunks_path, columns=["text"])["text"].to_list()
    logger.info(f"{provider.name}: latency profile, batch sizes {latency.batch_sizes}")
    table = profile_latency(create_provider(provider.kind, provider.options), provider.name, texts, latency)
    return str(write_parquet(table, Path(output_dir) / "latency" / f"{provider.name}.parquet"))


@stage(name="ann-sweep", task_run_name="ann-sweep-{doc_set.provider}")
def sweep_stage(doc_set: embed_mod.EmbeddingSet, query_set: embed_mod.EmbeddingSet, chunks: ChunksRef, dataset: DatasetRef,
                sweep: SweepSpec, store: str, output_dir: str, force: bool) -> sweep_mod.SweepResult:
    logger = get_run_logger()
    result = sweep_mod.run_sweep(doc_set, query_set, chunks.path, dataset.qrels_path, sweep, Path(store), Path(output_dir),
                                 force=force, progress=logger.info)
    logger.info(f"recommended: {result.recommendation}")
    return result


def ledger_tables(spec: BenchmarkSpec, dataset: DatasetRef, results: dict) -> dict[str, str]:
    """`cost`, `storage` and `latency` tables from what the provider stages returned."""
    pricing = {p.name: p for p in spec.providers}
    cost_rows, storage = [], []
    for name, work in results.items():
        doc_set, query_set = work["embed"]
        cost_rows.append(cost_mod.cost_row(name, pricing[name].kind, pricing[name].pricing, doc_set, query_set,
                                           corpus_documents=dataset.documents))
        storage.append((name, doc_set.count, doc_set.dim, [i.path for i in work["index"]]))
    tables = {"cost": cost_mod.cost_table(cost_rows), "storage": cost_mod.storage_table(storage)}
    latency = [pl.read_parquet(path) for work in results.values() for path in work["latency"]]
    if latency:
        tables["latency"] = pl.concat(latency)
    return report.write_tables(Path(spec.output_dir), tables)


class RegressionError(RuntimeError):
    pass


@stage(name="report")
def report_stage(spec: BenchmarkSpec, run_id: str) -> Published:
    logger = get_run_logger()
    published = publish(spec, run_id)
    summary = pl.read_parquet(Path(spec.output_dir) / "summary.parquet")
    create_table_artifact(
        key=slug(f"{spec.name}-summary"), table=summary.to_dicts(),
        description=f"retbench summary of {spec.name}")
    create_markdown_artifact(
        key=slug(f"{spec.name}-regressions"), markdown=regressions_markdown(published),
        description=f"regressions of {spec.name} against the previous and baseline runs")
    logger.info(f"report: {published.html}")
    if published.regressions:
        logger.warning(f"{published.regressions} regression(s) against {published.previous_run or ''} {published.baseline_run or ''}")
    return published


@flow(name="benchmark", task_runner=ThreadPoolTaskRunner(max_workers=1))
def benchmark(spec_path: str, output_dir: str | None = None, store_dir: str | None = None,
              stage: str = "score", providers: list[str] | None = None, force: bool = False) -> str:
    """Run the benchmark described by the spec file up to `stage`; returns the output directory."""
    spec = load_spec(spec_path, output_dir=output_dir, store_dir=store_dir)
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r} (expected one of {', '.join(STAGES)})")
    if not is_remote(spec.store_dir):
        return run_pipeline(spec, spec_path, stage, providers, force)
    mirror = StoreMirror(spec.store_dir, spec.store_mirror or default_mirror(spec.store_dir))
    get_run_logger().info(f"store {display_uri(spec.store_dir)}: pulled {mirror.pull()} files into {mirror.local}")
    try:
        return run_pipeline(spec.model_copy(update={"store_dir": str(mirror.local)}), spec_path, stage, providers, force)
    finally:
        # Also after a failure: what was computed reaches the shared store.
        get_run_logger().info(f"store {display_uri(spec.store_dir)}: pushed {mirror.push()} files")


def run_pipeline(spec: BenchmarkSpec, spec_path: str, stage: str, providers: list[str] | None, force: bool) -> str:
    logger = get_run_logger()
    started = time.perf_counter()
    targeted = {p.name for p in select_providers(spec, providers)}
    reaches = lambda name: STAGES.index(stage) >= STAGES.index(name)
    forced = lambda name: force and stage == name
    store = str(spec.store_dir)

    dataset = load_dataset_stage(spec, forced("load-dataset"))
    chunks = chunk_stage(dataset, spec, forced("chunk")) if reaches("chunk") else None

    # A partial run touches only the named providers; a full run scores them all,
    # the untouched ones straight from the cache.
    active = spec.providers if stage == "score" else [p for p in spec.providers if p.name in targeted]
    futures: dict[str, dict] = {}
    for provider in active if reaches("embed") else []:
        force_here = lambda name: forced(name) and provider.name in targeted
        work = futures[provider.name] = {"embed": [
            embed_stage.submit(provider, chunks.path, "chunk_id", "document", store, force_here("embed")),
            embed_stage.submit(provider, dataset.queries_path, "query_id", "query", store, force_here("embed")),
        ], "index": [], "retrieve": [], "sweep": [], "latency": []}
        doc_set, query_set = work["embed"]
        if spec.latency is not None and stage == "score":
            work["latency"].append(latency_stage.submit(provider, chunks.path, spec.latency, str(spec.output_dir)))
        if not reaches("index"):
            continue
        kinds = ["flat"] + (["ivf"] if spec.indexes.ivf is not None else [])
        for kind in kinds:
            built = index_stage.submit(doc_set, kind, spec.indexes, store, force_here("index"))
            work["index"].append(built)
            if reaches("retrieve"):
                nprobes = spec.indexes.ivf.nprobe if kind == "ivf" else []
                work["retrieve"].append(retrieve_stage.submit(
                    built, doc_set, query_set, chunks, spec.depth, nprobes, store, force_here("retrieve")))
        if spec.sweep is not None and reaches("retrieve"):
            work["sweep"].append(sweep_stage.submit(
                doc_set, query_set, chunks, dataset, spec.sweep, store, str(spec.output_dir), force_here("index")))

    results = {name: {part: [f.result() for f in fs] for part, fs in work.items()} for name, work in futures.items()}
    embeddings = [e for r in results.values() for e in r["embed"]]
    indexes = [i for r in results.values() for i in r["index"]]
    runs = [run for r in results.values() for group in r["retrieve"] for run in group]
    sweeps = [sweep for r in results.values() for sweep in r["sweep"]]

    tables = score_stage(runs, dataset, spec) if reaches("score") else {}
    if reaches("score"):
        tables |= ledger_tables(spec, dataset, results)
    if sweeps:
        tables |= sweep_mod.write_sweep_tables(sweeps, Path(spec.output_dir))
    manifest = build_manifest(spec, spec_path, stage, sorted(targeted), force, dataset, chunks,
                              embeddings, indexes, runs, tables, time.perf_counter() - started, sweeps)
    report.write_manifest(spec.output_dir, manifest)
    if reaches("score"):
        published = report_stage(spec, str(flow_run.id or uuid.uuid4()))
        if published.regressions and spec.history.fail_on_regression:
            raise RegressionError(f"{published.regressions} regression(s); see {published.regressions_path}")
    texts = manifest["texts"]
    logger.info(f"stage {stage}: embedded {texts['embedded']} texts, {texts['from_cache']} served from cache; "
                f"output in {spec.output_dir}")
    return str(spec.output_dir)


def with_task_runner(dask: str | None):
    """The benchmark flow on the default runner, or on Dask: "local" starts a local
    cluster (one process per core), anything else is a scheduler address."""
    if not dask:
        return benchmark
    from prefect_dask import DaskTaskRunner

    if dask == "local":
        runner = DaskTaskRunner(cluster_kwargs={"n_workers": 2, "threads_per_worker": 1, "processes": True})
    else:
        runner = DaskTaskRunner(address=dask)
    return benchmark.with_options(task_runner=runner)

