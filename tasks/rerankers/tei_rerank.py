"""Hugging Face text-embeddings-inference serving a reranker (`POST /rerank`): a self-hosted
server, so no key by default and no usage in the answer (tokens are estimated)."""
from __future__ import annotations

from typing import Any

from retbench.tasks.rerankers.http_rerank import HttpReranker, RerankHttpOptions


class TeiRerankOptions(RerankHttpOptions):
    truncate: bool = True
    raw_scores: bool = False


class TeiReranker(HttpReranker):
    kind = "tei-rerank"
    Options = TeiRerankOptions
    endpoint = "/rerank"

    def rerank_body(self, query: str, documents: list[str]) -> dict:
        return {"query": query, "texts": documents, "truncate": self.options.truncate,
                "raw_scores": self.options.raw_scores, "return_text": False}

    def results(self, payload: Any) -> list:
        if not isinstance(payload, list):
            raise TypeError(f"expected a list of {{index, score}}, found {type(payload).__name__}")
        return payload

    def score_of(self, item: dict) -> Any:
        return item["score"]

    def model_fingerprint(self) -> dict:
        return {"truncate": self.options.truncate, "raw_scores": self.options.raw_scores}
