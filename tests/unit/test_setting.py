"""Settings as values: the labels every table shows (what a `systems:` entry writes), their query parameters, and keys."""
from __future__ import annotations

import json

import pytest

from retbench.tasks.config.setting import FirstStage, Fusion, Rerank, Setting, system_settings
from retbench.tasks.config.systems import FusionSpec, SystemSpec
from retbench.tasks.stages.variants import VariantSetting


def dense(provider: str, index: str = "flat", nprobe: int | None = None) -> Setting:
    return Setting(FirstStage.dense(provider, index, {} if nprobe is None else {"nprobe": nprobe}))


def test_a_dense_setting_is_labelled_provider_slash_index_and_carries_nprobe_in_params():
    flat, ivf = dense("minilm"), dense("minilm", "ivf", 4)
    assert flat.columns() == ("minilm/flat", "{}", "minilm", "flat", None)
    assert ivf.columns() == ("minilm/ivf", '{"nprobe": 4}', "minilm", "ivf", 4)
    assert flat.label == "minilm/flat" and ivf.label == "minilm/ivf"
    assert flat.key != ivf.key != dense("minilm", "ivf", 8).key


def test_variant_labels_carry_the_variant_marks_of_the_provider_column():
    chunking = VariantSetting("minilm@sent40", "minilm", "sent40", "raw", "chunking", "minilm")
    query = VariantSetting("minilm+typos", "minilm", "default", "typos", "query", "minilm")
    baseline = VariantSetting("minilm", "minilm", "default", "raw", "baseline", None)
    assert chunking.setting("flat", None).label == "minilm@sent40/flat"
    assert query.setting("ivf", 4).columns() == ("minilm+typos/ivf", '{"nprobe": 4}', "minilm+typos", "ivf", 4)
    assert baseline.setting("flat", None).label == "minilm/flat"
    # The baseline's chunking is not part of its label, a variant's is; the query variant of a
    # setting is part of its key.
    assert len({s.setting("flat", None).key for s in (chunking, query, baseline)}) == 3


def test_bm25_is_labelled_bm25_colon_name_and_its_provider_column_is_the_name():
    bm25 = Setting(FirstStage.bm25("plain"))
    assert bm25.columns() == ("bm25:plain", "{}", "plain", "bm25", None) and bm25.label == "bm25:plain"


def test_a_reranked_hybrid_is_labelled_by_its_name_and_its_hybrid_by_name_slash_rrf():
    inputs = [Setting(FirstStage.bm25("plain")), dense("e5", "ivf", 8)]
    one_entry = SystemSpec(name="hyb+ce", first="bm25:plain", second="e5/ivf", rerank="ce", top_n=50)
    hybrid, reranked = system_settings(one_entry, inputs)
    assert hybrid.columns() == ("hyb+ce/rrf", "{}", "hyb+ce", "rrf", None)
    assert reranked.columns() == ("hyb+ce", "{}", "hyb+ce", "rrf+ce", None)
    # The same computation written as two entries (a hybrid, then a system reranking it by name):
    (named_hybrid,) = system_settings(SystemSpec(name="hyb", first="bm25:plain", second="e5/ivf"), inputs)
    (two_entries,) = system_settings(SystemSpec(name="hyb+ce", first="hyb", rerank="ce", top_n=50), [named_hybrid])
    assert two_entries.columns() == reranked.columns() and two_entries.key == reranked.key
    # A reranked dense stage keeps its input's query parameters (the nprobe column of today).
    (ivf_ce,) = system_settings(SystemSpec(name="e5+ce", first="e5/ivf", rerank="ce"), [dense("e5", "ivf", 8)])
    assert ivf_ce.columns() == ("e5+ce", '{"nprobe": 8}', "e5+ce", "ivf+ce", 8)


def test_unnamed_compositions_spell_out_their_stages():
    hybrid = Setting(Fusion((dense("minilm"), Setting(FirstStage.bm25("plain")))))
    assert hybrid.label == "rrf(minilm/flat, bm25:plain)" and hybrid.params == {}
    assert Setting(Rerank(hybrid, "ce", 100)).label == "rrf(minilm/flat, bm25:plain) >> ce@100"
    score = Setting(Fusion((dense("a"), dense("b")), "score", (("normalization", "zscore"),)))
    assert score.index == "fusion-zscore"


def test_keys_are_stable_and_ignore_display_names():
    three = SystemSpec(name="three", inputs=["bm25:plain", "e5/flat", "minilm/flat"])
    inputs = [Setting(FirstStage.bm25("plain")), dense("e5"), dense("minilm")]
    (fused,) = system_settings(three, inputs)
    (renamed,) = system_settings(three.model_copy(update={"name": "other"}), inputs)
    assert fused.key == renamed.key and fused.label != renamed.label
    (reordered,) = system_settings(three, inputs[::-1])
    assert reordered.key != fused.key  # RRF's sum is order-free, but the chunk shown is the first run's
    assert Setting(FirstStage.dense("e5", "ivf", {"nprobe": 4})).key == Setting(FirstStage.dense("e5", "ivf", {"nprobe": 4})).key
    assert json.loads(Setting(FirstStage.dense("e5", "ivf", {"nprobe": 4, "alpha": 1})).params_json) == {"alpha": 1, "nprobe": 4}


def test_malformed_stages_are_refused():
    with pytest.raises(ValueError, match="2 or more inputs"):
        Fusion((dense("a"),))
    with pytest.raises(ValueError, match="exactly 2 inputs"):
        Fusion((dense("a"), dense("b"), dense("c")), "score")
    with pytest.raises(ValueError, match="dense .* or bm25"):
        FirstStage(provider="a", index="flat", lexical="plain")
    assert FusionSpec().method == "rrf"
