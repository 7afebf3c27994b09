"""Voyage AI (`POST /v1/embeddings`, OpenAI-shaped) with `input_type` query / document."""
from __future__ import annotations

from typing import Any

from pydantic import Field

from retbench.tasks.providers.http_base import HttpOptions, HttpProvider, ordered_by_index


class VoyageOptions(HttpOptions):
    base_url: str = "https://api.voyageai.com/v1"
    model: str = "voyage-3.5"
    api_key_env: str | None = "VOYAGE_API_KEY"
    output_dimension: int | None = Field(None, ge=1)
    truncation: bool = True


class VoyageProvider(HttpProvider):
    kind = "voyage"
    Options = VoyageOptions
    endpoint = "/embeddings"
    key_required = True

    def request_body(self, texts: list[str], role) -> dict:
        o = self.options
        body: dict[str, Any] = {
            "model": o.model,
            "input": texts,
            "input_type": "query" if role == "query" else "document",
            "truncation": o.truncation,
        }
        if o.output_dimension is not None:
            body["output_dimension"] = o.output_dimension
        return body

    def parse(self, payload: Any, expected: int) -> tuple[list, int | None]:
        embeddings = ordered_by_index(payload["data"], expected, f"{self.host}{self.endpoint}")
        tokens = (payload.get("usage") or {}).get("total_tokens")
        return embeddings, tokens if isinstance(tokens, int) else None

    def model_fingerprint(self) -> dict:
        return {"input_type": "query/document", "output_dimension": self.options.output_dimension,
                "truncation": self.options.truncation}

    def expected_dim(self) -> int | None:
        return self.options.output_dimension
