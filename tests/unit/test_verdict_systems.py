"""The verdict's latency of BM25, hybrid and reranked settings is built from their stages'."""
import polars as pl
import pytest

from retbench.tasks.reporting.verdict import settings_table


def test_system_latency_is_the_sum_of_its_stages(tmp_path):
    settings = [("e5", "flat", None, 0.7), ("bm25", "bm25", None, 0.6), ("bm25+e5", "rrf", None, 0.75),
                ("e5+rerank", "flat+ce", None, 0.8)]
    pl.DataFrame([(p, i, n, "ndcg@10", v, 10) for p, i, n, v in settings],
                 schema={"provider": pl.String, "index": pl.String, "nprobe": pl.Int64, "measure": pl.String,
                         "value": pl.Float64, "queries": pl.Int64}, orient="row").write_parquet(tmp_path / "summary.parquet")
    pl.DataFrame({"provider": ["e5"], "batch_size": [1], "concurrency": [1], "p50_ms": [40.0], "p95_ms": [50.0]}
                 ).write_parquet(tmp_path / "latency.parquet")
    pl.DataFrame({"provider": ["e5"], "index_kind": ["flat"], "build_params": ["{}"], "query_params": ["{}"],
                  "p50_ms_single_thread": [2.0], "p95_ms_single_thread": [3.0]}).write_parquet(tmp_path / "ann_sweep.parquet")
    pl.DataFrame([
        ("bm25", "bm25", "bm25", None, None, None, None, 0.5, 0.5, 0.0),
        ("bm25+e5", "hybrid", "rrf", "bm25/bm25", "e5/flat", None, None, None, None, None),
        ("e5+rerank", "rerank", "flat+ce", "e5/flat", None, 40.0, 50.0, 100.0, 120.0, 0.25),
    ], schema={"system": pl.String, "kind": pl.String, "index": pl.String, "first": pl.String, "second": pl.String,
               "first_stage_p50_ms": pl.Float64, "first_stage_p95_ms": pl.Float64, "added_p50_ms": pl.Float64,
               "added_p95_ms": pl.Float64, "usd_per_1000_queries": pl.Float64}, orient="row"
    ).write_parquet(tmp_path / "systems.parquet")
    table = settings_table(tmp_path, "ndcg@10")
    got = {r["provider"]: (r["query_p50_ms"], r["query_p95_ms"], r["usd_per_1k_queries"]) for r in table.iter_rows(named=True)}
    assert got["e5"][:2] == pytest.approx((42.0, 53.0))
    assert got["bm25"] == pytest.approx((0.5, 0.5, 0.0))
    assert got["bm25+e5"][:2] == pytest.approx((40.0 + 2.0 + 0.5, 50.0 + 3.0 + 0.5))  # both first stages
    assert got["e5+rerank"] == pytest.approx((42.0 + 100.0, 53.0 + 120.0, 0.25))  # first stage + rerank calls


def test_system_index_bytes_are_its_stages_and_bm25_is_counted(tmp_path):
    # BM25's folder (5,000 B, counted at the stage) and e5's flat index (2,000 B): the hybrid
    # keeps both (7,000 B), the reranker its first stage's (2,000 B). A systems table from
    # before the count (no index_bytes) leaves BM25 and the hybrid unknown, never 0.
    pl.DataFrame([(p, "flat" if p == "e5" else i, None, "ndcg@10", 0.5, 10)
                  for p, i in (("e5", "flat"), ("bm25", "bm25"), ("bm25+e5", "rrf"), ("e5+rerank", "flat+ce"))],
                 schema={"provider": pl.String, "index": pl.String, "nprobe": pl.Int64, "measure": pl.String,
                         "value": pl.Float64, "queries": pl.Int64}, orient="row").write_parquet(tmp_path / "summary.parquet")
    pl.DataFrame({"provider": ["e5"], "index": ["flat"], "index_bytes": [2000]}).write_parquet(tmp_path / "storage.parquet")
    systems = pl.DataFrame([
        ("bm25", "bm25", "bm25", None, None, 0.5, 5000),
        ("bm25+e5", "hybrid", "rrf", "bm25/bm25", "e5/flat", None, None),
        ("e5+rerank", "rerank", "flat+ce", "e5/flat", None, 100.0, None),
    ], schema={"system": pl.String, "kind": pl.String, "index": pl.String, "first": pl.String, "second": pl.String,
               "added_p50_ms": pl.Float64, "index_bytes": pl.Int64}, orient="row").with_columns(
        added_p95_ms=pl.col("added_p50_ms"), usd_per_1000_queries=pl.lit(0.0))
    systems.write_parquet(tmp_path / "systems.parquet")
    sizes = dict(settings_table(tmp_path, "ndcg@10").select("provider", "index_bytes").iter_rows())
    assert sizes == {"e5": 2000, "bm25": 5000, "bm25+e5": 7000, "e5+rerank": 2000}
    systems.drop("index_bytes").write_parquet(tmp_path / "systems.parquet")
    sizes = dict(settings_table(tmp_path, "ndcg@10").select("provider", "index_bytes").iter_rows())
    assert sizes == {"e5": 2000, "bm25": None, "bm25+e5": None, "e5+rerank": 2000}
