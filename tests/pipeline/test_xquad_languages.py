"""Real cross-lingual check on XQuAD with the two packaged models: the language-pair breakdown
must show MiniLM (English-only) collapsing when the question is Hindi, and multilingual-e5 not.

A subset keeps it quick: the first 120 questions per pairing against the first 40 paragraphs
of each language (plus every paragraph those questions need). Vectors are cached in pytest's
cache folder (or RETBENCH_TEST_STORE), so only the first run embeds.
"""
import importlib.util
import os
from pathlib import Path

import polars as pl
import pytest

from retbench.support.paths import ROOT, SHARED_DATA

XQUAD = SHARED_DATA / "xquad"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_xquad_languages", ROOT / "benchmarks" / "bench_xquad_languages.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def pairs(request, tmp_path_factory):
    if not XQUAD.is_dir():
        pytest.skip(f"{XQUAD} not present")
    cache = getattr(request.config, "cache", None)  # absent under -p no:cacheprovider
    store = os.environ.get("RETBENCH_TEST_STORE") or (cache.mkdir("retbench-xquad-store") if cache else tmp_path_factory.mktemp("xquad-store"))
    result = _bench().xquad_language_pairs(Path(store), limit=120, max_documents=40, resamples=1000, log=lambda _: None)
    table = result["language_pairs"]
    return {(p, s, m): (mean, low, high, n) for p, s, m, mean, low, high, n in
            table.select("provider", "slice", "measure", "mean", "ci_low", "ci_high", "n").iter_rows()}, result


@pytest.mark.slow
def test_every_model_and_pairing_is_sliced(pairs):
    table, _ = pairs
    for model in ("minilm", "e5-small"):
        for pair in ("en->en", "hi->hi", "hi->en", "en->hi"):
            mean, low, high, n = table[(model, pair, "ndcg@10")]
            assert n == 120 and low <= mean <= high


@pytest.mark.slow
def test_minilm_collapses_on_hindi_questions(pairs):
    table, _ = pairs
    en_en = table[("minilm", "en->en", "ndcg@10")]
    hi_en = table[("minilm", "hi->en", "ndcg@10")]
    assert en_en[0] > 0.85
    assert hi_en[0] < 0.35
    # not an artefact of resampling: the intervals are far apart
    assert hi_en[2] < en_en[1] - 0.4


@pytest.mark.slow
def test_e5_crosses_languages(pairs):
    table, result = pairs
    en_en = table[("e5-small", "en->en", "ndcg@10")]
    hi_en = table[("e5-small", "hi->en", "ndcg@10")]
    hi_hi = table[("e5-small", "hi->hi", "ndcg@10")]
    assert en_en[0] > 0.85 and hi_hi[0] > 0.85
    assert hi_en[0] > en_en[0] - 0.15
    # and it beats MiniLM on hi->en, significantly, query by query
    row = result["comparisons"].filter((pl.col("pair") == "hi->en") & (pl.col("measure") == "ndcg@10")).row(0, named=True)
    assert row["a_provider"] == "e5-small" and row["diff"] > 0.4 and row["ci_low"] > 0.3 and row["p_value"] < 0.001
