"""The verdict's figures as inline SVG (tasks/reporting/verdict_svg.py): well-formed, best at the
top, the right colours, hand-computed Pareto fronts, a log axis when costs span more than 20x,
and data text escaped (setting names come from the user's spec)."""
import re
import xml.etree.ElementTree as ET

import polars as pl

from retbench.tasks.reporting.verdict_svg import (BEST, CHEAP, OTHER, log_ticks, pareto_front, quality_bars_svg,
                                                  tradeoffs_svg)

SVG = "{http://www.w3.org/2000/svg}"


def settings(**extra) -> pl.DataFrame:
    return pl.DataFrame({"label": ["bm25 bm25", "<script>alert(1)</script>", "e5 flat"], "mean": [0.50, 0.40, 0.62],
                         "ci_low": [0.45, 0.30, 0.55], "ci_high": [0.55, 0.50, 0.70], **extra})


def test_bars_put_the_best_on_top_coloured_with_whiskers_and_the_margin_line():
    svg = quality_bars_svg(settings(), "ndcg@10", "e5 flat", "bm25 bm25", threshold=0.6)
    root = ET.fromstring(svg)  # well-formed, the script tag escaped into text
    labels = [t.text for t in root.iter(f"{SVG}text") if t.get("text-anchor") == "end"]
    assert labels == ["e5 flat", "bm25 bm25", "<script>alert(1)</script>"]
    assert "<script>" not in svg
    fills = [r.get("fill") for r in root.iter(f"{SVG}rect") if r.get("fill") != "none"]
    assert fills == [BEST, CHEAP, OTHER]
    # x runs 0 .. 0.8 (nice ticks over 0 .. 0.70 x 1.05): the best's bar is 0.62 / 0.8 of the plot.
    bars = [r for r in root.iter(f"{SVG}rect") if r.get("fill") == BEST]
    frame = next(r for r in root.iter(f"{SVG}rect") if r.get("fill") == "none")
    assert abs(float(bars[0].get("width")) / float(frame.get("width")) - 0.62 / 0.8) < 1e-3
    assert len([p for p in root.iter(f"{SVG}path")]) == 3  # one whisker per setting
    assert sum(1 for line in root.iter(f"{SVG}line") if line.get("stroke-dasharray")) == 1  # the margin


def test_bars_without_an_interval_or_a_mean_still_draw():
    frame = settings().with_columns(ci_low=pl.Series([None, 0.3, 0.55]), mean=pl.Series([0.5, None, 0.62]))
    root = ET.fromstring(quality_bars_svg(frame, "mrr", "e5 flat", None))
    assert len([r for r in root.iter(f"{SVG}rect") if r.get("fill") != "none"]) == 2
    assert quality_bars_svg(frame.head(0), "mrr", "", None) is None


def test_pareto_front_by_hand():
    points = [(1.0, 0.5, "a"), (2.0, 0.4, "b"), (3.0, 0.7, "c"), (3.0, 0.6, "d"), (5.0, 0.7, "e")]
    # b costs more than a and is worse; d ties c on cost and is worse; e ties c on quality at more cost.
    assert pareto_front(points) == [(1.0, 0.5, "a"), (3.0, 0.7, "c")]


def test_tradeoffs_draw_a_panel_per_axis_that_differs_with_its_front():
    frame = settings(query_p95_ms=[2.0, 50.0, 30.0], index_bytes=[1000, 1000, 1000], usd_per_1k_queries=[None, None, None])
    svg, panels, fronts = tradeoffs_svg(frame, "ndcg@10")
    assert panels == ["p95 query latency (ms, embed + search)"]  # equal sizes and no prices: no trade-off to see
    assert fronts == {"p95 query latency (ms, embed + search)": ["bm25 bm25", "e5 flat"]}
    root = ET.fromstring(svg)
    ticks = [t.text for t in root.iter(f"{SVG}text") if t.get("font-size") == "11" and t.get("text-anchor") == "middle"]
    assert ticks == ["1", "10", "100"]  # 2 .. 50 ms spans 25x: a log axis
    linear = tradeoffs_svg(frame.with_columns(query_p95_ms=pl.Series([2.0, 40.0, 30.0])), "ndcg@10")[0]
    ticks = [t.text for t in ET.fromstring(linear).iter(f"{SVG}text") if t.get("font-size") == "11" and t.get("text-anchor") == "middle"]
    assert ticks == ["0", "10", "20", "30", "40"]  # exactly 20x: linear
    assert "<script>" not in svg
    assert tradeoffs_svg(settings(query_p95_ms=[5.0, 5.0, 5.0]), "ndcg@10") == (None, [], {})


def test_log_ticks_add_twos_and_fives_within_one_decade():
    assert log_ticks(3, 40) == [1, 10, 100]
    assert log_ticks(3, 8) == [1, 2, 5, 10]
    assert log_ticks(2, 4000) == [1, 10, 100, 1000, 10000]


def test_the_report_draws_no_matplotlib_figure_for_the_verdict(tmp_path):
    # The two verdict figures are inline SVG: a report of a run whose settings changed imports no
    # matplotlib for them (it still does for the sweep, language and category figures, which change
    # only when the data or the search do).
    text = quality_bars_svg(settings(), "ndcg@10", "e5 flat", None) + tradeoffs_svg(
        settings(query_p95_ms=[2.0, 40.0, 30.0]), "ndcg@10")[0]
    assert not re.search(r"data:image/png", text)
