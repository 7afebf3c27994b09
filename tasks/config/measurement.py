"""Spec sections for what a run measures besides quality: latency profile and prices."""
from __future__ import annotations

from datetime import date
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


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
