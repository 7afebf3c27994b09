"""The ladder's cost model (issue 32 item 0): train is tuning evidence like dev; an unmeasured
cost is unknown, never cheaper or costlier; when no measured cost separates the steps the order of
effort decides and the ladder says so; a cheaper step that gains significantly less than another
is named with that trade-off. Constructed per-query tables with known answers."""
from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from retbench.tasks.analysis.ladder import Step, ladder_table, recommendation
from retbench.tasks.reporting.ladder_section import _shown, ladder_sentences

TEST = [f"t{i:02d}" for i in range(40)]
TRAIN = [f"r{i:02d}" for i in range(40)]
BASE = "minilm/flat"


def _rows(setting, values: dict, split_of) -> list[dict]:
    return [{"setting": setting, "params": "{}", "query_id": q, "measure": "ndcg@10", "value": float(v),
             "split": split_of(q)} for q, v in values.items()]


def _issue_case(tuning=TRAIN, tuning_split="train"):
    """The held-out BEIR run of the issue: fine-tuning +0.017, BM25 +0.041, the hybrid +0.072 on
    test; the fine-tune (mined from train) gains +0.2 on train."""
    rng = np.random.default_rng(0)
    split_of = lambda q: "test" if q in TEST else tuning_split  # noqa: E731
    base = {q: 0.5 + rng.normal(0, 0.05) for q in TEST + tuning}
    noise = lambda: rng.normal(0, 0.004)  # noqa: E731
    rows = _rows(BASE, base, split_of)
    rows += _rows("minilm-ft/flat", {q: base[q] + (0.017 if q in TEST else 0.2) + noise() for q in TEST + tuning}, split_of)
    rows += _rows("bm25:bm25", {q: base[q] + 0.041 + noise() for q in TEST + tuning}, split_of)
    rows += _rows("bm25+minilm", {q: base[q] + 0.072 + noise() for q in TEST + tuning}, split_of)
    return pl.DataFrame(rows)


STEPS = [Step("finetuned", "minilm-ft/flat", "minilm fine-tuned"), Step("model", "bm25:bm25", "BM25 bm25"),
         Step("hybrid", "bm25+minilm", "bm25 + minilm fused (rrf)")]


def _costs(ms=(2.0, 2.0, None, None), size=(1000, 1000, None, None)):
    # baseline, fine-tuned, bm25, hybrid: no prices (local models), BM25 and hybrid unmeasured.
    return pl.DataFrame({"setting": [BASE, "minilm-ft/flat", "bm25:bm25", "bm25+minilm"], "params": ["{}"] * 4,
                         "usd_per_1k_queries": [0.0] * 4, "query_p50_ms": list(ms), "index_bytes": list(size)},
                        schema_overrides={"query_p50_ms": pl.Float64, "index_bytes": pl.Int64})


def test_train_is_tuning_evidence_like_dev():
    ladder = ladder_table(_issue_case(), _costs(), STEPS, BASE, "ndcg@10", permutations=2000)
    ft = ladder.filter(pl.col("setting") == "minilm-ft/flat").row(0, named=True)
    assert ft["tuning_split"] == "train" and ft["dev_n"] == 40
    assert ft["dev_gain"] == pytest.approx(0.2, abs=0.01) and ft["dev_significant"]
    assert ladder["dev_gain"].null_count() == 0  # was null on every step when tuning was train
    sentences = ladder_sentences(ladder)
    lost = [s for s in sentences if s.startswith("Train gains that did not hold on test")]
    assert lost == []  # the fine-tune's +0.017 on test is still significant: its train gain held
    assert ft["dev_gain_held_on_test"] is True
    shown = _shown(ladder)
    assert "gain on train" in shown.columns and "train gain held on test" in shown.columns


def test_a_train_gain_that_did_not_hold_is_named_with_train():
    per_query = _issue_case().with_columns(
        value=pl.when((pl.col("setting") == "minilm-ft/flat") & (pl.col("split") == "test"))
        .then(pl.col("value") - 0.017).otherwise(pl.col("value")))
    ladder = ladder_table(per_query, _costs(), STEPS, BASE, "ndcg@10", permutations=2000)
    lost = [s for s in ladder_sentences(ladder) if "did not hold" in s]
    assert len(lost) == 1 and lost[0].startswith("Train gains that did not hold on test: minilm-ft/flat (train +0.")
    assert lost[0].endswith(", test +0.000).")


def test_unknown_costs_rank_nothing_and_the_order_of_effort_decides():
    # The issue's ladder called BM25 "costlier" than fine-tuning because its index bytes were
    # null. Dollars tie (0 each), latency and bytes are unknown for BM25 and the hybrid: no
    # measured cost separates the three, so the order of effort puts another model first.
    ladder = ladder_table(_issue_case(), _costs(), STEPS, BASE, "ndcg@10", permutations=2000)
    pick, basis = recommendation(ladder)
    assert pick["setting"] == "bm25:bm25"
    assert ladder.filter(pl.col("recommended"))["setting"].to_list() == ["bm25:bm25"]
    assert basis == ("the order of effort (chunking, metadata filters, query preprocessing, another model or BM25, "
                     "hybrid, reranker, fine-tuning), since no measured cost separates them (added p50 query latency "
                     "unknown for bm25:bm25, bm25+minilm; added index bytes unknown for bm25:bm25, bm25+minilm)")
    text = " ".join(ladder_sentences(ladder))
    assert "costlier" not in text
    assert "latency not measured" in text and "size not measured" in text


def test_a_significantly_larger_gain_is_named_as_the_trade_off():
    ladder = ladder_table(_issue_case(), _costs(), STEPS, BASE, "ndcg@10", permutations=2000)
    hybrid = ladder.filter(pl.col("setting") == "bm25+minilm").row(0, named=True)
    assert hybrid["gain_vs_recommended"] == pytest.approx(0.031, abs=0.003)
    assert hybrid["gains_more_than_recommended"] is True and hybrid["gain_vs_recommended_ci_low"] > 0
    ft = ladder.filter(pl.col("setting") == "minilm-ft/flat").row(0, named=True)
    assert ft["gain_vs_recommended"] is None  # it gains less than the pick: no trade-off to name
    sentences = ladder_sentences(ladder)
    trade = [s for s in sentences if s.startswith("Trade-off:")]
    assert len(trade) == 1
    assert trade[0].startswith("Trade-off: bm25+minilm (hybrid) gains significantly more than bm25:bm25 (+0.07")
    assert ("adds +$0.0000 per 1,000 queries, latency not measured, size not measured; once: texts to embed "
            "unknown, whether an index must be built unknown, against +$0.0000 per 1,000 queries, latency not "
            "measured, size not measured; once: no texts to embed, an index to build for bm25:bm25.") in trade[0]
    assert any(s.startswith("Also significant on test, tried after it: minilm-ft/flat +0.01") for s in sentences)


def test_a_cost_measured_for_every_step_decides_before_the_order_of_effort():
    # Latency measured everywhere: BM25 +0.5 ms, the hybrid +3 ms, the fine-tune +0 ms. Latency
    # alone separates them (bytes, unknown for two, are never reached): the fine-tune, last in
    # effort, wins.
    ladder = ladder_table(_issue_case(), _costs(ms=(2.0, 2.0, 2.5, 5.0)), STEPS, BASE, "ndcg@10", permutations=2000)
    pick, basis = recommendation(ladder)
    assert pick["setting"] == "minilm-ft/flat"
    assert basis == "the fewest added p50 query latency"
    # ... and both larger gains are named with what they add.
    trade = [s for s in ladder_sentences(ladder) if s.startswith("Trade-off:")]
    assert [t.split(" (")[0] for t in trade] == ["Trade-off: bm25:bm25", "Trade-off: bm25+minilm"]
    assert "+0.50 ms p50 per query" in trade[0]


def test_every_step_carries_its_one_time_cost():
    # The fine-tune re-embeds the corpus (5,000 texts, unpriced local model) after 189 s of
    # training; BM25 embeds nothing; the hybrid's own row cannot say what it embeds: unknown.
    costs = _costs(ms=(2.0, 2.0, 2.5, 5.0)).with_columns(
        corpus_texts=pl.Series([5000, 5000, None, None], dtype=pl.Int64),
        corpus_usd=pl.Series([None, None, None, None], dtype=pl.Float64),
        train_seconds=pl.Series([None, 189.0, None, None], dtype=pl.Float64))
    ladder = ladder_table(_issue_case(), costs, STEPS, BASE, "ndcg@10", permutations=2000)
    once = {r["setting"]: (r["once_texts_to_embed"], r["once_embed_usd"], r["once_train_seconds"])
            for r in ladder.iter_rows(named=True)}
    assert once == {"minilm-ft/flat": (5000, None, 189.0), "bm25:bm25": (0, 0.0, 0.0), "bm25+minilm": (None, None, 0.0)}
    recommended = next(s for s in ladder_sentences(ladder) if s.startswith("Recommended: minilm-ft/flat"))
    assert recommended.endswith("; once: 5,000 texts to embed (not priced), 189 s of training, an index to build.")


def _close_case(second_gain: float):
    """Two steps over the baseline on 40 test queries: another model (+0.040) and a reranker
    (`second_gain`), each with its own small per-query noise."""
    rng = np.random.default_rng(1)
    base = {q: 0.5 + rng.normal(0, 0.05) for q in TEST}
    rows = _rows(BASE, base, lambda q: "test")
    rows += _rows("other/flat", {q: v + 0.040 + rng.normal(0, 0.01) for q, v in base.items()}, lambda q: "test")
    rows += _rows("rr", {q: v + second_gain + rng.normal(0, 0.01) for q, v in base.items()}, lambda q: "test")
    return pl.DataFrame(rows)


CLOSE_STEPS = [Step("model", "other/flat", "other (hashing)"), Step("reranker", "rr", "minilm/flat, top 20 reranked")]


def _close_costs():
    # Same dollars, latency and bytes for both; the model embeds the corpus anew (5,000 texts).
    return pl.DataFrame({"setting": [BASE, "other/flat", "rr"], "params": ["{}"] * 3, "usd_per_1k_queries": [0.0] * 3,
                         "query_p50_ms": [2.0, 3.0, 3.0], "index_bytes": [1000, 1000, 1000],
                         "corpus_texts": [5000, 5000, None], "corpus_usd": [None, None, None],
                         "train_seconds": [None, None, None]},
                        schema_overrides={"corpus_texts": pl.Int64, "corpus_usd": pl.Float64, "train_seconds": pl.Float64})


def test_the_smaller_one_time_cost_decides_between_gains_not_significantly_different():
    # Per-query costs tie; the gains (+0.040, +0.041) are not significantly different; the
    # reranker embeds nothing anew, the model 5,000 texts: the reranker, later in effort, wins.
    ladder = ladder_table(_close_case(0.041), _close_costs(), CLOSE_STEPS, BASE, "ndcg@10", permutations=2000)
    assert ladder.filter(pl.col("recommended"))["setting"].to_list() == ["rr"]
    pick, basis = recommendation(ladder)
    assert pick["setting"] == "rr"
    assert basis.startswith("no measured per-query cost separating them, the smaller one-time cost (texts to embed "
                            "anew: 0 against 5,000 for other/flat), as their test gains are not significantly different (p ")
    recommended = next(s for s in ladder_sentences(ladder) if s.startswith("Recommended: rr"))
    assert "chosen by no measured per-query cost separating them, the smaller one-time cost" in recommended


def test_a_one_time_cost_never_trades_away_a_significantly_larger_gain():
    # The model gains +0.040, the reranker +0.010: significantly less, so the one-time cost does
    # not decide and the order of effort puts the model first.
    ladder = ladder_table(_close_case(0.010), _close_costs(), CLOSE_STEPS, BASE, "ndcg@10", permutations=2000)
    pick, basis = recommendation(ladder)
    assert pick["setting"] == "other/flat"
    assert basis.startswith("the order of effort") and "one-time" not in basis


def test_a_step_without_embed_latency_shows_its_search_part_and_the_unknown_axis():
    # No latency profile: query latency is unknown for every setting, the search part is known.
    costs = _close_costs().with_columns(query_p50_ms=pl.lit(None, pl.Float64),
                                        search_p50_ms=pl.Series([0.5, 0.75, 0.5], dtype=pl.Float64))
    ladder = ladder_table(_close_case(0.041), costs, CLOSE_STEPS, BASE, "ndcg@10", permutations=2000)
    model = ladder.filter(pl.col("setting") == "other/flat").row(0, named=True)
    assert model["added_query_p50_ms"] is None and model["added_search_p50_ms"] == pytest.approx(0.25)
    pick, basis = recommendation(ladder)
    assert "added p50 query latency unknown for other/flat, rr" in basis
    text = " ".join(ladder_sentences(ladder))
    assert "query latency unknown (the embedding was not timed: no latency section), search +0.25 ms p50" in text
