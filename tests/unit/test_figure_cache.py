"""Report figures are kept in the store by what they show: a rerun with the same tables draws nothing."""
import polars as pl

from retbench.tasks.reporting import figures


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


def test_the_same_values_key_the_same_figure_however_the_frame_was_built():
    # A filter keeps polars' string views pointing into the unfiltered buffer (the removed
    # "yyy..." is still in it): its IPC bytes differed from a frame built from the kept rows,
    # and the report's settings frame came out differently on every rerun (its figures redrawn).
    long = lambda letter: letter * 20  # noqa: E731  (longer than 12 bytes: held in a buffer, not inline)
    built = pl.DataFrame({"label": [long("x"), long("z")], "mean": [0.6, 0.4]})
    filtered = pl.DataFrame({"label": [long("x"), long("y"), long("z")], "mean": [0.6, 0.5, 0.4]}).filter(pl.col("mean") != 0.5)
    pieces = pl.concat([built.head(1), built.tail(1)])  # two chunks
    assert filtered.equals(built)
    assert figures._digest(filtered) == figures._digest(built) == figures._digest(pieces)
    assert figures._digest(built.with_columns(mean=pl.lit(0.5))) != figures._digest(built)
