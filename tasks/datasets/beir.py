"""BEIR's layout: corpus.jsonl and queries.jsonl with `_id`, and qrels/<split>.tsv; a query's split
is the qrels file that judges it, and its language is detected from script."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from tasks.datasets.errors import DatasetError
from tasks.datasets.jsonl import jsonl_docs
from tasks.datasets.lines import UniqueIds, json_lines, located, parse_int, str_field, text_lines
from tasks.datasets.model import DEFAULT_CATEGORY, DEFAULT_SPLIT, Judgment, RawCollection
from tasks.datasets.reader import FormatReader
from tasks.language import detect_language


def _read_beir(folder: Path, split: str, name: str | None = None) -> RawCollection:
    # Either may be gzip-compressed (corpus.jsonl.gz); messages name the file read.
    corpus_file, queries_file = (located(folder / f) or folder / f for f in ("corpus.jsonl", "queries.jsonl"))
    metadata: dict[str, dict] = {}
    docs, _ = jsonl_docs(corpus_file, "_id", "BEIR corpus.jsonl with _id, title, text", metadata=metadata,
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
    qrels: list[Judgment] = []
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
    ids = UniqueIds()
    for where, obj in json_lines(queries_file, "BEIR queries.jsonl with _id, text"):
        qid = str_field(obj, "_id", where, nonempty=True)
        ids.add(qid, where)
        text = str_field(obj, "text", where, nonempty=True)
        # Queries judged in no file read get DEFAULT_SPLIT; with BEIR qrels they are then dropped.
        qsplit = split_of.get(qid, (DEFAULT_SPLIT, ""))[0]
        queries.append((qid, text, detect_language(text), DEFAULT_CATEGORY, qsplit))
    notes = ["languages detected from script"]
    return RawCollection(name or folder.name, docs, queries, qrels, str(corpus_file), str(queries_file), notes,
                metadata=metadata or None)


def _read_beir_qrels(path: Path) -> Iterator[Judgment]:
    header = ["query-id", "corpus-id", "score"]
    lines = text_lines(path, "BEIR qrels with header query-id, corpus-id, score")
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
        yield Judgment(fields[0], fields[1], parse_int(fields[2], where, "score"), where)


READER = FormatReader("beir", frozenset({"name"}), _read_beir)