"""Latency and cost of retrieval systems (BM25, hybrids, reranked stages) per query: the table
`systems`, and the rerank cost ledger `rerank_cost`.

A system's added latency per query is what its own step adds (the rerank calls of that query,
the BM25 search); the first stage's query-embedding latency comes from the latency profile at
batch size 1 when one was measured. Percentiles of parts do not add up exactly, so the total is
labelled an upper bound (p95 of a sum <= sum of p95s)."""
from __future__ import annotations

from types import SimpleNamespace

import polars as pl

from retbench.tasks.analysis.cost import single_call_latency
from retbench.tasks.analysis.rerank_cost import rerank_cost_row, rerank_cost_table

SYSTEMS_SCHEMA = {
    "setting": pl.String, "params": pl.String,  # the system's label and query parameters (tasks/config/setting.py)
    "system": pl.String, "kind": pl.String, "index": pl.String, "first": pl.String, "second": pl.String,
    "reranker": pl.String, "top_n": pl.Int64, "alpha": pl.Float64,
    # A score fusion's weight: where it was chosen ("dev", or "spec" when given), and the fusion's
    # measure at that weight on the dev queries it was chosen on and on the held-out test queries.
    "alpha_chosen_on": pl.String, "alpha_measure": pl.String, "alpha_dev_queries": pl.Int64,
    "alpha_dev_score": pl.Float64, "alpha_test_queries": pl.Int64, "alpha_test_score": pl.Float64,
    "first_stage_p50_ms": pl.Float64, "first_stage_p95_ms": pl.Float64,
    "added_p50_ms": pl.Float64, "added_p95_ms": pl.Float64, "total_p95_ms_upper_bound": pl.Float64,
    "usd_per_1000_queries": pl.Float64,
    # The added p95's noise band (order statistics of the per-query times; null where unmeasured).
    "added_p95_ms_low": pl.Float64, "added_p95_ms_high": pl.Float64,
    # BM25's index folder in bytes (counted at the stage); null for fused and reranked systems,
    # whose index is their stages' (settings_table adds those up).
    "index_bytes": pl.Int64,
}


def _name(setting) -> str | None:
    if not setting:
        return None
    provider, index, nprobe = setting
    return f"{provider}/{index}" + ("" if nprobe is None else f"@{nprobe}")


def _alpha_choice(facts: dict) -> dict:
    """The alpha columns from a hybrid run's facts (tasks/analysis/fusion.AlphaChoice.manifest)."""
    alpha = facts.get("alpha")
    if alpha is None:
        return {}
    dev_scores = facts.get("dev_scores") or {}
    return {"alpha_chosen_on": facts.get("chosen_on"), "alpha_measure": facts.get("measure"),
            "alpha_dev_queries": facts.get("dev_queries"), "alpha_dev_score": dev_scores.get(f"{alpha:g}"),
            "alpha_test_queries": facts.get("test_queries"), "alpha_test_score": facts.get("test_score")}


def systems_tables(system_runs: list, rerankers: dict, latency: pl.DataFrame | None,
                   cost: pl.DataFrame | None) -> dict[str, pl.DataFrame]:
    """`systems` (one row per system) and, when a reranker ran, `rerank_cost`."""
    embed_ms = {}
    if latency is not None and latency.height:
        single = single_call_latency(latency)
        embed_ms = {row["provider"]: (row["p50_ms"], row["p95_ms"]) for row in single.iter_rows(named=True)}
    query_usd = {}
    if cost is not None and cost.height and "usd_per_1000_queries" in cost.columns:
        query_usd = dict(cost.select("provider", "usd_per_1000_queries").iter_rows())
    rows, rerank_rows = [], []
    for s in system_runs:
        facts = s.facts or {}
        first_provider = s.first[0] if s.first else None
        p50, p95 = embed_ms.get(first_provider, (None, None))
        added50 = added95 = added95_low = added95_high = None
        usd = query_usd.get(first_provider)
        if s.kind == "rerank":
            added50, added95 = facts["latency"]["p50"] * 1000, facts["latency"]["p95"] * 1000
            if "p95_low" in facts["latency"]:  # absent from facts cached before the band was kept
                added95_low, added95_high = facts["latency"]["p95_low"] * 1000, facts["latency"]["p95_high"] * 1000
            spec = rerankers[facts["reranker"]]
            row = rerank_cost_row(SimpleNamespace(system=s.system, queries=facts["latency"]["queries"], **{
                k: facts[k] for k in ("reranker", "pairs", "search_units", "tokens", "token_source", "scored", "from_cache")}),
                facts["kind"], spec.pricing)
            rerank_rows.append(row)
            if row["usd_per_1000_queries"] is not None:
                usd = (usd or 0.0) + row["usd_per_1000_queries"]
        elif s.kind == "bm25" and facts.get("search_seconds"):
            queries = max(1, facts.get("queries", 0) or 1)
            added50 = added95 = facts["search_seconds"] / queries * 1000  # a mean: the search is batched
            usd = 0.0
        total = None if p95 is None and added95 is None else (p95 or 0.0) + (added95 or 0.0)
        rows.append({"setting": s.setting.label if s.setting else s.system,
                     "params": s.setting.params_json if s.setting else "{}", "system": s.system, "kind": s.kind, "index": s.index, "first": _name(s.first),
                     "second": _name(s.second), "reranker": facts.get("reranker"), "top_n": facts.get("top_n"),
                     "alpha": facts.get("alpha"), **_alpha_choice(facts), "first_stage_p50_ms": p50, "first_stage_p95_ms": p95,
                     "added_p50_ms": added50, "added_p95_ms": added95, "total_p95_ms_upper_bound": total,
                     "usd_per_1000_queries": usd, "added_p95_ms_low": added95_low, "added_p95_ms_high": added95_high,
                     "index_bytes": facts.get("index_bytes") if s.kind == "bm25" else None})
    tables = {"systems": pl.DataFrame(rows, schema=SYSTEMS_SCHEMA)}
    if rerank_rows:
        tables["rerank_cost"] = rerank_cost_table(rerank_rows)
    return tables
