"""Search latency (issue 32 item 0): which queries are timed, how a system's total is made of its
parts, and how the settings table merges the ANN sweep's figures with the search latency
stage's (the sweep's win for the same setting), hand-made tables with known answers."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import polars as pl
import pytest

from retbench.tasks.reporting.settings_table import settings_table
from retbench.tasks.stages.search_latency import SCHEMA, one_at_a_time, system_totals, timed_queries


def test_the_held_out_queries_are_timed_at_most_cap_evenly(tmp_path: Path):
    ids = [f"q{i:03d}" for i in range(10)]
    path = tmp_path / "queries.parquet"
    pl.DataFrame({"query_id": ids, "split": ["dev", "test"] * 5}).write_parquet(path)
    chosen, split = timed_queries(path, ids, cap=3)
    assert split == "test" and chosen == ["q001", "q005", "q009"]  # first, middle, last of the five test queries
    everything, split = timed_queries(path, ["q000", "q002"], cap=3)  # no test query among those searched
    assert split == "all" and everything == ["q000", "q002"]


def test_warm_up_calls_are_not_timed():
    calls = []
    seconds = one_at_a_time(calls.append, ["a", "b", "c"], warmup=2)
    assert calls == ["a", "b", "a", "b", "c"] and len(seconds) == 3


def _row(provider, index, nprobe, kind, p50):
    return {"provider": provider, "index": index, "nprobe": nprobe, "kind": kind, "queries": 55, "query_split": "test",
            "warmup": 10, "search_p50_ms": p50, "search_p95_ms": None if p50 is None else 2 * p50,
            "search_p95_low": None if p50 is None else 1.5 * p50, "search_p95_high": None if p50 is None else 3 * p50,
            "note": None}


def test_a_system_total_is_its_parts_and_unknown_when_a_part_is():
    table = pl.DataFrame([_row("e5", "flat", None, "dense", 1.0), _row("bm25", "bm25", None, "bm25", 0.25),
                          _row("hybrid", "rrf", None, "fusion", 0.5)], schema=SCHEMA, orient="row")
    systems = [SimpleNamespace(kind="hybrid", system="hybrid", index="rrf", nprobe=None,
                               inputs=(("bm25", "bm25", None), ("e5", "flat", None))),
               SimpleNamespace(kind="rerank", system="rr", index="flat+ce", nprobe=None, inputs=(("e5", "flat", None),)),
               SimpleNamespace(kind="rerank", system="slow", index="flat+x", nprobe=None, inputs=(("e5", "flat", None),))]
    added = pl.DataFrame({"system": ["rr", "slow"], "added_p50_ms": [20.0, None], "added_p95_ms": [30.0, None],
                          "added_p95_ms_low": [25.0, None], "added_p95_ms_high": [40.0, None]})
    out = {r["provider"]: r for r in system_totals(table, systems, added).filter(pl.col("kind") == "system").iter_rows(named=True)}
    assert out["hybrid"]["search_p50_ms"] == pytest.approx(1.75) and out["hybrid"]["search_p95_high"] == pytest.approx(5.25)
    assert out["rr"]["search_p50_ms"] == pytest.approx(21.0) and out["rr"]["search_p95_ms"] == pytest.approx(32.0)
    assert out["slow"]["search_p50_ms"] is None and "rerank scoring (not timed)" in out["slow"]["note"]


def _output(tmp_path: Path, sweep: bool, latency: bool) -> Path:
    """A run's tables: two providers (e5 with a latency profile, bare without), flat and IVF nprobe 4."""
    settings = [("e5", "flat", None), ("e5", "ivf", 4), ("bare", "flat", None)]
    pl.DataFrame([{"provider": p, "index": i, "nprobe": n, "measure": "ndcg@10", "value": 0.5, "queries": 110}
                  for p, i, n in settings]).write_parquet(tmp_path / "summary.parquet")
    pl.DataFrame({"provider": ["e5", "e5"], "index": ["flat.faiss", "ivf_nlist-16.faiss"],
                  "index_bytes": [1000, 1200]}).write_parquet(tmp_path / "storage.parquet")
    if latency:
        pl.DataFrame({"provider": ["e5"], "batch_size": [1], "concurrency": [1], "role": ["query"], "p50_ms": [5.0],
                      "p95_ms": [8.0], "p95_ms_low": [7.0], "p95_ms_high": [9.0]}).write_parquet(tmp_path / "latency.parquet")
    measured = [_row("e5", "flat", None, "dense", 1.0), _row("e5", "ivf", 4, "dense", 0.3),
                _row("bare", "flat", None, "dense", 0.9), _row("e5", "flat", None, "dense-unfiltered", 0.1)]
    pl.DataFrame(measured, schema=SCHEMA, orient="row").write_parquet(tmp_path / "search_latency.parquet")
    if sweep:
        (tmp_path / "ann_sweep").mkdir()
        pl.DataFrame({"provider": ["e5"], "index_kind": ["ivf"], "build_params": [json.dumps({"nlist": 16})],
                      "query_params": [json.dumps({"nprobe": 4})], "p50_ms_single_thread": [0.2],
                      "p95_ms_single_thread": [0.4], "p95_ms_single_thread_low": [0.35],
                      "p95_ms_single_thread_high": [0.45]}).write_parquet(tmp_path / "ann_sweep.parquet")
    return tmp_path


def test_the_sweep_wins_for_the_setting_it_timed_and_the_stage_fills_the_rest(tmp_path):
    table = settings_table(_output(tmp_path, sweep=True, latency=True), "ndcg@10")
    got = {(r["provider"], r["index"], r["nprobe"]): r for r in table.iter_rows(named=True)}
    assert got[("e5", "ivf", 4)]["search_p50_ms"] == 0.2  # the sweep's, not the stage's 0.3
    assert got[("e5", "flat", None)]["search_p50_ms"] == 1.0  # the sweep did not time flat: the stage's
    assert got[("e5", "flat", None)]["query_p50_ms"] == pytest.approx(6.0)
    assert got[("e5", "ivf", 4)]["query_p50_ms"] == pytest.approx(5.2)


def test_without_a_sweep_every_setting_has_a_search_latency(tmp_path):
    table = settings_table(_output(tmp_path, sweep=False, latency=True), "ndcg@10")
    got = {(r["provider"], r["index"], r["nprobe"]): r for r in table.iter_rows(named=True)}
    assert got[("e5", "ivf", 4)]["search_p50_ms"] == 0.3 and got[("e5", "ivf", 4)]["query_p50_ms"] == pytest.approx(5.3)
    assert got[("e5", "ivf", 4)]["search_p95_low"] == pytest.approx(0.45)
    # No latency profile for `bare`: its search part is shown, its query latency unknown.
    bare = got[("bare", "flat", None)]
    assert bare["search_p50_ms"] == 0.9 and bare["embed_p50_ms"] is None and bare["query_p50_ms"] is None
