"""The report's answer: one row per setting with its quality interval, cost, latency and size,
and the verdict drawn from it (best setting, its paired test against the runner-up, and the
cheapest setting whose quality lies within the best's 95% interval)."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from tasks.analysis.breakdown import paired_comparison

SETTING = ["provider", "index", "nprobe"]
ALPHA = 0.05
_NLIST = re.compile(r"nlist-(\d+)")


def setting_label(provider: str, index: str, nprobe: int | None) -> str:
    return f"{provider} {index}" + ("" if nprobe is None else f" nprobe={nprobe}")


def label_expr() -> pl.Expr:
    return pl.concat_str([pl.col("provider"), pl.lit(" "), pl.col("index"),
                          pl.when(pl.col("nprobe").is_null()).then(pl.lit(""))
                          .otherwise(pl.lit(" nprobe=") + pl.col("nprobe").cast(pl.String))])


def read_table(output_dir: Path, name: str) -> pl.DataFrame | None:
    path = Path(output_dir) / f"{name}.parquet"
    return pl.read_parquet(path) if path.exists() else None


def _quality(summary: pl.DataFrame, breakdown: pl.DataFrame | None, measure: str) -> pl.DataFrame:
    """provider, index, nprobe, mean, ci_low, ci_high, n for `measure` (interval from the breakdown)."""
    rows = summary.filter(pl.col("measure") == measure)
    if rows.is_empty():
        raise ValueError(f"summary has no measure {measure!r} (found {sorted(set(summary['measure']))})")
    quality = rows.select(*SETTING, mean="value", n=pl.col("queries").cast(pl.Int64))
    if breakdown is not None:
        ci = breakdown.filter((pl.col("slice_kind") == "all") & (pl.col("measure") == measure)).select(*SETTING, "ci_low", "ci_high")
        return quality.join(ci, on=SETTING, how="left", nulls_equal=True)
    return quality.with_columns(ci_low=pl.lit(None, pl.Float64), ci_high=pl.lit(None, pl.Float64))


def _search_latency(settings: pl.DataFrame, sweep: pl.DataFrame | None, storage: pl.DataFrame | None) -> pl.DataFrame:
    """One-query search time (single thread) from the ANN sweep, for the settings it measured:
    flat, and IVF at the same nlist (read from the index file name) and nprobe."""
    out = []
    nlists = {}
    if storage is not None and storage.height:
        for provider, name in storage.select("provider", "index").rows():
            found = _NLIST.search(name or "")
            if found and name.startswith("ivf"):
                nlists[provider] = int(found.group(1))
    rows = [] if sweep is None or "p50_ms_single_thread" not in sweep.columns else sweep.select(
        "provider", "index_kind", "build_params", "query_params", "p50_ms_single_thread", "p95_ms_single_thread").rows()
    measured = {}
    for provider, kind, build, query, p50, p95 in rows:
        build, query = json.loads(build or "{}"), json.loads(query or "{}")
        if kind == "flat":
            measured[(provider, "flat", None)] = (p50, p95)
        elif kind == "ivf" and build.get("nlist") == nlists.get(provider) and "nprobe" in query:
            measured[(provider, "ivf", int(query["nprobe"]))] = (p50, p95)
    for provider, index, nprobe in settings.select(SETTING).rows():
        p50, p95 = measured.get((provider, index, nprobe), (None, None))
        out.append((provider, index, nprobe, p50, p95))
    return pl.DataFrame(out, schema={"provider": pl.String, "index": pl.String, "nprobe": pl.Int64,
                                     "search_p50_ms": pl.Float64, "search_p95_ms": pl.Float64}, orient="row")


def _with_system_latency(table: pl.DataFrame, systems: pl.DataFrame | None) -> pl.DataFrame:
    """Latency and cost of the BM25, hybrid and reranked settings (systems.parquet), made of their
    stages': a system embeds what its dense stages embed, and searches what its stages search
    plus its own added step (the BM25 search, the rerank calls). Unmeasured parts stay null."""
    if systems is None or systems.is_empty():
        return table
    rows = {(r["provider"], r["index"], r["nprobe"]): r for r in table.iter_rows(named=True)}
    by_name = {f"{p}/{i}" + ("" if n is None else f"@{n}"): r for (p, i, n), r in rows.items()}
    systems_by_name = {s["system"]: s for s in systems.iter_rows(named=True)}

    def stage_latency(name: str | None):
        """(embed p50, p95, search p50, p95) of one first stage by its setting name."""
        if name is None:
            return 0.0, 0.0, 0.0, 0.0
        if name.startswith("bm25/"):  # a BM25 first stage is listed as a system of its own
            bm25 = systems_by_name.get(name.split("/", 1)[0])
            added = (bm25 or {}).get("added_p50_ms"), (bm25 or {}).get("added_p95_ms")
            return 0.0, 0.0, *added
        row = by_name.get(name) or {}
        return row.get("embed_p50_ms"), row.get("embed_p95_ms"), row.get("search_p50_ms"), row.get("search_p95_ms")

    def total(*parts):
        return None if any(p is None for p in parts) else float(sum(parts))

    updated = []
    for row in table.iter_rows(named=True):
        system = systems_by_name.get(row["provider"])
        if system is not None and system["index"] == row["index"]:
            if system["kind"] == "bm25":
                parts = [(0.0, 0.0, 0.0, 0.0)]
            else:
                parts = [stage_latency(system["first"]), stage_latency(system["second"])]
            added50 = system["added_p50_ms"] if system["kind"] != "hybrid" else 0.0  # fusing lists: no call
            added95 = system["added_p95_ms"] if system["kind"] != "hybrid" else 0.0
            row = {**row, "embed_p50_ms": total(*(p[0] for p in parts)), "embed_p95_ms": total(*(p[1] for p in parts)),
                   "search_p50_ms": total(*(p[2] for p in parts), added50),
                   "search_p95_ms": total(*(p[3] for p in parts), added95),
                   "usd_per_1k_queries": system["usd_per_1000_queries"] if row.get("usd_per_1k_queries") is None
                   else row["usd_per_1k_queries"]}
        updated.append(row)
    return pl.DataFrame(updated, schema=table.schema)


def settings_table(output_dir: Path, measure: str) -> pl.DataFrame:
    """One row per setting, best first: label, quality with interval, cost, latency, index bytes.

    Cost is the provider's query-embedding price per 1,000 queries (null when unpriced);
    embed latency is the latency profile at batch size 1 (one text per call, no concurrency);
    search latency comes from the ANN sweep; query latency adds the two when both were measured
    (a sum of percentiles, so a slight overestimate of the percentile of the sum).
    """
    output_dir = Path(output_dir)
    summary = read_table(output_dir, "summary")
    if summary is None:
        raise FileNotFoundError(f"{output_dir / 'summary.parquet'} not found: run the score stage first")
    table = _quality(summary, read_table(output_dir, "breakdown"), measure)
    cost = read_table(output_dir, "cost")
    if cost is not None and cost.height and "usd_per_1000_queries" in cost.columns:
        table = table.join(cost.select("provider", usd_per_1k_queries="usd_per_1000_queries"), on="provider", how="left")
    else:
        table = table.with_columns(usd_per_1k_queries=pl.lit(None, pl.Float64))
    latency = read_table(output_dir, "latency")
    if latency is not None and latency.height:
        one = latency.filter((pl.col("batch_size") == 1) & (pl.col("concurrency") == 1) if "concurrency" in latency.columns
                             else pl.col("batch_size") == 1)
        table = table.join(one.group_by("provider").agg(embed_p50_ms=pl.col("p50_ms").first(), embed_p95_ms=pl.col("p95_ms").first()),
                           on="provider", how="left")
    else:
        table = table.with_columns(embed_p50_ms=pl.lit(None, pl.Float64), embed_p95_ms=pl.lit(None, pl.Float64))
    storage = read_table(output_dir, "storage")
    table = table.join(_search_latency(table, read_table(output_dir, "ann_sweep"), storage), on=SETTING, how="left", nulls_equal=True)
    if storage is not None and storage.height:
        sizes = storage.filter(pl.col("index").is_not_null()).select(
            "provider", index=pl.col("index").str.extract(r"^([A-Za-z0-9]+)"), index_bytes="index_bytes")
        table = table.join(sizes.unique(["provider", "index"]), on=["provider", "index"], how="left")
    else:
        table = table.with_columns(index_bytes=pl.lit(None, pl.Int64))
    table = _with_system_latency(table, read_table(output_dir, "systems"))
    return (table.with_columns(
        label=label_expr(),
        query_p50_ms=pl.col("embed_p50_ms") + pl.col("search_p50_ms"),
        query_p95_ms=pl.col("embed_p95_ms") + pl.col("search_p95_ms"),
    ).sort(["mean", "provider", "index", "nprobe"], descending=[True, False, False, False], nulls_last=True))


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


def paired(output_dir: Path, a: tuple, b: tuple, measure: str, per_query: pl.DataFrame | None = None) -> Comparison | None:
    """a - b on the primary measure: from comparisons.parquet when the run compared the pair
    (either way round), else a paired bootstrap + randomisation test on per_query."""
    comparisons = read_table(output_dir, "comparisons")
    if comparisons is not None and comparisons.height:
        for first, second, sign in ((a, b, 1.0), (b, a, -1.0)):
            match = comparisons.filter(
                (pl.col("measure") == measure) & (pl.col("a_provider") == first[0]) & (pl.col("a_index") == first[1])
                & pl.col("a_nprobe").eq_missing(first[2]) & (pl.col("b_provider") == second[0])
                & (pl.col("b_index") == second[1]) & pl.col("b_nprobe").eq_missing(second[2]))
            if match.height:
                row = match.row(0, named=True)
                low, high = (row["ci_low"], row["ci_high"]) if sign > 0 else (-row["ci_high"], -row["ci_low"])
                return Comparison(sign * row["diff"], low, high, row["p_value"], row["n"])
    if per_query is None:
        per_query = read_table(output_dir, "per_query")
    if per_query is None:
        return None
    rows = per_query.filter(pl.col("measure") == measure)
    row = paired_comparison(rows, a, b, resamples=1000, permutations=10000, seed=0).row(0, named=True)
    return Comparison(row["diff"], row["ci_low"], row["ci_high"], row["p_value"], row["n"])


@dataclass(frozen=True)
class Verdict:
    measure: str
    settings: pl.DataFrame  # settings_table, best first
    best: dict
    runner_up: dict | None
    versus_runner_up: Comparison | None
    cheapest: dict  # within the best's interval (may be the best itself)
    cheapest_by: str  # what "cheapest" was decided on

    def rows(self) -> pl.DataFrame:
        """The small verdict table: best, runner-up, cheapest within the interval (each once)."""
        roles: dict[str, list[str]] = {}
        for role, row in (("best", self.best), ("runner-up", self.runner_up), ("cheapest within interval", self.cheapest)):
            if row is not None:
                roles.setdefault(row["label"], []).append(role)
        return (self.settings.filter(pl.col("label").is_in(list(roles)))
                .with_columns(role=pl.col("label").replace_strict({k: ", ".join(v) for k, v in roles.items()})))


_CHEAPEST_KEYS = (("usd_per_1k_queries", "cost per 1,000 queries"), ("query_p95_ms", "p95 query latency"),
                  ("embed_p95_ms", "p95 embedding latency"), ("index_bytes", "index size"))


def decide(output_dir: str | Path, measure: str = "ndcg@10") -> Verdict:
    """Rank settings by `measure`; the cheapest candidate is a setting whose mean lies inside
    the best's 95% interval, ordered by the first of cost, p95 query latency, p95 embedding
    latency and index size that is known for every candidate (then by quality)."""
    output_dir = Path(output_dir)
    table = settings_table(output_dir, measure)
    best = table.row(0, named=True)
    runner = table.row(1, named=True) if table.height > 1 else None
    versus = None
    if runner is not None:
        versus = paired(output_dir, tuple(best[c] for c in SETTING), tuple(runner[c] for c in SETTING), measure)
    floor = best["ci_low"] if best["ci_low"] is not None else best["mean"]
    candidates = table.filter(pl.col("mean") >= floor - 1e-12)
    cheapest_by = "quality (no cost, latency or size was measured for every candidate)"
    order = ["mean"]
    for column, words in _CHEAPEST_KEYS:
        if candidates[column].null_count() == 0:
            cheapest_by, order = words, [column, "mean"]
            break
    descending = [False, True] if len(order) == 2 else [True]
    cheapest = candidates.sort(order, descending=descending).row(0, named=True)
    return Verdict(measure, table, best, runner, versus, cheapest, cheapest_by)


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
    return "n/a" if value is None else (f"{value:.2f} ms" if value < 10 else f"{value:.0f} ms")


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


def verdict_sentences(verdict: Verdict) -> list[str]:
    """The verdict paragraph as plain sentences (escape them for HTML or Markdown)."""
    best, runner, versus, cheap = verdict.best, verdict.runner_up, verdict.versus_runner_up, verdict.cheapest
    m = verdict.measure
    out = [f"Best setting by {m}: {best['label']}, {_interval(best)} over {best['n']} queries."]
    if runner is None:
        out.append("It is the only setting, so there is nothing to compare it with.")
    elif versus is None:
        out.append(f"Runner-up: {runner['label']} ({runner['mean']:.3f}); no per-query values to test the difference.")
    else:
        verdict_word = "significantly better than" if versus.significant else "not significantly different from"
        out.append(f"It is {verdict_word} the runner-up, {runner['label']} ({runner['mean']:.3f}): difference "
                   f"{versus.diff:+.3f}, 95% CI {versus.ci_low:+.3f} to {versus.ci_high:+.3f}, p = {versus.p_value:.3g} "
                   f"(paired randomisation test, {versus.n} queries).")
    where = "the best itself" if cheap["label"] == best["label"] else cheap["label"]
    lead = ("What it costs: " if runner is None else
            f"Cheapest setting within the best's interval (by {verdict.cheapest_by}): {where}, {m} {cheap['mean']:.3f}; ")
    out.append(lead + f"{_cost(cheap)}; {_latency(cheap)}; "
               + ("index size not measured." if cheap["index_bytes"] is None else f"index {fmt_bytes(cheap['index_bytes'])}."))
    return out


def _cost(row: dict) -> str:
    if row["usd_per_1k_queries"] is None:
        return "no price set, so cost per 1,000 queries unknown"
    return f"{fmt_usd(row['usd_per_1k_queries'])} per 1,000 queries"


def verdict_frame(verdict: Verdict) -> pl.DataFrame:
    """The verdict table with formatted cells (role, setting, measure, cost, latency, index)."""
    rows = []
    for row in verdict.rows().iter_rows(named=True):
        rows.append({
            "role": row["role"], "setting": row["label"], verdict.measure: _interval(row).replace(" (95% CI ", " [").replace(")", "]"),
            "$ / 1k queries": fmt_usd(row["usd_per_1k_queries"]),
            "p50 query": _query_ms(row, "p50"),
            "p95 query": _query_ms(row, "p95"),
            "index": fmt_bytes(row["index_bytes"]),
        })
    return pl.DataFrame(rows)


def _query_ms(row: dict, which: str) -> str:
    if row[f"query_{which}_ms"] is not None:
        return fmt_ms(row[f"query_{which}_ms"])
    if row[f"embed_{which}_ms"] is not None:
        return fmt_ms(row[f"embed_{which}_ms"]) + " (embed only)"
    return "n/a"
