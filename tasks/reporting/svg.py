"""What the report's hand-drawn SVG figures share (trend_svg, verdict_svg, slices_svg and the
ladder's plot): the open tag, the colours, round tick values, labels cut to fit and markers.
Drawn without matplotlib: these figures change whenever a score or a latency does."""
from __future__ import annotations

import html
import math

TAB10 = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
WIDTH = 1000  # px: inside the page's 1100 px column
CHAR = 6.6  # px per character of 12 px text, to size the label margin


def svg_open(height: float, label: str, title: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height:.0f}" width="100%" '
            f'style="max-width:{WIDTH}px;height:auto" role="img" aria-label="{html.escape(label)}" font-size="12" '
            f'font-family="inherit"><title>{html.escape(title)}</title>')


def cut_label(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About `count` round values (1, 2 or 5 times a power of ten apart) covering [low, high]."""
    if high <= low:
        low, high = low - 0.5 if low == 0 else low * 0.95, high + 0.5 if high == 0 else high * 1.05
    raw = (high - low) / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.floor(low / step) * step
    return [round(first + i * step, 12) for i in range(int(math.ceil((high - first) / step)) + 1)]


def marker(shape: int, x: float, y: float, colour: str, label: str) -> str:
    tip = f"<title>{html.escape(label)}</title>"
    if shape == 0:
        return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="5.5" fill="{colour}">{tip}</circle>'
    if shape == 1:
        return f'<rect x="{x - 5:.1f}" y="{y - 5:.1f}" width="10" height="10" fill="{colour}">{tip}</rect>'
    if shape == 2:
        return f'<path d="M{x:.1f},{y - 7:.1f}L{x + 6:.1f},{y:.1f}L{x:.1f},{y + 7:.1f}L{x - 6:.1f},{y:.1f}Z" fill="{colour}">{tip}</path>'
    return f'<path d="M{x:.1f},{y - 7:.1f}L{x + 6.5:.1f},{y + 5:.1f}L{x - 6.5:.1f},{y + 5:.1f}Z" fill="{colour}">{tip}</path>'
