"""The summary's columns: every measure, in reading order (recall@k by k, mrr, ndcg@k by k, then the rest)."""
import polars as pl

from tasks.analysis.score import default_measures
from tasks.reporting.tables import summary_table_text, summary_wide


def test_console_summary_shows_every_measure_in_a_fixed_order():
    # Measures arrive in an arbitrary order (a string sort puts ndcg@10 before ndcg@5).
    measures = sorted(default_measures([20, 5, 10])) + ["map"]
    summary = pl.DataFrame({
        "provider": "minilm", "index": "flat", "nprobe": pl.Series([None] * len(measures), dtype=pl.Int64),
        "measure": measures, "value": [i / 100 for i in range(len(measures))], "queries": 7,
    })
    expected = ["recall@5", "recall@10", "recall@20", "mrr", "ndcg@5", "ndcg@10", "ndcg@20",
                "ndcg_exp@5", "ndcg_exp@10", "ndcg_exp@20", "map"]
    assert summary_wide(summary).columns == ["provider", "index", "nprobe", "queries", *expected]
    header, rule, row = summary_table_text(summary).splitlines()
    assert header.split() == ["provider", "index", "nprobe", "queries", *expected]
    value = dict(zip(measures, summary["value"]))
    assert row.split() == ["minilm", "flat", "-", "7", *[f"{value[m]:.4f}" for m in expected]]
