"""The language matrix, the category intervals and the ladder's plot as inline SVG: the colours
matplotlib drew them with, one cell / dot / marker per value, and data text escaped."""
import xml.etree.ElementTree as ET

import polars as pl
import pytest

from retbench.tasks.reporting.ladder_section import ladder_svg
from retbench.tasks.reporting.slices_svg import categories_svg, language_matrix_svg, rdylgn

SVG = "{http://www.w3.org/2000/svg}"


def _breakdown(kind, cells):
    """cells: (provider, slice, mean, n)."""
    return pl.DataFrame({"slice_kind": kind, "measure": "ndcg@10", "provider": [c[0] for c in cells], "index": "flat",
                         "nprobe": pl.Series([None] * len(cells), dtype=pl.Int64), "setting": None, "params": None,
                         "slice": [c[1] for c in cells], "mean": [c[2] for c in cells],
                         "ci_low": [c[2] - 0.1 for c in cells], "ci_high": [c[2] + 0.1 for c in cells],
                         "n": [c[3] for c in cells]})


@pytest.mark.parametrize("value", [0.0, 0.05, 0.31, 0.5, 0.77, 0.93, 1.0])
def test_cell_colours_are_matplotlibs_rdylgn(value):
    from matplotlib import colormaps

    theirs = [round(255 * c) for c in colormaps["RdYlGn"](value)[:3]]
    ours = [int(rdylgn(value)[k:k + 2], 16) for k in (1, 3, 5)]
    assert max(abs(a - b) for a, b in zip(theirs, ours)) <= 3  # matplotlib quantises to 256 levels


def test_the_language_matrix_has_a_cell_per_setting_and_pair_with_mean_and_n():
    cells = [("e5", "hi -> en", 0.12, 12), ("e5", "en -> en", 0.9, 86), ("<b>x</b>", "en -> en", 0.5, 86)]
    svg = language_matrix_svg(_breakdown("language_pair", cells), "ndcg@10", ["e5 flat", "<b>x</b> flat"])
    root = ET.fromstring(svg)
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert ["0.90", "n=86", "0.12", "n=12"] == [t for t in texts if t in ("0.90", "n=86", "0.12", "n=12")][:4]
    assert "<b>x</b> flat" in texts and "<b>" not in svg
    # The dark ends of the scale get white text, the middle black.
    ink = {t.text: t.get("fill") for t in root.iter(f"{SVG}text") if t.text in ("0.90", "0.12", "0.50")}
    assert ink == {"0.90": "white", "0.12": "white", "0.50": "black"}
    assert sum(1 for r in root.iter(f"{SVG}rect") if r.get("fill", "").startswith("#")) == 3  # the missing cell is empty
    assert language_matrix_svg(_breakdown("language_pair", cells[1:2]), "ndcg@10", ["e5 flat"]) is None  # one pair


def test_categories_draw_a_dot_per_setting_and_category():
    cells = [("e5", "typo", 0.6, 10), ("e5", "vague", 0.4, 8), ("bm25", "typo", 0.5, 10)]
    root = ET.fromstring(categories_svg(_breakdown("category", cells), "ndcg@10", ["e5 flat", "bm25 flat"]))
    dots = [c for c in root.iter(f"{SVG}circle") if c.find(f"{SVG}title") is not None]
    assert sorted(c.find(f"{SVG}title").text for c in dots) == [
        "bm25 flat, typo: 0.500", "e5 flat, typo: 0.600", "e5 flat, vague: 0.400"]
    assert categories_svg(_breakdown("category", cells).head(0), "ndcg@10", ["e5 flat"]) is None


def test_the_ladder_plot_marks_each_measured_step_by_its_standing():
    ladder = pl.DataFrame({"step": [1, 2, 3], "setting": ["e5/flat", "bm25+e5", "ft/flat"],
                           "intervention": ["another model", "hybrid", "fine-tuning"], "measure": "ndcg@10",
                           "added_query_p50_ms": [25.0, 29.0, None], "test_gain": [0.08, 0.06, 0.02],
                           "test_ci_low": [0.02, 0.01, -0.01], "test_ci_high": [0.15, 0.12, 0.05],
                           "recommended": [True, False, False], "test_significant": [True, True, False]})
    root = ET.fromstring(ladder_svg(ladder))
    titled = [(e.find(f"{SVG}title").text, e.get("fill")) for e in root.iter()
              if e.find(f"{SVG}title") is not None and e.tag != f"{SVG}svg"]
    # Each plotted step twice (the point and its legend entry); ft/flat has no latency: not plotted.
    assert titled == [("1. e5/flat (another model)", "#1b7837")] * 2 + [("2. bm25+e5 (hybrid)", "#2166ac")] * 2
    assert ladder_svg(ladder.with_columns(added_query_p50_ms=pl.lit(None, dtype=pl.Float64))) is None
