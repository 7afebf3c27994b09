"""Voyage AI rerank (`POST /v1/rerank`), billed per token."""
from __future__ import annotations

from typing import Any

from retbench.tasks.rerankers.http_rerank import HttpReranker, RerankHttpOptions


class VoyageRerankOptions(RerankHttpOptions):
    base_url: str = "https://api.voyageai.com/v1"
    model: str = "rerank-2.5"
    api_key_env: str | None = "VOYAGE_API_KEY"
    truncation: bool = True


class VoyageReranker(HttpReranker):
    kind = "voyage-rerank"
    Options = VoyageRerankOptions
    endpoint = "/rerank"
    key_required = True

    def rerank_body(self, query: str, documents: list[str]) -> dict:
        return {"model": self.options.model, "query": query, "documents": documents, "top_k": len(documents),
                "truncation": self.options.truncation}

    def results(self, payload: Any) -> list:
        return payload["data"]

    def usage(self, payload: Any):
        tokens = (payload.get("usage") or {}).get("total_tokens")
        return (int(tokens) if isinstance(tokens, (int, float)) else None), None

    def model_fingerprint(self) -> dict:
        return {"truncation": self.options.truncation}
