"""BEIR's layout: corpus.jsonl and queries.jsonl with `_id`, and qrels/<split>.tsv (train, dev,
test); a query's split is the qrels file that judges it, and its language is detected from script."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from retbench.tasks.datasets.errors import DatasetError
from retbench.tasks.datasets.jsonl import jsonl_docs
from retbench.tasks.datasets.lines import UniqueIds, json_lines, located, parse_int, str_field, text_lines
from retbench.tasks.datasets.model import DEFAULT_CATEGORY, DEFAULT_SPLIT, QUERY_SPLITS, Judgment, RawCollection
from retbench.tasks.datasets.reader import FormatReader
from retbench.tasks.language import detect_language


def missing_split_message(qrels_dir: Path, split: str, present: list[str]) -> str:
    """`split: <split>` asked of a folder whose qrels are `present`: which splits exist and
    what to write instead (`all` when more than one exists: each is then scored and reported apart)."""
    exist = ", ".join(present)
    if len(present) > 1:
        advice = "set dataset.split to one of them, or to `all` to score every split, each reported apart"
    else:
        advice = f"set dataset.split to {present[0]} (or `all`)"
    return (f"{qrels_dir / f'{split}.tsv'}: missing, so `split: {split}` has no queries; the splits here: {exist} "
            f"({', '.join(s + '.tsv' for s in present)}); {advice}")


def _read_beir(folder: Path, split: str, name: str | None = None) -> RawCollection:
    # Either may be gzip-compressed (corpus.jsonl.gz); messages name the file read.
    corpus_file, queries_file = (located(folder / f) or folder / f for f in ("corpus.jsonl", "queries.jsonl"))
    metadata: dict[str, dict] = {}
    docs, _ = jsonl_docs(corpus_file, "_id", "BEIR corpus.jsonl with _id, title, text", metadata=metadata,
                          extra_fields_are_metadata=True)
    qrels_dir = folder / "qrels"
    qrels_files = sorted(qrels_dir.glob("*.tsv"))
    if not qrels_files:
        raise DatasetError(f"{qrels_dir}: no qrels files; expected qrels/<split>.tsv (e.g. test.tsv)")
    unnamed = [p.name for p in qrels_files if p.stem not in QUERY_SPLITS]
    if unnamed:
        raise DatasetError(f"{qrels_dir}: qrels file(s) {unnamed} name no split; expected "
                           f"{', '.join(s + '.tsv' for s in QUERY_SPLITS)} (the file's name is its queries' split)")
    if split != "all" and not (qrels_dir / f"{split}.tsv").is_file():
        raise DatasetError(missing_split_message(qrels_dir, split, [p.stem for p in qrels_files]))
    qrels: list[Judgment] = []
    split_of: dict[str, tuple[str, str]] = {}  # query id -> (split, where first judged)
    # Every file is read for the splits of its queries (a dev query is then not taken for an
    # unjudged test query); only the asked split's judgments are kept.
    for file in qrels_files:
        for j in _read_beir_qrels(file):
            first = split_of.setdefault(j.query_id, (file.stem, j.where))
            if first[0] != file.stem:
                raise DatasetError(
                    f"{j.where}: query {j.query_id!r} is also judged in split {first[0]!r} "
                    f"({first[1]}); expected each query in one split"
                )
            if split in ("all", file.stem):
                qrels.append(j)
    queries = []
    unjudged = 0
    ids = UniqueIds()
    for where, obj in json_lines(queries_file, "BEIR queries.jsonl with _id, text"):
        qid = str_field(obj, "_id", where, nonempty=True)
        ids.add(qid, where)
        text = str_field(obj, "text", where, nonempty=True)
        # A query judged in no qrels file has no split of its own: it is held out (DEFAULT_SPLIT).
        qsplit = split_of.get(qid, (DEFAULT_SPLIT, ""))[0]
        unjudged += qid not in split_of
        queries.append((qid, text, detect_language(text), DEFAULT_CATEGORY, qsplit))
    notes = ["languages detected from script"]
    if unjudged:
        notes.append(f"{unjudged} queries judged in no qrels file: put in {DEFAULT_SPLIT!r}")
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