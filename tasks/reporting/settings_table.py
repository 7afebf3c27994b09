"""One row per setting, as the verdict weighs it: quality on the chosen queries with its interval,
and what a query costs ($, latency with its noise band, index bytes, the corpus's embedding $)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl

from retbench.tasks.analysis.cost import single_call_latency

SETTING = ["provider", "index", "nprobe"]
_NLIST = re.compile(r"nlist-(\d+)")
# A latency whose noise was not measured (BM25's batched mean, tables written before the bands
# were kept) gets this factor either side as its band: only a saving beyond 2x can then count.
UNMEASURED_NOISE_FACTOR = 2.0


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
    """provider, index, nprobe, mean, ci_low, ci_high, n for `measure` over every query (interval from the breakdown)."""
    rows = summary.filter(pl.col("measure") == measure)
    if rows.is_empty():
        raise ValueError(f"summary has no measure {measure!r} (found {sorted(set(summary['measure']))})")
    quality = rows.select(*SETTING, mean="value", n=pl.col("queries").cast(pl.Int64))
    if breakdown is not None:
        ci = breakdown.filter((pl.col("slice_kind") == "all") & (pl.col("measure") == measure)).select(*SETTING, "ci_low", "ci_high")
        return quality.join(ci, on=SETTING, how="left", nulls_equal=True)
    return quality.with_columns(ci_low=pl.lit(None, pl.Float64), ci_high=pl.lit(None, pl.Float64))


def split_quality(per_query: pl.DataFrame, breakdown: pl.DataFrame | None, measure: str, split: str) -> pl.DataFrame:
    """The same columns over the queries of one split: the mean of their per-query values (what
    trec_eval's mean over those queries is) and the breakdown's interval for that split. Quality
    alone: the tuning evidence shows it for the non-test split, with no cost columns."""
    rows = per_query.filter((pl.col("measure") == measure) & (pl.col("split") == split))
    if rows.is_empty():
        raise ValueError(f"per_query has no {measure!r} values on split {split!r}")
    quality = rows.group_by(SETTING).agg(mean=pl.col("value").mean(), n=pl.len().cast(pl.Int64))
    if breakdown is not None:
        ci = breakdown.filter((pl.col("slice_kind") == "split") & (pl.col("slice") == split)
                              & (pl.col("measure") == measure)).select(*SETTING, "ci_low", "ci_high")
        return quality.join(ci, on=SETTING, how="left", nulls_equal=True)
    return quality.with_columns(ci_low=pl.lit(None, pl.Float64), ci_high=pl.lit(None, pl.Float64))


def _band(value, low, high) -> tuple:
    """(low, high) of a p95: the measured band, or the unmeasured-noise band around the value."""
    if value is None:
        return None, None
    if low is not None and high is not None:
        return low, high
    return value / UNMEASURED_NOISE_FACTOR, value * UNMEASURED_NOISE_FACTOR


def _timed(measured: pl.DataFrame | None, kind: str) -> dict:
    """(provider, index, nprobe) -> (p50, p95, p95 low, p95 high) of search_latency.parquet's rows
    of `kind` (dense, bm25, fusion) that were timed."""
    if measured is None or measured.is_empty():
        return {}
    rows = measured.filter((pl.col("kind") == kind) & pl.col("search_p50_ms").is_not_null())
    return {(p, i, n): tuple(t) for p, i, n, *t in rows.select(
        *SETTING, "search_p50_ms", "search_p95_ms", "search_p95_low", "search_p95_high").rows()}


def _search_latency(settings: pl.DataFrame, sweep: pl.DataFrame | None, storage: pl.DataFrame | None,
                    measured: pl.DataFrame | None = None) -> pl.DataFrame:
    """One-query search time (single thread) from the ANN sweep, for the settings it measured:
    flat, and IVF at the same nlist (read from the index file name) and nprobe; with the p95's
    noise band when the sweep kept one. Every other setting takes the search latency stage's
    figure (`measured`: search_latency.parquet, the test queries one at a time), so a run
    without `sweep:` still has one; the sweep's wins where both timed the same setting."""
    nlists = {}
    if storage is not None and storage.height:
        for provider, name in storage.select("provider", "index").rows():
            found = _NLIST.search(name or "")
            if found and name.startswith("ivf"):
                nlists[provider] = int(found.group(1))
    swept = {}
    if sweep is not None and "p50_ms_single_thread" in sweep.columns:
        if "p95_ms_single_thread_low" not in sweep.columns:  # a sweep table written before the band was kept
            sweep = sweep.with_columns(p95_ms_single_thread_low=pl.lit(None, pl.Float64),
                                       p95_ms_single_thread_high=pl.lit(None, pl.Float64))
        for provider, kind, build, query, *timing in sweep.select(
                "provider", "index_kind", "build_params", "query_params", "p50_ms_single_thread",
                "p95_ms_single_thread", "p95_ms_single_thread_low", "p95_ms_single_thread_high").rows():
            build, query = json.loads(build or "{}"), json.loads(query or "{}")
            if kind == "flat":
                swept[(provider, "flat", None)] = tuple(timing)
            elif kind == "ivf" and build.get("nlist") == nlists.get(provider) and "nprobe" in query:
                swept[(provider, "ivf", int(query["nprobe"]))] = tuple(timing)
    timed = _timed(measured, "dense")
    out = []
    for key in settings.select(SETTING).rows():
        p50, p95, low, high = swept.get(key) or timed.get(key) or (None, None, None, None)
        out.append((*key, p50, p95, *_band(p95, low, high), low is not None))
    return pl.DataFrame(out, schema={"provider": pl.String, "index": pl.String, "nprobe": pl.Int64,
                                     "search_p50_ms": pl.Float64, "search_p95_ms": pl.Float64,
                                     "search_p95_low": pl.Float64, "search_p95_high": pl.Float64,
                                     "search_noise_measured": pl.Boolean}, orient="row")


def _embed_latency(table: pl.DataFrame, latency: pl.DataFrame | None) -> pl.DataFrame:
    """One query's embedding time: the latency profile at batch size 1, one call at a time."""
    columns = {"embed_p50_ms": pl.Float64, "embed_p95_ms": pl.Float64, "embed_p95_low": pl.Float64,
               "embed_p95_high": pl.Float64, "embed_noise_measured": pl.Boolean}
    if latency is None or latency.is_empty():
        return table.with_columns(pl.lit(None, t).alias(c) for c, t in columns.items())
    one = single_call_latency(latency)
    rows = []
    for row in one.unique("provider", keep="first", maintain_order=True).iter_rows(named=True):
        low, high = row.get("p95_ms_low"), row.get("p95_ms_high")
        rows.append((row["provider"], row["p50_ms"], row["p95_ms"], *_band(row["p95_ms"], low, high), low is not None))
    frame = pl.DataFrame(rows, schema={"provider": pl.String, **columns}, orient="row")
    return table.join(frame, on="provider", how="left")


def _with_system_costs(table: pl.DataFrame, systems: pl.DataFrame | None,
                       measured: pl.DataFrame | None = None) -> pl.DataFrame:
    """Latency and cost of the BM25, hybrid and reranked settings (systems.parquet), made of their
    stages': a system embeds what its dense stages embed, and searches what its stages search
    plus its own added step (the BM25 search, the rerank calls). Unmeasured parts stay null; the
    noise bands add up the same way (a band of a sum is at most the sum of the bands)."""
    if systems is None or systems.is_empty():
        return table
    rows = {(r["provider"], r["index"], r["nprobe"]): r for r in table.iter_rows(named=True)}
    by_name = {f"{p}/{i}" + ("" if n is None else f"@{n}"): r for (p, i, n), r in rows.items()}
    systems_by_name = {s["system"]: s for s in systems.iter_rows(named=True)}
    parts_of = ("embed_p50_ms", "embed_p95_ms", "embed_p95_low", "embed_p95_high",
                "search_p50_ms", "search_p95_ms", "search_p95_low", "search_p95_high")
    nothing = dict.fromkeys(parts_of, 0.0) | {"noise_measured": True, "corpus_usd": 0.0, "index_bytes": 0}

    bm25_timed, fusion_timed = _timed(measured, "bm25"), _timed(measured, "fusion")

    def added_step(system: dict) -> dict:
        """The step a system adds on top of its stages: BM25's search and a hybrid's fusion, timed
        one test query at a time by the search latency stage (BM25 otherwise: its batched mean;
        a hybrid's fusion otherwise: none), the rerank calls. Only BM25 adds an index (its
        folder, counted at the stage; null in tables from before)."""
        timed = (bm25_timed.get((system["system"], "bm25", None)) if system["kind"] == "bm25"
                 else fusion_timed.get((system["system"], system["index"], None)) if system["kind"] == "hybrid" else None)
        if system["kind"] == "hybrid" and timed is None:
            return nothing
        if timed is not None:
            p50, p95, low, high = timed
            return nothing | {"search_p50_ms": p50, "search_p95_ms": p95, "search_p95_low": low, "search_p95_high": high,
                              "index_bytes": system.get("index_bytes") if system["kind"] == "bm25" else 0}
        p50, p95 = system["added_p50_ms"], system["added_p95_ms"]
        low, high = _band(p95, system.get("added_p95_ms_low"), system.get("added_p95_ms_high"))
        return nothing | {"search_p50_ms": p50, "search_p95_ms": p95, "search_p95_low": low, "search_p95_high": high,
                          "noise_measured": system.get("added_p95_ms_low") is not None,
                          "index_bytes": system.get("index_bytes") if system["kind"] == "bm25" else 0}

    def stage(name: str | None) -> dict:
        """Latency parts of one stage by its setting name (a BM25 stage is a system of its own)."""
        if name is None:
            return nothing
        if name.startswith("bm25/"):
            bm25 = systems_by_name.get(name.split("/", 1)[0])
            return added_step(bm25) if bm25 is not None else dict.fromkeys(nothing)
        row = by_name.get(name)
        if row is None:
            return dict.fromkeys(nothing)
        return {k: row.get(k) for k in parts_of} | {
            "noise_measured": bool(row.get("embed_noise_measured")) and bool(row.get("search_noise_measured")),
            "corpus_usd": row.get("corpus_usd"), "index_bytes": row.get("index_bytes")}

    def total(*values):
        return None if any(v is None for v in values) else float(sum(values))

    updated = []
    for row in table.iter_rows(named=True):
        system = systems_by_name.get(row["provider"])
        if system is not None and system["index"] == row["index"]:
            parts = [nothing] if system["kind"] == "bm25" else [stage(system["first"]), stage(system["second"])]
            parts.append(added_step(system))
            row = {**row, **{k: total(*(p[k] for p in parts)) for k in parts_of},
                   "embed_noise_measured": True,  # folded into the search band's flag below
                   "search_noise_measured": all(p["noise_measured"] for p in parts),
                   "corpus_usd": total(*(p["corpus_usd"] for p in parts)),
                   # A system keeps every index its stages search (a hybrid: both; a reranker: its first stage's).
                   "index_bytes": _int(total(*(p["index_bytes"] for p in parts))),
                   "usd_per_1k_queries": system["usd_per_1000_queries"] if row.get("usd_per_1k_queries") is None
                   else row["usd_per_1k_queries"]}
        updated.append(row)
    return pl.DataFrame(updated, schema=table.schema)


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)


def settings_table(output_dir: Path, measure: str, split: str | None = None) -> pl.DataFrame:
    """One row per setting, best first: label, quality with interval, cost, latency, index bytes.

    Quality is over every query (`split` None, from summary.parquet) or over one split's queries
    (from per_query.parquet). Cost is the provider's query-embedding price per 1,000 queries
    (null when unpriced) and `corpus_usd` the price of embedding the corpus; embed latency is the
    latency profile at batch size 1; search latency comes from the ANN sweep where it timed the
    setting, else from the search latency stage (search_latency.parquet); query latency adds
    the two when both were measured (a sum of percentiles, so a slight overestimate of the
    percentile of the sum), with the p95's noise band (`query_p95_low`/`high`) beside it.
    """
    output_dir = Path(output_dir)
    breakdown = read_table(output_dir, "breakdown")
    if split is None:
        summary = read_table(output_dir, "summary")
        if summary is None:
            raise FileNotFoundError(f"{output_dir / 'summary.parquet'} not found: run the score stage first")
        table = _quality(summary, breakdown, measure)
    else:
        per_query = read_table(output_dir, "per_query")
        if per_query is None:
            raise FileNotFoundError(f"{output_dir / 'per_query.parquet'} not found: run the score stage first")
        table = split_quality(per_query, breakdown, measure, split)
    cost = read_table(output_dir, "cost")
    if cost is not None and cost.height and "usd_per_1000_queries" in cost.columns:
        corpus = pl.col("corpus_usd") if "corpus_usd" in cost.columns else pl.lit(None, pl.Float64)
        table = table.join(cost.select("provider", usd_per_1k_queries="usd_per_1000_queries", corpus_usd=corpus),
                           on="provider", how="left")
    else:
        table = table.with_columns(usd_per_1k_queries=pl.lit(None, pl.Float64), corpus_usd=pl.lit(None, pl.Float64))
    table = _embed_latency(table, read_table(output_dir, "latency"))
    storage = read_table(output_dir, "storage")
    measured = read_table(output_dir, "search_latency")
    table = table.join(_search_latency(table, read_table(output_dir, "ann_sweep"), storage, measured), on=SETTING,
                       how="left", nulls_equal=True)
    if storage is not None and storage.height:
        sizes = storage.filter(pl.col("index").is_not_null()).select(
            "provider", index=pl.col("index").str.extract(r"^([A-Za-z0-9]+)"), index_bytes="index_bytes")
        table = table.join(sizes.unique(["provider", "index"]), on=["provider", "index"], how="left")
    else:
        table = table.with_columns(index_bytes=pl.lit(None, pl.Int64))
    table = _with_system_costs(table, read_table(output_dir, "systems"), measured)
    return best_first(table.with_columns(
        label=label_expr(),
        query_p50_ms=pl.col("embed_p50_ms") + pl.col("search_p50_ms"),
        query_p95_ms=pl.col("embed_p95_ms") + pl.col("search_p95_ms"),
        query_p95_low=pl.col("embed_p95_low") + pl.col("search_p95_low"),
        query_p95_high=pl.col("embed_p95_high") + pl.col("search_p95_high"),
        latency_noise_measured=pl.col("embed_noise_measured").fill_null(False) & pl.col("search_noise_measured").fill_null(False),
    ))


def best_first(table: pl.DataFrame) -> pl.DataFrame:
    return table.sort(["mean", "provider", "index", "nprobe"], descending=[True, False, False, False], nulls_last=True)
