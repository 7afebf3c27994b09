"""Spec models for systems: validation, defaults, and dangling references named by key path."""
from __future__ import annotations

import pytest
from pydantic import ValidationError

from retbench.tasks.config.systems import (
    FusionSpec, LexicalSpec, RerankerSpec, SystemSpec, check_references, first_stage_names, system_order,
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
    with pytest.raises(ValidationError, match="unknown reranker kind 'nope'"):
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
        "systems[1].first: unknown first stage 'e5/flatt' (did you mean 'e5/flat'?) (known: bm25:plain, e5/flat, e5/ivf, minilm/flat, minilm/ivf)",
        "systems[2].name: 'ok' repeats systems[0].name",
        "systems[2].first: unknown first stage 'bm25:stemmed' (known: bm25:plain, e5/flat, e5/ivf, minilm/flat, minilm/ivf)",
        "systems[2].rerank: unknown reranker 'cohere' (known: ce)",
    ]
    assert check_references(systems[:1], known, ["ce"]) == []


def test_systems_may_read_other_systems_in_any_order_and_fuse_more_than_two():
    known = first_stage_names(["e5", "minilm"], ["flat"], [LexicalSpec(name="plain")])
    systems = [SystemSpec(name="reranked-hybrid", first="hybrid", rerank="ce"),
               SystemSpec(name="hybrid", first="bm25:plain", second="e5/flat"),
               SystemSpec(name="three", inputs=["bm25:plain", "e5/flat", "minilm/flat"]),
               SystemSpec(name="fused-systems", inputs=["three", "reranked-hybrid"])]
    assert check_references(systems, known, ["ce"]) == []
    assert [s.name for s in system_order(systems)] == ["hybrid", "three", "reranked-hybrid", "fused-systems"]
    assert systems[2].fusion == FusionSpec() and systems[2].fused == ["bm25:plain", "e5/flat", "minilm/flat"]


@pytest.mark.parametrize("fields, message", [
    ({"inputs": ["a/flat"]}, "fuses two or more stages"),
    ({"inputs": ["a/flat", "b/flat", "a/flat"]}, "names 'a/flat' more than once"),
    ({"inputs": ["a/flat", "b/flat"], "first": "c/flat"}, "either `inputs` or `first`"),
    ({}, "needs a `first` stage"),
])
def test_the_inputs_form_refuses(fields, message):
    with pytest.raises(ValidationError, match=message):
        SystemSpec(name="s", **fields)


def test_score_fusion_of_three_stages_is_refused_with_its_key_path():
    three = SystemSpec(name="three", inputs=["e5/flat", "minilm/flat", "bm25:plain"], fusion={"method": "score"})
    assert check_references([three], ["e5/flat", "minilm/flat", "bm25:plain"]) == [
        "systems[0].fusion.method: score fusion weighs exactly 2 stages with alpha (got 3); use method: rrf to fuse more"]


@pytest.mark.parametrize("systems, cycles", [
    ([SystemSpec(name="a", first="a", rerank="ce")],
     ["systems[0]: system 'a' is built on itself through a -> a"]),
    ([SystemSpec(name="x", first="e5/flat"), SystemSpec(name="b", first="a", rerank="ce"),
      SystemSpec(name="a", first="b", second="e5/flat")],
     ["systems[1]: system 'b' is built on itself through b -> a -> b"]),
    ([SystemSpec(name="c", first="a", rerank="ce"), SystemSpec(name="a", inputs=["b", "e5/flat"]),
      SystemSpec(name="b", first="c", rerank="ce"), SystemSpec(name="d", first="c", rerank="ce")],
     ["systems[0]: system 'c' is built on itself through c -> a -> b -> c"]),
])
def test_cycles_are_refused_naming_the_cycle(systems, cycles):
    assert check_references(systems, ["e5/flat"], ["ce"]) == cycles
    with pytest.raises(ValueError, match="cycle"):
        system_order(systems)
