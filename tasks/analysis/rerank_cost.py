"""The rerank step's cost ledger row: per search unit (Cohere) or per token (Voyage, Jina), with
the date the price was read, and the cost per 1,000 queries of the run that was reranked."""
from __future__ import annotations

import polars as pl

from retbench.tasks.config.measurement import RerankPricing

RERANK_COST_SCHEMA = {
    "system": pl.String, "reranker": pl.String, "kind": pl.String, "unit": pl.String, "price": pl.Float64,
    "price_date": pl.Date, "queries": pl.Int64, "pairs": pl.Int64, "search_units": pl.Float64, "tokens": pl.Int64,
    "token_source": pl.String, "usd_run": pl.Float64, "usd_per_1000_queries": pl.Float64,
    "pairs_scored_this_run": pl.Int64, "pairs_from_cache": pl.Int64,
}


def rerank_cost_row(result, kind: str, pricing: RerankPricing | None) -> dict:
    """One row from a RerankResult: what reranking this run's queries costs (scored now or cached:
    the price of the system, not of this invocation), scaled to 1,000 queries."""
    usd = unit = price = None
    if pricing is not None and pricing.usd_per_1000_search_units is not None:
        unit, price = "search_unit", pricing.usd_per_1000_search_units
        usd = result.search_units * price / 1000
    elif pricing is not None:
        unit, price = "token", pricing.usd_per_million_tokens
        usd = result.tokens * price / 1e6
    return {
        "system": result.system, "reranker": result.reranker, "kind": kind, "unit": unit, "price": price,
        "price_date": pricing.price_date if pricing else None, "queries": result.queries, "pairs": result.pairs,
        "search_units": result.search_units, "tokens": result.tokens, "token_source": result.token_source,
        "usd_run": usd, "usd_per_1000_queries": None if usd is None or not result.queries else usd / result.queries * 1000,
        "pairs_scored_this_run": result.scored, "pairs_from_cache": result.from_cache,
    }


def rerank_cost_table(rows: list[dict]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=RERANK_COST_SCHEMA)
