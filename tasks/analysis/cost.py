"""The cost ledger (tokens x price per provider) and the storage footprint
(raw vector bytes, index bytes on disk). Plain functions returning polars tables."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import polars as pl

from retbench.tasks.config.measurement import PricingSpec  # noqa: F401  (re-exported)

TOKEN_SOURCES = ("usage", "tokenizer", "estimate")  # most reliable first
FLOAT32_BYTES = 4


COST_SCHEMA = {
    "provider": pl.String, "kind": pl.String, "usd_per_million_tokens": pl.Float64, "price_date": pl.Date,
    "token_source": pl.String,
    "corpus_documents": pl.Int64, "corpus_texts": pl.Int64, "corpus_tokens": pl.Int64, "corpus_usd": pl.Float64,
    "queries": pl.Int64, "query_tokens": pl.Int64, "usd_per_1000_queries": pl.Float64,
    "tokens_embedded_this_run": pl.Int64, "usd_this_run": pl.Float64,
    "tokens_from_cache": pl.Int64, "usd_saved_by_cache": pl.Float64,
    "projected_documents": pl.Int64, "projected_usd": pl.Float64,
}


def weakest_source(*sources: str) -> str:
    """A total is only as reliable as its least reliable part ('none' parts carry no tokens)."""
    present = {s for s in sources if s and s != "none"}
    for source in reversed(TOKEN_SOURCES):
        if source in present:
            return source
    return "none"


def cost_row(provider: str, kind: str, pricing: PricingSpec | None, documents, queries,
             corpus_documents: int | None = None) -> dict:
    """One `cost` row from the provider's document and query EmbeddingSets of this run.

    `corpus_documents` is the number of source documents (chunks are what is embedded);
    the projection scales tokens per document to `pricing.projected_documents`.
    """
    price = pricing.usd_per_million_tokens if pricing else None

    def usd(tokens: float) -> float | None:
        return None if price is None else tokens * price / 1e6

    doc_tokens = documents.tokens + documents.cached_tokens
    query_tokens = queries.tokens + queries.cached_tokens
    n_docs = corpus_documents or documents.count
    projected = pricing.projected_documents if pricing else None
    per_query = query_tokens / queries.count if queries.count else 0.0
    return {
        "provider": provider, "kind": kind, "usd_per_million_tokens": price,
        "price_date": pricing.price_date if pricing else None,
        "token_source": weakest_source(documents.token_source, documents.cached_token_source,
                                       queries.token_source, queries.cached_token_source),
        "corpus_documents": n_docs, "corpus_texts": documents.count, "corpus_tokens": doc_tokens,
        "corpus_usd": usd(doc_tokens),
        "queries": queries.count, "query_tokens": query_tokens, "usd_per_1000_queries": usd(per_query * 1000),
        "tokens_embedded_this_run": documents.tokens + queries.tokens,
        "usd_this_run": usd(documents.tokens + queries.tokens),
        "tokens_from_cache": documents.cached_tokens + queries.cached_tokens,
        "usd_saved_by_cache": usd(documents.cached_tokens + queries.cached_tokens),
        "projected_documents": projected,
        "projected_usd": None if projected is None or not n_docs else usd(doc_tokens / n_docs * projected),
    }


def cost_table(rows: Sequence[dict]) -> pl.DataFrame:
    return pl.DataFrame(list(rows), schema=COST_SCHEMA)


STORAGE_SCHEMA = {
    "provider": pl.String, "vectors": pl.Int64, "dim": pl.Int64, "raw_vector_bytes": pl.Int64,
    "index": pl.String, "index_bytes": pl.Int64, "index_bytes_per_vector": pl.Float64, "shards": pl.Int64,
}


def storage_rows(provider: str, vectors: int, dim: int, index_files: Sequence) -> list[dict]:
    """Raw float32 bytes (vectors x dim x 4) and each index file's size as measured on disk. An
    index searched over shards (`indexes.shards`) has no file of its rows: its entry is a tuple
    (name, bytes the shards hold, shards), named as its one file would be."""
    raw = vectors * dim * FLOAT32_BYTES
    rows = []
    for entry in index_files:
        if isinstance(entry, tuple):
            name, size, shards = entry
        else:
            path, shards = Path(entry), None
            name, size = path.stem, path.stat().st_size  # a missing file is an error: measured, not guessed
        rows.append({
            "provider": provider, "vectors": vectors, "dim": dim, "raw_vector_bytes": raw,
            "index": name, "index_bytes": size,
            "index_bytes_per_vector": size / vectors if vectors else None, "shards": shards,
        })
    if not rows:
        rows.append({"provider": provider, "vectors": vectors, "dim": dim, "raw_vector_bytes": raw,
                     "index": None, "index_bytes": None, "index_bytes_per_vector": None, "shards": None})
    return rows


def storage_table(entries: Sequence[tuple[str, int, int, Sequence]]) -> pl.DataFrame:
    """`storage` table from (provider, vectors, dim, index files or sharded entries) per provider."""
    rows = [row for entry in entries for row in storage_rows(*entry)]
    return pl.DataFrame(rows, schema=STORAGE_SCHEMA)


def single_call_latency(latency: pl.DataFrame) -> pl.DataFrame:
    """Each provider's batch-size-1 latency row: the queries' one (role "query") when measured,
    else the document profile's (tables written before queries were timed)."""
    one = latency.filter((pl.col("batch_size") == 1) & (pl.col("concurrency") == 1) if "concurrency" in latency.columns
                         else pl.col("batch_size") == 1)
    if "role" not in one.columns:
        return one
    return one.sort(pl.col("role") != "query", maintain_order=True).unique("provider", keep="first", maintain_order=True)
