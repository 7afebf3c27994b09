"""The report's language-pair matrix and per-category intervals as inline SVG, drawn by hand.

Both show per-query means, so any rescore (a judgments overlay) changes them, and with matplotlib
the language matrix alone made a Cranfield rescore import it (~0.6 s of ~3 s). Cells, dots and
whiskers need none of it. The matrix's colours are ColorBrewer's RdYlGn, the 11 colours matplotlib's
"RdYlGn" interpolates between, so the cells look as they did.
"""
from __future__ import annotations

import html
import math

import polars as pl

from retbench.tasks.reporting.svg import CHAR, TAB10, WIDTH, cut_label, svg_open

RDYLGN = ("#a50026", "#d73027", "#f46d43", "#fdae61", "#fee08b", "#ffffbf", "#d9ef8b", "#a6d96a", "#66bd63",
          "#1a9850", "#006837")


def rdylgn(value: float) -> str:
    """The RdYlGn colour of `value` in [0, 1] (clipped), linear between the 11 ColorBrewer colours."""
    value = min(1.0, max(0.0, value)) * (len(RDYLGN) - 1)
    i = min(int(value), len(RDYLGN) - 2)
    t = value - i
    a, b = RDYLGN[i], RDYLGN[i + 1]
    mixed = [round(int(a[k:k + 2], 16) * (1 - t) + int(b[k:k + 2], 16) * t) for k in (1, 3, 5)]
    return "#" + "".join(f"{c:02x}" for c in mixed)


def _rows(breakdown: pl.DataFrame, kind: str, measure: str, labels: list[str]) -> pl.DataFrame:
    from retbench.tasks.reporting.verdict import label_expr

    return (breakdown.filter((pl.col("slice_kind") == kind) & (pl.col("measure") == measure))
            .with_columns(label=label_expr()).filter(pl.col("label").is_in(labels)))


def language_matrix_svg(breakdown: pl.DataFrame, measure: str, labels: list[str]) -> str | None:
    """Settings x language pairs, cells coloured by the measure (0 red, 1 green) with the mean and
    n written in; None unless there are at least two pairs."""
    rows = _rows(breakdown, "language_pair", measure, labels)
    pairs = sorted(rows["slice"].unique().to_list())
    if len(pairs) < 2:
        return None
    cells = {(label, pair): (mean, n) for label, pair, mean, n in rows.select("label", "slice", "mean", "n").iter_rows()}
    left = min(360, max(100, CHAR * max(len(cut_label(label)) for label in labels) + 16))
    cell_w, cell_h, top = min(130, (WIDTH - left - 140) / len(pairs)), 36, 12
    plot_w, plot_h = cell_w * len(pairs), cell_h * len(labels)
    longest = max(len(cut_label(p, 24)) for p in pairs)
    bar_h = max(plot_h, 120)  # the colour bar, right of the cells
    height = max(top + plot_h + 30 + CHAR * longest * 0.5 + 24, top + bar_h + 8)
    out = [svg_open(height, "language pair matrix", f"{measure} by language pair")]
    for i, label in enumerate(labels):
        y = top + cell_h * i
        out.append(f'<text x="{left - 8}" y="{y + cell_h / 2 + 4:.1f}" text-anchor="end">{html.escape(cut_label(label))}</text>')
        for j, pair in enumerate(pairs):
            if (label, pair) not in cells or cells[(label, pair)][0] is None:
                continue
            mean, n = cells[(label, pair)]
            x = left + cell_w * j
            ink = "white" if mean < 0.2 or mean > 0.85 else "black"  # the ends of RdYlGn are dark
            out.append(f'<rect x="{x:.1f}" y="{y}" width="{cell_w:.1f}" height="{cell_h}" fill="{rdylgn(mean)}"/>'
                       f'<text x="{x + cell_w / 2:.1f}" y="{y + 15}" text-anchor="middle" font-size="11" fill="{ink}">{mean:.2f}</text>'
                       f'<text x="{x + cell_w / 2:.1f}" y="{y + 29}" text-anchor="middle" font-size="11" fill="{ink}">n={n}</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{plot_w:.1f}" height="{plot_h}" fill="none" stroke="#444"/>')
    for j, pair in enumerate(pairs):
        x, y = left + cell_w * (j + 0.5), top + plot_h + 14
        out.append(f'<text x="{x:.1f}" y="{y}" text-anchor="end" font-size="11" transform="rotate(-30 {x:.1f} {y})">'
                   f"{html.escape(cut_label(pair, 24))}</text>")
    out.append(f'<text x="{left + plot_w / 2:.1f}" y="{height - 6:.0f}" text-anchor="middle">'
               "query language -&gt; language of its relevant documents</text>")
    # The colour bar: 0 at the bottom, 1 at the top.
    bar_x = left + plot_w + 24
    # Offsets must rise down the bar (SVG clamps a falling one), so the stops run from 1 (green) to 0.
    stops = "".join(f'<stop offset="{10 * i}%" stop-color="{c}"/>' for i, c in enumerate(reversed(RDYLGN)))
    out.append(f'<defs><linearGradient id="rdylgn" x1="0" y1="0" x2="0" y2="1">{stops}</linearGradient></defs>'
               f'<rect x="{bar_x:.1f}" y="{top}" width="14" height="{bar_h}" fill="url(#rdylgn)" stroke="#444"/>')
    for tick in (0, 0.2, 0.4, 0.6, 0.8, 1.0):
        y = top + bar_h * (1 - tick)
        out.append(f'<text x="{bar_x + 20:.1f}" y="{y + 4:.1f}" font-size="11">{tick:g}</text>')
    out.append(f'<text x="{bar_x + 56:.1f}" y="{top + bar_h / 2:.1f}" text-anchor="middle" '
               f'transform="rotate(-90 {bar_x + 56:.1f} {top + bar_h / 2:.1f})">{html.escape(measure)}</text></svg>')
    return "".join(out)


def categories_svg(breakdown: pl.DataFrame, measure: str, labels: list[str]) -> str | None:
    """Per category: mean and 95% interval of each setting in `labels`, dodged side by side, one
    colour per setting (named in the legend above)."""
    rows = _rows(breakdown, "category", measure, labels)
    if rows.is_empty():
        return None
    categories = sorted(rows["slice"].unique().to_list())
    left = min(300, max(100, CHAR * max(len(cut_label(c, 30)) for c in categories) + 16))
    per_line = 3
    legend_h = 18 * math.ceil(len(labels) / per_line)
    top, right, step = 12 + legend_h + 8, 24, 11
    band = step * len(labels) + 10
    plot_w, plot_h = WIDTH - left - right, band * len(categories)
    height = top + plot_h + 48

    def x_at(v: float) -> float:
        return left + plot_w * max(0.0, min(v, 1.02)) / 1.02

    out = [svg_open(height, "categories", f"{measure} per query category")]
    for s, label in enumerate(labels):
        x, y = left + (s % per_line) * 300, 16 + 18 * (s // per_line)
        out.append(f'<circle cx="{x + 5}" cy="{y - 4}" r="4" fill="{TAB10[s % 10]}"/>'
                   f'<text x="{x + 14}" y="{y}" font-size="11">{html.escape(cut_label(label))}</text>')
    for tick in (0, 0.2, 0.4, 0.6, 0.8, 1.0):
        x = x_at(tick)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + plot_h}" stroke="#e4e4e4"/>'
                   f'<text x="{x:.1f}" y="{top + plot_h + 16}" text-anchor="middle">{tick:g}</text>')
    values = {(label, c): (mean, lo, hi) for label, c, mean, lo, hi in
              rows.select("label", "slice", "mean", "ci_low", "ci_high").iter_rows()}
    for c, category in enumerate(categories):
        y0 = top + band * c
        out.append(f'<text x="{left - 8}" y="{y0 + band / 2 + 4:.1f}" text-anchor="end">{html.escape(cut_label(category, 30))}</text>')
        if c:
            out.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y0}" y2="{y0}" stroke="#ccc"/>')
        for s, label in enumerate(labels):
            if (label, category) not in values or values[(label, category)][0] is None:
                continue
            mean, lo, hi = values[(label, category)]
            y, colour = y0 + 5 + step * (s + 0.5), TAB10[s % 10]
            a, b = x_at(mean if lo is None else lo), x_at(mean if hi is None else hi)
            out.append(f'<path d="M{a:.1f},{y:.1f}H{b:.1f}M{a:.1f},{y - 3:.1f}V{y + 3:.1f}M{b:.1f},{y - 3:.1f}V{y + 3:.1f}" '
                       f'stroke="{colour}" fill="none"/><circle cx="{x_at(mean):.1f}" cy="{y:.1f}" r="4" fill="{colour}">'
                       f"<title>{html.escape(label)}, {html.escape(category)}: {mean:.3f}</title></circle>")
    out.append(f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#444"/>'
               f'<text x="{left + plot_w / 2:.1f}" y="{top + plot_h + 38}" text-anchor="middle">'
               f"{html.escape(measure)} (mean, 95% bootstrap interval)</text></svg>")
    return "".join(out)
