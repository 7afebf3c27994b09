"""The statistics every analysis shares: seeded percentile bootstrap of means, and the paired
sign-flip randomization test. One implementation, used by breakdowns, comparisons, the ANN
sweep and regression checks."""
from __future__ import annotations

import zlib

import numpy as np

# Cap on the size of one (resamples x queries) block, so memory stays flat on large query sets.
_BLOCK = 1 << 22


def check_level(level: float) -> None:
    if not 0 < level < 1:
        raise ValueError(f"confidence level must be between 0 and 1 (got {level})")


def seeded_rng(seed: int, *key: str) -> np.random.Generator:
    """A generator that depends on the seed and a stable key, not on the order groups are visited."""
    return np.random.default_rng([seed, *(zlib.crc32(part.encode("utf-8")) for part in key)])


def bootstrap_means(values: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(resamples, measures) means of `values` (queries x measures) over queries drawn with replacement."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim == 1:
        values = values[:, None]
    n = values.shape[0]
    if n == 0:
        raise ValueError("cannot bootstrap an empty sample")
    out = np.empty((resamples, values.shape[1]))
    step = max(1, _BLOCK // n)
    for start in range(0, resamples, step):
        b = min(step, resamples - start)
        rows = rng.integers(0, n, size=(b, n))
        # How often each query is drawn, per resample: the mean is then one matrix product.
        counts = np.bincount((rows + n * np.arange(b)[:, None]).ravel(), minlength=b * n).reshape(b, n)
        out[start:start + b] = counts @ values / n
    return out


def bootstrap_ci(values: np.ndarray, resamples: int = 1000, seed: int = 0,
                 level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap interval of the mean of each column (a 1-D input is one column)."""
    check_level(level)
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1 (got {resamples})")
    means = bootstrap_means(values, resamples, np.random.default_rng(seed))
    return percentile_interval(means, level)


def percentile_interval(means: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    alpha = (1 - level) / 2
    low, high = np.quantile(means, [alpha, 1 - alpha], axis=0)
    return low, high


def randomization_p_value(diffs: np.ndarray, permutations: int, rng: np.random.Generator) -> np.ndarray:
    """Two-sided paired randomization test of mean difference 0, per column of `diffs` (queries x measures).

    Under the null each query's difference is as likely to have either sign; p is the share of
    sign-flipped means at least as far from 0 as the observed one, counting the observed one
    ((hits + 1) / (permutations + 1)), so it is never 0.
    """
    diffs = np.asarray(diffs, dtype=np.float64)
    if diffs.ndim == 1:
        diffs = diffs[:, None]
    n = diffs.shape[0]
    observed = np.abs(diffs.mean(axis=0))
    # Float sums of the same numbers in another order differ in the last bits; such a tie is a tie.
    tolerance = 1e-9 * np.maximum(np.abs(diffs).mean(axis=0), 1e-300)
    hits = np.zeros(diffs.shape[1], dtype=np.int64)
    step = max(1, _BLOCK // max(n, 1))
    for start in range(0, permutations, step):
        b = min(step, permutations - start)
        signs = rng.integers(0, 2, size=(b, n), dtype=np.int8) * 2 - 1
        flipped = np.abs(signs @ diffs) / n
        hits += (flipped >= observed - tolerance).sum(axis=0)
    return (hits + 1) / (permutations + 1)


def holm_adjusted(p_values) -> np.ndarray:
    """Holm's step-down adjusted p values, in the input's order: the i-th smallest p is
    multiplied by (m - i + 1), capped at 1, and made non-decreasing along the sorted order.
    Rejecting where the adjusted p < alpha keeps the chance of any false rejection among
    the m tests at most alpha, whatever their dependence."""
    p = np.asarray(p_values, dtype=np.float64)
    if p.ndim != 1:
        raise ValueError(f"holm_adjusted takes a 1-D sequence of p values (got shape {p.shape})")
    if np.any((p < 0) | (p > 1)) or np.any(np.isnan(p)):
        raise ValueError(f"p values must lie in [0, 1] (got {p.tolist()})")
    m = p.size
    order = np.argsort(p, kind="stable")
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    adjusted = np.empty(m)
    adjusted[order] = np.maximum.accumulate(scaled) if m else scaled
    return adjusted
