"""Retrieval measures computed exactly as trec_eval computes them, vectorised over a whole run.

Conventions (each checked against pytrec_eval, the trec_eval C code, in
tests/unit/test_metrics_vs_trec_eval.py):

- Ranking: per query, score descending, ties broken by doc id *descending* (byte-wise
  string comparison, trec_eval's ``strcmp(doc2, doc1)``). Any rank column is ignored.
  Scores are compared in single precision, because trec_eval stores them as C ``float``:
  1.0 and 1.00000001 tie (and go by doc id), scores beyond float32 range tie at +-inf,
  and -0.0 ties with 0.0.
- Binary relevance: a doc is relevant when it is judged and ``grade >= relevance_level``
  (default 1). Negative grades are never relevant (trec_eval reads them as "in the pool but
  unjudged") and unjudged docs count as non-relevant. ``relevance_level`` must be >= 1
  (pytrec_eval refuses 0, so a level-0 convention could not be checked).
- nDCG (``ndcg``, ``ndcg@k``): gain = grade for grade > 0, else 0; discount log2(rank + 1)
  with rank starting at 1. The ideal ranking is built from *every* judged grade > 0, and
  ``relevance_level`` is ignored entirely (trec_eval's ndcg and ndcg_cut never consult it),
  so a query can have nDCG > 0 and MAP = 0. ``ndcg_exp@k`` is the same with gain 2^grade - 1
  (not in trec_eval).
- k beyond the ranking length: the ranking is not padded, denominators keep k: P@k divides
  by k; recall@k and map@k divide by the number of relevant docs (all of them, not
  min(k, R)); ``recall_cap@k`` divides by min(k, R) as BEIR/MTEB report it (not trec_eval).
- Queries: only queries in both run and qrels are scored. A qrels query with no relevant
  doc is still scored and averaged (every binary measure is 0, as trec_eval does; nDCG is
  0 unless it has positive grades below ``relevance_level``). Run-only queries are ignored;
  qrels-only queries are ignored, or scored 0 for every measure with ``complete=True``
  (trec_eval -c). Both cases are logged as warnings with counts.
- Judgments and holes (``judged@k``, ``ndcg_condensed@k``, ``bpref``): ``judged@k`` is the
  share of the top k that has any qrels row (any grade, as ir_measures' Judged@k), divided by
  min(k, docs retrieved), so a query with 4 retrieved, all judged, scores 1 at k=10.
  ``ndcg_condensed`` is trec_eval ``-J`` (ir_measures ``nDCG(judged_only=True)``): docs without
  a grade >= 0 are removed before ranking, so they neither gain nor push judged docs down; the
  ideal ranking is unchanged. ``bpref`` is trec_eval's: judged non-relevant docs are those with
  0 <= grade < ``relevance_level``; unjudged and negative-grade docs are skipped.
- Errors: duplicate (query, doc) pairs in run or qrels, NaN or null scores, and missing
  columns raise ValueError; trec_eval also refuses duplicate docs.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import cached_property
from typing import Callable, Sequence

import numpy as np
import polars as pl

from retbench.tasks.config.measures import CUTOFF_RULES, check_cutoff, parse_measure_name

log = logging.getLogger("retbench.metrics")

RUN_COLUMNS = ("query_id", "doc_id", "score")
QRELS_COLUMNS = ("query_id", "doc_id", "grade")


class Ranked:
    """The retrieved docs that can score, with their trec_eval rank: the input of every kernel.

    Every measure here is a sum over retrieved docs with grade > 0 (relevant docs for binary
    measures, gain for nDCG), so only those rows are kept; unjudged and zero-grade docs
    matter only through the ranks they push down. Rows are sorted by (query index, rank);
    ``rank`` is 0-based. Per-query arrays have length ``n_queries``. Derived arrays are
    computed on first use and shared by the measures that need them.
    """

    def __init__(self, qidx: np.ndarray, rank: np.ndarray, grade: np.ndarray, n_queries: int,
                 ideal_qidx: np.ndarray, ideal_grade: np.ndarray, num_rel: np.ndarray,
                 relevance_level: int, judged: "Judged | None" = None):
        self.qidx = qidx
        self.rank = rank
        self.grade = grade
        self.n_queries = n_queries
        # Judged grades > 0 per query, sorted by (query, grade desc): the ideal nDCG ranking.
        self.ideal_qidx = ideal_qidx
        self.ideal_grade = ideal_grade
        self.num_rel = num_rel
        self.relevance_level = relevance_level
        # Only built when a measure needs judged docs of every grade (judged@k, bpref, nDCG').
        self._judged = judged

    @property
    def judged(self) -> "Judged":
        if self._judged is None:
            raise RuntimeError("this ranking was built without judged rows (Measure.needs_judged)")
        return self._judged

    @cached_property
    def relevant(self) -> np.ndarray:
        return self.grade >= self.relevance_level

    @cached_property
    def first_relevant(self) -> np.ndarray:
        """0-based position of the first relevant doc per query; a huge value if none."""
        first = np.full(self.n_queries, np.iinfo(np.int64).max, dtype=np.int64)
        rows = np.flatnonzero(self.relevant)
        q = self.qidx[rows]
        lead = np.ones(len(rows), dtype=bool)
        lead[1:] = q[1:] != q[:-1]
        first[q[lead]] = self.rank[rows[lead]]
        return first

    @cached_property
    def discount(self) -> np.ndarray:
        return 1.0 / np.log2(self.rank + 2.0)

    @cached_property
    def ideal_rank(self) -> np.ndarray:
        counts = np.bincount(self.ideal_qidx, minlength=self.n_queries)
        starts = np.cumsum(counts) - counts
        return np.arange(len(self.ideal_qidx), dtype=np.int64) - np.repeat(starts, counts)

    def hits(self, k: int | None) -> np.ndarray:
        """Relevant docs retrieved in the top k per query (whole ranking when k is None)."""
        mask = self.relevant if k is None else self.relevant & (self.rank < k)
        return np.bincount(self.qidx[mask], minlength=self.n_queries).astype(np.float64)


@dataclass(frozen=True)
class Judged:
    """Every retrieved doc that has a qrels row, whatever its grade, sorted by (query, rank),
    with the per-query counts the judgment measures divide by."""

    qidx: np.ndarray
    rank: np.ndarray      # 0-based trec_eval rank in the whole ranking
    grade: np.ndarray
    num_ret: np.ndarray   # docs retrieved per query
    num_nonrel: np.ndarray  # judged docs with 0 <= grade < relevance_level, per query


def _divide(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    # A query with nothing to find scores 0, as in trec_eval, rather than NaN.
    out = np.zeros_like(num, dtype=np.float64)
    np.divide(num, den, out=out, where=den > 0)
    return out


# --- kernels: one per measure, each returns one value per query -------------------------

def precision(r: Ranked, k: int | None) -> np.ndarray:
    return r.hits(k) / k


def recall(r: Ranked, k: int | None) -> np.ndarray:
    return _divide(r.hits(k), r.num_rel)


def recall_cap(r: Ranked, k: int | None) -> np.ndarray:
    return _divide(r.hits(k), np.minimum(r.num_rel, k))


def hit_rate(r: Ranked, k: int | None) -> np.ndarray:
    return (r.first_relevant < k).astype(np.float64)


def reciprocal_rank(r: Ranked, k: int | None) -> np.ndarray:
    first = r.first_relevant
    found = first < (np.iinfo(np.int64).max if k is None else k)
    return _divide(found.astype(np.float64), np.where(found, first + 1.0, 0.0))


def average_precision(r: Ranked, k: int | None) -> np.ndarray:
    rel = r.relevant if k is None else r.relevant & (r.rank < k)
    rows = np.flatnonzero(rel)
    # Among a query's relevant rows, the n-th one (1-based) has precision n / (rank + 1).
    q = r.qidx[rows]
    counts = np.bincount(q, minlength=r.n_queries)
    nth = np.arange(1, len(rows) + 1) - np.repeat(np.cumsum(counts) - counts, counts)
    precisions = nth / (r.rank[rows] + 1.0)
    return _divide(np.bincount(q, weights=precisions, minlength=r.n_queries), r.num_rel)


def _ndcg(r: Ranked, k: int | None, gain: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    positive = r.grade > 0
    if k is not None:
        positive &= r.rank < k
    rows = np.flatnonzero(positive)
    dcg = np.bincount(r.qidx[rows], weights=gain(r.grade[rows]) * r.discount[rows],
                      minlength=r.n_queries)
    ideal = slice(None) if k is None else r.ideal_rank < k
    iq, ig, ir = r.ideal_qidx[ideal], r.ideal_grade[ideal], r.ideal_rank[ideal]
    idcg = np.bincount(iq, weights=gain(ig) / np.log2(ir + 2.0), minlength=r.n_queries)
    return _divide(dcg, idcg)


def ndcg(r: Ranked, k: int | None) -> np.ndarray:
    return _ndcg(r, k, lambda g: g.astype(np.float64))


def ndcg_exp(r: Ranked, k: int | None) -> np.ndarray:
    return _ndcg(r, k, lambda g: np.exp2(g.astype(np.float64)) - 1.0)


def judged_share(r: Ranked, k: int | None) -> np.ndarray:
    j = r.judged
    inside = slice(None) if k is None else j.rank < k
    counted = np.bincount(j.qidx[inside], minlength=r.n_queries).astype(np.float64)
    # ir_measures' Judged@k: a ranking shorter than k is judged on what it retrieved.
    return _divide(counted, j.num_ret if k is None else np.minimum(j.num_ret, k))


def _condensed(r: Ranked) -> Ranked:
    """The ranking with unjudged (and negative-grade) docs removed, as trec_eval -J: each
    judged doc's rank becomes its position among the judged docs of its query."""
    j = r.judged
    keep = j.grade >= 0
    q, grade = j.qidx[keep], j.grade[keep]
    counts = np.bincount(q, minlength=r.n_queries)
    rank = np.arange(len(q), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    positive = grade > 0
    return Ranked(q[positive], rank[positive], grade[positive], r.n_queries, r.ideal_qidx,
                  r.ideal_grade, r.num_rel, r.relevance_level)


def ndcg_condensed(r: Ranked, k: int | None) -> np.ndarray:
    return ndcg(_condensed(r), k)


def bpref(r: Ranked, k: int | None) -> np.ndarray:
    j = r.judged
    keep = j.grade >= 0
    q, relevant = j.qidx[keep], j.grade[keep] >= r.relevance_level
    # Judged non-relevant docs ranked above each doc of its query: a running count over all
    # rows, less the count where its query starts.
    nonrel = (~relevant).astype(np.int64)
    before = np.cumsum(nonrel) - nonrel
    counts = np.bincount(q, minlength=r.n_queries)
    starts = np.minimum(np.cumsum(counts) - counts, max(len(q) - 1, 0))
    above = before - np.repeat(before[starts] if len(q) else starts, counts)
    rows = np.flatnonzero(relevant)
    rq = q[rows]
    num_rel = r.num_rel[rq]
    cap = np.minimum(r.judged.num_nonrel[rq], num_rel)
    penalty = _divide(np.minimum(above[rows], num_rel).astype(np.float64), cap.astype(np.float64))
    total = np.bincount(rq, weights=1.0 - penalty, minlength=r.n_queries)
    return _divide(total, r.num_rel)


# --- measures and registry ------------------------------------------------------------

@dataclass(frozen=True)
class Measure:
    """A named measure, optionally bound to a cutoff; ``str()`` is its canonical name."""

    name: str
    kernel: Callable[[Ranked, int | None], np.ndarray]
    cutoff: str  # "required", "optional" or "none"
    description: str
    trec_eval: str | None = None  # the trec_eval measure it equals, "{k}" for the cutoff
    k: int | None = None
    # True when the kernel reads judged docs of every grade (Ranked.judged), which costs a
    # rank lookup per judged doc rather than per relevant doc.
    needs_judged: bool = False

    def at(self, k: int | None) -> "Measure":
        check_cutoff(self.name, self.cutoff, k)
        return Measure(self.name, self.kernel, self.cutoff, self.description, self.trec_eval, k,
                       self.needs_judged)

    def compute(self, ranked: Ranked) -> np.ndarray:
        return self.kernel(ranked, self.k)

    def __str__(self) -> str:
        return self.name if self.k is None else f"{self.name}@{self.k}"

    __repr__ = __str__


MEASURES: dict[str, Measure] = {}


def register(measure: Measure) -> Measure:
    if measure.name in MEASURES:
        raise ValueError(f"measure {measure.name!r} is already registered")
    if CUTOFF_RULES.get(measure.name) != measure.cutoff:
        # A spec is checked against those names (without numpy): a kernel they do not name could
        # never be asked for, and one whose cutoff rule differs would be checked by the wrong rule.
        raise ValueError(f"measure {measure.name!r} (cutoff {measure.cutoff!r}) is not declared in "
                         f"tasks/config/measures.py CUTOFF_RULES (found {CUTOFF_RULES.get(measure.name)!r})")
    MEASURES[measure.name] = measure
    return measure


register(Measure("ndcg", ndcg, "optional", "nDCG, linear gain, trec_eval ndcg / ndcg_cut",
                 "ndcg_cut.{k}"))
register(Measure("ndcg_exp", ndcg_exp, "required", "nDCG with gain 2^grade - 1"))
register(Measure("recall", recall, "required", "relevant in top k / all relevant", "recall.{k}"))
register(Measure("recall_cap", recall_cap, "required",
                 "relevant in top k / min(k, all relevant), as BEIR/MTEB"))
register(Measure("p", precision, "required", "relevant in top k / k", "P.{k}"))
register(Measure("mrr", reciprocal_rank, "optional",
                 "1 / rank of the first relevant doc (only the top k with a cutoff)",
                 "recip_rank"))
register(Measure("map", average_precision, "optional", "average precision (map_cut with k)",
                 "map_cut.{k}"))
register(Measure("hit_rate", hit_rate, "required", "1 if a relevant doc is in the top k",
                 "success.{k}"))
register(Measure("judged", judged_share, "optional",
                 "share of the top k with a judgment of any grade, as ir_measures Judged@k",
                 needs_judged=True))
register(Measure("ndcg_condensed", ndcg_condensed, "optional",
                 "nDCG' on the condensed list (unjudged docs removed), trec_eval -J ndcg_cut",
                 "ndcg_cut.{k} (-J)", needs_judged=True))
register(Measure("bpref", bpref, "none", "binary preference, trec_eval bpref", "bpref",
                 needs_judged=True))

def parse_measure(name: str) -> Measure:
    """``"ndcg@10"`` -> nDCG cut at 10. Case-insensitive; canonical names are lower case
    (the names and their grammar: tasks/config/measures.py)."""
    base, k = parse_measure_name(name)
    return MEASURES[base].at(k)


# --- evaluation -------------------------------------------------------------------------

@dataclass(frozen=True)
class Evaluation:
    per_query: pl.DataFrame  # query_id (str), measure (str, canonical), value (f64)
    run_only: int            # queries in the run but not the qrels (ignored)
    qrels_only: int          # queries in the qrels but not the run (ignored, or 0 if complete)

    def means(self) -> dict[str, float]:
        """Mean of each measure over the evaluated queries, in the order requested."""
        means = self.per_query.group_by("measure", maintain_order=True).agg(pl.col("value").mean())
        return dict(zip(means["measure"].to_list(), means["value"].to_list()))


def _require(df: pl.DataFrame, columns: Sequence[str], what: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{what}: missing columns {missing} (found {df.columns})")


def _check_ids(df: pl.DataFrame, what: str) -> pl.DataFrame:
    for col in ("query_id", "doc_id"):
        dtype = df.schema[col]
        if dtype == pl.String:
            continue
        if isinstance(dtype, (pl.Categorical, pl.Enum)):
            df = df.with_columns(pl.col(col).cast(pl.String))
        else:
            # Casting numbers would turn "007" and "7" into one id; ids must arrive as text.
            raise ValueError(f"{what}: column {col} must be str (found {dtype})")
        if df[col].null_count():
            raise ValueError(f"{what}: column {col} has null ids")
    return df


class DuplicateDocError(ValueError):
    """A run retrieves one doc twice for a query; trec_eval refuses such runs too."""

    def __init__(self, query_id: str, doc_id: str):
        super().__init__(f"run: query {query_id!r} retrieves doc {doc_id!r} more than once")
        self.query_id, self.doc_id = query_id, doc_id


def _first_duplicate(df: pl.DataFrame) -> tuple[str, str] | None:
    dup = df.filter(pl.struct("query_id", "doc_id").is_duplicated())
    return dup.row(0)[:2] if dup.height else None


def _prepare(run: pl.DataFrame, qrels: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    _require(run, RUN_COLUMNS, "run")
    _require(qrels, QRELS_COLUMNS, "qrels")
    run = _check_ids(run.select(RUN_COLUMNS), "run")
    qrels = _check_ids(qrels.select(QRELS_COLUMNS), "qrels")
    if not run.schema["score"].is_numeric():
        raise ValueError(f"run: column score must be numeric (found {run.schema['score']})")
    if not qrels.schema["grade"].is_integer():
        raise ValueError(f"qrels: column grade must be an integer (found {qrels.schema['grade']})")
    run = run.with_columns(pl.col("score").cast(pl.Float64))
    qrels = qrels.with_columns(pl.col("grade").cast(pl.Int64))
    bad = run.filter(pl.col("score").is_null() | pl.col("score").is_nan())
    if bad.height:
        q, d, s = bad.row(0)
        raise ValueError(f"run: query {q!r} doc {d!r} has score {s} ({bad.height} such rows)")
    if qrels["grade"].null_count():
        raise ValueError("qrels: column grade has nulls")
    dup = _first_duplicate(qrels)
    if dup:
        raise ValueError(f"qrels: query {dup[0]!r} judges doc {dup[1]!r} more than once")
    return run, qrels


_MIX = np.uint64(0x9E3779B97F4A7C15)


def _pair_hash(doc_hash: np.ndarray, query: np.ndarray) -> np.ndarray:
    # No widened copy of the codes first; they are >= 0, so the cast from a signed type is exact.
    h = np.multiply(query, _MIX, dtype=np.uint64, casting="unsafe")
    h ^= doc_hash
    return h


def _check_run_duplicates(run: pl.DataFrame, pair_hash: np.ndarray) -> None:
    # Sort the (query, doc id) hashes: an exact duplicate check on 10M string pairs would cost
    # more than all the scoring. Only hash clashes get the exact check. Sorts in place.
    pair_hash.sort()
    if (pair_hash[1:] == pair_hash[:-1]).any():
        dup = _first_duplicate(run)
        if dup:
            raise DuplicateDocError(*dup)


def _score_order(score: np.ndarray) -> np.ndarray:
    """uint32 keys that sort like trec_eval's scores: C floats (single precision, which is
    how trec_eval stores them), with -0.0 == 0.0 as in its C comparison."""
    with np.errstate(over="ignore"):  # beyond float32 range -> +-inf, as in trec_eval
        # Rounded to single precision, then -0.0 + 0.0 = 0.0, in one pass.
        single = np.add(score, np.float32(0.0), dtype=np.float32, casting="same_kind")
    bits = single.view(np.uint32)
    # Negative floats: flip every bit; others: set the sign bit. Then unsigned order = float order.
    flip = bits >> np.uint32(31)
    np.negative(flip, out=flip)  # 0 or 0xFFFFFFFF
    flip |= np.uint32(0x80000000)
    bits ^= flip
    return bits


def _trec_ranks(code: np.ndarray, score: np.ndarray, doc_id: pl.Series, rows: np.ndarray) -> np.ndarray:
    """0-based trec_eval rank of run rows ``rows`` within their query (``code``: one integer
    per query, per run row).

    rank = docs of the same query with a higher score + tied docs with a higher doc id.
    Counting this for the few scoring rows avoids sorting the whole run, which with a
    string tie-break costs several seconds at 10M rows. Query code (high 32 bits) and score
    order (low 32 bits) pack into one uint64 key, so "same query, higher score" is a range
    in one sorted integer array, and equal keys are exact ties, ordered in a small sort.
    """
    key = np.left_shift(code, np.uint64(32), dtype=np.uint64)
    key |= _score_order(score)
    sorted_key = np.sort(key)
    mine = key[rows]
    # Looking up sorted needles lets numpy narrow each search from the last hit.
    by_key = np.argsort(mine)
    needles = mine[by_key]
    last = np.searchsorted(sorted_key, needles, "right")
    higher = np.empty(len(rows), dtype=np.int64)
    higher[by_key] = np.searchsorted(sorted_key, needles | np.uint64(0xFFFFFFFF), "right") - last
    tied = np.zeros(len(rows), dtype=bool)
    # More than one run row with the key: a tie, to be ordered by doc id.
    tied[by_key] = last - np.searchsorted(sorted_key, needles, "left") > 1
    if not tied.any():
        return higher
    tied_keys = pl.Series(np.unique(mine[tied])).implode()
    group = np.flatnonzero(pl.Series(key).is_in(tied_keys).to_numpy())  # run rows of those keys, in row order
    # 1-based place of each row among the rows of its key, doc ids descending (byte-wise, as strcmp).
    place = pl.DataFrame({"key": key[group], "doc_id": doc_id.gather(group)}).select(
        pl.col("doc_id").rank("ordinal", descending=True).over("key")).to_series().to_numpy()
    before = np.zeros(len(rows), dtype=np.int64)
    before[tied] = place[np.searchsorted(group, rows[tied])] - 1
    return higher + before


def _rank(run: pl.DataFrame, qrels: pl.DataFrame, run_queries: pl.Series, queries: pl.Series,
          relevance_level: int, with_judged: bool = False) -> Ranked:
    # Query ids become integer codes in id order, so every later step works on numbers. Rows of
    # run-only queries stay: their codes are apart from the evaluated queries' and they cost
    # less in the sorts than a copy of the run without them.
    code = run["query_id"].cast(pl.Enum(run_queries)).to_physical().to_numpy()
    doc_hash = run["doc_id"].hash(seed=0).to_numpy()
    pair_hash = _pair_hash(doc_hash, code)
    evaluated = run_queries.is_in(queries.implode()).to_numpy()
    run_code = np.flatnonzero(evaluated)  # evaluated query index -> run code
    qrels = qrels.filter(pl.col("query_id").is_in(queries.implode())).select(
        pl.col("query_id").cast(pl.Enum(queries)).to_physical().cast(pl.Int64).alias("q"),
        "doc_id", "grade")
    # grade >= 1 covers every relevance_level allowed and every doc with an nDCG gain; the
    # judgment measures need every judged doc, whatever its grade.
    positive = qrels if with_judged else qrels.filter(pl.col("grade") > 0)
    # Joining 10M (query, doc id) strings costs seconds; integer pair hashes pick the few
    # candidate rows first, and the exact join runs on those.
    wanted = _pair_hash(positive["doc_id"].hash(seed=0).to_numpy(), run_code[positive["q"].to_numpy()])
    candidates = np.flatnonzero(pl.Series(pair_hash).is_in(pl.Series(wanted).implode()).to_numpy())
    _check_run_duplicates(run, pair_hash)
    del pair_hash
    to_eval = np.full(len(run_queries), -1, dtype=np.int64)
    to_eval[evaluated] = np.arange(len(run_code))
    scoring = (
        pl.DataFrame({"i": candidates, "q": to_eval[code[candidates]],
                      "doc_id": run["doc_id"].gather(candidates)})
        .join(positive, on=["q", "doc_id"], how="inner")
    )
    n = len(queries)
    rows = scoring["i"].to_numpy()
    score = run["score"].to_numpy()
    rank = _trec_ranks(code, score, run["doc_id"], rows) if len(rows) else np.zeros(0, dtype=np.int64)
    q = scoring["q"].to_numpy()
    order = np.lexsort((rank, q))
    q, rank, grade = q[order], rank[order], scoring["grade"].to_numpy()[order]
    ideal = qrels.filter(pl.col("grade") > 0).sort(["q", "grade"], descending=[False, True])
    num_rel = np.bincount(qrels.filter(pl.col("grade") >= relevance_level)["q"].to_numpy(),
                          minlength=n)
    judged = None
    if with_judged:
        nonrel = qrels.filter((pl.col("grade") >= 0) & (pl.col("grade") < relevance_level))
        num_ret = np.bincount(code, minlength=len(run_queries))[evaluated]
        judged = Judged(q, rank, grade, num_ret=num_ret.astype(np.float64),
                        num_nonrel=np.bincount(nonrel["q"].to_numpy(), minlength=n))
        keep = grade > 0
        q, rank, grade = q[keep], rank[keep], grade[keep]
    return Ranked(
        qidx=q,
        rank=rank,
        grade=grade,
        n_queries=n,
        ideal_qidx=ideal["q"].to_numpy(),
        ideal_grade=ideal["grade"].to_numpy(),
        num_rel=num_rel.astype(np.float64),
        relevance_level=relevance_level,
        judged=judged,
    )


def evaluate(run: pl.DataFrame, qrels: pl.DataFrame, measures: Sequence[str], *,
             relevance_level: int = 1, complete: bool = False) -> Evaluation:
    """Score ``run`` against ``qrels`` with trec_eval's conventions (see module docstring)."""
    if isinstance(measures, str):
        measures = [measures]
    parsed = list({str(m): m for m in map(parse_measure, measures)}.values())
    if not parsed:
        raise ValueError("no measures requested")
    if relevance_level < 1:
        raise ValueError(f"relevance_level must be >= 1 (got {relevance_level})")
    run, qrels = _prepare(run, qrels)

    run_q = run["query_id"].unique().sort()
    qrels_q = qrels["query_id"].unique()
    both = run_q.filter(run_q.is_in(qrels_q.implode())).sort()
    run_only = len(run_q) - len(both)
    qrels_only_ids = qrels_q.filter(~qrels_q.is_in(run_q.implode())).sort()
    if run_only:
        log.warning("%d queries are in the run but not in the qrels; they are ignored", run_only)
    if len(qrels_only_ids):
        log.warning("%d queries are in the qrels but not in the run; %s", len(qrels_only_ids),
                    "they score 0 (complete)" if complete else "they are ignored")
    if len(both) == 0 and not (complete and len(qrels_only_ids)):
        raise ValueError("no query is in both the run and the qrels")

    ids = both
    if len(both):
        ranked = _rank(run, qrels, run_q, both, relevance_level,
                       with_judged=any(m.needs_judged for m in parsed))
        scored = [m.compute(ranked) for m in parsed]
    else:
        scored = [np.zeros(0) for _ in parsed]
    zeros = 0
    if complete and len(qrels_only_ids):
        ids = pl.concat([both, qrels_only_ids])
        zeros = len(qrels_only_ids)
    order = ids.arg_sort().to_numpy()
    ids = ids.gather(order)
    values = [np.concatenate([v, np.zeros(zeros)])[order] for v in scored]
    per_query = pl.DataFrame({
        "query_id": pl.concat([ids] * len(parsed)),
        "measure": pl.Series(np.repeat([str(m) for m in parsed], len(ids)), dtype=pl.String),
        "value": pl.Series(np.concatenate(values), dtype=pl.Float64),
    })
    return Evaluation(per_query=per_query, run_only=run_only, qrels_only=len(qrels_only_ids))
