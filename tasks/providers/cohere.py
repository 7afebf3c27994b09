"""Cohere's v2 embed (`POST /v2/embed`): the role is `input_type`
(search_query / search_document), not a text prefix."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from retbench.tasks.providers.http_base import HttpOptions, HttpProvider


class CohereOptions(HttpOptions):
    base_url: str = "https://api.cohere.com"
    model: str = "embed-multilingual-v3.0"
    api_key_env: str | None = "CO_API_KEY"
    query_input_type: str = "search_query"
    document_input_type: str = "search_document"
    output_dimension: int | None = Field(None, ge=1)
    truncate: Literal["NONE", "START", "END"] = "END"


class CohereProvider(HttpProvider):
    kind = "cohere"
    Options = CohereOptions
    endpoint = "/v2/embed"
    key_required = True

    def request_body(self, texts: list[str], role) -> dict:
        o = self.options
        body: dict[str, Any] = {
            "model": o.model,
            "texts": texts,
            "input_type": o.query_input_type if role == "query" else o.document_input_type,
            "embedding_types": ["float"],
            "truncate": o.truncate,
        }
        if o.output_dimension is not None:
            body["output_dimension"] = o.output_dimension
        return body

    def parse(self, payload: Any, expected: int) -> tuple[list, int | None]:
        embeddings = payload["embeddings"]
        if isinstance(embeddings, dict):  # v2: one list per requested type
            embeddings = embeddings["float"]
        billed = (payload.get("meta") or {}).get("billed_units") or {}
        tokens = billed.get("input_tokens")
        return list(embeddings), int(tokens) if isinstance(tokens, (int, float)) else None

    def model_fingerprint(self) -> dict:
        o = self.options
        return {
            "api": "v2",
            "query_input_type": o.query_input_type,
            "document_input_type": o.document_input_type,
            "output_dimension": o.output_dimension,
            "truncate": o.truncate,
        }

    def expected_dim(self) -> int | None:
        return self.options.output_dimension
