"""Load a retrieval collection (corpus, queries, graded judgments) and refuse malformed input.

Formats: the project's own JSONL folder, BEIR, Cranfield (SMART), XQuAD and the Glasgow
collections (NPL, CISI, MED); any of them can take its judgments from a TREC qrels file instead.
Every error names the file (and line, and id) and what was expected, so a bad collection is fixed
at its source rather than debugged downstream.
"""

from __future__ import annotations

import codecs
import difflib
import functools
import hashlib
import json
import logging
import re
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from tasks.language import detect_language

log = logging.getLogger("retbench.dataset")

SPLITS = ("dev", "test", "all")
QUERY_SPLITS = ("dev", "test")
DEFAULT_CATEGORY = "uncategorized"
# Held out by default so that nothing is tuned on a query whose split nobody chose.
DEFAULT_SPLIT = "test"
JSONL_MAX_GRADE = 3
# Cranfield grades 1 = complete answer ... 4 = minimum interest (cranqrel.readme); nDCG needs
# higher = better, and the -1 rows are judged non-relevant.
CRANFIELD_GRADE_MAP = {1: 4, 2: 3, 3: 2, 4: 1, -1: 0}

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
_EXTRA_TABLES = (("metadata", METADATA_SCHEMA), ("filters", FILTERS_SCHEMA))
_TABLES = (("corpus", CORPUS_SCHEMA), ("queries", QUERIES_SCHEMA), ("qrels", QRELS_SCHEMA))


class DatasetError(ValueError):
    """A collection that cannot be loaded; the message names file, line, id and what was expected."""


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
class _Judgment:
    query_id: str
    doc_id: str
    grade: int
    where: str


@dataclass
class _Raw:
    """What a format reader hands to validation: rows plus where they came from."""

    name: str
    docs: list[tuple[str, str, str, str]]
    queries: list[tuple[str, str, str, str, str]]
    qrels: list[_Judgment]
    corpus_file: str
    queries_file: str
    notes: list[str]
    max_grade: int | None = None
    default_grade_map: dict[int, int] | None = None
    metadata: dict[str, dict] | None = None  # doc id -> metadata object
    filters: dict[str, dict] | None = None  # query id -> filter object


# ---------------------------------------------------------------- public API


def load_dataset(
    path: str | Path,
    format: str,
    split: str = "dev",
    *,
    qrels_path: str | Path | None = None,
    grade_map: dict[int, int] | None = None,
    unicode: str = "nfc",
    **options: Any,
) -> Dataset:
    """Load and validate a collection, keeping only the queries of `split` ("dev", "test", "all").

    `qrels_path` replaces the format's judgments by a TREC qrels file; `grade_map` maps raw
    grades before validation (it must cover every grade present). Queries without judgments
    are dropped; the corpus is kept whole. `unicode` "nfc" (default) normalises titles and
    texts to Unicode NFC, "raw" keeps them as read. Options: `name` for every format, and
    `query_language` / `doc_language` ("en" | "hi") and `dev_fraction` for xquad, `collection` ("npl" | "cisi" | "med")
    for glasgow.
    """
    if format not in _READERS:
        raise DatasetError(f"unknown dataset format {format!r} (expected one of {sorted(_READERS)})")
    if split not in SPLITS:
        raise DatasetError(f"unknown split {split!r} (expected one of {list(SPLITS)})")
    if unicode not in UNICODE_FORMS:
        raise DatasetError(f"unknown unicode form {unicode!r} (expected one of {list(UNICODE_FORMS)})")
    reader, allowed = _READERS[format]
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise DatasetError(
            f"unknown option(s) {unknown} for format {format!r} (expected some of {sorted(allowed)})"
        )
    raw = reader(Path(path), split, **options)
    if qrels_path is not None:
        raw.qrels = _read_trec_qrels(Path(qrels_path))
        raw.notes.append(f"judgments from TREC qrels file {Path(qrels_path).name}")
    if grade_map is None:
        grade_map = raw.default_grade_map
    _normalise_text(raw, unicode)
    return _assemble(raw, split, grade_map)


# NFC by default: the same words typed on two systems (é as one code point or as e + U+0301)
# are then the same text, with the same cache keys, tokens and scores; "raw" keeps the bytes.
UNICODE_FORMS = ("nfc", "raw")


def _normalise_text(raw: _Raw, form: str) -> None:
    if form == "raw":
        raw.notes.append("text kept as read (dataset.unicode: raw, no Unicode normalisation)")
        return
    nfc = functools.partial(unicodedata.normalize, "NFC")
    docs = [(i, nfc(title), nfc(text), language) for i, title, text, language in raw.docs]
    queries = [(i, nfc(text), *rest) for i, text, *rest in raw.queries]
    changed_docs = sum(a != b for a, b in zip(docs, raw.docs))
    changed_queries = sum(a != b for a, b in zip(queries, raw.queries))
    raw.docs, raw.queries = docs, queries
    raw.notes.append(f"text normalised to Unicode NFC (dataset.unicode: nfc): {changed_docs} documents and "
                     f"{changed_queries} queries changed")


def content_hash(ds: Dataset) -> str:
    """sha256 over corpus, queries and qrels, independent of row order (name and notes excluded)."""
    h = hashlib.sha256(b"retbench-dataset-v1\n")
    for label, schema in _TABLES:
        frame: pl.DataFrame = getattr(ds, label)
        columns = list(schema)
        h.update(f"{label} {','.join(columns)}\n".encode())
        # Sorting on every column (ids first) makes the order total even for hand-made frames.
        for row in frame.select(columns).sort(columns).iter_rows():
            h.update(json.dumps(row, ensure_ascii=False, separators=(",", ":")).encode())
            h.update(b"\n")
    for label, frame in ds.extra_tables():
        h.update(f"{label}\n".encode())
        for row in frame.sort(frame.columns).iter_rows():
            h.update(json.dumps(row, ensure_ascii=False, separators=(",", ":")).encode() + b"\n")
    return h.hexdigest()


def save_dataset(ds: Dataset, directory: str | Path) -> Path:
    """Write corpus/queries/qrels.parquet and dataset.json (name, notes, content hash, and the
    sha256 of each table file, which the loader checks instead of re-hashing every row)."""
    from tasks.store.files import file_sha256

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tables = [(label, getattr(ds, label)) for label, _ in _TABLES] + ds.extra_tables()
    for label, frame in tables:
        _write_atomically(directory / f"{label}.parquet", frame.write_parquet)
    meta = {"name": ds.name, "notes": list(ds.notes), "content_hash": content_hash(ds),
            "file_sha256": {f"{label}.parquet": file_sha256(directory / f"{label}.parquet") for label, _ in tables}}
    text = json.dumps(meta, ensure_ascii=False, indent=2) + "\n"
    # Written last: its hash then vouches for the three tables next to it.
    _write_atomically(directory / "dataset.json", lambda p: Path(p).write_text(text, encoding="utf-8"))
    return directory


def load_saved_dataset(directory: str | Path) -> Dataset:
    """Read what save_dataset wrote, checking columns and that the content hash still matches."""
    directory = Path(directory)
    meta_path = directory / "dataset.json"
    if not meta_path.is_file():
        raise DatasetError(f"{meta_path}: missing; expected a dataset saved by save_dataset")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DatasetError(f"{meta_path}: not readable JSON ({e})") from None
    frames = {}
    for label, schema in _TABLES:
        file = directory / f"{label}.parquet"
        if not file.is_file():
            raise DatasetError(f"{file}: missing; expected the {label} table of a saved dataset")
        frame = pl.read_parquet(file)
        missing = [c for c in schema if c not in frame.columns]
        if missing:
            raise DatasetError(f"{file}: missing columns {missing} (found {frame.columns})")
        for column, dtype in schema.items():
            if frame.schema[column] != dtype:
                raise DatasetError(f"{file}: column {column!r} has type {frame.schema[column]}, expected {dtype}")
        frames[label] = frame.select(list(schema))
    for label, schema in _EXTRA_TABLES:
        file = directory / f"{label}.parquet"
        if file.is_file():
            frames[label] = pl.read_parquet(file).select(list(schema)).cast(schema)
    keys = ("name", "notes", "content_hash")
    missing = [k for k in keys if k not in meta] if isinstance(meta, dict) else list(keys)
    if missing:
        raise DatasetError(f"{meta_path}: missing keys {missing}; expected what save_dataset writes")
    ds = Dataset(meta["name"], frames["corpus"], frames["queries"], frames["qrels"], tuple(meta["notes"]),
                 metadata=frames.get("metadata"), filters=frames.get("filters"))
    if not _files_match(directory, [f"{label}.parquet" for label in frames], meta.get("file_sha256")) \
            and content_hash(ds) != meta["content_hash"]:
        raise DatasetError(
            f"{directory}: tables do not match the content hash in dataset.json "
            "(changed after saving, or a save was interrupted); save the dataset again"
        )
    return ds


def _files_match(directory: Path, names: list[str], recorded: dict | None) -> bool:
    """The table files are the bytes save_dataset wrote (their sha256 is in dataset.json): then
    their rows are too, and the row-by-row content hash (a tenth of a second per 10,000
    documents, on every load) is not needed. False also when nothing was recorded (older saves)."""
    from tasks.store.files import file_sha256

    if not isinstance(recorded, dict) or set(recorded) != set(names):
        return False
    return all(file_sha256(directory / name) == recorded[name] for name in names)


# ---------------------------------------------------------------- validation


def _assemble(raw: _Raw, split: str, grade_map: dict[int, int] | None) -> Dataset:
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


def _map_grade(j: _Judgment, grade_map: dict[int, int] | None, max_grade: int | None) -> int:
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


# ---------------------------------------------------------------- line and field readers


def _lines(path: Path, what: str) -> Iterator[tuple[int, str]]:
    """Yield (line number, line) for non-blank lines; a BOM and CRLF endings are tolerated."""
    if not path.is_file():
        raise DatasetError(f"{path}: missing; expected {what}")
    with open(path, "rb") as f:
        for lineno, data in enumerate(f, 1):
            if lineno == 1 and data.startswith(codecs.BOM_UTF8):
                data = data[len(codecs.BOM_UTF8):]
            try:
                line = data.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DatasetError(
                    f"{path}:{lineno}: invalid UTF-8 at byte {e.start + 1} of the line; expected UTF-8 text"
                ) from None
            line = line.rstrip("\r\n")
            if line.strip():
                yield lineno, line


def _json_lines(path: Path, what: str) -> Iterator[tuple[str, dict]]:
    for lineno, line in _lines(path, what):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise DatasetError(
                f"{path}:{lineno}: malformed JSON ({e.msg} at column {e.colno}); expected one JSON object per line"
            ) from None
        if not isinstance(obj, dict):
            raise DatasetError(f"{path}:{lineno}: expected a JSON object, found {_json_type(obj)}")
        yield f"{path}:{lineno}", obj


def _json_type(value: Any) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    return names.get(type(value), "number")


def _str_field(obj: dict, key: str, where: str, *, default: str | None = None, nonempty: bool = False) -> str:
    """A string field; missing (or null) is an error unless a default is given."""
    value = obj.get(key)
    if value is None:
        if default is None:
            raise DatasetError(_absent(obj, key, where, "a string"))
        return default
    if not isinstance(value, str):
        raise DatasetError(f"{where}: field {key!r} must be a string, found {_json_type(value)} {value!r}")
    if nonempty and not value.strip():
        raise DatasetError(f"{where}: field {key!r} is empty; expected non-empty text")
    return value


def _absent(obj: dict, key: str, where: str, expected: str) -> str:
    if key in obj:  # present as JSON null: saying "missing" while listing it would confuse
        return f"{where}: field {key!r} is null; expected {expected}"
    return f"{where}: missing required field {key!r} (found fields {sorted(obj)})"


def _int_field(obj: dict, key: str, where: str) -> int:
    value = obj.get(key)
    if value is None:
        raise DatasetError(_absent(obj, key, where, "an integer"))
    # bool is an int subclass in Python; true/false are not grades.
    if isinstance(value, bool) or not isinstance(value, int):
        raise DatasetError(f"{where}: field {key!r} must be an integer, found {_json_type(value)} {value!r}")
    return value


def _parse_int(text: str, where: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise DatasetError(f"{where}: {what} must be an integer, found {text!r}") from None


class _Ids:
    """Refuses a second row with the same id, naming both lines."""

    def __init__(self) -> None:
        self.first: dict[str, str] = {}

    def add(self, id_: str, where: str) -> None:
        if any(c.isspace() for c in id_):
            # runs.trec and TREC qrels separate their fields by whitespace: such an id
            # would be split in two there, and `retbench eval` would refuse the run.
            raise DatasetError(
                f"{where}: id {id_!r} contains whitespace; expected an id without spaces, tabs or "
                f"line breaks (TREC run and qrels files cannot hold it), e.g. {'_'.join(id_.split())!r}"
            )
        if id_ in self.first:
            raise DatasetError(f"{where}: duplicate id {id_!r} (first at {self.first[id_]})")
        self.first[id_] = where


# ---------------------------------------------------------------- jsonl (the project's own)


def _read_jsonl(folder: Path, split: str, name: str | None = None) -> _Raw:
    corpus_file, queries_file, qrels_file = (folder / f for f in ("corpus.jsonl", "queries.jsonl", "qrels.jsonl"))
    metadata: dict[str, dict] = {}
    docs, detected = _jsonl_docs(corpus_file, "id", "corpus.jsonl with id, title?, text, language?, metadata?",
                                 metadata=metadata)
    fields = _metadata_fields(metadata)
    filters: dict[str, dict] = {}
    queries: list[tuple[str, str, str, str, str]] = []
    ids = _Ids()
    defaulted = {"language": 0, "split": 0}
    for where, obj in _json_lines(queries_file, "queries.jsonl with id, text, language?, category?, split?, filter?"):
        qid = _str_field(obj, "id", where, nonempty=True)
        ids.add(qid, where)
        if obj.get("filter") is not None:
            filters[qid] = parse_filter(obj["filter"], where, fields)
        text = _str_field(obj, "text", where, nonempty=True)
        if obj.get("language") is None:
            language = detect_language(text)
            defaulted["language"] += 1
        else:
            language = _str_field(obj, "language", where, nonempty=True)
        category = _str_field(obj, "category", where, default=DEFAULT_CATEGORY, nonempty=True)
        defaulted["split"] += obj.get("split") is None
        qsplit = _str_field(obj, "split", where, default=DEFAULT_SPLIT)
        if qsplit not in QUERY_SPLITS:
            raise DatasetError(
                f"{where}: query {qid!r} has split {qsplit!r}; expected one of {list(QUERY_SPLITS)}"
            )
        queries.append((qid, text, language, category, qsplit))
    qrels = []
    for where, obj in _json_lines(qrels_file, "qrels.jsonl with query_id, doc_id, grade"):
        qrels.append(
            _Judgment(
                _str_field(obj, "query_id", where, nonempty=True),
                _str_field(obj, "doc_id", where, nonempty=True),
                _int_field(obj, "grade", where),
                where,
            )
        )
    notes = []
    if detected:
        notes.append(f"{detected} documents without language: detected from script")
    if defaulted["language"]:
        notes.append(f"{defaulted['language']} queries without language: detected from script")
    if defaulted["split"]:
        notes.append(f"{defaulted['split']} queries without split: put in {DEFAULT_SPLIT!r}")
    return _Raw(
        name or folder.name, docs, queries, qrels, str(corpus_file), str(queries_file), notes,
        max_grade=JSONL_MAX_GRADE, metadata=metadata or None, filters=filters or None,
    )


def _jsonl_docs(path: Path, id_key: str, what: str, metadata: dict[str, dict] | None = None,
                extra_fields_are_metadata: bool = False) -> tuple[list[tuple[str, str, str, str]], int]:
    """Documents of a JSONL corpus (own format or BEIR); returns them and how many had no language.
    Their `metadata` objects (and, for BEIR, every field besides _id/title/text) go into `metadata`."""
    docs = []
    ids = _Ids()
    detected = 0
    for where, obj in _json_lines(path, what):
        doc_id = _str_field(obj, id_key, where, nonempty=True)
        ids.add(doc_id, where)
        title = _str_field(obj, "title", where, default="")
        text = _str_field(obj, "text", where)
        if not title.strip() and not text.strip():
            raise DatasetError(f"{where}: document {doc_id!r} has empty title and text; expected some text")
        if obj.get("language") is None:
            language = detect_language(f"{title} {text}")
            detected += 1
        else:
            language = _str_field(obj, "language", where, nonempty=True)
        docs.append((doc_id, title, text, language))
        if metadata is not None:
            # BEIR's metadata comes as published (nested values included): its scalar fields are kept.
            strict = not extra_fields_are_metadata
            fields = _metadata_field(obj.get("metadata"), where, strict)
            if extra_fields_are_metadata:
                extra = {k: v for k, v in obj.items() if k not in (id_key, "title", "text", "language", "metadata")}
                fields |= _metadata_field(extra, where, strict)
            if fields:
                metadata[doc_id] = fields
    return docs, detected


_SCALAR = (str, int, float, bool)


def _metadata_field(value: Any, where: str, strict: bool = True) -> dict:
    """A document's metadata: an object of scalar fields (strings, numbers, booleans); not strict:
    other values are left out."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        if not strict:
            return {}
        raise DatasetError(f"{where}: field 'metadata' must be an object, found {_json_type(value)}")
    if not strict:
        return {k: v for k, v in value.items() if isinstance(v, _SCALAR)}
    for key, item in value.items():
        if not isinstance(item, _SCALAR):
            raise DatasetError(f"{where}: metadata field {key!r} must be a string, number or boolean, "
                               f"found {_json_type(item)}")
    return dict(value)


def _metadata_fields(metadata: dict[str, dict]) -> set[str]:
    return {key for fields in metadata.values() for key in fields}


def known_fields(key: str, fields: set[str] | list[str]) -> str:
    """`known: a, b, c` for an error message, and `did you mean ...?` when one is close to a mistyped `key`."""
    if not fields:
        return "known: none: no document has metadata"
    close = difflib.get_close_matches(key, list(fields), n=1)
    return f"known: {', '.join(sorted(fields))}" + (f"; did you mean {close[0]!r}?" if close else "")


def parse_filter(value: Any, where: str, fields: set[str]) -> dict:
    """A query's filter: {field: value} (equality) or {field: [values]} (membership), every field
    one that some document's metadata has; all conditions must hold."""
    if not isinstance(value, dict) or not value:
        raise DatasetError(f"{where}: field 'filter' must be a non-empty object of metadata conditions, "
                           f"found {_json_type(value)} {value!r}")
    for key, wanted in value.items():
        if key not in fields:
            raise DatasetError(f"{where}: filter field {key!r} is not a metadata field of any document "
                               f"({known_fields(key, fields)})")
        values = wanted if isinstance(wanted, list) else [wanted]
        if not values or not all(isinstance(v, _SCALAR) for v in values):
            raise DatasetError(f"{where}: filter field {key!r} must be a string, number or boolean, or a non-empty "
                               f"list of them, found {wanted!r}")
    return dict(value)


# ---------------------------------------------------------------- BEIR


def _read_beir(folder: Path, split: str, name: str | None = None) -> _Raw:
    corpus_file, queries_file = folder / "corpus.jsonl", folder / "queries.jsonl"
    metadata: dict[str, dict] = {}
    docs, _ = _jsonl_docs(corpus_file, "_id", "BEIR corpus.jsonl with _id, title, text", metadata=metadata,
                          extra_fields_are_metadata=True)
    qrels_dir = folder / "qrels"
    if split == "all":
        qrels_files = sorted(qrels_dir.glob("*.tsv"))
        if not qrels_files:
            raise DatasetError(f"{qrels_dir}: no qrels files; expected qrels/<split>.tsv (e.g. test.tsv)")
    else:
        qrels_files = [qrels_dir / f"{split}.tsv"]
        if not qrels_files[0].is_file():
            present = sorted(p.name for p in qrels_dir.glob("*.tsv"))
            raise DatasetError(f"{qrels_files[0]}: missing; expected the {split!r} qrels (found {present})")
    qrels: list[_Judgment] = []
    split_of: dict[str, tuple[str, str]] = {}  # query id -> (split, where first judged)
    for file in qrels_files:
        for j in _read_beir_qrels(file):
            first = split_of.setdefault(j.query_id, (file.stem, j.where))
            if first[0] != file.stem:
                raise DatasetError(
                    f"{j.where}: query {j.query_id!r} is also judged in split {first[0]!r} "
                    f"({first[1]}); expected each query in one split"
                )
            qrels.append(j)
    queries = []
    ids = _Ids()
    for where, obj in _json_lines(queries_file, "BEIR queries.jsonl with _id, text"):
        qid = _str_field(obj, "_id", where, nonempty=True)
        ids.add(qid, where)
        text = _str_field(obj, "text", where, nonempty=True)
        # Queries judged in no file read get DEFAULT_SPLIT; with BEIR qrels they are then dropped.
        qsplit = split_of.get(qid, (DEFAULT_SPLIT, ""))[0]
        queries.append((qid, text, detect_language(text), DEFAULT_CATEGORY, qsplit))
    notes = ["languages detected from script"]
    return _Raw(name or folder.name, docs, queries, qrels, str(corpus_file), str(queries_file), notes,
                metadata=metadata or None)


def _read_beir_qrels(path: Path) -> Iterator[_Judgment]:
    header = ["query-id", "corpus-id", "score"]
    lines = _lines(path, "BEIR qrels with header query-id, corpus-id, score")
    first = next(lines, None)
    if first is None:
        return
    lineno, line = first
    if [f.strip() for f in line.split("\t")] != header:
        raise DatasetError(f"{path}:{lineno}: expected header 'query-id<TAB>corpus-id<TAB>score', found {line!r}")
    for lineno, line in lines:
        where = f"{path}:{lineno}"
        fields = [f.strip() for f in line.split("\t")]
        if len(fields) != 3:
            raise DatasetError(
                f"{where}: expected 3 tab-separated fields query-id, corpus-id, score; found {len(fields)}"
            )
        yield _Judgment(fields[0], fields[1], _parse_int(fields[2], where, "score"), where)


# ---------------------------------------------------------------- TREC qrels


def _read_trec_qrels(path: Path) -> list[_Judgment]:
    qrels = []
    for lineno, line in _lines(path, "TREC qrels (qid iter docno rel)"):
        where = f"{path}:{lineno}"
        fields = line.split()
        if len(fields) != 4:
            raise DatasetError(
                f"{where}: expected 4 whitespace-separated fields qid iter docno rel; found {len(fields)}"
            )
        qrels.append(_Judgment(fields[0], fields[2], _parse_int(fields[3], where, "rel"), where))
    return qrels


# ---------------------------------------------------------------- Cranfield (SMART)


def _read_cranfield(folder: Path, split: str, name: str | None = None) -> _Raw:
    if split == "dev":
        raise DatasetError(
            f"{folder}: Cranfield has no dev split (all 225 queries are test queries); "
            "expected split 'test' or 'all'"
        )
    corpus_file, queries_file, qrels_file = folder / "cran.all.1400", folder / "cran.qry", folder / "cran.qrels"
    docs = []
    empty = []
    stray = []
    ids = _Ids()
    for where, number, fields, strays in _smart_records(corpus_file, "cran.all.1400 (SMART .I/.T/.A/.B/.W)"):
        doc_id = str(number)
        ids.add(doc_id, where)
        title, text = _smart_text(fields.get(".T", [])), _smart_text(fields.get(".W", []))
        if not title and not text:
            empty.append(doc_id)
        if strays:
            stray.append(doc_id)
        docs.append((doc_id, title, text, "en"))
    queries = []
    for position, (where, _, fields, _) in enumerate(_smart_records(queries_file, "cran.qry (SMART .I/.W)"), 1):
        text = _smart_text(fields.get(".W", []))
        if not text:
            raise DatasetError(f"{where}: query at position {position} has no .W text; expected the query text")
        # cran.qrels numbers queries by position in cran.qry, not by their .I number.
        queries.append((str(position), text, "en", DEFAULT_CATEGORY, "test"))
    qrels = []
    for lineno, line in _lines(qrels_file, "cran.qrels (query_pos doc_id grade)"):
        where = f"{qrels_file}:{lineno}"
        fields = line.split()
        if len(fields) != 3:
            raise DatasetError(f"{where}: expected 3 fields query_pos doc_id grade; found {len(fields)}")
        qrels.append(_Judgment(fields[0], fields[1], _parse_int(fields[2], where, "grade"), where))
    notes = [
        f"cranfield queries renumbered 1..{len(queries)} by position in cran.qry (its .I numbers "
        "have gaps; cran.qrels uses positions)",
    ]
    if empty:
        # Kept so ids and counts match the published collection (doc 995 is even judged);
        # they produce no chunks and so are never retrieved.
        notes.append(f"cranfield documents with no title or text, kept: {', '.join(empty)}")
    if stray:
        notes.append(
            f"cranfield documents with stray field markers inside the abstract (text kept): {', '.join(stray)}"
        )
    return _Raw(
        name or "cranfield", docs, queries, qrels, str(corpus_file), str(queries_file), notes,
        default_grade_map=CRANFIELD_GRADE_MAP,
    )


_SMART_FIELDS = (".T", ".A", ".B", ".W")


def _smart_records(path: Path, what: str) -> Iterator[tuple[str, int, dict[str, list[str]], int]]:
    """Yield (where, .I number, field -> lines, stray marker count) for each SMART record."""
    record: dict[str, list[str]] | None = None
    field = None
    where, number, strays = "", 0, 0
    for lineno, line in _lines(path, what):
        marker = line.strip()
        if marker.split()[0] == ".I":
            if record is not None:
                yield where, number, record, strays
            parts = marker.split()
            where = f"{path}:{lineno}"
            if len(parts) != 2 or not parts[1].isdigit():
                raise DatasetError(f"{where}: expected '.I <number>', found {marker!r}")
            record, field, number, strays = {}, None, int(parts[1]), 0
        elif marker in _SMART_FIELDS:
            if record is None:
                raise DatasetError(f"{path}:{lineno}: field {marker} before the first .I record")
            if ".W" in record or marker in record:
                # The abstract runs to the next .I: a marker inside it is a corruption of the
                # collection (docs 240, 576, 578), and the lines after it still belong to the text.
                strays += 1
            else:
                record[marker] = []
                field = marker
        else:
            if record is None or field is None:
                raise DatasetError(f"{path}:{lineno}: text outside a field; expected a .I/.T/.A/.B/.W marker")
            record[field].append(line)
    if record is not None:
        yield where, number, record, strays


def _smart_text(lines: list[str]) -> str:
    # SMART wraps lines at a fixed width: the line breaks carry no meaning.
    return " ".join(part.strip() for part in lines if part.strip())


# ---------------------------------------------------------------- XQuAD


def _read_xquad(
    folder: Path, split: str, name: str | None = None, query_language: str = "en", doc_language: str = "en",
    dev_fraction: float | None = None,
) -> _Raw:
    for option, value in (("query_language", query_language), ("doc_language", doc_language)):
        if value not in ("en", "hi"):
            raise DatasetError(f"xquad option {option}={value!r}; expected 'en' or 'hi'")
    if dev_fraction is not None and not (isinstance(dev_fraction, (int, float)) and 0 < dev_fraction < 1):
        raise DatasetError(f"xquad option dev_fraction={dev_fraction!r}; expected a number between 0 and 1 (exclusive)")
    if split == "dev" and dev_fraction is None:
        raise DatasetError(f"{folder}: XQuAD has no dev split (all questions are test queries); expected split 'test' "
                           "or 'all', or the option dev_fraction (e.g. 0.5) to make one")
    doc_file = folder / f"xquad.{doc_language}.json"
    query_file = folder / f"xquad.{query_language}.json"
    docs = []
    doc_of_question: dict[str, str] = {}
    doc_of_context: dict[str, str] = {}
    for a, p, _, context, qas in _xquad_paragraphs(doc_file):
        # Ids by position are shared across languages: XQuAD's files are parallel.
        if context not in doc_of_context:
            doc_of_context[context] = f"{a}-{p}"
            docs.append((f"{a}-{p}", "", context, doc_language))
        for _, qa in qas:
            doc_of_question[qa["id"]] = doc_of_context[context]
    queries = []
    qrels = []
    ids = _Ids()
    for _, _, title, _, qas in _xquad_paragraphs(query_file):
        for where, qa in qas:
            qid = f"{qa['id']}-{query_language}"
            ids.add(qid, where)
            if qa["id"] not in doc_of_question:
                raise DatasetError(f"{where}: question id {qa['id']!r} is not in {doc_file}; expected parallel files")
            queries.append((qid, qa["question"], query_language, title, _xquad_split(qa["id"], dev_fraction)))
            qrels.append(_Judgment(qid, doc_of_question[qa["id"]], 1, where))
    notes = [
        f"xquad {query_language}->{doc_language}: documents are the unique paragraphs of "
        f"xquad.{doc_language}.json (no title), each question's one relevant document is its paragraph"
    ]
    if dev_fraction is not None:
        notes.append(f"xquad dev/test split: a question is dev when sha256(its XQuAD id) read as a fraction is below "
                     f"{dev_fraction} (the id is shared by the languages: a question and its translation share a split)")
    return _Raw(
        name or f"xquad-{query_language}-{doc_language}", docs, queries, qrels, str(doc_file), str(query_file), notes
    )


def _xquad_split(question_id: str, dev_fraction: float | None) -> str:
    """"dev" for a stable share of the questions, "test" for the rest (all "test" without a fraction).
    Hashing the language-free id keeps a question and its translations in the same split."""
    if dev_fraction is None:
        return "test"
    import hashlib

    share = int(hashlib.sha256(question_id.encode("utf-8")).hexdigest()[:8], 16) / 2**32
    return "dev" if share < dev_fraction else "test"


def _xquad_paragraphs(path: Path) -> Iterator[tuple[int, int, str, str, list[tuple[str, dict]]]]:
    """Yield (article index, paragraph index, title, context, [(where, qa)]) from SQuAD v1.1 JSON.

    A JSON tree has no useful line per record, so `where` is the JSON path inside the file.
    """
    data = _read_json(path, "SQuAD v1.1 JSON (data[].paragraphs[].context/qas)")
    articles = data.get("data") if isinstance(data, dict) else None
    if not isinstance(articles, list):
        raise DatasetError(f"{path}: expected a JSON object with a 'data' array (SQuAD v1.1)")
    for a, article in enumerate(articles):
        where = f"{path}: data[{a}]"
        if not isinstance(article, dict):
            raise DatasetError(f"{where}: expected an object, found {_json_type(article)}")
        title = _str_field(article, "title", where, nonempty=True)
        paragraphs = article.get("paragraphs")
        if not isinstance(paragraphs, list):
            raise DatasetError(f"{where}: field 'paragraphs' must be an array, found {_json_type(paragraphs)}")
        for p, paragraph in enumerate(paragraphs):
            pwhere = f"{where}.paragraphs[{p}]"
            if not isinstance(paragraph, dict):
                raise DatasetError(f"{pwhere}: expected an object, found {_json_type(paragraph)}")
            context = _str_field(paragraph, "context", pwhere, nonempty=True)
            qas = paragraph.get("qas")
            if not isinstance(qas, list):
                raise DatasetError(f"{pwhere}: field 'qas' must be an array, found {_json_type(qas)}")
            checked = []
            for i, qa in enumerate(qas):
                qwhere = f"{pwhere}.qas[{i}]"
                if not isinstance(qa, dict):
                    raise DatasetError(f"{qwhere}: expected an object, found {_json_type(qa)}")
                _str_field(qa, "id", qwhere, nonempty=True)
                _str_field(qa, "question", qwhere, nonempty=True)
                checked.append((f"{qwhere} (id {qa['id']!r})", qa))
            yield a, p, title, context, checked


def _read_json(path: Path, what: str) -> Any:
    if not path.is_file():
        raise DatasetError(f"{path}: missing; expected {what}")
    data = path.read_bytes()
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8):]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise DatasetError(f"{path}:{line}: invalid UTF-8; expected UTF-8 text") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise DatasetError(f"{path}:{e.lineno}: malformed JSON ({e.msg} at column {e.colno})") from None


# ---------------------------------------------------------------- Glasgow (NPL, CISI, MED)

# The three Glasgow collections share nothing but binary relevance: each is named by its files.
GLASGOW_FILES = {
    "npl": ("doc-text", "query-text", "rlv-ass"),
    "cisi": ("CISI.ALL", "CISI.QRY", "CISI.REL"),
    "med": ("MED.ALL", "MED.QRY", "MED.REL"),
}
# Every listed pair is relevant; nothing is judged non-relevant, so the scale is 0..1.
GLASGOW_MAX_GRADE = 1
_GLASGOW_DOC_FIELDS = {"cisi": (".T", ".A", ".B", ".W", ".X", ".K", ".C"), "med": (".W",)}
_GLASGOW_QUERY_FIELDS = {"cisi": (".T", ".A", ".B", ".W"), "med": (".W",)}
_NUMBER = re.compile(r"[0-9]+")


def _read_glasgow(folder: Path, split: str, name: str | None = None, collection: str | None = None) -> _Raw:
    collection = _glasgow_collection(folder, collection)
    if split == "dev":
        raise DatasetError(
            f"{folder}: the Glasgow {collection.upper()} collection has no dev split (all its queries "
            "are test queries); expected split 'test' or 'all'"
        )
    corpus_file, queries_file, qrels_file = (folder / f for f in GLASGOW_FILES[collection])
    if collection == "npl":
        docs, queries, qrels, notes = _read_npl(corpus_file, queries_file, qrels_file)
    else:
        docs, queries, qrels, notes = _read_glasgow_smart(collection, corpus_file, queries_file, qrels_file)
    judged = {j.query_id for j in qrels}
    unjudged = [q[0] for q in queries if q[0] not in judged]
    if unjudged:
        # A property of the published collection (CISI: 36 of 112), not a reading error.
        notes.append(
            f"{collection}: {len(unjudged)} of {len(queries)} queries in {queries_file.name} have no "
            f"judgments in {qrels_file.name}: {_id_list(unjudged)}"
        )
    if collection == "med":
        notes.append(f"med: binary relevance from the rel column of {qrels_file.name} (1 relevant, 0 not)")
    else:
        notes.append(f"{collection}: binary relevance, every pair listed in {qrels_file.name} graded 1")
    return _Raw(
        name or collection, docs, queries, qrels, str(corpus_file), str(queries_file), notes,
        max_grade=GLASGOW_MAX_GRADE,
    )


def _glasgow_collection(folder: Path, collection: str | None) -> str:
    """The collection named by the option, else the only one whose files are in `folder`."""
    if collection is not None:
        if collection not in GLASGOW_FILES:
            raise DatasetError(f"glasgow option collection={collection!r}; expected one of {list(GLASGOW_FILES)}")
        return collection
    present = [c for c, files in GLASGOW_FILES.items() if any((folder / f).is_file() for f in files)]
    if len(present) == 1:
        return present[0]
    if present:
        raise DatasetError(
            f"{folder}: holds files of several Glasgow collections ({', '.join(present)}); "
            "expected option collection to say which"
        )
    expected = "; ".join(f"{c}: {', '.join(files)}" for c, files in GLASGOW_FILES.items())
    subfolders = sorted(p.name for p in folder.glob("*") if p.is_dir() and p.name in GLASGOW_FILES)
    hint = f" (it has subfolders {', '.join(subfolders)}: point path at one of them)" if subfolders else ""
    raise DatasetError(f"{folder}: no Glasgow collection files{hint}; expected the files of one of {expected}")


# What both Glasgow readers return: docs, queries, judgments (grade 1 unless the file says) and notes.
_GlasgowRows = tuple[list[tuple[str, str, str, str]], list[tuple[str, str, str, str, str]], list[_Judgment], list[str]]


def _read_npl(corpus_file: Path, queries_file: Path, qrels_file: Path) -> _GlasgowRows:
    docs = []
    empty = []
    ids = _Ids()
    for where, doc_id, body in _npl_texts(corpus_file, "NPL doc-text (records: id line, text lines, '/' line)", "document id"):
        ids.add(doc_id, where)
        text = _smart_text(body)
        if not text:
            empty.append(doc_id)
        docs.append((doc_id, "", text, "en"))
    queries = []
    ids = _Ids()
    for where, query_id, body in _npl_texts(queries_file, "NPL query-text (records: id line, text lines, '/' line)", "query id"):
        ids.add(query_id, where)
        text = _smart_text(body)
        if not text:
            raise DatasetError(f"{where}: query {query_id!r} has no text; expected text lines before '/'")
        queries.append((query_id, text, "en", DEFAULT_CATEGORY, "test"))
    qrels = []
    ids = _Ids()
    for record in _slash_records(qrels_file, "NPL rlv-ass (records: query id line, relevant doc ids, '/' line)"):
        lineno, first = record[0]
        where = f"{qrels_file}:{lineno}"
        query_id = _npl_record_id(first, where, "query id")
        ids.add(query_id, where)
        if len(record) == 1:
            raise DatasetError(f"{where}: query {query_id!r} lists no documents; expected relevant doc ids before '/'")
        for doc_lineno, line in record[1:]:
            # The query id is not on this line: say where its record starts.
            doc_where = f"{qrels_file}:{doc_lineno} (record of query {query_id} from line {lineno})"
            for token in line.split():
                qrels.append(_Judgment(query_id, _glasgow_number(token, doc_where, "doc id"), 1, doc_where))
    notes = ["npl documents have no title (the collection has none)"]
    if empty:
        notes.append(f"npl documents with no text, kept: {_id_list(empty)}")
    return docs, queries, qrels, notes


def _npl_texts(path: Path, what: str, id_what: str) -> Iterator[tuple[str, str, list[str]]]:
    """Yield (where, id, text lines) for each record of an NPL doc-text or query-text file."""
    for record in _slash_records(path, what):
        lineno, first = record[0]
        where = f"{path}:{lineno}"
        record_id = _npl_record_id(first, where, id_what)
        for body_lineno, line in record[1:]:
            # No text line in NPL is a bare number, but every id line is: one here means the
            # '/' that should close this record is missing and two records ran together.
            if _NUMBER.fullmatch(line.strip()):
                raise DatasetError(
                    f"{path}:{body_lineno}: a line holding only the number {line.strip()} inside record "
                    f"{record_id!r} (started at line {lineno}); expected text, or a '/' line before the next id"
                )
        yield where, record_id, [line for _, line in record[1:]]


def _slash_records(path: Path, what: str) -> Iterator[list[tuple[int, str]]]:
    """Yield each record of an NPL file as [(line number, line)]: the lines up to one holding only '/'."""
    record: list[tuple[int, str]] = []
    for lineno, line in _lines(path, what):
        if line.strip() == "/":
            if not record:
                raise DatasetError(f"{path}:{lineno}: '/' closes an empty record; expected an id line before it")
            yield record
            record = []
        else:
            record.append((lineno, line))
    if record:
        raise DatasetError(
            f"{path}:{record[0][0]}: record {record[0][1].strip()!r} is not closed at the end of the file; "
            "expected a line holding only '/' after it"
        )


def _npl_record_id(line: str, where: str, what: str) -> str:
    parts = line.split()
    if len(parts) != 1:
        raise DatasetError(f"{where}: expected the {what} alone on the first line of a record, found {line.strip()!r}")
    return _glasgow_number(parts[0], where, what)


def _glasgow_number(token: str, where: str, what: str) -> str:
    """An id as the collection writes it, checked to be a decimal number; leading zeros dropped
    so that '0042' in one file and '42' in another name the same record."""
    if not _NUMBER.fullmatch(token):
        raise DatasetError(f"{where}: {what} must be a number, found {token!r}")
    return str(int(token))


def _read_glasgow_smart(collection: str, corpus_file: Path, queries_file: Path, qrels_file: Path) -> _GlasgowRows:
    docs = []
    ids = _Ids()
    empty = []
    extra = 0  # documents with .K/.C, which CISI's description does not even mention
    for where, number, fields in _glasgow_smart_records(
        corpus_file, _GLASGOW_DOC_FIELDS[collection], f"{corpus_file.name} (SMART .I records)"
    ):
        doc_id = str(number)
        ids.add(doc_id, where)
        title, text = _smart_text(fields.get(".T", [])), _smart_text(fields.get(".W", []))
        if not title and not text:
            empty.append(doc_id)
        extra += ".K" in fields or ".C" in fields
        docs.append((doc_id, title, text, "en"))
    queries = []
    ids = _Ids()
    titled = []
    for where, number, fields in _glasgow_smart_records(
        queries_file, _GLASGOW_QUERY_FIELDS[collection], f"{queries_file.name} (SMART .I records)"
    ):
        query_id = str(number)
        ids.add(query_id, where)
        title, text = _smart_text(fields.get(".T", [])), _smart_text(fields.get(".W", []))
        if not text:
            raise DatasetError(f"{where}: query {query_id!r} has no .W text; expected the query text")
        if title:
            # These CISI queries are papers (title, authors, abstract); the title says most
            # about what is wanted, so it leads the query text.
            titled.append(query_id)
            text = f"{title} {text}"
        queries.append((query_id, text, "en", DEFAULT_CATEGORY, "test"))
    qrels = _read_glasgow_rel(collection, qrels_file)
    if collection == "cisi":
        notes = [
            "cisi documents: title (.T) and abstract (.W) indexed; authors (.A), source (.B), "
            f"cross-references (.X) and keywords/classes (.K/.C, in {extra} documents) are not",
        ]
        if titled:
            notes.append(f"cisi queries with a title (.T), text = title + .W, authors dropped: {_id_list(titled)}")
    else:
        notes = [f"{collection} documents have no title (only .W)"]
    if empty:
        notes.append(f"{collection} documents with no title or text, kept: {_id_list(empty)}")
    return docs, queries, qrels, notes


def _glasgow_smart_records(path: Path, fields: tuple[str, ...], what: str) -> Iterator[tuple[str, int, dict[str, list[str]]]]:
    """Yield (where, .I number, field -> lines) for each SMART record; a field runs to the next tag.

    Unlike Cranfield's files, a repeated tag is ordinary here (CISI writes .A once per author),
    so its lines join the field; a tag outside `fields` is refused rather than read as text.
    """
    record: dict[str, list[str]] | None = None
    field = None
    where, number = "", 0
    tags = ", ".join((".I", *fields))
    for lineno, line in _lines(path, what):
        marker = line.strip()
        parts = marker.split()
        if parts[0] == ".I":
            if record is not None:
                yield where, number, record
            where = f"{path}:{lineno}"
            if len(parts) != 2 or not _NUMBER.fullmatch(parts[1]):
                raise DatasetError(f"{where}: expected '.I <number>', found {marker!r}")
            record, field, number = {}, None, int(parts[1])
        elif re.fullmatch(r"\.[A-Z]", marker):
            if marker not in fields:
                raise DatasetError(f"{path}:{lineno}: unknown field tag {marker}; expected one of {tags}")
            if record is None:
                raise DatasetError(f"{path}:{lineno}: field {marker} before the first .I record")
            record.setdefault(marker, [])
            field = marker
        else:
            if record is None or field is None:
                raise DatasetError(f"{path}:{lineno}: text outside a field; expected a tag first ({tags})")
            record[field].append(line)
    if record is not None:
        yield where, number, record


def _read_glasgow_rel(collection: str, path: Path) -> list[_Judgment]:
    """CISI.REL: `qid docid 0 0.0` (every listed pair relevant); MED.REL: TREC `qid 0 docid rel`."""
    layout = "qid docid 0 0.0" if collection == "cisi" else "qid 0 docid rel"
    qrels = []
    for lineno, line in _lines(path, f"{path.name} ({layout})"):
        where = f"{path}:{lineno}"
        fields = line.split()
        if len(fields) != 4:
            raise DatasetError(f"{where}: expected 4 whitespace-separated fields {layout!r}; found {len(fields)}")
        query_id = _glasgow_number(fields[0], where, "query id")
        if collection == "cisi":
            doc_id, grade = _glasgow_number(fields[1], where, "doc id"), 1
            # The last two columns are constant (0, 0.0) and carry no grade; checked so that a
            # shifted or garbled line is not read as a judgment.
            _parse_int(fields[2], where, "third field")
            try:
                float(fields[3])
            except ValueError:
                raise DatasetError(f"{where}: fourth field must be a number, found {fields[3]!r}") from None
        else:
            doc_id, grade = _glasgow_number(fields[2], where, "doc id"), _parse_int(fields[3], where, "rel")
        qrels.append(_Judgment(query_id, doc_id, grade, where))
    return qrels


def _id_list(ids: list[str], limit: int = 40) -> str:
    shown = ", ".join(ids[:limit])
    return shown + (f" ... ({len(ids)} in all)" if len(ids) > limit else "")


# ---------------------------------------------------------------- files


def _write_atomically(target: Path, write: Callable[[str], Any]) -> None:
    """Write via a temp file in the same folder, fsync and os.replace (tasks.store.files.atomic_write),
    so a reader never sees half a file."""
    from tasks.store.files import atomic_write

    atomic_write(target, write)


_READERS: dict[str, tuple[Callable[..., _Raw], set[str]]] = {
    "jsonl": (_read_jsonl, {"name"}),
    "beir": (_read_beir, {"name"}),
    "cranfield": (_read_cranfield, {"name"}),
    "xquad": (_read_xquad, {"name", "query_language", "doc_language", "dev_fraction"}),
    "glasgow": (_read_glasgow, {"name", "collection"}),
}
