"""The Cranfield collection in its SMART files (cran.all.1400, cran.qry, cran.qrels); its inverted
grades 1 (best) .. 4 and -1 are mapped to higher = better by default."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from retbench.tasks.datasets.errors import DatasetError
from retbench.tasks.datasets.lines import UniqueIds, parse_int, smart_text, text_lines
from retbench.tasks.datasets.model import DEFAULT_CATEGORY, Judgment, RawCollection
from retbench.tasks.datasets.reader import FormatReader

# Cranfield grades 1 = complete answer ... 4 = minimum interest (cranqrel.readme); nDCG needs
# higher = better, and the -1 rows are judged non-relevant.
CRANFIELD_GRADE_MAP = {1: 4, 2: 3, 3: 2, 4: 1, -1: 0}


def _read_cranfield(folder: Path, split: str, name: str | None = None) -> RawCollection:
    if split in ("train", "dev"):
        raise DatasetError(
            f"{folder}: Cranfield has no {split} split (all 225 queries are test queries); "
            "expected split 'test' or 'all'"
        )
    corpus_file, queries_file, qrels_file = folder / "cran.all.1400", folder / "cran.qry", folder / "cran.qrels"
    docs = []
    empty = []
    stray = []
    ids = UniqueIds()
    for where, number, fields, strays in _smart_records(corpus_file, "cran.all.1400 (SMART .I/.T/.A/.B/.W)"):
        doc_id = str(number)
        ids.add(doc_id, where)
        title, text = smart_text(fields.get(".T", [])), smart_text(fields.get(".W", []))
        if not title and not text:
            empty.append(doc_id)
        if strays:
            stray.append(doc_id)
        docs.append((doc_id, title, text, "en"))
    queries = []
    for position, (where, _, fields, _) in enumerate(_smart_records(queries_file, "cran.qry (SMART .I/.W)"), 1):
        text = smart_text(fields.get(".W", []))
        if not text:
            raise DatasetError(f"{where}: query at position {position} has no .W text; expected the query text")
        # cran.qrels numbers queries by position in cran.qry, not by their .I number.
        queries.append((str(position), text, "en", DEFAULT_CATEGORY, "test"))
    qrels = []
    for lineno, line in text_lines(qrels_file, "cran.qrels (query_pos doc_id grade)"):
        where = f"{qrels_file}:{lineno}"
        fields = line.split()
        if len(fields) != 3:
            raise DatasetError(f"{where}: expected 3 fields query_pos doc_id grade; found {len(fields)}")
        qrels.append(Judgment(fields[0], fields[1], parse_int(fields[2], where, "grade"), where))
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
    return RawCollection(
        name or "cranfield", docs, queries, qrels, str(corpus_file), str(queries_file), notes,
        default_grade_map=CRANFIELD_GRADE_MAP,
    )


_SMART_FIELDS = (".T", ".A", ".B", ".W")


def _smart_records(path: Path, what: str) -> Iterator[tuple[str, int, dict[str, list[str]], int]]:
    """Yield (where, .I number, field -> lines, stray marker count) for each SMART record."""
    record: dict[str, list[str]] | None = None
    field = None
    where, number, strays = "", 0, 0
    for lineno, line in text_lines(path, what):
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


READER = FormatReader("cranfield", frozenset({"name"}), _read_cranfield)