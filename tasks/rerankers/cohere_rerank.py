"""Cohere's v2 rerank (`POST /v2/rerank`), billed per search unit (a query with up to 100 documents)."""
from __future__ import annotations

from typing import Any

from pydantic import Field

from retbench.tasks.rerankers.http_rerank import HttpReranker, RerankHttpOptions


class CohereRerankOptions(RerankHttpOptions):
    base_url: str = "https://api.cohere.com"
    model: str = "rerank-v3.5"
    api_key_env: str | None = "CO_API_KEY"
    max_tokens_per_doc: int | None = Field(None, ge=1)


class CohereReranker(HttpReranker):
    kind = "cohere-rerank"
    Options = CohereRerankOptions
    endpoint = "/v2/rerank"
    key_required = True
    documents_per_search_unit = 100

    def rerank_body(self, query: str, documents: list[str]) -> dict:
        body: dict[str, Any] = {"model": self.options.model, "query": query, "documents": documents, "top_n": len(documents)}
        if self.options.max_tokens_per_doc is not None:
            body["max_tokens_per_doc"] = self.options.max_tokens_per_doc
        return body

    def results(self, payload: Any) -> list:
        return payload["results"]

    def usage(self, payload: Any):
        billed = (payload.get("meta") or {}).get("billed_units") or {}
        units = billed.get("search_units")
        return None, float(units) if isinstance(units, (int, float)) else None

    def model_fingerprint(self) -> dict:
        return {"api": "v2-rerank", "max_tokens_per_doc": self.options.max_tokens_per_doc}
