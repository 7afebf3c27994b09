"""After scoring: record the run in the history, look for regressions, write the report."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from retbench.tasks.analysis import history
from retbench.tasks.reporting import figures
from retbench.tasks.reporting.html import build_report, md_escape, md_prose, md_table
from retbench.tasks.reporting.ladder_section import ladder_paragraph
from retbench.tasks.reporting.verdict import EarlierRun, decide, verdict_frame, verdict_sentences
from retbench.tasks.config.spec import BenchmarkSpec
from retbench.tasks.store.files import write_parquet


@dataclass(frozen=True)
class Published:
    html: str
    markdown: str
    regressions_path: str | None
    regressions: int
    previous_run: str | None
    baseline_run: str | None
    verdict: str = ""  # the verdict paragraph and table, Markdown
    notes: tuple[str, ...] = ()  # why a run was not compared with (the data changed, no shared setting keys)
    verdict_text: str = ""  # the verdict's paragraphs as plain text, for the log


def publish(spec: BenchmarkSpec, run_id: str, extra_sections: tuple = ()) -> Published:
    """History, regressions and the report; `extra_sections`: the side stages' report sections
    as (after, builder) pairs (tasks/reporting/html.py `section_builders`)."""
    output_dir = Path(spec.output_dir)
    manifest = json.loads((output_dir / "manifest.json").read_text())
    per_query = pl.read_parquet(output_dir / "per_query.parquet")
    summary = pl.read_parquet(output_dir / "summary.parquet")
    store = spec.store_dir
    settings = spec.history
    per_query, summary = with_setting_keys(output_dir, per_query), with_setting_keys(output_dir, summary)

    stats = spec.statistics
    found = history.regression_check(
        store, spec.name, run_id, manifest["dataset"]["content_hash"], per_query, settings.measures,
        previous=settings.enabled, baseline=settings.baseline_run, min_queries=settings.min_queries,
        alpha=1 - stats.confidence, resamples=stats.resamples, permutations=stats.permutations, seed=stats.seed,
        level=stats.confidence, current=history.stamp_of(manifest))
    regressions_path = str(write_parquet(found, output_dir / "regressions.parquet")) if found is not None else None

    # The previous run, read before this one is recorded: the verdict compares each setting's judged@k with it.
    previous = (history.previous_with_reason(store, spec.name, run_id, manifest["dataset"]["content_hash"],
                                             history.stamp_of(manifest)) if settings.enabled else None)
    earlier = None if previous is None else EarlierRun(*previous, history.per_query_of(store, previous[0]))
    if settings.enabled:
        history.append_run(store, run_id, manifest, summary, per_query)
    measure = spec.primary_measure
    trend = history.trend_table(store, spec.name, measure) if settings.enabled else None
    note = (f"Ranked by {measure}: report.primary_measure is not set, so nDCG at the spec's cutoff nearest 10 "
            f"(k: {spec.k})." if spec.primary_measure_defaulted else None)
    verdict = decide(output_dir, measure, spec.verdict, spec.sweep.loss_budget if spec.sweep else None, note, earlier)
    write_parquet(verdict.assessment(), output_dir / "verdict.parquet")
    with figures.cached_in(store):
        html_path, md_path = build_report(output_dir, f"retbench: {spec.name}", trend=trend, regressions=found,
                                          measure=measure, texts=report_texts(manifest), verdict=verdict,
                                          extra_sections=extra_sections)
    paragraphs = [p for p in (verdict_sentences(verdict), ladder_paragraph(output_dir)) if p]
    return Published(
        html=str(html_path), markdown=str(md_path), regressions_path=regressions_path,
        regressions=0 if found is None else found.filter(pl.col("regression")).height,
        previous_run=history.compared_with(found, "previous"), baseline_run=history.compared_with(found, "baseline"),
        notes=() if found is None else tuple(found.filter(pl.col("measure").is_null())["status"].to_list()),
        verdict="\n\n".join(" ".join(md_prose(s) for s in paragraph) for paragraph in paragraphs)
        + "\n\n" + md_table(verdict_frame(verdict)),
        verdict_text="\n\n".join(" ".join(paragraph) for paragraph in paragraphs),
    )


def with_setting_keys(output_dir: Path, table: pl.DataFrame) -> pl.DataFrame:
    """`table` with the `setting_key` of each (setting, params) from setting_keys.parquet; as it
    is when that table is missing (then no setting of this run pairs with a later run's)."""
    path = output_dir / "setting_keys.parquet"
    if not path.exists() or "setting" not in table.columns or "setting_key" in table.columns:
        return table
    keys = pl.read_parquet(path).sort("setting_key").unique(["setting", "params"], keep="first")
    return table.join(keys, on=["setting", "params"], how="left", nulls_equal=True, maintain_order="left")


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
    elif published.previous_run or published.baseline_run:
        parts.append("No regression against the earlier run(s).")
    parts += [md_prose(n[0].upper() + n[1:] + ".") for n in published.notes]
    parts.append(f"Full report: [{md_escape(published.html)}]({Path(published.html).resolve().as_uri()}) "
                 f"(Markdown twin: `{published.markdown}`)")
    return "\n\n".join(parts)


def regressions_markdown(published: Published) -> str:
    if published.regressions_path is None:
        return "No earlier run of this spec to compare with."
    table = pl.read_parquet(published.regressions_path)
    notes = [md_prose(n[0].upper() + n[1:] + ".") for n in published.notes]
    tested = table.filter(pl.col("measure").is_not_null())
    flagged = tested.filter(pl.col("regression"))
    if flagged.is_empty():
        against = sorted(set(tested["against"]))
        parts = [f"No regression against {', '.join(against)} run(s)."] if against else []
        return "\n\n".join([*parts, *notes])
    from retbench.tasks.reporting.html import md_table

    return "\n\n".join([f"**{flagged.height} regression(s)**", *notes, md_table(
        flagged.select("against", "setting", "params", "measure", "n", "reference", "current", "diff", "ci_low", "ci_high",
                       "p_value", "p_adjusted"))])
