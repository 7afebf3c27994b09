"""Search latency without an ANN sweep (issue 32 item 0): every setting of a run with no `sweep:`
section has a search p50 measured one test query at a time, the settings table adds it to the
embed latency, and the ladder ranks on the sum; a cached rerun reads the stored figures."""
from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from retbench.support.paths import ROOT

SPEC = """
name: search-latency
dataset: {{path: "{data}", format: jsonl, split: all}}
chunking: {{strategy: paragraph, max_words: 120}}
providers:
  - {{name: hashing, kind: hashing, options: {{dim: 256}}}}
  - {{name: wide, kind: hashing, options: {{dim: 512}}}}
lexical:
  - {{name: bm25}}
systems:
  - {{name: hybrid, first: "bm25:bm25", second: hashing/flat}}
indexes: {{flat: true, ivf: {{nlist: 4, nprobe: [1, 2]}}}}
latency: {{batch_sizes: [1], iterations: 1, texts: 20}}
k: [5, 10]
depth: 50
output_dir: "{out}"
store_dir: "{store}"
history: {{enabled: false}}
statistics: {{resamples: 50, permutations: 50}}
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from retbench.tasks.config.spec import load_spec
    from retbench.tasks.pipeline import run_pipeline

    base = tmp_path_factory.mktemp("search-latency")
    path = base / "spec.yaml"
    path.write_text(SPEC.format(data=ROOT / "data" / "sample", out=base / "out", store=base / "store"), encoding="utf-8")
    spec = load_spec(path)
    result = run_pipeline(spec, spec_path=path)
    return spec, path, Path(result.output_dir)


def test_every_setting_has_a_search_p50_without_a_sweep(run):
    from retbench.tasks.reporting.settings_table import settings_table

    _, _, out = run
    assert not (out / "ann_sweep").exists()
    measured = pl.read_parquet(out / "search_latency.parquet")
    dense = measured.filter(pl.col("kind") == "dense")
    assert set(dense.select("provider", "index", "nprobe").rows()) >= {
        ("hashing", "flat", None), ("hashing", "ivf", 1), ("hashing", "ivf", 2), ("wide", "flat", None)}
    assert set(measured["query_split"].drop_nulls()) == {"test"}
    assert set(measured.filter(pl.col("kind") != "system")["queries"]) == {55}  # the sample's test queries, under the cap
    table = settings_table(out, "ndcg@10")
    got = {(r["provider"], r["index"], r["nprobe"]): r for r in table.iter_rows(named=True)}
    for key in [("hashing", "flat", None), ("hashing", "ivf", 1), ("bm25", "bm25", None), ("hybrid", "rrf", None)]:
        row = got[key]
        assert row["search_p50_ms"] is not None and row["search_p50_ms"] > 0, key
        assert row["query_p50_ms"] == pytest.approx(row["embed_p50_ms"] + row["search_p50_ms"]), key
    fusion = measured.filter(pl.col("kind") == "fusion").row(0, named=True)
    bm25 = measured.filter(pl.col("kind") == "bm25").row(0, named=True)
    flat = dense.filter((pl.col("provider") == "hashing") & (pl.col("index") == "flat")).row(0, named=True)
    # The hybrid searches both its stages and fuses them.
    assert got[("hybrid", "rrf", None)]["search_p50_ms"] == pytest.approx(
        bm25["search_p50_ms"] + flat["search_p50_ms"] + fusion["search_p50_ms"])
    # ... and its row in search_latency says the same (the filtered flat search, as served).
    total = measured.filter(pl.col("kind") == "system").row(0, named=True)
    assert total["search_p50_ms"] == pytest.approx(got[("hybrid", "rrf", None)]["search_p50_ms"])


def test_the_ladder_ranks_on_the_measured_latency(run):
    _, _, out = run
    ladder = pl.read_parquet(out / "ladder.parquet")
    assert ladder.height >= 3
    assert ladder["added_query_p50_ms"].null_count() == 0, ladder.select("setting", "added_query_p50_ms")


def test_a_cached_rerun_does_not_time_again(run):
    from retbench.tasks.config.spec import load_spec
    from retbench.tasks.pipeline import run_pipeline

    spec, path, out = run
    store = Path(spec.store_dir) / "measurements" / "search_latency"
    before = {p.name: p.stat().st_mtime_ns for p in store.glob("*.parquet")}
    first = pl.read_parquet(out / "search_latency.parquet")
    run_pipeline(load_spec(path), spec_path=path)
    assert {p.name: p.stat().st_mtime_ns for p in store.glob("*.parquet")} == before
    assert pl.read_parquet(out / "search_latency.parquet").equals(first)
