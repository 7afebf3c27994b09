"""Control characters in a collection: replaced by a space in titles and texts (and counted), refused
in ids. Every format's rows pass through here (tasks/datasets/reader.py), whatever wrote them."""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

from retbench.tasks.datasets.errors import DatasetError

if TYPE_CHECKING:  # lines.py imports this module: it stays free of polars (model.py imports it)
    from retbench.tasks.datasets.model import RawCollection

# C0 controls but tab, line feed and carriage return (ordinary white space in a text), DEL, and
# the C1 controls. A NUL or an escape sequence in a text is never meant as text: tokenizers differ
# on it, some C libraries stop reading at a NUL, and a terminal obeys an escape when a text is
# shown. A space keeps the words on either side apart, and character offsets unchanged.
CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
# Any control character at all: ids may not hold tab or line breaks either (UniqueIds says why).
ID_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
CONTROL_RULE = ("control characters U+0000-U+001F except tab, line feed and carriage return, U+007F (DEL) and "
                "U+0080-U+009F (C1) replaced by a space")
CONTROL_NOTE = "control characters replaced by a space"
_COUNTS = re.compile(r": (\d+) in (\d+) documents and (\d+) in (\d+) queries")


def control_in_id(id_: str) -> str | None:
    """The first control character of `id_`, shown as U+XXXX, or None."""
    found = ID_CONTROL.search(id_)
    return f"U+{ord(found.group()):04X}" if found else None


def refuse_control_id(id_: str, where: str, what: str = "id") -> None:
    """A DatasetError naming `where` when `id_` holds a control character."""
    code = control_in_id(id_)
    if code is not None:
        raise DatasetError(
            f"{where}: {what} {id_!r} contains control character {code}; expected an id of printable "
            "characters (it is written to TREC run files and reports as it is)"
        )


def replace_controls(raw: RawCollection) -> None:
    """Replace control characters in titles and texts by a space (CONTROL_RULE); a note counts
    them (the data audit reports it). A text left blank by it is refused, naming file and id."""
    doc_chars = doc_rows = query_chars = query_rows = 0
    docs = []
    for doc_id, title, text, language in raw.docs:
        (title, in_title), (text, in_text) = CONTROL.subn(" ", title), CONTROL.subn(" ", text)
        if in_title or in_text:
            doc_chars, doc_rows = doc_chars + in_title + in_text, doc_rows + 1
            if not title.strip() and not text.strip():
                raise DatasetError(f"{raw.corpus_file}: document {doc_id!r} holds only control characters and "
                                   f"white space; expected some text ({CONTROL_RULE})")
        docs.append((doc_id, title, text, language))
    queries = []
    for query_id, text, *rest in raw.queries:
        text, found = CONTROL.subn(" ", text)
        if found:
            query_chars, query_rows = query_chars + found, query_rows + 1
            if not text.strip():
                raise DatasetError(f"{raw.queries_file}: query {query_id!r} holds only control characters and "
                                   f"white space; expected some text ({CONTROL_RULE})")
        queries.append((query_id, text, *rest))
    raw.docs, raw.queries = docs, queries
    if doc_rows or query_rows:
        raw.notes.append(f"{CONTROL_NOTE}: {doc_chars} in {doc_rows} documents and {query_chars} in "
                         f"{query_rows} queries")


def control_counts(notes: tuple[str, ...] | list[str]) -> dict:
    """The counts replace_controls noted (zeros when it found none): for the data audit."""
    note = next((n for n in notes if n.startswith(CONTROL_NOTE)), None)
    found = _COUNTS.search(note) if note else None
    chars_d, docs, chars_q, queries = (int(g) for g in found.groups()) if found else (0, 0, 0, 0)
    return {"rule": CONTROL_RULE, "documents": docs, "document_characters": chars_d,
            "queries": queries, "query_characters": chars_q}


def refuse_control_ids(raw: RawCollection) -> None:
    """Ids of every row and judgment checked, for readers that do not check them line by line."""
    for doc_id, *_ in raw.docs:
        refuse_control_id(doc_id, raw.corpus_file, "document id")
    for query_id, *_ in raw.queries:
        refuse_control_id(query_id, raw.queries_file, "query id")
    for judgment in raw.qrels:
        refuse_control_id(judgment.query_id, judgment.where, "query id")
        refuse_control_id(judgment.doc_id, judgment.where, "doc id")
