"""The benchmark pipeline as one plain function, reading like the diagram:

    load-dataset -> chunk -> embed -> index -> retrieve -> score (tables, ledger, manifest) -> report

`run_pipeline(spec, selection)` wires the stage functions of tasks/stages, tasks/analysis and
tasks/reporting. Every stage call goes through a `Runner`: the plain one here runs each call
at once, in this process (tests, the crash worker, scripts); flows/benchmark.py passes one
that makes each call a Prefect task run (thread pool or Dask). Stages take and return paths,
content keys and `StageResult` records, never arrays, so either runner can move them.
"""
from __future__ import annotations

import logging
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import polars as pl

from tasks.config.spec import STAGES, BenchmarkSpec, ProviderSpec, select_providers

log = logging.getLogger("retbench")


@dataclass(frozen=True)
class Selection:
    """What to run: up to `stage`; `force` recomputes that stage (for `providers`, all when
    empty) even on a cache hit; a partial run touches only the named providers; `remeasure`
    measures speed again rather than reusing what the store holds for this machine."""

    stage: str = "score"
    providers: tuple[str, ...] = ()
    force: bool = False
    remeasure: bool = False  # measure latency and the ANN sweep again instead of reusing this machine's figures

    def __post_init__(self):
        if self.stage not in STAGES:
            raise ValueError(f"unknown stage {self.stage!r} (expected one of {', '.join(STAGES)})")

    def reaches(self, name: str) -> bool:
        return STAGES.index(self.stage) >= STAGES.index(name)

    def forced(self, name: str, provider: str | None = None) -> bool:
        targeted = provider is None or not self.providers or provider in self.providers
        return self.force and self.stage == name and targeted


class Done:
    """A finished call's value, with the interface of a Prefect future."""

    def __init__(self, value: Any):
        self.value = value

    def result(self) -> Any:
        return self.value


class Runner:
    """Runs each stage call at once, in this process; `announce(stage)` is called when a
    stage starts (the crash tests kill the process at chosen stages)."""

    def __init__(self, announce: Callable[[str], None] | None = None):
        self.announce = announce or (lambda stage: None)
        self.started: list[str] = []

    def submit(self, stage: str, fn: Callable, *args, label: str = "", **kwargs) -> Done:
        if stage not in self.started:
            self.started.append(stage)
            self.announce(stage)
        resolve = lambda value: value.result() if isinstance(value, Done) else value  # noqa: E731
        return Done(fn(*map(resolve, args), **{k: resolve(v) for k, v in kwargs.items()}))


def default_provider(provider: ProviderSpec):
    from tasks.providers import create_provider

    return create_provider(provider.kind, provider.options, provider.dimensions)


@dataclass
class PipelineResult:
    output_dir: str
    manifest: dict
    embeddings: list = field(default_factory=list)  # EmbeddingSet records, documents then queries per provider
    tables: dict = field(default_factory=dict)  # table name -> path

    def embedded(self) -> dict[str, int]:
        """Texts embedded by this run, per `provider/role`."""
        return {f"{e.provider}/{e.role}": e.embedded for e in self.embeddings}


# ---------------------------------------------------------------- stage calls
# Module-level functions, so a Dask worker can unpickle them.


def load_dataset_stage(spec: BenchmarkSpec, force: bool):
    from tasks.stages.prepare import prepare_dataset

    ref = prepare_dataset(spec, force=force)
    log.info(f"dataset {ref.name}: {ref.documents} documents, {ref.queries} queries, {ref.judgments} judgments")
    return ref


def chunk_stage(dataset, spec: BenchmarkSpec, force: bool):
    from tasks.stages.prepare import chunk_dataset

    ref = chunk_dataset(dataset, spec, force=force)
    log.info(f"{ref.chunks} chunks ({spec.chunking.strategy}){'' if ref.computed else ', from store'}")
    return ref


def embed_stage(provider: ProviderSpec, texts_path: str, id_column: str, role: str, store: str, force: bool,
                make_provider: Callable = default_provider):
    from tasks.stages.embed import embed_texts

    texts = pl.read_parquet(texts_path, columns=[id_column, "text"])
    result = embed_texts(make_provider(provider), provider.name, texts[id_column].to_list(), texts["text"].to_list(),
                         role, Path(store), batch_size=provider.batch_size, progress=log.info, force=force)
    log.info(f"{provider.name} {role} texts: {result.embedded} embedded, {result.from_cache} served from cache")
    return result


def index_stage(doc_set, settings, spec: BenchmarkSpec, force: bool):
    from tasks.stages.index import build_index

    built = build_index(doc_set, settings, Path(spec.store_dir), force=force)
    log.info(f"{doc_set.provider}: {settings.file_name} {'built' if built.computed else 'reused'} "
             f"({built.vectors} vectors, {built.seconds:.2f}s)")
    return built


def retrieve_stage(built, doc_set, query_set, chunks, spec: BenchmarkSpec, nprobes: tuple, force: bool) -> list:
    from tasks.stages.retrieve import retrieve

    probes = [None] if built.settings.kind == "flat" else list(nprobes)
    return [retrieve(built, doc_set, query_set, chunks.path, spec.depth, nprobe, Path(spec.store_dir), force=force)
            for nprobe in probes]


def latency_stage(provider: ProviderSpec, chunks_path: str, spec: BenchmarkSpec, remeasure: bool,
                  make_provider: Callable = default_provider) -> str:
    from tasks.stages.embed import fingerprint_hash, full_fingerprint
    from tasks.stages.latency import profile_latency
    from tasks.stages.measurements import latency_table
    from tasks.store.files import stable_hash, write_parquet

    texts = pl.read_parquet(chunks_path, columns=["text"])["text"].to_list()
    model = make_provider(provider)

    def measure() -> pl.DataFrame:
        log.info(f"{provider.name}: latency profile, batch sizes {spec.latency.batch_sizes}")
        return profile_latency(model, provider.name, texts, spec.latency)

    table, measured = latency_table(spec.store_dir, fingerprint_hash(full_fingerprint(model)),
                                    spec.latency.model_dump(mode="json"), stable_hash(texts[: spec.latency.texts]),
                                    measure, remeasure)
    if not measured:
        log.info(f"{provider.name}: latency profile measured on this machine before; reused (--remeasure to measure again)")
    table = table.with_columns(provider=pl.lit(provider.name))
    return str(write_parquet(table, Path(spec.output_dir) / "latency" / f"{provider.name}.parquet"))


def sweep_stage(doc_set, query_set, chunks, dataset, spec: BenchmarkSpec, force: bool, remeasure: bool):
    from tasks.stages.measurements import cached_sweep

    result = cached_sweep(doc_set, query_set, chunks.path, dataset.key, dataset.qrels_path, spec.sweep,
                          Path(spec.store_dir), Path(spec.output_dir), force=force, remeasure=remeasure,
                          progress=log.info)
    log.info(f"recommended: {result.recommendation}")
    return result


def score_stage(runs: list, dataset, spec: BenchmarkSpec) -> dict[str, str]:
    """Every quality table of the run, from the run files and the judgments."""
    from tasks.analysis import ann, breakdown, failures, score
    from tasks.reporting import tables as report
    from tasks.stages.dataset import load_saved_dataset
    from tasks.stages.retrieve import write_trec_run

    saved = load_saved_dataset(dataset.path)
    stats = spec.statistics
    run = pl.concat([pl.read_parquet(r.path) for r in runs])
    per_query = score.score_runs(run, saved.qrels, saved.queries, score.default_measures(spec.k))
    summary = score.summarize(per_query)
    overlap = ann.topk_overlap(run, spec.k)
    cut = 10 if 10 in spec.k else max(spec.k)
    tables = {
        "summary": summary,
        "per_query": per_query,
        "breakdown": breakdown.breakdown_table(per_query, saved.queries, saved.qrels, saved.corpus,
                                               resamples=stats.resamples, seed=stats.seed, level=stats.confidence),
        "comparisons": breakdown.comparison_table(per_query, resamples=stats.resamples, seed=stats.seed,
                                                  permutations=stats.permutations, level=stats.confidence),
        "failures": failures.failure_table(run, per_query, saved.queries, saved.qrels, measure=f"ndcg@{cut}",
                                           threshold=stats.failure_threshold, k=cut),
        "ann_vs_exact": ann.exact_vs_approximate(summary, overlap),
        "ann_overlap_per_query": overlap,
        "runs": run,
    }
    output_dir = Path(spec.output_dir)
    paths = report.write_tables(output_dir, tables)
    write_trec_run(run, output_dir / "runs.trec")
    log.info("summary\n" + report.summary_table_text(summary))
    return paths


def ledger_tables(spec: BenchmarkSpec, dataset, embeddings: dict, indexes: dict, latency_paths: list[str]) -> dict[str, str]:
    """`cost`, `storage` and `latency` tables from what the provider stages returned."""
    from tasks.analysis import cost
    from tasks.reporting import tables as report

    by_name = {p.name: p for p in spec.providers}
    cost_rows, storage = [], []
    for name, (doc_set, query_set) in embeddings.items():
        provider = by_name[name]
        cost_rows.append(cost.cost_row(name, provider.kind, provider.pricing, doc_set, query_set,
                                       corpus_documents=dataset.documents))
        storage.append((name, doc_set.count, doc_set.dim, [i.path for i in indexes.get(name, [])]))
    tables = {"cost": cost.cost_table(cost_rows), "storage": cost.storage_table(storage)}
    if latency_paths:
        tables["latency"] = pl.concat([pl.read_parquet(path) for path in latency_paths])
    return report.write_tables(Path(spec.output_dir), tables)


def report_stage(spec: BenchmarkSpec, run_id: str):
    from tasks.reporting.publish import publish

    published = publish(spec, run_id)
    log.info(f"report: {published.html}")
    if published.regressions:
        log.warning(f"{published.regressions} regression(s) against {published.previous_run or ''} {published.baseline_run or ''}")
    return published


class RegressionError(RuntimeError):
    pass


# ---------------------------------------------------------------- the pipeline


def run_pipeline(
    spec: BenchmarkSpec,
    selection: Selection = Selection(),
    *,
    spec_path: str | Path | None = None,
    runner: Runner | None = None,
    run_id: str | None = None,
    make_provider: Callable = default_provider,
    on_published: Callable[[Any], None] | None = None,
) -> PipelineResult:
    """Run the benchmark described by `spec` up to `selection.stage`; a remote store
    (s3://...) is worked on through a local mirror, pushed back also after a failure."""
    with local_store(spec) as spec:
        return _run(spec, selection, spec_path, runner or Runner(), run_id or str(uuid.uuid4()), make_provider,
                    on_published)


def _run(spec, selection, spec_path, runner, run_id, make_provider, on_published) -> PipelineResult:
    from tasks.reporting import tables as report
    from tasks.reporting.manifest import build_manifest
    from tasks.stages.index import plan_indexes

    started = time.perf_counter()
    targeted = [p.name for p in select_providers(spec, list(selection.providers))]
    store = str(spec.store_dir)
    reaches, forced = selection.reaches, selection.forced

    dataset = runner.submit("load-dataset", load_dataset_stage, spec, forced("load-dataset")).result()
    chunks = runner.submit("chunk", chunk_stage, dataset, spec, forced("chunk")).result() if reaches("chunk") else None

    # A partial run touches only the named providers; a full run scores them all, the
    # untouched ones straight from the cache.
    active = spec.providers if selection.stage == "score" else [p for p in spec.providers if p.name in targeted]
    if not reaches("embed"):
        active = []
    embedded = {p.name: (
        runner.submit("embed", embed_stage, p, chunks.path, "chunk_id", "document", store, forced("embed", p.name),
                      make_provider, label=f"embed-{p.name}-document"),
        runner.submit("embed", embed_stage, p, dataset.queries_path, "query_id", "query", store, forced("embed", p.name),
                      make_provider, label=f"embed-{p.name}-query"),
    ) for p in active}
    latency = [runner.submit("latency", latency_stage, p, chunks.path, spec, selection.remeasure, make_provider,
                             label=f"latency-{p.name}")
               for p in active if spec.latency is not None and selection.stage == "score"]

    plan = plan_indexes(spec.indexes.flat, spec.indexes.ivf, chunks.chunks) if chunks else None
    for note in plan.notes if plan and reaches("index") else ():
        log.warning(note)
    indexes = {p.name: [runner.submit("index", index_stage, embedded[p.name][0], settings, spec, forced("index", p.name),
                                      label=f"index-{p.name}-{settings.kind}") for settings in plan.settings]
               for p in active if reaches("index")}
    retrieved = [runner.submit("retrieve", retrieve_stage, built, embedded[name][0], embedded[name][1], chunks, spec,
                               plan.nprobe, forced("retrieve", name), label=f"retrieve-{name}-{settings.kind}")
                 for name, builds in indexes.items() for settings, built in zip(plan.settings, builds) if reaches("retrieve")]
    sweeps = [runner.submit("ann-sweep", sweep_stage, embedded[p.name][0], embedded[p.name][1], chunks, dataset, spec,
                            forced("index", p.name), selection.remeasure, label=f"ann-sweep-{p.name}")
              for p in active if spec.sweep is not None and reaches("retrieve")]

    embeddings = {name: (doc.result(), query.result()) for name, (doc, query) in embedded.items()}
    built = {name: [b.result() for b in builds] for name, builds in indexes.items()}
    runs = [run for group in retrieved for run in group.result()]
    sweep_results = [s.result() for s in sweeps]
    latency_paths = [path.result() for path in latency]

    tables: dict[str, str] = {}
    if reaches("score"):
        tables |= runner.submit("score", score_stage, runs, dataset, spec).result()
        tables |= ledger_tables(spec, dataset, embeddings, built, latency_paths)
    if sweep_results:
        from tasks.stages.sweep import write_sweep_tables

        tables |= write_sweep_tables(sweep_results, Path(spec.output_dir))
    all_embeddings = [e for pair in embeddings.values() for e in pair]
    all_indexes = [i for group in built.values() for i in group]
    manifest = build_manifest(spec, spec_path or "", selection.stage, sorted(targeted), selection.force, dataset, chunks,
                              all_embeddings, all_indexes, runs, tables, time.perf_counter() - started, sweep_results,
                              index_notes=list(plan.notes) if plan else [])
    report.write_manifest(spec.output_dir, manifest)
    if reaches("score"):
        published = runner.submit("report", report_stage, spec, run_id).result()
        if on_published is not None:
            on_published(published)
        if published.regressions and spec.history.fail_on_regression:
            raise RegressionError(f"{published.regressions} regression(s); see {published.regressions_path}")
    texts = manifest["texts"]
    log.info(f"stage {selection.stage}: embedded {texts['embedded']} texts, {texts['from_cache']} served from cache; "
             f"output in {spec.output_dir}")
    return PipelineResult(output_dir=str(spec.output_dir), manifest=manifest, embeddings=all_embeddings, tables=tables)


@contextmanager
def local_store(spec: BenchmarkSpec) -> Iterator[BenchmarkSpec]:
    """The spec itself for a local store; for an object store, the spec pointed at a local
    mirror that is pulled first and pushed back afterwards, also after a failure."""
    from tasks.store.remote import StoreMirror, default_mirror, display_uri, is_remote

    if not is_remote(spec.store_dir):
        yield spec
        return
    mirror = StoreMirror(spec.store_dir, spec.store_mirror or default_mirror(spec.store_dir))
    log.info(f"store {display_uri(spec.store_dir)}: pulled {mirror.pull()} files into {mirror.local}")
    try:
        yield spec.model_copy(update={"store_dir": str(mirror.local)})
    finally:
        log.info(f"store {display_uri(spec.store_dir)}: pushed {mirror.push()} files")
