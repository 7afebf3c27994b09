"""Report figures are kept in the store by what they show: a rerun with the same tables draws nothing."""
import polars as pl

from tasks.reporting import figures


def settings(mean: float) -> pl.DataFrame:
    return pl.DataFrame({"label": ["a", "b"], "mean": [mean, 0.4], "ci_low": [mean - 0.1, 0.3], "ci_high": [mean + 0.1, 0.5]})


def test_a_figure_is_drawn_once_per_content(tmp_path, monkeypatch):
    drawn = []
    real_png = figures._png
    monkeypatch.setattr(figures, "_png", lambda figure: drawn.append(1) or real_png(figure))
    with figures.cached_in(tmp_path):
        first = figures.quality_bars(settings(0.6), "ndcg@10", "a", "b")
        again = figures.quality_bars(settings(0.6), "ndcg@10", "a", "b")
        changed = figures.quality_bars(settings(0.7), "ndcg@10", "a", "b")
        relabelled = figures.quality_bars(settings(0.6), "ndcg@10", "b", "b")
        panels = figures.tradeoffs(settings(0.6), "ndcg@10")
        panels_again = figures.tradeoffs(settings(0.6), "ndcg@10")
    assert first == again and first != changed and first != relabelled
    assert panels_again == panels and isinstance(panels_again, tuple)
    assert len(drawn) == 3 + (panels[0] is not None)  # the repeats were read, not drawn
    assert len(list((tmp_path / "figures").glob("*.json"))) == 4
    # Outside a cache folder every call draws.
    figures.quality_bars(settings(0.6), "ndcg@10", "a", "b")
    assert len(drawn) == 4 + (panels[0] is not None)
