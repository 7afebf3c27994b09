"""The verdict's two figures as inline SVG, drawn by hand rather than by matplotlib: the quality
bars and quality against cost, latency and index size.

Both show every setting's mean, so both change whenever a score does: a judgments overlay, a
nightly run's new latencies. With matplotlib, such a rerun spent ~0.6 s importing it and ~0.3 s
laying out two PNGs, a fifth of a 3 s rescore (benchmarks/bench_judging_loop.py). Bars, whiskers,
dots and step lines need none of it. Colours are those of the other figures; text is set in the
page's font (Devanagari included, from its @font-face), as in trend_svg.
"""
from __future__ import annotations

import html
import math

import polars as pl

from retbench.tasks.reporting.figures import BEST, CHEAP, OTHER  # the other figures' colours (no matplotlib import)
from retbench.tasks.reporting.svg import CHAR, TAB10, WIDTH, cut_label, marker, nice_ticks, svg_open

def quality_bars_svg(settings: pl.DataFrame, measure: str, best: str, cheapest: str | None,
                     threshold: float | None = None) -> str | None:
    """Horizontal bars of the measure per setting, best at the top, 95% interval whiskers; a dotted
    line at `threshold` (the best's mean minus the verdict's margin). Green: `best`; blue: `cheapest`."""
    rows = settings.sort("mean", descending=True, nulls_last=True)
    if rows.is_empty():
        return None
    labels = [cut_label(str(label)) for label in rows["label"].to_list()]
    means, lows, highs = rows["mean"].to_list(), rows["ci_low"].to_list(), rows["ci_high"].to_list()
    reach = max((h if h is not None else m) for m, h in zip(means, highs) if m is not None) if any(
        m is not None for m in means) else 1.0
    ticks = nice_ticks(0.0, min(1.0, reach * 1.05) or 1.0)
    x_high = ticks[-1]
    left = min(360, max(120, CHAR * max(len(label) for label in labels) + 16))
    right, top, row = 24, 12, 26
    plot_w, plot_h = WIDTH - left - right, row * len(labels)
    height = top + plot_h + 48

    def x_at(v: float) -> float:
        return left + plot_w * max(0.0, min(v, x_high)) / x_high

    out = [svg_open(height, f"{measure} per setting", f"{measure} per setting, 95% bootstrap intervals")]
    for tick in ticks:
        x = x_at(tick)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + plot_h}" stroke="#e4e4e4"/>'
                   f'<text x="{x:.1f}" y="{top + plot_h + 16}" text-anchor="middle">{tick:g}</text>')
    for i, (label, raw, mean, low, high) in enumerate(zip(labels, rows["label"].to_list(), means, lows, highs)):
        y = top + row * i
        colour = BEST if raw == best else CHEAP if raw == cheapest else OTHER
        out.append(f'<text x="{left - 8}" y="{y + row / 2 + 4:.1f}" text-anchor="end">{html.escape(label)}</text>')
        if mean is None:
            continue
        out.append(f'<rect x="{left}" y="{y + 4}" width="{x_at(mean) - left:.1f}" height="{row - 8}" fill="{colour}">'
                   f"<title>{html.escape(str(raw))}: {mean:.4f}</title></rect>")
        if low is not None and high is not None:
            mid, a, b = y + row / 2, x_at(low), x_at(high)
            out.append(f'<path d="M{a:.1f},{mid:.1f}H{b:.1f}M{a:.1f},{mid - 4:.1f}V{mid + 4:.1f}'
                       f'M{b:.1f},{mid - 4:.1f}V{mid + 4:.1f}" stroke="#222" fill="none"/>')
    if threshold is not None and 0 <= threshold <= x_high:
        x = x_at(threshold)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + plot_h}" stroke="{BEST}" stroke-dasharray="2,3"/>')
    out.append(f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#444"/>')
    out.append(f'<text x="{left + plot_w / 2:.1f}" y="{top + plot_h + 38}" text-anchor="middle">'
               f"{html.escape(measure)} (mean over queries, 95% bootstrap interval)</text></svg>")
    return "".join(out)


def pareto_front(points: list[tuple[float, float, str]]) -> list[tuple[float, float, str]]:
    """Points (cost, quality, label) no other point beats on both (lower cost, higher quality)."""
    front, best_quality = [], float("-inf")
    for x, y, label in sorted(points, key=lambda p: (p[0], -p[1])):
        if y > best_quality:
            front.append((x, y, label))
            best_quality = y
    return front


TRADEOFFS = (
    ("usd_per_1k_queries", "USD per 1,000 queries", False),
    ("query_p95_ms", "p95 query latency (ms, embed + search)", True),
    ("index_bytes", "index size on disk", True),
)


def log_ticks(low: float, high: float) -> list[float]:
    """Powers of ten covering [low, high] (with 2 and 5 times them when fewer than three)."""
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    ticks = [10.0 ** e for e in range(first, last + 1)]
    if len(ticks) < 3:
        ticks = sorted(m * 10.0 ** e for e in range(first, last + 1) for m in (1, 2, 5))
        ticks = [t for t in ticks if t <= 10.0 ** last]
    return ticks


def _tick_text(column: str, value: float) -> str:
    if column == "index_bytes":
        from retbench.tasks.reporting.verdict import fmt_bytes

        return fmt_bytes(value)
    return f"{value:g}"


def tradeoffs_svg(settings: pl.DataFrame, measure: str) -> tuple[str | None, list[str], dict[str, list[str]]]:
    """Quality against cost, latency and index size, one panel each where at least two settings
    differ, Pareto fronts as step lines (a log axis when the costs span more than 20x, as latency
    and size usually do); returns the SVG, the panels drawn and each panel's front labels."""
    panels = [(c, t, log) for c, t, log in TRADEOFFS if c in settings.columns and settings[c].drop_nulls().n_unique() >= 2]
    if not panels:
        return None, [], {}
    rows = settings.filter(pl.col("mean").is_not_null())
    y_ticks = nice_ticks(min(rows["mean"]), max(rows["mean"]))
    y_low, y_high = y_ticks[0], y_ticks[-1]
    left, gap, top, plot_h = 64, 36, 12, 300
    panel_w = (WIDTH - left - 16 - gap * (len(panels) - 1)) / len(panels)

    def y_at(v: float) -> float:
        return top + plot_h * (1 - (v - y_low) / ((y_high - y_low) or 1))

    fronts: dict[str, list[str]] = {}
    front_labels: list[str] = []
    body: list[str] = []
    for p, (column, title, log) in enumerate(panels):
        x0 = left + p * (panel_w + gap)
        shown = rows.filter(pl.col(column).is_not_null())
        points = list(zip(shown[column].to_list(), shown["mean"].to_list(), shown["label"].to_list()))
        xs = [x for x, _, _ in points]
        use_log = log and min(xs) > 0 and max(xs) / min(xs) > 20
        ticks = log_ticks(min(xs), max(xs)) if use_log else nice_ticks(min(xs), max(xs), 4)
        lo, hi = (math.log10(ticks[0]), math.log10(ticks[-1])) if use_log else (ticks[0], ticks[-1])

        def x_at(v: float, x0=x0, lo=lo, hi=hi, use_log=use_log) -> float:
            v = math.log10(v) if use_log else v
            return x0 + panel_w * (v - lo) / ((hi - lo) or 1)

        body.append(f'<rect x="{x0:.1f}" y="{top}" width="{panel_w:.1f}" height="{plot_h}" fill="none" stroke="#444"/>')
        for tick in ticks:
            x = x_at(tick)
            body.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + plot_h}" stroke="#e4e4e4"/>'
                        f'<text x="{x:.1f}" y="{top + plot_h + 16}" text-anchor="middle" font-size="11">'
                        f"{html.escape(_tick_text(column, tick))}</text>")
        for tick in y_ticks:
            y = y_at(tick)
            body.append(f'<line x1="{x0:.1f}" x2="{x0 + panel_w:.1f}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e4e4e4"/>')
        body.append(f'<text x="{x0 + panel_w / 2:.1f}" y="{top + plot_h + 36}" text-anchor="middle">{html.escape(title)}</text>')
        front = pareto_front(points)
        fronts[title] = [label for _, _, label in front]
        steps = [f"M{x_at(front[0][0]):.1f},{y_at(front[0][1]):.1f}"]
        for (_, _, _), (x, y, _) in zip(front, front[1:]):
            steps.append(f"H{x_at(x):.1f}V{y_at(y):.1f}")
        body.append(f'<path d="{"".join(steps)}" stroke="{BEST}" fill="none"/>')
        body += [f'<circle cx="{x_at(x):.1f}" cy="{y_at(y):.1f}" r="3.5" fill="{OTHER}"><title>{html.escape(str(label))}</title></circle>'
                 for x, y, label in points]
        for x, y, label in front:
            if label not in front_labels:
                front_labels.append(label)
            i = front_labels.index(label)
            body.append(marker(i % 4, x_at(x), y_at(y), TAB10[i % 10], str(label)))
    for tick in y_ticks:
        body.append(f'<text x="{left - 6}" y="{y_at(tick) + 4:.1f}" text-anchor="end">{tick:g}</text>')
    body.append(f'<text x="14" y="{top + plot_h / 2:.1f}" text-anchor="middle" '
                f'transform="rotate(-90 14 {top + plot_h / 2:.1f})">{html.escape(measure)}</text>')
    legend_top = top + plot_h + 56
    per_line = 4
    body.append(f'<text x="{left}" y="{legend_top}" font-size="11">on a Pareto front:</text>')
    for i, label in enumerate(front_labels):
        x = left + 120 + (i % per_line) * 200
        y = legend_top + 18 * (i // per_line)
        body.append(marker(i % 4, x, y - 4, TAB10[i % 10], str(label))
                    + f'<text x="{x + 10}" y="{y}" font-size="11">{html.escape(cut_label(str(label), 28))}</text>')
    height = legend_top + 18 * math.ceil(len(front_labels) / per_line) + 8
    svg = svg_open(height, "quality against cost, latency and index size",
                f"{measure} against cost, latency and index size") + "".join(body) + "</svg>"
    return svg, [t for _, t, _ in panels], fronts
