"""The interventions ladder's side stage: the baseline searched once more without its queries'
metadata filters (so the filters step has its pair), then ladder.parquet and the report section."""
from __future__ import annotations

from pathlib import Path

import polars as pl

from retbench.tasks.config.variants import RAW_QUERIES
from retbench.tasks.reporting.ladder_section import UNFILTERED, interventions, ladder_section, write_ladder


def unfiltered_stage(built, doc_set, query_set, chunks, spec):
    """The baseline's exact search with no metadata filter (a run file of the store like any other)."""
    from retbench.tasks.stages.retrieve import retrieve

    return retrieve(built, doc_set, query_set, chunks.path, spec.depth, None, Path(spec.store_dir))


def call(run) -> list:
    """One unfiltered search of the first provider's flat index, when the dataset's queries carry filters."""
    first = run.spec.providers[0].name
    if run.filters is None or first not in {p.name for p in run.active}:
        return []
    plan = run.plans[run.baseline_chunking]
    flat = [built for settings, built in zip(plan.settings, run.indexes[(first, run.baseline_chunking)])
            if settings.kind == "flat"]
    return [run.runner.submit("retrieve", unfiltered_stage, flat[0], run.doc_sets[(first, run.baseline_chunking)],
                              run.query_sets[(first, RAW_QUERIES)], run.chunks, run.spec, label=f"ladder-unfiltered-{first}")]


def write(run) -> dict[str, str]:
    if "per_query" not in run.tables:
        return {}
    results = run.results_of("ladder")
    return write_ladder(run.spec, run.tables, _scored(run, results[0]) if results else None,
                        {name: ref.chunks for name, ref in run.chunk_refs.items()})


def _scored(run, result) -> pl.DataFrame:
    """The unfiltered run's per-query values, labelled `<baseline> without filters`."""
    from retbench.tasks.analysis.score import score_runs
    from retbench.tasks.config.measures import default_measures
    from retbench.tasks.stages.dataset import load_saved_dataset

    saved = load_saved_dataset(run.dataset.path)
    baseline, _ = interventions(run.spec, filtered=False)
    per_query = score_runs(pl.read_parquet(result.path), saved.qrels, saved.queries, default_measures(run.spec.k))
    return per_query.with_columns(setting=pl.lit(baseline + UNFILTERED), params=pl.lit("{}")).select(
        "setting", "params", *per_query.columns)


def section(inputs):
    from retbench.tasks.reporting.html import Section, _p, _svg_figure, _table

    return ladder_section(inputs.output_dir, Section, _p, _table, _svg_figure)
