"""Hugging Face text-embeddings-inference, native route `POST /embed`
(a bare list of vectors back, no usage: tokens come from a tokenizer or an estimate)."""
from __future__ import annotations

from typing import Any

from retbench.tasks.providers.http_base import HttpOptions, HttpProvider


class TEIOptions(HttpOptions):
    base_url: str = "http://localhost:8080"
    truncate: bool = True
    # TEI's own prompt templates (e.g. "query"), an alternative to query_prefix.
    query_prompt_name: str | None = None
    document_prompt_name: str | None = None


class TEIProvider(HttpProvider):
    kind = "tei"
    Options = TEIOptions
    endpoint = "/embed"

    def request_body(self, texts: list[str], role) -> dict:
        o = self.options
        body: dict[str, Any] = {"inputs": texts, "truncate": o.truncate}
        prompt = o.query_prompt_name if role == "query" else o.document_prompt_name
        if prompt:
            body["prompt_name"] = prompt
        return body

    def parse(self, payload: Any, expected: int) -> tuple[list, int | None]:
        if not isinstance(payload, list):
            raise TypeError(f"expected a JSON list of embeddings, found {type(payload).__name__}")
        return payload, None

    def model_fingerprint(self) -> dict:
        o = self.options
        return {"truncate": o.truncate, "query_prompt_name": o.query_prompt_name,
                "document_prompt_name": o.document_prompt_name}

    def reported_version(self, client) -> Any:
        response = client.get("/info")
        response.raise_for_status()
        info = response.json()
        return {"model_id": info.get("model_id"), "model_sha": info.get("model_sha"), "version": info.get("version")}
