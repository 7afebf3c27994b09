"""The interventions ladder: each intervention of a spec against one baseline on the held-out
test queries (paired gain, interval, p), what it adds in dollars, milliseconds and bytes, whether
a dev gain held on test, the cheapest step that helps, and what to try when none does."""
from __future__ import annotations

import math
from dataclasses import dataclass

import polars as pl

from retbench.tasks.analysis.breakdown import paired_comparison
from retbench.tasks.analysis.holes import DEFAULT_JUDGED_GAP, Side, hole_gap, hole_measures

# The seed's order: the cheapest interventions first, each later one costs more to try.
KINDS = ("chunking", "filters", "query", "model", "hybrid", "reranker", "finetuned", "cheaper")
KIND_NAMES = {"chunking": "chunking variant", "filters": "metadata filters", "query": "query preprocessing",
              "model": "another model", "hybrid": "hybrid", "reranker": "reranker",
              "finetuned": "fine-tuned model", "cheaper": "cheaper variant"}
NO_PARAMS = "{}"
TRY = {"chunking": "another chunking", "filters": "metadata filters", "query": "query preprocessing",
       "model": "another model", "hybrid": "a hybrid", "reranker": "a reranker", "finetuned": "fine-tuning",
       "cheaper": "a cheaper variant"}

# Failure-log thresholds for the "try next" hints (share of the queries considered).
LEXICAL_SHARE = 0.10  # BM25 finds more relevant documents than the baseline on at least this share
BURIED_SHARE = 0.05  # buried answers among at least this share of the queries
COLLAPSE_RATIO = 0.5  # a language pair at or below half the overall mean has collapsed
MIN_PAIR_QUERIES = 3  # fewer queries than this say nothing about a language pair

LADDER_SCHEMA = {
    "step": pl.Int64, "kind": pl.String, "intervention": pl.String, "setting": pl.String, "params": pl.String,
    "change": pl.String, "baseline": pl.String, "measure": pl.String,
    "test_n": pl.Int64, "test_baseline": pl.Float64, "test_value": pl.Float64, "test_gain": pl.Float64,
    "test_ci_low": pl.Float64, "test_ci_high": pl.Float64, "test_p_value": pl.Float64, "test_significant": pl.Boolean,
    "dev_n": pl.Int64, "dev_gain": pl.Float64, "dev_ci_low": pl.Float64, "dev_ci_high": pl.Float64,
    "dev_p_value": pl.Float64, "dev_significant": pl.Boolean, "dev_gain_held_on_test": pl.Boolean,
    "added_usd_per_1k_queries": pl.Float64, "added_query_p50_ms": pl.Float64, "added_index_bytes": pl.Int64,
    "gain_per_added_ms": pl.Float64, "gain_per_added_usd": pl.Float64, "recommended": pl.Boolean,
    # How much of each top k was judged, and the gain on nDCG' (unjudged documents removed), on
    # the test queries; judged_gap: the two judged@k differ by more than the threshold.
    "judged_measure": pl.String, "test_baseline_judged": pl.Float64, "test_judged": pl.Float64,
    "test_condensed_gain": pl.Float64, "judged_gap": pl.Boolean, "holes_sentence": pl.String,
    # tuning_split: the splits the dev columns are over ("dev", "train" or "dev+train").
    "tuning_split": pl.String,
    # recommended_by: on the recommended step, what chose it (a cost axis, or the order of effort).
    "recommended_by": pl.String,
    # A significant step that gains more than the recommended one: its gain minus the
    # recommended step's, paired over the test queries, and whether that is significant.
    "gain_vs_recommended": pl.Float64, "gain_vs_recommended_ci_low": pl.Float64,
    "gain_vs_recommended_ci_high": pl.Float64, "gain_vs_recommended_p_value": pl.Float64,
    "gains_more_than_recommended": pl.Boolean,
    # One-time costs of trying the step (null: unknown): corpus texts it must embed anew and
    # their price, and training seconds (a fine-tune's).
    "once_texts_to_embed": pl.Int64, "once_embed_usd": pl.Float64, "once_train_seconds": pl.Float64,
    # Whether trying it means building an index the baseline does not have (null: unknown).
    "once_index_to_build": pl.Boolean,
    # The search part of added_query_p50_ms (shown when the embedding part is not measured).
    "added_search_p50_ms": pl.Float64,
}
COST_COLUMNS = ("usd_per_1k_queries", "query_p50_ms", "index_bytes")


@dataclass(frozen=True)
class Step:
    """One intervention: its kind (one of KINDS), the `setting` (and `params`) its per-query rows
    carry, and the change in words ("chunking sent60", "RRF of bm25 and e5-small/flat").
    `against`: the setting it is paired with when not the ladder's baseline (metadata filters:
    the baseline searched without its queries' filters)."""

    kind: str
    setting: str
    change: str
    params: str = NO_PARAMS
    against: str | None = None
    against_params: str = NO_PARAMS

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"intervention {self.setting!r}: unknown kind {self.kind!r} (expected one of {', '.join(KINDS)})")


def seed_order(steps: list[Step]) -> list[Step]:
    """The steps in the seed's order of kinds, the spec's order within a kind."""
    return sorted(steps, key=lambda s: KINDS.index(s.kind))


# Tuning evidence: every split a run may tune on (the fine-tune mines train; fusion weights and
# the ANN pick are chosen on dev). The ladder's dev columns are over all of them.
TUNING = ("dev", "train")
# The cost axes a recommendation may rank on, in order: a column of the ladder, and its words.
AXES = (("added_usd_per_1k_queries", "added $ per 1,000 queries"), ("added_query_p50_ms", "added p50 query latency"),
        ("added_index_bytes", "added index bytes"))
EFFORT = ("the order of effort (chunking, metadata filters, query preprocessing, another model or BM25, hybrid, "
          "reranker, fine-tuning)")


def _rows(per_query: pl.DataFrame, setting: str, params: str, measure: str, split: str | tuple[str, ...]) -> pl.DataFrame:
    splits = (split,) if isinstance(split, str) else split
    chosen = (pl.col("setting") == setting) & (pl.col("measure") == measure) & pl.col("split").is_in(list(splits))
    if "params" in per_query.columns:
        chosen &= pl.col("params").fill_null(NO_PARAMS) == params
    return per_query.filter(chosen)


def _paired(per_query: pl.DataFrame, step: tuple[str, str], baseline: tuple[str, str], measure: str,
            split: str | tuple[str, ...],
            resamples: int, permutations: int, seed: int, level: float) -> dict | None:
    """step - baseline on the split's queries both scored (paired bootstrap interval, sign-flip p);
    None when the split has no such query."""
    if step == baseline:
        raise ValueError(f"intervention {step[0]!r} (params {step[1]}) is paired with itself")
    a, b = _rows(per_query, *step, measure, split), _rows(per_query, *baseline, measure, split)
    common = set(a["query_id"]) & set(b["query_id"])
    if not common:
        return None
    # paired_comparison keys settings by (provider, index, nprobe): the label and params stand in.
    frame = pl.concat([rows.filter(pl.col("query_id").is_in(list(common))).select(
        provider=pl.lit(name), index=pl.lit(params), nprobe=pl.lit(None, pl.Int64), query_id="query_id",
        measure="measure", value=pl.col("value").cast(pl.Float64)) for rows, (name, params) in ((a, step), (b, baseline))])
    row = paired_comparison(frame, (step[0], step[1], None), (baseline[0], baseline[1], None), resamples=resamples,
                            permutations=permutations, seed=seed, level=level).row(0, named=True)
    return {"n": row["n"], "mean_a": row["mean_a"], "mean_b": row["mean_b"], "diff": row["diff"],
            "ci_low": row["ci_low"], "ci_high": row["ci_high"], "p_value": row["p_value"]}


def _significant_gain(result: dict | None, alpha: float) -> bool | None:
    if result is None:
        return None
    return result["p_value"] < alpha and result["ci_low"] > 0


def _added(costs: dict, step: tuple[str, str], baseline: tuple[str, str], column: str):
    mine, base = costs.get(step, {}).get(column), costs.get(baseline, {}).get(column)
    if mine is None or base is None or (isinstance(mine, float) and math.isnan(mine)) or (
            isinstance(base, float) and math.isnan(base)):
        return None
    return mine - base


# Steps that embed nothing new: the same model and index (query variants, filters), a reranker
# over an existing first stage. A new model, a fine-tune or a cheaper variant embeds the corpus.
EMBEDS_NOTHING = ("query", "filters", "reranker")
EMBEDS_CORPUS = ("model", "finetuned", "cheaper")


def _once(step: Step, cost: dict) -> dict:
    """The step's one-time costs from its cost row (corpus_texts, corpus_usd, train_seconds when
    the costs table has them). A BM25 step indexes text and embeds none; a chunking variant or a
    hybrid embeds what its own row does not say, so those stay unknown."""
    bm25 = step.setting.startswith("bm25:")
    if step.kind in EMBEDS_NOTHING or bm25:
        texts, usd = 0, 0.0
    elif step.kind in EMBEDS_CORPUS:
        texts, usd = cost.get("corpus_texts"), cost.get("corpus_usd")
    else:
        texts = usd = None
    train = cost.get("train_seconds") if step.kind == "finetuned" else 0.0
    # A hybrid's own row does not say whether its stages' indexes exist already: unknown.
    index = False if step.kind in EMBEDS_NOTHING and not bm25 else None if step.kind == "hybrid" and not bm25 else True
    return {"once_texts_to_embed": texts, "once_embed_usd": usd, "once_train_seconds": train,
            "once_index_to_build": index}


def _per(gain: float | None, added) -> float | None:
    """Gain per unit added; None when nothing is added (a free or saving step has no such ratio)."""
    if gain is None or added is None or added <= 0:
        return None
    return gain / added


def _holes(per_query: pl.DataFrame, step: tuple[str, str], reference: tuple[str, str], holes: tuple[str, str] | None,
           gain: float | None, threshold: float) -> dict:
    """judged@k of step and reference and the condensed nDCG' gain over the test queries both
    scored, and the one-sentence flag when their judged@k differ by more than `threshold`."""
    empty = {"judged_measure": None if holes is None else holes[0], "test_baseline_judged": None, "test_judged": None,
             "test_condensed_gain": None, "judged_gap": None, "holes_sentence": None}
    if holes is None:
        return empty
    means = []
    for name, params in (step, reference):
        rows = pl.concat([_rows(per_query, name, params, m, "test") for m in holes])
        means.append(rows)
    common = set(means[0]["query_id"]) & set(means[1]["query_id"])
    if not common:
        return empty
    sides = []
    for (name, _), rows in zip((step, reference), means):
        rows = rows.filter(pl.col("query_id").is_in(list(common)))
        got = dict(rows.group_by("measure").agg(pl.col("value").mean()).iter_rows())
        if any(m not in got for m in holes):
            return empty
        sides.append(Side(name, got[holes[0]], got[holes[1]]))
    k = holes[0].split("@")[1] if "@" in holes[0] else ""
    gap = hole_gap(sides[0], sides[1], gain if gain is not None else 0.0, k, threshold)
    return {"judged_measure": holes[0], "test_baseline_judged": sides[1].judged, "test_judged": sides[0].judged,
            "test_condensed_gain": sides[0].condensed - sides[1].condensed, "judged_gap": gap is not None,
            "holes_sentence": None if gap is None else gap.sentence()}


def ladder_table(per_query: pl.DataFrame, costs: pl.DataFrame, steps: list[Step], baseline: str, measure: str,
                 baseline_params: str = NO_PARAMS, resamples: int = 1000, permutations: int = 10000, seed: int = 0,
                 level: float = 0.95, judged_gap: float = DEFAULT_JUDGED_GAP) -> pl.DataFrame:
    """One row per step in the seed's order: its test gain over `baseline` on `measure` (paired
    over the test queries both scored), the same on dev as tuning evidence, what it adds per
    query (USD per 1,000 queries, p50 query latency, index bytes) and the gain per added ms and
    per added dollar; `recommended` marks the cheapest step with a significant test gain.

    per_query: setting, [params,] query_id, measure, value, split. costs: setting, [params,]
    usd_per_1k_queries, query_p50_ms, index_bytes (null: not measured), [search_p50_ms]. A step whose setting has
    no per-query row is refused: the ladder must list every intervention it was given.

    When per_query also scores judged@k and ndcg_condensed@k (at the measure's cutoff), each step
    carries both settings' judged@k on test, its gain on nDCG', and `judged_gap`, set when the
    two judged@k differ by more than `judged_gap` (holes_sentence says it in words)."""
    missing = [c for c in ("setting", "query_id", "measure", "value", "split") if c not in per_query.columns]
    if missing:
        raise ValueError(f"per_query: missing columns {missing} (found {per_query.columns})")
    alpha = 1 - level
    base = (baseline, baseline_params)
    if _rows(per_query, *base, measure, "test").is_empty() and _rows(per_query, *base, measure, "dev").is_empty():
        raise ValueError(f"per_query has no {measure} rows for the baseline {baseline!r} (params {baseline_params})")
    holes = hole_measures(measure, set(per_query["measure"].unique()))
    cost_rows = {}
    for row in costs.iter_rows(named=True):
        cost_rows[(row["setting"], row.get("params") or NO_PARAMS)] = row
    out = []
    for number, step in enumerate(seed_order(steps), start=1):
        key = (step.setting, step.params)
        reference = (step.against, step.against_params) if step.against else base
        scored = per_query.filter((pl.col("setting") == step.setting) & (pl.col("measure") == measure))
        if scored.is_empty():
            raise ValueError(f"intervention {step.setting!r} ({KIND_NAMES[step.kind]}): per_query has no {measure} rows "
                             f"(settings found: {sorted(set(per_query['setting']))})")
        test = _paired(per_query, key, reference, measure, "test", resamples, permutations, seed, level)
        dev = _paired(per_query, key, reference, measure, TUNING, resamples, permutations, seed, level)
        tuning = sorted(set(_rows(per_query, *key, measure, TUNING)["split"]), key=TUNING.index)
        test_sig, dev_sig = _significant_gain(test, alpha), _significant_gain(dev, alpha)
        usd = _added(cost_rows, key, reference, "usd_per_1k_queries")
        ms = _added(cost_rows, key, reference, "query_p50_ms")
        size = _added(cost_rows, key, reference, "index_bytes")
        gain = test["diff"] if test else None
        out.append({
            "step": number, "kind": step.kind, "intervention": KIND_NAMES[step.kind], "setting": step.setting,
            "params": step.params, "change": step.change, "baseline": reference[0], "measure": measure,
            "test_n": test["n"] if test else 0, "test_baseline": test["mean_b"] if test else None,
            "test_value": test["mean_a"] if test else None, "test_gain": gain,
            "test_ci_low": test["ci_low"] if test else None, "test_ci_high": test["ci_high"] if test else None,
            "test_p_value": test["p_value"] if test else None, "test_significant": test_sig,
            "dev_n": dev["n"] if dev else 0, "dev_gain": dev["diff"] if dev else None,
            "dev_ci_low": dev["ci_low"] if dev else None, "dev_ci_high": dev["ci_high"] if dev else None,
            "dev_p_value": dev["p_value"] if dev else None, "dev_significant": dev_sig,
            # Only a significant dev gain can hold or not; with no test queries it is untested (null).
            "dev_gain_held_on_test": (bool(test_sig) if test is not None else None) if dev_sig else None,
            "added_usd_per_1k_queries": usd, "added_query_p50_ms": ms,
            "added_index_bytes": None if size is None else int(size),
            "gain_per_added_ms": _per(gain, ms), "gain_per_added_usd": _per(gain, usd), "recommended": False,
            **_holes(per_query, key, reference, holes, gain, judged_gap),
            "tuning_split": "+".join(tuning) if tuning else None, "recommended_by": None,
            "gain_vs_recommended": None, "gain_vs_recommended_ci_low": None, "gain_vs_recommended_ci_high": None,
            "gain_vs_recommended_p_value": None, "gains_more_than_recommended": None,
            **_once(step, cost_rows.get(key, {})),
            "added_search_p50_ms": _added(cost_rows, key, reference, "search_p50_ms"),
        })
    table = pl.DataFrame(out, schema=LADDER_SCHEMA, orient="row")
    by_key = {(s.setting, s.params): s for s in steps}

    def different(a: dict, b: dict) -> tuple[bool, float] | None:
        """Whether two steps' test gains differ significantly (either way), paired over the test queries."""
        versus = _gain_versus(per_query, by_key[(a["setting"], a["params"])], by_key[(b["setting"], b["params"])], base,
                              measure, resamples, permutations, seed, level)
        if versus is None:
            return None
        return versus["p_value"] < alpha and (versus["ci_low"] > 0 or versus["ci_high"] < 0), versus["p_value"]

    chosen = recommendation(table, different)
    if chosen is None:
        return table
    pick, basis = chosen
    ordered = {(s.setting, s.params): s for s in seed_order(steps)}
    pick_step = ordered[(pick["setting"], pick["params"])]
    rows = []
    for row in table.iter_rows(named=True):
        row["recommended"] = row["step"] == pick["step"]
        row["recommended_by"] = basis if row["recommended"] else None
        if row["test_significant"] and not row["recommended"] and row["test_gain"] > pick["test_gain"]:
            step = ordered[(row["setting"], row["params"])]
            versus = _gain_versus(per_query, step, pick_step, base, measure, resamples, permutations, seed, level)
            if versus is not None:
                row |= {"gain_vs_recommended": versus["diff"], "gain_vs_recommended_ci_low": versus["ci_low"],
                        "gain_vs_recommended_ci_high": versus["ci_high"],
                        "gain_vs_recommended_p_value": versus["p_value"],
                        "gains_more_than_recommended": _significant_gain(versus, alpha)}
        rows.append(row)
    return pl.DataFrame(rows, schema=LADDER_SCHEMA, orient="row")


def _gains(per_query: pl.DataFrame, step: Step, baseline: tuple[str, str], measure: str) -> pl.DataFrame:
    """query_id, gain: the step's test value minus its reference's, per test query both scored."""
    reference = (step.against, step.against_params) if step.against else baseline
    mine = _rows(per_query, step.setting, step.params, measure, "test").select("query_id", mine="value")
    theirs = _rows(per_query, *reference, measure, "test").select("query_id", theirs="value")
    return mine.join(theirs, on="query_id").select("query_id", gain=pl.col("mine") - pl.col("theirs"))


def _gain_versus(per_query: pl.DataFrame, step: Step, pick: Step, baseline: tuple[str, str], measure: str,
                 resamples: int, permutations: int, seed: int, level: float) -> dict | None:
    """step's gain minus pick's gain over the test queries both were paired on: interval and p,
    as any ladder comparison (each gain is over its own reference, so a filters step compares too)."""
    a, b = _gains(per_query, step, baseline, measure), _gains(per_query, pick, baseline, measure)
    common = set(a["query_id"]) & set(b["query_id"])
    if not common:
        return None
    frame = pl.concat([rows.filter(pl.col("query_id").is_in(list(common))).select(
        provider=pl.lit(name), index=pl.lit(NO_PARAMS), nprobe=pl.lit(None, pl.Int64), query_id="query_id",
        measure=pl.lit(measure), value="gain") for rows, name in ((a, "step"), (b, "pick"))])
    row = paired_comparison(frame, ("step", NO_PARAMS, None), ("pick", NO_PARAMS, None), resamples=resamples,
                            permutations=permutations, seed=seed, level=level).row(0, named=True)
    return {"diff": row["diff"], "ci_low": row["ci_low"], "ci_high": row["ci_high"], "p_value": row["p_value"]}


def recommendation(ladder: pl.DataFrame, different=None) -> tuple[dict, str] | None:
    """The step to try first among those with a significant test gain, and what chose it.

    The cost axes (added dollars, then milliseconds, then bytes) rank the steps in turn, each only
    when it is measured for every one of them: an unmeasured cost is unknown, never cheaper nor
    costlier, so an axis with a hole separates nothing. Among steps the per-query axes leave tied,
    the one-time costs (embedding dollars, texts to embed anew, training seconds, an index to
    build; each known for all of them) prefer the smaller, but only when `different` (two ladder
    rows -> (their test gains differ significantly, p), or None: not comparable) says the kept
    steps' gains are not significantly different from the dropped ones'. What is still tied goes
    by the order of effort (the ladder's order: chunking first, fine-tuning last).

    Without `different`, a ladder table that already names its recommended step (ladder_table's)
    gives that step and its recorded reason."""
    if different is None and "recommended_by" in ladder.columns:
        stored = ladder.filter(pl.col("recommended").fill_null(False) & pl.col("recommended_by").is_not_null())
        if stored.height == 1:
            row = stored.row(0, named=True)
            return row, row["recommended_by"]
    rows = list(ladder.filter(pl.col("test_significant").fill_null(False)).sort("step").iter_rows(named=True))
    if not rows:
        return None
    if len(rows) == 1:
        return rows[0], "the only step with a significant test gain"
    decided, unknown = [], []
    for column, words in AXES:
        missing = [r["setting"] for r in rows if r[column] is None]
        if missing:
            unknown.append(f"{words} unknown for {', '.join(missing)}")
            continue
        low = min(r[column] for r in rows)
        kept = [r for r in rows if r[column] == low]
        if len(kept) < len(rows):
            decided.append(f"the fewest {words}")
            rows = kept
        if len(rows) == 1:
            break
    unmeasured = f" ({'; '.join(unknown)})" if unknown else ""
    if len(rows) == 1:
        return rows[0], " then ".join(decided) + unmeasured
    once = _once_decides(rows, different)
    if once is not None:
        rows, words = once
        lead = " then ".join(decided) + " then " if decided else "no measured per-query cost separating them, "
        if len(rows) == 1:
            return rows[0], f"{lead}{words}{unmeasured}"
        decided.append(words)
    why = "no measured cost separates them" if not decided else f"after {' then '.join(decided)}, no measured cost separates them"
    return rows[0], f"{EFFORT}, since {why}{unmeasured}"


# The one-time costs a recommendation may weigh, in order: a column of the ladder, its words, and
# how a value reads.
ONCE_AXES = (("once_embed_usd", "embedding dollars", lambda v: f"${v:,.4f}"),
             ("once_texts_to_embed", "texts to embed anew", lambda v: f"{v:,}"),
             ("once_train_seconds", "seconds of training", lambda v: f"{v:,.0f}"),
             ("once_index_to_build", "an index to build", lambda v: "yes" if v else "no"))


def _once_decides(rows: list[dict], different) -> tuple[list[dict], str] | None:
    """(the rows with the smallest one-time cost on the first axis known for all that separates
    them, the words why), when their test gains are not significantly different from every
    dropped row's; None when no one-time cost may decide."""
    for column, words, shown in ONCE_AXES:
        values = [r.get(column) for r in rows]
        if any(v is None for v in values):
            continue
        low = min(values)
        kept = [r for r in rows if r[column] == low]
        if len(kept) == len(rows):
            continue
        if different is None:
            return None
        dropped = [r for r in rows if r[column] != low]
        tests = [different(k, d) for k in kept for d in dropped]
        if any(t is None or t[0] for t in tests):
            return None  # a larger gain (or one not comparable) is not traded for a smaller one-time cost
        names = ", ".join(f"{shown(d[column])} for {d['setting']}" for d in dropped)
        return kept, (f"the smaller one-time cost ({words}: {shown(low)} against {names}), as their test gains are "
                      f"not significantly different (p {min(t[1] for t in tests):.3g} or more)")
    return None


def cheapest_helpful(ladder: pl.DataFrame) -> dict | None:
    """The recommended step (see `recommendation`), or None when no step gains significantly on test."""
    chosen = recommendation(ladder)
    return None if chosen is None else chosen[0]


# ---------------------------------------------------------------- what to try next


@dataclass(frozen=True)
class Hint:
    try_next: str  # the kind of intervention (one of KINDS)
    evidence: str  # what in the failure log points there, in words


def buried_hint(failures: pl.DataFrame | None, baseline: str, queries: int) -> Hint | None:
    """Answers buried in long chunks (the failure log's `buried` flag for the baseline) -> chunking."""
    if failures is None or "buried" not in failures.columns or not queries:
        return None
    buried = failures.filter((pl.col("setting") == baseline) & pl.col("buried").fill_null(False))["query_id"].n_unique()
    if buried == 0 or buried / queries < BURIED_SHARE:
        return None
    return Hint("chunking", f"{buried} of {queries} queries have their answer buried in a long chunk (the document ranks "
                            f"within 10 by its best passage but not by its chunk)")


def lexical_hint(per_query: pl.DataFrame, baseline: str, lexical: list[str], measure: str = "recall@10") -> Hint | None:
    """Relevant documents BM25 finds that dense search misses (a query where a BM25 setting's
    recall beats the baseline's, on the same queries) -> a hybrid."""
    best = None
    base = per_query.filter((pl.col("setting") == baseline) & (pl.col("measure") == measure)).select("query_id", base="value")
    for name in lexical:
        mine = per_query.filter((pl.col("setting") == name) & (pl.col("measure") == measure)).select("query_id", lexical="value")
        both = base.join(mine, on="query_id")
        if both.is_empty():
            continue
        wins, lost = both.filter(pl.col("lexical") > pl.col("base")).height, both.filter(pl.col("lexical") < pl.col("base")).height
        if best is None or wins > best[1]:
            best = (name, wins, lost, both.height)
    if best is None or best[1] == 0 or best[1] / best[3] < LEXICAL_SHARE:
        return None
    name, wins, lost, n = best
    return Hint("hybrid", f"{name} finds more relevant documents ({measure}) than {baseline} on {wins} of {n} queries "
                          f"(fewer on {lost})")


def language_hint(breakdown: pl.DataFrame | None, baseline: str, measure: str) -> Hint | None:
    """A language pair whose mean falls to COLLAPSE_RATIO of the overall mean or below -> a
    multilingual model or query rewriting."""
    if breakdown is None or breakdown.is_empty():
        return None
    mine = breakdown.filter((pl.col("setting") == baseline) & (pl.col("measure") == measure))
    overall = mine.filter(pl.col("slice_kind") == "all")["mean"].to_list()
    if not overall or overall[0] <= 0:
        return None
    collapsed = mine.filter((pl.col("slice_kind") == "language_pair") & (pl.col("n") >= MIN_PAIR_QUERIES)
                            & (pl.col("mean") <= COLLAPSE_RATIO * overall[0])).sort("mean")
    if collapsed.is_empty():
        return None
    pairs = ", ".join(f"{r['slice']} {r['mean']:.3f} ({r['n']} queries)" for r in collapsed.iter_rows(named=True))
    return Hint("model", f"language pair(s) collapse under {baseline}: {pairs}, against {overall[0]:.3f} overall "
                         f"({measure}); try a multilingual model or query rewriting")


def window_hint(over_window: dict[str, int] | None, baseline_provider: str) -> Hint | None:
    """Documents longer than the model's window (texts truncated when embedded) -> chunking."""
    count = (over_window or {}).get(baseline_provider)
    if not count:
        return None
    return Hint("chunking", f"{count} document texts are longer than {baseline_provider}'s input window and were "
                            f"truncated when embedded")


def next_steps(hints: list[Hint | None], ladder: pl.DataFrame) -> list[str]:
    """One sentence per hint, naming the steps of that kind this ladder already tried and how they did."""
    out = []
    for hint in (h for h in hints if h is not None):
        tried = ladder.filter(pl.col("kind") == hint.try_next).select("setting", "test_significant").rows() if ladder.height else []
        kind = TRY[hint.try_next]
        outcomes = ", ".join(f"{name} ({'a significant test gain' if helped else 'no significant test gain'})"
                             for name, helped in tried)
        out.append(f"Try {kind}" + (f" (tried here: {outcomes})" if tried else "") + f": {hint.evidence}.")
    return out
