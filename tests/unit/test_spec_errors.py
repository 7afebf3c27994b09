"""A spec's errors in the spec's words: a key path on every line, none of the validation
library's wording, "did you mean" for near-miss names; measures the defaults ask for follow `k`."""
import re

import pytest

from retbench.tasks.config.spec import SpecError, load_spec

# Words of pydantic that a spec's author never wrote and should not have to decode.
LIBRARY_WORDS = ("Value error", "(top level)", "Input should be", "errors.pydantic.dev", "type=", "input_value",
                 "validation error", "Options", "Spec", "Assertion failed")


def _errors(tmp_path, text: str) -> list[str]:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    first, *lines = str(caught.value).splitlines()
    assert first == f"{path}: invalid benchmark spec:"
    return [line.strip() for line in lines]


def test_every_error_has_a_key_path_and_near_misses_get_a_suggestion(tmp_path):
    lines = _errors(tmp_path, """
name: t
dataset: {path: data, format: jsnl, split: tset, splt: 3}
chunking: {strategy: paragraph, max_word: 3}
providers:
  - {name: hashing, kind: hashing}
  - {name: minilm, kind: sentence-transformer}
  - {name: other, kind: hashing, batch_size: 0, pricing: {usd_per_million_tokens: 1, price_date: soon}}
indexes: {hnws: {M: 3}}
report: 5
k: "5"
history: {measures: [ndgc@10]}
statistcs: {}
""")
    assert lines[:6] == [
        "dataset.format: unknown dataset format 'jsnl' (did you mean 'jsonl'?) (known: beir, cranfield, glasgow, jsonl, xquad)",
        "dataset.split: expected one of train, dev, test, all (got 'tset') (did you mean 'test'?)",
        "dataset.splt: unknown key (did you mean 'split'?)",
        "chunking.max_word: unknown key (did you mean 'max_words'?)",
        "providers[1].kind: unknown provider kind 'sentence-transformer' (did you mean 'sentence-transformers'?) "
        "(known: cohere, e5-multilingual, finetuned, hashing, ollama, openai-compatible, precomputed, python, "
        "sentence-transformers, tei, voyage)",
        "providers[2].batch_size: must be at least 1 (got 0)",
    ]
    assert "providers[2].pricing.price_date: expected a date (YYYY-MM-DD) (got 'soon')" in lines
    assert "report: expected a mapping of keys to values (got 5)" in lines
    assert "k: expected a list (got '5')" in lines
    assert any(line.startswith("indexes.hnws: unknown key: not a field of `indexes` nor an index kind (did you mean "
                               "'hnsw'?)") for line in lines)
    assert any(line.startswith("history.measures[0]: unknown measure 'ndgc@10' (did you mean 'ndcg'?)") for line in lines)
    assert lines[-1] == "statistcs: unknown key (did you mean 'statistics'?)"
    for line in lines:
        assert re.match(r"^[a-z_]+(\[\d+\]|\.[A-Za-z_]+)*: ", line), line
        assert not [word for word in LIBRARY_WORDS if word in line], line


def test_an_unknown_key_far_from_any_names_the_keys_there(tmp_path):
    lines = _errors(tmp_path, "name: t\ndataset: {path: d}\nproviders: [{name: h, kind: hashing}]\n"
                              "statistics: {zzz: 1}\n")
    assert lines == ["statistics.zzz: unknown key (expected one of: resamples, permutations, seed, confidence, "
                     "failure_threshold, buried_answers)"]


MINIMAL = "name: t\ndataset: {path: data}\nproviders: [{name: h, kind: hashing}]\n"


def test_default_measures_follow_k_as_the_primary_measure_does(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(MINIMAL + "k: [5]\nsweep: {}\n")
    spec = load_spec(path)
    assert spec.primary_measure == "ndcg@5"
    assert spec.history.measures == ["ndcg@5", "recall@5", "mrr"]  # not ndcg@10, which k: [5] does not score
    assert spec.sweep.measure == "ndcg@5"
    path.write_text(MINIMAL)  # k: [5, 10, 20]: the defaults as they always were
    spec = load_spec(path)
    assert spec.history.measures == ["ndcg@10", "recall@10", "mrr"]


def test_a_written_measure_k_cannot_score_is_refused_at_its_key(tmp_path):
    lines = _errors(tmp_path, MINIMAL + "k: [5]\nhistory: {measures: [nDCG@5, MRR, recall@10]}\n")
    assert lines == ["history.measures[2]: 'recall@10' is not scored by this spec (with k=[5]: recall@5, mrr, ndcg@5, "
                     "ndcg_exp@5, judged@5, ndcg_condensed@5, bpref) (did you mean 'recall@5'?)"]
    path = tmp_path / "spec.yaml"
    path.write_text(MINIMAL + "k: [5]\nhistory: {measures: [nDCG@5, MRR]}\nsweep: {measure: ndcg@10}\n")
    spec = load_spec(path)
    assert spec.history.measures == ["ndcg@5", "mrr"]  # canonical names, as the run's tables hold them
    assert spec.sweep.measure == "ndcg@10"  # the sweep scores its own runs at its own depth: kept as written
