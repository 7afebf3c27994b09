"""The pipeline on the real Cranfield collection (graded, inverted scale mapped by the loader)."""
import json
from pathlib import Path

import polars as pl
import pytest

from retbench.support.paths import ROOT, SHARED_DATA

CRANFIELD = SHARED_DATA / "cranfield"
SPEC = """
name: cranfield-hashing
dataset: {{path: {data}, format: cranfield, split: test}}
chunking: {{strategy: none}}
providers: [{{name: hashing, kind: hashing}}]
indexes: {{ivf: {{nprobe: [4]}}}}
output_dir: {out}
store_dir: {store}
"""


@pytest.fixture(scope="module")
def cranfield_run(tmp_path_factory, prefect_harness):
    if not CRANFIELD.is_dir():
        pytest.skip(f"{CRANFIELD} not present")
    from retbench.flows.benchmark import benchmark

    base = tmp_path_factory.mktemp("cranfield")
    spec = base / "spec.yaml"
    spec.write_text(SPEC.format(data=CRANFIELD, out=base / "out", store=base / "store"))
    return Path(benchmark(str(spec)))


def test_grades_are_mapped_and_said_so(cranfield_run):
    manifest = json.loads((cranfield_run / "manifest.json").read_text())
    assert manifest["dataset"]["queries"] == 225 and manifest["dataset"]["documents"] == 1400
    assert any("1->4" in note and "-1->0" in note for note in manifest["dataset"]["notes"])
    qrels = pl.read_parquet(Path(manifest["dataset"]["path"]) / "qrels.parquet")
    assert qrels["grade"].value_counts().sort("grade").rows() == [(0, 225), (1, 363), (2, 734), (3, 387), (4, 128)]


def test_flat_ndcg_agrees_with_pytrec_eval_on_the_written_run(cranfield_run):
    import pytrec_eval

    manifest = json.loads((cranfield_run / "manifest.json").read_text())
    qrels = pl.read_parquet(Path(manifest["dataset"]["path"]) / "qrels.parquet")
    runs = pl.read_parquet(cranfield_run / "runs.parquet").filter(pl.col("index") == "flat")
    qrels_dict, run_dict = {}, {}
    for q, d, g in qrels.iter_rows():
        qrels_dict.setdefault(q, {})[d] = g
    for q, d, s in runs.select("query_id", "doc_id", "score").iter_rows():
        run_dict.setdefault(q, {})[d] = s
    reference = pytrec_eval.RelevanceEvaluator(qrels_dict, {"ndcg_cut.10", "recip_rank", "recall.10"}).evaluate(run_dict)
    summary = pl.read_parquet(cranfield_run / "summary.parquet").filter(pl.col("index") == "flat")
    ours = dict(summary.select("measure", "value").iter_rows())
    for measure, key in [("ndcg@10", "ndcg_cut_10"), ("mrr", "recip_rank"), ("recall@10", "recall_10")]:
        expected = sum(v[key] for v in reference.values()) / len(reference)
        assert ours[measure] == pytest.approx(expected, abs=1e-12)
    # A lexical baseline on Cranfield: well above chance, well below perfect.
    assert 0.2 < ours["ndcg@10"] < 0.6


def test_retbench_eval_on_the_written_runs_trec_matches_pytrec_eval(cranfield_run, tmp_path):
    """The pipeline's runs.trec (flat and IVF in one file) read back by `retbench eval`, run by
    run: every per-query value equals pytrec_eval's from the same files."""
    import pytrec_eval

    from retbench.flows.eval_command import score_files
    from retbench.tasks.analysis.trec import write_qrels

    manifest = json.loads((cranfield_run / "manifest.json").read_text())
    qrels_path = tmp_path / "qrels.trec"
    write_qrels(pl.read_parquet(Path(manifest["dataset"]["path"]) / "qrels.parquet"), qrels_path)
    runs_path = cranfield_run / "runs.trec"
    got = score_files(qrels_path, runs_path, ["ndcg@10", "map", "mrr"], per_query=True).filter(pl.col("query_id") != "all")
    with open(qrels_path) as f:
        qrels = pytrec_eval.parse_qrel(f)
    lines = runs_path.read_text().splitlines()
    tags = sorted({line.rsplit(" ", 1)[1] for line in lines})
    assert sorted(got["run"].unique()) == tags and len(tags) == 2
    for tag in tags:
        run = pytrec_eval.parse_run(line for line in lines if line.endswith(" " + tag))
        expected = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "map", "recip_rank"}).evaluate(run)
        mine = got.filter(pl.col("run") == tag)
        assert mine.height == 3 * len(expected) == 3 * 225
        for _, q, m, v in mine.iter_rows():
            assert v == pytest.approx(expected[q][{"ndcg@10": "ndcg_cut_10", "map": "map", "mrr": "recip_rank"}[m]], abs=1e-9)
