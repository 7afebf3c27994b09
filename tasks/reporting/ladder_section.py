"""The interventions ladder as tables (ladder.parquet, ladder_next.parquet), a report section with
its plot, and the sentences the verdict's second paragraph is made of (tasks/analysis/ladder.py)."""
from __future__ import annotations

import html
import json
from dataclasses import replace
from pathlib import Path

import polars as pl

from retbench.tasks.analysis.ladder import (NO_PARAMS, Step, buried_hint, language_hint, ladder_table, lexical_hint,
                                   next_steps, recommendation, window_hint)
from retbench.tasks.config.cheaper import cheaper_variants
from retbench.tasks.config.setting import FirstStage, Setting
from retbench.tasks.config.verdict import VerdictSpec
from retbench.tasks.reporting import figures
from retbench.tasks.reporting.svg import cut_label, marker, nice_ticks, svg_open
from retbench.tasks.reporting.verdict import fmt_bytes, fmt_ms, fmt_usd, read_table, settings_table
from retbench.tasks.stages.variants import plan_settings

UNFILTERED = " without filters"  # the label suffix of the baseline searched without its queries' filters
NEXT_SCHEMA = {"try_next": pl.String, "evidence": pl.String, "sentence": pl.String}
SHOWN = ("step", "intervention", "setting", "change", "baseline", "test_n", "test_baseline", "test_baseline_judged",
         "test_value", "test_judged", "test_gain", "test_condensed_gain",
         "test_ci_low", "test_ci_high", "test_p_value", "dev_gain", "dev_p_value", "dev_gain_held_on_test",
         "added_usd_per_1k_queries", "added_query_p50_ms", "added_search_p50_ms", "added_index_bytes", "gain_per_added_ms",
         "gain_per_added_usd", "recommended")
# The report's headers: words for the columns of ladder.parquet (the file keeps its names, which
# docs/reference/tables.md documents); a reader of the report should not need that page.
HEADERS = {"step": "step", "intervention": "intervention", "setting": "setting", "change": "change",
           "baseline": "baseline", "test_n": "test queries", "test_baseline": "baseline on test",
           "test_value": "step on test", "test_gain": "gain on test", "test_ci_low": "gain on test, 95% CI low",
           "test_ci_high": "gain on test, 95% CI high", "test_p_value": "p on test", "dev_gain": "gain on {tuning}",
           "dev_p_value": "p on {tuning}", "dev_gain_held_on_test": "{tuning} gain held on test",
           "added_usd_per_1k_queries": "added $ per 1,000 queries", "added_query_p50_ms": "added p50 ms per query",
           "added_search_p50_ms": "of which search, added p50 ms",
           "added_index": "added index size", "gain_per_added_ms": "gain per added ms",
           "gain_per_added_usd": "gain per added $", "recommended": "recommended",
           # {judged}: the judged@k the run scored (judged_measure), so the header names its cutoff.
           "test_baseline_judged": "baseline {judged} on test", "test_judged": "step {judged} on test",
           "test_condensed_gain": "gain on nDCG′ (condensed) on test"}


# --- which interventions a spec contains ------------------------------------------------------


def interventions(spec, filtered: bool) -> tuple[str, list[Step]]:
    """The baseline label (first provider, exact search, first chunking config, queries as
    written) and every intervention of the spec, in the seed's order: chunking variants, metadata
    filters (when the dataset's queries carry them), query preprocessing, each other first stage
    (embedding model or BM25), hybrids, rerankers, fine-tuned models, cheaper variants."""
    if not spec.providers:
        raise ValueError("the spec has no provider: the ladder's baseline is the first provider's exact search")
    first = spec.providers[0].name
    planned = [s for s in plan_settings(spec) if s.provider == first]
    baseline = planned[0].setting("flat", None).label
    steps = [Step("chunking", s.setting("flat", None).label, f"chunking {s.chunking}")
             for s in planned if s.kind == "chunking"]
    if filtered:
        steps.append(Step("filters", baseline, "each query's metadata filter applied", against=baseline + UNFILTERED))
    steps += [Step("query", s.setting("flat", None).label, f"queries {s.query_variant}") for s in planned if s.kind == "query"]
    cheaper = {v.provider: v for v in cheaper_variants(spec)}
    for provider in spec.providers[1:]:
        label = plan_settings_label(spec, provider.name)
        if provider.kind == "finetuned":
            steps.append(Step("finetuned", label, f"{provider.name}: {provider.options.get('base')} fine-tuned"))
        elif provider.name in cheaper:
            variant = cheaper[provider.name]
            steps.append(Step("cheaper", label, f"{provider.name}: {variant.full} with {variant.change}"))
        else:
            steps.append(Step("model", label, f"{provider.name} ({provider.kind})"))
    steps += [Step("model", Setting(FirstStage.bm25(lexical.name)).label, f"BM25 {lexical.name}") for lexical in spec.lexical]
    for system in spec.systems:
        kind = "reranker" if system.rerank else "hybrid"
        parts = [reference for _, reference in system.references]
        change = (f"{' + '.join(parts)} fused ({system.fusion.method if system.fusion else 'rrf'})" if len(parts) > 1
                  else parts[0])
        if system.rerank:
            change += f", top {system.top_n} reranked by {system.rerank}"
        steps.append(Step(kind, system.name, change))
    return baseline, steps


def plan_settings_label(spec, provider: str) -> str:
    """A provider's baseline setting at exact search: `<provider>/flat`."""
    return next(s for s in plan_settings(spec) if s.provider == provider).setting("flat", None).label


# --- the tables ---------------------------------------------------------------------------------


def ladder_costs(output_dir: Path, measure: str, per_query: pl.DataFrame, variants: dict[str, tuple[str, str, float]]
                 ) -> pl.DataFrame:
    """setting, params, usd_per_1k_queries, query_p50_ms, index_bytes of every setting in
    per_query (tasks/reporting/verdict.py settings_table). A variant has no latency profile or
    storage row of its own: `variants` maps its label to (its provider's baseline label, kind,
    chunks of the variant / chunks of the baseline); a query variant searches its baseline's
    index with the same model, so it costs the same; a chunking variant's flat index and exact
    search grow with its number of chunks, so both are its baseline's scaled by that ratio."""
    table = settings_table(output_dir, measure).select("provider", "index", "nprobe", "usd_per_1k_queries",
                                                       "query_p50_ms", "index_bytes", "search_p50_ms")
    table = table.join(_one_time(output_dir), on="provider", how="left")
    keys = per_query.select("setting", "params", "provider", "index", "nprobe").unique(maintain_order=True)
    costs = keys.join(table, on=["provider", "index", "nprobe"], how="left", nulls_equal=True)
    by_label = {(r["setting"], r["params"]): r for r in costs.iter_rows(named=True)}
    rows = []
    for row in costs.iter_rows(named=True):
        variant = variants.get(row["setting"])
        base = by_label.get((variant[0], row["params"])) if variant else None
        if base is not None:
            _, kind, ratio = variant
            scale = 1.0 if kind == "query" else ratio
            row = {**row,
                   "usd_per_1k_queries": _first(row["usd_per_1k_queries"], base["usd_per_1k_queries"]),
                   "query_p50_ms": _first(row["query_p50_ms"], _scaled(base["query_p50_ms"], scale)),
                   "search_p50_ms": _first(row["search_p50_ms"], _scaled(base["search_p50_ms"], scale)),
                   "index_bytes": _first(row["index_bytes"], _scaled(base["index_bytes"], scale, integer=True))}
        rows.append(row)
    return pl.DataFrame(rows, schema=costs.schema, orient="row").select(
        "setting", "params", "usd_per_1k_queries", "query_p50_ms", "index_bytes", "corpus_texts", "corpus_usd",
        "train_seconds", "search_p50_ms")


def _one_time(output_dir: Path) -> pl.DataFrame:
    """provider, corpus_texts, corpus_usd (cost.parquet: what embedding its corpus takes) and
    train_seconds (finetune_training.parquet); null where this run has no such table."""
    schema = {"provider": pl.String, "corpus_texts": pl.Int64, "corpus_usd": pl.Float64}
    cost = read_table(output_dir, "cost")
    if cost is not None and {"corpus_texts", "corpus_usd"} <= set(cost.columns):
        texts = cost.select("provider", pl.col("corpus_texts").cast(pl.Int64), pl.col("corpus_usd").cast(pl.Float64))
    else:
        texts = pl.DataFrame(schema=schema)
    training = read_table(output_dir, "finetune_training")
    if training is not None and "train_seconds" in training.columns:
        seconds = training.group_by("provider").agg(train_seconds=pl.col("train_seconds").cast(pl.Float64).max())
    else:
        seconds = pl.DataFrame(schema={"provider": pl.String, "train_seconds": pl.Float64})
    return texts.unique("provider").join(seconds, on="provider", how="full", coalesce=True)


def _first(value, fallback):
    return value if value is not None else fallback


def _scaled(value, scale: float, integer: bool = False):
    if value is None or scale is None:
        return None
    return int(round(value * scale)) if integer else value * scale


def _variants(spec, chunk_counts: dict[str, int]) -> dict[str, tuple[str, str, float | None]]:
    """Variant label at exact search -> (its provider's baseline label, kind, chunk-count ratio)."""
    planned = plan_settings(spec)
    first_chunking = spec.chunking_variants[0].name
    out = {}
    for s in planned:
        if s.kind == "baseline":
            continue
        base = next(b for b in planned if b.provider == s.provider and b.kind == "baseline").setting("flat", None).label
        mine, theirs = chunk_counts.get(s.chunking), chunk_counts.get(first_chunking)
        out[s.setting("flat", None).label] = (base, s.kind, mine / theirs if mine and theirs else None)
    return out


def write_ladder(spec, tables: dict[str, str], unfiltered: pl.DataFrame | None = None,
                 chunk_counts: dict[str, int] | None = None) -> dict[str, str]:
    """ladder.parquet (+ csv) and ladder_next.parquet from this run's tables; `unfiltered`: the
    baseline's per-query rows searched without its queries' filters (setting `<baseline> without
    filters`), written as ladder_unfiltered.parquet so the filters step can be paired again;
    `chunk_counts`: chunks per chunking config (a chunking variant's cost scales with them)."""
    from retbench.tasks.reporting.tables import write_tables
    from retbench.tasks.store.files import write_text

    output_dir = Path(spec.output_dir)
    measure = spec.primary_measure
    per_query = pl.read_parquet(tables["per_query"])
    baseline, steps = interventions(spec, unfiltered is not None and unfiltered.height > 0)
    present = set(per_query["setting"])
    if baseline not in present:  # a partial run (--provider) without the first provider: no baseline to climb from
        return {}
    if unfiltered is not None and unfiltered.height:
        present.add(baseline + UNFILTERED)
    kept = [s for s in steps if s.setting in present and (s.against is None or s.against in present)]
    # A system reranking an IVF stage carries its input's query parameters, not `{}`.
    params = {name: set(group["params"]) for (name,), group in per_query.select("setting", "params").unique().group_by("setting")}
    kept = [replace(s, params=next(iter(params[s.setting]))) if NO_PARAMS not in params.get(s.setting, {NO_PARAMS})
            and len(params[s.setting]) == 1 else s for s in kept]
    columns = ["setting", "params", "query_id", "measure", "value", "split"]
    scored = per_query.select(columns)
    costs = ladder_costs(output_dir, measure, per_query, _variants(spec, chunk_counts or {}))
    if unfiltered is not None and unfiltered.height:
        scored = pl.concat([scored, unfiltered.select(columns)])
        base_cost = costs.filter((pl.col("setting") == baseline) & (pl.col("params") == NO_PARAMS))
        # Same embeddings and index: no dollar or byte added; the latency differs by the search alone.
        search, query = _unfiltered_p50(output_dir, base_cost, spec.providers[0].name)
        costs = pl.concat([costs, base_cost.with_columns(setting=pl.lit(baseline + UNFILTERED),
                                                         query_p50_ms=pl.lit(query, pl.Float64),
                                                         search_p50_ms=pl.lit(search, pl.Float64))])
    stats = spec.statistics
    ladder = ladder_table(scored, costs, kept, baseline, measure, resamples=stats.resamples,
                          permutations=stats.permutations, seed=stats.seed, level=stats.confidence,
                          judged_gap=(spec.verdict or VerdictSpec()).judged_gap)
    cut = 10 if 10 in spec.k else max(spec.k)
    failures, breakdown, cost = (read_table(output_dir, name) for name in ("failures", "breakdown", "cost"))
    over_window = None
    if cost is not None and "texts_over_window" in cost.columns:  # where a ledger counts truncated texts
        over_window = dict(cost.select("provider", "texts_over_window").iter_rows())
    queries = per_query.filter(pl.col("setting") == baseline)["query_id"].n_unique()
    hints = [buried_hint(failures, baseline, queries),
             lexical_hint(per_query, baseline, [s.setting for s in steps if s.change.startswith("BM25 ")], f"recall@{cut}"),
             language_hint(breakdown, baseline, measure),
             window_hint(over_window, spec.providers[0].name)]
    hints = [h for h in hints if h is not None]
    sentences = next_steps(hints, ladder)
    next_table = pl.DataFrame([(h.try_next, h.evidence, s) for h, s in zip(hints, sentences)], schema=NEXT_SCHEMA,
                              orient="row")
    written = {"ladder": ladder, "ladder_next": next_table}
    if unfiltered is not None and unfiltered.height:
        written["ladder_unfiltered"] = unfiltered
    paths = write_tables(output_dir, written)
    paths["ladder_csv"] = str(write_text(output_dir / "ladder.csv", ladder.write_csv()))
    return paths


def _unfiltered_p50(output_dir: Path, base_cost: pl.DataFrame, provider: str) -> tuple[float | None, float | None]:
    """(search p50, query p50) of the baseline searched without the metadata filters: the search
    latency stage's `dense-unfiltered` row, and the baseline's query p50 with its filtered search
    swapped for it; None where not timed."""
    from retbench.tasks.stages.search_latency import UNFILTERED as KIND

    measured = read_table(output_dir, "search_latency")
    if measured is None or not base_cost.height:
        return None, None
    flat = measured.filter((pl.col("provider") == provider) & (pl.col("index") == "flat") & pl.col("nprobe").is_null())
    times = dict(flat.select("kind", "search_p50_ms").iter_rows())
    search, filtered, query = times.get(KIND), times.get("dense"), base_cost["query_p50_ms"][0]
    if search is None or filtered is None or query is None:
        return search, None
    return search, query - filtered + search


# --- words ----------------------------------------------------------------------------------------


def _gain(row: dict) -> str:
    return (f"{row['test_gain']:+.3f} (95% CI {row['test_ci_low']:+.3f} to {row['test_ci_high']:+.3f}, "
            f"p {row['test_p_value']:.3g})")


def _adds(row: dict) -> str:
    usd, ms, size = row["added_usd_per_1k_queries"], row["added_query_p50_ms"], row["added_index_bytes"]
    search = row.get("added_search_p50_ms")
    unknown = ("latency not measured" if search is None else
               f"query latency unknown (the embedding was not timed: no latency section), search "
               f"{'+' if search >= 0 else '-'}{fmt_ms(abs(search))} p50")
    parts = ["no dollar figure (a setting without a price)" if usd is None else f"{'+' if usd >= 0 else '-'}{fmt_usd(abs(usd))} per 1,000 queries",
             unknown if ms is None else f"{'+' if ms >= 0 else '-'}{fmt_ms(abs(ms))} p50 per query",
             "size not measured" if size is None else f"{'+' if size >= 0 else '-'}{fmt_bytes(abs(size))} of index"]
    return ", ".join(parts)


def ladder_sentences(ladder: pl.DataFrame, next_rows: pl.DataFrame | None = None) -> list[str]:
    """The verdict's second paragraph: what the ladder recommends on held-out test queries, the
    other steps that helped, the dev gains that did not hold, and what to try when none helps."""
    hints = [] if next_rows is None else next_rows["sentence"].to_list()
    if ladder.is_empty():
        return ["The spec tries no intervention beyond its baseline, so there is no ladder to climb.", *hints]
    first = ladder.row(0, named=True)
    baseline = next((r["baseline"] for r in ladder.iter_rows(named=True) if r["kind"] != "filters"), first["baseline"])
    filters = " (metadata filters: against the baseline searched without them)" if "filters" in set(ladder["kind"]) else ""
    out = [f"Interventions ladder: {ladder.height} step(s), each against the baseline {baseline}{filters}, paired over "
           f"the held-out test queries on {first['measure']}."]
    untested = ladder.filter(pl.col("test_n") == 0)
    chosen = recommendation(ladder)
    if chosen is not None:
        pick, basis = chosen
        out.append(f"Recommended: {pick['setting']} ({pick['intervention']}: {pick['change']}), the step to try first "
                   f"among those with a significant test gain, chosen by {basis}: {_gain(pick)}; it adds {_adds(pick)}"
                   f"{_once_words(pick)}.")
        others = ladder.filter(pl.col("test_significant").fill_null(False) & (pl.col("step") != pick["step"]))
        if "gains_more_than_recommended" in others.columns:  # ladder tables written before the trade-off columns
            more = others.filter(pl.col("gains_more_than_recommended").fill_null(False))
            out += [_trade_off(pick, r) for r in more.iter_rows(named=True)]
            others = others.filter(~pl.col("gains_more_than_recommended").fill_null(False))
        if others.height:
            out.append("Also significant on test, tried after it: " + "; ".join(
                f"{r['setting']} {r['test_gain']:+.3f} (adds {_adds(r)})" for r in others.iter_rows(named=True)) + ".")
    elif untested.height == ladder.height:
        out.append("No test queries in this run: the ladder cannot recommend a step (dev results are tuning evidence only).")
    else:
        best = ladder.filter(pl.col("test_n") > 0).sort("test_gain", descending=True, nulls_last=True).row(0, named=True)
        out.append(f"No step gains significantly on test over the baseline (largest: {best['setting']} {_gain(best)}).")
        out += hints or ["The failure log points at no particular intervention to try next."]
    if "holes_sentence" in ladder.columns:  # ladder tables written before judged@k have no such column
        out += [f"{r['setting']}: {r['holes_sentence']}" for r in ladder.iter_rows(named=True) if r["holes_sentence"]]
    lost = ladder.filter(pl.col("dev_gain_held_on_test").eq(False))
    if lost.height:
        tuning = _tuning_words(lost)
        out.append(f"{tuning.capitalize()} gains that did not hold on test: " + ", ".join(
            f"{r['setting']} ({tuning} {r['dev_gain']:+.3f}, test {r['test_gain']:+.3f})" for r in lost.iter_rows(named=True)) + ".")
    return out


def _tuning_words(rows: pl.DataFrame) -> str:
    """The tuning splits the dev columns are over, as a sentence names them: "dev", "train",
    "dev+train"."""
    splits = sorted({s for s in rows["tuning_split"] if s}) if "tuning_split" in rows.columns else []
    return splits[0] if len(splits) == 1 else "dev" if not splits else "tuning"


def _trade_off(pick: dict, other: dict) -> str:
    """A costlier (or not comparably priced) step that gains significantly more than the recommended one."""
    return (f"Trade-off: {other['setting']} ({other['intervention']}) gains significantly more than {pick['setting']} "
            f"({other['test_gain']:+.3f} against {pick['test_gain']:+.3f}; difference {other['gain_vs_recommended']:+.3f}, "
            f"95% CI {other['gain_vs_recommended_ci_low']:+.3f} to {other['gain_vs_recommended_ci_high']:+.3f}, "
            f"p {other['gain_vs_recommended_p_value']:.3g}) and adds {_adds(other)}{_once_words(other)}, against "
            f"{_adds(pick)}{_once_words(pick)} for {pick['setting']}.")


def _once_words(row: dict) -> str:
    """'; once: ...' with the step's one-time costs, or nothing for a table without them."""
    if "once_texts_to_embed" not in row:
        return ""
    texts, usd, train = row["once_texts_to_embed"], row["once_embed_usd"], row["once_train_seconds"]
    parts = ["texts to embed unknown" if texts is None else
             "no texts to embed" if texts == 0 else
             f"{texts:,} texts to embed ({'not priced' if usd is None else fmt_usd(usd)})"]
    if train is None:
        parts.append("training time unknown")
    elif train > 0:
        parts.append(f"{train:,.0f} s of training")
    index = row.get("once_index_to_build", False)  # absent from ladder tables written before it
    if index is None:
        parts.append("whether an index must be built unknown")
    elif index:
        parts.append("an index to build")
    return "; once: " + ", ".join(parts)


def ladder_paragraph(output_dir: Path) -> list[str]:
    """ladder_sentences from the tables in `output_dir`; empty when the run wrote no ladder."""
    ladder = read_table(output_dir, "ladder")
    return [] if ladder is None else ladder_sentences(ladder, read_table(output_dir, "ladder_next"))


# --- the report section ---------------------------------------------------------------------------


def ladder_svg(ladder: pl.DataFrame) -> str | None:
    """Test gain (95% interval) against the p50 latency each step adds, as inline SVG: one marker
    per step, coloured by its standing, named in the legend on the right. Drawn by hand (no
    matplotlib): gains and latencies change on every run that rescores or remeasures."""
    rows = ladder.filter(pl.col("added_query_p50_ms").is_not_null() & pl.col("test_gain").is_not_null())
    if rows.is_empty():
        return None
    xs = rows["added_query_p50_ms"].to_list()
    lows = [lo if lo is not None else g for lo, g in zip(rows["test_ci_low"], rows["test_gain"])]
    highs = [hi if hi is not None else g for hi, g in zip(rows["test_ci_high"], rows["test_gain"])]
    x_ticks, y_ticks = nice_ticks(min(xs), max(xs), 5), nice_ticks(min(0.0, *lows), max(0.0, *highs), 5)
    left, top, plot_w, plot_h, legend_x = 64, 12, 560, 320, 660

    def x_at(v: float) -> float:
        return left + plot_w * (v - x_ticks[0]) / ((x_ticks[-1] - x_ticks[0]) or 1)

    def y_at(v: float) -> float:
        return top + plot_h * (1 - (v - y_ticks[0]) / ((y_ticks[-1] - y_ticks[0]) or 1))

    height = max(top + plot_h + 48, top + 18 * rows.height + 12)
    out = [svg_open(height, "test gain against added latency per intervention", "test gain against added p50 latency")]
    for tick in x_ticks:
        out.append(f'<line x1="{x_at(tick):.1f}" x2="{x_at(tick):.1f}" y1="{top}" y2="{top + plot_h}" stroke="#e4e4e4"/>'
                   f'<text x="{x_at(tick):.1f}" y="{top + plot_h + 16}" text-anchor="middle">{tick:g}</text>')
    for tick in y_ticks:
        out.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y_at(tick):.1f}" y2="{y_at(tick):.1f}" stroke="#e4e4e4"/>'
                   f'<text x="{left - 6}" y="{y_at(tick) + 4:.1f}" text-anchor="end">{tick:g}</text>')
    out.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y_at(0):.1f}" y2="{y_at(0):.1f}" stroke="#444"/>')
    for i, (row, low, high) in enumerate(zip(rows.iter_rows(named=True), lows, highs)):
        colour = figures.BEST if row["recommended"] else figures.CHEAP if row["test_significant"] else figures.OTHER
        x, name = x_at(row["added_query_p50_ms"]), f"{row['step']}. {row['setting']} ({row['intervention']})"
        out.append(f'<path d="M{x:.1f},{y_at(low):.1f}V{y_at(high):.1f}M{x - 4:.1f},{y_at(low):.1f}H{x + 4:.1f}'
                   f'M{x - 4:.1f},{y_at(high):.1f}H{x + 4:.1f}" stroke="{colour}" fill="none"/>')
        out.append(marker(i % 4, x, y_at(row["test_gain"]), colour, name))
        out.append(marker(i % 4, legend_x, top + 8 + 18 * i, colour, name)
                   + f'<text x="{legend_x + 12}" y="{top + 12 + 18 * i}" font-size="11">{html.escape(cut_label(name, 52))}</text>')
    measure = rows["measure"][0] if "measure" in rows.columns else "the measure"
    out.append(f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#444"/>'
               f'<text x="{left + plot_w / 2}" y="{top + plot_h + 38}" text-anchor="middle">added p50 query latency '
               f"(ms per query, vs the baseline)</text>"
               f'<text x="14" y="{top + plot_h / 2}" text-anchor="middle" transform="rotate(-90 14 {top + plot_h / 2})">'
               f"test gain in {html.escape(str(measure))} (95% interval)</text></svg>")
    return "".join(out)


def _shown(ladder: pl.DataFrame) -> pl.DataFrame:
    """The ladder as the report shows it: sizes in words, yes/no for true/false, headers in words
    (HEADERS), no column that is empty in every row."""
    size = pl.col("added_index_bytes").map_elements(lambda v: ("-" if v < 0 else "+") + fmt_bytes(abs(v)),
                                                     return_dtype=pl.String).alias("added_index")
    frame = ladder.select([size if c == "added_index_bytes" else pl.col(c) for c in SHOWN if c in ladder.columns])
    frame = frame.with_columns(pl.when(pl.col(c)).then(pl.lit("yes")).when(~pl.col(c)).then(pl.lit("no")).alias(c)
                               for c in frame.columns if frame[c].dtype == pl.Boolean)  # null stays empty
    frame = frame.select([c for c in frame.columns if frame[c].null_count() < frame.height])
    judged = next((j for j in ladder["judged_measure"] if j), "judged@k") if "judged_measure" in ladder.columns else "judged@k"
    tuning = _tuning_words(ladder)  # the dev columns are over train when the run tuned on train
    return frame.rename({c: HEADERS.get(c, c).replace("{judged}", judged).replace("{tuning}", tuning)
                         for c in frame.columns})


def ladder_section(output_dir: Path, section_type, paragraph, table, figure):
    """None unless this run wrote ladder.parquet (manifest.json lists it). `section_type`, `paragraph`, `table`, `figure`:
    the report's Section class and its block helpers (tasks/reporting/html.py; `figure` takes an SVG)."""
    manifest = Path(output_dir) / "manifest.json"
    if manifest.exists() and "ladder" not in (json.loads(manifest.read_text(encoding="utf-8")).get("tables") or {}):
        return None  # a ladder.parquet left by an earlier run is not this run's
    ladder = read_table(output_dir, "ladder")
    if ladder is None:
        return None
    next_rows = read_table(output_dir, "ladder_next")
    section = section_type("Interventions ladder", "ladder")
    for sentence in ladder_sentences(ladder, next_rows):
        paragraph(section, sentence)
    if ladder.is_empty():
        return section
    paragraph(section, "Each step in the seed's order (chunking, metadata filters, query preprocessing, other models, "
                       "hybrids, rerankers, fine-tuned models, cheaper variants) minus its baseline: paired over the test "
                       "queries (95% paired bootstrap interval, sign-flip randomisation p); dev columns are tuning "
                       "evidence; 'dev gain held on test' says whether a significant dev gain was significant on test too. "
                       "The added columns: the step's cost minus the baseline's (USD per 1,000 queries, p50 query "
                       "latency, index size; empty: not measured, so unknown, neither cheaper nor costlier); "
                       "recommended: among the significant test gains, the fewest added dollars, then ms, then bytes, "
                       "each axis used only when measured for all of them; among steps still tied whose gains are not "
                       "significantly different, the smaller one-time cost (embedding dollars, texts to embed anew, "
                       "training seconds, an index to build); then the order of effort. Search latency: each setting's "
                       "held-out test queries searched one at a time (at most 200, after 10 warm-up searches), or the "
                       "ANN sweep's single-thread figure where it timed the setting.")
    table(section, _shown(ladder))
    unplotted = [f"{r['step']}. {r['setting']} ({r['intervention']})"
                 for r in ladder.filter(pl.col("added_query_p50_ms").is_null()).iter_rows(named=True)]
    caption = ("Test gain over the baseline (95% paired interval) against the p50 latency each step adds. Green: the "
               "recommended step; blue: other significant test gains; grey: no significant gain. A whisker crossing the "
               "zero line is a gain the test queries cannot tell from none.")
    if unplotted:
        caption += f" Not plotted (latency not measured): {', '.join(unplotted)}."
    figure(section, ladder_svg(ladder), caption)
    if next_rows is not None and next_rows.height:
        paragraph(section, "What the failure log points at (over all queries of the run):")
        table(section, next_rows.select("try_next", "evidence"))
    return section
