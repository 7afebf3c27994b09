"""A finished run's output folder as Python objects: its tables as polars frames (read when first
asked for), the verdict in words, and the report's path. What `retbench.run` and `retbench.load`
return; the tables and their columns are documented in docs/reference/tables.md."""
from __future__ import annotations

import json
from functools import cached_property
from pathlib import Path
from typing import Any


def _finish_an_interrupted_publication(output_dir: Path) -> None:
    """A run stopped while moving its files into place left a commit point: finish the moves, so
    the folder read is the new run's whole (tasks/store/output_folder.py)."""
    from retbench.tasks.store.output_folder import finish_if_abandoned

    try:
        finish_if_abandoned(output_dir)
    except OSError:  # a read-only folder: read what is there; the next run finishes it
        pass


class Results:
    """The results of one run (`output_dir`): `summary`, `per_query`, `verdict`, `ladder`, `failures`
    and any other table by name (`table("latency")`), `scores` (one row per setting, a column per
    measure), `best` and `report`."""

    def __init__(self, output_dir: str | Path):
        self.output_dir = Path(output_dir).resolve()
        _finish_an_interrupted_publication(self.output_dir)
        if not (self.output_dir / "manifest.json").is_file():
            raise FileNotFoundError(f"{self.output_dir}: no manifest.json, so no finished run's output (expected the "
                                    f"output_dir of a run)")

    def __repr__(self) -> str:
        best = self.best
        said = f"best {best['setting']} {best['measure']} {best['mean']:.4f}; " if best else ""
        return f"Results({self.output_dir}: {said}{len(self.tables)} tables; report {self.report})"

    def _repr_html_(self) -> str:  # a notebook shows the verdict table
        from html import escape

        best = self.best
        head = (f"<p><b>{escape(best['setting'])}</b> is best on {escape(best['measure'])} "
                f"({best['mean']:.4f}) &middot; report: <code>{escape(str(self.report))}</code></p>") if best else ""
        return head + (self.verdict._repr_html_() if not self.verdict.is_empty() else "")

    @cached_property
    def manifest(self) -> dict[str, Any]:
        return json.loads((self.output_dir / "manifest.json").read_text(encoding="utf-8"))

    @property
    def tables(self) -> list[str]:
        """The names of the tables this run wrote."""
        return sorted(p.stem for p in self.output_dir.glob("*.parquet") if p.stem != "manifest")

    def table(self, name: str):
        """One table of the run as a polars frame (docs/reference/tables.md lists them)."""
        import polars as pl

        path = self.output_dir / f"{name}.parquet"
        if not path.is_file():
            raise KeyError(f"{self.output_dir} holds no table {name!r} (it has: {', '.join(self.tables)})")
        return pl.read_parquet(path)

    def _optional(self, name: str):
        import polars as pl

        path = self.output_dir / f"{name}.parquet"
        return pl.read_parquet(path) if path.is_file() else pl.DataFrame()

    @cached_property
    def summary(self):
        """One row per setting and measure: mean and interval over the scored queries."""
        return self.table("summary")

    @cached_property
    def per_query(self):
        """One row per setting, query and measure."""
        return self.table("per_query")

    @cached_property
    def verdict(self):
        """One row per setting on the held-out queries, with its test against the best (empty
        before a full run)."""
        return self._optional("verdict")

    @cached_property
    def ladder(self):
        """The interventions ladder, cheapest step first (empty when the run made none)."""
        return self._optional("ladder")

    @cached_property
    def failures(self):
        """Every query scoring below the failure threshold, per setting."""
        return self._optional("failures")

    @property
    def scores(self):
        """One row per setting, one column per measure (the summary's means), on every scored query."""
        summary = self.summary
        return summary.pivot("measure", index="setting", values="value", aggregate_function="first")

    @property
    def best(self) -> dict[str, Any] | None:
        """The verdict's best setting: setting, measure, mean and interval, split; None if none was named."""
        verdict = self.verdict
        if verdict.is_empty() or "role" not in verdict.columns:
            return None
        rows = verdict.filter(verdict["role"] == "best")
        if rows.is_empty():
            return None
        row = rows.row(0, named=True)
        return {"setting": row["label"], "measure": row["measure"], "mean": row["mean"], "ci_low": row["ci_low"],
                "ci_high": row["ci_high"], "split": row["split"]}

    @property
    def report(self) -> Path:
        """report.html: offline, the verdict first."""
        return self.output_dir / "report.html"

    @property
    def report_markdown(self) -> Path:
        return self.output_dir / "report.md"
