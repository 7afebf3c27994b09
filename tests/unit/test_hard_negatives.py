"""Hard-negative triples from a hand-made run; the held-out test split is refused."""
import argparse
import json

import polars as pl
import pytest

from retbench.flows import hard_negatives_command
from retbench.tasks.datasets.model import CORPUS_SCHEMA, QRELS_SCHEMA, QUERIES_SCHEMA, Dataset
from retbench.tasks.stages.dataset import save_dataset
from retbench.tasks.analysis.hard_negatives import (
    HeldOutSplitError,
    hard_negative_pairs,
    hard_negative_triples,
    mining_queries,
    mining_split,
    normalised_query_text,
    write_triples,
)
from retbench.tasks.analysis.runs import RUN_SCHEMA

CORPUS = pl.DataFrame([
    ("r1", "Refunds", "Refunds take 5 days.", "en"),
    ("r2", "Refund policy", "Full refunds within 30 days.", "en"),
    ("r3", "", "रिफंड 5 दिनों में मिलता है।", "hi"),
    ("n1", "Invoices", "Download invoices.", "en"),
    ("n2", "Billing", "Change the billing email.", "en"),
    ("n3", "Plans", "Compare plans.", "en"),
    ("n4", "Taxes", "VAT on invoices.", "en"),
    ("r5", "Keys", "Rotate keys.", "en"),
    ("dup", "Keys", "Rotate keys.", "en"),  # same text as r5: a duplicate, never a negative for it
], schema=CORPUS_SCHEMA, orient="row")
QUERIES = pl.DataFrame([
    ("d1", "how long do refunds take", "en", "billing", "dev"),
    ("d2", "रिफंड कब मिलेगा", "hi", "billing", "dev"),
    ("d3", "rotate api key", "en", "keys", "dev"),
    ("t1", "refund time", "en", "billing", "test"),
], schema=QUERIES_SCHEMA, orient="row")
QRELS = pl.DataFrame([
    ("d1", "r1", 1), ("d1", "r2", 3), ("d1", "n2", 0),
    ("d2", "r3", 2),
    ("d3", "r5", 1),
    ("t1", "r1", 1),
], schema=QRELS_SCHEMA, orient="row")
DATASET = Dataset("hand", CORPUS, QUERIES, QRELS)

RANKINGS = {
    "d1": ["n1", "r1", "n2", "r2", "n3"],  # n1 and n2 are above r2; n3 is below every relevant doc
    "d2": ["n1", "n4"],                    # the relevant r3 was not retrieved at all
    "d3": ["dup", "r5"],
    "t1": ["n1", "r1"],                    # held out: must never be mined
}


def _run(provider="m", index="flat", nprobe=None) -> pl.DataFrame:
    rows = [(q, provider, index, nprobe, 0, doc, f"{doc}#0", 1.0 - i / 10)
            for q, docs in RANKINGS.items() for i, doc in enumerate(docs)]
    return pl.DataFrame(rows, schema=RUN_SCHEMA, orient="row")


RUN = pl.concat([_run(), _run(index="ivf", nprobe=1).with_columns(score=-pl.col("score"))])


def test_pairs_are_negatives_ranked_above_a_relevant_document():
    pairs = hard_negative_pairs(RUN, DATASET, "m")
    got = [(q, p, n) for q, p, n in pairs.select("query_id", "positive_id", "negative_id").iter_rows()]
    assert got == [
        ("d1", "r2", "n1"),  # n1 is above r1 and r2: paired with the higher-graded r2
        ("d1", "r2", "n2"),  # judged 0 and above r2
        ("d2", "r3", "n1"),  # r3 unretrieved: ranked below everything
        ("d2", "r3", "n4"),
    ]
    assert pairs.filter(pl.col("query_id") == "d2")["positive_rank"].to_list() == [None, None]
    assert pairs.filter(pl.col("query_id") == "d1")["negative_rank"].to_list() == [1, 3]


def test_triple_texts_are_title_blank_line_text():
    triples = hard_negative_triples(RUN, DATASET, "m")
    assert triples[0] == {
        "anchor": "how long do refunds take",
        "positive": "Refund policy\n\nFull refunds within 30 days.",
        "negative": "Invoices\n\nDownload invoices.",
    }
    assert triples[2]["positive"] == "रिफंड 5 दिनों में मिलता है।"  # no title: the text alone


def test_options_max_per_query_unretrieved_and_setting():
    capped = hard_negative_pairs(RUN, DATASET, "m", max_per_query=1)
    assert capped.select("query_id", "negative_id").rows() == [("d1", "n1"), ("d2", "n1")]
    retrieved_only = hard_negative_pairs(RUN, DATASET, "m", include_unretrieved=False)
    assert set(retrieved_only["query_id"]) == {"d1"}
    # the ivf run has every score negated, so its ranking is reversed: d1 = n3, r2, n2, r1, n1
    ivf = hard_negative_pairs(RUN, DATASET, "m", index="ivf", nprobe=1)
    assert ivf.filter(pl.col("query_id") == "d1").select("positive_id", "negative_id").rows() == [("r2", "n3"), ("r1", "n2")]
    with pytest.raises(ValueError, match="no rows for provider 'other'"):
        hard_negative_pairs(RUN, DATASET, "other")


def test_test_split_is_refused():
    with pytest.raises(HeldOutSplitError, match="held out"):
        hard_negative_pairs(RUN, DATASET, "m", split="test")
    with pytest.raises(HeldOutSplitError, match="'t1'"):
        hard_negative_triples(RUN, DATASET, "m", query_ids=["d1", "t1"])
    # a selection of dev queries is fine
    assert {t["anchor"] for t in hard_negative_triples(RUN, DATASET, "m", query_ids=["d2"])} == {"रिफंड कब मिलेगा"}
    only_test = Dataset("t", CORPUS, QUERIES.filter(pl.col("split") == "test"), QRELS)
    with pytest.raises(ValueError, match="no 'dev' queries"):
        hard_negative_pairs(RUN, only_test, "m")


def test_unselected_test_queries_never_leak():
    pairs = hard_negative_pairs(RUN, DATASET, "m", max_per_query=100)
    assert "t1" not in pairs["query_id"].to_list()
    assert "refund time" not in pairs["anchor"].to_list()


def test_write_triples_is_sentence_transformers_jsonl(tmp_path):
    path = write_triples(tmp_path / "triples.jsonl", hard_negative_triples(RUN, DATASET, "m"))
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 4
    rows = [json.loads(line) for line in lines]
    assert all(list(row) == ["anchor", "positive", "negative"] for row in rows)
    assert "रिफंड" in lines[2]  # written as UTF-8, not \u escapes
    with pytest.raises(ValueError, match="expected exactly"):
        write_triples(tmp_path / "bad.jsonl", [{"anchor": "a", "positive": "p", "negative": "n", "id": 1}])


def _output_dir(tmp_path):
    dataset_dir = save_dataset(DATASET, tmp_path / "store" / "datasets" / "x")
    out = tmp_path / "out"
    out.mkdir()
    RUN.write_parquet(out / "runs.parquet")
    (out / "manifest.json").write_text(json.dumps({"dataset": {"path": str(dataset_dir)}}))
    return out


def _cli(argv):
    parser = argparse.ArgumentParser(prog="retbench")
    hard_negatives_command.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_writes_triples(tmp_path, capsys):
    out = _output_dir(tmp_path)
    target = tmp_path / "triples.jsonl"
    assert _cli(["hard-negatives", str(out), "--provider", "m", "--max-per-query", "1", "--out", str(target)]) == 0
    rows = [json.loads(line) for line in target.read_text(encoding="utf-8").splitlines()]
    assert [r["negative"] for r in rows] == ["Invoices\n\nDownload invoices."] * 2
    assert "wrote 2 triples from 2 dev queries" in capsys.readouterr().out


def test_cli_refuses_test_split(tmp_path, capsys):
    out = _output_dir(tmp_path)
    target = tmp_path / "triples.jsonl"
    assert _cli(["hard-negatives", str(out), "--provider", "m", "--split", "test", "--out", str(target)]) == 2
    assert "held out" in capsys.readouterr().err
    assert _cli(["hard-negatives", str(out), "--provider", "m", "--query-id", "t1", "--out", str(target)]) == 2
    assert "'t1'" in capsys.readouterr().err
    assert not target.exists()


def test_cli_names_a_missing_manifest(tmp_path, capsys):
    assert _cli(["hard-negatives", str(tmp_path), "--provider", "m", "--out", str(tmp_path / "t.jsonl")]) == 2
    assert "manifest.json: missing" in capsys.readouterr().err


# ---------------------------------------------------------------- the split mined

# The same collection with train queries: t2 and t3 are train queries, and t3 asks the test
# query t1's question in other case and spacing (the same question under another id).
TRAIN_QUERIES = pl.concat([QUERIES, pl.DataFrame([
    ("t2", "refund policy", "en", "billing", "train"),
    ("t3", "  Refund   TIME", "en", "billing", "train"),
], schema=QUERIES_SCHEMA, orient="row")])
TRAIN_QRELS = pl.concat([QRELS, pl.DataFrame([("t2", "r2", 2), ("t3", "r1", 1)], schema=QRELS_SCHEMA, orient="row")])
WITH_TRAIN = Dataset("hand", CORPUS, TRAIN_QUERIES, TRAIN_QRELS)
TRAIN_RUN = pl.concat([RUN, pl.DataFrame(
    [(q, "m", "flat", None, 0, doc, f"{doc}#0", 1.0 - i / 10)
     for q, docs in {"t2": ["n1", "r2"], "t3": ["n3", "r1"]}.items() for i, doc in enumerate(docs)],
    schema=RUN_SCHEMA, orient="row")])


def test_mining_takes_train_when_present_else_dev_and_the_override_wins():
    assert mining_split(QUERIES) == "dev"
    assert mining_split(TRAIN_QUERIES) == "train"
    assert mining_split(TRAIN_QUERIES, "dev") == "dev"
    with pytest.raises(HeldOutSplitError, match="held out"):
        mining_split(TRAIN_QUERIES, "test")
    with pytest.raises(ValueError, match=r"unknown mining split 'validation'; expected one of \['train', 'dev'\]"):
        mining_split(TRAIN_QUERIES, "validation")
    # train present: only train queries are mined (t3 left out, see below); the override mines dev.
    assert set(hard_negative_pairs(TRAIN_RUN, WITH_TRAIN, "m")["query_id"]) == {"t2"}
    assert set(hard_negative_pairs(TRAIN_RUN, WITH_TRAIN, "m", split="dev")["query_id"]) == {"d1", "d2"}
    with pytest.raises(ValueError, match=r"1 selected queries are not in the 'train' split being mined \(first: 'd1', split 'dev'\)"):
        hard_negative_pairs(TRAIN_RUN, WITH_TRAIN, "m", query_ids=["t2", "d1"])
    with pytest.raises(ValueError, match=r"no 'train' queries to mine"):
        hard_negative_pairs(RUN, DATASET, "m", split="train")


def test_a_train_query_with_a_test_querys_text_is_left_out_and_counted(caplog):
    assert normalised_query_text("  Refund \u00a0 TIME\n") == normalised_query_text("refund time") == "refund time"
    with caplog.at_level("WARNING", logger="retbench.hard_negatives"):
        mined = mining_queries(TRAIN_QUERIES)
    assert (mined.split, mined.same_text_as_test) == ("train", ("t3",))
    assert mined.queries["query_id"].to_list() == ["t2"]
    assert "1 'train' queries left out of mining: their text is a 'test' query's (first: 't3')" in caplog.text
    pairs = hard_negative_pairs(TRAIN_RUN, WITH_TRAIN, "m", max_per_query=100)
    assert "t3" not in pairs["query_id"].to_list() and pairs.select("query_id", "negative_id").rows() == [("t2", "n1")]


def test_cli_mines_train_when_present_and_dev_on_request(tmp_path, capsys):
    dataset_dir = save_dataset(WITH_TRAIN, tmp_path / "store" / "datasets" / "x")
    out = tmp_path / "out"
    out.mkdir()
    TRAIN_RUN.write_parquet(out / "runs.parquet")
    (out / "manifest.json").write_text(json.dumps({"dataset": {"path": str(dataset_dir)}}))
    target = tmp_path / "triples.jsonl"
    assert _cli(["hard-negatives", str(out), "--provider", "m", "--out", str(target)]) == 0
    said = capsys.readouterr().out
    assert "wrote 1 triples from 1 train queries" in said
    assert "left out 1 train queries whose text is a test query's (first: t3)" in said
    assert _cli(["hard-negatives", str(out), "--provider", "m", "--split", "dev", "--out", str(target)]) == 0
    assert "from 2 dev queries" in capsys.readouterr().out
