"""`retbench eval` from TREC files: the same per-query values as pytrec_eval (trec_eval's C code)
on both reading paths, errors that name file and line, and retbench's runs.trec read back."""
import argparse
import json

import numpy as np
import polars as pl
import pytest
import pytrec_eval

from retbench.flows.eval_command import add_parser, score_files
from retbench.tasks.analysis.metrics import evaluate
from retbench.tasks.analysis.trec import _QRELS, _RUN, _fast, _slow, read_run, write_qrels, write_run
from retbench.tasks.stages.retrieve import write_trec_run

MEASURES = {"ndcg@10": "ndcg_cut_10", "recall@20": "recall_20", "mrr": "recip_rank", "map": "map",
            "p@5": "P_5"}


def tied_run(seed=0, queries=40, depth=60):
    """Scores on a coarse grid (many ties, broken by doc id), ids that sort differently as
    text and as numbers, grades 0..3 and one negative."""
    rng = np.random.default_rng(seed)
    q = np.repeat([f"{i:03d}" if i % 2 else str(i) for i in range(queries)], depth)
    docs = np.concatenate([rng.choice(500, depth, replace=False) for _ in range(queries)])
    run = pl.DataFrame({"query_id": q, "doc_id": [f"d{d}" if d % 3 else str(d) for d in docs],
                        "score": np.round(rng.random(len(q)) * 5) / 5})
    judged = run.sample(n=queries * 15, seed=seed)
    qrels = judged.select("query_id", "doc_id", grade=pl.Series(rng.choice([-1, 0, 1, 1, 2, 3], judged.height)))
    return run, qrels


def pytrec_values(qrels_path, run_path):
    with open(qrels_path) as f:
        qrels = pytrec_eval.parse_qrel(f)
    with open(run_path) as f:
        run = pytrec_eval.parse_run(f)
    names = {"ndcg_cut.10", "recall.20", "recip_rank", "map", "P.5"}
    return pytrec_eval.RelevanceEvaluator(qrels, names).evaluate(run)


@pytest.mark.parametrize("spacing", ["single", "tabs and runs"])
def test_per_query_values_match_pytrec_eval_from_the_same_files(tmp_path, spacing):
    run, qrels = tied_run()
    run_path, qrels_path = tmp_path / "run.trec", tmp_path / "qrels.trec"
    write_run(run.sample(fraction=1.0, shuffle=True, seed=1), run_path, tag="t")
    write_qrels(qrels, qrels_path)
    ours_path = run_path
    if spacing != "single":  # the line-by-line path: trec_eval accepts any whitespace, blank lines
        lines = run_path.read_text().splitlines()
        ours_path = tmp_path / "spaced.trec"
        ours_path.write_text("\n".join("\t".join(line.split(" ", 2)) + "  " for line in lines) + "\n\n")
    got = score_files(qrels_path, ours_path, list(MEASURES), per_query=True).filter(pl.col("query_id") != "all")
    expected = pytrec_values(qrels_path, run_path)
    assert got.height == len(expected) * len(MEASURES)
    for q, m, v in got.iter_rows():
        assert v == pytest.approx(expected[q][MEASURES[m]], abs=1e-9), (q, m)


@pytest.mark.parametrize("seed", range(60))
def test_fast_and_line_by_line_paths_agree(seed):
    """Whatever the fast path accepts, the line-by-line path accepts with the same rows (and
    the fast path does accept most of these files)."""
    rng = np.random.default_rng(seed)
    odd = ["", "\xa0", '"', "#", "x", "1.5", "nan", "-1e3", "inf", "007", "a\rb", "é"]
    for layout, fields in ((_RUN, ["q", "Q0", "d", "1", "0.5", "t"]), (_QRELS, ["q", "0", "d", "1"])):
        lines = []
        for i in range(rng.integers(1, 12)):
            row = [f"{f}{i}" if f in ("d", "q") else f for f in fields]
            if rng.random() < 0.15:  # one corruption: a field replaced, dropped or added
                j = rng.integers(len(row))
                kind = rng.integers(3)
                if kind == 0:
                    row[j] = str(rng.choice(odd))
                elif kind == 1:
                    del row[j]
                else:
                    row.insert(j, "extra")
            sep = " " if rng.random() < 0.9 else str(rng.choice(["  ", "\t"]))
            lines.append(sep.join(row) if rng.random() < 0.95 else "")
        data = str(rng.choice(["\n", "\r\n"])).join(lines).encode()
        fast = _fast(data, layout)
        if fast is None:
            with pytest.raises(ValueError) if _is_bad(data, layout) else _nothing():
                _slow("x", data, layout)
            continue
        slow = _slow("x", data, layout)
        text = [n for n in layout.names if n != layout.number and n not in layout.integer]
        columns = [*text, "_number", *[f"_{c}" for c in layout.integer]]
        assert fast.select(columns).equals(slow.select(columns)), data


def _is_bad(data, layout):
    try:
        _slow("x", data, layout)
    except ValueError:
        return True
    return False


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.mark.parametrize("text, message", [
    ("q Q0 a 1 0.5 t\n\nq Q0 b 2 0.4 t\nq Q0 a 3 0.3 t\n",
     r"run.trec:4: query 'q' retrieves doc 'a' again in run 't' \(first at line 1\)"),
    ("q\tQ0 a 1 0.5 t\nq Q0 a 2 0.4 t\n", r"run.trec:2: query 'q' retrieves doc 'a' again"),
    ("q Q0 a one 0.5 t\n", r"run.trec:1: rank is not an integer: 'one'"),
    ("q Q0 a 1.5 0.5 t\n", r"run.trec:1: rank is not an integer: '1.5'"),
    ("q Q0 a 1 0.5 t\nq Q0 b 2\t0.4 t x\n", r"run.trec:2: expected 6 columns .* found 7"),
])
def test_cli_errors_name_file_and_line(tmp_path, capsys, text, message):
    (tmp_path / "qrels.trec").write_text("q 0 a 1\n")
    (tmp_path / "run.trec").write_text(text)
    parser = argparse.ArgumentParser(prog="retbench")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["eval", str(tmp_path / "qrels.trec"), str(tmp_path / "run.trec")])
    assert args.func(args) == 2
    err = capsys.readouterr().err
    assert pytest.importorskip("re").search(message, err), err


def test_duplicate_judgement_names_both_lines(tmp_path):
    (tmp_path / "qrels.trec").write_text("q 0 a 1\nq 0 b 0\nq 1 a 2\n")
    with pytest.raises(ValueError, match=r"qrels.trec:3: query 'q' judges doc 'a' again \(first at line 1\)"):
        score_files(tmp_path / "qrels.trec", tmp_path / "qrels.trec", ["mrr"])


def test_runs_trec_written_by_retbench_reads_back_run_by_run(tmp_path, capsys):
    run, qrels = tied_run(seed=2, queries=6, depth=20)
    exact = run.with_columns(provider=pl.lit("minilm"), index=pl.lit("flat"), nprobe=pl.lit(None, pl.Int64))
    approx = run.with_columns(provider=pl.lit("minilm"), index=pl.lit("ivf"), nprobe=pl.lit(4, pl.Int64),
                              score=pl.col("score") * 0.5 + 0.1)
    both = pl.concat([exact, approx])
    path = write_trec_run(both.with_columns(rank=pl.lit(0)), tmp_path / "runs.trec")
    write_qrels(qrels, tmp_path / "qrels.trec")

    parser = argparse.ArgumentParser(prog="retbench")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["eval", str(tmp_path / "qrels.trec"), str(path), "-q", "--format", "json",
                              "-m", "ndcg@10", "-m", "map"])
    assert args.func(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert list(out) == ["minilm_flat_exact", "minilm_ivf_4"]
    for tag, frame in [("minilm_flat_exact", exact), ("minilm_ivf_4", approx)]:
        ev = evaluate(frame.select("query_id", "doc_id", "score"), qrels, ["ndcg@10", "map"])
        for q, m, v in ev.per_query.iter_rows():
            assert out[tag][q][m] == pytest.approx(v, abs=1e-12)
    only = score_files(tmp_path / "qrels.trec", path, ["map"], tag="minilm_ivf_4")
    assert only.columns == ["query_id", "measure", "value"]
    with pytest.raises(ValueError, match="holds 2 runs"):
        read_run(path)

    spaced = both.with_columns(doc_id=pl.when(pl.col("doc_id") == "d1").then(pl.lit("d 1")).otherwise("doc_id"))
    if (spaced["doc_id"] == "d 1").any():
        with pytest.raises(ValueError, match=r"doc_id 'd 1' is empty or contains whitespace"):
            write_trec_run(spaced.with_columns(rank=pl.lit(0)), tmp_path / "bad.trec")
    with pytest.raises(ValueError, match=r"query_id 'a b' is empty or contains whitespace"):
        write_trec_run(both.with_columns(rank=pl.lit(0), query_id=pl.lit("a b")), tmp_path / "bad.trec")
