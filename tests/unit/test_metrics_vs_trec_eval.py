"""retbench.tasks.analysis.metrics against pytrec_eval (trec_eval's C code) on seeded runs built to hit the edge cases."""
import json
import math
import subprocess
import sys

import numpy as np
import polars as pl
import pytest

pytest.importorskip("pytrec_eval")

from retbench.tasks.analysis.metrics import evaluate  # noqa: E402

CUTOFFS = (1, 3, 5, 10, 50)  # 50 is beyond every generated ranking

# Our name -> pytrec_eval key, written out here rather than read from the registry so a wrong
# mapping in retbench.tasks.analysis.metrics cannot make the test agree with itself.
DIRECT = {"ndcg": "ndcg", "map": "map", "mrr": "recip_rank"}
for _k in CUTOFFS:
    DIRECT |= {f"ndcg@{_k}": f"ndcg_cut_{_k}", f"recall@{_k}": f"recall_{_k}",
               f"p@{_k}": f"P_{_k}", f"map@{_k}": f"map_cut_{_k}",
               f"hit_rate@{_k}": f"success_{_k}"}
_CUTS = ",".join(map(str, CUTOFFS))
TREC_MEASURES = {"ndcg", "map", "recip_rank", "num_rel", f"ndcg_cut.{_CUTS}",
                 f"recall.{_CUTS}", f"P.{_CUTS}", f"map_cut.{_CUTS}", f"success.{_CUTS}"}
DERIVED = [f"mrr@{k}" for k in CUTOFFS] + [f"recall_cap@{k}" for k in CUTOFFS]
EXP = [f"ndcg_exp@{k}" for k in CUTOFFS]

# Ids chosen so byte order differs from naive expectations: prefixes, case, digits, non-ASCII.
DOC_POOL = ["d1", "d10", "d2", "D2", "d20", "a", "aa", "b", "z9", "Z", "é", "e", "doc-7", "0",
            "00", "007", "7", "x y".replace(" ", "_"), "ü1", "d3", "d30", "d4", "q", "r", "s"]


NEXT_QUARTER = float(np.nextafter(0.25, 1.0))


def random_case(seed: int):
    """A run and qrels with ties, unjudged docs, graded/zero/negative grades and odd queries."""
    rng = np.random.default_rng(seed)
    run_rows, qrels_rows = [], []
    for i in range(40):
        q = f"q{i}"
        kind = rng.choice(["both", "both", "both", "run_only", "qrels_only", "no_relevant"])
        if kind != "qrels_only":
            depth = int(rng.integers(1, 21))
            docs = rng.choice(DOC_POOL, size=depth, replace=False)
            # Few distinct values, so most ranks are decided by the doc-id tie-break. trec_eval
            # compares in single precision: -0.0 ties 0.0, 0.25 ties the next double up, but
            # not 0.25 + 2^-20; 1e39 and 1e40 both overflow to inf and tie.
            scores = rng.choice([-1.5, -0.0, 0.0, 0.25, 0.25, NEXT_QUARTER, 0.25 + 2**-20,
                                 1.0, 2.0, 1e9, 1e39, 1e40], size=depth)
            if rng.random() < 0.3:
                scores = np.full(depth, 0.5)  # one tie group for the whole query
            run_rows += [(q, str(d), float(s)) for d, s in zip(docs, scores)]
        if kind != "run_only":
            judged = rng.choice(DOC_POOL, size=int(rng.integers(1, 15)), replace=False)
            grades = ([-1, 0] if kind == "no_relevant" else [-1, 0, 0, 1, 1, 2, 3])
            qrels_rows += [(q, str(d), int(rng.choice(grades))) for d in judged]
    run = pl.DataFrame(run_rows, schema={"query_id": pl.String, "doc_id": pl.String,
                                         "score": pl.Float64}, orient="row")
    qrels = pl.DataFrame(qrels_rows, schema={"query_id": pl.String, "doc_id": pl.String,
                                             "grade": pl.Int64}, orient="row")
    return run, qrels


def as_dicts(df: pl.DataFrame, value: str) -> dict:
    out: dict = {}
    for q, d, v in df.select("query_id", "doc_id", value).iter_rows():
        out.setdefault(q, {})[d] = v
    return out


_CHILD = """
import json, sys, pytrec_eval
a = json.load(sys.stdin)
ev = pytrec_eval.RelevanceEvaluator(a["qrels"], a["measures"], relevance_level=a["level"])
json.dump(ev.evaluate(a["run"]), sys.stdout)
"""


def trec_eval(qrels: pl.DataFrame, run: pl.DataFrame, measures, relevance_level: int = 1) -> dict:
    """pytrec_eval per query, each call in a fresh process: trec_eval keeps per-query state in
    C statics, so a second evaluator in one process can read stale judgements (wrong values, or
    a hang in `ndcg` after relevance_level changes; cvangysel/pytrec_eval#57)."""
    args = {"qrels": as_dicts(qrels, "grade"), "run": as_dicts(run, "score"),
            "measures": sorted(measures), "level": relevance_level}
    done = subprocess.run([sys.executable, "-c", _CHILD], input=json.dumps(args),
                          capture_output=True, text=True, timeout=60, check=True)
    return json.loads(done.stdout)


def ours_by_query(run, qrels, measures, **kw) -> dict:
    ev = evaluate(run, qrels, measures, **kw)
    out: dict = {}
    for q, m, v in ev.per_query.iter_rows():
        out.setdefault(q, {})[m] = v
    return out


@pytest.mark.parametrize("relevance_level", [1, 2, 3])
@pytest.mark.parametrize("seed", range(6))
def test_per_query_matches_pytrec_eval(seed, relevance_level):
    run, qrels = random_case(seed)
    ours = ours_by_query(run, qrels, list(DIRECT) + DERIVED, relevance_level=relevance_level)
    theirs = trec_eval(qrels, run, TREC_MEASURES, relevance_level=relevance_level)
    assert set(ours) == set(theirs)  # only queries in both are scored
    for q, t in theirs.items():
        for name, key in DIRECT.items():
            assert ours[q][name] == pytest.approx(t[key], abs=1e-9), (q, name)
        for k in CUTOFFS:
            # mrr@k: the first relevant doc counts only when its rank is within k.
            rr = t["recip_rank"]
            assert ours[q][f"mrr@{k}"] == pytest.approx(rr if rr * k >= 1 else 0.0, abs=1e-9)
            cap = min(k, t["num_rel"])
            expected = t[f"P_{k}"] * k / cap if cap else 0.0
            assert ours[q][f"recall_cap@{k}"] == pytest.approx(expected, abs=1e-9), (q, k)


@pytest.mark.parametrize("seed", range(3))
def test_ndcg_exp_is_trec_ndcg_on_exponential_grades(seed):
    # trec_eval's gain is the grade itself, so qrels with grade 2^g - 1 give exponential gain.
    run, qrels = random_case(seed)
    exp_qrels = qrels.with_columns(
        pl.when(pl.col("grade") > 0).then(2 ** pl.col("grade") - 1).otherwise(pl.col("grade"))
        .alias("grade")
    )
    ours = ours_by_query(run, qrels, EXP)
    theirs = trec_eval(exp_qrels, run, {f"ndcg_cut.{_CUTS}"})
    for q, t in theirs.items():
        for k in CUTOFFS:
            assert ours[q][f"ndcg_exp@{k}"] == pytest.approx(t[f"ndcg_cut_{k}"], abs=1e-9)


@pytest.mark.parametrize("seed", range(3))
def test_means_plain_and_complete(seed):
    run, qrels = random_case(seed)
    theirs = trec_eval(qrels, run, {"map", f"P.{_CUTS}"})
    n_qrels = qrels["query_id"].n_unique()
    plain = evaluate(run, qrels, ["map", "p@5"]).means()
    full = evaluate(run, qrels, ["map", "p@5"], complete=True).means()
    for ours, key in (("map", "map"), ("p@5", "P_5")):
        total = math.fsum(t[key] for t in theirs.values())
        assert plain[ours] == pytest.approx(total / len(theirs), abs=1e-12)
        # trec_eval -c: qrels-only queries add zeros to the sum and count to the divisor.
        assert full[ours] == pytest.approx(total / n_qrels, abs=1e-12)


# --- the conventions, each shown on a case small enough to read ------------------------

def one_query(docs_scores, judgements, measures, **kw):
    run = pl.DataFrame([("q", d, s) for d, s in docs_scores],
                       schema=["query_id", "doc_id", "score"], orient="row")
    qrels = pl.DataFrame([("q", d, g) for d, g in judgements],
                         schema=["query_id", "doc_id", "grade"], orient="row")
    ours = ours_by_query(run, qrels, list(measures), **kw)["q"]
    theirs = trec_eval(qrels, run, set(measures.values()), **kw)["q"]
    return ours, theirs


def test_ties_are_broken_by_doc_id_descending():
    # All tied: byte order descending is "b" "a" "B" "A" (upper case sorts first in ASCII), so
    # "B" is 3rd; insertion order and case-insensitive order would both put it elsewhere.
    ours, theirs = one_query([("a", 1.0), ("B", 1.0), ("b", 1.0), ("A", 1.0)], [("B", 1)],
                             {"mrr": "recip_rank"})
    assert theirs["recip_rank"] == pytest.approx(1 / 3)
    assert ours["mrr"] == pytest.approx(1 / 3)


def test_tie_break_is_byte_order_beyond_ascii():
    # "é" (U+00E9) sorts after "z" byte-wise, so it is ranked first among ties.
    ours, theirs = one_query([("z", 1.0), ("é", 1.0), ("e", 1.0)], [("é", 1)],
                             {"mrr": "recip_rank"})
    assert theirs["recip_rank"] == 1.0
    assert ours["mrr"] == 1.0


@pytest.mark.parametrize("high, low, tie", [
    (1.00000001, 1.0, True),      # equal as C floats
    (1.0000001, 1.0, False),      # one float32 step apart
    (1e40, 1e39, True),           # both overflow to inf
    (1e-40, 0.0, False),          # a float32 denormal is still above 0
    (1e-50, 0.0, True),           # underflows to 0
    (0.0, -0.0, True),
])
def test_scores_compare_in_single_precision(high, low, tie):
    # "a" scores higher; if the scores tie as floats, "b" wins on doc id and "a" is 2nd.
    ours, theirs = one_query([("a", high), ("b", low)], [("a", 1)], {"mrr": "recip_rank"})
    expected = 0.5 if tie else 1.0
    assert theirs["recip_rank"] == expected
    assert ours["mrr"] == expected


def test_ndcg_ignores_relevance_level():
    ours, theirs = one_query([("a", 3.0), ("b", 2.0), ("c", 1.0)], [("a", 1), ("c", 2)],
                             {"ndcg": "ndcg", "ndcg@2": "ndcg_cut.2", "map": "map"},
                             relevance_level=3)
    assert theirs["map"] == 0.0 and theirs["ndcg"] > 0.0
    assert ours["ndcg"] == pytest.approx(theirs["ndcg"], abs=1e-12)
    assert ours["ndcg@2"] == pytest.approx(theirs["ndcg_cut_2"], abs=1e-12)
    assert ours["map"] == 0.0


def test_query_without_relevant_docs_is_scored_zero_not_dropped():
    ours, theirs = one_query([("a", 1.0), ("b", 0.5)], [("a", 0), ("b", -1)],
                             {"map": "map", "ndcg@10": "ndcg_cut.10", "mrr": "recip_rank"})
    assert theirs == {"map": 0.0, "ndcg_cut_10": 0.0, "recip_rank": 0.0}
    assert ours == {"map": 0.0, "ndcg@10": 0.0, "mrr": 0.0}


def test_negative_grade_is_neither_gain_nor_relevant():
    ours, theirs = one_query([("neg", 2.0), ("pos", 1.0)], [("neg", -2), ("pos", 1)],
                             {"ndcg@2": "ndcg_cut.2", "mrr": "recip_rank"})
    assert theirs["recip_rank"] == 0.5
    assert ours["mrr"] == 0.5
    assert ours["ndcg@2"] == pytest.approx(theirs["ndcg_cut_2"], abs=1e-12)
