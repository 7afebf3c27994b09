"""A self-contained HTML report and its Markdown twin, built from a run's tables.

The HTML makes no network request: plots are PNGs inside the page as data: URLs,
the style is inline, there is no script, and a Content-Security-Policy forbids
loading anything else. Every piece of user text (queries, titles, ids) is escaped.
"""
from __future__ import annotations

import base64
import html
import io
from pathlib import Path

import polars as pl

from tasks.store.files import write_text

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
STYLE = """
body{font-family:system-ui,sans-serif;margin:2rem;color:#222;max-width:75rem}
table{border-collapse:collapse;margin:0.5rem 0 1.5rem;font-size:0.85rem}
th,td{border:1px solid #ccc;padding:0.2rem 0.5rem;text-align:left}
th{background:#f0f0f0} td.num{text-align:right;font-variant-numeric:tabular-nums}
.bad{color:#b00020;font-weight:bold} img{max-width:100%}
"""
MAX_ROWS = 200


def _read(output_dir: Path, name: str) -> pl.DataFrame | None:
    path = output_dir / f"{name}.parquet"
    return pl.read_parquet(path) if path.exists() else None


def _fmt(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


def html_table(frame: pl.DataFrame, max_rows: int = MAX_ROWS) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    rows = []
    for row in frame.head(max_rows).iter_rows():
        cells = "".join(
            f'<td class="num">{html.escape(_fmt(v))}</td>' if isinstance(v, (int, float)) and not isinstance(v, bool)
            else f"<td>{html.escape(_fmt(v))}</td>" for v in row)
        rows.append(f"<tr>{cells}</tr>")
    more = f"<p>{frame.height - max_rows} more rows in the Parquet table.</p>" if frame.height > max_rows else ""
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>{more}"


def md_escape(text: str) -> str:
    """Escape Markdown and inline HTML in a table cell."""
    text = html.escape(text, quote=False).replace("\n", " ").replace("\r", " ")
    for ch in "\\`*_{}[]()#+!|~":
        text = text.replace(ch, "\\" + ch)
    return text


def md_table(frame: pl.DataFrame, max_rows: int = MAX_ROWS) -> str:
    lines = ["| " + " | ".join(md_escape(str(c)) for c in frame.columns) + " |",
             "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(md_escape(_fmt(v)) for v in row) + " |" for row in frame.head(max_rows).iter_rows()]
    return "\n".join(lines)


def _png(figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(figure)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _setting(frame: pl.DataFrame) -> pl.Expr:
    return pl.concat_str([pl.col("provider"), pl.col("index"), pl.col("nprobe").cast(pl.String).fill_null("exact")], separator="/")


def summary_wide(summary: pl.DataFrame) -> pl.DataFrame:
    return (summary.pivot(on="measure", index=["provider", "index", "nprobe", "queries"], values="value")
            .sort(["provider", "index", "nprobe"], nulls_last=False))


def language_heatmap(breakdown: pl.DataFrame, measure: str):
    rows = breakdown.filter((pl.col("slice_kind") == "language_pair") & (pl.col("measure") == measure))
    if rows.is_empty():
        return None, None
    wide = rows.with_columns(setting=_setting(rows)).pivot(on="slice", index="setting", values="mean").sort("setting")
    plt = _pyplot()
    pairs = wide.columns[1:]
    values = wide.select(pairs).to_numpy()
    figure, axis = plt.subplots(figsize=(1.2 + 1.1 * len(pairs), 0.6 + 0.4 * wide.height))
    image = axis.imshow(values, cmap="RdYlGn", vmin=0, vmax=1, aspect="auto")
    axis.set_xticks(range(len(pairs)), pairs)
    axis.set_yticks(range(wide.height), wide["setting"].to_list())
    for i in range(values.shape[0]):
        for j in range(values.shape[1]):
            if values[i, j] == values[i, j]:
                axis.text(j, i, f"{values[i, j]:.2f}", ha="center", va="center", fontsize=8)
    figure.colorbar(image, ax=axis, label=measure)
    axis.set_title(f"{measure} by language pair (query -> document)")
    return _png(figure), wide


def trend_plot(trend: pl.DataFrame, measure: str):
    if trend is None or trend.height < 1:
        return None
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(8, 3.5))
    for column in trend.columns[3:]:
        axis.plot(trend["finished_at"].to_list(), trend[column].to_list(), marker="o", label=column)
    axis.set_ylabel(measure)
    axis.set_title(f"{measure} per run")
    axis.legend(fontsize=7, loc="best")
    figure.autofmt_xdate()
    return _png(figure)


def cost_quality_plot(cost: pl.DataFrame, summary: pl.DataFrame, measure: str):
    if cost is None or cost.is_empty() or "usd_per_1k_queries" not in cost.columns:
        return None
    quality = summary.filter((pl.col("index") == "flat") & (pl.col("measure") == measure)).select("provider", "value")
    joined = cost.join(quality, on="provider", how="inner")
    if joined.is_empty():
        return None
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(6, 3.5))
    axis.scatter(joined["corpus_usd"].to_list(), joined["value"].to_list())
    for provider, x, y in joined.select("provider", "corpus_usd", "value").iter_rows():
        axis.annotate(provider, (x, y), fontsize=8)
    axis.set_xlabel("cost to embed the corpus (USD)")
    axis.set_ylabel(f"{measure} (flat)")
    axis.set_title("cost vs quality")
    return _png(figure)


def latency_plot(latency: pl.DataFrame):
    if latency is None or latency.is_empty():
        return None
    rows = latency.filter(pl.col("concurrency") == 1) if "concurrency" in latency.columns else latency
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(6, 3.5))
    for (provider,), group in rows.sort("batch_size").group_by("provider", maintain_order=True):
        axis.plot(group["batch_size"].to_list(), group["texts_per_second"].to_list(), marker="o", label=str(provider))
    axis.set_xscale("log")
    axis.set_xlabel("batch size")
    axis.set_ylabel("texts / second")
    axis.legend(fontsize=8)
    axis.set_title("throughput by batch size")
    return _png(figure)


def build_report(output_dir: str | Path, title: str, trend: pl.DataFrame | None = None,
                 regressions: pl.DataFrame | None = None, measure: str = "ndcg@10") -> tuple[Path, Path]:
    """Write report.html and report.md from the tables in `output_dir`; returns both paths."""
    output_dir = Path(output_dir)
    summary = _read(output_dir, "summary")
    if summary is None:
        raise FileNotFoundError(f"{output_dir / 'summary.parquet'} not found: run the score stage first")
    sections: list[tuple[str, str | None, pl.DataFrame | None, str]] = []  # (heading, png, table, note)

    sections.append(("Summary", None, summary_wide(summary), "Means over queries; nprobe empty = exact search."))
    if regressions is not None and not regressions.is_empty():
        flagged = regressions.filter(pl.col("regression"))
        note = f"{flagged.height} regression(s): the 95% interval of the paired difference lies below zero." if flagged.height else "No regression."
        sections.append(("Regressions", None, flagged if flagged.height else regressions, note))
    breakdown = _read(output_dir, "breakdown")
    if breakdown is not None:
        png, wide = language_heatmap(breakdown, measure)
        if png:
            sections.append(("Language pairs", png, wide, "Query language -> language of its relevant documents."))
        categories = breakdown.filter((pl.col("slice_kind") == "category") & (pl.col("measure") == measure) & (pl.col("index") == "flat"))
        if categories.height:
            sections.append(("Categories", None, categories.select("provider", "slice", "mean", "ci_low", "ci_high", "n"), f"{measure}, exact search, 95% bootstrap intervals."))
    ann_table = _read(output_dir, "ann_vs_exact")
    if ann_table is not None and ann_table.height:
        sections.append(("Exact vs approximate", None, ann_table.filter(pl.col("measure").is_in([measure, "overlap@10", "recall@10", "mrr"])), "What the IVF index loses against flat search on the same vectors."))
    sweep = _read(output_dir, "ann_sweep")
    if sweep is not None and sweep.height:
        sections.append(("ANN sweep", None, sweep, ""))
    latency = _read(output_dir, "latency")
    if latency is not None and latency.height:
        sections.append(("Latency by batch size", latency_plot(latency), latency, ""))
    cost = _read(output_dir, "cost")
    if cost is not None and cost.height:
        sections.append(("Cost vs quality", cost_quality_plot(cost, summary, measure), cost, ""))
    if trend is not None and trend.height:
        sections.append(("Trend across runs", trend_plot(trend, measure), trend, f"{measure} of every recorded run of this spec."))
    failures = _read(output_dir, "failures")
    if failures is not None and failures.height:
        worst = failures.sort("value").head(20)
        keep = [c for c in ("provider", "index", "nprobe", "query_id", "query", "query_language", "category", "value", "first_relevant_rank", "failure_class") if c in worst.columns]
        sections.append(("Worst failures", None, worst.select(keep), "The 20 lowest-scoring queries across settings."))

    sections += variant_sections(output_dir, measure)

    html_path = write_text(output_dir / "report.html", _html(title, sections))
    md_path = write_text(output_dir / "report.md", _markdown(title, sections))
    return html_path, md_path


def variant_sections(output_dir: Path, measure: str) -> list:
    """Chunking/query variants against their baseline, buried answers and metadata filters."""
    sections = []
    variants = _read(output_dir, "variant_comparisons")
    if variants is not None and variants.height:
        overall = variants.filter(pl.col("slice_kind") == "all").drop("slice_kind", "slice")
        sections.append(("Variants vs baseline", None, overall,
                         "Chunking and query variants minus their baseline, exact search, paired 95% intervals; "
                         "per language pair and category in variant_comparisons.parquet."))
    failures = _read(output_dir, "failures")
    if failures is not None and "buried" in failures.columns:
        buried = failures.filter(pl.col("buried").fill_null(False) & (pl.col("index") == "flat"))
        if buried.height:
            if "surfaced_by" in buried.columns:
                buried = buried.with_columns(surfaced_by=pl.col("surfaced_by").list.eval(pl.format(
                    "{} #{} ({})", pl.element().struct.field("setting"), pl.element().struct.field("rank"),
                    pl.element().struct.field("chunk_id"))).list.join(", "))
            keep = [c for c in ("provider", "query_id", "category", "value", "buried_doc", "buried_chunk_rank",
                                "buried_passage_rank", "buried_passage_id", "surfaced_by") if c in buried.columns]
            sections.append(("Buried answers", None, buried.select(keep),
                             "Failing queries whose relevant document ranks beyond 10 by its chunk but within 10 by "
                             "its best 40-word passage; surfaced_by: the variants that found a relevant document."))
    filters = _read(output_dir, "filters")
    if filters is not None and filters.height:
        sections.append(("Metadata filters", None, filters.with_columns(pl.col("outside_doc_ids").list.join(", ")),
                         "Judged documents a query's filter excludes stay in the judgments and count as misses."))
    filtered_ann = _read(output_dir, "filtered_ann")
    if filtered_ann is not None and filtered_ann.height:
        sections.append(("Filtered approximate search", None, filtered_ann,
                         "Neighbour recall of filtered IVF (and post-filtered exact search) against filtered exact search."))
    return sections


def _html(title: str, sections) -> str:
    body = [f"<h1>{html.escape(title)}</h1>"]
    for heading, png, table, note in sections:
        body.append(f"<h2>{html.escape(heading)}</h2>")
        if note:
            body.append(f"<p>{html.escape(note)}</p>")
        if png:
            body.append(f'<img alt="{html.escape(heading)}" src="data:image/png;base64,{png}">')
        if table is not None:
            body.append(html_table(table))
    return (
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">"
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>"
        + "\n".join(body) + "</body></html>\n"
    )


def _markdown(title: str, sections) -> str:
    parts = [f"# {md_escape(title)}"]
    for heading, _, table, note in sections:
        parts.append(f"## {md_escape(heading)}")
        if note:
            parts.append(md_escape(note))
        if table is not None:
            parts.append(md_table(table))
    return "\n\n".join(parts) + "\n"
