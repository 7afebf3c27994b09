"""The statistics behind "as good, and cheaper": a paired one-sided non-inferiority test of
quality against a margin, and the measurement noise of a latency percentile."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

LEVEL = 0.95
# scipy.special, not scipy.stats: the same functions that stats.t and stats.binom call, without
# the 2 s import of scipy.stats, which a cached rerun (a few seconds in all) would spend here.


@dataclass(frozen=True)
class NonInferiority:
    """candidate - best on paired queries, tested against H0: the mean difference <= -margin."""

    diff: float
    lower: float  # one-sided 95% lower confidence bound of the mean difference
    p_value: float  # one-sided p of H0 (candidate worse by at least the margin)
    n: int
    margin: float

    @property
    def holds(self) -> bool:
        """Not worse by more than the margin, at the 95% level (lower bound and p agree: both t)."""
        return self.lower > -self.margin


def non_inferiority(candidate: np.ndarray, best: np.ndarray, margin: float, level: float = LEVEL) -> NonInferiority:
    """Paired one-sided t-test that `candidate` is not worse than `best` by more than `margin`.

    A t-test rather than the bootstrap the intervals elsewhere use, so the bound and the p value
    can never disagree on a borderline case (both come from one t distribution)."""
    diffs = np.asarray(candidate, dtype=np.float64) - np.asarray(best, dtype=np.float64)
    n = len(diffs)
    if n < 2:
        raise ValueError(f"a non-inferiority test needs at least 2 paired queries (got {n})")
    mean = float(diffs.mean())
    se = float(diffs.std(ddof=1)) / math.sqrt(n)
    from scipy import special

    t_crit = float(special.stdtrit(n - 1, level))  # = stats.t.ppf(level, n - 1)
    if se == 0.0:  # every query differs by the same amount: the answer is certain
        return NonInferiority(mean, mean, 0.0 if mean > -margin else 1.0, n, margin)
    t_stat = (mean + margin) / se
    return NonInferiority(mean, mean - t_crit * se, float(special.stdtr(n - 1, -t_stat)), n, margin)  # = stats.t.sf


def quantile_band(samples, q: float = 0.95, level: float = LEVEL) -> tuple[float, float]:
    """Distribution-free `level` interval of the q-quantile of timing `samples`, by order statistics
    (the binomial count of samples below the quantile). With too few samples to bound an end it
    is clipped to the smallest or largest sample: the band is then narrower than the truth, which
    only makes two latencies easier to tell apart when their samples do not even overlap."""
    x = np.sort(np.asarray(samples, dtype=np.float64))
    n = len(x)
    if n == 0:
        raise ValueError("no timing samples")
    tail = (1 - level) / 2
    # The k-th smallest sample (1-based) lies below the quantile with probability P(Binom(n, q) >= k).
    low_k = _binom_ppf(tail, n, q)  # P(X <= low_k) >= tail: sample low_k bounds from below
    high_k = _binom_ppf(1 - tail, n, q) + 1
    low = x[max(low_k, 1) - 1]
    high = x[min(high_k, n) - 1]
    return float(low), float(high)


def _binom_ppf(p: float, n: int, q: float) -> int:
    """stats.binom.ppf(p, n, q) for 0 < p < 1: the very function it calls (Boost's quantile)."""
    from scipy.special import _ufuncs  # noqa: PLC2701  (scipy.stats reaches it the same way)

    return int(_ufuncs._binom_ppf(p, n, q))


@dataclass(frozen=True)
class Axis:
    """A measured cost of a setting: `column` in the settings table; `band` its noise columns
    (None: an exact figure, a price or a byte count, with no measurement noise)."""

    column: str
    words: str
    band: tuple[str, str] | None = None
    instead_of: str | None = None  # used only when this other axis is not measured for both settings


# In the order a saving is looked for and named.
COST_AXES = (
    Axis("usd_per_1k_queries", "$ per 1,000 queries"),
    Axis("query_p95_ms", "p95 query latency", ("query_p95_low", "query_p95_high")),
    Axis("embed_p95_ms", "p95 query-embedding latency (search not timed)", ("embed_p95_low", "embed_p95_high"),
         instead_of="query_p95_ms"),
    Axis("index_bytes", "index size"),
    Axis("corpus_usd", "corpus embedding cost"),
)


@dataclass(frozen=True)
class Saving:
    axis: Axis
    best: float
    candidate: float

    @property
    def relative(self) -> float:
        return 1.0 - self.candidate / self.best


def saving(best: dict, candidate: dict, axis: Axis, min_saving: float) -> Saving | None:
    """The candidate's saving on `axis` when it is real: at least `min_saving` of the best's value,
    and for a noisy axis the candidate's whole noise band below the best's. None otherwise, and
    when either value was not measured."""
    b, c = best.get(axis.column), candidate.get(axis.column)
    if b is None or c is None or b <= 0 or c >= b * (1.0 - min_saving) or c >= b:
        return None
    if axis.band is not None:
        low, high = axis.band
        if best.get(low) is None or candidate.get(high) is None or candidate[high] >= best[low]:
            return None
    return Saving(axis, float(b), float(c))


def savings(best: dict, candidate: dict, min_saving: float, axes=COST_AXES) -> list[Saving]:
    def measured(column: str) -> bool:
        return best.get(column) is not None and candidate.get(column) is not None

    axes = [a for a in axes if a.instead_of is None or not measured(a.instead_of)]
    return [s for s in (saving(best, candidate, a, min_saving) for a in axes) if s is not None]
