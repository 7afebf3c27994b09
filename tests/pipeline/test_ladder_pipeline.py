"""The interventions ladder on a real run of the shipped sample data: every intervention of the
spec is a step (metadata filters paired with the baseline searched without them), and the report
carries the section (tasks/side_stages/ladder.py)."""
from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from retbench.support.paths import ROOT

# The sample's interventions with fast hashing models: a chunking variant, a query variant, another
# model, a cheaper (truncated) variant, BM25, a hybrid and a reranker; the data carries filters.
SPEC = """
name: sample-ladder
dataset: {{path: {data}, format: jsonl, split: all}}
chunking:
  - {{name: para120, strategy: paragraph, max_words: 120}}
  - {{name: sent60, strategy: sentence, max_words: 60}}
queries:
  variants:
    - {{name: rewrites, rewrite_file: {data}/rewrites.txt}}
providers:
  - {{name: grams, kind: hashing}}
  - {{name: words, kind: hashing, options: {{dim: 256, word_ngrams: 1, char_ngrams: [4, 4]}}}}
  - {{name: grams-256, kind: hashing, dimensions: 256}}
lexical:
  - name: bm25
rerankers:
  - {{name: rescore, kind: embedding-rescore, options: {{provider: hashing}}}}
systems:
  - {{name: bm25+grams, first: "bm25:bm25", second: grams/flat}}
  - {{name: grams+rescore, first: grams/flat, rerank: rescore, top_n: 20}}
indexes: {{ivf: null}}
output_dir: {out}
store_dir: {store}
"""


@pytest.fixture(scope="module")
def ladder_run(tmp_path_factory):
    from retbench.tasks.config.spec import load_spec
    from retbench.tasks.pipeline import run_pipeline

    base = tmp_path_factory.mktemp("ladder")
    spec_path = base / "spec.yaml"
    spec_path.write_text(SPEC.format(data=ROOT / "data" / "sample", out=base / "out", store=base / "store"), encoding="utf-8")
    spec = load_spec(spec_path)
    result = run_pipeline(spec, spec_path=spec_path)
    return spec, Path(result.output_dir)


def test_every_intervention_of_the_spec_is_a_step_in_the_seed_order(ladder_run):
    _, out = ladder_run
    ladder = pl.read_parquet(out / "ladder.parquet")
    assert ladder.select("kind", "setting").rows() == [
        ("chunking", "grams@sent60/flat"), ("filters", "grams/flat"), ("query", "grams+rewrites/flat"),
        ("model", "words/flat"), ("model", "bm25:bm25"), ("hybrid", "bm25+grams"), ("reranker", "grams+rescore"),
        ("cheaper", "grams-256/flat")]
    assert set(ladder.filter(pl.col("kind") != "filters")["baseline"]) == {"grams/flat"}
    assert ladder.filter(pl.col("kind") == "filters")["baseline"].to_list() == ["grams/flat without filters"]
    # split: all -> every step is judged on the held-out test queries, with dev beside it
    assert (ladder["test_n"] > 0).all() and (ladder["dev_n"] > 0).all()
    assert ladder["recommended"].sum() <= 1
    assert (out / "ladder.csv").exists()
    # A query variant costs what its baseline costs; a chunking variant's index grows with its chunks.
    added = {r["kind"]: r for r in ladder.iter_rows(named=True)}
    assert added["query"]["added_index_bytes"] == 0  # (latency: no profile or sweep in this spec, so null)
    assert added["chunking"]["added_index_bytes"] > 0  # sentences of 60 words: more chunks than paragraphs of 120
    # BM25's index is counted (it was unknown, and an unknown cost was ranked costlier); the
    # hybrid keeps BM25's index beside the baseline's, so it adds exactly BM25's bytes.
    bm25_bytes = pl.read_parquet(out / "systems.parquet").filter(pl.col("kind") == "bm25")["index_bytes"].item()
    assert bm25_bytes > 0
    assert added["hybrid"]["added_index_bytes"] == bm25_bytes
    assert ladder.filter(pl.col("setting") == "bm25:bm25")["added_index_bytes"].item() is not None
    # judged@10 beside the measure for every step, and the tuning split the dev columns are over.
    assert set(ladder["judged_measure"]) == {"judged@10"}
    assert ladder["test_judged"].is_between(0, 1).all() and ladder["test_baseline_judged"].is_between(0, 1).all()
    assert ladder["tuning_split"].null_count() == 0


def test_the_filters_step_pairs_the_filtered_baseline_with_its_unfiltered_search(ladder_run):
    _, out = ladder_run
    unfiltered = pl.read_parquet(out / "ladder_unfiltered.parquet")
    per_query = pl.read_parquet(out / "per_query.parquet").filter(pl.col("setting") == "grams/flat")
    filtered_ids = set(pl.read_parquet(out / "filters.parquet")["query_id"])
    both = per_query.join(unfiltered, on=["query_id", "measure"], suffix="_unfiltered")
    changed = set(both.filter(pl.col("value") != pl.col("value_unfiltered"))["query_id"])
    assert changed and changed <= filtered_ids  # only queries with a filter can score differently


def test_the_report_has_the_ladder_after_the_verdict(ladder_run):
    _, out = ladder_run
    page = (out / "report.html").read_text(encoding="utf-8")
    assert page.index('<h2 id="verdict"') < page.index('<h2 id="ladder"') < page.index('<h2 id="tradeoffs"')
    assert "Interventions ladder: 8 step(s), each against the baseline grams/flat" in page
    markdown = (out / "report.md").read_text(encoding="utf-8")
    assert "## Interventions ladder" in markdown
    # The ladder's table in both renderings: headers in words, yes/no rather than Python's booleans.
    ladder_md = markdown[markdown.index("## Interventions ladder"):].split("\n## ")[0]
    ladder_html = page[page.index('<h2 id="ladder"'):page.index('<h2 id="tradeoffs"')]
    for shown in (ladder_md, ladder_html):
        assert "recommended" in shown and "gain on test" in shown
        assert "False" not in shown and "True" not in shown
        assert "test\\_ci\\_low" not in shown and "test_ci_low" not in shown and "added_query_p50_ms" not in shown
