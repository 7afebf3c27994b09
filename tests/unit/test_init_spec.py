"""`retbench init`'s plain parts: telling a folder's format, choosing the split, and a starter spec
that the spec loader accepts as written."""
import json
from pathlib import Path

import pytest
import yaml

from retbench.support.paths import SHARED_DATA

# The real collections live beside the checkout (../shared/data); a clone elsewhere skips these.
needs_shared_data = pytest.mark.skipif(not (SHARED_DATA / "glasgow").is_dir() or not (SHARED_DATA / "cranfield").is_dir()
                                       or not (SHARED_DATA / "xquad").is_dir(), reason=f"{SHARED_DATA} not present")
from retbench.tasks.config.spec import load_spec
from retbench.tasks.config.starter import StarterFacts, choose_split, spec_name, starter_spec
from retbench.tasks.datasets.detect import detect_format, trec_qrels_files
from retbench.tasks.datasets.errors import DatasetError


def beir_folder(folder: Path, splits=("train", "dev", "test")) -> Path:
    """Six documents, one query per split judged in qrels/<split>.tsv."""
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": f"d{i}", "title": "", "text": f"document {i}"}) + "\n" for i in range(6)))
    (folder / "queries.jsonl").write_text("".join(
        json.dumps({"_id": f"q-{s}", "text": f"query {s}"}) + "\n" for s in splits))
    for i, split in enumerate(splits):
        (folder / "qrels" / f"{split}.tsv").write_text(f"query-id\tcorpus-id\tscore\nq-{split}\td{i}\t1\n")
    return folder


def test_each_format_is_told_by_its_files(tmp_path):
    jsonl = tmp_path / "own"
    jsonl.mkdir()
    for name in ("corpus.jsonl", "queries.jsonl.gz", "qrels.jsonl"):
        (jsonl / name).write_text("")
    assert detect_format(jsonl).format == "jsonl"  # a .gz file counts
    assert detect_format(beir_folder(tmp_path / "beir")).format == "beir"


@needs_shared_data
def test_each_shared_collection_is_told_by_its_files():
    assert detect_format(SHARED_DATA / "cranfield").format == "cranfield"
    npl = detect_format(SHARED_DATA / "glasgow" / "npl")
    assert (npl.format, npl.options) == ("glasgow", {"collection": "npl"})
    xquad = detect_format(SHARED_DATA / "xquad")
    assert (xquad.format, xquad.options) == ("xquad", {"query_language": "hi", "doc_language": "en"})


def test_a_folder_of_no_format_is_one_line_naming_what_was_looked_for(tmp_path):
    (tmp_path / "readme.txt").write_text("nothing here")
    with pytest.raises(DatasetError) as caught:
        detect_format(tmp_path)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{tmp_path}: no dataset format recognised (looked for jsonl:")
    for looked in ("qrels/<split>.tsv", "cran.all.1400", "CISI.ALL", "xquad.<en|hi>.json"):
        assert looked in message


@needs_shared_data
def test_a_parent_of_collections_names_its_subfolders():
    with pytest.raises(DatasetError, match=r"its subfolders cisi, med, npl hold datasets: point at one of them$"):
        detect_format(SHARED_DATA / "glasgow")


@needs_shared_data
def test_trec_qrels_are_told_by_their_four_fields():
    # cran.qrels has three fields (query position, doc, grade): the format's own, not TREC's.
    assert [p.name for p in trec_qrels_files(SHARED_DATA / "cranfield")] == ["cran.qrels.trec-format"]


@pytest.mark.parametrize("splits, expected", [
    ({"dev": 5, "test": 7}, "all"),
    ({"train": 50, "dev": 5, "test": 7}, "all"),  # train scored too, under its own split (not left out)
    ({"train": 50, "test": 7}, "all"),
    ({"train": 50, "dev": 5}, "dev"),
    ({"dev": 5, "test": 0}, "dev"),
    ({"test": 3}, "test"),
])
def test_the_split_is_chosen_from_the_judged_ones(splits, expected):
    assert choose_split(splits)[0] == expected


def test_a_spec_name_is_made_of_allowed_characters():
    assert spec_name("my data (v2)") == "my-data-v2"
    assert spec_name("__") == "dataset"


@pytest.mark.parametrize("languages", [("en",), ("hi", "en")])
def test_the_starter_spec_loads_as_a_benchmark_spec(tmp_path, languages):
    beir_folder(tmp_path / "scifact")
    facts = StarterFacts(name="scifact", dataset_path="scifact", format="beir", options={}, split="test",
                         split_reason="the held-out split", judged_splits={"train": 1, "dev": 1, "test": 1},
                         languages=languages, trec_qrels=("qrels.txt",), found="corpus.jsonl")
    text = starter_spec(facts)
    (tmp_path / "scifact.yaml").write_text(text)
    spec = load_spec(tmp_path / "scifact.yaml")
    assert spec.dataset.path == tmp_path / "scifact" and spec.dataset.split == "test"
    assert [p.kind for p in spec.providers] == ["hashing", "sentence-transformers", "e5-multilingual"]
    assert [s.name for s in spec.systems] == ["bm25+e5"] and spec.indexes.ivf.nprobe == [1, 4, 16]
    assert spec.store_dir == str(tmp_path / ".store")
    assert "# qrels: qrels.txt" in text  # the TREC qrels as a commented alternative, not in force
    assert spec.dataset.qrels is None
    stopwords = yaml.safe_load(text)["lexical"][0].get("tokenizer", {}).get("stopwords", "en")
    assert stopwords == ("none" if "hi" in languages else "en")


def test_format_options_are_written_under_dataset_options(tmp_path):
    facts = StarterFacts(name="xq", dataset_path=str(SHARED_DATA / "xquad"), format="xquad",
                         options={"query_language": "hi", "doc_language": "en"}, split="test", split_reason="",
                         judged_splits={"test": 1190}, languages=("hi", "en"))
    (tmp_path / "xq.yaml").write_text(starter_spec(facts))
    assert load_spec(tmp_path / "xq.yaml").dataset.options == {"query_language": "hi", "doc_language": "en"}
