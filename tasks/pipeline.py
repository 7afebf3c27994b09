"""The benchmark pipeline as one plain function, reading like the diagram:

    load-dataset -> chunk -> embed -> index -> retrieve -> score (tables, ledger, manifest) -> report

`run_pipeline(spec, selection)` wires the stage functions of tasks/stages, tasks/analysis and
tasks/reporting. Every stage call goes through a `Runner`: the plain one here runs each call
at once, in this process (tests, the crash worker, scripts); flows/benchmark.py passes one
that makes each call a Prefect task run (thread pool or Dask). Stages take and return paths,
content keys and `StageResult` records, never arrays, so either runner can move them.
"""
from __future__ import annotations

import contextlib
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

    # Parts of one set embedded one after another buy nothing, and cost padding: each part is
    # length-sorted on its own, so its batches mix lengths more than one sorted pass does.
    default_shards = 1

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


def chunk_stage(dataset, spec: BenchmarkSpec, force: bool, variant=None):
    from tasks.stages.prepare import chunk_dataset

    variant = variant or spec.chunking_variants[0]
    ref = chunk_dataset(dataset, spec, force=force, variant=variant)
    log.info(f"{ref.chunks} chunks ({variant.name}: {variant.strategy}){'' if ref.computed else ', from store'}")
    return ref


def query_variant_stage(dataset, variant, spec: BenchmarkSpec, force: bool):
    from tasks.stages.variants import write_query_variant

    ref = write_query_variant(dataset.queries_path, variant, spec.store_dir, force=force)
    log.info(f"query variant {variant.name}: {ref.changed} of {ref.queries} queries changed")
    return ref


def embed_plan_stage(provider: ProviderSpec, texts_path: str, id_column: str, role: str, store: str, force: bool,
                     make_provider: Callable = default_provider, set_label: str | None = None):
    """The first of a sharded embed (tasks/stages/embed_shards.py): the set file and the pending parts."""
    from tasks.stages.embed_shards import plan_embedding

    texts = pl.read_parquet(texts_path, columns=[id_column, "text"])
    plan = plan_embedding(_provider(make_provider, provider), set_label or provider.name, texts[id_column].to_list(),
                          texts["text"].to_list(), role, Path(store), provider.shards, provider.batch_size, force=force)
    if plan.missing:
        log.info(f"{plan.provider} {role} texts: {plan.missing} to embed in {len(plan.parts)} part(s)")
    return plan


def embed_part_stage(plan, index: int, provider: ProviderSpec, make_provider: Callable = default_provider):
    from tasks.stages.embed_shards import embed_part

    if index >= len(plan.parts):
        return None  # fewer parts than shards: nothing to load a model for
    return embed_part(_provider(make_provider, provider), plan, index, provider.shards, provider.batch_size,
                      progress=log.info)


def embed_finish_stage(plan, *parts):
    from tasks.stages.embed_shards import finish_embedding

    result = finish_embedding(plan, [p for p in parts if p is not None])
    log.info(f"{result.provider} {result.role} texts: {result.embedded} embedded, {result.from_cache} served from cache")
    return result


def _embed(runner, provider: ProviderSpec, texts_path, id_column: str, role: str, store: str, force: bool,
           make_provider: Callable, label: str):
    """One set as plan -> `provider.shards` part task runs -> finish; a future of its EmbeddingSet."""
    provider = with_shards(provider, runner.default_shards)
    plan = runner.submit("embed", embed_plan_stage, provider, texts_path, id_column, role, store, force, make_provider,
                         label=f"embed-{label}-{role}-plan", set_label=label)
    parts = [runner.submit("embed", embed_part_stage, plan, index, provider, make_provider,
                           label=f"embed-{label}-{role}-part{index}")
             for index in range(provider.shards)]
    return runner.submit("embed", embed_finish_stage, plan, *parts, label=f"embed-{label}-{role}")


def embed_in_place(provider: ProviderSpec, texts_path, id_column: str, role: str, store: str, force: bool,
                   make_provider: Callable = default_provider, set_label: str | None = None):
    """plan -> parts -> finish in this call (from inside another stage, e.g. the fine-tune step)."""
    provider = with_shards(provider, 1)
    plan = embed_plan_stage(provider, texts_path, id_column, role, store, force, make_provider, set_label=set_label)
    parts = [embed_part_stage(plan, index, provider, make_provider) for index in range(provider.shards)]
    return embed_finish_stage(plan, *parts)


def with_shards(provider: ProviderSpec, default: int) -> ProviderSpec:
    """The provider with its part count settled: the spec's, else the runner's default."""
    return provider if provider.shards else provider.model_copy(update={"shards": default})


_providers: dict = {}  # (make_provider, provider spec) -> provider: a worker loads a model once for all its parts


def _provider(make_provider: Callable, provider: ProviderSpec):
    key = (make_provider, provider.model_dump_json())
    if key not in _providers:
        while len(_providers) >= 4:  # a long-lived worker keeps a few models, not every one it ever ran
            _providers.pop(next(iter(_providers)))
        _providers[key] = make_provider(provider)
    return _providers[key]


def index_stage(doc_set, settings, spec: BenchmarkSpec, force: bool):
    from tasks.stages.index import build_index

    built = build_index(doc_set, settings, Path(spec.store_dir), force=force)
    log.info(f"{doc_set.provider}: {settings.file_name} {'built' if built.computed else 'reused'} "
             f"({built.vectors} vectors, {built.seconds:.2f}s)")
    return built


def filters_stage(dataset, spec: BenchmarkSpec, force: bool):
    from tasks.stages.filters import plan_filters

    ref = plan_filters(dataset.path, dataset.key, spec.store_dir, force=force)
    if ref is not None:
        log.info(f"{ref.queries} queries carry a metadata filter ({ref.groups} distinct filters)")
    return ref


def retrieve_stage(built, doc_set, query_set, chunks, spec: BenchmarkSpec, nprobes: tuple, force: bool,
                   setting: str | None = None, filters=None) -> list:
    """Runs of one index; `setting` relabels them (a query variant searches its baseline's index)."""
    from dataclasses import replace

    from tasks.stages.retrieve import retrieve

    probes = [None] if built.settings.kind == "flat" else list(nprobes)
    runs = [retrieve(built, doc_set, query_set, chunks.path, spec.depth, nprobe, Path(spec.store_dir), force=force,
                     filters_path=filters.path if filters else None)
            for nprobe in probes]
    return [replace(run, provider=setting) for run in runs] if setting else runs


def finetune_stage(tuned: ProviderSpec, spec: BenchmarkSpec, dataset, chunks, filters, force: bool,
                   make_provider: Callable = default_provider):
    """Train a `kind: finetuned` provider on hard negatives mined from its base's exact-search dev
    run. The base's embed, index and retrieve are this pipeline's own cached calls, so the later
    stages find them in the store (tasks/stages/finetune_step.py)."""
    from tasks.stages.dataset import load_saved_dataset
    from tasks.stages.finetune_step import enough_dev_queries, train_from_run
    from tasks.stages.index import IndexSettings

    position = next(i for i, p in enumerate(spec.providers) if p.name == tuned.name)
    saved = load_saved_dataset(dataset.path)
    enough_dev_queries(spec, saved.queries, saved.qrels, f"dataset {spec.dataset.path}")  # before the base is run
    base = next(p for p in spec.providers if p.name == tuned.options["base"])
    store = str(spec.store_dir)
    doc_set = embed_in_place(base, chunks.path, "chunk_id", "document", store, False, make_provider, set_label=base.name)
    query_set = embed_in_place(base, dataset.queries_path, "query_id", "query", store, False, make_provider,
                               set_label=base.name)
    built = index_stage(doc_set, IndexSettings("flat"), spec, False)
    run = retrieve_stage(built, doc_set, query_set, chunks, spec, (), False, setting=base.name, filters=filters)[0]
    return train_from_run(tuned, make_provider(base), run.path, dataset.path, store, force, log.info,
                          key_path=f"providers[{position}].options")


def finetune_tables_stage(models: dict, spec: BenchmarkSpec, per_query_path: str, dataset) -> dict[str, str]:
    """Training tables and the base-vs-fine-tuned verdict (dev and test, by slice)."""
    from tasks.stages.finetune_step import finetune_tables

    bases = {name: next(p for p in spec.providers if p.name == name).options["base"] for name in models}
    return finetune_tables(models, bases, per_query_path, dataset.path, spec.statistics, Path(spec.output_dir))


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


def system_stage(kind: str, *args):
    """One retrieval system's run (tasks/stages/systems.py): bm25, hybrid, rerank or first."""
    from tasks.stages import systems

    return getattr(systems, f"{kind}_stage")(*args)


def buried_stage(provider: ProviderSpec, dataset, runs: list, query_sets: dict, spec: BenchmarkSpec,
                 make_provider: Callable = default_provider) -> str:
    """The buried-answer table of one provider's exact-search runs (tasks/stages/buried.py)."""
    from tasks.stages.buried import buried_table, relevant_passages
    from tasks.stages.dataset import load_saved_dataset
    from tasks.stages.embed import embed_texts, load_vectors
    from tasks.store.files import write_parquet

    saved = load_saved_dataset(dataset.path)
    passages = relevant_passages(saved.corpus, saved.qrels)
    passage_set = embed_texts(make_provider(provider), f"{provider.name}/passages", passages["chunk_id"].to_list(),
                              passages["text"].to_list(), "document", Path(spec.store_dir),
                              batch_size=provider.batch_size, progress=log.info)
    log.info(f"{provider.name}: {passage_set.count} passages of relevant documents, {passage_set.embedded} embedded")
    passage_ids, passage_vectors = load_vectors(passage_set)
    cut = 10 if 10 in spec.k else max(spec.k)
    parts = []
    for run in runs:
        query_ids, query_vectors = load_vectors(query_sets[run.provider])
        frame = pl.read_parquet(run.path).with_columns(provider=pl.lit(run.provider))
        parts.append(buried_table(frame, query_ids, query_vectors, passages, passage_ids, passage_vectors,
                                  saved.qrels, cut))
    return str(write_parquet(pl.concat(parts), Path(spec.output_dir) / "buried" / f"{provider.name}.parquet"))


def filtered_ann_stage(doc_set, query_set, built: list, nprobes: tuple, spec: BenchmarkSpec) -> str:
    """Filtered IVF and HNSW search vs filtered exact search on one provider's vectors (tasks/stages/filtered_ann.py)."""
    import faiss

    from tasks.stages.embed import load_vectors
    from tasks.stages.filtered_ann import filtered_fidelity, stored_hnsw
    from tasks.stages.index import load_index
    from tasks.store.files import write_parquet

    config = spec.filter_sweep
    _, documents = load_vectors(doc_set)
    _, queries = load_vectors(query_set)
    indexes = []
    for b in built:
        if b.settings.kind == "flat":
            continue
        index = load_index(Path(b.path), expected_dim=documents.shape[1])
        nlist = faiss.extract_index_ivf(index).nlist
        probes = sorted({min(n, nlist) for n in nprobes})
        indexes.append((b.settings.file_name.removesuffix(".faiss"), index, [{"nprobe": n} for n in probes]))
    if config.hnsw is not None:
        indexes.append(stored_hnsw(doc_set, config.hnsw, spec.store_dir))
    table = filtered_fidelity(documents, queries, indexes, tuple(config.selectivities), config.k, tuple(config.kinds),
                              config.seed, spec.statistics.resamples, tuple(config.overfetch))
    table = table.with_columns(provider=pl.lit(doc_set.provider)).select("provider", *table.columns)
    log.info(f"{doc_set.provider}: filtered ANN fidelity at selectivities {config.selectivities}")
    return str(write_parquet(table, Path(spec.output_dir) / "filtered_ann" / f"{doc_set.provider}.parquet"))


def score_stage(runs: list, dataset, spec: BenchmarkSpec, buried_paths: list | None = None,
                system_pairs: list | None = None) -> dict[str, str]:
    """Every quality table of the run, from the run files and the judgments; `system_pairs`
    are (system, the setting it builds on) pairs to compare besides the default ones.

    Kept in the store by what they are computed from (the runs' and dataset's content keys,
    the spec without its folders, the scoring code): a cached rerun copies them."""
    from tasks.store import output_memo
    from tasks.store.files import file_sha256, stable_hash

    key = stable_hash("score-v1", output_memo.code_version(), [(r.key, r.provider, r.index, r.nprobe) for r in runs],
                      dataset.key, spec.model_dump(mode="json", exclude={"output_dir", "store_dir", "store_mirror"}),
                      [file_sha256(p) for p in buried_paths or []], system_pairs or [])
    output_dir = Path(spec.output_dir)
    kept = output_memo.reuse(spec.store_dir, "scores", key, output_dir)
    if kept is not None:
        log.info("summary\n" + kept["summary"])
        return {name: str(output_dir / file) for name, file in kept["tables"].items()}
    paths, summary = _score_tables(runs, dataset, spec, buried_paths, system_pairs)
    files = [*paths.values(), output_dir / "summary.csv", output_dir / "runs.trec"]
    output_memo.keep(spec.store_dir, "scores", key, files,
                     {"tables": {name: Path(path).name for name, path in paths.items()}, "summary": summary})
    log.info("summary\n" + summary)
    return paths


def _score_tables(runs: list, dataset, spec: BenchmarkSpec, buried_paths: list | None,
                  system_pairs: list | None) -> tuple[dict[str, str], str]:
    from tasks.analysis import ann, breakdown, failures, score, variants
    from tasks.reporting import tables as report
    from tasks.stages.dataset import load_saved_dataset
    from tasks.stages.retrieve import write_trec_run
    from tasks.stages.variants import baselines, settings_table

    saved = load_saved_dataset(dataset.path)
    stats = spec.statistics
    # A run file is shared by settings whose vectors coincide: the setting label comes from the RunResult.
    run = pl.concat([pl.read_parquet(r.path).with_columns(provider=pl.lit(r.provider)) for r in runs])
    settings = settings_table(spec).filter(pl.col("setting").is_in(run["provider"].unique().implode()))
    paired = baselines(settings)
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
                                                  permutations=stats.permutations, level=stats.confidence,
                                                  baselines=paired, extra_pairs=system_pairs or []),
        "failures": failures.failure_table(run, per_query, saved.queries, saved.qrels, measure=f"ndcg@{cut}",
                                           threshold=stats.failure_threshold, k=cut),
        "ann_vs_exact": ann.exact_vs_approximate(summary, overlap),
        "ann_overlap_per_query": overlap,
        "runs": run,
        "settings": settings,
    }
    if paired:
        tables["variant_comparisons"] = variants.variant_comparisons(
            per_query, settings, saved.queries, saved.qrels, saved.corpus, resamples=stats.resamples,
            permutations=stats.permutations, seed=stats.seed, level=stats.confidence)
        tables["failures"] = variants.surfaced_by(tables["failures"], run, saved.qrels, settings, cut)
    if saved.filters is not None:
        from tasks.stages.filters import filter_groups, filter_report

        groups = filter_groups(saved.metadata, saved.filters, saved.corpus["doc_id"].to_list())
        tables["filters"] = filter_report(groups, saved.qrels, saved.corpus.height)
    if buried_paths:
        from tasks.stages.buried import failures_with_buried

        tables["buried_answers"] = pl.concat([pl.read_parquet(p) for p in buried_paths])
        tables["failures"] = failures_with_buried(tables["failures"], tables["buried_answers"])
    output_dir = Path(spec.output_dir)
    paths = report.write_tables(output_dir, tables)
    write_trec_run(run, output_dir / "runs.trec")
    return paths, report.summary_table_text(summary)


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


def cheaper_variants_stage(spec: BenchmarkSpec, tables: dict[str, str]) -> dict[str, str]:
    """`cheaper_variants`: each provider, truncated or other-engine variant and compressed index
    beside its full version (tasks/analysis/cheaper.py), from the tables this run wrote."""
    from tasks.analysis.cheaper import cheaper_variants_table
    from tasks.config.cheaper import cheaper_variants
    from tasks.reporting import tables as report
    from tasks.store.files import write_text

    read = lambda name: pl.read_parquet(tables[name]) if name in tables else None  # noqa: E731
    cut = 10 if 10 in spec.k else max(spec.k)
    stats = spec.statistics
    table = cheaper_variants_table(
        read("per_query"), read("storage"), cheaper_variants(spec), [p.name for p in spec.providers],
        [f"ndcg@{cut}", f"recall@{cut}"], sweep=read("ann_sweep"), latency=read("latency"),
        project_vectors=spec.sweep.project_vectors if spec.sweep else None, resamples=stats.resamples,
        permutations=stats.permutations, seed=stats.seed, level=stats.confidence)
    paths = report.write_tables(Path(spec.output_dir), {"cheaper_variants": table})
    paths["cheaper_variants_csv"] = str(write_text(Path(spec.output_dir) / "cheaper_variants.csv", table.write_csv()))
    return paths


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

# What the stages and Prefect's engine import on first use, inside the first task runs:
# pandas (pyarrow imports it on its first array, ~0.5 s), matplotlib for the report's figures
# (~0.4 s), FastAPI's encoders (Prefect's parameter serialisation), the stage modules.
_FIRST_USE = ("pandas", "pyarrow.compute", "fastapi.encoders", "prefect.flow_engine", "prefect.task_engine",
              "prefect.utilities.visualization", "tasks.stages.embed_shards", "tasks.stages.filters",
              "tasks.stages.systems", "tasks.stages.variants", "tasks.analysis.ann", "tasks.analysis.cheaper",
              "tasks.analysis.cost", "tasks.analysis.failures", "tasks.analysis.variants",
              "tasks.reporting.manifest", "tasks.reporting.tables", "tasks.reporting.figures")


def import_first_use_modules(spec: BenchmarkSpec | None = None, selection: Selection = Selection()) -> None:
    """Import `_FIRST_USE` now, and the modules of the providers that will embed (torch and
    sentence-transformers: ~5 s): `retbench run` calls this while Prefect's API server boots
    in its own process (seconds in which this one waits), not on the run's critical path."""
    import importlib

    names = list(_FIRST_USE) + (modules_of_providers_to_embed(spec, selection) if spec is not None else [])
    for name in names:
        with contextlib.suppress(ImportError):  # an optional package missing: imported (and reported) where used
            importlib.import_module(name)
    from tasks.reporting.figures import load_matplotlib

    load_matplotlib()


def modules_of_providers_to_embed(spec: BenchmarkSpec, selection: Selection) -> list[str]:
    """`first_use_modules` of the selected providers whose cache folder holds nothing yet (or
    that --force re-embeds). A folder with rows may still lack some texts: then the embed stage
    imports them itself, as a cached rerun, which must not pay for torch, would."""
    from tasks.stages.embed import cache_dir_for
    from tasks.store.remote import is_remote
    from tasks.store.shards import shard_paths

    # An object store's scratch folder says nothing of what its bucket holds.
    if not selection.reaches("embed") or is_remote(spec.store_dir):
        return []
    names: list[str] = []
    for provider_spec in select_providers(spec, list(selection.providers)):
        provider = _provider(default_provider, provider_spec)
        modules = provider.first_use_modules()
        if not modules or set(modules) <= set(names):
            continue
        try:
            directory, _, _ = cache_dir_for(Path(spec.store_dir), provider)
        except RuntimeError:  # a fine-tuned model not trained yet: whether its training is cached is the stage's to find
            continue
        if selection.forced("embed", provider_spec.name) or not shard_paths(directory):
            names += [m for m in modules if m not in names]
    return names


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
    (s3://...) is read and written object by object through a local scratch folder."""
    from tasks.stages.prepare import check_inputs

    check_inputs(spec)  # refused before any stage: a missing dataset, a filter on an unknown field
    with local_store(spec) as spec:
        return _run(spec, selection, spec_path, runner or Runner(), run_id or str(uuid.uuid4()), make_provider,
                    on_published)


def _run(spec, selection, spec_path, runner, run_id, make_provider, on_published) -> PipelineResult:
    from tasks.reporting import tables as report
    from tasks.reporting.manifest import build_manifest
    from tasks.stages.index import plan_indexes
    from tasks.config.variants import RAW_QUERIES
    from tasks.stages.variants import plan_settings

    started = time.perf_counter()
    targeted = [p.name for p in select_providers(spec, list(selection.providers))]
    store = str(spec.store_dir)
    reaches, forced = selection.reaches, selection.forced
    # Every (provider, chunking, query variant) setting, labelled; see tasks/stages/variants.py.
    settings = plan_settings(spec)
    chunkings = {c.name: c for c in spec.chunking_variants}
    baseline_chunking = spec.chunking_variants[0].name

    dataset = runner.submit("load-dataset", load_dataset_stage, spec, forced("load-dataset")).result()
    chunk_refs = {name: runner.submit("chunk", chunk_stage, dataset, spec, forced("chunk"), variant,
                                      label=f"chunk-{name}").result()
                  for name, variant in chunkings.items()} if reaches("chunk") else {}
    chunks = chunk_refs.get(baseline_chunking)
    filters = runner.submit("chunk", filters_stage, dataset, spec, forced("chunk"),
                            label="filters").result() if reaches("chunk") else None
    query_paths = {RAW_QUERIES: dataset.queries_path}
    if reaches("chunk"):
        query_paths |= {v.name: runner.submit("chunk", query_variant_stage, dataset, v, spec, forced("chunk"),
                                              label=f"queries-{v.name}").result().path
                        for v in spec.queries.variants}

    # A partial run touches only the named providers; a full run scores them all, the
    # untouched ones straight from the cache.
    active = spec.providers if selection.stage == "score" else [p for p in spec.providers if p.name in targeted]
    # Fine-tuned providers are trained first; their entries then name the trained folder.
    tuned = {p.name: runner.submit("finetune", finetune_stage, p, spec, dataset, chunks, filters, forced("finetune", p.name),
                                   make_provider, label=f"finetune-{p.name}").result()
             for p in active if p.kind == "finetuned" and reaches("finetune")}
    if tuned:
        from tasks.stages.finetune_step import trained_spec

        active = [trained_spec(p, tuned[p.name]) if p.name in tuned else p for p in active]
    if not reaches("embed"):
        active = []
    mine = [s for s in settings if s.provider in {p.name for p in active}]
    label_provider = {s.label: s.provider for s in mine}
    by_name = {p.name: p for p in active}
    # Documents per (provider, chunking), queries per (provider, query variant): a query variant
    # reuses its baseline's index; texts shared by two chunkings hit the content-hashed cache.
    doc_label = {(s.provider, s.chunking): s.label for s in mine if s.query_variant == RAW_QUERIES}
    query_label = {(s.provider, s.query_variant): s.label for s in mine if s.chunking == baseline_chunking}
    # Each set is embedded in parts (by content key) that the runner may spread over workers.
    doc_sets = {key: _embed(runner, by_name[key[0]], chunk_refs[key[1]].path, "chunk_id", "document",
                            store, forced("embed", key[0]), make_provider, label)
                for key, label in doc_label.items()}
    query_sets = {key: _embed(runner, by_name[key[0]], query_paths[key[1]], "query_id", "query",
                              store, forced("embed", key[0]), make_provider, label)
                  for key, label in query_label.items()}
    embedded = {p.name: (doc_sets[(p.name, baseline_chunking)], query_sets[(p.name, RAW_QUERIES)]) for p in active}
    latency = [runner.submit("latency", latency_stage, p, chunks.path, spec, selection.remeasure, make_provider,
                             label=f"latency-{p.name}")
               for p in active if spec.latency is not None and selection.stage == "score"]

    plans = {name: plan_indexes(spec.indexes.flat, spec.indexes.ivf, ref.chunks) for name, ref in chunk_refs.items()}
    for note in (n for plan in plans.values() for n in plan.notes) if reaches("index") else ():
        log.warning(note)
    indexes = {key: [runner.submit("index", index_stage, doc_set, settings_, spec, forced("index", key[0]),
                                   label=f"index-{doc_label[key]}-{settings_.kind}")
                     for settings_ in plans[key[1]].settings]
               for key, doc_set in doc_sets.items() if reaches("index")}
    retrieved = [runner.submit("retrieve", retrieve_stage, built, doc_sets[(s.provider, s.chunking)],
                               query_sets[(s.provider, s.query_variant)], chunk_refs[s.chunking], spec,
                               plans[s.chunking].nprobe, forced("retrieve", s.provider),
                               label=f"retrieve-{s.label}-{index_settings.kind}", setting=s.label, filters=filters)
                 for s in mine if reaches("retrieve")
                 for index_settings, built in zip(plans[s.chunking].settings, indexes[(s.provider, s.chunking)])]
    sweeps = [runner.submit("ann-sweep", sweep_stage, embedded[p.name][0], embedded[p.name][1], chunks, dataset, spec,
                            forced("index", p.name), selection.remeasure, label=f"ann-sweep-{p.name}")
              for p in active if spec.sweep is not None and reaches("retrieve")]

    buried_on = spec.statistics.buried_answers
    if buried_on is None:
        buried_on = isinstance(spec.chunking, list)
    buried = [runner.submit("retrieve", buried_stage, p, dataset,
                            [r for group in retrieved for r in group.result()
                             if r.index == "flat" and label_provider[r.provider] == p.name],
                            {s.label: query_sets[(s.provider, s.query_variant)].result() for s in mine if s.provider == p.name},
                            spec, make_provider, label=f"buried-{p.name}")
              for p in active if buried_on and reaches("score")]

    filtered_ann = [runner.submit("retrieve", filtered_ann_stage, embedded[p.name][0], embedded[p.name][1],
                                  [b.result() for b in indexes[(p.name, baseline_chunking)]],
                                  plans[baseline_chunking].nprobe, spec, label=f"filtered-ann-{p.name}")
                    for p in active if spec.filter_sweep is not None and reaches("retrieve")]

    embeddings = {name: (doc.result(), query.result()) for name, (doc, query) in embedded.items()}
    built = {name: [b.result() for b in indexes[(name, baseline_chunking)]] for name in embedded if indexes}
    variant_indexes = [b.result() for key, builds in indexes.items() if key[1] != baseline_chunking for b in builds]
    runs = [run for group in retrieved for run in group.result()]
    system_runs = _systems(spec, selection, runner, runs, chunks, dataset) if selection.stage == "score" else []
    sweep_results = [s.result() for s in sweeps]
    latency_paths = [path.result() for path in latency]

    tables: dict[str, str] = {}
    if reaches("score"):
        pairs = [((s.system, s.index, s.nprobe), base) for s in system_runs for base in (s.first, s.second) if base]
        flats = sorted({(r.provider, r.index, r.nprobe) for r in runs if r.index == "flat"})
        pairs += [((s.system, s.index, s.nprobe), flat) for s in system_runs if s.kind == "bm25" for flat in flats]
        tables |= runner.submit("score", score_stage, runs + system_runs, dataset, spec, [b.result() for b in buried],
                                pairs).result()
        tables |= ledger_tables(spec, dataset, embeddings, built, latency_paths)
        if system_runs:
            from tasks.analysis.system_ledger import systems_tables

            read = lambda name: pl.read_parquet(tables[name]) if name in tables else None  # noqa: E731
            tables |= report.write_tables(Path(spec.output_dir), systems_tables(
                system_runs, {r.name: r for r in spec.rerankers}, read("latency"), read("cost")))
        if tuned:
            tables |= runner.submit("score", finetune_tables_stage, tuned, spec, tables["per_query"], dataset,
                                    label="finetune-verdict").result()
    if filtered_ann:
        tables |= report.write_tables(Path(spec.output_dir), {
            "filtered_ann": pl.concat([pl.read_parquet(f.result()) for f in filtered_ann])})
    if sweep_results:
        from tasks.stages.sweep import write_sweep_tables

        tables |= write_sweep_tables(sweep_results, Path(spec.output_dir))
    if reaches("score") and "per_query" in tables and "storage" in tables:
        tables |= cheaper_variants_stage(spec, tables)
    all_embeddings = [d.result() for d in doc_sets.values()] + [q.result() for q in query_sets.values()]
    all_indexes = [i for group in built.values() for i in group] + variant_indexes
    manifest = build_manifest(spec, spec_path or "", selection.stage, sorted(targeted), selection.force, dataset, chunks,
                              all_embeddings, all_indexes, runs, tables, time.perf_counter() - started, sweep_results,
                              index_notes=[n for plan in plans.values() for n in plan.notes], systems=system_runs)
    if len(chunk_refs) > 1 or spec.queries.variants:
        manifest["variants"] = {
            "chunking": {name: {"chunks": ref.chunks, "file": Path(ref.path).name} for name, ref in chunk_refs.items()},
            "query_variants": [v.name for v in spec.queries.variants],
            "settings": [s.label for s in mine],
        }
    if tuned:
        from tasks.stages.embed import full_fingerprint
        from tasks.stages.finetune_step import trained_spec

        manifest["providers"] |= {p.name: full_fingerprint(default_provider(trained_spec(p, tuned[p.name])))
                                  for p in spec.providers if p.name in tuned}
        manifest["finetuned"] = {name: {"base": m.base, "folder": m.path, "key": m.key, "triples": m.triples,
                                        "hyperparameters": m.hyperparameters, "train_seconds": m.train_seconds,
                                        "peak_rss_mb": m.peak_rss_mb, "trained_now": m.computed}
                                 for name, m in tuned.items()}
    if not reaches("score"):
        _keep_tables_of_the_last_full_run(manifest, Path(spec.output_dir))
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


def _keep_tables_of_the_last_full_run(manifest: dict, output_dir: Path) -> None:
    """A partial run (`--stage embed`) writes no table, but the output folder still holds the last
    full run's tables and report: its manifest keeps listing them, and says whose they are, so
    the folder never contradicts itself."""
    import json

    previous_path = output_dir / "manifest.json"
    try:
        previous = json.loads(previous_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        previous = None
    if previous and previous.get("tables"):
        full = previous.get("tables_from") or {"finished_at": previous["run"]["finished_at"], "stage": previous["run"]["stage"]}
        manifest["tables"] = previous["tables"]
        manifest["tables_from"] = full
        manifest["run"]["note"] = (f"partial run up to stage {manifest['run']['stage']}: the tables and report in this folder "
                                   f"are those of the full run finished at {full['finished_at']}")
    else:
        manifest["run"]["note"] = f"partial run up to stage {manifest['run']['stage']}: no tables written"


def _systems(spec, selection, runner, runs, chunks, dataset) -> list:
    """BM25 first stages, then every `systems:` entry, each as one stage call; a system's first
    stages are runs of this pipeline (dense settings, BM25) or of an earlier system."""
    from tasks.stages.systems import setting_of

    store, depth = str(spec.store_dir), spec.depth
    lexical = [runner.submit("systems", system_stage, "bm25", entry, chunks, dataset, store, depth,
                             selection.forced("retrieve"), label=f"bm25-{entry.name}").result() for entry in spec.lexical]
    files = {(r.provider, r.index, r.nprobe): r.path for r in runs}
    files |= {(s.system, s.index, s.nprobe): s.path for s in lexical}
    rerankers = {r.name: r for r in spec.rerankers}
    made = list(lexical)
    for system in spec.systems:
        first = setting_of(system.first, runs)
        if system.second is not None:
            second = setting_of(system.second, runs)
            made.append(runner.submit("systems", system_stage, "hybrid", system, first, second, files[first], files[second],
                                      dataset, store, depth, label=f"hybrid-{system.name}").result())
            first = (made[-1].system, made[-1].index, made[-1].nprobe)
            files[first] = made[-1].path
            if system.rerank is None:
                continue
        if system.rerank is not None:
            made.append(runner.submit("systems", system_stage, "rerank", system, rerankers[system.rerank], first,
                                      files[first], chunks, dataset, store, selection.forced("retrieve"),
                                      label=f"rerank-{system.name}").result())
        else:
            made.append(runner.submit("systems", system_stage, "rename", system, first, files[first], store,
                                      label=f"system-{system.name}").result())
    return made


@contextmanager
def local_store(spec: BenchmarkSpec) -> Iterator[BenchmarkSpec]:
    """The spec itself for a local store; for an object store, the spec pointed at a local
    scratch folder attached to it: objects are fetched when a stage asks for them and
    uploaded as they are written (tasks/store/remote.py), nothing is mirrored whole."""
    from tasks.store.remote import display_uri, is_remote, scratch_for

    if not is_remote(spec.store_dir):
        yield spec
        return
    scratch = scratch_for(spec.store_dir, spec.store_mirror)
    log.info(f"store {display_uri(spec.store_dir)}: working through the scratch folder {scratch} "
             f"(Dask workers on other machines: set RETBENCH_OBJECT_STORES as in this process)")
    yield spec.model_copy(update={"store_dir": str(scratch)})
