"""The stage calls `run_pipeline` submits to its runner, one per task run: each takes the
spec and the records of earlier stages (paths, content keys, StageResult records, never arrays),
calls the stage functions of tasks/stages, tasks/analysis and tasks/reporting, and logs what it
did. Module-level functions, so that a Dask worker can unpickle them."""
from __future__ import annotations

import logging
import textwrap
from pathlib import Path
from typing import Callable

import polars as pl

from retbench.tasks.config.spec import BenchmarkSpec, ProviderSpec

log = logging.getLogger("retbench")

def default_provider(provider: ProviderSpec):
    from retbench.tasks.providers import create_provider

    return create_provider(provider.kind, provider.options, provider.dimensions)



def load_dataset_stage(spec: BenchmarkSpec, force: bool):
    from retbench.tasks.stages.judgments import with_overlays
    from retbench.tasks.stages.prepare import prepare_dataset

    ref = with_overlays(prepare_dataset(spec, force=force), spec)
    log.info(f"dataset {ref.name}: {ref.documents} documents, {ref.queries} queries, {ref.judgments} judgments")
    if ref.overlays:
        log.info(f"judgments: {', '.join(f'{n} from {label}' for label, n in ref.judgments_from)} "
                 f"(overlays: {'; '.join(o.described() for o in ref.overlays)}); content key {ref.key[:12]}, "
                 f"runs keyed by {ref.collection_key[:12]}")
    if ref.overlays_unused:
        log.info(f"{ref.overlays_unused} judgments overlay(s) imported for this dataset left out "
                 f"(judgments.use: {spec.judgments.use})")
    return ref


def chunk_stage(dataset, spec: BenchmarkSpec, force: bool, variant=None):
    from retbench.tasks.stages.prepare import chunk_dataset

    variant = variant or spec.chunking_variants[0]
    ref = chunk_dataset(dataset, spec, force=force, variant=variant)
    log.info(f"{ref.chunks} chunks ({variant.name}: {variant.strategy}){'' if ref.computed else ', from store'}")
    return ref


def query_variant_stage(dataset, variant, spec: BenchmarkSpec, force: bool):
    from retbench.tasks.stages.variants import write_query_variant

    ref = write_query_variant(dataset.queries_path, variant, spec.store_dir, force=force)
    log.info(f"query variant {variant.name}: {ref.changed} of {ref.queries} queries changed")
    return ref


def embed_plan_stage(provider: ProviderSpec, texts_path: str, id_column: str, role: str, store: str, force: bool,
                     make_provider: Callable = default_provider, set_label: str | None = None):
    """The first of a sharded embed (tasks/stages/embed_shards.py): the set file and the pending parts."""
    from retbench.tasks.stages.embed_shards import plan_embedding

    texts = pl.read_parquet(texts_path, columns=[id_column, "text"])
    built = loaded_provider(make_provider, provider)
    ids = texts[id_column].to_list()
    # A provider of vectors made elsewhere is handed ids, and its cache is keyed by them.
    batch_size, batch_said = embed_batch_size(provider, built)
    plan = plan_embedding(built, set_label or provider.name, ids, ids if built.keyed_by_id else texts["text"].to_list(),
                          role, Path(store), provider.shards, batch_size, force=force)
    if plan.missing and built.engine() is not None:
        # Which engine embeds, on which device, and why: a GPU run that lands on the CPU must show.
        log.info(f"{plan.provider}: {built.engine().described()}" + (f"; {batch_said}" if batch_said else ""))
    if plan.missing:
        from retbench.tasks.stages.embed import embed_what
        from retbench.tasks.worker_events import send_plan

        line = (f"{plan.provider} {role} texts: {plan.missing - plan.kept} of {plan.missing} to embed, "
                f"{plan.kept} kept by a stopped run, in {len(plan.parts)} part(s)" if plan.kept else
                f"{plan.provider} {role} texts: {plan.missing} to embed in {len(plan.parts)} part(s)")
        # On a Dask worker the line goes to the run's main process, with the total its parts sum to.
        if not send_plan(embed_what(plan.provider, role), plan.missing, line, kept=plan.kept):
            log.info(line)
    return plan


def embed_part_stage(plan, index: int, provider: ProviderSpec, make_provider: Callable = default_provider):
    from retbench.tasks.stages.embed_shards import embed_part

    if index >= len(plan.parts):
        return None  # fewer parts than shards: nothing to load a model for
    built = loaded_provider(make_provider, provider)
    return embed_part(built, plan, index, provider.shards, embed_batch_size(provider, built)[0], progress=log.info)


def embed_batch_size(provider: ProviderSpec, built) -> tuple[int, str]:
    """Texts per embedding call and cache shard, and how they were chosen ("" when the spec's, as
    ever on the CPU): the spec's `batch_size` when it sets one, else on a GPU the provider's own
    (its options.batch_size, or sized from the card's free memory: tasks/devices.py), so that
    64-text shards do not cap a GPU's batch."""
    gpu = built.device_batch_size()
    if gpu is None or "batch_size" in provider.model_fields_set:
        return provider.batch_size, (f"{provider.batch_size} texts per call, set in the spec (batch_size)"
                                     if gpu is not None else "")
    return gpu


def embed_finish_stage(plan, *parts):
    from retbench.tasks.stages.embed_shards import finish_embedding

    result = finish_embedding(plan, [p for p in parts if p is not None])
    log.info(f"{result.provider} {result.role} texts: {result.embedded} embedded, {result.from_cache} served from cache")
    return result


def clipping_stage(provider: ProviderSpec, doc_set, query_set, chunks_path: str, queries_path: str,
                   make_provider: Callable = default_provider) -> list[dict]:
    """Texts longer than the provider's input window, in its documents and its queries: one line
    each (a warning when the share of tokens cut calls for chunking), the rows for the manifest."""
    from retbench.tasks.stages.clipping import LARGE_SHARE, set_clipping

    built = loaded_provider(make_provider, provider)
    rows = [set_clipping(built, doc_set, chunks_path, "chunk_id"), set_clipping(built, query_set, queries_path, "query_id")]
    for row in rows:
        (log.warning if row.share_dropped >= LARGE_SHARE else log.info)(row.line())
    return [row.to_dict() for row in rows]


def data_audit_stage(dataset, spec: BenchmarkSpec, runs_path: str | None) -> dict:
    """The manifest's `data_audit`: duplicates (and, with the runs, judged copies ranked below an
    unjudged twin), language labels, zero-width joiners; one line of it logged."""
    from retbench.tasks.analysis.data_audit import data_audit

    runs = pl.read_parquet(runs_path, columns=["setting", "query_id", "doc_id", "rank"]) if runs_path else None
    audit = data_audit(pl.read_parquet(dataset.corpus_path), pl.read_parquet(dataset.queries_path),
                       pl.read_parquet(dataset.qrels_path), unicode=spec.dataset.unicode, notes=dataset.notes, runs=runs)
    duplicates, languages = audit["duplicates"], audit["languages"]
    log.info(f"data audit: {duplicates['documents']} documents in {duplicates['groups']} groups of duplicates "
             f"({duplicates['judged_groups']} with a judged id, {duplicates['judged_losing_ties']} whose judged copy "
             f"loses ties); query languages {languages['queries']}")
    return audit


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


def loaded_provider(make_provider: Callable, provider: ProviderSpec):
    key = (make_provider, provider.model_dump_json())
    if key not in _providers:
        while len(_providers) >= 4:  # a long-lived worker keeps a few models, not every one it ever ran
            _providers.pop(next(iter(_providers)))
        _providers[key] = make_provider(provider)
    return _providers[key]


def index_stage(doc_set, settings, spec: BenchmarkSpec, force: bool, filters=None):
    """One index of the plan; under `indexes.shards`, a flat or IVF index searched over shards is
    never built over every row (tasks/stages/sharded_index.py), unless `filters` (the dataset's
    metadata filters) make its search one-process."""
    from retbench.tasks.stages.index import build_index
    from retbench.tasks.stages.sharded_index import build_sharded_index
    from retbench.tasks.stages.sharded_search import SHARDABLE

    shards = spec.indexes.shards
    if shards and settings.kind in SHARDABLE and not filters:
        built = build_sharded_index(doc_set, settings, Path(spec.store_dir), shards, force=force)
        log.info(f"{doc_set.provider}: {Path(built.path).name} {'built' if built.computed else 'reused'} "
                 f"({built.vectors} vectors left in the cache for {shards} search shards, {built.seconds:.2f}s)")
        return built
    built = build_index(doc_set, settings, Path(spec.store_dir), force=force)
    log.info(f"{doc_set.provider}: {settings.file_name} {'built' if built.computed else 'reused'} "
             f"({built.vectors} vectors, {built.seconds:.2f}s)")
    return built


def filters_stage(dataset, spec: BenchmarkSpec, force: bool):
    from retbench.tasks.stages.filters import plan_filters

    ref = plan_filters(dataset.path, dataset.collection_key, spec.store_dir, force=force)
    if ref is not None:
        log.info(f"{ref.queries} queries carry a metadata filter ({ref.groups} distinct filters)")
    return ref


def retrieve_stage(built, doc_set, query_set, chunks, spec: BenchmarkSpec, query_grid: tuple, force: bool,
                   setting: str | None = None, filters=None) -> list:
    """Runs of one index, one per query-parameter dict of `query_grid` (IndexPlan.query_grid;
    empty: one search without parameters); `setting` relabels them (a query variant searches
    its baseline's index)."""
    from dataclasses import replace

    from retbench.tasks.stages.retrieve import retrieve

    runs = [retrieve(built, doc_set, query_set, chunks.path, spec.depth, params.get("nprobe"), Path(spec.store_dir),
                     force=force, filters_path=filters.path if filters else None, query_params=params,
                     shards=spec.indexes.shards)
            for params in (query_grid or ({},))]
    return [replace(run, provider=setting) for run in runs] if setting else runs


def finetune_stage(tuned: ProviderSpec, spec: BenchmarkSpec, dataset, chunks, filters, force: bool,
                   make_provider: Callable = default_provider):
    """Train a `kind: finetuned` provider on hard negatives mined from its base's exact-search dev
    run. The base's embed, index and retrieve are this pipeline's own cached calls, so the later
    stages find them in the store (tasks/stages/finetune_step.py)."""
    from retbench.tasks.stages.dataset import load_saved_dataset
    from retbench.tasks.stages.finetune_step import enough_dev_queries, train_from_run
    from retbench.tasks.stages.index import IndexSettings

    position = next(i for i, p in enumerate(spec.providers) if p.name == tuned.name)
    saved = load_saved_dataset(dataset.path)
    enough_dev_queries(spec, saved.queries, saved.qrels, f"dataset {spec.dataset.path}")  # before the base is run
    base = next(p for p in spec.providers if p.name == tuned.options["base"])
    store = str(spec.store_dir)
    doc_set = embed_in_place(base, chunks.path, "chunk_id", "document", store, False, make_provider, set_label=base.name)
    query_set = embed_in_place(base, dataset.queries_path, "query_id", "query", store, False, make_provider,
                               set_label=base.name)
    built = index_stage(doc_set, IndexSettings("flat"), spec, False, filters)
    run = retrieve_stage(built, doc_set, query_set, chunks, spec, (), False, setting=base.name, filters=filters)[0]
    return train_from_run(tuned, make_provider(base), run.path, dataset.path, store, force, log.info,
                          key_path=f"providers[{position}].options")


def finetune_tables_stage(models: dict, spec: BenchmarkSpec, per_query_path: str, dataset) -> dict[str, str]:
    """Training tables and the base-vs-fine-tuned verdict (dev and test, by slice)."""
    from retbench.tasks.stages.finetune_step import finetune_tables

    bases = {name: next(p for p in spec.providers if p.name == name).options["base"] for name in models}
    return finetune_tables(models, bases, per_query_path, dataset.path, spec.statistics, Path(spec.output_dir))


def latency_stage(provider: ProviderSpec, chunks_path: str, dataset, spec: BenchmarkSpec, remeasure: bool,
                  make_provider: Callable = default_provider) -> str:
    from retbench.tasks.providers.fingerprint import full_fingerprint
    from retbench.tasks.stages.embed import fingerprint_hash
    from retbench.tasks.stages.latency import profile_latency, profile_query_latency
    from retbench.tasks.stages.measurements import latency_table, latency_texts_key
    from retbench.tasks.store.files import write_parquet

    texts = pl.read_parquet(chunks_path, columns=["text"])["text"].to_list()
    queries = pl.read_parquet(dataset.queries_path, columns=["text"])["text"].to_list()
    model = make_provider(provider)

    def measure() -> pl.DataFrame:
        log.info(f"{provider.name}: latency profile, batch sizes {spec.latency.batch_sizes}, and one query per call")
        return pl.concat([profile_latency(model, provider.name, texts, spec.latency, progress=log.info),
                          profile_query_latency(model, provider.name, queries, spec.latency)])

    section = spec.latency.model_dump(mode="json")
    table, measured = latency_table(spec.store_dir, fingerprint_hash(full_fingerprint(model)), section,
                                    latency_texts_key(texts, queries, section), measure, remeasure)
    if not measured:
        log.info(f"{provider.name}: latency profile measured on this machine before; reused (--remeasure to measure again)")
    table = table.with_columns(provider=pl.lit(provider.name))
    return str(write_parquet(table, Path(spec.output_dir) / "latency" / f"{provider.name}.parquet"))


def sweep_stage(doc_set, query_set, chunks, dataset, spec: BenchmarkSpec, force: bool, remeasure: bool):
    from retbench.tasks.stages.measurements import cached_sweep

    if spec.indexes.shards:
        log.warning(f"{doc_set.provider}: the ANN sweep builds and times every index of its grid in one process, "
                    f"holding all {doc_set.count} vectors (indexes.shards={spec.indexes.shards} applies to the main "
                    "chain's flat and IVF search only); leave `sweep` out for a corpus larger than one machine")

    result = cached_sweep(doc_set, query_set, chunks.path, dataset.key, dataset.qrels_path, spec.sweep,
                          Path(spec.store_dir), Path(spec.output_dir), force=force, remeasure=remeasure,
                          progress=log.info, queries_path=dataset.queries_path)
    log.info(f"recommended: {result.recommendation}")
    return result


def system_stage(kind: str, *args):
    """One retrieval system's run (tasks/stages/systems.py): bm25, hybrid, rerank or first."""
    from retbench.tasks.stages import systems

    return getattr(systems, f"{kind}_stage")(*args)


def buried_stage(provider: ProviderSpec, dataset, runs: list, query_sets: dict, spec: BenchmarkSpec,
                 make_provider: Callable = default_provider) -> str:
    """The buried-answer table of one provider's exact-search runs (tasks/stages/buried.py)."""
    from retbench.tasks.stages.buried import buried_table, relevant_passages
    from retbench.tasks.stages.dataset import load_saved_dataset
    from retbench.tasks.stages.embed import embed_texts, load_vectors
    from retbench.tasks.store.files import write_parquet

    saved = load_saved_dataset(dataset.path)
    passages = relevant_passages(saved.corpus, saved.qrels)
    built = make_provider(provider)
    passage_set = embed_texts(built, f"{provider.name}/passages", passages["chunk_id"].to_list(),
                              passages["text"].to_list(), "document", Path(spec.store_dir),
                              batch_size=embed_batch_size(provider, built)[0], progress=log.info)
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


def filtered_ann_stage(doc_set, query_set, built: list, plan, spec: BenchmarkSpec) -> str:
    """Filtered IVF and HNSW search vs filtered exact search on one provider's vectors (tasks/stages/filtered_ann.py);
    `plan`: the IndexPlan the indexes were built from (their query parameters)."""
    from retbench.tasks.stages.embed import load_vectors
    from retbench.tasks.stages.filtered_ann import filtered_fidelity, stored_hnsw
    from retbench.tasks.stages.index import IndexSettings, build_index, load_index
    from retbench.tasks.store.files import write_parquet

    config = spec.filter_sweep
    _, documents = load_vectors(doc_set)
    _, queries = load_vectors(query_set)
    indexes = []
    for b in built:
        # Flat is the reference; binary codes take no IDSelector.
        if b.settings == IndexSettings("flat") or b.settings.is_binary:
            continue
        if b.shards:  # this stage searches in one process, with every vector loaded above: the whole index
            log.warning(f"{doc_set.provider}: filtered ANN fidelity builds {b.settings.file_name} whole "
                        f"(it searches in one process; indexes.shards={b.shards} does not apply to it)")
            b = build_index(doc_set, b.settings, Path(spec.store_dir))
        index = load_index(Path(b.path), expected_dim=documents.shape[1])
        indexes.append((b.settings.file_name.removesuffix(".faiss"), index, list(plan.query_grid(b.settings))))
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
    from retbench.tasks.store import output_memo
    from retbench.tasks.store.files import file_sha256, stable_hash

    key = stable_hash("score-v1", output_memo.code_version(), [(r.key, r.provider, r.index, r.nprobe) for r in runs],
                      dataset.key, spec.model_dump(mode="json", exclude={"output_dir", "store_dir", "store_mirror"}),
                      [file_sha256(p) for p in buried_paths or []], system_pairs or [])
    output_dir = Path(spec.output_dir)
    kept = output_memo.reuse(spec.store_dir, "scores", key, output_dir)
    if kept is not None:
        log.info("summary (every judged query, all splits)\n" + kept["summary"])
        return {name: str(output_dir / file) for name, file in kept["tables"].items()}
    paths, summary = _score_tables(runs, dataset, spec, buried_paths, system_pairs)
    files = [*paths.values(), output_dir / "summary.csv", output_dir / "runs.trec"]
    output_memo.keep(spec.store_dir, "scores", key, files,
                     {"tables": {name: Path(path).name for name, path in paths.items()}, "summary": summary})
    log.info("summary (every judged query, all splits)\n" + summary)
    return paths


def _score_tables(runs: list, dataset, spec: BenchmarkSpec, buried_paths: list | None,
                  system_pairs: list | None) -> tuple[dict[str, str], str]:
    from retbench.tasks.analysis import ann, breakdown, failures, score, variants
    from retbench.tasks.analysis.setting_columns import keys_table, labels_table, with_setting_columns
    from retbench.tasks.config.measures import default_measures
    from retbench.tasks.reporting import tables as report
    from retbench.tasks.stages.dataset import load_saved_dataset
    from retbench.tasks.stages.retrieve import write_trec_run
    from retbench.tasks.stages.variants import baselines, run_settings, settings_table

    saved = load_saved_dataset(dataset.path)
    stats = spec.statistics
    # A run file is shared by settings whose vectors coincide: the setting label comes from the RunResult.
    run = pl.concat([pl.read_parquet(r.path).with_columns(provider=pl.lit(r.provider)) for r in runs])
    settings = settings_table(spec).filter(pl.col("setting").is_in(run["provider"].unique().implode()))
    paired = baselines(settings)
    per_query = score.score_runs(run, saved.qrels, saved.queries, default_measures(spec.k))
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
        from retbench.tasks.stages.filters import filter_groups, filter_report

        groups = filter_groups(saved.metadata, saved.filters, saved.corpus["doc_id"].to_list())
        tables["filters"] = filter_report(groups, saved.qrels, saved.corpus.height)
    if buried_paths:
        from retbench.tasks.stages.buried import failures_with_buried

        tables["buried_answers"] = pl.concat([pl.read_parquet(p) for p in buried_paths])
        tables["failures"] = failures_with_buried(tables["failures"], tables["buried_answers"])
    # Every per-setting row gets its setting's label and query parameters (tasks/config/setting.py).
    labels = labels_table(run_settings(spec, runs))
    tables = {name: with_setting_columns(table, labels) for name, table in tables.items()}
    tables["setting_keys"] = keys_table(run_settings(spec, runs))  # pairs settings across runs in the history
    output_dir = Path(spec.output_dir)
    paths = report.write_tables(output_dir, tables)
    write_trec_run(run, output_dir / "runs.trec")
    return paths, report.summary_table_text(summary)


def ledger_tables(spec: BenchmarkSpec, dataset, embeddings: dict, indexes: dict, latency_paths: list[str]) -> dict[str, str]:
    """`cost`, `storage` and `latency` tables from what the provider stages returned."""
    from retbench.tasks.analysis import cost
    from retbench.tasks.reporting import tables as report

    by_name = {p.name: p for p in spec.providers}
    cost_rows, storage = [], []
    for name, (doc_set, query_set) in embeddings.items():
        provider = by_name[name]
        cost_rows.append(cost.cost_row(name, provider.kind, provider.pricing, doc_set, query_set,
                                       corpus_documents=dataset.documents))
        storage.append((name, doc_set.count, doc_set.dim,
                        [i.path if i.shards is None else (i.settings.file_name.removesuffix(".faiss"), i.size_bytes, i.shards)
                         for i in indexes.get(name, [])]))
    tables = {"cost": cost.cost_table(cost_rows), "storage": cost.storage_table(storage)}
    if latency_paths:
        tables["latency"] = pl.concat([pl.read_parquet(path) for path in latency_paths])
    return report.write_tables(Path(spec.output_dir), tables)


def cheaper_variants_stage(spec: BenchmarkSpec, tables: dict[str, str]) -> dict[str, str]:
    """`cheaper_variants`: each provider, truncated or other-engine variant and compressed index
    beside its full version (tasks/analysis/cheaper.py), from the tables this run wrote."""
    from retbench.tasks.analysis.cheaper import cheaper_variants_table
    from retbench.tasks.config.cheaper import cheaper_variants
    from retbench.tasks.reporting import tables as report
    from retbench.tasks.store.files import write_text

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


def report_stage(spec: BenchmarkSpec, run_id: str, sections: tuple = ()):
    """History, regressions and the report; `sections`: the side stages' own report sections."""
    from retbench.tasks.reporting.publish import publish

    published = publish(spec, run_id, sections)
    if published.verdict_text:  # the summary logged before is over every judged query; this is the decision
        log.info("verdict\n" + "\n\n".join(textwrap.fill(p, 100) for p in published.verdict_text.split("\n\n")))
    log.info(f"report: {published.html}")
    for note in published.notes:
        log.warning(f"history: {note}")
    if published.regressions:
        log.warning(f"{published.regressions} regression(s) against {published.previous_run or ''} {published.baseline_run or ''}")
    return published


def search_latency_stage(runs: list, built, doc_set, query_set, chunks, dataset, spec: BenchmarkSpec, filters,
                         remeasure: bool, label: str) -> str:
    """Search latency of one index's runs, one test query at a time (tasks/stages/search_latency.py);
    the table's path (output_dir/search_latency/<label>.parquet)."""
    from retbench.tasks.stages.search_latency import dense_search_latency
    from retbench.tasks.store.files import write_parquet

    rows = [dense_search_latency(run, built, doc_set, query_set, chunks.path, spec.depth, dataset.queries_path,
                                 Path(spec.store_dir), filters.path if filters else None, remeasure) for run in runs]
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in label)
    return str(write_parquet(pl.concat(rows), Path(spec.output_dir) / "search_latency" / f"{safe}.parquet"))
