"""The report's answer, drawn on held-out queries: the best setting, its paired test against the
runner-up, and a setting shown to be as good as the best (within a stated margin, one-sided
paired test) and cheaper on a measured axis beyond its noise, or the statement that none is."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from retbench.tasks.analysis.breakdown import paired_comparison
from retbench.tasks.analysis.degenerate import TiedRanking, smallest_p, tied_rankings
from retbench.tasks.analysis.holes import HoleGap, JudgedFall, Side, hole_gap, hole_measures, judged_fall
from retbench.tasks.analysis.equivalence import COST_AXES, NonInferiority, Saving, non_inferiority, savings
from retbench.tasks.config.verdict import DEFAULT_MARGIN, VerdictSpec
from retbench.tasks.reporting.settings_table import (SETTING, best_first, label_expr, read_table,  # noqa: F401 (re-exported)
                                            setting_label, settings_table, split_quality)

ALPHA = 0.05
HELD_OUT = "test"


# --- which queries, which margin -----------------------------------------------------------------


@dataclass(frozen=True)
class Scope:
    """The queries the verdict is drawn on: one split's (`split`), or every query (None)."""

    split: str | None
    queries: int
    splits: dict[str, int]  # every judged split -> its queries

    @property
    def held_out(self) -> bool:
        return self.split == HELD_OUT and len(self.splits) > 1

    def first_line(self) -> str:
        if self.held_out:
            others = ", ".join(f"{n} {s}" for s, n in self.splits.items() if s != HELD_OUT)
            return (f"Held-out verdict: drawn on the {self.queries} test queries only; the other queries ({others}) "
                    "are tuning evidence, shown apart under 'Tuning evidence'.")
        if len(self.splits) == 1:
            (name, n), = self.splits.items()
            return (f"Only one split is judged in this run ({name}, {n} queries): the verdict is over all of them, "
                    "and nothing was held out from tuning.")
        named = ", ".join(f"{n} {s}" for s, n in self.splits.items())
        return (f"No held-out test queries in this run ({named}): the verdict is over all {self.queries} queries, "
                "which tuning may have seen.")


def verdict_scope(per_query: pl.DataFrame | None, measure: str) -> Scope:
    """The test split when it is judged beside another split; else every query."""
    if per_query is None or "split" not in per_query.columns:
        return Scope(None, 0, {})
    rows = per_query.filter(pl.col("measure") == measure)
    counts = dict(rows.group_by("split").agg(pl.col("query_id").n_unique()).sort("split").rows())
    if HELD_OUT in counts:
        return Scope(HELD_OUT, counts[HELD_OUT], counts)
    return Scope(None, sum(counts.values()), counts)


@dataclass(frozen=True)
class Margin:
    value: float
    source: str  # where the value comes from, in words


def verdict_margin(spec: VerdictSpec | None, loss_budget: float | None, best_mean: float) -> Margin:
    """verdict.margin when set; else the sweep's loss budget (relative) made absolute on the best's
    mean; else the default."""
    if spec is not None and spec.margin is not None:
        return Margin(spec.margin, "verdict.margin")
    if loss_budget:
        return Margin(loss_budget * best_mean, f"the sweep's loss_budget, {100 * loss_budget:g}% of the best's {best_mean:.3f}")
    return Margin(DEFAULT_MARGIN, "the default; set verdict.margin to change it")


# --- tests ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    diff: float
    ci_low: float
    ci_high: float
    p_value: float
    n: int

    @property
    def significant(self) -> bool:
        return self.p_value < ALPHA and (self.ci_low > 0 or self.ci_high < 0)


def paired(per_query: pl.DataFrame, a: tuple, b: tuple, measure: str) -> Comparison:
    """a - b on `measure` over the queries of `per_query` (already cut to the verdict's queries):
    paired bootstrap interval and sign-flip randomisation test."""
    rows = per_query.filter(pl.col("measure") == measure)
    row = paired_comparison(rows, a, b, resamples=1000, permutations=10000, seed=0).row(0, named=True)
    return Comparison(row["diff"], row["ci_low"], row["ci_high"], row["p_value"], row["n"])


def _values_by_setting(per_query: pl.DataFrame, measure: str) -> tuple[list[str], dict[tuple, np.ndarray]]:
    """Per-query values of every setting, aligned on the queries all settings scored."""
    rows = per_query.filter(pl.col("measure") == measure)
    queries = sorted(set.intersection(*(set(g["query_id"]) for _, g in rows.group_by(SETTING))))
    values = {}
    for key, group in rows.group_by(SETTING):
        by_query = dict(group.select("query_id", "value").rows())
        values[tuple(key)] = np.array([by_query[q] for q in queries])
    return queries, values


# --- the verdict ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    """A setting tested against the best: not worse by more than the margin? cheaper on what?"""

    row: dict
    test: NonInferiority
    cheaper_on: list[Saving]

    @property
    def qualifies(self) -> bool:
        return self.test.holds and bool(self.cheaper_on)


@dataclass(frozen=True)
class Verdict:
    measure: str
    scope: Scope
    margin: Margin
    min_saving: float
    settings: pl.DataFrame  # settings_table on the verdict's queries, best first
    best: dict
    runner_up: dict | None
    versus_runner_up: Comparison | None
    candidates: list[Candidate]  # every other setting, in settings order
    as_good_and_cheaper: Candidate | None
    versus_pick: Comparison | None  # two-sided test of the pick against the best
    tuned_on_dev: list[str] = field(default_factory=list)
    dev: pl.DataFrame | None = None  # the same settings over the non-test queries, best first
    measure_note: str | None = None
    # Settings whose top k is one tied score on nearly every query: ranked last, never best.
    ranked_by_ties: list[TiedRanking] = field(default_factory=list)
    min_queries: int = 20
    # judged@k and condensed nDCG' at the primary cutoff: (judged name, condensed name), each
    # setting's two means on the verdict's queries, and the compared pairs whose judged@k differ
    # by more than verdict.judged_gap (best vs runner-up first, then the pick vs the best).
    hole_measures: tuple[str, str] | None = None
    judged: dict[str, tuple[float, float]] = field(default_factory=dict)
    hole_gaps: dict[str, HoleGap] = field(default_factory=dict)  # "runner-up" / "pick" -> gap
    # Settings whose judged@k fell since the spec's previous recorded run by more than verdict.judged_fall.
    judged_fall: JudgedFall | None = None

    @property
    def no_best(self) -> bool:
        """Every setting is ranked by ties: `best` is then only the first in tie order."""
        return any(t.label == self.best["label"] for t in self.ranked_by_ties)

    @property
    def cheapest(self) -> dict:
        """The setting to recommend on cost: the as-good-and-cheaper pick, else the best itself."""
        return self.as_good_and_cheaper.row if self.as_good_and_cheaper else self.best

    def rows(self) -> pl.DataFrame:
        """The small verdict table: best, runner-up, the as-good-and-cheaper pick (each once)."""
        roles: dict[str, list[str]] = {}
        pick = self.as_good_and_cheaper.row if self.as_good_and_cheaper else None
        first = "first in tie order (no best)" if self.no_best else "best"
        for role, row in ((first, self.best), ("runner-up", self.runner_up), ("as good and cheaper", pick)):
            if row is not None:
                roles.setdefault(row["label"], []).append(role)
        return (self.settings.filter(pl.col("label").is_in(list(roles)))
                .with_columns(role=pl.col("label").replace_strict({k: ", ".join(v) for k, v in roles.items()})))

    def assessment(self) -> pl.DataFrame:
        """verdict.parquet: every setting with its quality on the verdict's queries, its test
        against the best and the axes it is cheaper on."""
        tested = {c.row["label"]: c for c in self.candidates}
        pick = self.as_good_and_cheaper.row["label"] if self.as_good_and_cheaper else None
        tied = {t.label for t in self.ranked_by_ties}
        rows = []
        for row in self.settings.iter_rows(named=True):
            c = tested.get(row["label"])
            rows.append({
                **{k: row[k] for k in (*SETTING, "label", "mean", "ci_low", "ci_high", "n")},
                "measure": self.measure, "split": self.scope.split or "all",
                "diff_vs_best": None if c is None else c.test.diff,
                "lower_bound_vs_best": None if c is None else c.test.lower,
                "p_not_inferior": None if c is None else c.test.p_value,
                "margin": self.margin.value,
                "as_good": None if c is None else c.test.holds,
                "cheaper_on": None if c is None else ", ".join(s.axis.words for s in c.cheaper_on),
                "as_good_and_cheaper": None if c is None else c.qualifies,
                "ranked_by_ties": row["label"] in tied,
                "judged": self.judged.get(row["label"], (None, None))[0],
                "condensed": self.judged.get(row["label"], (None, None))[1],
                "role": ("best" if row["label"] == self.best["label"] and not self.no_best
                         else ("as good and cheaper" if row["label"] == pick else None)),
                "usd_per_1k_queries": row["usd_per_1k_queries"], "query_p95_ms": row["query_p95_ms"],
                "query_p95_low": row["query_p95_low"], "query_p95_high": row["query_p95_high"],
                "index_bytes": row["index_bytes"], "corpus_usd": row["corpus_usd"],
            })
        return pl.DataFrame(rows, infer_schema_length=None)


def tuned_on_dev(output_dir: Path) -> list[str]:
    """What this run chose on non-test queries, in words, each with how it held on test: fusion
    weights, fine-tuned weights, the ANN recommendation."""
    out = []
    systems = read_table(output_dir, "systems")
    if systems is not None and "alpha" in systems.columns:
        for row in systems.filter(pl.col("alpha").is_not_null()).iter_rows(named=True):
            held = ""
            if row.get("alpha_test_score") is not None:
                held = (f": {row['alpha_measure']} {row['alpha_dev_score']:.3f} on {row['alpha_dev_queries']} dev queries, "
                        f"{row['alpha_test_score']:.3f} on {row['alpha_test_queries']} test queries")
            out.append(f"the fusion weight of {row['system']} (alpha {row['alpha']:g}{held})")
    finetuned = read_table(output_dir, "finetune_verdict")
    if finetuned is not None and finetuned.height and "provider" in finetuned.columns:
        out += [f"the weights of {p} (fine-tuned; see Fine-tuning for its test gain)"
                for p in finetuned["provider"].unique(maintain_order=True).to_list()]
    recommendation = Path(output_dir) / "ann_recommendation.json"
    if recommendation.exists():
        chosen = json.loads(recommendation.read_text(encoding="utf-8")).get("recommendations") or {}
        picks = []
        for provider, pick in chosen.items():
            if not pick or pick.get("chosen_on") != "dev":
                continue
            budget = f"{100 * pick['loss_budget']:g}%"
            loss = pick.get("test_relative_loss")
            on_test = "" if loss is None else f"{round(100 * loss, 2) + 0.0:.2f}% {pick['measure']} loss on test, "
            held = {True: "within budget", False: f"outside the {budget} budget", None: "not checked on test"}
            picks.append(f"{provider}: {pick['index_kind']}, {on_test}{held[pick.get('test_within_budget')]}")
        if picks:
            out.append("the ANN recommendations (" + "; ".join(picks) + ")")
    return out


def decide(output_dir: str | Path, measure: str = "ndcg@10", spec: VerdictSpec | None = None,
           loss_budget: float | None = None, measure_note: str | None = None,
           earlier: EarlierRun | None = None) -> Verdict:
    """Rank settings by `measure` on the held-out test queries (every query when there is no other
    split), test the best against the runner-up, and find the setting that is as good as the best
    within the margin and cheaper: the first cost axis (price, p95 latency, index size, corpus
    embedding price) on which some qualifying setting saves most, ties to the better quality.
    `earlier`: the spec's previous recorded run, whose judged@k each setting's is compared with."""
    output_dir = Path(output_dir)
    spec = spec or VerdictSpec()
    every_query = per_query = read_table(output_dir, "per_query")
    scope = verdict_scope(per_query, measure)
    table = settings_table(output_dir, measure, scope.split)
    if per_query is not None and scope.split is not None:
        per_query = per_query.filter(pl.col("split") == scope.split)
    tied = _ranked_by_ties(output_dir, table, per_query, measure)
    if tied:
        # A tie-ordered setting's measure is the doc-id order's luck: it goes last, and is
        # neither best, runner-up nor a cheaper pick.
        is_tied = pl.col("label").is_in([t.label for t in tied])
        table = pl.concat([table.filter(~is_tied), table.filter(is_tied)])
    ranked = table.height - len(tied)
    best = table.row(0, named=True)
    runner = table.row(1, named=True) if ranked > 1 else None
    margin = verdict_margin(spec, loss_budget, best["mean"])
    min_saving = spec.min_saving
    versus, candidates, pick, versus_pick = None, [], None, None
    if per_query is not None and runner is not None:
        key = lambda row: tuple(row[c] for c in SETTING)  # noqa: E731
        versus = paired(per_query, key(best), key(runner), measure)
        paired_queries, values = _values_by_setting(per_query, measure)
        for row in table.head(ranked).iter_rows(named=True):
            if row["label"] != best["label"] and key(row) in values and len(paired_queries) >= 2:
                test = non_inferiority(values[key(row)], values[key(best)], margin.value)
                candidates.append(Candidate(row, test, savings(best, row, min_saving)))
        pick = _pick(candidates)
        if pick is not None:
            versus_pick = paired(per_query, key(pick.row), key(best), measure)
    dev = None
    if scope.held_out:
        others = [s for s in scope.splits if s != HELD_OUT]
        dev = best_first(split_quality(every_query, read_table(output_dir, "breakdown"), measure,
                                       "dev" if "dev" in others else others[0]).with_columns(label=label_expr()))
    holes = None if per_query is None else hole_measures(measure, set(per_query["measure"].unique()))
    judged = {} if holes is None else _judged_means(per_query, table, holes)
    gaps = {}
    if holes is not None:
        k = holes[0].split("@")[1] if "@" in holes[0] else ""
        side = lambda row: Side(row["label"], *judged[row["label"]])  # noqa: E731
        pairs = []
        if runner is not None and best["label"] in judged and runner["label"] in judged:
            pairs.append(("runner-up", best, runner, versus.diff if versus else best["mean"] - runner["mean"]))
        if pick is not None and pick.row["label"] in judged and best["label"] in judged:
            pairs.append(("pick", pick.row, best, pick.test.diff))
        for role, a, b, diff in pairs:
            gap = hole_gap(side(a), side(b), diff, k, spec.judged_gap)
            if gap is not None:
                gaps[role] = gap
    fall = None
    if holes is not None and earlier is not None and judged:
        fall = _judged_fall(earlier, per_query, table, holes, judged, spec.judged_fall)
    return Verdict(measure, scope, margin, min_saving, table, best, runner, versus, candidates, pick, versus_pick,
                   tuned_on_dev(output_dir), dev, measure_note, tied, spec.min_queries, holes, judged, gaps, fall)


@dataclass(frozen=True)
class EarlierRun:
    """The spec's previous recorded run: its id, what changed since (None: the same data and
    judgments) and its per-query values (history.per_query_of)."""

    run_id: str
    why: str | None
    per_query: pl.DataFrame


def _judged_fall(earlier: EarlierRun, per_query: pl.DataFrame, table: pl.DataFrame, holes: tuple[str, str],
                 judged: dict[str, tuple[float, float]], threshold: float) -> JudgedFall | None:
    """Settings whose judged@k on the verdict's queries fell since `earlier` by more than
    `threshold` of its value then (settings paired by provider, index and nprobe; queries by id)."""
    then = earlier.per_query
    if then.is_empty() or holes[0] not in set(then["measure"].unique()):
        return None
    queries = per_query["query_id"].unique().implode()
    then = then.filter(pl.col("measure").is_in(list(holes)) & pl.col("query_id").is_in(queries))
    before = {label: values[0] for label, values in _judged_means(then, table, holes).items()}
    now = {label: values[0] for label, values in judged.items()}
    k = holes[0].split("@")[1] if "@" in holes[0] else ""
    return judged_fall(before, now, table["label"].to_list(), earlier.run_id, earlier.why, k, threshold)


def _judged_means(per_query: pl.DataFrame, table: pl.DataFrame, holes: tuple[str, str]) -> dict[str, tuple[float, float]]:
    """label -> (judged@k, condensed nDCG') means of every setting of `table` over `per_query`."""
    means = (per_query.filter(pl.col("measure").is_in(list(holes)))
             .group_by(*SETTING, "measure").agg(pl.col("value").mean()))
    found: dict[tuple, dict[str, float]] = {}
    for row in means.iter_rows(named=True):
        found.setdefault(tuple(row[c] for c in SETTING), {})[row["measure"]] = row["value"]
    out = {}
    for row in table.iter_rows(named=True):
        got = found.get(tuple(row[c] for c in SETTING), {})
        if all(m in got for m in holes):
            out[row["label"]] = (got[holes[0]], got[holes[1]])
    return out


def _ranked_by_ties(output_dir: Path, table: pl.DataFrame, per_query: pl.DataFrame | None,
                    measure: str) -> list[TiedRanking]:
    """The settings whose top k (the measure's cutoff) is one tied score on nearly every verdict
    query, in table order; none when the run's documents were not kept (runs.parquet)."""
    path = output_dir / "runs.parquet"
    if not path.exists():
        return []
    cutoff = int(measure.split("@")[1]) if "@" in measure else 1000
    queries = None if per_query is None else per_query["query_id"].unique().to_list()
    counts = tied_rankings(pl.scan_parquet(path), cutoff, queries)
    found = {tuple(r[c] for c in SETTING): r for r in counts.iter_rows(named=True)}
    out = []
    for row in table.iter_rows(named=True):
        got = found.get(tuple(row[c] for c in SETTING))
        if got is not None:
            t = TiedRanking(row["label"], got["queries"], got["tied"], got["all_zero"])
            if t.degenerate:
                out.append(t)
    return out


def _pick(candidates: list[Candidate]) -> Candidate | None:
    qualifying = [c for c in candidates if c.qualifies]
    if not qualifying:
        return None
    order = [a.column for a in COST_AXES]
    return min(qualifying, key=lambda c: (order.index(c.cheaper_on[0].axis.column), -c.cheaper_on[0].relative,
                                          -c.row["mean"]))


# --- words -------------------------------------------------------------------------------------


def fmt_bytes(value) -> str:
    if value is None:
        return "n/a"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(value) < 1000 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return str(value)


def fmt_usd(value) -> str:
    if value is None:
        return "not priced"
    return f"${value:.4f}" if value < 1 else f"${value:,.2f}"


def fmt_ms(value) -> str:
    return "n/a" if value is None else (f"{value:.2f} ms" if value < 10 else f"{value:,.0f} ms")


def _interval(row: dict) -> str:
    if row["ci_low"] is None:
        return f"{row['mean']:.3f}"
    return f"{row['mean']:.3f} (95% CI {row['ci_low']:.3f}-{row['ci_high']:.3f})"


def _latency(row: dict) -> str:
    if row["query_p50_ms"] is not None:
        return f"query latency p50 {fmt_ms(row['query_p50_ms'])} / p95 {fmt_ms(row['query_p95_ms'])}"
    if row["embed_p50_ms"] is not None:
        return f"embedding latency p50 {fmt_ms(row['embed_p50_ms'])} / p95 {fmt_ms(row['embed_p95_ms'])} (search not timed)"
    return "latency not measured"


def _cost(row: dict) -> str:
    if row["usd_per_1k_queries"] is None:
        return "no price set, so cost per 1,000 queries unknown"
    return f"{fmt_usd(row['usd_per_1k_queries'])} per 1,000 queries"


def _what_it_costs(row: dict) -> str:
    return (f"{_cost(row)}; {_latency(row)}; "
            + ("index size not measured." if row["index_bytes"] is None else f"index {fmt_bytes(row['index_bytes'])}."))


def _saving_words(s: Saving, best: dict, candidate: dict) -> str:
    column = s.axis.column
    if s.axis.band is not None:
        low, high = s.axis.band
        flag = "embed_noise_measured" if column == "embed_p95_ms" else "latency_noise_measured"
        measured = candidate.get(flag) and best.get(flag)
        noise = "noise bands" if measured else "noise bands, taken as 2x either way where unmeasured"
        return (f"{s.axis.words} {fmt_ms(s.candidate)} (up to {fmt_ms(candidate[high])}) against "
                f"{fmt_ms(s.best)} (at least {fmt_ms(best[low])}; {noise})")
    show = fmt_bytes if column == "index_bytes" else fmt_usd
    return f"{s.axis.words} {show(s.candidate)} against {show(s.best)} ({-100 * s.relative:+.0f}%)"


def _queries(verdict: Verdict, n: int) -> str:
    return f"{n} test queries" if verdict.scope.held_out else f"{n} queries"


def verdict_sentences(verdict: Verdict) -> list[str]:
    """The verdict paragraph as plain sentences (escape them for HTML or Markdown)."""
    best, runner, versus, m = verdict.best, verdict.runner_up, verdict.versus_runner_up, verdict.measure
    out = [verdict.scope.first_line()] if verdict.scope.splits else []
    if verdict.tuned_on_dev:
        where = ("Chosen on the non-test queries and judged here on test only" if verdict.scope.held_out
                 else "Chosen on the same queries the verdict is drawn on (no held-out split)")
        out.append(f"{where}: " + "; ".join(verdict.tuned_on_dev) + ".")
    if verdict.measure_note:
        out.append(verdict.measure_note)
    if verdict.ranked_by_ties:
        out.append(_ties_sentence(verdict))
    if verdict.no_best:
        out.append(f"No setting ranks the documents, so no best is named: the {m} of each comes from the order of "
                   "tied documents (by id), not from retrieval. Check that the queries and documents share a "
                   "language and a tokenizer, and that the model loaded.")
        return out
    out.append(f"Best setting by {m}: {best['label']}, {_interval(best)} over {_queries(verdict, best['n'])}.")
    if runner is None:
        alone = "the only setting that ranks" if verdict.ranked_by_ties else "the only setting"
        out.append(f"It is {alone}, so there is nothing to compare it with.")
        out.append("What it costs: " + _what_it_costs(best))
        if verdict.judged_fall is not None:
            out.append(verdict.judged_fall.sentence(m))
        return out
    if versus is not None and versus.n < verdict.min_queries:
        out.append(_few_queries_sentence(verdict, versus.n))
    if versus is None:
        out.append(f"Runner-up: {runner['label']} ({runner['mean']:.3f}); no per-query values to test the difference.")
    else:
        word = "significantly better than" if versus.significant else "not significantly different from"
        out.append(f"It is {word} the runner-up, {runner['label']} ({runner['mean']:.3f}): difference "
                   f"{versus.diff:+.3f}, 95% CI {versus.ci_low:+.3f} to {versus.ci_high:+.3f}, p = {versus.p_value:.3g} "
                   f"(paired randomisation test, {_queries(verdict, versus.n)}).")
    if "runner-up" in verdict.hole_gaps:
        out.append(verdict.hole_gaps["runner-up"].sentence())
    out += _as_good_and_cheaper_sentences(verdict)
    if verdict.judged_fall is not None:
        out.append(verdict.judged_fall.sentence(m))
    return out


def _ties_sentence(verdict: Verdict) -> str:
    tied = verdict.ranked_by_ties
    what = "; ".join(t.words() for t in tied)
    return (f"Ranked by ties, not by retrieval: {what}. "
            + ("Its" if len(tied) == 1 else "Their") + f" {verdict.measure} comes from the order of tied documents "
            "(by id), so " + ("it is" if len(tied) == 1 else "they are") + " neither named best nor compared.")


def _few_queries_sentence(verdict: Verdict, n: int) -> str:
    floor = smallest_p(n)
    head = (f"Only {_queries(verdict, n)} (fewer than verdict.min_queries, {verdict.min_queries}): the paired "
            f"randomisation test cannot give a p below {floor:.3g} (2 / 2^{n})")
    if floor >= ALPHA:
        return head + f", so no difference can be significant at {ALPHA:g}; judge more queries."
    return (head + ", so a difference is significant only when nearly every query moves the same way; "
            "the intervals are rough at this size.")


def _as_good_and_cheaper_sentences(verdict: Verdict) -> list[str]:
    best, m, margin = verdict.best, verdict.measure, verdict.margin
    rule = (f"a margin of {margin.value:.3f} {m} ({margin.source}) in a paired one-sided t-test, and a saving of at "
            f"least {100 * verdict.min_saving:g}% beyond measurement noise")
    pick = verdict.as_good_and_cheaper
    if pick is None:
        if not verdict.candidates:
            why = ("No per-query values to test a cheaper setting against the best" if verdict.versus_runner_up is None
                   else f"Too few queries ({verdict.versus_runner_up.n}) to test whether a cheaper setting is as good as the best")
            return [f"{why}. What the best costs: {_what_it_costs(best)}"]
        parts = [f"No cheaper setting matches the best (rule: {rule})"]
        short = sorted((c for c in verdict.candidates if c.cheaper_on and not c.test.holds), key=lambda c: -c.test.lower)
        equal = [c for c in verdict.candidates if c.test.holds and not c.cheaper_on]
        if short:
            c = short[0]
            parts.append(f"{len(short)} cheaper setting(s) may be worse by more than the margin; the closest, "
                         f"{c.row['label']}, is cheaper on {', '.join(s.axis.words for s in c.cheaper_on)} but its 95% "
                         f"lower bound is {c.test.lower:+.3f} (p = {c.test.p_value:.3g})")
        if equal:
            parts.append(f"{len(equal)} setting(s) are as good within the margin but save less than that on every "
                         f"measured axis (e.g. {equal[0].row['label']})")
        if not short and not equal:
            parts.append("no other setting is cheaper on a measured axis and within the margin")
        return ["; ".join(parts) + ".", f"What the best costs: {_what_it_costs(best)}"]
    row, test = pick.row, pick.test
    out = [f"As good and cheaper: {row['label']}, {_interval(row)}, is not worse than the best by more than "
           f"{margin.value:.3f} {m} ({margin.source}; paired one-sided t-test on {_queries(verdict, test.n)}: "
           f"difference {test.diff:+.3f}, 95% lower bound {test.lower:+.3f}, p = {test.p_value:.3g}), and cheaper on "
           + "; ".join(_saving_words(s, best, row) for s in pick.cheaper_on) + "."]
    versus = verdict.versus_pick
    if versus is not None and versus.significant and versus.diff < 0:
        out.append(f"It is significantly lower than the best (difference {versus.diff:+.3f}, 95% CI {versus.ci_low:+.3f} "
                   f"to {versus.ci_high:+.3f}, p = {versus.p_value:.3g}), but by less than the {margin.value:.3f} margin.")
    if "pick" in verdict.hole_gaps:
        out.append(verdict.hole_gaps["pick"].sentence())
    out.append(f"What it costs: {_what_it_costs(row)}")
    return out


def verdict_frame(verdict: Verdict) -> pl.DataFrame:
    """The verdict table with formatted cells (role, setting, measure, cost, latency, index)."""
    rows = []
    for row in verdict.rows().iter_rows(named=True):
        rows.append({
            "role": row["role"], "setting": row["label"], verdict.measure: _interval(row).replace(" (95% CI ", " [").replace(")", "]"),
            **({} if verdict.hole_measures is None else
               {verdict.hole_measures[0]: _share(verdict.judged.get(row["label"], (None,))[0])}),
            "$ / 1k queries": fmt_usd(row["usd_per_1k_queries"]),
            "p50 query": _query_ms(row, "p50"),
            "p95 query": _query_ms(row, "p95"),
            "index": fmt_bytes(row["index_bytes"]),
        })
    return pl.DataFrame(rows)


def _share(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def dev_frame(verdict: Verdict) -> pl.DataFrame | None:
    """Tuning evidence: every setting's quality on the non-test queries beside its test quality."""
    if verdict.dev is None:
        return None
    test = verdict.settings.with_row_index("test_rank", offset=1).select("label", "test_rank", test="mean")
    dev = verdict.dev.with_row_index("dev_rank", offset=1)
    return (dev.join(test, on="label", how="left")
            .select("label", "dev_rank", dev=pl.col("mean").round(4), dev_ci_low=pl.col("ci_low").round(4),
                    dev_ci_high=pl.col("ci_high").round(4), dev_queries="n", test=pl.col("test").round(4),
                    test_rank="test_rank"))


def _query_ms(row: dict, which: str) -> str:
    if row[f"query_{which}_ms"] is not None:
        return fmt_ms(row[f"query_{which}_ms"])
    if row[f"embed_{which}_ms"] is not None:
        return fmt_ms(row[f"embed_{which}_ms"]) + " (embed only)"
    return "n/a"
