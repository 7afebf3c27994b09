"""What docs/reference/tables.md documents: each `## `name`` section's columns, so tests can hold
every table a run writes against the page (a column the page does not list fails them)."""
from __future__ import annotations

import re
from pathlib import Path

from retbench.support.paths import ROOT

TABLES_PAGE = ROOT / "docs" / "reference" / "tables.md"
_HEADING = re.compile(r"^## `([a-z_]+)`\s*$")
_COLUMN_ROW = re.compile(r"^\| `([^`]+)` \| ([^|]+) \|")
# Placeholders in documented column names, and what they stand for.
_PLACEHOLDERS = {"<measure>": r"[a-z_]+(?:@\d+)?", "<k>": r"\d+"}


def documented_columns(page: Path = TABLES_PAGE) -> dict[str, list[str]]:
    """table name -> its documented column names (placeholders kept), in page order."""
    return {table: list(columns) for table, columns in documented_types(page).items()}


def documented_types(page: Path = TABLES_PAGE) -> dict[str, dict[str, str]]:
    """table name -> {documented column name: its documented type}, in page order."""
    tables: dict[str, dict[str, str]] = {}
    current = None
    for line in page.read_text(encoding="utf-8").splitlines():
        heading = _HEADING.match(line)
        if heading:
            current = heading.group(1)
            tables[current] = {}
        elif line.startswith("## "):
            current = None
        elif current is not None:
            row = _COLUMN_ROW.match(line)
            if row and row.group(1) != "column":
                tables[current][row.group(1)] = row.group(2).strip()
    return tables


def _pattern(name: str) -> re.Pattern:
    parts = re.split(r"(<measure>|<k>)", name)
    return re.compile("".join(_PLACEHOLDERS.get(part, re.escape(part)) for part in parts))


# A documented type and the Parquet types (polars' names) that it covers.
_TYPES = {"string": ("String",), "int": ("Int64", "Int32", "UInt32"), "float": ("Float64",), "bool": ("Boolean",),
          "date": ("Date",), "list of string": ("List(String)",), "list of struct": ("List(Struct",)}


def mistyped(table: str, schema: dict[str, str], page: Path = TABLES_PAGE) -> list[str]:
    """`column: written X, documented Y` for each column of `schema` (name -> polars type name)
    whose documented type does not cover the type written; undocumented columns are left out."""
    types = documented_types(page).get(table, {})
    patterns = [(_pattern(name), kind) for name, kind in types.items()]
    wrong = []
    for column, written in schema.items():
        # A name written out wins over a placeholder that also matches it (delta_basis, delta_<measure>).
        kind = types.get(column) or next((kind for pattern, kind in patterns if pattern.fullmatch(column)), None)
        if kind is not None and not any(written.startswith(t) for t in _TYPES.get(kind, ())):
            wrong.append(f"{column}: written {written}, documented {kind}")
    return wrong


def undocumented(table: str, columns: list[str], page: Path = TABLES_PAGE) -> list[str]:
    """The columns of `table` that its section of the page does not list (all of them when the
    page has no section for it)."""
    patterns = [_pattern(name) for name in documented_columns(page).get(table, [])]
    return [c for c in columns if not any(p.fullmatch(c) for p in patterns)]
