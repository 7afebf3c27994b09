"""BM25, hybrid and reranked systems run through the shipped pipeline as settings in every table."""
from __future__ import annotations

import polars as pl
import pytest

from retbench.support.paths import ROOT

SPEC = """
name: systems
dataset: {{path: "{data}", format: jsonl, split: all}}
chunking: {{strategy: paragraph, max_words: 120}}
providers:
  - {{name: hashing, kind: hashing, options: {{dim: 256}}}}
lexical:
  - {{name: bm25, tokenizer: {{stopwords: en}}}}
rerankers:
  - {{name: rescore, kind: embedding-rescore, options: {{provider: hashing, provider_options: {{dim: 512, word_ngrams: 1}}}}}}
systems:
  - {{name: hybrid, first: "bm25:bm25", second: hashing/flat}}
  - {{name: tuned, first: "bm25:bm25", second: hashing/flat, fusion: {{method: score, alphas: [0.0, 0.5, 1.0]}}}}
  - {{name: reranked, first: hashing/flat, rerank: rescore, top_n: 20}}
indexes: {{ivf: null}}
k: [5, 10]
depth: 50
output_dir: "{out}"
store_dir: "{store}"
history: {{enabled: false}}
statistics: {{resamples: 50, permutations: 50}}
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from retbench.tasks.config.spec import load_spec
    from retbench.tasks.pipeline import run_pipeline

    base = tmp_path_factory.mktemp("systems")
    path = base / "spec.yaml"
    path.write_text(SPEC.format(data=ROOT / "data" / "sample", out=base / "out", store=base / "store"))
    spec = load_spec(path)
    first = run_pipeline(spec)
    second = run_pipeline(spec.model_copy(update={"output_dir": base / "out2"}))
    return base, first, second


def test_every_system_is_a_setting_in_every_table(runs):
    base, _, _ = runs
    settings = {("hashing", "flat"), ("bm25", "bm25"), ("hybrid", "rrf"), ("tuned", "fusion-minmax"),
                ("reranked", "flat+rescore")}
    summary = pl.read_parquet(base / "out" / "summary.parquet")
    assert set(summary.select("provider", "index").unique().rows()) == settings
    assert set(summary["queries"]) == {110}  # a query BM25 finds nothing for still counts (as 0)
    for table in ("per_query", "breakdown", "runs"):
        frame = pl.read_parquet(base / "out" / f"{table}.parquet")
        assert set(frame.select("provider", "index").unique().rows()) == settings, table


def test_each_system_is_compared_with_the_stages_it_builds_on(runs):
    base, _, _ = runs
    pairs = set(pl.read_parquet(base / "out" / "comparisons.parquet").select("a_provider", "a_index", "b_provider", "b_index").rows())
    assert {("reranked", "flat+rescore", "hashing", "flat"), ("hybrid", "rrf", "bm25", "bm25"),
            ("hybrid", "rrf", "hashing", "flat"), ("bm25", "bm25", "hashing", "flat")} <= pairs


def test_alpha_is_chosen_on_dev_and_written_to_the_manifest(runs):
    _, first, _ = runs
    tuned = next(s for s in first.manifest["systems"] if s["system"] == "tuned")
    facts = tuned["facts"]
    assert facts["chosen_on"] == "dev" and facts["alpha"] in (0.0, 0.5, 1.0)
    assert set(facts["dev_scores"]) == {"0", "0.5", "1"} and facts["dev_queries"] == 55
    best = max(facts["dev_scores"].values())
    assert facts["dev_scores"][f"{facts['alpha']:g}"] == best


def test_a_cached_rerun_embeds_and_reranks_nothing(runs):
    _, first, second = runs
    reranked = [s for s in first.manifest["systems"] if s["kind"] == "rerank"][0]["facts"]
    assert reranked["scored"] == reranked["pairs"] > 0
    again = [s for s in second.manifest["systems"] if s["kind"] == "rerank"][0]
    assert again["computed"] is False
    assert second.manifest["texts"]["embedded"] == 0
    assert all(not s["computed"] for s in second.manifest["systems"])


def test_an_unknown_first_stage_is_refused_at_load_with_its_key_path(tmp_path):
    from retbench.tasks.config.spec import SpecError, load_spec

    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.format(data=ROOT / "data" / "sample", out=tmp_path / "out", store=tmp_path / "store")
                    .replace("first: hashing/flat, rerank", "first: hashing/flatt, rerank"))
    with pytest.raises(SpecError, match=r"systems\[2\]\.first: unknown first stage 'hashing/flatt' \(did you mean 'hashing/flat'\?\) \(known: bm25:bm25, hashing/flat\)"):
        load_spec(path)


def test_systems_table_gives_added_latency_and_the_rerank_cost_ledger(runs):
    base, first, _ = runs
    systems = pl.read_parquet(base / "out" / "systems.parquet")
    assert set(systems["system"]) == {"bm25", "hybrid", "tuned", "reranked"}
    reranked = systems.filter(pl.col("system") == "reranked").row(0, named=True)
    assert reranked["first"] == "hashing/flat" and reranked["reranker"] == "rescore" and reranked["top_n"] == 20
    assert reranked["added_p95_ms"] >= reranked["added_p50_ms"] > 0
    tuned = systems.filter(pl.col("system") == "tuned").row(0, named=True)
    assert tuned["alpha"] in (0.0, 0.5, 1.0) and tuned["second"] == "hashing/flat"
    facts = next(s for s in first.manifest["systems"] if s["system"] == "tuned")["facts"]
    assert (tuned["alpha_chosen_on"], tuned["alpha_dev_queries"], tuned["alpha_test_queries"]) == ("dev", 55, 55)
    assert tuned["alpha_test_score"] == facts["test_score"] and tuned["alpha_dev_score"] == max(facts["dev_scores"].values())
    ledger = pl.read_parquet(base / "out" / "rerank_cost.parquet")
    pairs = [s for s in first.manifest["systems"] if s["kind"] == "rerank"][0]["facts"]["pairs"]
    # At most the top 20 of each of 110 queries (filtered queries may have fewer documents).
    assert ledger.row(0, named=True)["pairs"] == pairs and 0 < pairs <= 20 * 110
    assert ledger["usd_run"].is_null().all()  # no price given


def test_the_manifest_and_the_report_carry_the_truncation_counts_and_the_data_audit(runs):
    base, first, _ = runs
    chunks = first.manifest["chunks"]["chunks"]
    assert [(r["provider"], r["role"], r["window"], r["texts"], r["truncated"]) for r in first.manifest["truncation"]] == [
        ("hashing", "document", None, chunks, 0), ("hashing", "query", None, 110, 0)]  # hashing reads every token
    audit = first.manifest["data_audit"]
    assert audit["languages"]["queries"] == {"en": 86, "hi": 12, "hinglish": 12}  # the sample's own labels
    assert (audit["duplicates"]["groups"], audit["duplicates"]["relevant_ranked_below_unjudged_twin"]) == (0, {})
    report = (base / "out" / "report.md").read_text(encoding="utf-8")
    assert "## Data audit" in report and "No duplicate documents" in report
