"""The report as a decision document (report.html, and report.md as its text twin): the verdict
first, then the trade-offs, regressions, failures, slices, the ANN sweep, the cost tables and the
trend.

The HTML makes no network request: plots are PNGs inside the page as data: URLs, the style is
inline, there is no script, and a Content-Security-Policy forbids loading anything else. Every
piece of user text (queries, titles, ids) is escaped.
"""
from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import polars as pl

from retbench.tasks.analysis.breakdown import paired_comparison
from retbench.tasks.analysis.cheaper import ON_TEST
from retbench.tasks.analysis.history import TREND_KEYS
from retbench.tasks.reporting import figures
from retbench.tasks.reporting.finetune_section import finetune_section
from retbench.tasks.reporting.ladder_section import ladder_paragraph
from retbench.tasks.reporting.slices_svg import categories_svg, language_matrix_svg
from retbench.tasks.reporting.trend_svg import trend_svg
from retbench.tasks.reporting.verdict_svg import quality_bars_svg, tradeoffs_svg
from retbench.tasks.reporting.verdict import (SETTING, Verdict, decide, dev_frame, fmt_bytes, label_expr, read_table, verdict_frame,
                                     verdict_sentences)
from retbench.tasks.store.files import write_text

CSP = "default-src 'none'; img-src data:; font-src data:; style-src 'unsafe-inline'"
# Latin from the system's UI font; Devanagari from the font embedded in the page when it has Hindi
# (Noto Sans Devanagari, cut to its letters), else from what Windows, macOS or Linux ship.
FONT_STACK = ('system-ui,-apple-system,"Segoe UI",Roboto,"Noto Sans","Noto Sans Devanagari","Nirmala UI",Mangal,'
              '"Kohinoor Devanagari","Devanagari Sangam MN","Lohit Devanagari",sans-serif')
STYLE = """
body{font-family:""" + FONT_STACK + """;margin:1.5rem auto;padding:0 1.5rem;color:#222;max-width:70rem;line-height:1.4}
h1{margin-bottom:0.2rem} h2{margin-top:2.2rem;border-bottom:1px solid #ddd;padding-bottom:0.2rem}
.meta{color:#666;font-size:0.85rem;margin-top:0}
.verdict{background:#f3f8f3;border-left:4px solid #1b7837;padding:0.6rem 1rem;margin:0.8rem 0}
.verdict p{margin:0.3rem 0}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;margin:0.4rem 0 1rem;font-size:0.83rem}
th,td{border:1px solid #ccc;padding:0.2rem 0.45rem;text-align:left;vertical-align:top;overflow-wrap:break-word}
th{background:#f0f0f0;white-space:nowrap} td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tr.rel td{background:#eef7ee}
.bad{color:#b00020;font-weight:bold}
figure{margin:0.6rem 0 1.4rem} figure img{max-width:100%;height:auto;display:block}
figcaption{font-size:0.85rem;color:#444;max-width:60rem}
.failure{border:1px solid #ddd;border-radius:4px;padding:0.4rem 0.8rem;margin:0.6rem 0;overflow-wrap:anywhere}
.failure .q{font-size:1rem;margin:0.2rem 0}
.small{font-size:0.8rem;color:#555}
"""
MAX_ROWS = 200
FAILURES_PER_CLASS = 5
TOP_SHOWN = 5
SNIPPET = 160
CLASS_NAMES = {"absent": "Absent: nothing relevant in the top k",
               "misranked": "Misranked: relevant documents found but ranked too low",
               "ann_lost": "Lost by ANN: exact search found a relevant document the ANN index missed"}


# --- cells and tables ----------------------------------------------------------------------


def _fmt(value, decimals: int | None = 4) -> str:
    """Numbers as text; decimals None picks the places by size (ms columns span 0.1 to 10,000)."""
    if value is None:
        return ""
    if isinstance(value, float):
        if decimals is None:
            size = abs(value)
            decimals = 0 if size >= 1000 else 1 if size >= 100 else 2 if size >= 1 else 4
        return f"{value:,.{decimals}f}"
    return str(value)


def _decimals(frame: pl.DataFrame) -> list[int | None]:
    """Places per column: 4 for scores in [0, 1] (so they line up), by size for anything larger."""
    places: list[int | None] = []
    for column, dtype in zip(frame.columns, frame.dtypes):
        if not dtype.is_float():
            places.append(0)
            continue
        top = frame[column].abs().max() if frame.height else None
        places.append(4 if top is None or top != top or top <= 1 else None)
    return places


def html_table(frame: pl.DataFrame, max_rows: int = MAX_ROWS, row_class=None) -> str:
    """An escaped table inside a box that scrolls on its own, so the page never scrolls sideways."""
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    places = _decimals(frame)
    rows = []
    for i, row in enumerate(frame.head(max_rows).iter_rows()):
        cells = "".join(
            f'<td class="num">{html.escape(_fmt(v, d))}</td>' if isinstance(v, (int, float)) and not isinstance(v, bool)
            else f"<td>{html.escape(_fmt(v, d))}</td>" for v, d in zip(row, places))
        css = row_class(i) if row_class else None
        rows.append(f'<tr class="{css}">{cells}</tr>' if css else f"<tr>{cells}</tr>")
    more = f"<p class=\"small\">{frame.height - max_rows} more rows in the Parquet table.</p>" if frame.height > max_rows else ""
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>{more}'


def md_escape(text: str) -> str:
    """Escape Markdown and inline HTML in a table cell."""
    text = html.escape(text, quote=False).replace("\n", " ").replace("\r", " ")
    for ch in "\\`*_{}[]()#+!|~":
        text = text.replace(ch, "\\" + ch)
    return text


def md_prose(text: str) -> str:
    """Escape our own sentences for Markdown: inline HTML and the characters that start emphasis,
    code or links ('(' and '+' are left alone: without '[' there is no link, and no line starts with '+')."""
    text = html.escape(text, quote=False).replace("\n", " ").replace("\r", " ")
    for ch in "\\`*_[]|~":
        text = text.replace(ch, "\\" + ch)
    return text


def md_table(frame: pl.DataFrame, max_rows: int = MAX_ROWS) -> str:
    lines = ["| " + " | ".join(md_escape(str(c)) for c in frame.columns) + " |",
             "|" + "---|" * len(frame.columns)]
    places = _decimals(frame)
    lines += ["| " + " | ".join(md_escape(_fmt(v, d)) for v, d in zip(row, places)) + " |" for row in frame.head(max_rows).iter_rows()]
    if frame.height > max_rows:
        lines.append(f"\n{frame.height - max_rows} more rows in the Parquet table.")
    return "\n".join(lines)


def trim(frame: pl.DataFrame, constant_ok: tuple[str, ...] = ()) -> pl.DataFrame:
    """Drop columns with no value in any row, and the constant ones named in `constant_ok`."""
    keep = [c for c in frame.columns if frame[c].null_count() < frame.height
            and not (c in constant_ok and frame[c].n_unique() <= 1)]
    return frame.select(keep)


def _snippet(text: str | None, limit: int = SNIPPET) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


# --- the document model: a list of blocks, rendered to HTML and to Markdown ----------------


@dataclass
class Section:
    heading: str
    anchor: str
    blocks: list = field(default_factory=list)  # ("p", text) ("html_p", escaped html) ("table", frame) ("figure", png, caption) ("raw", html, md)

    def paragraph(self, text: str) -> None:
        _p(self, text)

    def table(self, frame: pl.DataFrame, **kw) -> None:
        _table(self, frame, **kw)


def _p(section: Section, text: str) -> None:
    section.blocks.append(("p", text))


def _table(section: Section, frame: pl.DataFrame, **kw) -> None:
    section.blocks.append(("table", frame, kw))


def _figure(section: Section, png: str | None, alt: str, caption: str) -> None:
    if png:
        section.blocks.append(("figure", png, alt, caption))


def _svg_figure(section: Section, svg: str | None, caption: str) -> None:
    """An inline SVG figure (verdict_svg, trend_svg); the Markdown twin gets its caption."""
    if svg:
        section.blocks.append(("raw", f"<figure>{svg}<figcaption>{html.escape(caption)}</figcaption></figure>",
                               f"*Figure: {md_prose(caption)}*"))


# --- sections -------------------------------------------------------------------------------


def verdict_section(verdict: Verdict, output_dir: Path | None = None) -> Section:
    section = Section("Verdict", "verdict")
    section.blocks.append(("verdict", verdict_sentences(verdict)))
    ladder = ladder_paragraph(output_dir) if output_dir is not None else []
    if ladder:  # the second paragraph: which intervention to try first (section "Interventions ladder")
        section.blocks.append(("verdict", ladder))
    _table(section, verdict_frame(verdict))
    pick = verdict.as_good_and_cheaper.row["label"] if verdict.as_good_and_cheaper else None
    threshold = verdict.best["mean"] - verdict.margin.value
    queries = f"the {verdict.scope.queries} test queries" if verdict.scope.held_out else "the queries"
    caption = (f"{verdict.measure} of every setting over {queries}, with its 95% bootstrap interval. Green: the best "
               f"setting; blue: the setting as good as the best and cheaper"
               + ("" if pick else " (none qualifies in this run)")
               + f". The dotted line is the best's mean minus the margin ({verdict.margin.value:.3f}): a setting counts as "
               "'as good' only when a paired one-sided test puts its difference from the best above that line, which a "
               "bar ending right of it does not prove. Overlapping whiskers mean the data cannot tell those settings apart.")
    best = "" if verdict.no_best else verdict.best["label"]  # nothing is green when ties decide every setting
    _svg_figure(section, quality_bars_svg(verdict.settings, verdict.measure, best, pick, threshold), caption)
    return section


def tuning_section(verdict: Verdict) -> Section | None:
    """The non-test queries' results, apart from the verdict: what tuning saw."""
    frame = dev_frame(verdict)
    if frame is None:
        return None
    section = Section("Tuning evidence (not held out)", "tuning")
    split = verdict.dev["n"].max() if verdict.dev is not None else 0
    _p(section, f"Every setting on the {split} queries outside the test split, beside its test mean. Anything chosen "
                "in this run (fusion weights, fine-tuned weights, the ANN recommendation) was chosen on these queries; "
                "the verdict above uses the test queries only. A setting whose dev rank is far above its test rank "
                "was flattered by the queries it was tuned on.")
    _table(section, frame)
    return section


def tradeoff_section(verdict: Verdict, output_dir: Path, measure: str) -> Section:
    section = Section("Quality against cost, latency and size", "tradeoffs")
    drawn, panels, fronts = tradeoffs_svg(verdict.settings, measure)
    if drawn:
        unpriced = verdict.settings.filter(pl.col("usd_per_1k_queries").is_null())["label"].to_list()
        notes = [f"{title}: " + ", ".join(labels) for title, labels in fronts.items()]
        caption = ("Each grey dot is a setting; coloured markers joined by the step line are the Pareto front, the settings "
                   "no other setting beats on both quality and that cost. Anything below and to the right of the line is "
                   "dominated. Fronts: " + "; ".join(notes) + ".")
        if "USD per 1,000 queries" not in panels:
            caption += " No money panel: fewer than two settings have different prices in the spec."
        elif unpriced:
            caption += f" Not priced (left out of the money panel): {', '.join(unpriced)}."
        _svg_figure(section, drawn, caption)
    else:
        _p(section, "No trade-off plot: it needs at least two settings that differ in cost, latency or index size.")
    table = verdict.settings.select(
        setting="label", **{measure: "mean"}, ci_low="ci_low", ci_high="ci_high", queries="n",
        usd_per_1k_queries="usd_per_1k_queries", embed_p50_ms="embed_p50_ms", embed_p95_ms="embed_p95_ms",
        search_p50_ms="search_p50_ms", search_p95_ms="search_p95_ms",
        index=pl.col("index_bytes").map_elements(fmt_bytes, return_dtype=pl.String))
    _p(section, "Every setting, best first. Embedding latency: one text per call (latency profile); search latency: one "
                "query, one thread (ANN sweep); empty where not measured.")
    _table(section, trim(table))
    comparisons = read_table(output_dir, "comparisons")
    if comparisons is not None and comparisons.height:
        rows = comparisons.filter(pl.col("measure") == measure)
        queries = "the queries both answered"
        if rows.height and verdict.scope.held_out:  # the same pairs, tested again on the verdict's queries only
            rows, queries = _compared_on_split(output_dir, rows, measure, verdict.scope.split), "the test queries both answered"
        if rows.height:
            frame = pl.DataFrame({
                "a": _labels(rows, "a_"), "b": _labels(rows, "b_"),
            }).with_columns(rows.select("n", "mean_a", "mean_b", "diff", "ci_low", "ci_high", "p_value"))
            _p(section, f"Paired comparisons on {measure} (a - b over {queries}; 95% paired bootstrap "
                        f"interval; p from a sign-flip randomisation test). A difference is significant when p < 0.05 "
                        f"and the interval excludes 0.")
            _table(section, frame.sort("p_value"))
    return section


def _compared_on_split(output_dir: Path, pairs: pl.DataFrame, measure: str, split: str) -> pl.DataFrame:
    """comparisons.parquet's pairs (computed over every query) compared over one split's queries."""
    per_query = read_table(output_dir, "per_query").filter((pl.col("split") == split) & (pl.col("measure") == measure))
    out = [paired_comparison(per_query, a, b) for a, b in (
        ((r["a_provider"], r["a_index"], r["a_nprobe"]), (r["b_provider"], r["b_index"], r["b_nprobe"]))
        for r in pairs.iter_rows(named=True))]
    return pl.concat(out)


def _labels(rows: pl.DataFrame, prefix: str) -> pl.Series:
    named = rows.select(provider=f"{prefix}provider", index=f"{prefix}index", nprobe=f"{prefix}nprobe")
    return named.select(label_expr().alias("label"))["label"]


def regressions_section(regressions: pl.DataFrame | None) -> Section:
    section = Section("Regressions", "regressions")
    if regressions is None or regressions.is_empty():
        _p(section, "No earlier run of this spec to compare with.")
        return section
    # Rows without a measure are notes: why a run was not compared with (the data changed, ...).
    for status in regressions.filter(pl.col("measure").is_null())["status"].to_list():
        _p(section, status[0].upper() + status[1:] + ".")
    compared = regressions.filter(pl.col("measure").is_not_null())
    if compared.is_empty():
        return section
    tested = compared.filter(pl.col("status") == "tested")
    too_few = compared.filter(pl.col("status") != "tested")
    flagged = tested.filter(pl.col("regression")).sort("diff")
    against = ", ".join(f"{a} run {r}" for a, r in compared.select("against", "reference_run_id").unique(maintain_order=True).rows())
    if too_few.height:
        _p(section, f"{too_few.height} setting x measure pair(s) were not tested: {too_few['status'][0]} "
                    f"(history.min_queries); such a pair is never flagged.")
    if tested.height:
        alpha = tested["alpha"][0]
        flips = sorted(set(tested["permutations"]))
        flips = f"{flips[-1]} sign flips" + (f" where the step-down reached, {flips[0]} elsewhere" if len(flips) > 1 else "")
        method = f"Holm's correction over the {tested['tests'][0]} tests of this run, two-sided paired sign-flip test with {flips}"
    if flagged.is_empty():
        if tested.height:
            _p(section, f"No regression against the {against}: no setting got significantly worse on "
                        f"{', '.join(sorted(set(tested['measure'])))} (alpha {alpha:.3g}; {method}).")
        return section
    _p(section, f"{flagged.height} regression(s) against the {against}, worst first: each has a p value below {alpha:.3g} "
                f"after {method}, and a {1 - alpha:.0%} interval of the paired difference (current - reference) wholly "
                f"below zero.")
    _table(section, flagged.select(
        "against", "setting", "params", "measure", "reference", "current", "diff", "ci_low", "ci_high", "p_value", "p_adjusted", "n"))
    return section


def _documents_lookup(texts: pl.DataFrame | None) -> dict[str, tuple[str, str]]:
    if texts is None:
        return {}
    return {chunk: (title or "", text or "") for chunk, title, text in texts.select("chunk_id", "title", "text").iter_rows()}


def _failure_card(row: dict, lookup: dict, measure: str, primary: float | None) -> tuple[str, str]:
    """One failing query as HTML and as Markdown."""
    facts = [f"language {row['query_language'] or '?'}", f"category {row['category'] or '?'}",
             f"first relevant rank {row['first_relevant_rank'] if row['first_relevant_rank'] is not None else 'none retrieved'}"]
    if row.get("exact_first_relevant_rank") is not None:
        facts.append(f"under exact search {row['exact_first_relevant_rank']}")
    facts.append(f"{row['relevant_judged']} relevant judged")
    score = f"{measure} {primary:.3f}" if primary is not None else f"{row['measure']} {row['value']:.3f}"
    setting = label_expr_py(row)
    hits = []
    for hit in (row["top_k"] or [])[:TOP_SHOWN]:
        title, text = lookup.get(hit["chunk_id"], ("", ""))
        shown = _snippet(title, 80) + (" — " if title and text else "") + _snippet(text, SNIPPET - min(len(title), 80))
        grade = "unjudged" if hit["grade"] is None else str(hit["grade"])
        hits.append((hit["rank"], _snippet(hit["doc_id"], 40), shown or "(no text)", hit["score"], grade, bool(hit["relevant"])))
    frame = pl.DataFrame(hits, schema={"rank": pl.Int64, "doc": pl.String, "title / snippet": pl.String,
                                       "score": pl.Float64, "grade": pl.String, "_rel": pl.Boolean}, orient="row")
    relevant = frame["_rel"].to_list()
    query_id = _snippet(row["query_id"], 80)
    head = (f"<p><b>{html.escape(query_id)}</b> · {html.escape(setting)} · {html.escape(score)} · "
            + " · ".join(html.escape(f) for f in facts) + "</p>")
    body = (f'<div class="failure">{head}<p class="q">{html.escape(_snippet(row["query_text"], 400))}</p>'
            + html_table(frame.drop("_rel"), row_class=lambda i: "rel" if relevant[i] else None) + "</div>")
    md = (f"**{md_escape(query_id)}** · {md_escape(setting)} · {md_escape(score)} · "
          + " · ".join(md_escape(f) for f in facts) + f"\n\n> {md_escape(_snippet(row['query_text'], 400))}\n\n"
          + md_table(frame.drop("_rel")))
    return body, md


def label_expr_py(row: dict) -> str:
    return f"{row['provider']} {row['index']}" + ("" if row["nprobe"] is None else f" nprobe={row['nprobe']}")


def failures_section(output_dir: Path, verdict: Verdict, texts: pl.DataFrame | None) -> Section:
    section = Section("Where it fails", "failures")
    failures = read_table(output_dir, "failures")
    if failures is None or failures.is_empty():
        _p(section, "No query scored below the failure threshold.")
        return section
    measure = verdict.measure
    per_query = read_table(output_dir, "per_query")
    if per_query is not None:
        primary = per_query.filter(pl.col("measure") == measure).select(*SETTING, "query_id", primary="value")
        failures = failures.join(primary, on=[*SETTING, "query_id"], how="left", nulls_equal=True)
    else:
        failures = failures.with_columns(primary=pl.lit(None, pl.Float64))
    threshold_measure = failures["measure"][0]
    counts = (failures.with_columns(setting=label_expr()).group_by("setting", "failure_class").agg(pl.len())
              .pivot(on="failure_class", index="setting", values="len").fill_null(0))
    order = verdict.settings["label"].to_list()
    for name in ("absent", "misranked", "ann_lost"):
        if name not in counts.columns:
            counts = counts.with_columns(pl.lit(0, pl.UInt32).alias(name))
    counts = (counts.with_columns(total=pl.col("absent") + pl.col("misranked") + pl.col("ann_lost"),
                                  _order=pl.col("setting").replace_strict({l: i for i, l in enumerate(order)}, default=len(order)))
              .sort("_order").drop("_order").select("setting", "absent", "misranked", "ann_lost", "total")
              .rename({"ann_lost": "lost by ANN"}))
    _p(section, f"Failing queries per setting and class (a query fails when its {threshold_measure} is below the "
                f"failure threshold), best setting first.")
    _table(section, counts)
    best = verdict.best
    is_best = (pl.col("provider") == best["provider"]) & (pl.col("index") == best["index"]) & pl.col("nprobe").eq_missing(best["nprobe"])
    lookup = _documents_lookup(texts)
    groups = [(cls, failures.filter(is_best & (pl.col("failure_class") == cls))) for cls in ("absent", "misranked")]
    lost = failures.filter((pl.col("failure_class") == "ann_lost") & (pl.col("provider") == best["provider"]))
    if lost.is_empty():
        lost = failures.filter(pl.col("failure_class") == "ann_lost")
    groups.append(("ann_lost", lost.sort("primary", nulls_last=True).unique("query_id", keep="first", maintain_order=True)))
    _p(section, f"The worst queries of the best setting ({best['label']}) by {measure}, grouped by why they fail; "
                f"for 'lost by ANN', the worst queries an approximate index of the same provider lost. Top {TOP_SHOWN} "
                f"hits each; green rows are relevant, grade 'unjudged' means no judgment exists for that document.")
    for cls, rows in groups:
        if rows.is_empty():
            continue
        rows = rows.sort("primary", nulls_last=True)
        cards = [_failure_card(r, lookup, measure, r["primary"]) for r in rows.head(FAILURES_PER_CLASS).iter_rows(named=True)]
        section.blocks.append(("h3", f"{CLASS_NAMES[cls]} ({rows.height} {'queries' if rows.height != 1 else 'query'}"
                                     f"{', worst ' + str(len(cards)) + ' shown' if rows.height > len(cards) else ''})"))
        for body, md in cards:
            section.blocks.append(("raw", body, md))
    return section


def slices_section(output_dir: Path, verdict: Verdict) -> Section | None:
    breakdown = read_table(output_dir, "breakdown")
    if breakdown is None:
        return None
    measure = verdict.measure
    if breakdown.filter(pl.col("slice_kind").is_in(["language_pair", "category"]) & (pl.col("measure") == measure)).is_empty():
        return None
    section = Section("Languages and categories", "slices")
    # Exact (or non-ANN) settings only: ANN losses have their own section.
    exact = verdict.settings.filter(pl.col("nprobe").is_null())["label"].to_list() or verdict.settings["label"].to_list()
    shown = exact[:8]
    pairs = breakdown.filter((pl.col("slice_kind") == "language_pair") & (pl.col("measure") == measure))["slice"].n_unique()
    matrix = language_matrix_svg(breakdown, measure, shown)
    _svg_figure(section, matrix,
                f"{measure} by language pair (query language -> language of its relevant documents), one row per "
                f"exact-search setting; n is the number of queries in the cell. Red cells are where a model collapses "
                f"on a language.")
    if matrix is None:
        _p(section, f"{'One language pair' if pairs == 1 else 'No language pair'} in this data set: no language matrix.")
    _svg_figure(section, categories_svg(breakdown, measure, shown[:6]),
            f"{measure} per query category with 95% intervals, for the {'top ' + str(min(6, len(shown))) + ' ' if len(shown) > 1 else ''}"
            f"exact-search setting{'s' if len(shown) > 1 else ''}. A category whose interval sits left of the "
            f"others is a weakness; wide intervals mean few queries.")
    return section


def ann_section(output_dir: Path, measure: str) -> Section | None:
    sweep = read_table(output_dir, "ann_sweep")
    ann = read_table(output_dir, "ann_vs_exact")
    if (sweep is None or sweep.is_empty()) and (ann is None or ann.is_empty()):
        return None
    section = Section("Approximate search", "ann")
    recommendation_path = output_dir / "ann_recommendation.json"
    recommendations = json.loads(recommendation_path.read_text()) if recommendation_path.exists() else {}
    if sweep is not None and sweep.height:
        _figure(section, figures.sweep_plot(sweep, recommendations.get("recommendations", {})), "recall against speed",
                "Neighbour recall (share of exact search's top k that the index returns) against batched queries per "
                "second, log scale, per provider; one line per built index, the star is exact search. Red ring: the "
                "recommended setting, the fastest whose quality loss stays within the sweep's budget (on the dev "
                "queries when the data has a held-out split; its loss on the test queries is then checked apart).")
        for line in recommendations.get("lines", []):
            _p(section, "Recommended: " + line)
    if ann is not None and ann.height:
        wide = (ann.filter(pl.col("measure").is_in([measure, "overlap@10"]))
                .with_columns(setting=label_expr())
                .pivot(on="measure", index="setting", values=["exact", "approximate", "delta"]))
        keep = ["setting"] + [c for c in wide.columns if c != "setting" and wide[c].null_count() < wide.height
                              and not c.startswith("exact_overlap")]
        _p(section, f"What the IVF settings of the run lose against exact search on the same vectors ({measure}; "
                    f"overlap@10 = share of exact search's top 10 kept).")
        _table(section, wide.select(keep))
    return section


COST_COLUMNS = ("provider", "kind", "usd_per_million_tokens", "price_date", "token_source", "corpus_tokens", "corpus_usd",
                "query_tokens", "usd_per_1000_queries", "usd_this_run", "usd_saved_by_cache", "projected_documents", "projected_usd")
COST_HEADERS = {"usd_per_million_tokens": "$ / 1M tokens", "price_date": "price date", "token_source": "tokens by",
                "corpus_tokens": "corpus tokens", "corpus_usd": "corpus $", "query_tokens": "query tokens",
                "usd_per_1000_queries": "$ / 1k queries", "usd_this_run": "$ this run", "usd_saved_by_cache": "$ saved by cache",
                "projected_documents": "projected docs", "projected_usd": "projected $"}
LATENCY_COLUMNS = ("provider", "batch_size", "concurrency", "texts_per_second", "p50_ms", "p95_ms", "p99_ms")


def tables_section(output_dir: Path) -> Section | None:
    section = Section("Cost, latency and storage", "tables")
    cost = read_table(output_dir, "cost")
    if cost is not None and cost.height:
        frame = trim(cost.select([c for c in COST_COLUMNS if c in cost.columns]))
        frame = frame.rename({k: v for k, v in COST_HEADERS.items() if k in frame.columns})
        _p(section, "Cost ledger (columns without a value in any row left out; all of them are in cost.parquet). "
                    "Tokens are counted by the provider's usage, its tokenizer, or estimated ('tokens by').")
        _table(section, frame)
    latency = read_table(output_dir, "latency")
    if latency is not None and latency.height:
        frame = trim(latency.select([c for c in LATENCY_COLUMNS if c in latency.columns]), constant_ok=("concurrency",))
        _p(section, "Embedding latency by batch size: texts per second and per-call percentiles (ms).")
        _table(section, frame.sort([c for c in ("provider", "batch_size", "concurrency") if c in frame.columns]))
    storage = read_table(output_dir, "storage")
    if storage is not None and storage.height:
        frame = storage.select(
            "provider", "index", "vectors", "dim",
            raw_vectors=pl.col("raw_vector_bytes").map_elements(fmt_bytes, return_dtype=pl.String),
            index_size=pl.col("index_bytes").map_elements(fmt_bytes, return_dtype=pl.String),
            bytes_per_vector="index_bytes_per_vector")
        _p(section, "Storage: raw float32 vectors and each index file as measured on disk.")
        _table(section, trim(frame))
    return section if section.blocks else None


def cheaper_section(output_dir: Path, measure: str) -> Section | None:
    """The cheaper_variants table, when the spec has something cheaper than a full model at its
    flat index: a truncated or other-engine variant, or a compressed index."""
    table = read_table(output_dir, "cheaper_variants")
    if table is None or f"delta_{measure}" not in table.columns:
        return None
    if table.filter((pl.col("change") != "full") | (pl.col("index") != "flat")).height == 0:
        return None
    section = Section("Cheaper variants", "cheaper")
    projected = table["projected_vectors"].drop_nulls()
    if projected.len():
        size, size_note = pl.col("projected_index_bytes"), f"the index projected to {projected[0]:,} vectors"
        size_heading = f"index at {projected[0]:,}"
    else:
        size, size_note, size_heading = pl.col("index_bytes"), "the index file", "index size"
    as_bytes = lambda column: column.map_elements(fmt_bytes, return_dtype=pl.String)  # noqa: E731
    frame = table.select(
        "provider", "change", "index",
        pl.when(pl.col("index_params") != "{}").then(pl.col("index_params")).alias("index params"), "dim",
        pl.col("bytes_per_vector").alias("bytes/vector"), as_bytes(size).alias(size_heading),
        as_bytes(pl.when(pl.col("projected_rescore_bytes") > 0).then(pl.col("projected_rescore_bytes"))).alias("rescore vectors"),
        pl.col("texts_per_second_vs_full").alias("speed vs full"),
        pl.col(measure), pl.col(f"delta_{measure}").alias("delta"),
        pl.col(f"delta_{measure}_ci_low").alias("ci low"), pl.col(f"delta_{measure}_ci_high").alias("ci high"),
        pl.col("delta_basis").alias("delta from"))
    _p(section, f"Each provider and compressed index beside its full version: bytes per vector, {size_note} (and the "
                f"float vectors a rescoring index keeps beside it), encoding speed against the full model (when the "
                f"engine changed), and {measure} with its change against the full version (95% paired interval where "
                f"the queries pair up; a compressed index's from the ANN sweep, against its own exact search at the sweep's "
                f"depth). Every measure is in cheaper_variants.parquet."
                + (f" Values whose basis ends in '{ON_TEST[2:]}' are on the {int(table['delta_queries'].max())} "
                   f"held-out test queries only."
                   if "delta_basis" in table.columns and table["delta_basis"].str.ends_with(ON_TEST).any() else ""))
    _table(section, trim(frame, constant_ok=("index",)))
    return section


def trend_section(trend: pl.DataFrame | None, measure: str) -> Section | None:
    if trend is None or trend.height < 2:
        return None
    section = Section("Trend across runs", "trend")
    caption = (f"{measure} of every recorded run of this spec, oldest left, one line per setting (settings with identical "
               f"values share a line and a legend entry).")
    _svg_figure(section, trend_svg(trend, measure), caption)
    # Settings down, the last runs across: a table that stays narrow however many settings there are.
    latest = trend.tail(6)
    series = [c for c in trend.columns if c not in TREND_KEYS]
    first = trend.height - latest.height
    heads = [f"#{first + i + 1} {str(t)[:16].replace('T', ' ')}" for i, t in enumerate(latest["finished_at"].to_list())]
    table = pl.DataFrame({"setting": series, **{h: [latest[c][i] for c in series] for i, h in enumerate(heads)}})
    _p(section, f"The last {latest.height} runs (run ids in the history table of the store).")
    if "series" in trend.columns and trend["series"].n_unique() > 1:
        starts = trend.with_row_index("at").filter(pl.col("series") != pl.col("series").shift(1).fill_null(-1))
        _p(section, "The data changed between runs; values compare only within a series: " + "; ".join(
            f"series {s} from run #{at + 1} on dataset {d}" for at, s, d in starts.select("at", "series", "dataset").rows()) + ".")
    _table(section, table)
    return section


# --- the page -------------------------------------------------------------------------------


def _meta(output_dir: Path) -> str:
    path = output_dir / "manifest.json"
    if not path.exists():
        return ""
    manifest = json.loads(path.read_text())
    dataset, run = manifest.get("dataset", {}), manifest.get("run", {})
    parts = [f"data set {dataset.get('name', '?')}: {dataset.get('documents', '?')} documents, {dataset.get('queries', '?')} queries, "
             f"{dataset.get('judgments', '?')} judgments"]
    if run.get("finished_at"):
        parts.append(f"finished {str(run['finished_at'])[:19].replace('T', ' ')} UTC")
    if run.get("git_commit"):
        parts.append(f"commit {str(run['git_commit'])[:10]}")
    return " · ".join(parts)


def unjudged_queries(output_dir: Path) -> list[str]:
    """Ids of the queries the dataset loader dropped for having no judgments (from manifest.json)."""
    path = Path(output_dir) / "manifest.json"
    if not path.exists():
        return []
    return list((json.loads(path.read_text(encoding="utf-8")).get("dataset") or {}).get("unjudged_queries") or [])


def unjudged_section(output_dir: Path) -> Section | None:
    unjudged = unjudged_queries(output_dir)
    if not unjudged:
        return None
    section = Section("Queries not scored", "unjudged")
    _p(section, f"{len(unjudged)} queries of the chosen split have no judgments: they are left out of every measure.")
    _table(section, pl.DataFrame({"query_id": unjudged}))
    return section


@dataclass(frozen=True)
class ReportInputs:
    """What a section builder reads besides the tables in `output_dir`."""

    output_dir: Path
    measure: str
    verdict: Verdict
    trend: pl.DataFrame | None = None
    regressions: pl.DataFrame | None = None
    texts: pl.DataFrame | None = None


# The report's own sections in page order, by name; a side stage's section (tasks/stage_list.py)
# is placed after one of these names. A builder returns a Section, a list of them, or None.
SECTIONS = (
    ("verdict", lambda r: verdict_section(r.verdict, r.output_dir)),
    ("tradeoffs", lambda r: tradeoff_section(r.verdict, r.output_dir, r.measure)),
    ("tuning", lambda r: tuning_section(r.verdict)),
    ("regressions", lambda r: regressions_section(r.regressions)),
    ("failures", lambda r: failures_section(r.output_dir, r.verdict, r.texts)),
    ("unjudged", lambda r: unjudged_section(r.output_dir)),
    ("slices", lambda r: slices_section(r.output_dir, r.verdict)),
    ("ann", lambda r: ann_section(r.output_dir, r.measure)),
    ("cheaper", lambda r: cheaper_section(r.output_dir, r.measure)),
    ("tables", lambda r: tables_section(r.output_dir)),
    ("trend", lambda r: trend_section(r.trend, r.measure)),
    ("variants", lambda r: variant_sections(r.output_dir, r.measure)),
    ("finetune", lambda r: finetune_section(r.output_dir, r.measure, Section, _p, _table)),
)


def section_builders(extra: Sequence[tuple[str, Callable]] = ()) -> list[Callable]:
    """SECTIONS' builders with each (after, builder) of `extra` placed after the section named
    `after` (behind the extras placed there before it)."""
    names = [name for name, _ in SECTIONS]
    unknown = sorted({after for after, _ in extra if after not in names})
    if unknown:
        raise ValueError(f"report sections placed after unknown section(s) {unknown} (expected one of {', '.join(names)})")
    return [b for name, build in SECTIONS for b in (build, *(x for after, x in extra if after == name))]


def build_report(output_dir: str | Path, title: str, trend: pl.DataFrame | None = None,
                 regressions: pl.DataFrame | None = None, measure: str = "ndcg@10",
                 texts: pl.DataFrame | None = None, verdict: Verdict | None = None,
                 extra_sections: Sequence[tuple[str, Callable]] = ()) -> tuple[Path, Path]:
    """Write report.html and report.md from the tables in `output_dir`; returns both paths.

    `texts` (chunk_id, title, text) gives the failures their titles and snippets; `extra_sections`
    are the side stages' (after, builder) pairs (see `section_builders`).
    """
    output_dir = Path(output_dir)
    verdict = verdict if verdict is not None else decide(output_dir, measure)
    inputs = ReportInputs(output_dir, measure, verdict, trend, regressions, texts)
    sections = []
    for build in section_builders(extra_sections):
        made = build(inputs)
        sections += made if isinstance(made, list) else [made]
    sections = [s for s in sections if s is not None]
    meta = _meta(output_dir)
    html_path = write_text(output_dir / "report.html", render_html(title, meta, sections))
    md_path = write_text(output_dir / "report.md", render_markdown(title, meta, sections))
    return html_path, md_path


def _variant_tables(output_dir: Path, measure: str) -> list:
    """Chunking/query variants against their baseline, buried answers and metadata filters."""
    sections = []
    variants = read_table(output_dir, "variant_comparisons")
    if variants is not None and variants.height:
        overall = variants.filter(pl.col("slice_kind") == "all").drop("slice_kind", "slice")
        sections.append(("Variants vs baseline", None, overall,
                         "Chunking and query variants minus their baseline, exact search, paired 95% intervals; "
                         "per language pair and category in variant_comparisons.parquet."))
    failures = read_table(output_dir, "failures")
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
    filters = read_table(output_dir, "filters")
    if filters is not None and filters.height:
        sections.append(("Metadata filters", None, filters.with_columns(pl.col("outside_doc_ids").list.join(", ")),
                         "Judged documents a query's filter excludes stay in the judgments and count as misses."))
    filtered_ann = read_table(output_dir, "filtered_ann")
    if filtered_ann is not None and filtered_ann.height:
        sections.append(("Filtered approximate search", None, filtered_ann,
                         ("Neighbour recall of filtered IVF (each nprobe), filtered HNSW (each efSearch) and post-filtered "
                          "exact search against filtered exact search; starved_queries got fewer results than it.")))
    return sections

def variant_sections(output_dir: Path, measure: str) -> list[Section]:
    """Chunking/query variants against their baseline, buried answers and metadata filters."""
    sections = []
    for heading, _, frame, note in _variant_tables(output_dir, measure):
        section = Section(heading, "".join(c if c.isalnum() else "-" for c in heading.lower()))
        _p(section, note)
        _table(section, frame)
        sections.append(section)
    return sections


def render_html(title: str, meta: str, sections: list[Section]) -> str:
    body = [f"<h1>{html.escape(title)}</h1>"]
    if meta:
        body.append(f'<p class="meta">{html.escape(meta)}</p>')
    body.append('<p class="meta">' + " · ".join(f'<a href="#{s.anchor}">{html.escape(s.heading)}</a>' for s in sections) + "</p>")
    for section in sections:
        body.append(f'<h2 id="{section.anchor}">{html.escape(section.heading)}</h2>')
        for block in section.blocks:
            kind = block[0]
            if kind == "p":
                body.append(f"<p>{html.escape(block[1])}</p>")
            elif kind == "verdict":
                body.append('<div class="verdict">' + "".join(f"<p>{html.escape(s)}</p>" for s in block[1]) + "</div>")
            elif kind == "h3":
                body.append(f"<h3>{html.escape(block[1])}</h3>")
            elif kind == "table":
                body.append(html_table(block[1], **block[2]))
            elif kind == "figure":
                _, png, alt, caption = block
                body.append(f'<figure><img alt="{html.escape(alt)}" src="data:image/png;base64,{png}">'
                            f"<figcaption>{html.escape(caption)}</figcaption></figure>")
            elif kind == "raw":
                body.append(block[1])
    text = "\n".join(body)
    return (
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        f"<title>{html.escape(title)}</title><style>{devanagari_face(title + text)}{STYLE}</style></head><body>"
        + text + "</body></html>\n"
    )


def devanagari_face(text: str) -> str:
    """An @font-face embedding the Devanagari font cut to the letters of `text`; "" without any
    (a page without Hindi carries no font). Its unicode-range keeps Latin text in the system font."""
    letters = figures.devanagari_letters(text)
    if not letters:
        return ""
    ranges = ",".join(f"U+{lo:04X}-{hi:04X}" for lo, hi in figures.DEVANAGARI_RANGES) + ",U+200C-200D,U+25CC"
    return ('@font-face{font-family:"Noto Sans Devanagari";font-display:block;'
            f'src:url(data:font/ttf;base64,{figures.devanagari_font(letters)}) format("truetype");'
            f"unicode-range:{ranges}}}\n")


def render_markdown(title: str, meta: str, sections: list[Section]) -> str:
    parts = [f"# {md_escape(title)}"]
    if meta:
        parts.append(md_escape(meta))
    parts.append("Plots are in report.html.")
    for section in sections:
        parts.append(f"## {md_escape(section.heading)}")
        for block in section.blocks:
            kind = block[0]
            if kind == "p":
                parts.append(md_prose(block[1]))
            elif kind == "verdict":
                parts.append(" ".join(md_prose(s) for s in block[1]))
            elif kind == "h3":
                parts.append(f"### {md_escape(block[1])}")
            elif kind == "table":
                parts.append(md_table(block[1]))
            elif kind == "figure":
                parts.append(f"*Figure: {md_prose(block[3])}*")
            elif kind == "raw":
                parts.append(block[2])
    return "\n\n".join(parts) + "\n"
