import json
import logging
from pathlib import Path

import polars as pl
import pytest

from retbench.support.paths import SHARED_DATA

from retbench.tasks.datasets.errors import DatasetError
from retbench.tasks.datasets.model import CORPUS_SCHEMA, Dataset
from retbench.tasks.stages.dataset import content_hash, load_dataset, load_saved_dataset, save_dataset
from retbench.tasks.language import detect_language

DATA = SHARED_DATA
CRANFIELD = DATA / "cranfield"
XQUAD = DATA / "xquad"

CORPUS = [
    {"id": "d1", "title": "Wings", "text": "Lift of a wing in a slipstream."},
    {"id": "d2", "text": "भारत एक विशाल देश है।"},
    {"id": "d3", "title": "Only a title", "text": "", "language": "hinglish"},
]
QUERIES = [
    {"id": "q1", "text": "wing lift", "split": "dev", "category": "aero"},
    {"id": "q2", "text": "भारत कितना बड़ा है?", "split": "test"},
    {"id": "q3", "text": "unjudged query", "split": "dev"},
    {"id": "q4", "text": "no split given"},
]
QRELS = [
    {"query_id": "q1", "doc_id": "d1", "grade": 2},
    {"query_id": "q1", "doc_id": "d3", "grade": 0},
    {"query_id": "q2", "doc_id": "d2", "grade": 3},
    {"query_id": "q4", "doc_id": "d1", "grade": 0},
]


def write_lines(path: Path, lines: list) -> Path:
    """Objects become JSON lines; strings are written as they are (to write broken lines)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "".join((x if isinstance(x, str) else json.dumps(x, ensure_ascii=False)) + "\n" for x in lines),
        encoding="utf-8",
    )
    return path


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    write_lines(tmp_path / "corpus.jsonl", CORPUS)
    write_lines(tmp_path / "queries.jsonl", QUERIES)
    write_lines(tmp_path / "qrels.jsonl", QRELS)
    return tmp_path


# ---------------------------------------------------------------- jsonl


def test_jsonl_defaults_and_split(folder):
    ds = load_dataset(folder, "jsonl", "all")
    corpus = {r["doc_id"]: r for r in ds.corpus.iter_rows(named=True)}
    assert [corpus[d]["language"] for d in ("d1", "d2", "d3")] == ["en", "hi", "hinglish"]
    assert corpus["d2"]["title"] == ""
    queries = {r["query_id"]: r for r in ds.queries.iter_rows(named=True)}
    assert set(queries) == {"q1", "q2", "q4"}  # q3 has no judgments
    assert queries["q2"]["language"] == "hi"
    assert queries["q2"]["category"] == "uncategorized"
    assert queries["q4"]["split"] == "test"  # held out unless the data says otherwise
    assert any("1 queries in split 'all' without judgments dropped" in n for n in ds.notes)


def test_split_keeps_its_queries_and_their_judgments_only(folder):
    dev = load_dataset(folder, "jsonl", "dev")
    assert dev.queries["query_id"].to_list() == ["q1"]
    assert sorted(dev.qrels["doc_id"].to_list()) == ["d1", "d3"]
    assert dev.corpus.height == 3  # the corpus is kept whole
    test = load_dataset(folder, "jsonl", "test")
    assert sorted(test.queries["query_id"].to_list()) == ["q2", "q4"]


def test_query_without_relevant_document_is_warned_and_noted(folder, caplog):
    with caplog.at_level(logging.WARNING, logger="retbench.dataset"):
        ds = load_dataset(folder, "jsonl", "test")
    assert "1 of 2 judged queries have no document with grade >= 1" in caplog.text
    assert any(n.startswith("1 of 2 judged queries have no document with grade >= 1") for n in ds.notes)


def test_unjudged_queries_are_logged_with_their_ids_and_returned(folder, caplog):
    with caplog.at_level(logging.WARNING, logger="retbench.dataset"):
        ds = load_dataset(folder, "jsonl", "all")
    assert "1 queries in split 'all' have no judgments and are not scored: q3" in caplog.text
    assert ds.unjudged_queries == ("q3",)
    assert "1 queries in split 'all' without judgments dropped: q3" in ds.notes
    many = [{"id": f"u{i:02d}", "text": "never judged", "split": "dev"} for i in range(25)]
    write_lines(folder / "queries.jsonl", QUERIES + many)
    ds = load_dataset(folder, "jsonl", "dev")
    assert ds.unjudged_queries == ("q3", *(f"u{i:02d}" for i in range(25)))
    assert f"26 queries in split 'dev' without judgments dropped: q3, {', '.join(f'u{i:02d}' for i in range(19))}, ... (6 more)" in ds.notes


def test_bom_crlf_and_blank_lines_load(folder):
    lines = [json.dumps(x, ensure_ascii=False) for x in CORPUS]
    data = "\ufeff" + "\r\n".join(lines[:1] + ["", "  "] + lines[1:]) + "\r\n"
    (folder / "corpus.jsonl").write_bytes(data.encode("utf-8"))
    ds = load_dataset(folder, "jsonl", "all")
    assert ds.corpus["doc_id"].to_list() == ["d1", "d2", "d3"]
    assert ds.corpus["text"][0] == "Lift of a wing in a slipstream."


def test_no_queries_in_split_is_an_error(folder):
    write_lines(folder / "queries.jsonl", [{"id": "q1", "text": "wing lift", "split": "test"}])
    write_lines(folder / "qrels.jsonl", [QRELS[0]])
    with pytest.raises(DatasetError, match=r"queries\.jsonl: no judged queries in split 'dev'"):
        load_dataset(folder, "jsonl", "dev")


# Each case: file to break, its lines, expected message (file:line and what was expected).
BROKEN = [
    ("corpus.jsonl", [CORPUS[0], '{"id": "d2", "text": '], r"corpus\.jsonl:2: malformed JSON"),
    ("corpus.jsonl", [CORPUS[0], CORPUS[1], '["d3", "x"]'], r"corpus\.jsonl:3: expected a JSON object, found array"),
    ("corpus.jsonl", [CORPUS[0], {"id": "d2"}], r"corpus\.jsonl:2: missing required field 'text'"),
    ("corpus.jsonl", [{"id": 1, "text": "x"}], r"corpus\.jsonl:1: field 'id' must be a string, found number 1"),
    ("corpus.jsonl", [{"id": "d1", "title": " ", "text": "\t"}], r"corpus\.jsonl:1: document 'd1' has empty title and text"),
    ("corpus.jsonl", [CORPUS[0], CORPUS[1], CORPUS[0]], r"corpus\.jsonl:3: duplicate id 'd1' \(first at .*corpus\.jsonl:1\)"),
    ("corpus.jsonl", [{"id": "d1", "text": "x", "language": ""}], r"corpus\.jsonl:1: field 'language' is empty"),
    ("queries.jsonl", [QUERIES[0], {"id": "q2", "text": "   "}], r"queries\.jsonl:2: field 'text' is empty"),
    ("queries.jsonl", [{"id": "q1", "text": "x", "split": "validation"}], r"queries\.jsonl:1: query 'q1' has split 'validation'; expected one of \['train', 'dev', 'test'\]"),
    ("queries.jsonl", [{"id": "q1", "text": "x", "split": ""}], r"queries\.jsonl:1: query 'q1' has split ''; expected"),
    ("corpus.jsonl", ["", "  "], r"corpus\.jsonl: no documents; expected at least one"),
    ("queries.jsonl", [{"id": "q1", "text": "x", "category": 3}], r"queries\.jsonl:1: field 'category' must be a string"),
    ("qrels.jsonl", [QRELS[0], {"query_id": "q9", "doc_id": "d1", "grade": 1}], r"qrels\.jsonl:2: query id 'q9' is not in .*queries\.jsonl"),
    ("qrels.jsonl", [{"query_id": "q1", "doc_id": "d9", "grade": 1}], r"qrels\.jsonl:1: doc id 'd9' is not in .*corpus\.jsonl"),
    ("qrels.jsonl", [QRELS[0], {"query_id": "q1", "doc_id": "d1", "grade": 1.5}], r"qrels\.jsonl:2: field 'grade' must be an integer, found number 1\.5"),
    ("qrels.jsonl", [{"query_id": "q1", "doc_id": "d1", "grade": "2"}], r"qrels\.jsonl:1: field 'grade' must be an integer, found string"),
    ("qrels.jsonl", [{"query_id": "q1", "doc_id": "d1", "grade": True}], r"qrels\.jsonl:1: field 'grade' must be an integer, found boolean"),
    ("qrels.jsonl", [QRELS[0], QRELS[1], {"query_id": "q2", "doc_id": "d2", "grade": 4}], r"qrels\.jsonl:3: grade 4 for query 'q2' is outside 0\.\.3"),
    ("qrels.jsonl", [{"query_id": "q1", "doc_id": "d1", "grade": -1}], r"qrels\.jsonl:1: grade -1 for query 'q1' is negative"),
    ("corpus.jsonl", [CORPUS[0], {"id": "cook 01", "text": "x"}], r"corpus\.jsonl:2: id 'cook 01' contains whitespace; .*e\.g\. 'cook_01'"),
    ("queries.jsonl", [QUERIES[0], {"id": "q\t01", "text": "x"}], r"queries\.jsonl:2: id 'q\\t01' contains whitespace"),
    ("qrels.jsonl", [QRELS[0], {"query_id": "q1", "doc_id": "d3", "grade": None}], r"qrels\.jsonl:2: field 'grade' is null; expected an integer$"),
    ("corpus.jsonl", [{"id": None, "text": "x"}], r"corpus\.jsonl:1: field 'id' is null; expected a string$"),
    ("qrels.jsonl", [QRELS[0], QRELS[0]], r"qrels\.jsonl:2: duplicate judgment for query 'q1' and doc 'd1' \(first at .*qrels\.jsonl:1\)"),
]


@pytest.mark.parametrize("file, lines, message", BROKEN, ids=[f"{f}-{i}" for i, (f, _, _) in enumerate(BROKEN)])
def test_broken_input_names_file_and_line(folder, file, lines, message):
    write_lines(folder / file, lines)
    with pytest.raises(DatasetError, match=message):
        load_dataset(folder, "jsonl", "all")


def test_invalid_utf8_names_the_line(folder):
    good = json.dumps(CORPUS[0]).encode()
    (folder / "corpus.jsonl").write_bytes(good + b"\n\n" + b'{"id": "d3", "text": "caf\xe9"}\n')
    with pytest.raises(DatasetError, match=r"corpus\.jsonl:3: invalid UTF-8"):
        load_dataset(folder, "jsonl", "all")


def test_missing_file_says_what_was_expected(folder):
    (folder / "queries.jsonl").unlink()
    with pytest.raises(DatasetError, match=r"queries\.jsonl: missing; expected queries\.jsonl with id, text"):
        load_dataset(folder, "jsonl", "all")


def test_grade_map_applies_before_validation_and_must_cover_every_grade(folder):
    write_lines(folder / "qrels.jsonl", [{"query_id": "q1", "doc_id": "d1", "grade": 10}, {"query_id": "q2", "doc_id": "d2", "grade": 5}])
    ds = load_dataset(folder, "jsonl", "all", grade_map={10: 3, 5: 1})
    assert dict(zip(ds.qrels["query_id"], ds.qrels["grade"])) == {"q1": 3, "q2": 1}
    assert "jsonl" not in ds.notes[0] and any("grades mapped 10->3, 5->1" in n for n in ds.notes)
    with pytest.raises(DatasetError, match=r"qrels\.jsonl:2: grade 5 is not in grade_map \(keys \[10\]\)"):
        load_dataset(folder, "jsonl", "all", grade_map={10: 3})
    with pytest.raises(DatasetError, match=r"qrels\.jsonl:1: grade 10 \(mapped to 7\) for query 'q1' is outside 0\.\.3"):
        load_dataset(folder, "jsonl", "all", grade_map={10: 7, 5: 1})


def test_bad_arguments_are_refused(folder):
    with pytest.raises(DatasetError, match=r"unknown dataset format 'csv'"):
        load_dataset(folder, "csv")
    with pytest.raises(DatasetError, match=r"unknown split 'validation' \(expected one of \['train', 'dev', 'test', 'all'\]\)"):
        load_dataset(folder, "jsonl", "validation")
    with pytest.raises(DatasetError, match=r"unknown option\(s\) \['doc_language'\] for format 'jsonl'"):
        load_dataset(folder, "jsonl", doc_language="hi")


# ---------------------------------------------------------------- TREC qrels


def test_trec_qrels_override(folder, tmp_path):
    trec = tmp_path / "run.qrels"
    trec.write_text("q2 0 d2 1\nq2 0 d1 0\n\nq1 0 d3 2\n", encoding="utf-8")
    ds = load_dataset(folder, "jsonl", "all", qrels_path=trec)
    assert sorted(ds.queries["query_id"].to_list()) == ["q1", "q2"]  # q4, judged in qrels.jsonl only, is dropped
    assert sorted(ds.qrels.iter_rows()) == [("q1", "d3", 2), ("q2", "d1", 0), ("q2", "d2", 1)]
    assert any("TREC qrels file run.qrels" in n for n in ds.notes)


@pytest.mark.parametrize(
    "content, message",
    [
        ("q1 0 d1 1\nq1 d2 1\n", r"run\.qrels:2: expected 4 whitespace-separated fields qid iter docno rel; found 3"),
        ("q1 0 d1 1\n\nq1 0 d2 x\n", r"run\.qrels:3: rel must be an integer, found 'x'"),
        ("q1 0 d1 -2\n", r"run\.qrels:1: grade -2 for query 'q1' is negative; expected >= 0 \(pass grade_map"),
        ("q7 0 d1 1\n", r"run\.qrels:1: query id 'q7' is not in"),
    ],
)
def test_trec_qrels_errors(folder, tmp_path, content, message):
    trec = tmp_path / "run.qrels"
    trec.write_text(content, encoding="utf-8")
    with pytest.raises(DatasetError, match=message):
        load_dataset(folder, "jsonl", "all", qrels_path=trec)


# ---------------------------------------------------------------- BEIR


@pytest.fixture
def beir(tmp_path: Path) -> Path:
    root = tmp_path / "scifact-mini"
    write_lines(root / "corpus.jsonl", [
        {"_id": "10", "title": "Wings", "text": "Lift of a wing.", "metadata": {}},
        {"_id": "11", "title": "", "text": "भारत एक विशाल देश है।"},
        {"_id": "12", "title": "Drag", "text": "Drag of a body."},
    ])
    write_lines(root / "queries.jsonl", [
        {"_id": "1", "text": "what is lift", "metadata": {"x": 1}},
        {"_id": "2", "text": "भारत"},
        {"_id": "3", "text": "what is drag"},
        {"_id": "4", "text": "never judged"},
    ])
    (root / "qrels").mkdir()
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n1\t10\t1\n2\t11\t2\n", encoding="utf-8")
    (root / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\r\n3\t12\t1\r\n", encoding="utf-8")
    return root


def test_beir_split_from_qrels_file(beir):
    test = load_dataset(beir, "beir", "test")
    assert test.name == "scifact-mini"
    assert test.corpus.height == 3
    assert test.queries.select("query_id", "language", "category", "split").rows() == [
        ("1", "en", "uncategorized", "test"),
        ("2", "hi", "uncategorized", "test"),
    ]
    every = load_dataset(beir, "beir", "all")
    assert dict(every.queries.select("query_id", "split").iter_rows()) == {"1": "test", "2": "test", "3": "dev"}
    assert every.qrels.height == 3


def test_a_missing_beir_split_names_the_splits_there_and_suggests_all(beir):
    with pytest.raises(DatasetError) as caught:
        load_dataset(beir, "beir", "train")
    assert str(caught.value).endswith("qrels/train.tsv: missing, so `split: train` has no queries; the splits here: "
                                      "dev, test (dev.tsv, test.tsv); set dataset.split to one of them, or to `all` "
                                      "to score every split, each reported apart")


def test_beir_errors(beir):
    (beir / "qrels" / "dev.tsv").unlink()
    # One split left: it is the one to name (`all` would score the same queries).
    with pytest.raises(DatasetError, match=r"qrels/dev\.tsv: missing, so `split: dev` has no queries; the splits here: "
                                           r"test \(test\.tsv\); set dataset.split to test \(or `all`\)$"):
        load_dataset(beir, "beir", "dev")
    (beir / "qrels" / "test.tsv").write_text("1\t10\t1\n", encoding="utf-8")
    with pytest.raises(DatasetError, match=r"test\.tsv:1: expected header 'query-id<TAB>corpus-id<TAB>score'"):
        load_dataset(beir, "beir", "test")
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n1\t10\t1\n1\t99\t1\n", encoding="utf-8")
    with pytest.raises(DatasetError, match=r"test\.tsv:3: doc id '99' is not in .*corpus\.jsonl"):
        load_dataset(beir, "beir", "test")


def test_beir_ids_with_whitespace_are_refused(beir):
    write_lines(beir / "queries.jsonl", [{"_id": "1", "text": "what is lift"}, {"_id": "q 01", "text": "x"}])
    with pytest.raises(DatasetError, match=r"queries\.jsonl:2: id 'q 01' contains whitespace"):
        load_dataset(beir, "beir", "test")
    write_lines(beir / "corpus.jsonl", [{"_id": "cook 01", "title": "", "text": "x"}])
    with pytest.raises(DatasetError, match=r"corpus\.jsonl:1: id 'cook 01' contains whitespace"):
        load_dataset(beir, "beir", "test")


def test_beir_query_in_two_splits_is_refused(beir):
    (beir / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\n1\t12\t1\n", encoding="utf-8")
    with pytest.raises(DatasetError, match=r"query '1' is also judged in split 'dev'"):
        load_dataset(beir, "beir", "all")


def test_beir_train_dev_and_test_qrels_keep_their_split_names(beir, caplog):
    (beir / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\n4\t10\t1\n", encoding="utf-8")
    write_lines(beir / "queries.jsonl", [
        {"_id": "1", "text": "what is lift"}, {"_id": "2", "text": "भारत"}, {"_id": "3", "text": "what is drag"},
        {"_id": "4", "text": "lift again"}, {"_id": "5", "text": "judged nowhere"},
    ])
    every = load_dataset(beir, "beir", "all")
    assert dict(every.queries.select("query_id", "split").iter_rows()) == {"1": "test", "2": "test", "3": "dev",
                                                                          "4": "train"}
    train = load_dataset(beir, "beir", "train")
    assert train.queries["query_id"].to_list() == ["4"] and train.qrels.rows() == [("4", "10", 1)]
    with caplog.at_level(logging.WARNING, logger="retbench.dataset"):
        test = load_dataset(beir, "beir", "test")
    # 3 (dev) and 4 (train) are judged in their own files: not test queries "without judgments";
    # 5 is judged in no file, so it is held out (a test query) and is the one counted.
    assert test.unjudged_queries == ("5",)
    assert "1 queries in split 'test' have no judgments and are not scored: 5" in caplog.text
    assert "1 queries judged in no qrels file: put in 'test'" in test.notes
    assert sorted(test.queries["query_id"].to_list()) == ["1", "2"]


def test_beir_qrels_file_that_names_no_split_is_refused(beir):
    (beir / "qrels" / "validation.tsv").write_text("query-id\tcorpus-id\tscore\n3\t12\t1\n", encoding="utf-8")
    with pytest.raises(DatasetError, match=r"qrels: qrels file\(s\) \['validation\.tsv'\] name no split; "
                                           r"expected train\.tsv, dev\.tsv, test\.tsv"):
        load_dataset(beir, "beir", "test")


def test_jsonl_train_split(folder):
    write_lines(folder / "queries.jsonl", QUERIES + [{"id": "q5", "text": "wing drag", "split": "train"}])
    write_lines(folder / "qrels.jsonl", QRELS + [{"query_id": "q5", "doc_id": "d1", "grade": 1}])
    train = load_dataset(folder, "jsonl", "train")
    assert train.queries.select("query_id", "split").rows() == [("q5", "train")]
    every = load_dataset(folder, "jsonl")  # the default split: all
    assert dict(every.queries.select("query_id", "split").iter_rows()) == {"q1": "dev", "q2": "test", "q4": "test",
                                                                          "q5": "train"}


# ---------------------------------------------------------------- hashing and saving


def test_content_hash_is_order_independent_and_sees_one_changed_text(folder):
    ds = load_dataset(folder, "jsonl", "all")
    assert content_hash(ds) == content_hash(load_dataset(folder, "jsonl", "all"))
    shuffled = Dataset(ds.name, ds.corpus.reverse(), ds.queries.reverse(), ds.qrels.reverse(), ())
    assert content_hash(shuffled) == content_hash(ds)
    changed = ds.corpus.with_columns(
        pl.when(pl.col("doc_id") == "d2").then(pl.lit("भारत एक देश है।")).otherwise(pl.col("text")).alias("text")
    )
    assert content_hash(Dataset(ds.name, changed, ds.queries, ds.qrels, ds.notes)) != content_hash(ds)


def test_save_and_load_round_trip(folder, tmp_path):
    ds = load_dataset(folder, "jsonl", "all")
    out = tmp_path / "saved"
    save_dataset(ds, out)
    assert sorted(p.name for p in out.iterdir()) == ["corpus.parquet", "dataset.json", "qrels.parquet", "queries.parquet"]
    back = load_saved_dataset(out)
    assert back.name == ds.name and back.notes == ds.notes
    for table in ("corpus", "queries", "qrels"):
        assert getattr(back, table).equals(getattr(ds, table))
    assert back.corpus.schema == pl.Schema(CORPUS_SCHEMA)


def test_saved_dataset_is_checked_by_its_file_hashes_and_by_rows_when_they_differ(folder, tmp_path, monkeypatch):
    from retbench.tasks.stages import dataset as dataset_module

    ds = load_dataset(folder, "jsonl", "all")
    save_dataset(ds, tmp_path / "saved")
    real_hash = dataset_module.content_hash
    # The files are the bytes save_dataset wrote: no row-by-row hashing on load.
    monkeypatch.setattr(dataset_module, "content_hash", lambda _: pytest.fail("rows hashed although the files match"))
    assert load_saved_dataset(tmp_path / "saved").corpus.equals(ds.corpus)
    # Rewritten with the same rows in other bytes (another compression): the rows decide, and match.
    monkeypatch.setattr(dataset_module, "content_hash", real_hash)
    ds.corpus.write_parquet(tmp_path / "saved" / "corpus.parquet", compression="uncompressed")
    assert load_saved_dataset(tmp_path / "saved").corpus.equals(ds.corpus)
    # A changed text in a file: the rows decide, and do not match.
    ds.corpus.with_columns(pl.col("text").str.replace("^", "x")).write_parquet(tmp_path / "saved" / "corpus.parquet")
    with pytest.raises(DatasetError, match="do not match the content hash"):
        load_saved_dataset(tmp_path / "saved")


def test_saved_dataset_changed_on_disk_is_refused(folder, tmp_path):
    ds = load_dataset(folder, "jsonl", "all")
    save_dataset(ds, tmp_path / "saved")
    ds.corpus.head(2).write_parquet(tmp_path / "saved" / "corpus.parquet")
    with pytest.raises(DatasetError, match="do not match the content hash"):
        load_saved_dataset(tmp_path / "saved")
    ds.corpus.drop("language").write_parquet(tmp_path / "saved" / "corpus.parquet")
    with pytest.raises(DatasetError, match=r"corpus\.parquet: missing columns \['language'\]"):
        load_saved_dataset(tmp_path / "saved")


# ---------------------------------------------------------------- language


def test_detect_language_by_script():
    assert detect_language("हिंदी सबसे अधिक बोली जाती है") == "hi"
    assert detect_language("NFL में 308 अंक") == "hi"  # Devanagari letters are the majority
    assert detect_language("The Panthers in the NFL में") == "en"
    assert detect_language("aap kaise ho") == "en"  # Hinglish cannot be told by script
    assert detect_language("42 !") == "und"  # no letter: no script to tell by


# ---------------------------------------------------------------- real collections


@pytest.mark.slow
@pytest.mark.skipif(not CRANFIELD.is_dir(), reason="shared Cranfield collection not present")
def test_cranfield():
    ds = load_dataset(CRANFIELD, "cranfield", "test")
    assert (ds.corpus.height, ds.queries.height, ds.qrels.height) == (1400, 225, 1837)
    grades = dict(((q, d), g) for q, d, g in ds.qrels.iter_rows())
    # cran.qrels rows "1 184 2", "1 13 4", "1 486 -1", "225 1188 -1"
    assert (grades["1", "184"], grades["1", "13"], grades["1", "486"], grades["225", "1188"]) == (3, 1, 0, 0)
    assert ds.qrels.group_by("grade").len().sort("grade").rows() == [(0, 225), (1, 363), (2, 734), (3, 387), (4, 128)]
    # every query has a relevant document (each also has exactly one -1 row, mapped to 0)
    assert ds.qrels.filter(pl.col("grade") >= 1)["query_id"].n_unique() == 225
    queries = dict(ds.queries.select("query_id", "text").iter_rows())
    assert queries["1"].startswith("what similarity laws must be obeyed")
    # the last query is .I 365 in cran.qry and number 225 in cran.qrels
    assert queries["225"].startswith("what design factors can be used to control lift-drag ratios")
    doc = ds.corpus.filter(pl.col("doc_id") == "1").row(0, named=True)
    assert doc["title"] == "experimental investigation of the aerodynamics of a wing in a slipstream ."
    assert "cranfield grades mapped 1->4, 2->3, 3->2, 4->1, -1->0" in ds.notes
    assert "cranfield documents with no title or text, kept: 471, 995" in ds.notes
    assert set(ds.queries["split"]) == {"test"}


@pytest.mark.slow
@pytest.mark.skipif(not CRANFIELD.is_dir(), reason="shared Cranfield collection not present")
def test_cranfield_options():
    with pytest.raises(DatasetError, match="Cranfield has no dev split"):
        load_dataset(CRANFIELD, "cranfield", "dev")
    with pytest.raises(DatasetError, match="Cranfield has no train split"):
        load_dataset(CRANFIELD, "cranfield", "train")
    default = load_dataset(CRANFIELD, "cranfield", "all")
    assert content_hash(default) == content_hash(load_dataset(CRANFIELD, "cranfield", "test"))
    # The TREC-format copy is NOT the same judgments: its 225 "-1" (not relevant) rows read "1"
    # (complete answer) and it lacks "40 85 3". That is why cran.qrels is the default.
    trec = load_dataset(CRANFIELD, "cranfield", "all", qrels_path=CRANFIELD / "cran.qrels.trec-format")
    assert trec.qrels.height == 1836
    assert trec.qrels.filter((pl.col("query_id") == "1") & (pl.col("doc_id") == "486"))["grade"].item() == 4
    raw = load_dataset(CRANFIELD, "cranfield", "all", grade_map={-1: 0, 1: 1, 2: 2, 3: 3, 4: 4})
    assert raw.qrels.filter((pl.col("query_id") == "1") & (pl.col("doc_id") == "13"))["grade"].item() == 4


@pytest.mark.slow
@pytest.mark.skipif(not XQUAD.is_dir(), reason="shared XQuAD collection not present")
def test_xquad_en_en_and_hi_en():
    en = load_dataset(XQUAD, "xquad", "test", query_language="en", doc_language="en")
    hi = load_dataset(XQUAD, "xquad", "test", query_language="hi", doc_language="en")
    for ds in (en, hi):
        assert (ds.corpus.height, ds.queries.height, ds.qrels.height) == (240, 1190, 1190)
        assert set(ds.qrels["grade"]) == {1}
        assert set(ds.corpus["language"]) == {"en"}
    assert en.corpus.equals(hi.corpus)
    assert en.corpus.filter(pl.col("doc_id") == "0-0")["text"].item().startswith("The Panthers defense gave up just 308 points")
    # the same question, asked in Hindi, is judged against the same English paragraph
    en_rel = {q.removesuffix("-en"): d for q, d, _ in en.qrels.iter_rows()}
    hi_rel = {q.removesuffix("-hi"): d for q, d, _ in hi.qrels.iter_rows()}
    assert en_rel == hi_rel
    q = hi.queries.filter(pl.col("query_id") == "56beb4343aeaaa14008c925b-hi").row(0, named=True)
    assert (q["language"], q["category"], detect_language(q["text"])) == ("hi", "Super_Bowl_50", "hi")
    assert en_rel["56beb4343aeaaa14008c925b"] == "0-0"
    hi_docs = load_dataset(XQUAD, "xquad", "test", query_language="en", doc_language="hi").corpus
    assert detect_language(hi_docs["text"][0]) == "hi"
