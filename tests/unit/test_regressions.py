"""Regression checks against the run history: like with like (same data, same setting key),
enough paired queries, and Holm's correction over every test of a run."""
from datetime import datetime, timedelta, timezone

import numpy as np
import polars as pl
import pytest
from pydantic import ValidationError

from retbench.tasks.analysis import history
from retbench.tasks.analysis.stats import holm_adjusted
from retbench.tasks.config.spec import HistorySpec

OLD_DATA, NEW_DATA = "a" * 64, "b" * 64
START = datetime(2026, 11, 1, 2, 0, tzinfo=timezone.utc)


def _per_query(values, key="key-flat", setting="m/flat", measure="ndcg@10", provider="m", index="flat", nprobe=None):
    n = len(values)
    return pl.DataFrame({
        "setting_key": key, "setting": setting, "params": "{}" if nprobe is None else f'{{"nprobe": {nprobe}}}',
        "provider": provider, "index": index, "nprobe": pl.Series([nprobe] * n, dtype=pl.Int64),
        "query_id": [f"q{i:03d}" for i in range(n)], "measure": measure, "value": pl.Series(values, dtype=pl.Float64),
    })


def _record(store, run_id, day, dataset, per_query, spec_name="nightly"):
    manifest = {"run": {"finished_at": (START + timedelta(days=day)).isoformat(), "spec_name": spec_name,
                        "spec_hash": "s", "git_commit": "abc"},
                "dataset": {"content_hash": dataset}, "providers": {"m": {"kind": "hashing", "dim": 8}}}
    names = [c for c in ("setting", "params", "setting_key") if c in per_query.columns]
    summary = per_query.group_by(*names, "provider", "index", "nprobe", "measure").agg(
        value=pl.col("value").mean(), queries=pl.len())
    history.append_run(store, run_id, manifest, summary, per_query)


def test_holm_adjusted_p_values_by_hand():
    # Sorted: 0.005, 0.01, 0.03, 0.04 -> x4, x3, x2, x1 = 0.02, 0.03, 0.06, 0.04 -> running max 0.02, 0.03, 0.06, 0.06.
    assert holm_adjusted([0.01, 0.04, 0.03, 0.005]).tolist() == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm_adjusted([0.5, 0.6]).tolist() == [1.0, 1.0]  # 2 x 0.5 caps at 1; the larger p cannot be below it
    assert holm_adjusted([]).tolist() == []
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        holm_adjusted([0.2, 1.5])


def test_a_changed_data_set_starts_a_new_series_and_flags_nothing(tmp_path):
    rng = np.random.default_rng(1)
    good = rng.uniform(0.6, 1.0, 40)
    _record(tmp_path, "run-0", 0, OLD_DATA, _per_query(good))
    collapsed = _per_query(good - 0.5)  # a drop that would be flagged on the same data
    found = history.regression_check(tmp_path, "nightly", "run-1", NEW_DATA, collapsed, ["ndcg@10"])
    assert found.height == 1 and not found["regression"].any()
    assert found.select("against", "reference_run_id", "measure").rows() == [("previous", "run-0", None)]
    assert found["status"].item() == ("dataset changed since run run-0 (aaaaaaaaaaaa -> bbbbbbbbbbbb): "
                                      "a new series starts; no regressions computed")
    # Recorded, the new run opens series 2; the next run on the new data compares with it, not with run-0.
    _record(tmp_path, "run-1", 1, NEW_DATA, collapsed)
    assert history.runs_of(tmp_path, "nightly")["series"].to_list() == [1, 2]
    assert history.previous_in_series(tmp_path, "nightly", "run-2", NEW_DATA) == ("run-1", None)
    again = history.regression_check(tmp_path, "nightly", "run-2", NEW_DATA, collapsed, ["ndcg@10"])
    assert again.select("reference_run_id", "status", "n").rows() == [("run-1", "tested", 40)]
    assert not again["regression"].any()
    trend = history.trend_table(tmp_path, "nightly")
    assert trend.select("run_id", "series", "dataset").rows() == [("run-0", 1, "a" * 12), ("run-1", 2, "b" * 12)]


def test_a_baseline_on_other_data_is_not_compared(tmp_path):
    _record(tmp_path, "pinned", 0, OLD_DATA, _per_query([0.9] * 30))
    found = history.regression_check(tmp_path, "nightly", "run-1", NEW_DATA, _per_query([0.1] * 30), ["ndcg@10"],
                                     previous=False, baseline="pinned")
    assert found.select("against", "status").rows() == [
        ("baseline", "baseline run pinned ran on other data (aaaaaaaaaaaa -> bbbbbbbbbbbb): not compared")]


def test_a_one_query_difference_is_never_a_regression():
    # The reported case: one paired query, 1.0 -> 0.125 (an interval of [-0.875, -0.875]).
    alone = history.compare_runs(_per_query([0.125]), [("previous", "run-0", _per_query([1.0]))], ["ndcg@10"])
    assert alone.select("n", "diff", "ci_high", "p_value", "regression").rows() == [(1, -0.875, None, None, False)]
    assert alone["status"].item() == "too few paired queries (n < 20)"
    # One query of 20 drops by 0.875, the rest are equal: every sign flip has the same |mean|, so p = 1.
    reference = [1.0] * 20
    current = [0.125] + [1.0] * 19
    found = history.compare_runs(_per_query(current), [("previous", "run-0", _per_query(reference))], ["ndcg@10"])
    row = found.row(0, named=True)
    assert (row["n"], row["status"], row["p_value"], row["regression"]) == (20, "tested", 1.0, False)
    assert row["diff"] == pytest.approx(-0.875 / 20)


def test_min_queries_is_a_spec_key_of_at_least_one():
    assert HistorySpec().min_queries == 20
    with pytest.raises(ValidationError, match="min_queries"):
        HistorySpec(min_queries=0)
    # A lower minimum lets fewer queries be tested: 8 equal drops give p = 2 / 2^8 (all flips of one sign).
    few = history.compare_runs(_per_query([0.1] * 8), [("previous", "r", _per_query([0.9] * 8))], ["ndcg@10"],
                               min_queries=8)
    assert few["status"].item() == "tested" and few["regression"].item()
    assert few["p_value"].item() == pytest.approx(2 / 2**8, abs=0.002)


def _settings(values_by_key: dict[str, list[float]], measures=("ndcg@10", "mrr")) -> pl.DataFrame:
    return pl.concat([_per_query(values, key=key, setting=f"m/{key}", index=key, measure=m)
                      for key, values in values_by_key.items() for m in measures])


def test_a_large_drop_over_enough_queries_survives_holm_over_every_test():
    rng = np.random.default_rng(2)
    before = rng.uniform(0.5, 1.0, 25)
    keys = [f"s{i}" for i in range(15)]
    reference = _settings({k: before for k in keys})
    current = _settings({k: (before - 0.3 if k == "s7" else before) for k in keys})
    found = history.compare_runs(current, [("previous", "run-0", reference)], ["ndcg@10", "mrr"])
    assert found.height == 30 and set(found["tests"]) == {30} and set(found["correction"]) == {"holm"}
    flagged = found.filter(pl.col("regression"))
    assert flagged.select("setting_key", "measure").sort("measure").rows() == [("s7", "mrr"), ("s7", "ndcg@10")]
    # All 25 differences are -0.3: only the 2 all-same-sign flips reach |mean| 0.3, so p is about 1 / (flips + 1);
    # the two smallest of 30 p values are multiplied by 30 and 29, then the running max makes both the larger.
    # Every setting is screened with 1000 flips; s7 (p <= 2 x alpha) is tested again with the default 10000,
    # already more than 10 x 30 tests / alpha 0.05; the unchanged settings (p = 1) keep their 1000.
    assert set(flagged["permutations"]) == {10000} and set(found.filter(~pl.col("regression"))["permutations"]) == {1000}
    permutations = 10000
    # The two measures carry the same values, so the same flips give them the same p: Holm makes both 30 x p.
    assert flagged["p_value"].to_list() == pytest.approx([1 / (permutations + 1)] * 2)
    assert flagged["p_adjusted"].to_list() == pytest.approx([30 / (permutations + 1)] * 2)
    assert flagged["diff"].to_list() == pytest.approx([-0.3, -0.3])
    # With only 1000 flips the floor 30 / 1001 would be 0.03: the flagged setting alone is tested again with
    # 10 x 30 / 0.05 - 1 = 5999 flips (floor 30 / 6000 = 0.005); the settings with p = 1 keep 1000.
    coarse = history.compare_runs(current, [("previous", "run-0", reference)], ["ndcg@10", "mrr"], permutations=1000)
    assert dict(coarse.group_by("setting_key").agg(pl.col("permutations").max()).rows())["s7"] == 5999
    assert set(coarse.filter(pl.col("setting_key") != "s7")["permutations"]) == {1000}
    assert coarse.filter(pl.col("regression"))["p_adjusted"].to_list() == pytest.approx([30 / 6000] * 2)


def test_a_borderline_p_among_many_settings_does_not_survive_holm():
    # 16 of 20 queries lose 0.1, 4 gain 0.1: exact two-sided p = 2 * sum(C(20, k), k <= 4) / 2^20 = 0.0118,
    # and the bootstrap interval of the mean (-0.06) lies below zero: flagged were it the only test.
    before = np.linspace(0.4, 0.8, 20)
    borderline = before + np.where(np.arange(20) < 16, -0.1, 0.1)
    alone = history.compare_runs(_per_query(borderline), [("previous", "r", _per_query(before))], ["ndcg@10"])
    assert alone["p_value"].item() == pytest.approx(0.0118, abs=0.003)
    assert alone["ci_high"].item() < 0 and alone["regression"].item()
    # The same change among 10 tests (5 settings x 2 measures, the others unchanged): Holm multiplies it by 10.
    keys = [f"s{i}" for i in range(5)]
    reference = _settings({k: before for k in keys})
    current = _settings({k: (borderline if k == "s0" else before) for k in keys})
    found = history.compare_runs(current, [("previous", "r", reference)], ["ndcg@10", "mrr"])
    s0 = found.filter(pl.col("setting_key") == "s0")
    assert (s0["ci_high"] < 0).all() and (s0["p_value"] < 0.05).all()
    # The other 8 tests have p = 1 (no difference); s0's two equal p values are multiplied by 10 and 9,
    # and the running max makes both 10 x p.
    p = s0["p_value"][0]
    assert s0["p_value"].to_list() == [p, p] and s0["p_adjusted"].to_list() == pytest.approx([10 * p, 10 * p])
    assert (s0["p_adjusted"] > 0.05).all() and not found["regression"].any()


def test_settings_pair_by_setting_key_not_by_provider_index_nprobe(tmp_path):
    # Same provider/index/nprobe, another setting key (say another chunking): not the same setting.
    _record(tmp_path, "run-0", 0, OLD_DATA, _per_query([0.9] * 30, key="key-before"))
    found = history.regression_check(tmp_path, "nightly", "run-1", OLD_DATA, _per_query([0.1] * 30, key="key-after"),
                                     ["ndcg@10"])
    assert not found["regression"].any()
    assert found["status"].item().startswith("no setting of this run has the setting key of one in run run-0")


def test_history_written_before_setting_keys_pairs_with_nothing(tmp_path):
    # An older run file has no setting_key column: it reads as null and pairs with no setting.
    old = _per_query([0.9] * 30).drop("setting_key", "setting", "params")
    _record(tmp_path, "run-0", 0, OLD_DATA, old.with_columns(setting=pl.lit("m/flat"), params=pl.lit("{}")))
    assert history.per_query_of(tmp_path, "run-0")["setting_key"].null_count() == 30
    found = history.regression_check(tmp_path, "nightly", "run-1", OLD_DATA, _per_query([0.1] * 30), ["ndcg@10"])
    assert found["measure"].to_list() == [None] and not found["regression"].any()


@pytest.mark.parametrize("seed", [5, 6])
def test_screening_with_fewer_flips_flags_what_every_test_at_the_full_count_flags(seed):
    # 12 settings x 2 measures with noise; one clear drop and two small ones of random size.
    rng = np.random.default_rng(seed)
    before = rng.uniform(0.3, 0.9, 40)
    keys = [f"s{i}" for i in range(12)]
    drops = {"s1": 0.3, "s2": rng.uniform(0.02, 0.08), "s3": rng.uniform(0.02, 0.08)}
    reference = [("previous", "r", _settings({k: before for k in keys}))]
    current = _settings({k: np.clip(before - drops.get(k, 0) + rng.normal(0, 0.1, 40), 0, 1) for k in keys})
    screened = history.compare_runs(current, reference, ["ndcg@10", "mrr"])
    assert 1000 in set(screened["permutations"])  # some settings kept the screen's 1000 flips
    everywhere = history.compare_runs(current, reference, ["ndcg@10", "mrr"], screen=10000)
    assert set(everywhere["permutations"]) == {10000}
    flags = [sorted(t.filter(pl.col("regression")).select("setting_key", "measure").rows()) for t in (screened, everywhere)]
    assert flags[0] == flags[1] and ("s1", "ndcg@10") in flags[0]


def test_the_previous_run_is_found_whatever_its_data_with_what_changed(tmp_path):
    # The verdict compares judged@k with the previous run even across a new series (the judgments
    # changing is what makes judged@k fall), and says what changed.
    assert history.previous_with_reason(tmp_path, "nightly", "run-0", OLD_DATA) is None
    _record(tmp_path, "run-0", 0, OLD_DATA, _per_query([0.5, 0.6]))
    assert history.previous_with_reason(tmp_path, "nightly", "run-1", OLD_DATA) == ("run-0", None)
    assert history.previous_with_reason(tmp_path, "nightly", "run-1", NEW_DATA) == (
        "run-0", "dataset changed (aaaaaaaaaaaa -> bbbbbbbbbbbb)")
    assert history.per_query_of(tmp_path, "run-0")["value"].to_list() == [0.5, 0.6]
