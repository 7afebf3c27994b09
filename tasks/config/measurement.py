"""Spec sections for what a run measures besides quality: latency profile and prices (of providers and rerankers)."""
from __future__ import annotations

from datetime import date
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class LatencySpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    batch_sizes: list[int] = Field(default_factory=lambda: [1, 10, 50, 100])
    iterations: int = Field(3, ge=1, description="timed rounds per setting (each round: `concurrency` calls)")
    warmup: int = Field(1, ge=0, description="untimed calls first (model load, connection set-up)")
    concurrency: list[int] = Field(default_factory=lambda: [1, 2, 4], description="HTTP providers only; local ones run 1")
    sweep_batch_sizes: list[int] | None = Field(
        None, description="batch sizes swept over `concurrency` (others run at 1); default: all of batch_sizes")
    role: Literal["query", "document"] = "document"
    texts: int = Field(200, ge=1, description="distinct texts drawn from the corpus; calls cycle through them")

    @field_validator("batch_sizes", "concurrency")
    @classmethod
    def _positive(cls, values: list[int]) -> list[int]:
        if not values or any(v < 1 for v in values):
            raise ValueError("must be a non-empty list of positive integers")
        return sorted(set(values))



class PricingSpec(BaseModel):
    """A provider's price, with the day it was read (prices change; the table says which one it used)."""

    model_config = ConfigDict(extra="forbid")
    usd_per_million_tokens: float = Field(ge=0)
    price_date: date
    projected_documents: int = Field(1_000_000, ge=1, description="corpus size for the projected cost")
    source: str | None = Field(None, description="where the price was read, e.g. the pricing page URL")


class RerankPricing(BaseModel):
    """A reranker's price: per 1,000 search units or per 1M tokens (one of them), and its date."""

    model_config = ConfigDict(extra="forbid")
    usd_per_1000_search_units: float | None = Field(None, ge=0)
    usd_per_million_tokens: float | None = Field(None, ge=0)
    price_date: date
    source: str | None = Field(None, description="where the price was read, e.g. the pricing page URL")

    @model_validator(mode="after")
    def _one_unit(self):
        if (self.usd_per_1000_search_units is None) == (self.usd_per_million_tokens is None):
            raise ValueError("give exactly one of usd_per_1000_search_units and usd_per_million_tokens")
        return self
