"""Every stage, declared top-down: the main chain, then the side stages in the order they are
submitted and their tables written. Adding a side stage: its module, its spec section
(tasks/config/sections/), and one entry in SIDE_STAGES (docs/extending.md, "A side stage")."""
from __future__ import annotations

from pathlib import Path

import polars as pl

from retbench.tasks.stage_calls import (buried_stage, cheaper_variants_stage, chunk_stage, embed_finish_stage, embed_part_stage,
                               embed_plan_stage, filtered_ann_stage, filters_stage, finetune_stage, finetune_tables_stage,
                               index_stage, latency_stage, ledger_tables, load_dataset_stage, query_variant_stage,
                               report_stage, retrieve_stage, score_stage, search_latency_stage, sweep_stage)
from retbench.tasks.stage_calls import clipping_stage, data_audit_stage
from retbench.tasks.reporting.data_audit_section import data_audit_section
from retbench.tasks.side_stages import ladder
from retbench.tasks.stage_units import MainStage, Produced, SideStage

SCORE_TABLES = ("summary", "per_query", "breakdown", "comparisons", "failures", "ann_vs_exact", "ann_overlap_per_query",
                "runs", "settings", "variant_comparisons", "filters", "buried_answers", "setting_keys")

MAIN_STAGES = (
    MainStage("load-dataset", (load_dataset_stage,)),
    MainStage("chunk", (chunk_stage, filters_stage, query_variant_stage)),
    MainStage("finetune", (finetune_stage,)),
    MainStage("embed", (embed_plan_stage, embed_part_stage, embed_finish_stage)),
    MainStage("index", (index_stage,)),
    MainStage("retrieve", (retrieve_stage,)),
    MainStage("score", (score_stage, data_audit_stage), SCORE_TABLES,
              ("verdict", "tradeoffs", "failures", "unjudged", "slices", "ann", "variants")),
    MainStage("report", (report_stage,), (), ("regressions", "trend")),
)


# --- the side stages' calls and tables (each stage call's work is in tasks/stage_calls.py)


def _clipping(run: Produced) -> list:
    """Per provider, its baseline documents and raw queries against its input window."""
    return [run.runner.submit("embed", clipping_stage, p, run.embedded[p.name][0], run.embedded[p.name][1],
                              run.chunks.path, run.dataset.queries_path, run.make_provider, label=f"clipping-{p.name}")
            for p in run.active]


def _embeds_texts(provider) -> bool:
    """False for vectors made elsewhere (keyed by id): no model to time, no passage to embed."""
    from retbench.tasks.providers import provider_class

    return not provider_class(provider.kind).keyed_by_id


def _latency(run: Produced) -> list:
    return [run.runner.submit("latency", latency_stage, p, run.chunks.path, run.dataset, run.spec,
                              run.selection.remeasure,
                              run.make_provider, label=f"latency-{p.name}")
            for p in run.active if _embeds_texts(p)]


def _sweep(run: Produced) -> list:
    return [run.runner.submit("ann-sweep", sweep_stage, run.embedded[p.name][0], run.embedded[p.name][1], run.chunks,
                              run.dataset, run.spec, run.selection.forced("index", p.name), run.selection.remeasure,
                              label=f"ann-sweep-{p.name}")
            for p in run.active]


def _sweep_tables(run: Produced) -> dict[str, str]:
    results = run.results_of("ann-sweep")
    if not results:
        return {}
    from retbench.tasks.stages.sweep import write_sweep_tables

    return write_sweep_tables(results, Path(run.spec.output_dir))


def _search_latency(run: Produced) -> list:
    """One call per index searched by the retrieve stage (its runs: one per query-parameter set)."""
    indexed = [(s, index_settings, built) for s in run.settings
               for index_settings, built in zip(run.plans[s.chunking].settings, run.indexes[(s.provider, s.chunking)])]
    return [run.runner.submit("retrieve", search_latency_stage, group, built, run.doc_sets[(s.provider, s.chunking)],
                              run.query_sets[(s.provider, s.query_variant)], run.chunk_refs[s.chunking], run.dataset,
                              run.spec, run.filters, run.selection.remeasure, f"{s.label}-{index_settings.kind}",
                              label=f"search-latency-{s.label}-{index_settings.kind}")
            for (s, index_settings, built), group in zip(indexed, run.retrieved)]


def _search_latency_tables(run: Produced) -> dict[str, str]:
    """search_latency.parquet: the dense rows, then each BM25 stage's and hybrid's own step timed
    the same way, then every system's total (tasks/stages/search_latency.py)."""
    from retbench.tasks.reporting import tables as report
    from retbench.tasks.stages.search_latency import bm25_search_latency, fusion_latency, system_totals

    parts = [pl.read_parquet(p) for p in run.results_of("search-latency")]
    store, queries, remeasure = Path(run.spec.store_dir), run.dataset.queries_path, run.selection.remeasure
    lexical = {entry.name: entry for entry in run.spec.lexical}
    systems = {entry.name: entry for entry in run.spec.systems}
    paths = {(r.provider, r.index, r.nprobe): r.path for r in run.runs}
    paths |= {(s.system, s.index, s.nprobe): s.path for s in run.system_runs}
    for s in run.system_runs:
        if s.kind == "bm25" and s.system in lexical:
            parts.append(bm25_search_latency(s, lexical[s.system], run.spec.depth, queries, store, remeasure))
        elif s.kind == "hybrid" and s.system in systems and all(i in paths for i in s.inputs):
            parts.append(fusion_latency(s, systems[s.system].fusion, [paths[i] for i in s.inputs], queries, store,
                                        remeasure))
    if not parts:
        return {}
    table = pl.concat(parts)
    added = pl.read_parquet(run.tables["systems"]) if "systems" in run.tables else None
    return report.write_tables(Path(run.spec.output_dir), {"search_latency": system_totals(table, run.system_runs, added)})


def _buried_on(spec) -> bool:
    buried_on = spec.statistics.buried_answers
    if buried_on is None:
        buried_on = isinstance(spec.chunking, list)
    return buried_on


def _buried(run: Produced) -> list:
    """One call per provider, on its exact-search runs; the score stage joins them to the failure log."""
    label_provider = {s.label: s.provider for s in run.settings}
    return [run.runner.submit("retrieve", buried_stage, p, run.dataset,
                              [r for group in run.retrieved for r in group.result()
                               if r.index == "flat" and label_provider[r.provider] == p.name],
                              {s.label: run.query_sets[(s.provider, s.query_variant)].result()
                               for s in run.settings if s.provider == p.name},
                              run.spec, run.make_provider, label=f"buried-{p.name}")
            for p in run.active if _embeds_texts(p)]


def _filtered_ann(run: Produced) -> list:
    baseline = run.baseline_chunking
    return [run.runner.submit("retrieve", filtered_ann_stage, run.embedded[p.name][0], run.embedded[p.name][1],
                              [b.result() for b in run.indexes[(p.name, baseline)]],
                              run.plans[baseline], run.spec, label=f"filtered-ann-{p.name}")
            for p in run.active]


def _filtered_ann_tables(run: Produced) -> dict[str, str]:
    paths = run.results_of("filtered-ann")
    if not paths:
        return {}
    from retbench.tasks.reporting import tables as report

    return report.write_tables(Path(run.spec.output_dir), {"filtered_ann": pl.concat([pl.read_parquet(p) for p in paths])})


def _ledger(run: Produced) -> dict[str, str]:
    return ledger_tables(run.spec, run.dataset, run.embeddings, run.built, run.results_of("latency"))


def _systems_tables(run: Produced) -> dict[str, str]:
    if not run.system_runs:
        return {}
    from retbench.tasks.analysis.system_ledger import systems_tables
    from retbench.tasks.reporting import tables as report

    tables = run.tables
    read = lambda name: pl.read_parquet(tables[name]) if name in tables else None  # noqa: E731
    return report.write_tables(Path(run.spec.output_dir), systems_tables(
        run.system_runs, {r.name: r for r in run.spec.rerankers}, read("latency"), read("cost")))


def _finetune_tables(run: Produced) -> dict[str, str]:
    if not run.tuned:
        return {}
    return run.runner.submit("score", finetune_tables_stage, run.tuned, run.spec, run.tables["per_query"], run.dataset,
                             label="finetune-verdict").result()


def _cheaper_variants(run: Produced) -> dict[str, str]:
    if "per_query" not in run.tables or "storage" not in run.tables:
        return {}
    return cheaper_variants_stage(run.spec, run.tables)


SIDE_STAGES = [
    # Always on: texts cut at the provider's window go in the manifest (`truncation`) and the data
    # audit section, with the dataset's audit (tasks/pipeline.py).
    SideStage("clipping", "embed", _clipping, report=("unjudged", data_audit_section)),
    SideStage("latency", "embed", _latency, section="latency", runs_with="score", tables=("latency",),
              shown_in=("tables",)),  # its table is written with the ledger's
    SideStage("ann-sweep", "retrieve", _sweep, _sweep_tables, section="sweep",
              tables=("ann_sweep", "ann_lost", "ann_sweep_csv", "ann_recommendation"), shown_in=("ann",)),
    SideStage("buried-answers", "retrieve", _buried, switch=_buried_on, runs_with="score", tables=("buried_answers",),
              shown_in=("variants",)),  # its table is written by the score stage
    SideStage("filtered-ann", "retrieve", _filtered_ann, _filtered_ann_tables, section="filter_sweep",
              tables=("filtered_ann",), shown_in=("variants",)),
    SideStage("ledger", "score", write=_ledger, tables=("cost", "storage", "latency"), shown_in=("tables",)),
    SideStage("systems", "score", write=_systems_tables, tables=("systems", "rerank_cost")),
    # After the systems' table (a reranker's scoring latency); before the ladder, which ranks on it.
    SideStage("search-latency", "retrieve", _search_latency, _search_latency_tables, runs_with="score",
              tables=("search_latency",), shown_in=("tables",)),
    SideStage("finetune-tables", "score", write=_finetune_tables,
              tables=("finetune_training", "finetune_training_csv", "finetune_loss", "finetune_verdict", "finetune_verdict_csv"),
              shown_in=("finetune",)),
    SideStage("cheaper-variants", "score", write=_cheaper_variants, tables=("cheaper_variants", "cheaper_variants_csv"),
              shown_in=("cheaper",)),
    # Last: it reads every table written before it (systems, fine-tune, cheaper variants).
    SideStage("ladder", "retrieve", ladder.call, ladder.write, runs_with="score",
              tables=("ladder", "ladder_csv", "ladder_next", "ladder_unfiltered"), report=("verdict", ladder.section)),
]
