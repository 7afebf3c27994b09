"""The Glasgow collections NPL, CISI and MED, each in its own files (NPL: '/'-closed records; CISI
and MED: SMART .I records); relevance is binary."""
from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from retbench.tasks.datasets.errors import DatasetError
from retbench.tasks.datasets.lines import UniqueIds, parse_int, smart_text, text_lines
from retbench.tasks.datasets.model import DEFAULT_CATEGORY, Judgment, RawCollection
from retbench.tasks.datasets.reader import FormatReader

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


def _read_glasgow(folder: Path, split: str, name: str | None = None, collection: str | None = None) -> RawCollection:
    collection = _glasgow_collection(folder, collection)
    if split in ("train", "dev"):
        raise DatasetError(
            f"{folder}: the Glasgow {collection.upper()} collection has no {split} split (all its queries "
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
    return RawCollection(
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
_GlasgowRows = tuple[list[tuple[str, str, str, str]], list[tuple[str, str, str, str, str]], list[Judgment], list[str]]


def _read_npl(corpus_file: Path, queries_file: Path, qrels_file: Path) -> _GlasgowRows:
    docs = []
    empty = []
    ids = UniqueIds()
    for where, doc_id, body in _npl_texts(corpus_file, "NPL doc-text (records: id line, text lines, '/' line)", "document id"):
        ids.add(doc_id, where)
        text = smart_text(body)
        if not text:
            empty.append(doc_id)
        docs.append((doc_id, "", text, "en"))
    queries = []
    ids = UniqueIds()
    for where, query_id, body in _npl_texts(queries_file, "NPL query-text (records: id line, text lines, '/' line)", "query id"):
        ids.add(query_id, where)
        text = smart_text(body)
        if not text:
            raise DatasetError(f"{where}: query {query_id!r} has no text; expected text lines before '/'")
        queries.append((query_id, text, "en", DEFAULT_CATEGORY, "test"))
    qrels = []
    ids = UniqueIds()
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
                qrels.append(Judgment(query_id, _glasgow_number(token, doc_where, "doc id"), 1, doc_where))
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
    for lineno, line in text_lines(path, what):
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
    ids = UniqueIds()
    empty = []
    extra = 0  # documents with .K/.C, which CISI's description does not even mention
    for where, number, fields in _glasgow_smart_records(
        corpus_file, _GLASGOW_DOC_FIELDS[collection], f"{corpus_file.name} (SMART .I records)"
    ):
        doc_id = str(number)
        ids.add(doc_id, where)
        title, text = smart_text(fields.get(".T", [])), smart_text(fields.get(".W", []))
        if not title and not text:
            empty.append(doc_id)
        extra += ".K" in fields or ".C" in fields
        docs.append((doc_id, title, text, "en"))
    queries = []
    ids = UniqueIds()
    titled = []
    for where, number, fields in _glasgow_smart_records(
        queries_file, _GLASGOW_QUERY_FIELDS[collection], f"{queries_file.name} (SMART .I records)"
    ):
        query_id = str(number)
        ids.add(query_id, where)
        title, text = smart_text(fields.get(".T", [])), smart_text(fields.get(".W", []))
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
    for lineno, line in text_lines(path, what):
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


def _read_glasgow_rel(collection: str, path: Path) -> list[Judgment]:
    """CISI.REL: `qid docid 0 0.0` (every listed pair relevant); MED.REL: TREC `qid 0 docid rel`."""
    layout = "qid docid 0 0.0" if collection == "cisi" else "qid 0 docid rel"
    qrels = []
    for lineno, line in text_lines(path, f"{path.name} ({layout})"):
        where = f"{path}:{lineno}"
        fields = line.split()
        if len(fields) != 4:
            raise DatasetError(f"{where}: expected 4 whitespace-separated fields {layout!r}; found {len(fields)}")
        query_id = _glasgow_number(fields[0], where, "query id")
        if collection == "cisi":
            doc_id, grade = _glasgow_number(fields[1], where, "doc id"), 1
            # The last two columns are constant (0, 0.0) and carry no grade; checked so that a
            # shifted or garbled line is not read as a judgment.
            parse_int(fields[2], where, "third field")
            try:
                float(fields[3])
            except ValueError:
                raise DatasetError(f"{where}: fourth field must be a number, found {fields[3]!r}") from None
        else:
            doc_id, grade = _glasgow_number(fields[2], where, "doc id"), parse_int(fields[3], where, "rel")
        qrels.append(Judgment(query_id, doc_id, grade, where))
    return qrels


def _id_list(ids: list[str], limit: int = 40) -> str:
    shown = ", ".join(ids[:limit])
    return shown + (f" ... ({len(ids)} in all)" if len(ids) > limit else "")


READER = FormatReader("glasgow", frozenset({"name", "collection"}), _read_glasgow)