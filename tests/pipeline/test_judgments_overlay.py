"""Taking judgments back (`retbench judge import`) on the shipped sample with the hashing provider:
run, import three judgments for unjudged top-ranked documents of one query, rerun. The rerun is
served from the cache (under cached_only: nothing embedded, indexed or searched), that query's
nDCG@10 moves by the hand-computed amount and no other value moves, the history starts a new
series naming the overlay, and `judgments: {use: base}` gives the old values back."""
from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest

from retbench.support.paths import ROOT

SPEC = """
name: judged
dataset: {{path: "{data}", format: jsonl, split: all}}
{judgments}
chunking: {{strategy: paragraph, max_words: 120}}
providers:
  - {{name: hashing, kind: hashing, options: {{dim: 64}}}}
indexes: {{ivf: null}}
k: [5, 10]
depth: 20
output_dir: "{out}"
store_dir: "{store}"
statistics: {{resamples: 20, permutations: 20}}
"""


def write_spec(tmp_path: Path, name: str, judgments: str = "") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(SPEC.format(data=ROOT / "data" / "sample", judgments=judgments, out=tmp_path / f"out-{name}",
                                store=tmp_path / "store"), encoding="utf-8")
    return path


def run(spec_path: Path, cached: bool = False):
    import contextlib

    from retbench.tasks.config.spec import load_spec
    from retbench.tasks.pipeline import run_pipeline
    from retbench.tasks.store.build import cached_only

    with cached_only() if cached else contextlib.nullcontext():  # WorkNeeded if anything would embed, index or search
        return run_pipeline(load_spec(spec_path), spec_path=spec_path)


def ndcg10(result) -> dict[str, float]:
    per_query = pl.read_parquet(result.tables["per_query"])
    rows = per_query.filter((pl.col("measure") == "ndcg@10") & (pl.col("index") == "flat"))
    return dict(rows.select("query_id", "value").iter_rows())


def test_imported_judgments_rescore_from_the_cache_and_start_a_new_series(tmp_path, capsys):
    from retbench.flows.cli import main
    from retbench.tasks.analysis import history

    spec = write_spec(tmp_path, "all")
    first = run(spec)
    before = ndcg10(first)
    # q001's judgments in the sample: keys-004 3, hi-001 2, hi-002 1, keys-005 1 (and two 0s).
    ranked = pl.read_parquet(first.tables["runs"]).filter((pl.col("query_id") == "q001") & (pl.col("index") == "flat"))
    judged = {"keys-004", "hi-001", "hi-002", "keys-005", "hi-012", "webhooks-006"}
    unjudged = [(d, r) for d, r in ranked.sort("rank").select("doc_id", "rank").iter_rows() if d not in judged][:3]
    ranks = dict(ranked.select("doc_id", "rank").iter_rows())
    # The hashing provider is deterministic: the judged ranks the hand computation below rests on.
    assert (ranks["keys-004"], ranks["keys-005"]) == (1, 5) and [r for _, r in unjudged] == [2, 3, 4]
    pool = tmp_path / "pool.qrels"
    pool.write_text("".join(f"q001 0 {d} {g}\n" for (d, _), g in zip(unjudged, (2, 1, 1))), encoding="utf-8")

    assert main(["judge", "import", str(pool), "--spec", str(spec)]) == 0
    said = capsys.readouterr().out
    assert "imported 3 judgments from pool.qrels (source human" in said and "3 new" in said
    assert main(["judge", "import", str(pool), "--spec", str(spec)]) == 0
    again = capsys.readouterr().out
    assert again.startswith(f"already imported: {pool}") and again.rstrip().endswith("nothing changed")

    second = run(spec, cached=True)
    work = second.manifest["work"]
    assert [w for w in work if w["stage"] in ("chunk", "embed", "index", "retrieve") and w["computed"]] == []
    assert second.manifest["texts"]["embedded"] == 0 and second.manifest["texts"]["from_cache"] > 0
    dataset = second.manifest["dataset"]
    assert dataset["base_key"] == first.manifest["dataset"]["content_hash"] != dataset["content_hash"]
    assert [tuple(n) for n in dataset["judgments_from"]] == [("base", first.manifest["dataset"]["judgments"]),
                                                             ("pool.qrels", 3)]

    # By hand, linear gain over log2(rank + 1). Before: 3 at rank 1 and 1 at rank 5 of the ideal 3, 2, 1, 1.
    # After: 2, 1, 1 at ranks 2, 3, 4 too, and the ideal ranking 3, 2, 2, 1, 1, 1, 1.
    dcg = lambda gains: sum(g / math.log2(rank + 1) for rank, g in enumerate(gains, start=1))  # noqa: E731
    was = (3 + 1 / math.log2(6)) / dcg([3, 2, 1, 1])
    now = (3 + 2 / math.log2(3) + 1 / math.log2(4) + 1 / math.log2(5) + 1 / math.log2(6)) / dcg([3, 2, 2, 1, 1, 1, 1])
    assert (round(was, 4), round(now, 4)) == (0.6523, 0.8243)
    after = ndcg10(second)
    assert before["q001"] == pytest.approx(was) and after["q001"] == pytest.approx(now)
    assert after["q001"] - before["q001"] == pytest.approx(0.1720, abs=1e-4)
    assert {q: v for q, v in after.items() if q != "q001"} == {q: v for q, v in before.items() if q != "q001"}

    runs = history.runs_of(tmp_path / "store", "judged")
    assert runs["series"].to_list() == [1, 2]
    ((series, run_id, why),) = history.series_starts(tmp_path / "store", "judged")
    assert series == 2 and why.startswith("judgments overlay pool.qrels (source human, 3 judgments, sha256 ")
    assert main(["history", str(spec)]) == 0
    assert f"series 2 from run {run_id[:8]}: judgments overlay pool.qrels" in capsys.readouterr().out
    report = (Path(second.output_dir) / "report.md").read_text(encoding="utf-8")
    assert "3 from human (overlay pool.qrels)" in report

    # The verdict before the import, from the same cache: the dataset's own judgments only.
    base = run(write_spec(tmp_path, "base", "judgments: {use: base}"), cached=True)
    assert ndcg10(base) == before
    assert base.manifest["dataset"]["content_hash"] == first.manifest["dataset"]["content_hash"]
    assert base.manifest["dataset"]["overlays_unused"] == 1


@pytest.mark.parametrize("lines, expected", [
    ("q001 0 keys-004 1\nq001 0 hi-001 0\n", "retbench: {file}: 2 conflicts with existing judgments: q001 keys-004: "
                                            "base 3, new 1; q001 hi-001: base 2, new 0; nothing imported (pass --override"),
    ("q001 0 auth-022 1\nq001 0 no-such-doc 1\n", "retbench: {file}:2: doc id 'no-such-doc' is not a document of "
                                                  "dataset 'sample'"),
    ("q001 0 auth-022 4\n", "retbench: {file}:1: grade 4 for query 'q001' is outside the dataset's scale 0..3"),
    ("nope 0 auth-022 1\n", "retbench: {file}:1: query id 'nope' is not a query of dataset 'sample'"),
])
def test_a_refused_import_ends_in_one_line_with_exit_2_and_keeps_nothing(tmp_path, capsys, lines, expected):
    from retbench.flows.cli import main

    spec = write_spec(tmp_path, "refused")
    pool = tmp_path / "pool.qrels"
    pool.write_text(lines, encoding="utf-8")
    assert main(["judge", "import", str(pool), "--spec", str(spec)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(expected.format(file=pool)) and err.count("\n") == 1
    assert not (tmp_path / "store" / "datasets" / "overlays").exists()


def test_override_lets_the_new_grades_win_and_says_which(tmp_path, capsys):
    from retbench.flows.cli import main

    spec = write_spec(tmp_path, "override")
    pool = tmp_path / "pool.qrels"
    pool.write_text("q001 0 keys-004 1\nq001 0 auth-022 2\n", encoding="utf-8")
    assert main(["judge", "import", str(pool), "--spec", str(spec), "--source", "alice", "--override"]) == 0
    said = capsys.readouterr().out
    assert "imported 2 judgments from pool.qrels (source alice" in said
    assert "1 new, 0 the same as a judgment it had, 1 overriding another grade" in said
    assert "overridden: q001 keys-004: base 3, new 1" in said
