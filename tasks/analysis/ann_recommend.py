"""ANN sweep, the recommendation: from the sweep table alone, the fastest index setting whose
loss against exact search stays within a budget (pure on tables; tasks/stages/sweep.py measures)."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import polars as pl

from tasks.analysis.metrics import parse_measure


@dataclass(frozen=True)
class Recommendation:
    """The fastest setting (highest batched QPS) whose loss stays within the budget."""

    provider: str
    index_kind: str
    build_params: dict
    query_params: dict
    measure: str
    loss_budget: float
    relative_loss: float
    qps_batch: float
    neighbour_recall: float | None
    index_bytes: int | None
    candidates: int  # settings that met the budget, flat included
    budget_on: str = "mean"

    def line(self) -> str:
        params = ", ".join(f"{k}={v}" for k, v in {**self.build_params, **self.query_params}.items())
        recall = "" if self.neighbour_recall is None else f", neighbour recall {self.neighbour_recall:.3f}"
        return (f"{self.provider}: {self.index_kind}" + (f" ({params})" if params else "")
                + f" - {self.qps_batch:,.0f} queries/s, {self.measure} loss {100 * self.relative_loss + 0.0:.2f}%"
                + f" (budget {100 * self.loss_budget:g}%{', at ci_low' if self.budget_on == 'ci_low' else ''}){recall}"
                + f"; {self.candidates} settings within budget")

    __str__ = line

    def to_dict(self) -> dict:
        return asdict(self)


def relative_loss(table: pl.DataFrame, measure: str, budget_on: str = "mean") -> pl.Series:
    """(flat - approximate) / flat for the measure; at ci_low, the interval's worst end."""
    delta = pl.col(f"delta_{measure}_ci_low" if budget_on == "ci_low" else f"delta_{measure}")
    flat = pl.col(f"flat_{measure}")
    loss = pl.when(flat > 0).then(-delta / flat).when(delta >= 0).then(0.0).otherwise(float("inf"))
    return table.select(loss.fill_null(float("inf")).alias("loss")).to_series()


def recommend(table: pl.DataFrame, measure: str = "ndcg@10", loss_budget: float = 0.01,
              budget_on: str = "mean") -> dict[str, Recommendation | None]:
    """Per provider: among the settings within the budget, the highest batched QPS (smaller
    index on a tie). Flat has no loss, so it is the answer when nothing faster qualifies."""
    measure = str(parse_measure(measure))
    needed = ["provider", "index_kind", "build_params", "query_params", "qps_batch", f"delta_{measure}", f"flat_{measure}"]
    missing = [c for c in needed if c not in table.columns]
    if missing:
        raise ValueError(f"sweep table: missing columns {missing} (found {table.columns})")
    scored = table.with_columns(_loss=relative_loss(table, measure, budget_on))
    out: dict[str, Recommendation | None] = {}
    for provider in scored["provider"].unique(maintain_order=True).to_list():
        rows = scored.filter((pl.col("provider") == provider) & (pl.col("_loss") <= loss_budget + 1e-12))
        if rows.height == 0:
            out[provider] = None
            continue
        size = pl.col("index_bytes") if "index_bytes" in rows.columns else pl.lit(0)
        best = rows.with_columns(_size=size).sort(["qps_batch", "_size"], descending=[True, False], nulls_last=True).row(0, named=True)
        recall_col = next((c for c in rows.columns if c.startswith("neighbour_recall@")), None)
        out[provider] = Recommendation(
            provider=provider,
            index_kind=best["index_kind"],
            build_params=json.loads(best["build_params"]),
            query_params=json.loads(best["query_params"]),
            measure=measure,
            loss_budget=loss_budget,
            relative_loss=float(best["_loss"]),
            qps_batch=float(best["qps_batch"]),
            neighbour_recall=None if recall_col is None else best[recall_col],
            index_bytes=best.get("index_bytes"),
            candidates=rows.height,
            budget_on=budget_on,
        )
    return out
