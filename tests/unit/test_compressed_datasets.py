"""`.jsonl.gz` read in place of `.jsonl` (jsonl and BEIR formats), and a missing file with a packed
sibling (`.bz2`, `.zip`, ...) named in the error, so the user knows what to unpack."""
import gzip
import json
from pathlib import Path

import pytest

from retbench.tasks.datasets.errors import DatasetError
from retbench.tasks.stages.dataset import content_hash, load_dataset


def _lines(rows) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode()


CORPUS = [{"id": "d1", "text": "रिफंड नीति"}, {"id": "d2", "text": "password reset"}]
QUERIES = [{"id": "q1", "text": "refund", "split": "dev"}, {"id": "q2", "text": "reset", "split": "test"}]
QRELS = [{"query_id": "q1", "doc_id": "d1", "grade": 2}, {"query_id": "q2", "doc_id": "d2", "grade": 1}]


def _jsonl(folder: Path, gzipped: set[str]) -> Path:
    folder.mkdir(parents=True)
    for name, rows in (("corpus", CORPUS), ("queries", QUERIES), ("qrels", QRELS)):
        data = _lines(rows)
        if name in gzipped:
            (folder / f"{name}.jsonl.gz").write_bytes(gzip.compress(data))
        else:
            (folder / f"{name}.jsonl").write_bytes(data)
    return folder


def test_gzipped_jsonl_files_read_as_the_plain_ones(tmp_path):
    plain = load_dataset(_jsonl(tmp_path / "plain", set()), "jsonl", "all", name="x")
    packed = load_dataset(_jsonl(tmp_path / "packed", {"corpus", "qrels"}), "jsonl", "all", name="x")
    assert packed.corpus["text"].to_list() == ["रिफंड नीति", "password reset"]
    assert content_hash(packed) == content_hash(plain)


def test_an_error_inside_a_gzipped_file_names_that_file_and_line(tmp_path):
    folder = _jsonl(tmp_path / "d", {"corpus", "queries"})
    (folder / "qrels.jsonl").unlink()
    bad = QRELS + [{"query_id": "q1", "doc_id": "d2", "grade": 7}]
    (folder / "qrels.jsonl.gz").write_bytes(gzip.compress(_lines(bad)))
    with pytest.raises(DatasetError, match=r"qrels\.jsonl\.gz:3: grade 7 for query 'q1' is outside 0\.\.3"):
        load_dataset(folder, "jsonl", "all")


def test_a_truncated_gzip_file_is_a_dataset_error(tmp_path):
    folder = _jsonl(tmp_path / "d", {"corpus"})
    data = (folder / "corpus.jsonl.gz").read_bytes()
    (folder / "corpus.jsonl.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(DatasetError, match=r"corpus\.jsonl\.gz:\d+: not readable as gzip"):
        load_dataset(folder, "jsonl", "all")


def test_beir_reads_gzipped_corpus_and_queries(tmp_path):
    folder = tmp_path / "beir"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl.gz").write_bytes(gzip.compress(_lines(
        [{"_id": "d1", "title": "", "text": "one"}, {"_id": "d2", "title": "", "text": "two"}])))
    (folder / "queries.jsonl.gz").write_bytes(gzip.compress(_lines([{"_id": "q1", "text": "one?"}])))
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    dataset = load_dataset(folder, "beir", "test")
    assert (dataset.corpus.height, dataset.queries.height, dataset.qrels["doc_id"].to_list()) == (2, 1, ["d1"])


@pytest.mark.parametrize("sibling", ["corpus.jsonl.bz2", "corpus.jsonl.zip", "corpus.zip", "scifact.zip"])
def test_a_missing_file_names_its_packed_sibling(tmp_path, sibling):
    folder = _jsonl(tmp_path / "d", set())
    (folder / "corpus.jsonl").unlink()
    (folder / sibling).write_bytes(b"packed")
    with pytest.raises(DatasetError) as caught:
        load_dataset(folder, "jsonl", "all")
    message = str(caught.value)
    assert message.startswith(f"{folder / 'corpus.jsonl'}: missing; expected corpus.jsonl")
    assert f"found {sibling} beside it: unpack it into {folder}" in message


def test_a_missing_file_without_a_packed_sibling_says_only_what_was_expected(tmp_path):
    folder = _jsonl(tmp_path / "d", set())
    (folder / "qrels.jsonl").unlink()
    (folder / "notes.txt").write_text("not an archive")
    with pytest.raises(DatasetError) as caught:
        load_dataset(folder, "jsonl", "all")
    assert str(caught.value) == f"{folder / 'qrels.jsonl'}: missing; expected qrels.jsonl with query_id, doc_id, grade"


def test_a_missing_dataset_folder_names_the_archive_beside_it(tmp_path):
    from retbench.tasks.config.spec import load_spec
    from retbench.tasks.stages.prepare import check_inputs

    (tmp_path / "scifact.zip").write_bytes(b"packed")
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"name: s\ndataset: {{path: scifact, format: beir}}\nproviders: [{{name: h, kind: hashing}}]\n"
                    f"output_dir: {tmp_path / 'out'}\nstore_dir: {tmp_path / 'store'}\n")
    with pytest.raises(DatasetError, match=r"dataset\.path .*scifact: not found; .*; found scifact\.zip beside it"):
        check_inputs(load_spec(spec))
