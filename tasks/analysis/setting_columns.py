"""The `setting` and `params` columns of every result table, joined on the derived
(provider, index, nprobe) columns each table already has (`a_`/`b_` ones for paired tables)."""
from __future__ import annotations

import polars as pl

DERIVED = ("provider", "index", "nprobe")
LABELS_SCHEMA = {"setting": pl.String, "params": pl.String, "provider": pl.String, "index": pl.String, "nprobe": pl.Int64}


def labels_table(settings: list) -> pl.DataFrame:
    """One row per Setting (tasks/config/setting.py): setting, params, provider, index, nprobe."""
    rows = sorted({s.columns() for s in settings}, key=lambda row: tuple("" if v is None else str(v) for v in row))
    return pl.DataFrame(rows, schema=LABELS_SCHEMA, orient="row")


def keys_table(settings: list) -> pl.DataFrame:
    """One row per Setting: setting, params and `setting_key` (Setting.key: what is computed, not
    what it is called), so a later run can pair its settings with this one's (tasks/analysis/history.py)."""
    rows = sorted({(s.label, s.params_json, s.key) for s in settings})
    return pl.DataFrame(rows, schema={"setting": pl.String, "params": pl.String, "setting_key": pl.String}, orient="row")


def with_setting_columns(table: pl.DataFrame, labels: pl.DataFrame) -> pl.DataFrame:
    """`table` with `setting` and `params` just before `provider` (`a_setting`, `a_params` before
    `a_provider`, ...), rows and other columns unchanged; a table without those columns as it is."""
    for prefix in ("", "a_", "b_"):
        keys = [f"{prefix}{c}" for c in DERIVED]
        added = [f"{prefix}setting", f"{prefix}params"]
        if not set(keys) <= set(table.columns) or set(added) & set(table.columns):
            continue
        named = labels.select(*[pl.col(c).alias(f"{prefix}{c}") for c in ("setting", "params", *DERIVED)]).unique(keys)
        named = named.with_columns(pl.col(k).cast(table.schema[k]) for k in keys)
        columns = table.columns
        at = columns.index(f"{prefix}provider")
        table = (table.join(named, on=keys, how="left", nulls_equal=True, maintain_order="left")
                 .select(*columns[:at], *added, *columns[at:]))
    return table
