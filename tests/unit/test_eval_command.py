"""retbench.flows.eval_command: the `retbench eval` subcommand."""
import argparse
import json

import polars as pl
import pytest

from retbench.flows.eval_command import add_parser

QRELS = "q1 0 a 1\nq1 0 b 0\nq2 0 c 2\nq3 0 z 1\n"
# q1: a at rank 2 (tie with c broken by doc id desc); q2: c at rank 1; q9 is run-only.
RUN = ("q1 Q0 a 1 1.0 t\nq1 Q0 c 2 1.0 t\n"
       "q2 Q0 c 1 0.9 t\nq2 Q0 d 2 0.1 t\n"
       "q9 Q0 a 1 1.0 t\n")


@pytest.fixture
def files(tmp_path):
    (tmp_path / "qrels.txt").write_text(QRELS)
    (tmp_path / "run.txt").write_text(RUN)
    return tmp_path


def cli(files, *extra):
    parser = argparse.ArgumentParser(prog="retbench")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["eval", str(files / "qrels.txt"), str(files / "run.txt"), *extra])
    return args.func(args)


def test_default_table_has_means_for_default_measures(files, capsys):
    assert cli(files) == 0
    rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [(m.strip(), q, v) for m, q, v in rows] == [
        ("ndcg@10", "all", f"{(1 / 1.5849625007211563 + 1) / 2:.4f}"),
        ("recall@10", "all", "1.0000"),
        ("mrr", "all", "0.7500"),
        ("map", "all", "0.7500"),
    ]


def test_json_per_query_keyed_by_query_id(files, capsys):
    assert cli(files, "--per-query", "--format", "json", "-m", "mrr", "-m", "P@1") == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {"q1": {"mrr": 0.5, "p@1": 0.0}, "q2": {"mrr": 1.0, "p@1": 1.0},
                   "all": {"mrr": 0.75, "p@1": 0.5}}
    assert list(out) == ["q1", "q2", "all"]


def test_complete_and_relevance_level(files, capsys):
    assert cli(files, "--complete", "--format", "json", "-m", "mrr") == 0
    assert json.loads(capsys.readouterr().out) == {"all": {"mrr": 0.5}}  # q3 scores 0
    assert cli(files, "--relevance-level", "2", "--format", "json", "-m", "mrr") == 0
    assert json.loads(capsys.readouterr().out) == {"all": {"mrr": 0.5}}  # only q2's c counts


def test_parquet_needs_output_and_writes_long_table(files, capsys):
    assert cli(files, "--format", "parquet") == 2
    assert capsys.readouterr().err.startswith("retbench: eval --format parquet needs --output PATH")
    out = files / "scores.parquet"
    assert cli(files, "--format", "parquet", "--output", str(out), "-q", "-m", "mrr") == 0
    df = pl.read_parquet(out)
    assert df.rows() == [("q1", "mrr", 0.5), ("q2", "mrr", 1.0), ("all", "mrr", 0.75)]


def test_table_to_output_file(files, capsys):
    out = files / "scores.txt"
    assert cli(files, "-m", "map", "-o", str(out)) == 0
    assert capsys.readouterr().out == ""
    assert out.read_text().split() == ["map", "all", "0.7500"]


@pytest.mark.parametrize("extra, message", [
    (["-m", "ndcg@ten"], "unknown measure 'ndcg@ten'"),
    (["-l", "0"], "relevance_level must be >= 1"),
])
def test_bad_arguments_exit_2_with_one_retbench_line(files, capsys, extra, message):
    assert cli(files, *extra) == 2
    err = capsys.readouterr().err
    assert message in err and err.startswith("retbench: ") and err.count("\n") == 1, err


def test_malformed_run_names_file_and_line(files, capsys):
    (files / "run.txt").write_text("q1 Q0 a 1 1.0 t\nq1 Q0 c 2 x t\n")
    assert cli(files) == 2
    assert "run.txt:2: score is not a number: 'x'" in capsys.readouterr().err


def test_duplicate_doc_errors_name_the_file_and_both_lines(files, capsys):
    (files / "run.txt").write_text("q1 Q0 a 1 1.0 t\n\nq1 Q0 c 2 0.5 t\nq1 Q0 a 3 0.2 t\n")
    assert cli(files) == 2
    assert capsys.readouterr().err == (
        f"retbench: {files / 'run.txt'}:4: query 'q1' retrieves doc 'a' again in run 't' (first at line 1); "
        "trec_eval refuses duplicate docs\n")
    (files / "run.txt").write_text(RUN)
    (files / "qrels.txt").write_text("q1 0 a 1\nq1 0 b 0\nq1 0 a 2\n")
    assert cli(files) == 2
    assert capsys.readouterr().err == (
        f"retbench: {files / 'qrels.txt'}:3: query 'q1' judges doc 'a' again (first at line 1); "
        "trec_eval refuses duplicate docs\n")


def test_a_missing_file_is_one_line_naming_it_with_exit_2(files, capsys):
    (files / "run.txt").unlink()
    assert cli(files) == 2
    assert capsys.readouterr().err == f"retbench: {files / 'run.txt'}: No such file or directory\n"


def test_the_command_line_exits_2_with_the_retbench_prefix(files):
    import subprocess
    import sys

    (files / "run.txt").write_text("q1 Q0 a 1 1.0 t\nq1 Q0 c 2 x t\n")
    done = subprocess.run([sys.executable, "-m", "retbench.flows.cli", "eval", str(files / "qrels.txt"),
                           str(files / "run.txt")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.startswith("retbench: ") and done.stderr.count("\n") == 1, done.stderr
    assert "run.txt:2: score is not a number: 'x'" in done.stderr
