"""The report's trend across runs as inline SVG, drawn by hand rather than by matplotlib.

It is the one figure that changes on every run (each run adds a point), so no cache can keep it,
and matplotlib's import and a PNG took ~1.5 s of a cached rerun's ~5 s. A line chart of a few
series needs none of that: lines, markers, ticks, a legend. Colours are matplotlib's tab10, as
in the other figures; text is set in the page's font (Devanagari included, from its @font-face).
"""
from __future__ import annotations

import html
import math

import polars as pl

from retbench.tasks.analysis.history import TREND_KEYS
from retbench.tasks.reporting.svg import TAB10, WIDTH, nice_ticks, svg_open

HEIGHT = 380  # px; taller when the legend needs it (18 px a line)
LEFT, RIGHT, TOP, BOTTOM = 60, 300, 16, 96  # margins in px: y labels, legend, x labels


def _label(names: list[str]) -> str:
    text = " = ".join(names) if len(names) <= 3 else f"{names[0]} and {len(names) - 1} identical"
    return text if len(text) <= 44 else text[:43] + "…"


def trend_svg(trend: pl.DataFrame | None, measure: str) -> str | None:
    """One line per setting across runs (x = runs in order, labelled by date); settings whose
    series are identical share one line and one legend entry, so no series hides behind another;
    a dotted line where the data changed (values on either side are not comparable)."""
    if trend is None or trend.height < 2:
        return None
    groups: dict[tuple, list[str]] = {}
    for column in [c for c in trend.columns if c not in TREND_KEYS]:
        key = tuple(None if v is None else round(v, 6) for v in trend[column].to_list())
        groups.setdefault(key, []).append(column)
    values = [v for key in groups for v in key if v is not None]
    if not values:
        return None
    ticks = nice_ticks(min(values), max(values))
    y_low, y_high = ticks[0], ticks[-1]
    height = max(HEIGHT, TOP + 20 + 18 * len(groups))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, height - TOP - BOTTOM
    n = trend.height

    def x_at(i: float) -> float:
        return LEFT + plot_w * (i + 0.3) / (n - 0.4)

    def y_at(v: float) -> float:
        return TOP + plot_h * (1 - (v - y_low) / (y_high - y_low))

    out = [svg_open(height, "trend", f"{measure} across runs"),
           f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#444"/>']
    for tick in ticks:
        y = y_at(tick)
        out.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>'
                   f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{tick:g}</text>')
    out.append(f'<text x="14" y="{TOP + plot_h / 2:.1f}" text-anchor="middle" transform="rotate(-90 14 {TOP + plot_h / 2:.1f})">'
               f"{html.escape(measure)}</text>")
    every = math.ceil(n / 12)  # at most 12 dates under the axis, the newest run always among them
    for i, stamp in enumerate(trend["finished_at"].to_list()):
        if (n - 1 - i) % every:
            continue
        label = f"#{i + 1} " + str(stamp)[:16].replace("T", " ")
        x, y = x_at(i), TOP + plot_h + 14
        out.append(f'<text x="{x:.1f}" y="{y}" text-anchor="end" font-size="10" transform="rotate(-20 {x:.1f} {y})">'
                   f"{html.escape(label)}</text>")
    if "series" in trend.columns:
        series = trend["series"].to_list()
        for i in [i for i in range(1, n) if series[i] != series[i - 1]]:
            x = x_at(i - 0.5)
            out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{TOP}" y2="{TOP + plot_h}" stroke="grey" stroke-dasharray="2,3"/>')
    for g, (key, names) in enumerate(groups.items()):
        colour, dash = TAB10[g % 10], "" if g < 10 else ' stroke-dasharray="6,4"'
        points = [(x_at(i), y_at(v)) for i, v in enumerate(key) if v is not None]
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5"{dash} points="'
                   + " ".join(f"{x:.1f},{y:.1f}" for x, y in points) + '"/>')
        out += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{colour}"/>' for x, y in points]
        ly = TOP + 10 + 18 * g
        out.append(f'<line x1="{WIDTH - RIGHT + 14}" x2="{WIDTH - RIGHT + 34}" y1="{ly}" y2="{ly}" stroke="{colour}" '
                   f'stroke-width="1.5"{dash}/><text x="{WIDTH - RIGHT + 40}" y="{ly + 4}">{html.escape(_label(names))}</text>')
    out.append("</svg>")
    return "".join(out)
