"""Control characters: replaced by a space in titles and texts and counted (every format, whatever
wrote them: a JSON escape such as \\u0000 included), refused in ids with file and line; and the
empty corpus, refused for being empty."""
import json
from pathlib import Path

import polars as pl
import pytest

from retbench.tasks.analysis.data_audit import data_audit
from retbench.tasks.datasets.errors import DatasetError
from retbench.tasks.stages.dataset import load_dataset
from retbench.tasks.stages.filter_fields import check_filter_fields


def write_lines(path: Path, rows: list) -> Path:
    """Objects become JSON lines (escaped: a NUL is written as \\u0000); strings are written as they are."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def jsonl_folder(root: Path, corpus: list, queries: list | None = None, qrels: list | None = None) -> Path:
    write_lines(root / "corpus.jsonl", corpus)
    write_lines(root / "queries.jsonl", queries or [{"id": "q1", "text": "wing lift"}])
    write_lines(root / "qrels.jsonl", qrels or [{"query_id": "q1", "doc_id": "d1", "grade": 1}])
    return root


def test_jsonl_text_controls_become_spaces_and_are_counted_in_the_audit(tmp_path):
    folder = jsonl_folder(tmp_path, [
        {"id": "d1", "title": "Wing\x00s", "text": "lift\x1b[31m of a\x7f wing\x85", "language": "en"},
        {"id": "d2", "text": "tab\tand\nline breaks stay", "language": "en"},
    ], queries=[{"id": "q1", "text": "wing\x00lift", "language": "en"}])
    assert "\\u0000" in (folder / "corpus.jsonl").read_text()  # written escaped, as JSON writers do
    dataset = load_dataset(folder, "jsonl", "all")
    texts = dict(dataset.corpus.select("doc_id", "text").iter_rows())
    assert dataset.corpus["title"][0] == "Wing s"
    assert texts == {"d1": "lift [31m of a  wing ", "d2": "tab\tand\nline breaks stay"}
    assert dataset.queries["text"].to_list() == ["wing lift"]
    note = "control characters replaced by a space: 4 in 1 documents and 1 in 1 queries"
    assert note in dataset.notes
    audit = data_audit(dataset.corpus, dataset.queries, dataset.qrels, unicode="nfc", notes=dataset.notes)
    controls = audit["controls"]
    assert (controls["documents"], controls["document_characters"], controls["queries"], controls["query_characters"]) == (1, 4, 1, 1)
    clean = data_audit(dataset.corpus, dataset.queries, dataset.qrels, unicode="nfc", notes=())
    assert (clean["controls"]["documents"], clean["controls"]["queries"]) == (0, 0)


def test_the_report_section_says_how_many_were_replaced(tmp_path):
    from retbench.tasks.reporting.data_audit_section import data_audit_section
    from retbench.tasks.reporting.html import ReportInputs, render_markdown

    dataset = load_dataset(jsonl_folder(tmp_path / "data", [{"id": "d1", "text": "a\x00b\x01c"}]), "jsonl", "all")
    audit = data_audit(dataset.corpus, dataset.queries, dataset.qrels, unicode="nfc", notes=dataset.notes)
    (tmp_path / "manifest.json").write_text(json.dumps({"data_audit": audit}))
    text = render_markdown("t", "", [data_audit_section(ReportInputs(tmp_path, "ndcg@10", None))])
    assert "Control characters replaced by a space at load: 2 in 1 documents and 0 in 0 queries" in text


def test_beir_text_controls_become_spaces(tmp_path):
    root = tmp_path / "beir"
    write_lines(root / "corpus.jsonl", [{"_id": "10", "title": "", "text": "drag\x00of a body"}])
    write_lines(root / "queries.jsonl", [{"_id": "1", "text": "what\x9bis drag"}])
    (root / "qrels").mkdir()
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n1\t10\t1\n", encoding="utf-8")
    dataset = load_dataset(root, "beir", "test")
    assert dataset.corpus["text"].to_list() == ["drag of a body"]
    assert dataset.queries["text"].to_list() == ["what is drag"]


def test_cranfield_text_controls_become_spaces(tmp_path):
    (tmp_path / "cran.all.1400").write_text(".I 1\n.T\nwing\x0bflutter\n.W\nthe wing\x00flutters .\n", encoding="utf-8")
    (tmp_path / "cran.qry").write_text(".I 001\n.W\nwhy\x07does a wing flutter\n", encoding="utf-8")
    (tmp_path / "cran.qrels").write_text("1 1 1\n", encoding="utf-8")
    dataset = load_dataset(tmp_path, "cranfield", "test")
    assert dataset.corpus.select("title", "text").row(0) == ("wing flutter", "the wing flutters .")
    assert dataset.queries["text"].to_list() == ["why does a wing flutter"]


def test_a_text_of_control_characters_only_is_refused_naming_file_and_id(tmp_path):
    folder = jsonl_folder(tmp_path, [{"id": "d1", "text": "wing"}], queries=[{"id": "q1", "text": "\x00\x01"}])
    with pytest.raises(DatasetError, match=r"queries\.jsonl: query 'q1' holds only control characters and white space"):
        load_dataset(folder, "jsonl", "all")


@pytest.mark.parametrize("file, rows, message", [
    ("corpus.jsonl", [{"id": "d1", "text": "x"}, {"id": "d\x002", "text": "y"}],
     r"corpus\.jsonl:2: id 'd\\x002' contains control character U\+0000; expected an id of printable characters"),
    ("queries.jsonl", [{"id": "\x1b[2Jq1", "text": "x"}], r"queries\.jsonl:1: id '\\x1b\[2Jq1' contains control character U\+001B"),
    ("qrels.jsonl", [{"query_id": "q1", "doc_id": "d1\x7f", "grade": 1}],
     r"qrels\.jsonl:1: doc id 'd1\\x7f' contains control character U\+007F"),
])
def test_control_characters_in_ids_are_refused_with_file_and_line(tmp_path, file, rows, message):
    folder = jsonl_folder(tmp_path, [{"id": "d1", "text": "wing"}])
    write_lines(folder / file, rows)
    with pytest.raises(DatasetError, match=message):
        load_dataset(folder, "jsonl", "all")


def test_a_control_character_in_a_beir_qrels_id_is_refused(tmp_path):
    root = tmp_path / "beir"
    write_lines(root / "corpus.jsonl", [{"_id": "10", "title": "", "text": "drag"}])
    write_lines(root / "queries.jsonl", [{"_id": "1", "text": "what is drag"}])
    (root / "qrels").mkdir()
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n1\t1\x000\t1\n", encoding="utf-8")
    with pytest.raises(DatasetError, match=r"qrels/test\.tsv:2: doc id '1\\x000' contains control character U\+0000"):
        load_dataset(root, "beir", "test")


def test_a_raw_nul_in_json_is_refused_once_worded(tmp_path):
    folder = jsonl_folder(tmp_path, ['{"id": "d1", "text": "a\x00b"}'])
    with pytest.raises(DatasetError) as caught:
        load_dataset(folder, "jsonl", "all")
    message = str(caught.value)
    assert message.endswith("corpus.jsonl:1: malformed JSON (raw control character U+0000 in a string at column 24; "
                            "JSON writes it escaped, as \\u0000; in a title or text retbench then replaces it by a "
                            "space); expected one JSON object per line")
    assert "at at" not in message


@pytest.mark.parametrize("corpus", [[], ["", "  "]], ids=["empty-file", "blank-lines"])
def test_an_empty_corpus_is_refused_for_being_empty_even_with_query_filters(tmp_path, corpus):
    folder = jsonl_folder(tmp_path, corpus, queries=[{"id": "q1", "text": "x", "filter": {"year": 2020}}])
    expected = rf"^{tmp_path}/corpus\.jsonl: no documents; expected at least one"
    with pytest.raises(DatasetError, match=expected):
        check_filter_fields(folder, "jsonl")  # run's pre-flight check
    with pytest.raises(DatasetError, match=expected):
        load_dataset(folder, "jsonl", "all")
    write_lines(folder / "corpus.jsonl", [{"id": "d1", "text": "x", "metadata": {"region": "eu"}}])
    with pytest.raises(DatasetError, match="filter field 'year' is not a metadata field"):
        check_filter_fields(folder, "jsonl")  # with a document, the filter is what is wrong
