"""Jina AI rerank (`POST /v1/rerank`), billed per token."""
from __future__ import annotations

from typing import Any

from retbench.tasks.rerankers.http_rerank import HttpReranker, RerankHttpOptions


class JinaRerankOptions(RerankHttpOptions):
    base_url: str = "https://api.jina.ai/v1"
    model: str = "jina-reranker-v2-base-multilingual"
    api_key_env: str | None = "JINA_API_KEY"


class JinaReranker(HttpReranker):
    kind = "jina-rerank"
    Options = JinaRerankOptions
    endpoint = "/rerank"
    key_required = True

    def rerank_body(self, query: str, documents: list[str]) -> dict:
        return {"model": self.options.model, "query": query, "documents": documents, "top_n": len(documents),
                "return_documents": False}

    def results(self, payload: Any) -> list:
        return payload["results"]

    def usage(self, payload: Any):
        tokens = (payload.get("usage") or {}).get("total_tokens")
        return (int(tokens) if isinstance(tokens, (int, float)) else None), None
