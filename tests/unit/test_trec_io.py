"""retbench.tasks.analysis.trec: TREC run and qrels files to and from polars frames."""
import polars as pl
import pytest

from retbench.tasks.analysis.trec import read_qrels, read_run, write_qrels, write_run


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_read_run_keeps_ids_as_text_and_ignores_rank(tmp_path):
    path = write(tmp_path, "run.txt",
                 "007 Q0 0042 1 1.5 tag\n"
                 "\n"
                 "007\tQ0   d2  9 -2e-3 tag\r\n"  # tabs, runs of spaces, CRLF
                 "7 Q0 d1 3 inf tag\n")
    df = read_run(path)
    assert df.schema == {"query_id": pl.String, "doc_id": pl.String, "score": pl.Float64}
    assert df.rows() == [("007", "0042", 1.5), ("007", "d2", -0.002), ("7", "d1", float("inf"))]


def test_read_qrels(tmp_path):
    path = write(tmp_path, "qrels.txt", "001 0 d1 2\n001 0 d2 -1\n002 1 d1 0\n")
    df = read_qrels(path)
    assert df.schema == {"query_id": pl.String, "doc_id": pl.String, "grade": pl.Int64}
    assert df.rows() == [("001", "d1", 2), ("001", "d2", -1), ("002", "d1", 0)]


@pytest.mark.parametrize("text, message", [
    ("q Q0 d1 1 0.5 t\n\nq Q0 d2 2 0.4\n", r"run.txt:3: expected 6 columns .* found 5"),
    ("q Q0 d1 1 0.5 t\nq Q0 d2 2 high t\n", r"run.txt:2: score is not a number: 'high'"),
    ("q Q0 d1 1 NaN t\n", r"run.txt:1: score is NaN: 'NaN'"),
    ("q Q0 d1 1 0.5 t extra\n", r"run.txt:1: expected 6 columns .* found 7"),
])
def test_read_run_errors_name_file_and_line(tmp_path, text, message):
    with pytest.raises(ValueError, match=message):
        read_run(write(tmp_path, "run.txt", text))


@pytest.mark.parametrize("text, message", [
    ("q 0 d1 1\nq 0 d2 1.5\n", r"qrels.txt:2: grade is not an integer: '1.5'"),
    ("q 0 d1\n", r"qrels.txt:1: expected 4 columns .* found 3"),
    ("q 0 d1 yes\n", r"qrels.txt:1: grade is not an integer: 'yes'"),
])
def test_read_qrels_errors_name_file_and_line(tmp_path, text, message):
    with pytest.raises(ValueError, match=message):
        read_qrels(write(tmp_path, "qrels.txt", text))


def test_write_run_orders_like_trec_eval_and_round_trips(tmp_path):
    df = pl.DataFrame({"query_id": ["q2", "q1", "q1", "q1"],
                       "doc_id": ["x", "a", "b", "c"],
                       "score": [0.1, 0.5, 0.5, 0.1 + 0.2]})
    path = tmp_path / "run.txt"
    write_run(df, path, tag="mine")
    lines = path.read_text().splitlines()
    # Tie at 0.5 goes to the higher doc id; ranks restart at 1 per query.
    assert lines == ["q1 Q0 b 1 0.5 mine", "q1 Q0 a 2 0.5 mine",
                     "q1 Q0 c 3 0.30000000000000004 mine", "q2 Q0 x 1 0.1 mine"]
    back = read_run(path)
    assert back.sort(["query_id", "doc_id"]).equals(df.sort(["query_id", "doc_id"]))


def test_write_qrels_round_trips(tmp_path):
    df = pl.DataFrame({"query_id": ["007", "007"], "doc_id": ["b", "a"], "grade": [-1, 3]})
    path = tmp_path / "qrels.txt"
    write_qrels(df, path)
    assert path.read_text().splitlines() == ["007 0 a 3", "007 0 b -1"]
    assert read_qrels(path).equals(df.sort("doc_id"))


@pytest.mark.parametrize("df, tag, message", [
    (pl.DataFrame({"query_id": ["q"], "doc_id": ["a b"], "score": [1.0]}), "t", "whitespace"),
    (pl.DataFrame({"query_id": ["q"], "doc_id": ["a"], "score": [1.0]}), "my run", "tag"),
    (pl.DataFrame({"query_id": ["q"], "doc_id": ["a"]}), "t", r"missing columns \['score'\]"),
])
def test_write_run_refuses_unreadable_output(tmp_path, df, tag, message):
    with pytest.raises(ValueError, match=message):
        write_run(df, tmp_path / "run.txt", tag=tag)
