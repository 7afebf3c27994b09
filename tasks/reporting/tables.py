"""Result tables in the run's output directory, and the console summary."""
from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl

from retbench.tasks.store.files import atomic_write, write_json, write_parquet

# Measure families in reading order; within a family by cutoff. Unknown families come after, by name.
MEASURE_FAMILIES = ("recall", "mrr", "ndcg", "ndcg_exp", "ndcg_condensed", "judged", "bpref", "map", "precision",
                    "overlap")
_MEASURE = re.compile(r"^(?P<family>[^@]+)(?:@(?P<k>\d+))?$")


def write_tables(output_dir: Path, tables: dict[str, pl.DataFrame]) -> dict[str, str]:
    """Parquet for every table, CSV too for the summary; returns table name -> path."""
    output_dir = Path(output_dir)
    paths = {}
    for name, table in tables.items():
        paths[name] = str(write_parquet(table, output_dir / f"{name}.parquet"))
    if "summary" in tables:
        atomic_write(output_dir / "summary.csv", lambda tmp: tables["summary"].write_csv(tmp))
    return paths


def write_manifest(output_dir: Path, manifest: dict) -> str:
    """manifest.json for people, manifest.parquet (section, key, value) for tools."""
    output_dir = Path(output_dir)
    write_json(output_dir / "manifest.json", manifest)
    rows = []
    for section, content in manifest.items():
        if isinstance(content, dict):
            rows += [(section, str(k), _text(v)) for k, v in content.items()]
        else:
            rows.append((section, "", _text(content)))
    table = pl.DataFrame(rows, schema=["section", "key", "value"], orient="row")
    write_parquet(table, output_dir / "manifest.parquet")
    return str(output_dir / "manifest.json")


def _text(value) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def text_table(frame: pl.DataFrame) -> str:
    """A fixed-width text table: text columns left-aligned, numbers right-aligned (floats to 4 places)."""
    def cell(value) -> str:
        if value is None:
            return "-"
        return f"{value:.4f}" if isinstance(value, float) else str(value)

    numeric = [dtype.is_numeric() for dtype in frame.dtypes]
    rows = [[cell(v) for v in row] for row in frame.iter_rows()]
    widths = [max([len(name), *(len(row[i]) for row in rows)]) for i, name in enumerate(frame.columns)]

    def line(cells):
        return "  ".join(c.rjust(w) if right else c.ljust(w) for c, w, right in zip(cells, widths, numeric))

    return "\n".join([line(frame.columns), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def measure_order(measure: str) -> tuple:
    """Sort key: recall@k by k, mrr, ndcg@k by k, then the other measures."""
    match = _MEASURE.match(measure)
    family, k = (match["family"], int(match["k"] or 0)) if match else (measure, 0)
    rank = MEASURE_FAMILIES.index(family) if family in MEASURE_FAMILIES else len(MEASURE_FAMILIES)
    return rank, family, k, measure


def summary_wide(summary: pl.DataFrame) -> pl.DataFrame:
    """One row per provider/index/nprobe, one column per measure in measure_order."""
    measures = sorted(set(summary["measure"].to_list()), key=measure_order)
    wide = (summary.pivot(on="measure", index=["provider", "index", "nprobe", "queries"], values="value")
            .sort(["provider", "index", "nprobe"], nulls_last=False))
    return wide.select("provider", "index", "nprobe", "queries", *measures)


def summary_table_text(summary: pl.DataFrame) -> str:
    """The summary as a fixed-width text table: one row per provider/index/nprobe, every measure."""
    return text_table(summary_wide(summary))
