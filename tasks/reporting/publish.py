"""After scoring: record the run in the history, look for regressions, write the report."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from tasks.analysis import history
from tasks.reporting import figures
from tasks.reporting.html import build_report, md_escape, md_prose, md_table
from tasks.reporting.ladder_section import ladder_paragraph
from tasks.reporting.verdict import decide, verdict_frame, verdict_sentences
from tasks.config.spec import BenchmarkSpec
from tasks.store.files import write_parquet


@dataclass(frozen=True)
class Published:
    html: str
    markdown: str
    regressions_path: str | None
    regressions: int
    previous_run: str | None
    baseline_run: str | None
    verdict: str = ""  # the verdict paragraph and table, Markdown


def publish(spec: BenchmarkSpec, run_id: str, extra_sections: tuple = ()) -> Published:
    """History, regressions and the report; `extra_sections`: the side stages' report sections
    as (after, builder) pairs (tasks/reporting/html.py `section_builders`)."""
    output_dir = Path(spec.output_dir)
    manifest = json.loads((output_dir / "manifest.json").read_text())
    per_query = pl.read_parquet(output_dir / "per_query.parquet")
    summary = pl.read_parquet(output_dir / "summary.parquet")
    store = spec.store_dir
    settings = spec.history

    checks = []
    previous = history.previous_run_id(store, spec.name, run_id) if settings.enabled else None
    if previous:
        checks.append(history.regressions(per_query, history.per_query_of(store, previous), "previous", previous, settings.measures))
    baseline = settings.baseline_run
    if baseline:
        reference = history.per_query_of(store, baseline)
        if reference.is_empty():
            raise ValueError(f"history.baseline_run {baseline!r} is not in the history under {history.history_dir(store)}")
        checks.append(history.regressions(per_query, reference, "baseline", baseline, settings.measures))
    checks = [c for c in checks if not c.is_empty()]
    found = pl.concat(checks) if checks else None
    if found is not None and "setting" in per_query.columns:
        from tasks.analysis.setting_columns import with_setting_columns

        found = with_setting_columns(found, per_query.select("setting", "params", "provider", "index", "nprobe").unique())
    regressions_path = str(write_parquet(found, output_dir / "regressions.parquet")) if found is not None else None

    if settings.enabled:
        history.append_run(store, run_id, manifest, summary, per_query)
    measure = spec.primary_measure
    trend = history.trend_table(store, spec.name, measure) if settings.enabled else None
    note = (f"Ranked by {measure}: report.primary_measure is not set, so nDCG at the spec's cutoff nearest 10 "
            f"(k: {spec.k})." if spec.primary_measure_defaulted else None)
    verdict = decide(output_dir, measure, spec.verdict, spec.sweep.loss_budget if spec.sweep else None, note)
    write_parquet(verdict.assessment(), output_dir / "verdict.parquet")
    with figures.cached_in(store):
        html_path, md_path = build_report(output_dir, f"retbench: {spec.name}", trend=trend, regressions=found,
                                          measure=measure, texts=report_texts(manifest), verdict=verdict,
                                          extra_sections=extra_sections)
    return Published(
        html=str(html_path), markdown=str(md_path), regressions_path=regressions_path,
        regressions=0 if found is None else found.filter(pl.col("regression")).height,
        previous_run=previous, baseline_run=baseline,
        verdict="\n\n".join(" ".join(md_prose(s) for s in paragraph) for paragraph in
                              (verdict_sentences(verdict), ladder_paragraph(output_dir)) if paragraph)
        + "\n\n" + md_table(verdict_frame(verdict)),
    )


def report_texts(manifest: dict) -> pl.DataFrame | None:
    """chunk_id, doc_id, title, text of the run's chunks, for the failures' titles and snippets
    (read from the store paths the manifest records; None when they are gone)."""
    chunks = Path(manifest.get("chunks", {}).get("path") or "")
    corpus = Path(manifest.get("dataset", {}).get("path") or "") / "corpus.parquet"
    if not chunks.is_file() or not corpus.is_file():
        return None
    titles = pl.read_parquet(corpus, columns=["doc_id", "title"])
    return pl.read_parquet(chunks, columns=["chunk_id", "doc_id", "text"]).join(titles, on="doc_id", how="left")


def verdict_markdown(published: Published) -> str:
    """The Prefect artifact: the verdict paragraph and table, the regression line, and where the full report is."""
    parts = [published.verdict or "No verdict (the report was not built)."]
    if published.regressions:
        parts.append(f"**{published.regressions} regression(s)** against "
                     f"{', '.join(r for r in (published.previous_run, published.baseline_run) if r)}; see the report.")
    elif published.regressions_path is not None:
        parts.append("No regression against the earlier run(s).")
    parts.append(f"Full report: [{md_escape(published.html)}]({Path(published.html).resolve().as_uri()}) "
                 f"(Markdown twin: `{published.markdown}`)")
    return "\n\n".join(parts)


def regressions_markdown(published: Published) -> str:
    if published.regressions_path is None:
        return "No earlier run of this spec to compare with."
    table = pl.read_parquet(published.regressions_path)
    flagged = table.filter(pl.col("regression"))
    if flagged.is_empty():
        return f"No regression against {', '.join(sorted(set(table['against'])))} run(s)."
    from tasks.reporting.html import md_table

    return f"**{flagged.height} regression(s)**\n\n" + md_table(
        flagged.select("against", "provider", "index", "nprobe", "measure", "reference", "current", "diff", "ci_low", "ci_high"))
