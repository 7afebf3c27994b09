"""XQuAD's parallel SQuAD-format files (xquad.<language>.json): documents are the unique paragraphs
in one language, queries the questions in another, each judged relevant to its paragraph."""
from __future__ import annotations

import codecs
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from retbench.tasks.datasets.errors import DatasetError
from retbench.tasks.datasets.lines import UniqueIds, json_error, json_type, str_field
from retbench.tasks.datasets.model import Judgment, RawCollection
from retbench.tasks.datasets.reader import FormatReader


def _read_xquad(
    folder: Path, split: str, name: str | None = None, query_language: str = "en", doc_language: str = "en",
    dev_fraction: float | None = None,
) -> RawCollection:
    for option, value in (("query_language", query_language), ("doc_language", doc_language)):
        if value not in ("en", "hi"):
            raise DatasetError(f"xquad option {option}={value!r}; expected 'en' or 'hi'")
    if dev_fraction is not None and not (isinstance(dev_fraction, (int, float)) and 0 < dev_fraction < 1):
        raise DatasetError(f"xquad option dev_fraction={dev_fraction!r}; expected a number between 0 and 1 (exclusive)")
    if split == "train":
        raise DatasetError(f"{folder}: XQuAD has no train split (its questions are test queries, or dev ones with "
                           "dev_fraction); expected split 'test', 'dev' or 'all'")
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
    ids = UniqueIds()
    for _, _, title, _, qas in _xquad_paragraphs(query_file):
        for where, qa in qas:
            qid = f"{qa['id']}-{query_language}"
            ids.add(qid, where)
            if qa["id"] not in doc_of_question:
                raise DatasetError(f"{where}: question id {qa['id']!r} is not in {doc_file}; expected parallel files")
            queries.append((qid, qa["question"], query_language, title, _xquad_split(qa["id"], dev_fraction)))
            qrels.append(Judgment(qid, doc_of_question[qa["id"]], 1, where))
    notes = [
        f"xquad {query_language}->{doc_language}: documents are the unique paragraphs of "
        f"xquad.{doc_language}.json (no title), each question's one relevant document is its paragraph"
    ]
    if dev_fraction is not None:
        notes.append(f"xquad dev/test split: a question is dev when sha256(its XQuAD id) read as a fraction is below "
                     f"{dev_fraction} (the id is shared by the languages: a question and its translation share a split)")
    return RawCollection(
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
            raise DatasetError(f"{where}: expected an object, found {json_type(article)}")
        title = str_field(article, "title", where, nonempty=True)
        paragraphs = article.get("paragraphs")
        if not isinstance(paragraphs, list):
            raise DatasetError(f"{where}: field 'paragraphs' must be an array, found {json_type(paragraphs)}")
        for p, paragraph in enumerate(paragraphs):
            pwhere = f"{where}.paragraphs[{p}]"
            if not isinstance(paragraph, dict):
                raise DatasetError(f"{pwhere}: expected an object, found {json_type(paragraph)}")
            context = str_field(paragraph, "context", pwhere, nonempty=True)
            qas = paragraph.get("qas")
            if not isinstance(qas, list):
                raise DatasetError(f"{pwhere}: field 'qas' must be an array, found {json_type(qas)}")
            checked = []
            for i, qa in enumerate(qas):
                qwhere = f"{pwhere}.qas[{i}]"
                if not isinstance(qa, dict):
                    raise DatasetError(f"{qwhere}: expected an object, found {json_type(qa)}")
                str_field(qa, "id", qwhere, nonempty=True)
                str_field(qa, "question", qwhere, nonempty=True)
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
        raise DatasetError(f"{path}:{e.lineno}: {json_error(e)}") from None


READER = FormatReader("xquad", frozenset({"name", "query_language", "doc_language", "dev_fraction"}), _read_xquad)