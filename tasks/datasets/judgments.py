"""Judgments added after the fact (a judging pool's qrels download, or its graded sheet): read from
a TREC qrels file or a `retbench judge export` CSV/TSV sheet and checked against a dataset (its ids, its grade scale) and against the judgments it already
has, every refusal naming the file and line. The store side (overlays kept per dataset, merged
into a run's judgments) is tasks/stages/judgments.py."""
from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from retbench.tasks.datasets.errors import DatasetError
from retbench.tasks.datasets.lines import parse_int
from retbench.tasks.datasets.model import QRELS_SCHEMA, Dataset, Judgment
from retbench.tasks.datasets.trec_qrels import read_trec_qrels

SHOWN = 5  # conflicts listed in a refusal; the rest are counted
# The first column of a judging-pool sheet (tasks/reporting/judging.py SHEET_COLUMNS); the sheet's
# columns this reader needs.
SHEET_FIRST = "pool_rank"
SHEET_NEEDS = ("query_id", "doc_id", "grade")


@dataclass(frozen=True)
class Conflict:
    """A judgment of the file that gives a (query, doc) pair another grade than it already has."""

    query_id: str
    doc_id: str
    had: int
    new: int
    had_from: str  # "base", or the overlay's file name
    where: str  # file:line of the new judgment

    def described(self) -> str:
        return f"{self.query_id} {self.doc_id}: {self.had_from} {self.had}, new {self.new}"


def grade_scale(dataset: Dataset) -> tuple[int, int]:
    """The grades a judgment of this dataset may take: 0 up to the highest its own judgments use
    (grades as scored, after the spec's grade_map)."""
    highest = dataset.qrels["grade"].max()
    return 0, int(highest) if highest is not None else 0


def read_overlay(path: Path, dataset: Dataset) -> pl.DataFrame:
    """The judgments of a TREC qrels file (`qid iter docid grade`) as query_id, doc_id, grade, line;
    refused (DatasetError naming file:line) for a query or document the dataset does not have, a
    grade off its scale, or one pair judged twice with different grades. A pair repeated with the
    same grade is kept once. A graded judging-pool sheet (CSV or TSV, its header first) is read
    by its columns, the rows with an empty grade skipped."""
    sheet = _is_sheet(path)
    judgments = read_sheet(path) if sheet else read_trec_qrels(path)
    if not judgments:
        expected = "a grade in the sheet's grade column" if sheet else "lines `qid iter docid grade`"
        raise DatasetError(f"{path}: no judgments; expected {expected}")
    queries = set(dataset.queries["query_id"].to_list())
    dropped = set(dataset.unjudged_queries)
    documents = set(dataset.corpus["doc_id"].to_list())
    low, high = grade_scale(dataset)
    seen: dict[tuple[str, str], tuple[int, str]] = {}
    rows = []
    for j in judgments:
        if j.query_id not in queries:
            why = ("has no judgments in the dataset, so the run drops it and scores it nowhere; judge it in the "
                   "dataset's own qrels" if j.query_id in dropped else
                   f"is not a query of dataset {dataset.name!r} (split as in the spec)")
            raise DatasetError(f"{j.where}: query id {j.query_id!r} {why}")
        if j.doc_id not in documents:
            raise DatasetError(f"{j.where}: doc id {j.doc_id!r} is not a document of dataset {dataset.name!r}")
        if not low <= j.grade <= high:
            raise DatasetError(f"{j.where}: grade {j.grade} for query {j.query_id!r} is outside the dataset's scale "
                               f"{low}..{high} (the grades its own judgments use)")
        key = (j.query_id, j.doc_id)
        if key in seen:
            grade, first = seen[key]
            if grade != j.grade:
                raise DatasetError(f"{j.where}: query {j.query_id!r} doc {j.doc_id!r} judged {j.grade} here and "
                                   f"{grade} at {first}; expected one grade per pair")
            continue
        seen[key] = (j.grade, j.where)
        rows.append((j.query_id, j.doc_id, j.grade, int(j.where.rsplit(":", 1)[1])))
    return pl.DataFrame(rows, schema={**QRELS_SCHEMA, "line": pl.Int64}, orient="row")


def _is_sheet(path: Path) -> bool:
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            return f.readline().startswith(SHEET_FIRST)
    except (OSError, UnicodeDecodeError):
        return False  # the qrels reader names what is wrong with the file


def read_sheet(path: Path) -> list[Judgment]:
    """The graded rows of a judging-pool sheet as judgments; the line of each is where its row
    ends (a text cell may hold line breaks, so a sheet is read as CSV, not line by line)."""
    with open(path, encoding="utf-8-sig", newline="") as f:
        header = f.readline()
        f.seek(0)
        reader = csv.DictReader(f, delimiter="\t" if "\t" in header else ",")
        missing = [c for c in SHEET_NEEDS if c not in (reader.fieldnames or [])]
        if missing:
            raise DatasetError(f"{path}:1: a judging-pool sheet needs the columns {list(SHEET_NEEDS)}; missing "
                               f"{missing} (found {reader.fieldnames})")
        judgments = []
        for row in reader:
            grade = (row["grade"] or "").strip()
            if grade:
                where = f"{path}:{reader.line_num}"
                judgments.append(Judgment(row["query_id"], row["doc_id"], parse_int(grade, where, "grade"), where))
    return judgments


def conflicts(new: pl.DataFrame, existing: list[tuple[str, pl.DataFrame]], path: Path) -> list[Conflict]:
    """Pairs of `new` already judged with another grade: against each of `existing` (label, judgments),
    the latest label standing for a pair judged in several (they are merged in that order)."""
    current = merge([frame.with_columns(pl.lit(label).alias("had_from")) for label, frame in existing])
    joined = new.join(current.rename({"grade": "had"}), on=["query_id", "doc_id"], how="inner")
    joined = joined.filter(pl.col("had") != pl.col("grade")).sort("line")
    return [Conflict(q, d, had, grade, source, f"{path}:{line}")
            for q, d, grade, line, had, source in joined.select("query_id", "doc_id", "grade", "line", "had",
                                                                   "had_from").iter_rows()]


def merge(layers: list[pl.DataFrame]) -> pl.DataFrame:
    """Judgments layered in order: a pair judged in a later layer takes that layer's grade (other
    columns of the layers are kept when they all have them)."""
    frames = [f.with_columns(pl.lit(i).alias("_layer")) for i, f in enumerate(layers)]
    stacked = pl.concat(frames, how="diagonal_relaxed")
    return stacked.sort("_layer").unique(["query_id", "doc_id"], keep="last", maintain_order=True).drop("_layer")


def conflict_summary(found: list[Conflict]) -> str:
    """`2 conflicts with existing judgments: q1 d3: base 1, new 3; ...`."""
    shown = "; ".join(c.described() for c in found[:SHOWN])
    more = f"; and {len(found) - SHOWN} more" if len(found) > SHOWN else ""
    return f"{len(found)} conflict{'s' * (len(found) != 1)} with existing judgments: {shown}{more}"
