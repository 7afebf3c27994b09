"""The fine-tune step as a pipeline stage: too few judged dev queries refused before any work,
the tuned provider trained on its base's dev run only (never a test-split query), reused on a
rerun, and its verdict and training tables in the output folder and the report."""
import json
from pathlib import Path

import polars as pl
import pytest

from retbench.tasks.config.spec import load_spec
from retbench.tasks.config.stages import STAGES
from retbench.tasks.datasets.errors import DatasetError
from retbench.tasks.stages.prepare import check_inputs
from retbench.support.paths import ROOT
from tests.pipeline.test_cli_errors import retbench


def _collection(folder: Path, dev_judged: int) -> Path:
    """6 documents; `dev_judged` dev queries with a relevant document, 2 dev queries judged
    non-relevant only, 4 test queries with a relevant document (none of which may count)."""
    folder.mkdir(parents=True)
    docs = [{"id": f"d{i}", "text": f"document {i} about topic {i % 3}"} for i in range(6)]
    queries = [{"id": f"dev{i}", "text": f"dev topic {i}", "split": "dev"} for i in range(dev_judged + 2)]
    queries += [{"id": f"test{i}", "text": f"test topic {i}", "split": "test"} for i in range(4)]
    qrels = [{"query_id": f"dev{i}", "doc_id": f"d{i % 6}", "grade": 1} for i in range(dev_judged)]
    qrels += [{"query_id": f"dev{dev_judged + i}", "doc_id": "d0", "grade": 0} for i in range(2)]
    qrels += [{"query_id": f"test{i}", "doc_id": f"d{i}", "grade": 2} for i in range(4)]
    for name, rows in (("corpus", docs), ("queries", queries), ("qrels", qrels)):
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def _spec(tmp_path: Path, tuned_options: str, dev_judged: int) -> Path:
    _collection(tmp_path / "data", dev_judged)
    path = tmp_path / "spec.yaml"
    path.write_text(
        "name: t\ndataset: {path: data, split: all}\nindexes: {ivf: null}\n"
        f"output_dir: {tmp_path / 'out'}\nstore_dir: {tmp_path / 'store'}\n"
        "providers:\n  - {name: minilm, kind: sentence-transformers}\n"
        f"  - {{name: minilm-ft, kind: finetuned, options: {{base: minilm{tuned_options}}}}}\n")
    return path


def test_finetune_is_a_stage_between_chunking_and_embedding():
    assert STAGES.index("chunk") < STAGES.index("finetune") < STAGES.index("embed")


def test_too_few_judged_dev_queries_are_refused_before_work_with_how_many_are_needed(tmp_path):
    # min_triples 32 at max_per_query 5 needs ceil(32 / 5) = 7 judged dev queries; there are 3
    # (the 2 dev queries judged non-relevant only and the 4 test queries do not count).
    spec = load_spec(_spec(tmp_path, "", dev_judged=3))
    with pytest.raises(DatasetError, match=r"providers\[1\]\.options: dataset .* has 3 'dev'-split queries with a "
                                           r"relevant judgment, but provider 'minilm-ft' needs at least 7 to mine "
                                           r"min_triples=32 triples at max_per_query=5"):
        check_inputs(spec)
    assert not any((tmp_path / "store").rglob("*.parquet"))  # nothing loaded into the store, nothing embedded
    # ceil(12 / 4) = 3: exactly enough.
    check_inputs(load_spec(_spec(tmp_path / "enough", ", min_triples: 12, max_per_query: 4", dev_judged=3)))


def test_the_command_line_refuses_it_in_one_line_before_prefect_starts(tmp_path):
    spec = _spec(tmp_path, ", min_triples: 20, max_per_query: 2", dev_judged=4)
    done = retbench("run", spec, cwd=tmp_path, prefect_home=tmp_path / "prefect")
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(
        "retbench: providers[1].options: dataset ")
    assert "has 4 'dev'-split queries with a relevant judgment, but provider 'minilm-ft' needs at least 10" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "prefect").exists()


SAMPLE_SPEC = """name: sample-ft
dataset: {{path: {data}, format: jsonl, split: all}}
chunking: {{strategy: paragraph, max_words: 120}}
providers:
  - {{name: minilm, kind: sentence-transformers}}
  - name: minilm-ft
    kind: finetuned
    options: {{base: minilm, epochs: 1, batch_size: 4, max_seq_length: 32, max_triples: 8, min_triples: 8, seed: 3}}
indexes: {{ivf: null}}
k: [10]
depth: 20
statistics: {{resamples: 200, permutations: 1000}}
history: {{enabled: false}}
output_dir: {out}
store_dir: {store}
"""


@pytest.mark.slow
def test_the_pipeline_trains_on_dev_only_reuses_the_model_and_writes_the_verdict(tmp_path):
    from retbench.tasks.pipeline import Selection, run_pipeline

    path = tmp_path / "spec.yaml"
    path.write_text(SAMPLE_SPEC.format(data=ROOT / "data" / "sample", out=tmp_path / "out", store=tmp_path / "store"))
    spec = load_spec(path)
    result = run_pipeline(spec)

    trained = result.manifest["finetuned"]["minilm-ft"]
    assert trained["trained_now"] and trained["triples"] == 8 and trained["base"] == "minilm"
    assert trained["source_split"] == "dev"  # the sample has no train query: dev is mined
    queries = pl.read_ndjson(ROOT / "data" / "sample" / "queries.jsonl")
    dev = set(queries.filter(pl.col("split") == "dev")["id"].to_list())
    test = set(queries.filter(pl.col("split") == "test")["id"].to_list())
    record = json.loads((Path(trained["folder"]) / "training.json").read_text())
    assert record["train_queries"] and set(record["train_queries"]) <= dev and not set(record["train_queries"]) & test

    out = tmp_path / "out"
    training = pl.read_parquet(out / "finetune_training.parquet").row(0, named=True)
    assert (training["provider"], training["triples"], training["steps"]) == ("minilm-ft", 8, 2)  # 8 triples / 4
    assert training["source_split"] == "dev"
    loss = pl.read_parquet(out / "finetune_loss.parquet")
    assert loss["step"].to_list() == [1, 2] and loss["provider"].unique().to_list() == ["minilm-ft"]
    verdict = pl.read_parquet(out / "finetune_verdict.parquet")
    overall = verdict.filter((pl.col("slice_kind") == "all") & (pl.col("measure") == "ndcg@10"))
    assert dict(overall.select("split", "n").iter_rows()) == {"dev": len(dev), "test": len(test)}
    assert {"all", "language_pair", "category"} <= set(verdict["slice_kind"])
    # The verdict's base and tuned columns are the providers' own scores: their query-weighted
    # mean over dev and test is the summary's mean over all queries.
    summary = pl.read_parquet(out / "summary.parquet").filter(pl.col("measure") == "ndcg@10")
    mean = dict(summary.select("provider", "value").iter_rows())
    for column, setting in (("base", "minilm"), ("tuned", "minilm-ft")):
        weighted = (overall[column] * overall["n"]).sum() / overall["n"].sum()
        assert weighted == pytest.approx(mean[setting], abs=1e-12)
    assert result.embedded()["minilm-ft/document"] > 0  # embedded, indexed and scored like any other provider
    report = (out / "report.html").read_text()
    assert 'id="finetune"' in report and "minilm-ft vs minilm on ndcg@10: dev " in report

    # The same inputs never train twice: `--stage finetune` finds the stored model.
    again = run_pipeline(spec, Selection(stage="finetune"))
    assert again.manifest["finetuned"]["minilm-ft"] | {"trained_now": True} == trained
    assert not again.manifest["finetuned"]["minilm-ft"]["trained_now"]
    assert "weights_sha256" in again.manifest["providers"]["minilm-ft"]  # the trained model's fingerprint
    assert not again.embeddings  # nothing embedded at stage finetune


def test_max_triples_is_a_seeded_sample_in_mining_order():
    from retbench.tasks.providers.finetuned import FinetunedOptions
    from retbench.tasks.stages.finetune_step import capped

    pairs = pl.DataFrame({"query_id": [f"q{i // 3}" for i in range(30)], "negative_rank": [i % 3 + 1 for i in range(30)]})
    options = FinetunedOptions(base="b", max_triples=7, seed=1)
    sample = capped(pairs, options)
    assert sample.height == 7 and sample.equals(capped(pairs, options))  # the same seed, the same triples
    assert sample.equals(sample.sort("query_id", "negative_rank")) and sample.is_unique().all()
    assert not sample.equals(capped(pairs, FinetunedOptions(base="b", max_triples=7, seed=2)))
    assert capped(pairs, FinetunedOptions(base="b")).equals(pairs)  # no cap: every triple


def test_xquad_dev_split_is_a_stable_hash_shared_by_a_question_and_its_translation():
    from retbench.support.paths import SHARED_DATA

    if not (SHARED_DATA / "xquad").is_dir():
        pytest.skip(f"{SHARED_DATA / 'xquad'} not present")
    from retbench.tasks.stages.dataset import load_dataset

    def splits(language):
        queries = load_dataset(SHARED_DATA / "xquad", "xquad", "all", query_language=language, doc_language=language,
                               dev_fraction=0.5).queries
        return dict(queries.select(pl.col("query_id").str.replace(f"-{language}$", ""), "split").iter_rows())

    english, hindi = splits("en"), splits("hi")
    assert english == hindi and len(english) == 1190
    assert sum(s == "dev" for s in english.values()) == 598  # 50.3% of 1190 by the hash
    import hashlib

    first = next(iter(english))
    share = int(hashlib.sha256(first.encode()).hexdigest()[:8], 16) / 2**32
    assert english[first] == ("dev" if share < 0.5 else "test")
    with pytest.raises(DatasetError, match=r"dev_fraction=1\.5; expected a number between 0 and 1"):
        load_dataset(SHARED_DATA / "xquad", "xquad", "all", dev_fraction=1.5)


def _verdict_rows(provider="minilm-ft"):
    rows = [  # split, kind, slice, measure, n, base, tuned, low, high, p, worse, lost
        ("dev", "all", "all", "ndcg@10", 20, 0.6, 0.7, 0.05, 0.15, 0.001, False, True),
        ("test", "all", "all", "ndcg@10", 18, 0.62, 0.63, -0.02, 0.04, 0.4, False, True),
        ("test", "language_pair", "hi->hi", "ndcg@10", 9, 0.5, 0.4, -0.2, -0.01, 0.02, True, False),
    ]
    return pl.DataFrame([{"provider": provider, "base_provider": "minilm", "split": s, "slice_kind": k, "slice": sl,
                          "measure": m, "n": n, "base": b, "tuned": t, "diff": t - b, "ci_low": lo, "ci_high": hi,
                          "p_value": p, "worse_slice": w, "gain_not_on_test": g}
                         for s, k, sl, m, n, b, t, lo, hi, p, w, g in rows])


def test_report_section_states_the_verdict_and_both_flags(tmp_path):
    from retbench.tasks.reporting.finetune_section import finetune_section
    from retbench.tasks.reporting.html import Section, _p, _table

    _verdict_rows().write_parquet(tmp_path / "finetune_verdict.parquet")
    assert finetune_section(tmp_path, "ndcg@10", Section, _p, _table) is None  # not a table of this run
    (tmp_path / "manifest.json").write_text(json.dumps({"tables": {"finetune_verdict": "x"}}))
    section = finetune_section(tmp_path, "ndcg@10", Section, _p, _table)
    text = [block[1] for block in section.blocks if block[0] == "p"]
    assert text[0] == ("minilm-ft vs minilm on ndcg@10: dev 0.600 -> 0.700 (+0.100 [+0.050, +0.150], p 0.001, "
                       "20 queries); test 0.620 -> 0.630 (+0.010 [-0.020, +0.040], p 0.4, 18 queries).")
    assert text[1] == "Significantly worse after fine-tuning (1): test language_pair hi->hi (ndcg@10 -0.100)."
    assert text[2] == "Dev gain that did not survive on test (1): all all ndcg@10."
    tables = [block[1] for block in section.blocks if block[0] == "table"]
    assert tables[0]["split"].to_list() == ["dev", "test"] and tables[1]["slice"].to_list() == ["hi->hi"]


def test_mining_drops_dev_triples_that_ask_a_test_question_under_another_id():
    # XQuAD asks some questions twice under two ids, one of which can fall in test.
    from retbench.tasks.stages.finetune import check_training_queries, drop_held_out_texts

    queries = pl.DataFrame({"query_id": ["d1", "d2", "t1"], "text": ["How often?", "Why?", "how often? "],
                            "split": ["dev", "dev", "test"]})
    pairs = pl.DataFrame({"query_id": ["d1", "d1", "d2"], "anchor": ["How often?", "How often?", "Why?"]})
    kept, dropped = drop_held_out_texts(pairs, queries)
    assert dropped == 2 and kept["query_id"].to_list() == ["d2"]
    check_training_queries(kept, queries)  # the last guard accepts what mining kept
