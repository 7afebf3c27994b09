"""Composed systems through the shipped pipeline: a reranked hybrid (one entry, and a system
reranking another by name, written before it) and a fusion of three first stages, each a row
with its `setting` and `params` in every table."""
from __future__ import annotations

import polars as pl
import pytest

from retbench.support.paths import ROOT

SPEC = """
name: composed
dataset: {{path: "{data}", format: jsonl, split: all}}
chunking: {{strategy: paragraph, max_words: 120}}
providers:
  - {{name: hashing, kind: hashing, options: {{dim: 256}}}}
lexical:
  - {{name: bm25, tokenizer: {{stopwords: en}}}}
rerankers:
  - {{name: rescore, kind: embedding-rescore, options: {{provider: hashing, provider_options: {{dim: 512, word_ngrams: 1}}}}}}
systems:
  - {{name: hybrid+rescore, first: hybrid, rerank: rescore, top_n: 20}}
  - {{name: hybrid, first: "bm25:bm25", second: hashing/flat}}
  - {{name: inline, first: "bm25:bm25", second: hashing/flat, rerank: rescore, top_n: 20}}
  - {{name: three, inputs: ["bm25:bm25", hashing/flat, hashing/ivf]}}
indexes: {{ivf: {{nprobe: [1, 4]}}}}
k: [5, 10]
depth: 50
output_dir: "{out}"
store_dir: "{store}"
history: {{enabled: false}}
statistics: {{resamples: 20, permutations: 20}}
"""

ROWS = {  # (setting, params, provider, index, nprobe)
    ("hashing/flat", "{}", "hashing", "flat", None), ("hashing/ivf", '{"nprobe": 1}', "hashing", "ivf", 1),
    ("hashing/ivf", '{"nprobe": 4}', "hashing", "ivf", 4), ("bm25:bm25", "{}", "bm25", "bm25", None),
    ("hybrid", "{}", "hybrid", "rrf", None), ("hybrid+rescore", "{}", "hybrid+rescore", "rrf+rescore", None),
    ("inline/rrf", "{}", "inline", "rrf", None), ("inline", "{}", "inline", "rrf+rescore", None),
    ("three", "{}", "three", "rrf", None),
}


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    from retbench.tasks.config.spec import load_spec
    from retbench.tasks.pipeline import run_pipeline

    base = tmp_path_factory.mktemp("composed")
    path = base / "spec.yaml"
    path.write_text(SPEC.format(data=ROOT / "data" / "sample", out=base / "out", store=base / "store"))
    run_pipeline(load_spec(path))
    return base / "out"


def test_every_composed_system_is_a_row_with_its_setting_and_params(out):
    columns = ["setting", "params", "provider", "index", "nprobe"]
    for table in ("summary", "per_query", "breakdown", "runs", "failures"):
        frame = pl.read_parquet(out / f"{table}.parquet")
        assert frame.columns[frame.columns.index("setting"):][:5] == columns, table
        found = set(frame.select(columns).unique().rows())
        assert found == ROWS if table != "failures" else found <= ROWS, table
    systems = pl.read_parquet(out / "systems.parquet")
    assert dict(systems.select("system", "setting").rows()) == {
        "bm25": "bm25:bm25", "hybrid": "hybrid", "hybrid+rescore": "hybrid+rescore", "inline": "inline", "three": "three"}
    assert systems.filter(pl.col("system") == "hybrid+rescore")["first"].to_list() == ["hybrid/rrf"]


def test_each_system_is_compared_with_every_stage_it_reads(out):
    pairs = set(pl.read_parquet(out / "comparisons.parquet")
                .select("a_setting", "a_index", "b_setting", "b_params").unique().rows())
    assert {("three", "rrf", "bm25:bm25", "{}"), ("three", "rrf", "hashing/flat", "{}"), ("three", "rrf", "hashing/ivf", '{"nprobe": 4}'),
            ("hybrid+rescore", "rrf+rescore", "hybrid", "{}"), ("inline", "rrf+rescore", "inline/rrf", "{}")} <= pairs


def test_the_three_way_fusion_is_rrf_of_its_three_runs(out):
    from retbench.tasks.analysis.fusion import reciprocal_rank_fusion

    runs = pl.read_parquet(out / "runs.parquet")
    pick = lambda setting, params: runs.filter((pl.col("setting") == setting) & (pl.col("params") == params))  # noqa: E731
    expected = reciprocal_rank_fusion(pick("bm25:bm25", "{}"), pick("hashing/flat", "{}"), pick("hashing/ivf", '{"nprobe": 4}'),
                                      k=60, name="three", depth=50)
    three = pick("three", "{}")
    key = ["query_id", "rank", "doc_id", "chunk_id"]
    assert three.select(key).sort(key).equals(expected.select(key).sort(key))
    # Same computation, two spellings: the reranked hybrid of one entry ranks as the one that reranks a system.
    assert (pick("inline", "{}").select("query_id", "doc_id", "score").sort("query_id", "doc_id")
            .equals(pick("hybrid+rescore", "{}").select("query_id", "doc_id", "score").sort("query_id", "doc_id")))
