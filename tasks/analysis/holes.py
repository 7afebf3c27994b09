"""When unjudged documents could change an answer: two compared settings whose top k differ in the
share that was judged (judged@k) by more than a threshold, and whether their order holds on the
condensed nDCG' (unjudged documents removed), in one sentence for the verdict and the ladder."""
from __future__ import annotations

from dataclasses import dataclass

import polars as pl

DEFAULT_JUDGED_GAP = 0.10


def hole_measures(measure: str, scored: set[str]) -> tuple[str, str] | None:
    """(judged@k, ndcg_condensed@k) at the primary measure's cutoff, when the run scored both;
    else at the one cutoff it scored them at; None when it did not score them (an older run)."""
    cut = measure.split("@")[1] if "@" in measure else None
    wanted = (f"judged@{cut}", f"ndcg_condensed@{cut}") if cut else ("judged", "ndcg_condensed")
    if all(m in scored for m in wanted):
        return wanted
    judged = sorted(m for m in scored if m.startswith("judged@"))
    for name in judged:
        condensed = "ndcg_condensed@" + name.split("@")[1]
        if condensed in scored:
            return name, condensed
    return None


@dataclass(frozen=True)
class Side:
    """One of two compared settings: its label, its mean judged@k and condensed nDCG' on the
    compared queries."""

    label: str
    judged: float
    condensed: float


@dataclass(frozen=True)
class HoleGap:
    """`a` compared with `b` (a - b, as the comparison it annotates): their judged@k differ by
    more than the threshold."""

    a: Side
    b: Side
    k: str            # the cutoff in words, "10", or "" for the whole ranking
    primary_diff: float

    @property
    def condensed_diff(self) -> float:
        return self.a.condensed - self.b.condensed

    @property
    def order_holds(self) -> bool:
        # A tie on the primary measure has no order to hold; it "holds" when nDCG' ties too.
        return (self.primary_diff > 0) == (self.condensed_diff > 0) and (self.primary_diff == 0) == (self.condensed_diff == 0)

    def sentence(self) -> str:
        holey, other = (self.a, self.b) if self.a.judged < self.b.judged else (self.b, self.a)
        ahead = (holey is self.a) == (self.primary_diff > 0)
        # Holes count as non-relevant: they can only lower the holier setting's score.
        effect = "its lead may be understated" if ahead else "its loss may be overstated"
        if self.primary_diff == 0:
            effect = "its score may be understated"
        top = f"top {self.k}" if self.k else "ranking"
        order = "the same" if self.order_holds else "reversed"
        return (f"{holey.label}'s {top} is {_pct(1 - holey.judged)} unjudged against {other.label}'s "
                f"{_pct(1 - other.judged)}: {effect}; on condensed nDCG′ (unjudged documents removed) the order is "
                f"{order} ({self.a.label} minus {self.b.label} {self.condensed_diff:+.3f}).")


def _pct(share: float) -> str:
    return f"{round(100 * share) + 0:.0f}%"


def hole_gap(a: Side, b: Side, primary_diff: float, k: str, threshold: float = DEFAULT_JUDGED_GAP) -> HoleGap | None:
    """The gap between a and b when their judged@k differ by more than `threshold`; else None
    (complete judgments, judged@k = 1 for both, never say anything)."""
    if abs(a.judged - b.judged) <= threshold + 1e-12:
        return None
    return HoleGap(a, b, k, primary_diff)


def side_means(per_query: pl.DataFrame, key: dict, measures: tuple[str, str], queries: list[str] | None = None
               ) -> tuple[float, float] | None:
    """(judged@k, condensed nDCG') means of the setting whose columns equal `key`, over `queries`
    (all of its queries when None); None when the run did not score them for it."""
    chosen = pl.lit(True)
    for column, value in key.items():
        chosen &= pl.col(column).eq_missing(pl.lit(value))
    rows = per_query.filter(chosen & pl.col("measure").is_in(list(measures)))
    if queries is not None:
        rows = rows.filter(pl.col("query_id").is_in(pl.Series(queries, dtype=pl.String).implode()))
    means = dict(rows.group_by("measure").agg(pl.col("value").mean()).iter_rows())
    if any(m not in means for m in measures):
        return None
    return means[measures[0]], means[measures[1]]


@dataclass(frozen=True)
class JudgedFall:
    """Settings whose judged@k fell since the spec's previous recorded run by more than
    `threshold` of what it was: the data or the judgments changed, or a model now retrieves
    documents nobody judged. Holes count as non-relevant, so such a setting's measures fell
    partly for want of judgments, which the verdict's own comparisons (within one run) cannot see."""

    run_id: str                              # the earlier run
    why: str | None                          # what changed since it, when its data differ
    k: str                                   # the cutoff in words, "10", or "" for the whole ranking
    fallen: tuple[tuple[str, float, float], ...]  # (label, judged@k then, now), in the order given
    compared: int                            # settings found in both runs
    threshold: float

    def sentence(self, measure: str) -> str:
        top = f"top {self.k}" if self.k else "ranking"
        name = f"judged@{self.k}" if self.k else "judged"
        shown = ", ".join(f"{label} {then:.3f} -> {now:.3f}" for label, then, now in self.fallen[:3])
        more = f" and {len(self.fallen) - 3} more" if len(self.fallen) > 3 else ""
        since = f"run {self.run_id}" + (f" ({self.why})" if self.why else "")
        return (f"Less of each {top} is judged than in {since}: {name} {shown}{more} ({len(self.fallen)} of "
                f"{self.compared} settings fell by more than {_pct(self.threshold)} of their share). Unjudged documents "
                f"count as non-relevant, so part of any fall in {measure} since then may be missing judgments rather "
                f"than worse retrieval; `retbench judge export OUTPUT_DIR` lists the unjudged documents to judge.")


def judged_fall(before: dict[str, float], now: dict[str, float], order: list[str], run_id: str, why: str | None,
                k: str, threshold: float) -> JudgedFall | None:
    """Settings (labels, in `order`) whose judged@k fell from `before` to `now` by more than
    `threshold` of `before`; None when none did or the runs share no setting."""
    both = [label for label in order if label in before and label in now]
    fallen = tuple((label, before[label], now[label]) for label in both
                   if before[label] > 0 and (before[label] - now[label]) / before[label] > threshold + 1e-12)
    if not fallen:
        return None
    return JudgedFall(run_id, why, k, fallen, len(both), threshold)
