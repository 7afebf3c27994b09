"""Fine-tuning on dev hard negatives: held-out queries never enter training, the trained folder
is content-addressed and reused, the provider's fingerprint carries its weights, bad specs are
refused with their key path, and the verdict table's intervals and flags."""
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from retbench.support.paths import ROOT

from retbench.tasks.analysis.finetune_verdict import finetune_verdict
from retbench.tasks.analysis.hard_negatives import HeldOutSplitError, hard_negative_pairs
from retbench.tasks.config.spec import SpecError, load_spec
from retbench.tasks.providers import create_provider
from retbench.tasks.stages.dataset import load_dataset
from retbench.tasks.providers.fingerprint import full_fingerprint
from retbench.tasks.providers.finetuned import FinetunedOptions
from retbench.tasks.stages.finetune import (
    FinetuneInputError, check_training_queries, finetune_key, finetune_provider, write_training_tables,
)


@pytest.fixture(scope="module")
def sample():
    return load_dataset(ROOT / "data" / "sample", "jsonl", "all")


def _run(dataset, provider="p"):
    """A run that ranks every document for every query in corpus order (score falls with position)."""
    docs = dataset.corpus["doc_id"].to_list()[:30]
    rows = [(q, d, 1.0 - k / 100) for q in dataset.queries["query_id"].to_list() for k, d in enumerate(docs)]
    return pl.DataFrame(rows, schema=["query_id", "doc_id", "score"], orient="row").with_columns(
        provider=pl.lit(provider), index=pl.lit("flat"), nprobe=pl.lit(None, dtype=pl.Int64))


def test_test_split_queries_are_refused_by_id_and_by_text(sample):
    pairs = hard_negative_pairs(_run(sample), sample, "p")
    check_training_queries(pairs, sample.queries)  # dev only: accepted
    test = sample.queries.filter(pl.col("split") == "test").row(0, named=True)
    smuggled = pl.concat([pairs, pairs.head(1).with_columns(query_id=pl.lit(test["query_id"]))])
    with pytest.raises(HeldOutSplitError, match=f"first: '{test['query_id']}', split 'test'"):
        check_training_queries(smuggled, sample.queries)
    renamed = pairs.head(1).with_columns(anchor=pl.lit("  " + test["text"].upper()))  # a dev id with a test question
    with pytest.raises(HeldOutSplitError, match="has the text of a 'test'-split query"):
        check_training_queries(renamed, sample.queries)
    base = create_provider("sentence-transformers")
    with pytest.raises(HeldOutSplitError):
        finetune_provider(base, "minilm", smuggled, sample.queries, {"base": "minilm"}, Path("/nonexistent"))


def test_too_few_triples_names_the_key_and_the_number_needed(sample, tmp_path):
    pairs = hard_negative_pairs(_run(sample), sample, "p").head(10)
    base = create_provider("sentence-transformers")
    with pytest.raises(FinetuneInputError, match=r"providers\[3\]\.options\.min_triples: 10 hard-negative triples .* "
                                                 r"at least 32 are needed"):
        finetune_provider(base, "minilm", pairs, sample.queries, {"base": "minilm"}, tmp_path, key_path="providers[3].options")
    with pytest.raises(FinetuneInputError, match="cannot be fine-tuned"):
        finetune_provider(create_provider("hashing"), "h", pairs, sample.queries, {"base": "h"}, tmp_path)
    assert not (tmp_path / "models").exists()


@pytest.mark.slow
def test_trains_once_on_dev_only_and_the_fingerprint_carries_the_weights(sample, tmp_path):
    pairs = hard_negative_pairs(_run(sample), sample, "p", max_per_query=1).head(8)
    options = {"base": "minilm", "epochs": 1, "batch_size": 4, "max_seq_length": 32, "min_triples": 8, "seed": 1}
    base = create_provider("sentence-transformers")
    first = finetune_provider(base, "minilm", pairs, sample.queries, options, tmp_path)
    assert first.computed and first.steps == 2 and all(np.isfinite(r["loss"]) for r in first.log)
    record = (Path(first.path) / "training.json").read_text()
    test_ids = set(sample.queries.filter(pl.col("split") == "test")["query_id"].to_list())
    import json

    trained_on = set(json.loads(record)["train_queries"])
    assert trained_on and trained_on <= set(sample.queries.filter(pl.col("split") == "dev")["query_id"].to_list())
    assert not trained_on & test_ids
    again = finetune_provider(base, "minilm", pairs, sample.queries, options, tmp_path)
    assert not again.computed and again.path == first.path and again.train_seconds == first.train_seconds
    # The key: base fingerprint, triples and hyperparameters (a changed one is another folder).
    hyper = FinetunedOptions(**options).hyperparameters()
    assert first.key == finetune_key(full_fingerprint(base), first.triples_sha256, hyper)
    assert finetune_key(full_fingerprint(base), first.triples_sha256, {**hyper, "lr": 1e-4}) != first.key
    assert finetune_key(full_fingerprint(base), "other triples", hyper) != first.key

    tuned = first.provider(options)
    fingerprint = tuned.fingerprint()
    assert fingerprint["kind"] == "finetuned" and "model.safetensors:" in fingerprint["weights_sha256"]
    assert fingerprint["weights_sha256"] != full_fingerprint(base)["weights_sha256"]
    texts = ["how do I rotate an API key", "refund policy"]
    tuned_vectors, base_vectors = tuned.encode(texts, "query"), base.encode(texts, "query")
    assert tuned_vectors.shape == (2, 384) and not np.allclose(tuned_vectors, base_vectors, atol=1e-4)
    assert first.table()["triples"].to_list() == [8]
    paths = write_training_tables([first], tmp_path / "out")
    assert pl.read_parquet(paths["finetune_loss"])["step"].to_list() == [1, 2]
    assert pl.read_parquet(paths["finetune_training"]).row(0, named=True)["steps"] == 2


def test_untrained_provider_says_what_to_run():
    with pytest.raises(RuntimeError, match="run the fine-tune step"):
        create_provider("finetuned", {"base": "minilm"}).fingerprint()


def _spec(tmp_path, providers: str, split: str = "all") -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(f"name: t\ndataset: {{path: data, split: {split}}}\nproviders:\n{providers}")
    return path


MINILM = "  - {name: minilm, kind: sentence-transformers}\n"


def test_spec_refuses_bad_fine_tunes_with_key_paths(tmp_path):
    http = "  - {name: api, kind: openai-compatible, options: {base_url: 'http://127.0.0.1:9', model: m}}\n"
    cases = [
        (http + "  - {name: ft, kind: finetuned, options: {base: api}}\n",
         r"providers\[1\]\.options\.base: provider 'api' \(providers\[0\], kind 'openai-compatible'\) cannot be fine-tuned: an HTTP provider"),
        (MINILM + "  - {name: ft, kind: finetuned, options: {base: nope}}\n",
         r"providers\[1\]\.options\.base: 'nope' is not a provider of this spec"),
        ("  - {name: h, kind: hashing}\n  - {name: ft, kind: finetuned, options: {base: h}}\n",
         r"providers\[1\]\.options\.base: .*not a local sentence-transformers model"),
        (MINILM + "  - {name: ft, kind: finetuned, options: {base: minilm, batch_size: 1}}\n",
         r"providers\[1\]\.options\.batch_size: must be at least 2 \(got 1\)"),
        (MINILM + "  - {name: ft, kind: finetuned, options: {base: minilm, model: /tmp/x}}\n",
         r"providers\[1\]\.options\.model: set by the fine-tune step"),
    ]
    for providers, message in cases:
        with pytest.raises(SpecError, match=message):
            load_spec(_spec(tmp_path, providers))
    for split in ("test", "dev", "train"):  # the test queries must be loaded, to keep them out by id and by text
        with pytest.raises(SpecError, match=rf"providers\[1\]\.options: fine-tuning mines .* dataset.split is '{split}'"):
            load_spec(_spec(tmp_path, MINILM + "  - {name: ft, kind: finetuned, options: {base: minilm}}\n", split=split))
    spec = load_spec(_spec(tmp_path, MINILM + "  - {name: ft, kind: finetuned, options: {base: minilm, epochs: 2}}\n"))
    assert spec.providers[1].options == {"base": "minilm", "epochs": 2}


def _per_query(values: dict[str, dict[str, float]]) -> pl.DataFrame:
    rows = [(setting, "flat", None, q, "ndcg@10", v) for setting, by_query in values.items() for q, v in by_query.items()]
    return pl.DataFrame(rows, schema={"provider": pl.String, "index": pl.String, "nprobe": pl.Int64, "query_id": pl.String,
                                      "measure": pl.String, "value": pl.Float64}, orient="row")


def test_verdict_by_split_and_slice_with_flags():
    # dev: 16 queries, every one +0.2 (a significant gain). test: 16 queries, 8 "a" +0.2 and 8 "b"
    # -0.3: overall test diff -0.05 (not significant), slice b significantly worse. (8 queries:
    # the smallest sign-flip p-value is 2/256, so a slice of 8 can be significant.)
    queries = pl.DataFrame({
        "query_id": [f"d{i:02}" for i in range(16)] + [f"t{i:02}" for i in range(16)],
        "text": ["x"] * 32,
        "category": ["a", "b"] * 8 + ["a"] * 8 + ["b"] * 8,
        "split": ["dev"] * 16 + ["test"] * 16,
    })
    base = {q: 0.5 for q in queries["query_id"]}
    tuned = {**{f"d{i:02}": 0.7 for i in range(16)}, **{f"t{i:02}": 0.7 for i in range(8)},
             **{f"t{i:02}": 0.2 for i in range(8, 16)}}
    table = finetune_verdict(_per_query({"base": base, "tuned": tuned}), queries, ("base", "flat", None),
                             ("tuned", "flat", None), resamples=500, permutations=2000)
    row = {(r["split"], r["slice"]): r for r in table.iter_rows(named=True)}
    assert set(row) == {("dev", "all"), ("dev", "a"), ("dev", "b"), ("test", "all"), ("test", "a"), ("test", "b")}
    dev = row[("dev", "all")]
    assert (dev["n"], dev["base"], dev["tuned"]) == (16, 0.5, 0.7)
    assert dev["diff"] == pytest.approx(0.2) and dev["ci_low"] == pytest.approx(0.2) and dev["p_value"] < 0.05
    test = row[("test", "all")]
    assert test["diff"] == pytest.approx(-0.05) and test["ci_low"] < 0 < test["ci_high"]
    assert row[("test", "b")]["diff"] == pytest.approx(-0.3) and row[("test", "b")]["worse_slice"]
    assert [k for k, r in row.items() if r["worse_slice"]] == [("test", "b")]
    # dev gained significantly overall and on b; on test, b is worse and "all" is not a gain: flagged.
    # Slice a gained on both: not flagged.
    assert row[("test", "a")]["p_value"] < 0.05 and row[("test", "a")]["ci_low"] == pytest.approx(0.2)
    flagged = sorted(k for k, r in row.items() if r["gain_not_on_test"])
    assert flagged == [("dev", "all"), ("dev", "b"), ("test", "all"), ("test", "b")]
