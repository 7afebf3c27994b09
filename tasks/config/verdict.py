"""`verdict:` how the report decides that a setting is "as good as the best, and cheaper"."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class VerdictSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    margin: float | None = Field(
        None, gt=0, lt=1,
        description="largest loss on the primary measure (absolute) that still counts as 'as good as the best' "
                    "in the paired one-sided test on held-out queries; unset: the sweep's loss_budget times the "
                    "best's mean when `sweep:` is set, else 0.01")
    min_saving: float = Field(
        0.05, ge=0, lt=1,
        description="smallest relative saving on an axis ($ per 1,000 queries, p95 query latency, index bytes, "
                    "corpus embedding $) that counts as cheaper; a latency must also beat the best's beyond both "
                    "measurements' noise bands")
    min_queries: int = Field(
        20, ge=1,
        description="fewest verdict queries (test queries when held out) at which the verdict states its paired test "
                    "without a warning; below it the verdict says how small a p its test can reach at all "
                    "(2 / 2^n for n queries), and that none can be significant when that floor is >= 0.05")
    judged_gap: float = Field(
        0.10, ge=0, le=1,
        description="largest difference in judged@k (the share of the top k that carries a judgment, at the primary "
                    "measure's cutoff) between two compared settings (best and runner-up, the cheaper pick and the best, "
                    "a ladder step and its baseline) that the verdict and the ladder pass over in silence; beyond it they "
                    "say which retrieves more unjudged documents and whether the order holds on condensed nDCG'")
    judged_fall: float = Field(
        0.20, ge=0, le=1,
        description="largest fall of a setting's judged@k (at the primary measure's cutoff, on the verdict's queries) "
                    "since the spec's previous recorded run, as a share of its value then, that the verdict passes over "
                    "in silence; beyond it the verdict names the settings whose top k now holds fewer judged documents "
                    "(the data or the judgments changed, or a model retrieves documents nobody judged). A share, not "
                    "points: sparse judgments keep judged@k low everywhere, so a fall from 0.30 to 0.19 is a large one")


DEFAULT_MARGIN = 0.01
