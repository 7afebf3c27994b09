"""The benchmark pipeline as one plain function, reading like the diagram:

    load-dataset -> chunk -> embed -> index -> retrieve -> score (tables, ledger, manifest) -> report

`run_pipeline(spec, selection)` wires the stage calls of tasks/stage_calls.py (each calls the
stage functions of tasks/stages, tasks/analysis and tasks/reporting) and, after the main stage
each follows, the side stages declared in tasks/stage_list.py that the spec turns on. Every call goes through a
`Runner`: the plain one here runs each call at once, in this process (tests, the crash worker,
scripts); flows/benchmark.py passes one that makes each call a Prefect task run (thread pool or
Dask). Stages take and return paths, content keys and `StageResult` records, never arrays, so
either runner can move them.
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

from retbench.tasks.config.spec import STAGES, BenchmarkSpec, ProviderSpec, select_providers
from retbench.tasks.stage_calls import (chunk_stage, default_provider, embed_finish_stage, embed_part_stage, embed_plan_stage,
                               filters_stage, finetune_stage, index_stage, load_dataset_stage, query_variant_stage,
                               report_stage, retrieve_stage, score_stage, system_stage, with_shards)
from retbench.tasks.stage_calls import data_audit_stage
from retbench.tasks.stage_list import SIDE_STAGES
from retbench.tasks.stage_units import Produced
from retbench.tasks.progress import Interrupted, stop_requested

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

    orchestrator = "in-process"  # manifest.json's run.orchestrator: no Prefect flow run recorded it
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
        if stop_requested():  # a stage call not begun refuses to start, as on Prefect's runners
            raise Interrupted.before(label or stage)
        resolve = lambda value: value.result() if isinstance(value, Done) else value  # noqa: E731
        return Done(fn(*map(resolve, args), **{k: resolve(v) for k, v in kwargs.items()}))


@dataclass
class PipelineResult:
    output_dir: str
    manifest: dict
    embeddings: list = field(default_factory=list)  # EmbeddingSet records, documents then queries per provider
    tables: dict = field(default_factory=dict)  # table name -> path

    def embedded(self) -> dict[str, int]:
        """Texts embedded by this run, per `provider/role`."""
        return {f"{e.provider}/{e.role}": e.embedded for e in self.embeddings}


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


class RegressionError(RuntimeError):
    pass


# ---------------------------------------------------------------- the pipeline

# What the stages and Prefect's engine import on first use, inside the first task runs:
# pandas (pyarrow imports it on its first array, ~0.5 s), matplotlib for the report's figures
# (~0.4 s), FastAPI's encoders (Prefect's parameter serialisation), the stage modules.
_FIRST_USE = ("pandas", "pyarrow.compute", "fastapi.encoders", "prefect.flow_engine", "prefect.task_engine",
              "prefect.utilities.visualization", "retbench.tasks.stages.embed_shards", "retbench.tasks.stages.filters",
              "retbench.tasks.stages.systems", "retbench.tasks.stages.variants", "retbench.tasks.analysis.ann", "retbench.tasks.analysis.cheaper",
              "retbench.tasks.analysis.cost", "retbench.tasks.analysis.failures", "retbench.tasks.analysis.variants",
              "retbench.tasks.reporting.manifest", "retbench.tasks.reporting.tables", "retbench.tasks.reporting.figures")


def import_first_use_modules(spec: BenchmarkSpec | None = None, selection: Selection = Selection()) -> None:
    """Import `_FIRST_USE` now, and the modules of the providers that will embed (torch and
    sentence-transformers: ~5 s): `retbench run` calls this while Prefect's API server boots
    in its own process (seconds in which this one waits), not on the run's critical path."""
    import importlib

    names = list(_FIRST_USE) + (modules_of_providers_to_embed(spec, selection) if spec is not None else [])
    for name in names:
        with contextlib.suppress(ImportError):  # an optional package missing: imported (and reported) where used
            importlib.import_module(name)
    from retbench.tasks.reporting.figures import load_matplotlib

    load_matplotlib()


def modules_of_providers_to_embed(spec: BenchmarkSpec, selection: Selection) -> list[str]:
    """`first_use_modules` of the selected providers whose cache folder holds nothing yet (or
    that --force re-embeds). A folder with rows may still lack some texts: then the embed stage
    imports them itself, as a cached rerun, which must not pay for torch, would."""
    from retbench.tasks.stages.embed import cache_dir_for
    from retbench.tasks.store.remote import is_remote
    from retbench.tasks.store.shards import shard_paths

    # An object store's scratch folder says nothing of what its bucket holds.
    if not selection.reaches("embed") or is_remote(spec.store_dir):
        return []
    names: list[str] = []
    for provider_spec in select_providers(spec, list(selection.providers)):
        try:
            provider = default_provider(provider_spec)  # no model loaded: a fingerprint, a folder to look in
            modules = provider.first_use_modules()
            if not modules or set(modules) <= set(names):
                continue
            directory, _, _ = cache_dir_for(Path(spec.store_dir), provider)
        except Exception:  # noqa: BLE001  a guess at what to import early, no more: the stage reports the error in its place
            continue  # (e.g. a fine-tuned model not trained yet, or a model folder that is missing)
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
    from retbench.tasks.stages.prepare import check_inputs

    from retbench.tasks.store.output_folder import live_run

    check_inputs(spec)  # refused before any stage: a missing dataset, a filter on an unknown field
    run_id = run_id or str(uuid.uuid4())
    # The run writes into a staging folder and publishes it whole at its end (tasks/store/output_folder.py):
    # a stop or crash anywhere leaves the previous run's outputs or this one's, never a mix.
    with local_store(spec) as spec, live_run(spec.output_dir, spec.name, run_id) as staging:
        return _run(spec, staging, selection, spec_path, runner or Runner(), run_id, make_provider, on_published)


def _run(final_spec, staging, selection, spec_path, runner, run_id, make_provider, on_published) -> PipelineResult:
    from retbench.tasks.reporting import tables as report
    from retbench.tasks.reporting.manifest import build_manifest
    from retbench.tasks.stages.index import plan_indexes
    from retbench.tasks.config.variants import RAW_QUERIES
    from retbench.tasks.stages.variants import plan_settings
    from retbench.tasks.store.output_folder import publish, rebased

    started = time.perf_counter()
    output_dir = Path(final_spec.output_dir)
    spec = final_spec.model_copy(update={"output_dir": type(final_spec.output_dir)(staging)})  # every stage writes there
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
        from retbench.tasks.stages.finetune_step import trained_spec

        active = [trained_spec(p, tuned[p.name]) if p.name in tuned else p for p in active]
    if not reaches("embed"):
        active = []
    mine = [s for s in settings if s.provider in {p.name for p in active}]
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
    produced = Produced(spec, selection, runner, make_provider, dataset=dataset, chunks=chunks, chunk_refs=chunk_refs,
                        baseline_chunking=baseline_chunking, filters=filters, active=active, settings=mine,
                        doc_sets=doc_sets, query_sets=query_sets, embedded=embedded, tuned=tuned)
    side_stages = [unit for unit in SIDE_STAGES if unit.on(spec, selection)]
    _submit_side_stages(side_stages, "embed", produced)

    plans = {name: plan_indexes(spec.indexes.flat, spec.indexes.ivf, ref.chunks, spec.indexes.other_kinds())
             for name, ref in chunk_refs.items()}
    for plan in plans.values() if reaches("index") else ():
        for note in plan.notes:
            (log.info if note in plan.chosen else log.warning)(note)
    indexes = {key: [runner.submit("index", index_stage, doc_set, settings_, spec, forced("index", key[0]), filters,
                                   label=f"index-{doc_label[key]}-{settings_.kind}")
                     for settings_ in plans[key[1]].settings]
               for key, doc_set in doc_sets.items() if reaches("index")}
    retrieved = [runner.submit("retrieve", retrieve_stage, built, doc_sets[(s.provider, s.chunking)],
                               query_sets[(s.provider, s.query_variant)], chunk_refs[s.chunking], spec,
                               plans[s.chunking].query_grid(index_settings), forced("retrieve", s.provider),
                               label=f"retrieve-{s.label}-{index_settings.kind}", setting=s.label, filters=filters)
                 for s in mine if reaches("retrieve")
                 for index_settings, built in zip(plans[s.chunking].settings, indexes[(s.provider, s.chunking)])]
    produced.plans, produced.indexes, produced.retrieved = plans, indexes, retrieved
    _submit_side_stages(side_stages, "retrieve", produced)

    embeddings = {name: (doc.result(), query.result()) for name, (doc, query) in embedded.items()}
    built = {name: [b.result() for b in indexes[(name, baseline_chunking)]] for name in embedded if indexes}
    variant_indexes = [b.result() for key, builds in indexes.items() if key[1] != baseline_chunking for b in builds]
    runs = [run for group in retrieved for run in group.result()]
    system_runs = _systems(spec, selection, runner, runs, chunks, dataset) if selection.stage == "score" else []
    produced.runs, produced.system_runs, produced.embeddings, produced.built = runs, system_runs, embeddings, built
    sweep_results = produced.results_of("ann-sweep")

    tables = produced.tables
    if reaches("score"):
        pairs = [((s.system, s.index, s.nprobe), base) for s in system_runs for base in s.inputs]
        flats = sorted({(r.provider, r.index, r.nprobe) for r in runs if r.index == "flat"})
        pairs += [((s.system, s.index, s.nprobe), flat) for s in system_runs if s.kind == "bm25" for flat in flats]
        tables |= runner.submit("score", score_stage, runs + system_runs, dataset, spec,
                                produced.results_of("buried-answers"), pairs).result()
    for unit in side_stages:  # their tables, in the declared order
        if unit.write is not None:
            tables |= unit.written(unit.write(produced))
    all_embeddings = [d.result() for d in doc_sets.values()] + [q.result() for q in query_sets.values()]
    all_indexes = [i for group in built.values() for i in group] + variant_indexes
    final_tables = {name: rebased(path, staging, output_dir) for name, path in tables.items()}  # once published
    manifest = build_manifest(final_spec, spec_path or "", selection.stage, sorted(targeted), selection.force, dataset, chunks,
                              all_embeddings, all_indexes, runs, final_tables, time.perf_counter() - started, sweep_results,
                              index_notes=[n for plan in plans.values() for n in plan.notes], systems=system_runs)
    manifest["run"]["orchestrator"] = runner.orchestrator
    manifest["run"]["id"] = run_id  # every table published with this manifest carries it too
    manifest["truncation"] = [row for rows in produced.results_of("clipping") for row in rows]
    manifest["data_audit"] = runner.submit("score", data_audit_stage, dataset, spec, tables.get("runs"),
                                           label="data-audit").result()
    if len(chunk_refs) > 1 or spec.queries.variants:
        manifest["variants"] = {
            "chunking": {name: {"chunks": ref.chunks, "file": Path(ref.path).name} for name, ref in chunk_refs.items()},
            "query_variants": [v.name for v in spec.queries.variants],
            "settings": [s.label for s in mine],
        }
    if tuned:
        from retbench.tasks.providers.fingerprint import full_fingerprint
        from retbench.tasks.stages.finetune_step import trained_spec

        manifest["providers"] |= {p.name: full_fingerprint(default_provider(trained_spec(p, tuned[p.name])))
                                  for p in spec.providers if p.name in tuned}
        manifest["finetuned"] = {name: {"base": m.base, "source_split": m.source_split, "folder": m.path, "key": m.key,
                                        "triples": m.triples,
                                        "hyperparameters": m.hyperparameters, "train_seconds": m.train_seconds,
                                        "peak_rss_mb": m.peak_rss_mb, "trained_now": m.computed}
                                 for name, m in tuned.items()}
    if not reaches("score"):
        _keep_tables_of_the_last_full_run(manifest, output_dir)
    report.write_manifest(spec.output_dir, manifest)
    published = None
    try:
        if reaches("score"):
            sections = tuple(unit.report for unit in side_stages if unit.report is not None)
            published = runner.submit("report", report_stage, spec, run_id, sections).result()
        if stop_requested():  # asked during the report (or the last stage): nothing of this run is published
            raise Interrupted.before(f"publishing into {output_dir} (it keeps the previous run's outputs)")
        publish(staging, output_dir, run_id, replaces_all=reaches("score"))
    except BaseException:
        if reaches("score") and spec.history.enabled:  # the report stage recorded the run: take it back
            from retbench.tasks.analysis.history import withdraw_run

            withdraw_run(spec.store_dir, run_id, manifest)
        raise
    if published is not None:
        published = _rebased_published(published, staging, output_dir)
        if on_published is not None:
            on_published(published)
        if published.regressions and spec.history.fail_on_regression:
            raise RegressionError(f"{published.regressions} regression(s); see {published.regressions_path}")
    texts = manifest["texts"]
    log.info(f"stage {selection.stage}: embedded {texts['embedded']} texts, {texts['from_cache']} served from cache; "
             f"output in {output_dir}")
    return PipelineResult(output_dir=str(output_dir), manifest=manifest, embeddings=all_embeddings, tables=final_tables)


def _rebased_published(published, staging: Path, output_dir: Path):
    """The report stage's record with its paths where publishing put the files."""
    import dataclasses

    from retbench.tasks.store.output_folder import rebased

    return dataclasses.replace(published, html=rebased(published.html, staging, output_dir),
                               markdown=rebased(published.markdown, staging, output_dir),
                               regressions_path=published.regressions_path and rebased(published.regressions_path,
                                                                                        staging, output_dir))


def _submit_side_stages(side_stages: list, phase: str, produced: Produced) -> None:
    """Submit the calls of the side stages that follow the main stage `phase`, in the declared order."""
    for unit in side_stages:
        if unit.after == phase and unit.call is not None:
            produced.submitted[unit.name] = unit.call(produced)


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
    """BM25 first stages, then every `systems:` entry, each as one stage call, in dependency order
    (a system after the systems it reads); a system's stages are runs of this pipeline (dense
    settings, BM25) or of another system."""
    from retbench.tasks.config.setting import system_settings
    from retbench.tasks.config.systems import system_order
    from retbench.tasks.stages.systems import stage_input

    store, depth = str(spec.store_dir), spec.depth
    lexical = [runner.submit("systems", system_stage, "bm25", entry, chunks, dataset, store, depth,
                             selection.forced("retrieve"), label=f"bm25-{entry.name}").result() for entry in spec.lexical]
    rerankers = {r.name: r for r in spec.rerankers}
    available = {f"bm25:{s.system}": s for s in lexical}  # reference -> the run that answers it
    made = list(lexical)
    for system in system_order(list(spec.systems)):
        inputs = [stage_input(reference, runs, available) for _, reference in system.references]
        settings = system_settings(system, [i.setting for i in inputs])
        if system.fusion is not None:
            made.append(runner.submit("systems", system_stage, "hybrid", system, settings[0], inputs,
                                      dataset, store, depth, label=f"hybrid-{system.name}").result())
            inputs = [made[-1].as_input]
        if system.rerank is not None:
            made.append(runner.submit("systems", system_stage, "rerank", system, rerankers[system.rerank], settings[-1],
                                      inputs[0], chunks, dataset, store, selection.forced("retrieve"),
                                      label=f"rerank-{system.name}").result())
        elif system.fusion is None:
            made.append(runner.submit("systems", system_stage, "rename", system, settings[-1], inputs[0], store,
                                      label=f"system-{system.name}").result())
        available[system.name] = made[-1]
    return made


@contextmanager
def local_store(spec: BenchmarkSpec) -> Iterator[BenchmarkSpec]:
    """The spec itself for a local store; for an object store, the spec pointed at a local
    scratch folder attached to it: objects are fetched when a stage asks for them and
    uploaded as they are written (tasks/store/remote.py), nothing is mirrored whole."""
    from retbench.tasks.store.remote import display_uri, is_remote, scratch_for

    if not is_remote(spec.store_dir):
        yield spec
        return
    scratch = scratch_for(spec.store_dir, spec.store_mirror)
    log.info(f"store {display_uri(spec.store_dir)}: working through the scratch folder {scratch} "
             f"(Dask workers on other machines: set RETBENCH_OBJECT_STORES as in this process)")
    yield spec.model_copy(update={"store_dir": str(scratch)})
