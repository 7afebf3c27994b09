"""Run history, regression alerts and the `history` command."""
import json
from datetime import datetime, timedelta, timezone

import numpy as np
import polars as pl
import pytest

from retbench.tasks.analysis import history
from retbench.support.paths import ROOT


def _per_query(values, provider="p", index="flat", nprobe=None, measure="ndcg@10"):
    return pl.DataFrame({
        "setting_key": f"{provider}/{index}/{nprobe}", "setting": f"{provider}/{index}", "params": "{}",
        "provider": provider, "index": index, "nprobe": pl.Series([nprobe] * len(values), dtype=pl.Int64),
        "query_id": [f"q{i}" for i in range(len(values))], "measure": measure, "value": values,
    })


def test_a_clear_drop_is_a_regression_and_noise_is_not():
    rng = np.random.default_rng(0)
    before = rng.uniform(0.5, 1.0, 60)
    worse = _per_query(before - 0.2)
    noisy = _per_query(np.clip(before + rng.normal(0, 0.05, 60), 0, 1))
    reference = [("previous", "run-1", _per_query(before))]
    dropped = history.compare_runs(worse, reference, ["ndcg@10"])
    assert dropped["regression"].to_list() == [True]
    assert dropped["diff"].item() == pytest.approx(-0.2)
    assert dropped["ci_high"].item() < 0
    steady = history.compare_runs(noisy, reference, ["ndcg@10"])
    assert steady["regression"].to_list() == [False]
    assert steady["ci_low"].item() < 0 < steady["ci_high"].item()


def test_only_settings_present_in_both_runs_are_compared():
    reference = pl.concat([_per_query([0.5] * 25), _per_query([0.5] * 25, index="ivf", nprobe=4)])
    current = _per_query([0.5] * 25)
    compared = history.compare_runs(current, [("baseline", "run-0", reference)], ["ndcg@10"])
    assert compared.select("index", "nprobe").rows() == [("flat", None)]
    assert compared["against"].item() == "baseline" and not compared["regression"].item()


def test_history_round_trip_and_previous_run(tmp_path):
    start = datetime(2026, 11, 1, 2, 0, tzinfo=timezone.utc)
    for day in range(3):
        manifest = {
            "run": {"finished_at": (start + timedelta(days=day)).isoformat(), "spec_name": "nightly",
                    "spec_hash": "s", "git_commit": "abc"},
            "dataset": {"content_hash": "d"},
            "providers": {"p": {"kind": "hashing", "dim": 8}},
        }
        per_query = _per_query([0.5 + 0.1 * day] * 4)
        summary = per_query.group_by("provider", "index", "nprobe", "measure").agg(value=pl.col("value").mean(), queries=pl.len())
        history.append_run(tmp_path, f"run-{day}", manifest, summary, per_query)
    assert sorted(p.name for p in (tmp_path / "history" / "summary").iterdir()) == [
        "date=2026-11-01", "date=2026-11-02", "date=2026-11-03"]
    assert history.previous_run_id(tmp_path, "nightly", "run-2") == "run-1"
    assert history.previous_run_id(tmp_path, "other", "run-2") is None
    trend = history.trend_table(tmp_path, "nightly")
    assert trend["p/flat/exact"].to_list() == pytest.approx([0.5, 0.6, 0.7])
    assert history.per_query_of(tmp_path, "run-1")["value"].to_list() == pytest.approx([0.6] * 4)


SPEC = """
name: guarded
dataset: {{path: {data}, format: jsonl, split: dev}}
chunking: {{strategy: paragraph, max_words: 120}}
providers: [{{name: lexical, kind: hashing, options: {{dim: {dim}, char_ngrams: [{low}, {high}]}}}}]
indexes: {{ivf: null}}
output_dir: {out}
store_dir: {store}
history: {{fail_on_regression: true, measures: [ndcg@10, mrr]}}
"""


def test_a_worse_model_fails_the_flow_after_writing_everything(tmp_path, prefect_harness):
    from retbench.flows.benchmark import RegressionError, benchmark

    def run(dim, low, high):
        spec = tmp_path / f"spec-{dim}.yaml"
        spec.write_text(SPEC.format(data=ROOT / "data" / "sample", dim=dim, low=low, high=high,
                                    out=tmp_path / "out", store=tmp_path / "store"))
        benchmark(str(spec))

    run(2048, 3, 5)
    with pytest.raises(RegressionError, match="regression"):
        run(16, 5, 5)  # a tiny hashed space: far more collisions, clearly worse rankings
    regressions = pl.read_parquet(tmp_path / "out" / "regressions.parquet")
    flagged = regressions.filter(pl.col("regression"))
    assert set(flagged["measure"]) <= {"ndcg@10", "mrr"} and flagged.height >= 1
    assert (flagged["ci_high"] < 0).all() and (flagged["p_adjusted"] < 0.05).all()
    assert set(regressions["correction"]) == {"holm"} and regressions["setting_key"].null_count() == 0
    assert "regression(s)" in (tmp_path / "out" / "report.html").read_text()
    assert len(history.runs_of(tmp_path / "store", "guarded")) == 2  # the failing run is recorded too
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["providers"]["lexical"]["dim"] == 16


def test_a_worse_model_on_changed_data_starts_a_new_series_and_passes(tmp_path, prefect_harness):
    import shutil

    from retbench.flows.benchmark import benchmark

    changed = tmp_path / "changed"
    shutil.copytree(ROOT / "data" / "sample", changed)
    corpus = (changed / "corpus.jsonl").read_text().splitlines()
    document = json.loads(corpus[0])
    document["text"] += " One more sentence, so the data set's content key changes."
    (changed / "corpus.jsonl").write_text("\n".join([json.dumps(document), *corpus[1:]]) + "\n")

    def run(data, dim, low, high):
        spec = tmp_path / f"spec-{dim}.yaml"
        spec.write_text(SPEC.format(data=data, dim=dim, low=low, high=high, out=tmp_path / "out", store=tmp_path / "store"))
        benchmark(str(spec))

    run(ROOT / "data" / "sample", 2048, 3, 5)
    run(changed, 16, 5, 5)  # the worse model of the test above, but on other data: fail_on_regression does not fire
    regressions = pl.read_parquet(tmp_path / "out" / "regressions.parquet")
    assert regressions.height == 1 and not regressions["regression"].any()
    first = history.runs_of(tmp_path / "store", "guarded")
    assert first["series"].to_list() == [1, 2]
    old, new = (key[:12] for key in first["dataset_hash"])
    note = (f"dataset changed since run {first['run_id'][0]} ({old} -> {new}): a new series starts; "
            f"no regressions computed")
    assert regressions["status"].item() == note
    assert "Dataset changed since run" in (tmp_path / "out" / "report.html").read_text()


def _record_runs_without_git(store, commits):
    """Runs of a spec kept outside a git repository record git_commit as null."""
    start = datetime(2026, 11, 1, 2, 0, tzinfo=timezone.utc)
    for day, commit in enumerate(commits):
        manifest = {"run": {"finished_at": (start + timedelta(days=day)).isoformat(), "spec_name": "guarded",
                            "spec_hash": "s", "git_commit": commit},
                    "dataset": {"content_hash": "d"}, "providers": {"p": {"kind": "hashing", "dim": 8}}}
        per_query = _per_query([0.25 * (day + 1)] * 4)
        summary = per_query.group_by("provider", "index", "nprobe", "measure").agg(value=pl.col("value").mean(), queries=pl.len())
        history.append_run(store, f"run-{day}", manifest, summary, per_query)


def test_history_command_outside_a_git_repository_and_an_unrecorded_measure(tmp_path, capsys):
    from retbench.flows.cli import main

    _record_runs_without_git(tmp_path / "store", [None, None, "0123456789abcdef"])
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(data=ROOT / "data" / "sample", dim=16, low=3, high=5, out=tmp_path / "out", store=tmp_path / "store"))
    assert main(["history", str(spec)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "ndcg@10 of spec 'guarded', one row per run (oldest first)"
    rows = [line.split() for line in printed[3:]]
    assert [row[2:] for row in rows] == [["run-0", "-", "1", "d", "0.2500"], ["run-1", "-", "1", "d", "0.5000"],
                                         ["run-2", "01234567", "1", "d", "0.7500"]]

    assert main(["history", str(spec), "-m", "ndcg@1000"]) == 2
    err = capsys.readouterr().err
    assert err == (f"retbench: measure 'ndcg@1000' is not recorded in the history of spec 'guarded' in {tmp_path / 'store'}; "
                   "pass -m with one of: ndcg@10\n")


def test_history_of_a_store_folder_that_does_not_exist_says_so(tmp_path, capsys):
    from retbench.flows.cli import main

    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(data=ROOT / "data" / "sample", dim=16, low=3, high=5, out=tmp_path / "out", store=tmp_path / "store"))
    missing = tmp_path / "no" / "such-store"
    assert main(["history", str(spec), "--store-dir", str(missing)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (f"retbench: store folder {missing} does not exist; expected the store_dir the spec's runs "
                            "recorded their history in (the spec's store_dir, or --store-dir)\n")
    assert not missing.exists()  # nothing made
    (tmp_path / "a-file").write_text("x")
    assert main(["history", str(spec), "--store-dir", str(tmp_path / "a-file")]) == 2
    assert "a-file is not a folder" in capsys.readouterr().err
    (tmp_path / "empty-store").mkdir()
    assert main(["history", str(spec), "--store-dir", str(tmp_path / "empty-store")]) == 0  # a store, never run
    assert capsys.readouterr().out.startswith("no recorded runs of spec 'guarded'")
