"""Report figures are kept in the store by what they show: a rerun with the same tables draws nothing."""
import polars as pl

from retbench.tasks.reporting import figures


def sweep(recall: float) -> pl.DataFrame:
    """An ANN sweep table of one provider: exact search and one IVF setting."""
    return pl.DataFrame({"provider": "a", "index_kind": ["flat", "ivf"], "build_params": ["{}", '{"nlist": 8}'],
                         "query_params": ["{}", '{"nprobe": 2}'], "neighbour_recall@10": [1.0, recall],
                         "qps_batch": [100.0, 400.0]})


def test_a_figure_is_drawn_once_per_content(tmp_path, monkeypatch):
    drawn = []
    real_png = figures._png
    monkeypatch.setattr(figures, "_png", lambda figure: drawn.append(1) or real_png(figure))
    pick = {"a": {"index_kind": "ivf", "build_params": {"nlist": 8}, "query_params": {"nprobe": 2}}}
    with figures.cached_in(tmp_path):
        first = figures.sweep_plot(sweep(0.9), pick)
        again = figures.sweep_plot(sweep(0.9), pick)
        changed = figures.sweep_plot(sweep(0.8), pick)
        unpicked = figures.sweep_plot(sweep(0.9), {})
    assert first is not None and first == again and first != changed and first != unpicked
    assert len(drawn) == 3  # the repeat was read, not drawn
    assert len(list((tmp_path / "figures").glob("*.json"))) == 3
    # Outside a cache folder every call draws.
    figures.sweep_plot(sweep(0.9), pick)
    assert len(drawn) == 4


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
