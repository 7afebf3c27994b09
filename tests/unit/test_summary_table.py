"""The summary's columns: every measure, in reading order (recall@k by k, mrr, ndcg@k by k, then the rest)."""
import polars as pl

from retbench.tasks.config.measures import default_measures
from retbench.tasks.reporting.tables import summary_table_text, summary_wide


def test_console_summary_shows_every_measure_in_a_fixed_order():
    # Measures arrive in an arbitrary order (a string sort puts ndcg@10 before ndcg@5).
    measures = sorted(default_measures([20, 5, 10])) + ["map"]
    summary = pl.DataFrame({
        "provider": "minilm", "index": "flat", "nprobe": pl.Series([None] * len(measures), dtype=pl.Int64),
        "measure": measures, "value": [i / 100 for i in range(len(measures))], "queries": 7,
    })
    expected = ["recall@5", "recall@10", "recall@20", "mrr", "ndcg@5", "ndcg@10", "ndcg@20",
                "ndcg_exp@5", "ndcg_exp@10", "ndcg_exp@20", "ndcg_condensed@10", "judged@10", "bpref",
                "map"]
    assert summary_wide(summary).columns == ["provider", "index", "nprobe", "queries", *expected]
    header, rule, row = summary_table_text(summary).splitlines()
    assert header.split() == ["provider", "index", "nprobe", "queries", *expected]
    value = dict(zip(measures, summary["value"]))
    assert row.split() == ["minilm", "flat", "-", "7", *[f"{value[m]:.4f}" for m in expected]]


def test_report_lists_the_queries_left_unscored(tmp_path):
    import json

    from retbench.tasks.reporting.html import build_report

    summary = pl.DataFrame({"provider": ["p"], "index": ["flat"], "nprobe": pl.Series([None], dtype=pl.Int64),
                            "measure": ["ndcg@10"], "value": [0.5], "queries": [2]})
    summary.write_parquet(tmp_path / "summary.parquet")
    (tmp_path / "manifest.json").write_text(json.dumps({"dataset": {"unjudged_queries": ["q3", "q-7"]}}))
    _, markdown = build_report(tmp_path, "t")
    text = markdown.read_text()
    assert "## Queries not scored" in text
    assert "2 queries of the chosen split have no judgments" in text
    assert "| q3 |" in text and "| q-7 |" in text
