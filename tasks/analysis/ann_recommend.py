"""ANN sweep, the recommendation: from the sweep table alone, the fastest index setting whose
loss against exact search stays within a budget (pure on tables; tasks/stages/sweep.py measures).
With a held-out split the setting is chosen on the dev queries and checked on the test queries."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import polars as pl

from retbench.tasks.analysis.metrics import parse_measure

# Column suffixes of the split-wise sweep columns (tasks/stages/sweep.py): "dev" is every
# query not in the test split, "test" the held-out queries.
CHOOSE, HELD_OUT = "dev", "test"


def split_column(name: str, split: str | None) -> str:
    """`delta_ndcg@10` -> `delta_ndcg@10_test`; `delta_ndcg@10_ci_low` -> `delta_ndcg@10_test_ci_low`
    (the split names the delta, the interval ends follow it)."""
    if split is None:
        return name
    for end in ("_ci_low", "_ci_high"):
        if name.endswith(end):
            return f"{name[: -len(end)]}_{split}{end}"
    return f"{name}_{split}"


def has_held_out(table: pl.DataFrame, measure: str) -> bool:
    """Whether the sweep table carries dev and test columns for the measure."""
    return all(split_column(f"delta_{measure}", s) in table.columns for s in (CHOOSE, HELD_OUT))


@dataclass(frozen=True)
class Recommendation:
    """The fastest setting (highest batched QPS) whose loss stays within the budget: on the dev
    queries when the data has a held-out split (then judged again on test), else on all of them."""

    provider: str
    index_kind: str
    build_params: dict
    query_params: dict
    measure: str
    loss_budget: float
    relative_loss: float  # on the queries it was chosen on
    qps_batch: float
    neighbour_recall: float | None
    index_bytes: int | None
    candidates: int  # settings that met the budget, flat included
    budget_on: str = "mean"
    chosen_on: str = "all"  # "dev" (every non-test query) when a held-out test split exists
    chosen_queries: int | None = None
    test_queries: int | None = None
    test_relative_loss: float | None = None  # the chosen setting's mean relative loss on the test queries
    test_loss_low: float | None = None  # its paired bootstrap interval, as relative loss
    test_loss_high: float | None = None
    test_within_budget: bool | None = None  # on test, by the same rule (mean or ci_low) as the choice

    def line(self) -> str:
        params = ", ".join(f"{k}={v}" for k, v in {**self.build_params, **self.query_params}.items())
        recall = "" if self.neighbour_recall is None else f", neighbour recall {self.neighbour_recall:.3f}"
        return (f"{self.provider}: {self.index_kind}" + (f" ({params})" if params else "")
                + f" - {self.qps_batch:,.0f} queries/s, {self.measure} loss {_percent(self.relative_loss)}"
                + f" (budget {100 * self.loss_budget:g}%{', at ci_low' if self.budget_on == 'ci_low' else ''}){recall}"
                + f"; {self.candidates} settings within budget; " + self.held_out_line())

    def held_out_line(self) -> str:
        """Where the setting was chosen and how it did on the queries it was not chosen on."""
        if self.chosen_on != CHOOSE:
            return "chosen and judged on the same queries (no held-out split)"
        interval = ("" if self.test_loss_low is None or self.test_loss_high is None
                    else f" [{_percent(self.test_loss_low)}, {_percent(self.test_loss_high)}]")
        verdict = {True: "yes", False: "NO", None: "unknown"}[self.test_within_budget]
        return (f"chosen on {self.chosen_queries} dev queries; held-out check: loss on {self.test_queries} test queries "
                f"{_percent(self.test_relative_loss)}{interval}; within budget: {verdict}")

    __str__ = line

    def to_dict(self) -> dict:
        return asdict(self)


def _percent(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{100 * value + 0.0:.2f}%"  # + 0.0: no "-0.00%"


def relative_loss(table: pl.DataFrame, measure: str, budget_on: str = "mean", split: str | None = None) -> pl.Series:
    """(flat - approximate) / flat for the measure; at ci_low, the interval's worst end. `split`
    ("dev", "test") reads that split's columns instead of the all-query ones."""
    name = f"delta_{measure}_ci_low" if budget_on == "ci_low" else f"delta_{measure}"
    delta = pl.col(split_column(name, split))
    flat = pl.col(split_column(f"flat_{measure}", split))
    loss = pl.when(flat > 0).then(-delta / flat).when(delta >= 0).then(0.0).otherwise(float("inf"))
    return table.select(loss.fill_null(float("inf")).alias("loss")).to_series()


def _loss_interval(row: dict, measure: str, split: str) -> tuple[float | None, float | None]:
    """The paired interval of the split's delta as relative loss (the ends swap: loss = -delta / flat)."""
    flat = row.get(split_column(f"flat_{measure}", split))
    low = row.get(split_column(f"delta_{measure}_ci_low", split))
    high = row.get(split_column(f"delta_{measure}_ci_high", split))
    if not flat or flat <= 0 or low is None or high is None or low != low or high != high:
        return None, None
    return -high / flat, -low / flat


def recommend(table: pl.DataFrame, measure: str = "ndcg@10", loss_budget: float = 0.01,
              budget_on: str = "mean") -> dict[str, Recommendation | None]:
    """Per provider: among the settings within the budget, the highest batched QPS (smaller
    index on a tie). Flat has no loss, so it is the answer when nothing faster qualifies.

    When the table has dev and test columns (a held-out split), the budget is applied to the
    dev columns only and the pick's test loss is reported beside it, never used to choose."""
    measure = str(parse_measure(measure))
    needed = ["provider", "index_kind", "build_params", "query_params", "qps_batch", f"delta_{measure}", f"flat_{measure}"]
    missing = [c for c in needed if c not in table.columns]
    if missing:
        raise ValueError(f"sweep table: missing columns {missing} (found {table.columns})")
    held_out = has_held_out(table, measure)
    chosen_on = CHOOSE if held_out else None
    scored = table.with_columns(_loss=relative_loss(table, measure, budget_on, chosen_on))
    if held_out:
        scored = scored.with_columns(_test_loss=relative_loss(table, measure, "mean", HELD_OUT),
                                     _test_judged=relative_loss(table, measure, budget_on, HELD_OUT))
    out: dict[str, Recommendation | None] = {}
    for provider in scored["provider"].unique(maintain_order=True).to_list():
        rows = scored.filter((pl.col("provider") == provider) & (pl.col("_loss") <= loss_budget + 1e-12))
        if rows.height == 0:
            out[provider] = None
            continue
        size = pl.col("index_bytes") if "index_bytes" in rows.columns else pl.lit(0)
        best = rows.with_columns(_size=size).sort(["qps_batch", "_size"], descending=[True, False], nulls_last=True).row(0, named=True)
        recall_col = next((c for c in rows.columns if c.startswith("neighbour_recall@")), None)
        check: dict = {}
        if held_out:
            low, high = _loss_interval(best, measure, HELD_OUT)
            check = {"chosen_on": CHOOSE, "chosen_queries": best.get(split_column("queries", CHOOSE)),
                     "test_queries": best.get(split_column("queries", HELD_OUT)),
                     "test_relative_loss": float(best["_test_loss"]), "test_loss_low": low, "test_loss_high": high,
                     "test_within_budget": bool(best["_test_judged"] <= loss_budget + 1e-12)}
        else:
            check = {"chosen_queries": best.get("queries")}
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
            **check,
        )
    return out
