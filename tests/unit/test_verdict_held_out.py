"""The verdict on constructed runs whose right answer is known: drawn on test queries only, "as
good and cheaper" only with a passed non-inferiority test AND a saving beyond noise, and never
a sentence that contradicts another."""
import math

import numpy as np
import polars as pl
import pytest
from scipy import stats

from retbench.tasks.analysis.equivalence import non_inferiority, quantile_band
from retbench.tasks.config.verdict import VerdictSpec
from retbench.tasks.reporting.verdict import decide, verdict_sentences

PER_QUERY = {"provider": pl.String, "index": pl.String, "nprobe": pl.Int64, "query_id": pl.String,
             "measure": pl.String, "value": pl.Float64, "split": pl.String}


def test_quantile_band_is_the_order_statistic_interval():
    # n = 100, q = 0.95, X ~ Binom(100, .95) samples below the p95: P(X <= 89) = 0.0115 <= 0.025
    # < P(X <= 90) = 0.0282, so x_(90) bounds it from below; P(X >= 99) = 0.037 > 0.025 >= P(X >= 100)
    # = 0.0059, so only x_(100) bounds it from above: with samples 1..100, [90, 100].
    assert quantile_band(np.arange(1, 101), 0.95) == (90.0, 100.0)
    # n = 3 cannot bound the p95 from above: clipped to the largest sample; from below, x_(2).
    assert quantile_band([5.0, 1.0, 3.0], 0.95) == (3.0, 5.0)


def test_non_inferiority_is_a_one_sided_paired_t_test():
    rng = np.random.default_rng(1)
    best = rng.uniform(0.3, 0.9, 40)
    candidate = best - 0.004 + rng.normal(0, 0.01, 40)
    got = non_inferiority(candidate, best, margin=0.01)
    diffs = candidate - best
    se = diffs.std(ddof=1) / math.sqrt(40)
    assert got.diff == pytest.approx(diffs.mean())
    assert got.lower == pytest.approx(diffs.mean() - stats.t.ppf(0.95, 39) * se)
    # The same p as scipy's one-sided test of diff + margin > 0.
    assert got.p_value == pytest.approx(stats.ttest_1samp(diffs + 0.01, 0.0, alternative="greater").pvalue)
    assert got.holds and got.p_value < 0.05
    assert not non_inferiority(candidate, best, margin=0.001).holds


def _write_run(folder, settings: dict, splits: dict, latency: dict | None = None, bytes_: dict | None = None,
               usd: dict | None = None):
    """settings: (provider, index, nprobe) -> {split: values}; one measure, ndcg@10."""
    rows = []
    for (provider, index, nprobe), by_split in settings.items():
        for split, values in by_split.items():
            for i, v in enumerate(values):
                rows.append((provider, index, nprobe, f"{split}-{i}", "ndcg@10", float(v), split))
    per_query = pl.DataFrame(rows, schema=PER_QUERY, orient="row")
    per_query.write_parquet(folder / "per_query.parquet")
    per_query.group_by("provider", "index", "nprobe", "measure").agg(
        value=pl.col("value").mean(), queries=pl.len()).write_parquet(folder / "summary.parquet")
    providers = sorted({p for p, _, _ in settings})
    if latency:  # provider -> (p95, low, high)
        pl.DataFrame([(p, 1, 1, l[0] * 0.9, l[0], l[1], l[2]) for p, l in latency.items()],
                     schema=["provider", "batch_size", "concurrency", "p50_ms", "p95_ms", "p95_ms_low", "p95_ms_high"],
                     orient="row").write_parquet(folder / "latency.parquet")
    if bytes_:
        pl.DataFrame([(p, i, b) for (p, i), b in bytes_.items()], schema=["provider", "index", "index_bytes"],
                     orient="row").write_parquet(folder / "storage.parquet")
    if usd:
        pl.DataFrame({"provider": providers, "usd_per_1000_queries": [usd.get(p) for p in providers],
                      "corpus_usd": [None] * len(providers)}).write_parquet(folder / "cost.parquet")
    return folder


def _queries(seed, n=60, low=0.3, high=0.9):
    return np.random.default_rng(seed).uniform(low, high, n)


def test_cheaper_setting_that_really_is_equivalent_is_named(tmp_path):
    test = _queries(0)
    big, small = test, test - 0.002 + np.random.default_rng(1).normal(0, 0.004, len(test))
    _write_run(tmp_path, {("big", "flat", None): {"dev": _queries(2), "test": big},
                          ("small", "flat", None): {"dev": _queries(3), "test": small}},
               splits={}, latency={"big": (100.0, 95.0, 110.0), "small": (20.0, 18.0, 23.0)},
               usd={"big": 0.10, "small": 0.02})
    verdict = decide(tmp_path, "ndcg@10", VerdictSpec(margin=0.01))
    assert verdict.scope.held_out and verdict.scope.queries == 60
    assert verdict.best["label"] == "big flat"
    assert verdict.as_good_and_cheaper is not None and verdict.as_good_and_cheaper.row["label"] == "small flat"
    axes = [s.axis.words for s in verdict.as_good_and_cheaper.cheaper_on]
    assert axes == ["$ per 1,000 queries", "p95 query-embedding latency (search not timed)"]
    text = " ".join(verdict_sentences(verdict))
    assert "As good and cheaper: small flat" in text and "margin" not in text.split("As good")[0].split("Best")[0]
    assert "0.010 ndcg@10 (verdict.margin" in text and "60 test queries" in text
    assert text.startswith("Held-out verdict: drawn on the 60 test queries only")


def test_equivalent_but_not_cheaper_is_not_called_cheaper(tmp_path):
    test = _queries(0)
    # IVF-like: the same quality, the same embedding latency band, a slightly bigger index.
    _write_run(tmp_path, {("e5", "flat", None): {"dev": _queries(2), "test": test},
                          ("e5", "ivf", 8): {"dev": _queries(2), "test": test - 0.001}},
               splits={}, latency={"e5": (122.0, 110.0, 130.0)}, bytes_={("e5", "flat"): 774_189, ("e5", "ivf"): 796_800})
    verdict = decide(tmp_path, "ndcg@10", VerdictSpec(margin=0.01))
    assert verdict.as_good_and_cheaper is None
    ivf = verdict.candidates[0]
    assert ivf.test.holds and ivf.cheaper_on == []
    text = " ".join(verdict_sentences(verdict))
    assert "No cheaper setting matches the best" in text
    assert "1 setting(s) are as good within the margin but save less than that on every measured axis (e.g. e5 ivf nprobe=8)" in text
    assert "As good and cheaper" not in text


def test_significantly_worse_but_within_margin_names_the_margin(tmp_path):
    test = _queries(0, n=200)
    worse = test - 0.004  # every query 0.004 lower: significant, yet inside a 0.01 margin
    _write_run(tmp_path, {("big", "flat", None): {"test": test, "dev": _queries(1)},
                          ("small", "flat", None): {"test": worse, "dev": _queries(1)}},
               splits={}, usd={"big": 1.0, "small": 0.1})
    verdict = decide(tmp_path, "ndcg@10", VerdictSpec(margin=0.01))
    text = verdict_sentences(verdict)
    assert any(s.startswith("It is significantly better than the runner-up, small flat") for s in text)
    assert any(s.startswith("As good and cheaper: small flat") for s in text)
    assert any("significantly lower than the best" in s and "by less than the 0.010 margin" in s for s in text)


def test_a_dev_only_gain_does_not_win_the_verdict(tmp_path):
    base_test, base_dev = _queries(0), _queries(1)
    # "tuned" is far better on dev (it was tuned there) and worse on test.
    _write_run(tmp_path, {("base", "flat", None): {"dev": base_dev, "test": base_test},
                          ("tuned", "flat", None): {"dev": np.minimum(base_dev + 0.2, 1.0), "test": base_test - 0.05}},
               splits={})
    verdict = decide(tmp_path, "ndcg@10")
    assert verdict.best["label"] == "base flat"
    assert verdict.settings["n"].to_list() == [60, 60]  # test queries only
    dev = verdict.dev.rows(named=True)
    assert dev[0]["label"] == "tuned flat"  # the tuning evidence shows the dev ranking apart
    # Summary over all queries would rank "tuned" first: the verdict does not.
    summary = pl.read_parquet(tmp_path / "summary.parquet").sort("value", descending=True)
    assert summary["provider"][0] == "tuned"


def test_one_split_says_so_first(tmp_path):
    _write_run(tmp_path, {("a", "flat", None): {"test": _queries(0)}, ("b", "flat", None): {"test": _queries(1)}},
               splits={})
    verdict = decide(tmp_path, "ndcg@10")
    first = verdict_sentences(verdict)[0]
    assert first.startswith("Only one split is judged in this run (test, 60 queries)")
    assert not verdict.scope.held_out and verdict.dev is None


def test_margin_defaults_to_the_sweeps_loss_budget_made_absolute(tmp_path):
    _write_run(tmp_path, {("a", "flat", None): {"test": np.full(30, 0.8)}, ("b", "flat", None): {"test": np.full(30, 0.5)}},
               splits={})
    assert decide(tmp_path, "ndcg@10", None, loss_budget=0.02).margin.value == pytest.approx(0.016)
    assert decide(tmp_path, "ndcg@10").margin.value == 0.01
    assert decide(tmp_path, "ndcg@10", VerdictSpec(margin=0.03), loss_budget=0.02).margin.value == 0.03


def test_one_query_is_too_few_for_the_equivalence_test_and_says_so(tmp_path):
    _write_run(tmp_path, {("a", "flat", None): {"test": [1.0]}, ("b", "flat", None): {"test": [1.0]}}, splits={},
               usd={"a": 1.0, "b": 0.1})
    verdict = decide(tmp_path, "ndcg@10")
    assert verdict.candidates == [] and verdict.as_good_and_cheaper is None
    assert any(s.startswith("Too few queries (1) to test whether a cheaper setting is as good") for s in verdict_sentences(verdict))


def test_the_t_and_binomial_quantiles_from_scipy_special_equal_scipy_stats():
    """equivalence.py calls scipy.special (a cached rerun does not import scipy.stats): same numbers."""

    from retbench.tasks.analysis.equivalence import _binom_ppf

    rng = np.random.default_rng(3)
    for n in (2, 5, 55, 300):
        candidate, best = rng.random(n), rng.random(n)
        result = non_inferiority(candidate, best, 0.01)
        diffs = candidate - best
        se = diffs.std(ddof=1) / np.sqrt(n)
        assert result.lower == pytest.approx(diffs.mean() - stats.t.ppf(0.95, n - 1) * se, abs=1e-12)
        assert result.p_value == pytest.approx(stats.t.sf((diffs.mean() + 0.01) / se, n - 1), abs=1e-12)
    for n in (1, 7, 40, 200, 1000):
        for q in (0.5, 0.95, 0.99):
            for p in (0.025, 0.975):
                assert _binom_ppf(p, n, q) == int(stats.binom.ppf(p, n, q))
