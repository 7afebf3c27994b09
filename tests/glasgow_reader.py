"""Test-only reader of the Glasgow collections in shared/data/glasgow (NPL, CISI, MED): documents,
queries and binary judgments as polars frames. Formats are described in that folder's README."""
from __future__ import annotations

import re
from pathlib import Path

import polars as pl

_TAG = re.compile(r"^\.([A-Z])(?:\s+(\S+))?\s*$")


def _smart(path: Path, fields: tuple[str, ...]) -> list[tuple[str, str]]:
    """(id, text of `fields`) per `.I id` record; a field runs until the next tag line."""
    records: list[tuple[str, dict[str, list[str]]]] = []
    field = None
    for number, line in enumerate(path.read_text(encoding="latin-1").splitlines(), 1):
        tag = _TAG.match(line)
        if tag and tag.group(1) == "I":
            records.append((tag.group(2), {}))
            field = None
        elif tag and tag.group(2) is None:
            field = tag.group(1)
        elif not records:
            raise ValueError(f"{path}:{number}: text before the first .I line")
        elif field is not None:
            records[-1][1].setdefault(field, []).append(line.strip())
    return [(rid, " ".join(" ".join(parts.get(f, [])) for f in fields).strip()) for rid, parts in records]


def _slash_records(path: Path) -> list[list[str]]:
    """NPL: records separated by lines holding only '/'; each a list of lines."""
    records, current = [], []
    for line in path.read_text(encoding="latin-1").splitlines():
        if line.strip() == "/":
            if current:
                records.append(current)
            current = []
        elif line.strip():
            current.append(line)
    if current:
        records.append(current)
    return records


def read_glasgow(folder: Path, name: str) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """(corpus: doc_id, text; queries: query_id, text; qrels: query_id, doc_id, grade)."""
    folder = Path(folder) / name
    if name == "npl":
        docs = [(r[0].strip(), " ".join(x.strip() for x in r[1:])) for r in _slash_records(folder / "doc-text")]
        queries = [(r[0].strip(), " ".join(x.strip() for x in r[1:])) for r in _slash_records(folder / "query-text")]
        qrels = [(r[0].strip(), d) for r in _slash_records(folder / "rlv-ass") for x in r[1:] for d in x.split()]
    elif name == "cisi":
        docs = _smart(folder / "CISI.ALL", ("T", "W"))
        queries = _smart(folder / "CISI.QRY", ("T", "W"))
        qrels = [tuple(line.split()[:2]) for line in (folder / "CISI.REL").read_text().splitlines() if line.strip()]
    elif name == "med":
        docs = _smart(folder / "MED.ALL", ("W",))
        queries = _smart(folder / "MED.QRY", ("W",))
        qrels = [(p[0], p[2]) for p in (line.split() for line in (folder / "MED.REL").read_text().splitlines()) if p]
    else:
        raise ValueError(f"unknown Glasgow collection {name!r} (npl, cisi, med)")
    corpus = pl.DataFrame(docs, schema={"doc_id": pl.String, "text": pl.String}, orient="row")
    query_frame = pl.DataFrame(queries, schema={"query_id": pl.String, "text": pl.String}, orient="row")
    judged = pl.DataFrame(qrels, schema={"query_id": pl.String, "doc_id": pl.String}, orient="row").unique()
    return corpus, query_frame, judged.with_columns(grade=pl.lit(1, dtype=pl.Int64))
