"""The Dataset record (corpus, queries, graded judgments) and the validation every format's rows
go through: ids that resolve, no duplicate judgment, grades on the format's scale, judged queries.

Every error names the file (and line, and id) and what was expected, so a bad collection is fixed
at its source rather than debugged downstream.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass

import polars as pl

from retbench.tasks.datasets.errors import DatasetError

log = logging.getLogger("retbench.dataset")

# A query's split: "train" and "dev" may be mined and tuned on, "test" is held out; "all" keeps every query.
SPLITS = ("train", "dev", "test", "all")
QUERY_SPLITS = ("train", "dev", "test")
DEFAULT_CATEGORY = "uncategorized"
# Held out by default so that nothing is tuned on a query whose split nobody chose.
DEFAULT_SPLIT = "test"

CORPUS_SCHEMA = {"doc_id": pl.String, "title": pl.String, "text": pl.String, "language": pl.String}
QUERIES_SCHEMA = {
    "query_id": pl.String,
    "text": pl.String,
    "language": pl.String,
    "category": pl.String,
    "split": pl.String,
}
QRELS_SCHEMA = {"query_id": pl.String, "doc_id": pl.String, "grade": pl.Int64}
METADATA_SCHEMA = {"doc_id": pl.String, "metadata": pl.String}
FILTERS_SCHEMA = {"query_id": pl.String, "filter": pl.String}
EXTRA_TABLES = (("metadata", METADATA_SCHEMA), ("filters", FILTERS_SCHEMA))
TABLES = (("corpus", CORPUS_SCHEMA), ("queries", QUERIES_SCHEMA), ("qrels", QRELS_SCHEMA))


@dataclass(frozen=True)


class Dataset:
    name: str
    corpus: pl.DataFrame  # doc_id, title, text, language
    queries: pl.DataFrame  # query_id, text, language, category, split
    qrels: pl.DataFrame  # query_id, doc_id, grade
    notes: tuple[str, ...] = ()
    unjudged_queries: tuple[str, ...] = ()  # in the split but without judgments: dropped, not scored
    # Optional, present only when the collection has them (tasks/stages/filters.py):
    metadata: pl.DataFrame | None = None  # doc_id, metadata (a JSON object of scalar fields)
    filters: pl.DataFrame | None = None  # query_id, filter (JSON: field -> value or list of values)

    def extra_tables(self) -> list[tuple[str, pl.DataFrame]]:
        return [(label, frame) for label, frame in (("metadata", self.metadata), ("filters", self.filters))
                if frame is not None]


# One judgment as read, before grade mapping; `where` is "file:line" for error messages.
@dataclass(frozen=True)


class Judgment:
    query_id: str
    doc_id: str
    grade: int
    where: str


@dataclass


class RawCollection:
    """What a format reader hands to validation: rows plus where they came from."""

    name: str
    docs: list[tuple[str, str, str, str]]
    queries: list[tuple[str, str, str, str, str]]
    qrels: list[Judgment]
    corpus_file: str
    queries_file: str
    notes: list[str]
    max_grade: int | None = None
    default_grade_map: dict[int, int] | None = None
    metadata: dict[str, dict] | None = None  # doc id -> metadata object
    filters: dict[str, dict] | None = None  # query id -> filter object


def assemble(raw: RawCollection, split: str, grade_map: dict[int, int] | None) -> Dataset:
    """Validate a format's rows and keep the judged queries of `split` (grades mapped by `grade_map`)."""
    if not raw.docs:
        raise DatasetError(f"{raw.corpus_file}: no documents; expected at least one")
    notes = list(raw.notes)
    if grade_map is not None:
        mapping = ", ".join(f"{k}->{v}" for k, v in grade_map.items())
        notes.append(f"{raw.name} grades mapped {mapping}")

    doc_ids = {d[0] for d in raw.docs}
    query_ids = {q[0] for q in raw.queries}
    seen: dict[tuple[str, str], str] = {}
    judgments: list[tuple[str, str, int]] = []
    for j in raw.qrels:
        if j.query_id not in query_ids:
            raise DatasetError(f"{j.where}: query id {j.query_id!r} is not in {raw.queries_file}")
        if j.doc_id not in doc_ids:
            raise DatasetError(f"{j.where}: doc id {j.doc_id!r} is not in {raw.corpus_file}")
        key = (j.query_id, j.doc_id)
        if key in seen:
            raise DatasetError(
                f"{j.where}: duplicate judgment for query {j.query_id!r} and doc {j.doc_id!r} "
                f"(first at {seen[key]})"
            )
        seen[key] = j.where
        judgments.append((j.query_id, j.doc_id, _map_grade(j, grade_map, raw.max_grade)))

    in_split = [q for q in raw.queries if split == "all" or q[4] == split]
    judged = {q for q, _, _ in judgments}
    kept = [q for q in in_split if q[0] in judged]
    unjudged = tuple(q[0] for q in in_split if q[0] not in judged)
    if unjudged:
        shown = ", ".join(unjudged[:20]) + (f", ... ({len(unjudged) - 20} more)" if len(unjudged) > 20 else "")
        # A warning, not a note only: a query the user wrote and expects scored is not.
        log.warning("%s: %d queries in split %r have no judgments and are not scored: %s",
                    raw.name, len(unjudged), split, shown)
        notes.append(f"{len(unjudged)} queries in split {split!r} without judgments dropped: {shown}")
    if not kept:
        raise DatasetError(
            f"{raw.queries_file}: no judged queries in split {split!r} "
            f"({len(raw.queries)} queries read, {len(in_split)} in the split); "
            "expected at least one query with judgments"
        )
    kept_ids = {q[0] for q in kept}
    judgments = [j for j in judgments if j[0] in kept_ids]
    with_relevant = {q for q, _, g in judgments if g >= 1}
    no_relevant = len(kept_ids - with_relevant)
    if no_relevant:
        log.warning(
            "%s: %d of %d judged queries have no document with grade >= 1",
            raw.name, no_relevant, len(kept_ids),
        )
        notes.append(f"{no_relevant} of {len(kept_ids)} judged queries have no document with grade >= 1 (kept)")
    notes.append(
        f"split {split!r}: {len(raw.docs)} documents, {len(kept)} queries, {len(judgments)} judgments"
    )
    metadata = filters = None
    if raw.metadata:
        metadata = pl.DataFrame([(d, _canonical(m)) for d, m in raw.metadata.items()], schema=METADATA_SCHEMA,
                                orient="row")
    kept_filters = {q: f for q, f in (raw.filters or {}).items() if q in kept_ids}
    if kept_filters:
        filters = pl.DataFrame([(q, _canonical(f)) for q, f in kept_filters.items()], schema=FILTERS_SCHEMA,
                               orient="row")
        notes.append(f"{len(kept_filters)} queries carry a metadata filter")
    return Dataset(
        name=raw.name,
        corpus=pl.DataFrame(raw.docs, schema=CORPUS_SCHEMA, orient="row"),
        queries=pl.DataFrame(kept, schema=QUERIES_SCHEMA, orient="row"),
        qrels=pl.DataFrame(judgments, schema=QRELS_SCHEMA, orient="row"),
        notes=tuple(notes),
        unjudged_queries=unjudged,
        metadata=metadata,
        filters=filters,
    )


def _canonical(obj: dict) -> str:
    return json.dumps(obj, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _map_grade(j: Judgment, grade_map: dict[int, int] | None, max_grade: int | None) -> int:
    grade = j.grade
    if grade_map is not None:
        # A partial map would silently pass through grades on the wrong scale.
        if grade not in grade_map:
            raise DatasetError(
                f"{j.where}: grade {grade} is not in grade_map (keys {sorted(grade_map)})"
            )
        grade = grade_map[grade]
    shown = f"grade {j.grade}" + (f" (mapped to {grade})" if grade != j.grade else "")
    if grade < 0:
        raise DatasetError(
            f"{j.where}: {shown} for query {j.query_id!r} is negative; expected >= 0 "
            "(pass grade_map to map it, e.g. {-1: 0})"
        )
    if max_grade is not None and grade > max_grade:
        raise DatasetError(
            f"{j.where}: {shown} for query {j.query_id!r} is outside 0..{max_grade}"
        )
    return grade
