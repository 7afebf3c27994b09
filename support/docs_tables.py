"""What docs/reference/tables.md documents: each `## `name`` section's columns, so tests can hold
every table a run writes against the page (a column the page does not list fails them)."""
from __future__ import annotations

import re
from pathlib import Path

from support.paths import ROOT

TABLES_PAGE = ROOT / "docs" / "reference" / "tables.md"
_HEADING = re.compile(r"^## `([a-z_]+)`\s*$")
_COLUMN_ROW = re.compile(r"^\| `([^`]+)` \|")
# Placeholders in documented column names, and what they stand for.
_PLACEHOLDERS = {"<measure>": r"[a-z_]+(?:@\d+)?", "<k>": r"\d+"}


def documented_columns(page: Path = TABLES_PAGE) -> dict[str, list[str]]:
    """table name -> its documented column names (placeholders kept), in page order."""
    tables: dict[str, list[str]] = {}
    current = None
    for line in page.read_text(encoding="utf-8").splitlines():
        heading = _HEADING.match(line)
        if heading:
            current = heading.group(1)
            tables[current] = []
        elif line.startswith("## "):
            current = None
        elif current is not None:
            row = _COLUMN_ROW.match(line)
            if row and row.group(1) != "column":
                tables[current].append(row.group(1))
    return tables


def _pattern(name: str) -> re.Pattern:
    parts = re.split(r"(<measure>|<k>)", name)
    return re.compile("".join(_PLACEHOLDERS.get(part, re.escape(part)) for part in parts))


def undocumented(table: str, columns: list[str], page: Path = TABLES_PAGE) -> list[str]:
    """The columns of `table` that its section of the page does not list (all of them when the
    page has no section for it)."""
    patterns = [_pattern(name) for name in documented_columns(page).get(table, [])]
    return [c for c in columns if not any(p.fullmatch(c) for p in patterns)]
