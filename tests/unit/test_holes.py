"""Holes in the judgments (issue 32 item 2): the verdict and the ladder show judged@10 beside the
primary measure, and flag two compared settings whose judged@10 differ by more than
verdict.judged_gap, saying whether the order holds on condensed nDCG'. Constructed runs."""
from __future__ import annotations

import polars as pl
import pytest

from retbench.tasks.analysis.holes import Side, hole_gap, hole_measures
from retbench.tasks.analysis.ladder import Step, ladder_table
from retbench.tasks.config.verdict import VerdictSpec
from retbench.tasks.reporting.ladder_section import _shown, ladder_sentences
from retbench.tasks.reporting.verdict import decide, verdict_frame, verdict_sentences

TEST = [f"test-{i:02d}" for i in range(40)]
DEV = [f"dev-{i:02d}" for i in range(20)]


def _setting(provider, index, ndcg, judged, condensed):
    """Rows of one setting: the same value on every query, with a +-0.05 wobble so the paired
    tests have variance; dev queries get the same values."""
    rows = []
    for i, q in enumerate(TEST + DEV):
        wobble = 0.05 if i % 2 else -0.05
        for measure, value in (("ndcg@10", ndcg + wobble), ("judged@10", judged),
                               ("ndcg_condensed@10", condensed + wobble)):
            rows.append((provider, index, None, q, measure, value, "test" if q.startswith("test") else "dev"))
    return rows


def _write(folder, *settings):
    schema = {"provider": pl.String, "index": pl.String, "nprobe": pl.Int64, "query_id": pl.String,
              "measure": pl.String, "value": pl.Float64, "split": pl.String}
    per_query = pl.DataFrame([r for s in settings for r in _setting(*s)], schema=schema, orient="row")
    per_query.write_parquet(folder / "per_query.parquet")
    per_query.group_by("provider", "index", "nprobe", "measure").agg(
        value=pl.col("value").mean(), queries=pl.len()).write_parquet(folder / "summary.parquet")


def test_the_holier_loser_is_flagged_and_the_order_reverses_on_condensed_ndcg(tmp_path):
    # The issue's case: the dense model retrieves documents BM25's pool never judged. On nDCG@10
    # BM25 leads by 0.05; with the holes removed, e5 leads by 0.08.
    _write(tmp_path, ("bm25", "bm25", 0.50, 0.94, 0.52), ("e5-small", "flat", 0.45, 0.69, 0.60))
    verdict = decide(tmp_path, "ndcg@10")
    assert verdict.best["label"] == "bm25 bm25"
    assert verdict.judged["e5-small flat"] == pytest.approx((0.69, 0.60))
    text = verdict_sentences(verdict)
    assert ("e5-small flat's top 10 is 31% unjudged against bm25 bm25's 6%: its loss may be overstated; on condensed "
            "nDCG′ (unjudged documents removed) the order is reversed (bm25 bm25 minus e5-small flat -0.080).") in text
    # The flag follows the comparison it qualifies.
    at = next(i for i, s in enumerate(text) if s.startswith("It is significantly better than the runner-up"))
    assert text[at + 1].startswith("e5-small flat's top 10 is 31% unjudged")
    frame = verdict_frame(verdict)
    assert frame.columns[:4] == ["role", "setting", "ndcg@10", "judged@10"]
    assert frame["judged@10"].to_list() == ["0.94", "0.69"]
    assessed = verdict.assessment()
    assert assessed["judged"].to_list() == pytest.approx([0.94, 0.69])


def test_the_holier_winner_keeps_its_order(tmp_path):
    _write(tmp_path, ("e5-small", "flat", 0.55, 0.69, 0.66), ("bm25", "bm25", 0.50, 0.94, 0.52))
    text = verdict_sentences(decide(tmp_path, "ndcg@10"))
    assert ("e5-small flat's top 10 is 31% unjudged against bm25 bm25's 6%: its lead may be understated; on condensed "
            "nDCG′ (unjudged documents removed) the order is the same (e5-small flat minus bm25 bm25 +0.140).") in text


def test_complete_judgments_and_a_small_gap_say_nothing(tmp_path):
    _write(tmp_path, ("bm25", "bm25", 0.50, 1.0, 0.50), ("e5-small", "flat", 0.45, 1.0, 0.45))
    text = " ".join(verdict_sentences(decide(tmp_path, "ndcg@10")))
    assert "unjudged" not in text and "condensed" not in text
    # A gap of 0.08 is within the default 0.10; a judged_gap of 0.05 flags it.
    _write(tmp_path, ("bm25", "bm25", 0.50, 0.94, 0.52), ("e5-small", "flat", 0.45, 0.86, 0.50))
    assert "unjudged" not in " ".join(verdict_sentences(decide(tmp_path, "ndcg@10")))
    flagged = verdict_sentences(decide(tmp_path, "ndcg@10", VerdictSpec(judged_gap=0.05)))
    assert any("top 10 is 14% unjudged against bm25 bm25's 6%" in s for s in flagged)


def test_a_run_without_judged_measures_has_no_column(tmp_path):
    _write(tmp_path, ("bm25", "bm25", 0.50, 0.94, 0.52), ("e5-small", "flat", 0.45, 0.69, 0.60))
    per_query = pl.read_parquet(tmp_path / "per_query.parquet")
    per_query.filter(pl.col("measure") == "ndcg@10").write_parquet(tmp_path / "per_query.parquet")
    verdict = decide(tmp_path, "ndcg@10")
    assert verdict.hole_measures is None and verdict.hole_gaps == {}
    assert "judged@10" not in verdict_frame(verdict).columns


def test_hole_measures_follow_the_primary_cutoff():
    scored = {"ndcg@10", "judged@10", "ndcg_condensed@10", "ndcg@5"}
    assert hole_measures("ndcg@10", scored) == ("judged@10", "ndcg_condensed@10")
    # A primary measure at a cutoff the run has no judged@ for: the cutoff it has.
    assert hole_measures("ndcg@5", scored) == ("judged@10", "ndcg_condensed@10")
    assert hole_measures("ndcg@10", {"ndcg@10"}) is None


def test_the_gap_is_strictly_beyond_the_threshold():
    a, b = Side("a", 0.80, 0.5), Side("b", 0.90, 0.4)
    assert hole_gap(a, b, 0.1, "10", threshold=0.10) is None  # exactly 10 points: silent
    assert hole_gap(a, b, 0.1, "10", threshold=0.09) is not None


# --- the ladder ---------------------------------------------------------------------------------


def _ladder_rows(setting, ndcg, judged, condensed):
    rows = []
    for i, q in enumerate(TEST + DEV):
        wobble = 0.05 if i % 2 else -0.05
        for measure, value in (("ndcg@10", ndcg + wobble), ("judged@10", judged), ("ndcg_condensed@10", condensed + wobble)):
            rows.append({"setting": setting, "params": "{}", "query_id": q, "measure": measure, "value": value,
                         "split": "test" if q.startswith("test") else "dev"})
    return rows


def _costs(*settings):
    return pl.DataFrame({"setting": list(settings), "params": ["{}"] * len(settings),
                         "usd_per_1k_queries": [0.0] * len(settings), "query_p50_ms": [1.0] * len(settings),
                         "index_bytes": [100] * len(settings)})


def test_ladder_shows_judged_beside_the_measure_and_flags_a_gap():
    per_query = pl.DataFrame(_ladder_rows("bm25:bm25", 0.50, 0.94, 0.52) + _ladder_rows("e5/flat", 0.45, 0.69, 0.60)
                             + _ladder_rows("bm25+e5", 0.55, 0.90, 0.57))
    steps = [Step("model", "e5/flat", "e5"), Step("hybrid", "bm25+e5", "rrf")]
    ladder = ladder_table(per_query, _costs("bm25:bm25", "e5/flat", "bm25+e5"), steps, "bm25:bm25", "ndcg@10",
                          permutations=2000)
    e5, hybrid = ladder.row(0, named=True), ladder.row(1, named=True)
    assert (e5["test_baseline_judged"], e5["test_judged"]) == pytest.approx((0.94, 0.69))
    assert e5["test_condensed_gain"] == pytest.approx(0.08) and e5["judged_gap"] is True
    assert hybrid["judged_gap"] is False and hybrid["holes_sentence"] is None  # 0.04 apart: silent
    sentences = ladder_sentences(ladder)
    assert ("e5/flat: e5/flat's top 10 is 31% unjudged against bm25:bm25's 6%: its loss may be overstated; on condensed "
            "nDCG′ (unjudged documents removed) the order is reversed (e5/flat minus bm25:bm25 +0.080).") in sentences
    shown = _shown(ladder)
    at = shown.columns.index("baseline on test")
    assert shown.columns[at:at + 5] == ["baseline on test", "baseline judged@10 on test", "step on test",
                                        "step judged@10 on test", "gain on test"]


def test_ladder_with_complete_judgments_says_nothing():
    per_query = pl.DataFrame(_ladder_rows("base/flat", 0.50, 1.0, 0.50) + _ladder_rows("e5/flat", 0.45, 1.0, 0.45))
    ladder = ladder_table(per_query, _costs("base/flat", "e5/flat"), [Step("model", "e5/flat", "e5")], "base/flat",
                          "ndcg@10", permutations=2000)
    assert ladder["judged_gap"].to_list() == [False]
    assert not any("unjudged" in s for s in ladder_sentences(ladder))


# --- judged@k that fell since the previous run ------------------------------------------------


def _earlier(folder, *settings, run_id="20261201-000000-aaaaaa", why="dataset changed (aaaa -> bbbb)"):
    """An EarlierRun holding `settings`' per-query values, as history.per_query_of returns them."""
    from retbench.tasks.reporting.verdict import EarlierRun

    _write(folder, *settings)
    return EarlierRun(run_id, why, pl.read_parquet(folder / "per_query.parquet"))


def test_a_fall_in_judged_since_the_previous_run_is_named_even_when_every_setting_fell_alike(tmp_path):
    # Half the judgments lost at random: both settings fall by about two fifths, so they stay
    # within judged_gap of each other (0.03 apart), and only the comparison with the last run sees it.
    (tmp_path / "then").mkdir()
    earlier = _earlier(tmp_path / "then", ("bm25", "bm25", 0.35, 0.30, 0.65), ("minilm", "flat", 0.38, 0.32, 0.70))
    _write(tmp_path, ("bm25", "bm25", 0.26, 0.19, 0.55), ("minilm", "flat", 0.28, 0.19, 0.62))
    verdict = decide(tmp_path, "ndcg@10", earlier=earlier)
    assert verdict.hole_gaps == {}
    fall = verdict.judged_fall
    assert [label for label, *_ in fall.fallen] == ["minilm flat", "bm25 bm25"]  # best first
    assert fall.fallen[0][1:] == pytest.approx((0.32, 0.19)) and fall.compared == 2
    assert verdict_sentences(verdict)[-1] == (
        "Less of each top 10 is judged than in run 20261201-000000-aaaaaa (dataset changed (aaaa -> bbbb)): judged@10 "
        "minilm flat 0.320 -> 0.190, bm25 bm25 0.300 -> 0.190 (2 of 2 settings fell by more than 20% of their share). "
        "Unjudged documents count as non-relevant, so part of any fall in ndcg@10 since then may be missing judgments "
        "rather than worse retrieval; `retbench judge export OUTPUT_DIR` lists the unjudged documents to judge.")


def test_a_small_fall_a_rise_or_no_earlier_judged_say_nothing(tmp_path):
    (tmp_path / "then").mkdir()
    # bm25 0.30 -> 0.25 is a sixth of its share: within the default fifth; minilm rose.
    earlier = _earlier(tmp_path / "then", ("bm25", "bm25", 0.35, 0.30, 0.65), ("minilm", "flat", 0.38, 0.20, 0.70))
    _write(tmp_path, ("bm25", "bm25", 0.33, 0.25, 0.65), ("minilm", "flat", 0.38, 0.32, 0.70))
    assert decide(tmp_path, "ndcg@10", earlier=earlier).judged_fall is None
    tighter = decide(tmp_path, "ndcg@10", VerdictSpec(judged_fall=0.1), earlier=earlier).judged_fall
    assert [label for label, *_ in tighter.fallen] == ["bm25 bm25"]
    # An earlier run recorded before judged@k was scored pairs with nothing.
    older = earlier.per_query.filter(pl.col("measure") == "ndcg@10")
    from retbench.tasks.reporting.verdict import EarlierRun
    assert decide(tmp_path, "ndcg@10", earlier=EarlierRun("r", None, older)).judged_fall is None


def test_the_fall_is_measured_on_the_verdicts_queries_only(tmp_path):
    # The earlier run's dev queries were judged less; on test (the verdict's queries) nothing fell.
    (tmp_path / "then").mkdir()
    earlier = _earlier(tmp_path / "then", ("bm25", "bm25", 0.35, 0.30, 0.65), ("minilm", "flat", 0.38, 0.32, 0.70))
    then = earlier.per_query.with_columns(
        value=pl.when(pl.col("query_id").str.starts_with("test") | (pl.col("measure") != "judged@10"))
        .then(pl.col("value")).otherwise(0.9))
    _write(tmp_path, ("bm25", "bm25", 0.35, 0.30, 0.65), ("minilm", "flat", 0.38, 0.32, 0.70))
    from retbench.tasks.reporting.verdict import EarlierRun
    assert decide(tmp_path, "ndcg@10", earlier=EarlierRun("r", None, then)).judged_fall is None
