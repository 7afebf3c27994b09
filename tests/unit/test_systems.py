"""Spec models for systems: validation, defaults, and dangling references named by key path."""
from __future__ import annotations

import pytest
from pydantic import ValidationError

from tasks.config.systems import (
    FusionSpec, LexicalSpec, RerankerSpec, SystemSpec, check_references, first_stage_names,
)


def test_a_system_with_two_first_stages_fuses_by_rrf_unless_told():
    hybrid = SystemSpec(name="hybrid", first="e5/flat", second="bm25:plain")
    assert hybrid.fusion == FusionSpec() and hybrid.fusion.method == "rrf" and hybrid.fusion.k == 60
    assert SystemSpec(name="e5+ce", first="e5/flat", rerank="ce").top_n == 100


@pytest.mark.parametrize("fields, message", [
    ({"fusion": {"method": "rrf"}}, "fusion needs a `second` first stage"),
    ({"second": "e5/flat"}, "first and second are the same stage"),
    ({"top_n": 0}, "greater than or equal to 1"),
    ({"colour": "red"}, "Extra inputs are not permitted"),
    ({"name": "bad name"}, "should match pattern"),
])
def test_system_spec_refuses(fields, message):
    with pytest.raises(ValidationError, match=message):
        SystemSpec(**{"name": "s", "first": "e5/flat", **fields})


def test_fusion_and_lexical_and_reranker_specs_refuse_bad_values():
    with pytest.raises(ValidationError, match="alphas must be"):
        FusionSpec(method="score", alphas=[0.5, 1.5])
    with pytest.raises(ValidationError, match="less than or equal to 1"):
        LexicalSpec(name="x", b=1.5)
    with pytest.raises(ValidationError, match="unknown stop-word language"):
        LexicalSpec(name="x", tokenizer={"stopwords": "xx"})
    with pytest.raises(ValidationError, match="unknown kind 'nope'"):
        RerankerSpec(name="r", kind="nope")
    with pytest.raises(ValidationError, match="exactly one"):
        RerankerSpec(name="r", kind="cohere-rerank", pricing={"price_date": "2026-11-01"})
    assert FusionSpec(method="score", alphas=[1, 0, 0.5, 0.5]).alphas == [0, 0.5, 1]


def test_index_settings_leave_out_the_name_and_unused_delta():
    a, b = LexicalSpec(name="a"), LexicalSpec(name="b")
    assert a.index_settings() == b.index_settings() and "delta" not in a.index_settings()
    assert LexicalSpec(name="l", method="bm25l").index_settings()["delta"] == 0.5


def test_unknown_references_are_named_by_key_path():
    known = first_stage_names(["e5", "minilm"], ["flat", "ivf"], [LexicalSpec(name="plain")])
    assert known == ["e5/flat", "e5/ivf", "minilm/flat", "minilm/ivf", "bm25:plain"]
    systems = [SystemSpec(name="ok", first="e5/flat", second="bm25:plain", rerank="ce"),
               SystemSpec(name="typo", first="e5/flatt"),
               SystemSpec(name="ok", first="bm25:stemmed", rerank="cohere")]
    assert check_references(systems, known, ["ce"]) == [
        "systems[1].first: unknown first stage 'e5/flatt' (known: bm25:plain, e5/flat, e5/ivf, minilm/flat, minilm/ivf)",
        "systems[2].name: 'ok' repeats systems[0].name",
        "systems[2].first: unknown first stage 'bm25:stemmed' (known: bm25:plain, e5/flat, e5/ivf, minilm/flat, minilm/ivf)",
        "systems[2].rerank: unknown reranker 'cohere' (known: ce)",
    ]
    assert check_references(systems[:1], known, ["ce"]) == []
