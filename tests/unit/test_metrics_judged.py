"""judged@k, condensed nDCG' and bpref against their peers, per query: ir_measures' Judged@k and
pytrec_eval (trec_eval's C code, with -J for the condensed list) on random runs with holes and on
the shipped sample collection."""
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

pytest.importorskip("pytrec_eval")
pytest.importorskip("ir_measures")

from retbench.tasks.analysis.metrics import evaluate  # noqa: E402
from tests.unit.test_metrics_vs_trec_eval import as_dicts, random_case  # noqa: E402

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample"
CUTOFFS = (1, 3, 5, 10, 50)  # 50 is beyond every generated ranking

# Each peer runs in a fresh process: trec_eval keeps per-query state in C statics
# (cvangysel/pytrec_eval#57), and ir_measures calls it in-process.
_TREC_CHILD = """
import json, sys, pytrec_eval
a = json.load(sys.stdin)
ev = pytrec_eval.RelevanceEvaluator(a["qrels"], a["measures"], relevance_level=a["level"],
                                    judged_docs_only_flag=a["judged_only"])
json.dump(ev.evaluate(a["run"]), sys.stdout)
"""
_IR_MEASURES_CHILD = """
import json, sys, ir_measures
a = json.load(sys.stdin)
out = {}
for m in ir_measures.iter_calc([ir_measures.parse_measure(n) for n in a["measures"]],
                               a["qrels"], a["run"]):
    out.setdefault(m.query_id, {})[str(m.measure)] = m.value
json.dump(out, sys.stdout)
"""


def _child(code: str, args: dict) -> dict:
    done = subprocess.run([sys.executable, "-c", code], input=json.dumps(args),
                          capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout)


def trec_eval(qrels, run, measures, *, level=1, judged_only=False) -> dict:
    return _child(_TREC_CHILD, {"qrels": as_dicts(qrels, "grade"), "run": as_dicts(run, "score"),
                                "measures": sorted(measures), "level": level,
                                "judged_only": judged_only})


def ir_measures(qrels, run, measures) -> dict:
    """Per query, for the queries in the run: ir_measures also reports qrels-only queries (as
    0), which retbench scores only with complete=True (trec_eval -c)."""
    out = _child(_IR_MEASURES_CHILD, {"qrels": as_dicts(qrels, "grade"),
                                      "run": as_dicts(run, "score"), "measures": measures})
    in_run = set(run["query_id"])
    return {q: t for q, t in out.items() if q in in_run}


def ours(run, qrels, measures, **kw) -> dict:
    out: dict = {}
    for q, m, v in evaluate(run, qrels, measures, **kw).per_query.iter_rows():
        out.setdefault(q, {})[m] = v
    return out


def distinct_scores(run: pl.DataFrame, seed: int) -> pl.DataFrame:
    # ir_measures' Judged breaks ties by doc id ascending, trec_eval (and retbench) descending;
    # Judged@k is compared on untied runs so the peers rank alike. Steps of 1/64 are exact
    # in float32, so no two scores collapse to one C float.
    rng = np.random.default_rng(seed)
    return run.with_columns(score=pl.Series(rng.permutation(run.height) / 64.0))


def holes_case(seed: int):
    """random_case's runs and qrels (ties, negative and zero grades, unjudged docs), with a
    further seeded third of the judgments removed, as if a pool had missed them."""
    run, qrels = random_case(seed)
    keep = np.random.default_rng(seed + 100).random(qrels.height) > 1 / 3
    return run, qrels.filter(pl.Series(keep))


@pytest.mark.parametrize("relevance_level", [1, 2])
@pytest.mark.parametrize("seed", range(5))
def test_condensed_ndcg_and_bpref_match_trec_eval(seed, relevance_level):
    run, qrels = holes_case(seed)
    names = ["bpref", "ndcg_condensed"] + [f"ndcg_condensed@{k}" for k in CUTOFFS]
    got = ours(run, qrels, names, relevance_level=relevance_level)
    condensed = trec_eval(qrels, run, {"ndcg", "ndcg_cut." + ",".join(map(str, CUTOFFS))},
                          level=relevance_level, judged_only=True)
    plain = trec_eval(qrels, run, {"bpref"}, level=relevance_level)
    assert set(got) == set(condensed) == set(plain)
    for q in condensed:
        assert got[q]["bpref"] == pytest.approx(plain[q]["bpref"], abs=1e-9), q
        assert got[q]["ndcg_condensed"] == pytest.approx(condensed[q]["ndcg"], abs=1e-9), q
        for k in CUTOFFS:
            assert got[q][f"ndcg_condensed@{k}"] == pytest.approx(
                condensed[q][f"ndcg_cut_{k}"], abs=1e-9), (q, k)


@pytest.mark.parametrize("seed", range(5))
def test_judged_at_k_matches_ir_measures(seed):
    run, qrels = holes_case(seed)
    run = distinct_scores(run, seed)
    got = ours(run, qrels, ["judged"] + [f"judged@{k}" for k in CUTOFFS])
    theirs = ir_measures(qrels, run, ["Judged"] + [f"Judged@{k}" for k in CUTOFFS])
    assert set(got) == set(theirs)
    for q, t in theirs.items():
        assert got[q]["judged"] == pytest.approx(t["Judged"], abs=1e-12), q
        for k in CUTOFFS:
            assert got[q][f"judged@{k}"] == pytest.approx(t[f"Judged@{k}"], abs=1e-12), (q, k)


def test_condensed_ndcg_matches_ir_measures_judged_only():
    run, qrels = holes_case(7)
    got = ours(run, qrels, ["ndcg_condensed@5", "bpref"])
    theirs = ir_measures(qrels, run, ["nDCG(judged_only=True)@5", "Bpref"])
    assert set(got) == set(theirs)
    for q, t in theirs.items():
        assert got[q]["ndcg_condensed@5"] == pytest.approx(t["nDCG(judged_only=True)@5"],
                                                          abs=1e-9), q
        assert got[q]["bpref"] == pytest.approx(t["Bpref"], abs=1e-9), q


def sample_run() -> tuple[pl.DataFrame, pl.DataFrame]:
    """Every sample query against the whole sample corpus, scored by shared words (a plain
    lexical match), so most of each ranking is unjudged, as with a real new system."""
    words = lambda text: set(re.findall(r"\w+", text.lower()))  # noqa: E731
    docs = [json.loads(line) for line in (SAMPLE / "corpus.jsonl").read_text("utf-8").splitlines()]
    queries = [json.loads(line) for line in (SAMPLE / "queries.jsonl").read_text("utf-8").splitlines()]
    doc_words = [words(d.get("title", "") + " " + d["text"]) for d in docs]
    rows = []
    for q in queries:
        qw = words(q["text"])
        for i, (d, dw) in enumerate(zip(docs, doc_words)):
            # The doc's position breaks ties in a way both peers rank alike (see distinct_scores).
            rows.append((q["id"], d["id"], len(qw & dw) + i / (4 * len(docs))))
    run = pl.DataFrame(rows, schema=["query_id", "doc_id", "score"], orient="row")
    qrels = pl.read_ndjson(SAMPLE / "qrels.jsonl").select(
        "query_id", "doc_id", pl.col("grade").cast(pl.Int64))
    return run, qrels


def test_sample_collection_matches_both_peers():
    run, qrels = sample_run()
    got = ours(run, qrels, ["judged@10", "ndcg_condensed@10", "bpref", "ndcg@10"])
    im = ir_measures(qrels, run, ["Judged@10"])
    te = trec_eval(qrels, run, {"ndcg_cut.10"}, judged_only=True)
    bp = trec_eval(qrels, run, {"bpref"})
    assert len(got) == qrels["query_id"].n_unique() > 20
    for q in got:
        assert got[q]["judged@10"] == pytest.approx(im[q]["Judged@10"], abs=1e-12), q
        assert got[q]["ndcg_condensed@10"] == pytest.approx(te[q]["ndcg_cut_10"], abs=1e-9), q
        assert got[q]["bpref"] == pytest.approx(bp[q]["bpref"], abs=1e-9), q
    # The sample judges a few docs per query: most of a full-corpus top 10 is holes, and
    # removing them can only raise nDCG (judged docs move up, the ideal is unchanged).
    mean = lambda m: sum(v[m] for v in got.values()) / len(got)  # noqa: E731
    assert mean("judged@10") < 0.9
    assert all(v["ndcg_condensed@10"] >= v["ndcg@10"] - 1e-12 for v in got.values())
    assert mean("ndcg_condensed@10") > mean("ndcg@10")


# --- the conventions, on cases small enough to read -----------------------------------

def one(docs_scores, judgements, measures, **kw):
    run = pl.DataFrame([("q", d, s) for d, s in docs_scores],
                       schema=["query_id", "doc_id", "score"], orient="row")
    qrels = pl.DataFrame([("q", d, g) for d, g in judgements],
                         schema=["query_id", "doc_id", "grade"], orient="row")
    return ours(run, qrels, measures, **kw)["q"]


def test_judged_divides_by_what_was_retrieved_when_fewer_than_k():
    # 4 retrieved, 3 judged (a grade 0 and a negative grade count as judged): 3/4, not 3/10.
    got = one([("a", 4.0), ("b", 3.0), ("c", 2.0), ("x", 1.0)],
              [("a", 0), ("b", 2), ("c", -1), ("z", 1)], ["judged@10", "judged@2"])
    assert got == {"judged@10": 0.75, "judged@2": 1.0}


def test_condensed_list_removes_holes_before_ranking():
    # Unjudged x and y sit above the relevant doc: nDCG@1 is 0, nDCG'@1 is 1.
    got = one([("x", 3.0), ("y", 2.0), ("a", 1.0)], [("a", 1), ("b", 0)],
              ["ndcg@1", "ndcg_condensed@1"])
    assert got == {"ndcg@1": 0.0, "ndcg_condensed@1": 1.0}


def test_bpref_counts_only_judged_nonrelevant_above():
    # Relevant a below one judged non-relevant (n) of 2: 1 - 1/min(2, 2); b below both: 0.
    # The unjudged x above everything changes nothing.
    got = one([("x", 9.0), ("n", 5.0), ("a", 4.0), ("m", 3.0), ("b", 2.0)],
              [("a", 1), ("b", 1), ("n", 0), ("m", 0)], ["bpref"])
    assert got["bpref"] == pytest.approx((0.5 + 0.0) / 2)
