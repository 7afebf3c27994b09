"""The judging pool (issue 32 item 3) on a hand-made run: one row per unjudged (query, document)
of every setting's top depth, most settings first, then the sum of 1/rank, then the best rank;
the sheet and the page data; `retbench judge export` on a hand-made output folder."""
from __future__ import annotations

import argparse
import csv
import io
import json

import polars as pl
import pytest

from retbench.flows import judge_command
from retbench.tasks.analysis.pool import grade_scale, judged_share, judging_pool, top_ranked, with_texts
from retbench.tasks.datasets.model import CORPUS_SCHEMA, QRELS_SCHEMA, QUERIES_SCHEMA, Dataset
from retbench.tasks.reporting.judging import PoolFacts, judging_page, page_data, script_json, sheet_text
from retbench.tasks.stages.dataset import save_dataset

# Scores listed best first. C ranks b and a on one score in single precision (a is 1e-9 higher in
# double): the tie goes to the higher doc id, b, as trec_eval (and judged@k) order them.
RANKINGS = {
    ("A", "q1"): [("x", 0.9), ("a", 0.8), ("b", 0.7), ("c", 0.6)],
    ("B", "q1"): [("a", 0.9), ("c", 0.8), ("x", 0.7)],
    ("C", "q1"): [("b", 0.5), ("a", 0.5 + 1e-9)],
    ("A", "q2"): [("y", 0.9), ("d", 0.8)],
    ("B", "q2"): [("d", 0.9), ("e", 0.8)],
    ("A", "d1"): [("z", 0.9)],
}
QRELS = pl.DataFrame([("q1", "x", 2), ("q2", "y", 0), ("d1", "x", 1)], schema=QRELS_SCHEMA, orient="row")


def _run() -> pl.DataFrame:
    return pl.DataFrame([(setting, q, doc, f"{doc}#0", score) for (setting, q), docs in RANKINGS.items()
                         for doc, score in docs],
                        schema={"setting": pl.String, "query_id": pl.String, "doc_id": pl.String,
                                "chunk_id": pl.String, "score": pl.Float64}, orient="row")


def test_top_ranked_orders_as_trec_eval_in_single_precision():
    top = top_ranked(_run(), 3)
    c = top.filter((pl.col("setting") == "C") & (pl.col("query_id") == "q1"))
    assert c.select("doc_id", "rank").rows() == [("b", 1), ("a", 2)]
    assert top.filter(pl.col("setting") == "A", pl.col("query_id") == "q1")["doc_id"].to_list() == ["x", "a", "b"]
    assert set(top_ranked(_run(), 3, ["q2"])["query_id"]) == {"q2"}
    with pytest.raises(ValueError, match="depth must be at least 1"):
        top_ranked(_run(), 0)
    with pytest.raises(ValueError, match=r"missing columns \['chunk_id'\]"):
        top_ranked(_run().drop("chunk_id"), 3)


def test_pool_dedups_orders_and_keeps_every_rank():
    pool = judging_pool(top_ranked(_run(), 3, ["q1", "q2"]), QRELS)
    # a: 3 settings; d: 2 settings, 1/1 + 1/2; b: 2 settings, 1/1 + 1/3; c and e: 1 setting at rank 2, by query id.
    assert pool.select("pool_rank", "query_id", "doc_id", "settings", "best_rank").rows() == [
        (1, "q1", "a", 3, 1), (2, "q2", "d", 2, 1), (3, "q1", "b", 2, 1), (4, "q1", "c", 1, 2), (5, "q2", "e", 1, 2)]
    assert pool["reciprocal_rank_sum"].to_list() == pytest.approx([2.0, 1.5, 4 / 3, 0.5, 0.5])
    # Best rank first, then setting; the judged x (q1) and y (q2, grade 0 is a judgment) are out.
    assert pool["ranked_by"][0].to_list() == [{"setting": "B", "rank": 1}, {"setting": "A", "rank": 2},
                                              {"setting": "C", "rank": 2}]
    assert pool.filter(pl.col("doc_id").is_in(["x", "y", "z"])).height == 0
    # Deeper pools only add pairs; depth 1 keeps each setting's first document.
    assert judging_pool(top_ranked(_run(), 1, ["q1", "q2"]), QRELS).select("doc_id", "settings").rows() == [
        ("a", 1), ("b", 1), ("d", 1)]


def test_judged_share_is_judged_at_depth_per_setting():
    shares = judged_share(top_ranked(_run(), 3, ["q1", "q2"]), QRELS)
    # A: q1 x judged of 3, q2 y judged of 2; B: q1 x of 3, q2 none of 2; C: q1 none of 2.
    assert shares.rows() == [("A", 2, pytest.approx((1 / 3 + 1 / 2) / 2)), ("B", 2, pytest.approx(1 / 6)), ("C", 1, 0.0)]


def test_grade_scale_follows_the_qrels():
    assert grade_scale(QRELS) == 2
    assert grade_scale(QRELS.filter(pl.col("grade") == 0)) == 3  # no positive grade: the default 0-3
    assert grade_scale(QRELS.clear()) == 3
    assert grade_scale(pl.DataFrame({"grade": [0, 1, 4]})) == 4


CORPUS = pl.DataFrame([(d, f"Title {d}", f"Body of {d}.", "en") for d in "abcdexyz"], schema=CORPUS_SCHEMA, orient="row")
QUERIES = pl.DataFrame([("q1", "first query", "en", "c", "test"), ("q2", "=1+1 second", "en", "c", "test"),
                        ("d1", "dev query", "en", "c", "dev")], schema=QUERIES_SCHEMA, orient="row")


def test_texts_are_the_ranking_chunk_else_the_document():
    pool = judging_pool(top_ranked(_run(), 3, ["q1", "q2"]), QRELS)
    chunks = pl.DataFrame({"chunk_id": ["a#0"], "start": [9], "end": [19], "text": ["Body of a."]})
    texts = with_texts(pool, QUERIES, CORPUS, chunks)
    first = texts.row(0, named=True)
    assert (first["query"], first["text"], first["document"], first["start"]) == (
        "first query", "Body of a.", "Title a\n\nBody of a.", 9)
    assert first["document"][first["start"]:first["end"]] == first["text"]
    assert texts.row(1, named=True)["text"] == "Title d\n\nBody of d."  # d#0 is not in the chunks: the document
    with pytest.raises(ValueError, match=r"not in its dataset's corpus: \['a'"):
        with_texts(pool, QUERIES, CORPUS.filter(pl.col("doc_id") != "a"))


def _pairs():
    pool = judging_pool(top_ranked(_run(), 3, ["q1", "q2"]), QRELS)
    return with_texts(pool, QUERIES, CORPUS.with_columns(
        text=pl.when(pl.col("doc_id") == "b").then(pl.lit("line one\nline, two\t\"quoted\"")).otherwise("text")))


def test_sheet_is_one_row_per_pair_with_an_empty_grade():
    rows = list(csv.DictReader(io.StringIO(sheet_text(_pairs()))))
    assert [(r["pool_rank"], r["query_id"], r["doc_id"], r["grade"]) for r in rows] == [
        ("1", "q1", "a", ""), ("2", "q2", "d", ""), ("3", "q1", "b", ""), ("4", "q1", "c", ""), ("5", "q2", "e", "")]
    assert rows[0]["ranked_by"] == "B #1; A #2; C #2"
    assert rows[2]["text"] == "Title b\n\nline one\nline, two\t\"quoted\""  # one cell, newlines and all
    assert rows[1]["query"] == "'=1+1 second"  # a spreadsheet would run "=1+1" as a formula
    tsv = list(csv.DictReader(io.StringIO(sheet_text(_pairs(), "\t")), delimiter="\t"))
    assert tsv == rows


FACTS = PoolFacts(run="hand", depth=3, split="test", queries=2, max_grade=2, judged={"A": 0.4})


def test_page_data_escapes_and_hashes():
    escaped = script_json({"t": "</script><!-- & \u2028\u2029"})
    assert "<" not in escaped and ">" not in escaped and "&" not in escaped and "\u2028" not in escaped
    assert json.loads(escaped) == {"t": "</script><!-- & \u2028\u2029"}
    data = page_data(_pairs(), FACTS)
    assert data["hash"] == page_data(_pairs(), FACTS)["hash"]
    assert data["hash"] != page_data(_pairs().head(4), FACTS)["hash"]
    assert [p["doc_id"] for p in data["pairs"]] == ["a", "d", "b", "c", "e"]
    assert sorted(data["documents"]) == ["a", "b", "c", "d", "e"]


def test_page_runs_only_its_own_script_and_holds_data_in_one_json_block():
    page = judging_page(_pairs().with_columns(query=pl.lit("</script><script>alert(1)</script>")), FACTS)
    assert page.count("<script") == 2 and page.count("</script>") == 2
    assert "alert(1)" in page and "<script>alert(1)" not in page
    assert "script-src 'sha256-" in page and "'unsafe-inline'" not in page and "default-src 'none'" in page
    # Nothing to fetch: no URL and no src or href but the download link's placeholder.
    assert "://" not in page and "src=" not in page and page.count("href=") == 1


# --- the command, on a hand-made output folder ------------------------------------------------------


def output_folder(tmp_path, qrels=QRELS):
    dataset_dir = save_dataset(Dataset("hand", CORPUS, QUERIES, qrels), tmp_path / "store" / "datasets" / "x")
    out = tmp_path / "out"
    out.mkdir()
    run = _run().with_columns(provider=pl.col("setting").str.to_lowercase(), index=pl.lit("flat"),
                              nprobe=pl.lit(None, pl.Int64)).drop("setting")
    run.write_parquet(out / "runs.parquet")
    (out / "manifest.json").write_text(json.dumps({"run": {"spec_name": "hand"}, "dataset": {"path": str(dataset_dir)},
                                                   "chunks": {"path": str(tmp_path / "store" / "gone.parquet")}}))
    return out


def _cli(argv):
    parser = argparse.ArgumentParser(prog="retbench")
    judge_command.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_export_writes_the_test_split_pool(tmp_path, capsys):
    out = output_folder(tmp_path)
    target = tmp_path / "pool.csv"
    assert _cli(["judge", "export", str(out), "--depth", "3", "--format", "csv", "--out", str(target)]) == 0
    rows = list(csv.DictReader(io.StringIO(target.read_text(encoding="utf-8"), newline="")))
    assert [(r["query_id"], r["doc_id"], r["ranked_by"]) for r in rows][:2] == [
        ("q1", "a", "b flat #1; a flat #2; c flat #2"), ("q2", "d", "b flat #1; a flat #2")]
    printed = capsys.readouterr().out
    assert printed.startswith(f"wrote 5 unjudged pairs (top 3 of 2 test queries, 3 settings; grades 0-2) to {target}\n")
    assert "judged@3 now: a flat 0.42, b flat 0.17, c flat 0.00" in printed
    assert "chunk texts were not found" in printed
    # --split dev: the dev query's z; --format all writes the three next to --out.
    assert _cli(["judge", "export", str(out), "--split", "dev", "--format", "all", "--out", str(tmp_path / "dev")]) == 0
    assert sorted(p.name for p in tmp_path.glob("dev.*")) == ["dev.csv", "dev.html", "dev.tsv"]
    assert [r["doc_id"] for r in csv.DictReader(io.StringIO((tmp_path / "dev.csv").read_text(encoding="utf-8"), newline=""))] == ["z"]


def test_export_refusals_and_nothing_to_judge(tmp_path, capsys):
    out = output_folder(tmp_path)
    assert _cli(["judge", "export", str(out), "--depth", "0"]) == 2
    assert capsys.readouterr().err == "retbench: --depth must be at least 1 (got 0)\n"
    (out / "manifest.json").rename(out / "moved.json")
    assert _cli(["judge", "export", str(out)]) == 2
    assert capsys.readouterr().err == (f"retbench: {out / 'manifest.json'}: missing; expected the manifest of a finished "
                                       f"run (is {out} a run's output folder?)\n")
    (out / "moved.json").rename(out / "manifest.json")
    pl.read_parquet(out / "runs.parquet").drop("chunk_id").write_parquet(out / "runs.parquet")
    assert _cli(["judge", "export", str(out)]) == 2
    assert capsys.readouterr().err.startswith(f"retbench: {out / 'runs.parquet'}: missing columns ['chunk_id'] (found")
    (out / "runs.parquet").unlink()
    assert _cli(["judge", "export", str(out)]) == 2
    assert capsys.readouterr().err.startswith(f"retbench: {out / 'runs.parquet'}: missing; expected the runs table")
    assert _cli(["judge", "export", str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err.startswith(f"retbench: {tmp_path / 'nowhere'} does not exist; expected a run's output")

    every = pl.DataFrame([(q, d, 1) for (_, q), docs in RANKINGS.items() for d, _ in docs],
                         schema=QRELS_SCHEMA, orient="row").unique()
    judged = output_folder(tmp_path / "judged", qrels=every)
    assert _cli(["judge", "export", str(judged), "--out", str(tmp_path / "none.html")]) == 0
    assert capsys.readouterr().out == "nothing to judge: every top-10 document is judged (2 test queries, 3 settings)\n"
    assert not (tmp_path / "none.html").exists()
    assert _cli(["judge", "export", str(judged), "--split", "train"]) == 2
    assert capsys.readouterr().err == "retbench: --split train: the run has no train query (its queries' splits: dev, test)\n"
