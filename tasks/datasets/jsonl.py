"""The project's own format: a folder of corpus.jsonl, queries.jsonl and qrels.jsonl, grades 0..3;
documents may carry metadata and queries a filter on it."""
from __future__ import annotations

from pathlib import Path

from retbench.tasks.datasets.errors import DatasetError
from retbench.tasks.datasets.lines import UniqueIds, int_field, json_lines, located, str_field
from retbench.tasks.datasets.metadata import metadata_field, metadata_fields, parse_filter
from retbench.tasks.datasets.model import DEFAULT_CATEGORY, DEFAULT_SPLIT, Judgment, QUERY_SPLITS, RawCollection
from retbench.tasks.datasets.reader import FormatReader
from retbench.tasks.language import detect_language

JSONL_MAX_GRADE = 3


def _read_jsonl(folder: Path, split: str, name: str | None = None) -> RawCollection:
    # Each file may be gzip-compressed (corpus.jsonl.gz); messages name the file read.
    corpus_file, queries_file, qrels_file = (located(folder / f) or folder / f
                                             for f in ("corpus.jsonl", "queries.jsonl", "qrels.jsonl"))
    metadata: dict[str, dict] = {}
    docs, detected = jsonl_docs(corpus_file, "id", "corpus.jsonl with id, title?, text, language?, metadata?",
                                 metadata=metadata)
    fields = metadata_fields(metadata)
    filters: dict[str, dict] = {}
    queries: list[tuple[str, str, str, str, str]] = []
    ids = UniqueIds()
    defaulted = {"language": 0, "split": 0}
    for where, obj in json_lines(queries_file, "queries.jsonl with id, text, language?, category?, split?, filter?"):
        qid = str_field(obj, "id", where, nonempty=True)
        ids.add(qid, where)
        if obj.get("filter") is not None:
            filters[qid] = parse_filter(obj["filter"], where, fields)
        text = str_field(obj, "text", where, nonempty=True)
        if obj.get("language") is None:
            language = detect_language(text)
            defaulted["language"] += 1
        else:
            language = str_field(obj, "language", where, nonempty=True)
        category = str_field(obj, "category", where, default=DEFAULT_CATEGORY, nonempty=True)
        defaulted["split"] += obj.get("split") is None
        qsplit = str_field(obj, "split", where, default=DEFAULT_SPLIT)
        if qsplit not in QUERY_SPLITS:
            raise DatasetError(
                f"{where}: query {qid!r} has split {qsplit!r}; expected one of {list(QUERY_SPLITS)}"
            )
        queries.append((qid, text, language, category, qsplit))
    qrels = []
    for where, obj in json_lines(qrels_file, "qrels.jsonl with query_id, doc_id, grade"):
        qrels.append(
            Judgment(
                str_field(obj, "query_id", where, nonempty=True),
                str_field(obj, "doc_id", where, nonempty=True),
                int_field(obj, "grade", where),
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
    return RawCollection(
        name or folder.name, docs, queries, qrels, str(corpus_file), str(queries_file), notes,
        max_grade=JSONL_MAX_GRADE, metadata=metadata or None, filters=filters or None,
    )


def jsonl_docs(path: Path, id_key: str, what: str, metadata: dict[str, dict] | None = None,
                extra_fields_are_metadata: bool = False) -> tuple[list[tuple[str, str, str, str]], int]:
    """Documents of a JSONL corpus (own format or BEIR); returns them and how many had no language.
    Their `metadata` objects (and, for BEIR, every field besides _id/title/text) go into `metadata`."""
    docs = []
    ids = UniqueIds()
    detected = 0
    for where, obj in json_lines(path, what):
        doc_id = str_field(obj, id_key, where, nonempty=True)
        ids.add(doc_id, where)
        title = str_field(obj, "title", where, default="")
        text = str_field(obj, "text", where)
        if not title.strip() and not text.strip():
            raise DatasetError(f"{where}: document {doc_id!r} has empty title and text; expected some text")
        if obj.get("language") is None:
            language = detect_language(f"{title} {text}")
            detected += 1
        else:
            language = str_field(obj, "language", where, nonempty=True)
        docs.append((doc_id, title, text, language))
        if metadata is not None:
            # BEIR's metadata comes as published (nested values included): its scalar fields are kept.
            strict = not extra_fields_are_metadata
            fields = metadata_field(obj.get("metadata"), where, strict)
            if extra_fields_are_metadata:
                extra = {k: v for k, v in obj.items() if k not in (id_key, "title", "text", "language", "metadata")}
                fields |= metadata_field(extra, where, strict)
            if fields:
                metadata[doc_id] = fields
    if not docs:
        # Said before anything else is checked against the corpus (a query's filter names fields
        # no document has when there is no document).
        raise DatasetError(f"{path}: no documents; expected at least one ({what})")
    return docs, detected


READER = FormatReader("jsonl", frozenset({"name"}), _read_jsonl)