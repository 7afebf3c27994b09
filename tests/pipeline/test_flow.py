"""The whole benchmark flow on the shipped sample, with the fast hashing provider."""
import json
from pathlib import Path

import polars as pl
import pytest

from retbench.support.paths import ROOT

SPEC = """
name: sample-hashing
dataset: {{path: {data}, format: jsonl, split: all}}
chunking: {{strategy: paragraph, max_words: 120}}
providers:
  - {{name: hashing, kind: hashing}}
indexes: {{ivf: {{nprobe: [1, 2, 100]}}}}
output_dir: {out}
store_dir: {store}
"""


@pytest.fixture(scope="module")
def sample_runs(tmp_path_factory, prefect_harness):
    from retbench.flows.benchmark import benchmark

    base = tmp_path_factory.mktemp("flow")
    spec = base / "spec.yaml"
    spec.write_text(SPEC.format(data=ROOT / "data" / "sample", out=base / "out", store=base / "store"))
    first = json.loads((Path(benchmark(str(spec))) / "manifest.json").read_text())
    second = json.loads((Path(benchmark(str(spec), output_dir=str(base / "out2"))) / "manifest.json").read_text())
    return base, first, second


def test_tables_exist_with_their_columns(sample_runs):
    base, _, _ = sample_runs
    out = base / "out"
    expected = {
        "summary": ["setting", "params", "provider", "index", "nprobe", "measure", "value", "queries"],
        "per_query": ["setting", "params", "provider", "index", "nprobe", "query_id", "measure", "value", "query_language",
                      "category", "split"],
        "ann_vs_exact": ["setting", "params", "provider", "index", "nprobe", "measure", "exact", "approximate", "delta"],
        "runs": ["query_id", "setting", "params", "provider", "index", "nprobe", "rank", "doc_id", "chunk_id", "score"],
    }
    expected["breakdown"] = ["setting", "params", "provider", "index", "nprobe", "slice_kind", "slice", "measure", "mean",
                             "ci_low", "ci_high", "n"]
    for name, columns in expected.items():
        assert pl.read_parquet(out / f"{name}.parquet").columns == columns
    assert (out / "summary.csv").exists() and (out / "runs.trec").exists() and (out / "manifest.parquet").exists()
    for name in ("comparisons", "failures", "ann_overlap_per_query"):
        assert (out / f"{name}.parquet").exists()
    assert (out / "report.html").exists() and (out / "report.md").exists()


def test_breakdown_separates_language_pairs_and_splits(sample_runs):
    base, _, _ = sample_runs
    breakdown = pl.read_parquet(base / "out" / "breakdown.parquet").filter(
        (pl.col("index") == "flat") & (pl.col("measure") == "ndcg@10"))
    pairs = dict(breakdown.filter(pl.col("slice_kind") == "language_pair").select("slice", "n").iter_rows())
    # 86 English queries (8 of them filtered), 12 Hindi and 12 Hinglish ones, judged mostly against English documents.
    assert sum(pairs.values()) == 110
    assert any(p.startswith("hinglish->") for p in pairs) and any(p.startswith("hi->") for p in pairs)
    splits = dict(breakdown.filter(pl.col("slice_kind") == "split").select("slice", "n").iter_rows())
    assert splits == {"dev": 55, "test": 55}
    every = breakdown.filter(pl.col("slice_kind") == "all").row(0, named=True)
    assert every["ci_low"] < every["mean"] < every["ci_high"]


def test_summary_has_flat_and_every_ivf_setting(sample_runs):
    base, first, _ = sample_runs
    summary = pl.read_parquet(base / "out" / "summary.parquet")
    nlist = next(i["settings"]["nlist"] for i in first["indexes"] if i["settings"]["kind"] == "ivf")
    settings = summary.select("index", "nprobe").unique().sort("index", "nprobe", nulls_last=False).rows()
    # nprobe 100 is clipped to nlist.
    assert settings == [("flat", None), ("ivf", 1), ("ivf", 2), ("ivf", nlist)]
    measures = set(summary["measure"])
    assert {"recall@5", "recall@10", "recall@20", "mrr", "ndcg@10", "ndcg_exp@10"} <= measures
    flat_ndcg = summary.filter((pl.col("index") == "flat") & (pl.col("measure") == "ndcg@10"))["value"].item()
    assert 0.2 < flat_ndcg < 1.0  # a lexical baseline finds a good share of the answers


def test_ivf_probing_every_list_matches_flat(sample_runs):
    base, first, _ = sample_runs
    nlist = next(i["settings"]["nlist"] for i in first["indexes"] if i["settings"]["kind"] == "ivf")
    ann = pl.read_parquet(base / "out" / "ann_vs_exact.parquet").filter(pl.col("nprobe") == nlist)
    assert ann.filter(pl.col("measure") == "overlap@10")["approximate"].item() == pytest.approx(1.0)
    assert ann["delta"].abs().max() < 1e-9


def test_runs_are_maxp_document_rankings(sample_runs):
    base, _, _ = sample_runs
    runs = pl.read_parquet(base / "out" / "runs.parquet")
    per_query = runs.group_by("provider", "index", "nprobe", "query_id").agg(
        docs=pl.col("doc_id").n_unique(), rows=pl.len(), ranks_ok=(pl.col("rank").sort() == pl.int_range(1, pl.len() + 1)).all())
    assert (per_query["docs"] == per_query["rows"]).all()  # one entry per document
    assert per_query["ranks_ok"].all()
    assert runs["chunk_id"].str.starts_with(runs["doc_id"] + "#").all()


def test_second_run_embeds_nothing_and_reuses_indexes(sample_runs):
    _, first, second = sample_runs
    assert first["texts"]["embedded"] > 0 and first["texts"]["from_cache"] == 0
    assert second["texts"] == {"embedded": 0, "from_cache": first["texts"]["embedded"]}
    assert not any(i["built"] for i in second["indexes"])
    assert not any(r["computed"] for r in second["retrieval"])


def test_summary_and_regressions_are_prefect_artifacts(sample_runs):
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    async def versions(key):
        async with get_client() as client:
            found = await client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])))
            return sorted(found, key=lambda artifact: artifact.created)

    summaries = asyncio.run(versions("sample-hashing-summary"))
    regressions = asyncio.run(versions("sample-hashing-regressions"))
    assert len(summaries) == 2 and {a.type for a in summaries} == {"table"}
    assert [a.type for a in regressions] == ["markdown", "markdown"]
    # The first run has nothing to compare with; the second compares with the first.
    assert regressions[0].data.startswith("No earlier run")
    assert "no regression against previous" in regressions[1].data.lower()
    verdicts = asyncio.run(versions("sample-hashing-verdict"))
    assert [a.type for a in verdicts] == ["markdown", "markdown"]
    assert "Best setting by ndcg@10: hashing" in verdicts[1].data and "report.html" in verdicts[1].data


def test_manifest_records_what_a_reader_needs(sample_runs):
    _, first, _ = sample_runs
    assert len(first["dataset"]["content_hash"]) == 64
    assert first["providers"]["hashing"]["kind"] == "hashing"
    assert {"load-dataset", "chunk", "embed", "index", "retrieve"} <= set(first["stage_seconds"])
    assert first["versions"]["prefect"] and first["versions"]["faiss-cpu"]


def test_judge_export_pools_every_hole_of_the_test_top_10_once(sample_runs, tmp_path, capsys):
    """`retbench judge export` on the sample's output: judging every pair of the pool makes
    judged@10 (as the score stage computes it) 1 for every setting on the test queries."""
    from retbench.flows.cli import main
    from retbench.tasks.analysis.score import score_runs
    from retbench.tasks.stages.dataset import load_saved_dataset

    base, first, _ = sample_runs
    out = base / "out"
    assert main(["judge", "export", str(out), "--format", "all", "--out", str(tmp_path / "pool")]) == 0
    printed = capsys.readouterr().out
    pool = pl.read_csv(tmp_path / "pool.csv", schema_overrides={"grade": pl.String})
    dataset = load_saved_dataset(first["dataset"]["path"])
    test_queries = dataset.queries.filter(pl.col("split") == "test")
    assert set(pool["query_id"]) <= set(test_queries["query_id"])
    assert pool.select("query_id", "doc_id").is_unique().all()
    assert pool.join(dataset.qrels, on=["query_id", "doc_id"], how="semi").height == 0
    assert pool["pool_rank"].to_list() == list(range(1, pool.height + 1))
    assert pool["settings"].is_sorted(descending=True) and pool["grade"].is_null().all()
    assert printed.startswith(f"wrote {pool.height} unjudged pairs (top 10 of {test_queries.height} test queries, 4 settings; "
                              "grades 0-3)")

    runs = pl.read_parquet(out / "runs.parquet")
    before = score_runs(runs, dataset.qrels, dataset.queries, ["judged@10"]).filter(pl.col("split") == "test")
    means = before.group_by("provider", "index", "nprobe").agg(pl.col("value").mean()).sort("index", "nprobe")
    # The page's "judged@10 now" is the score stage's judged@10 on the test queries.
    for provider, index, nprobe, value in means.iter_rows():
        label = f"{provider} {index}" + ("" if nprobe is None else f" nprobe={nprobe}")
        assert f"{label} {value:.2f}" in printed.splitlines()[1]
    assert means["value"].max() < 1
    graded = pl.concat([dataset.qrels, pool.select("query_id", "doc_id", grade=pl.lit(0, pl.Int64))])
    after = score_runs(runs, graded, dataset.queries, ["judged@10"]).filter(pl.col("split") == "test")
    assert after["value"].min() == 1.0

    page = (tmp_path / "pool.html").read_text(encoding="utf-8")
    data = json.loads(page.split('<script type="application/json" id="pool">')[1].split("</script>")[0])
    assert [(p["query_id"], p["doc_id"]) for p in data["pairs"]] == pool.select("query_id", "doc_id").rows()
    tsv = pl.read_csv(tmp_path / "pool.tsv", separator="\t", schema_overrides={"grade": pl.String})
    assert tsv.equals(pool)
