"""Ollama's native `POST /api/embed` (batched input, `prompt_eval_count` as usage)."""
from __future__ import annotations

from typing import Any

from pydantic import Field

from retbench.tasks.providers.http_base import HttpOptions, HttpProvider


class OllamaOptions(HttpOptions):
    base_url: str = "http://localhost:11434"
    model: str
    dimensions: int | None = Field(None, ge=1)
    truncate: bool = True
    keep_alive: str | None = None


class OllamaProvider(HttpProvider):
    kind = "ollama"
    Options = OllamaOptions
    endpoint = "/api/embed"

    def request_body(self, texts: list[str], role) -> dict:
        o = self.options
        body: dict[str, Any] = {"model": o.model, "input": texts, "truncate": o.truncate}
        if o.dimensions is not None:
            body["dimensions"] = o.dimensions
        if o.keep_alive is not None:
            body["keep_alive"] = o.keep_alive
        return body

    def parse(self, payload: Any, expected: int) -> tuple[list, int | None]:
        tokens = payload.get("prompt_eval_count")
        return list(payload["embeddings"]), tokens if isinstance(tokens, int) else None

    def model_fingerprint(self) -> dict:
        return {"dimensions": self.options.dimensions, "truncate": self.options.truncate}

    def expected_dim(self) -> int | None:
        return self.options.dimensions

    def reported_version(self, client) -> Any:
        # The digest of the pulled model: a re-pull of the same tag changes it.
        response = client.get("/api/tags")
        response.raise_for_status()
        for model in response.json().get("models", []):
            if model.get("name") in (self.options.model, f"{self.options.model}:latest"):
                return model.get("digest")
        return None
