"""Our scorer against pytrec_eval and ranx on one seeded random run with many tied scores.

    python benchmarks/bench_metrics.py [--queries 10000 --depth 1000]

Prints wall times for each library on the same measure set. "score" times start from each
library's own input structure (polars frames for us, dicts for pytrec_eval, ranx.Run/Qrels);
"end to end" adds building that structure from the same polars frames, which is what a caller
holding a run as a table pays. ranx compiles with numba on first use, so it is warmed up on a
small run first and the compile time is not counted.
"""
from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from retbench.tasks.analysis.metrics import evaluate  # noqa: E402

OURS = ["ndcg@10", "recall@100", "mrr", "map", "p@10"]
PYTREC = {"ndcg_cut.10", "recall.100", "recip_rank", "map", "P.10"}
RANX = ["ndcg@10", "recall@100", "mrr", "map", "precision@10"]


def make_run(n_queries: int, depth: int, seed: int = 0) -> tuple[pl.DataFrame, pl.DataFrame]:
    rng = np.random.default_rng(seed)
    q = np.repeat(np.arange(n_queries), depth)
    # Distinct docs per query drawn from a shared id space; scores on a 0.01 grid, so ~depth/100
    # docs share each score and ranks depend on the doc-id tie-break.
    offset = rng.integers(0, 1_000_000, n_queries)
    docs = (np.tile(np.arange(depth), n_queries) * 7 + np.repeat(offset, depth)) % 2_000_003
    run = pl.DataFrame({
        "query_id": pl.Series(q).cast(pl.String).str.zfill(6),
        "doc_id": pl.Series(docs).cast(pl.String),
        "score": np.round(rng.random(n_queries * depth), 2),
    }).sample(fraction=1.0, shuffle=True, seed=seed)  # arrive unsorted, as a retriever's union
    judged = run.sample(n=min(run.height, n_queries * 20), seed=seed + 1)
    qrels = judged.select("query_id", "doc_id", grade=pl.Series(
        rng.choice([0, 0, 1, 1, 2, 3], judged.height), dtype=pl.Int64))
    return run, qrels


def to_dicts(df: pl.DataFrame, value: str) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for (qid,), g in df.group_by("query_id"):
        out[qid] = dict(zip(g["doc_id"].to_list(), g[value].to_list()))
    return out


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--depth", type=int, default=1_000)
    ap.add_argument("--repeat", type=int, default=1, help="take the best of this many runs")
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)

    run, qrels = make_run(args.queries, args.depth)
    print(f"{args.queries} queries x {args.depth} docs = {run.height:,} rows, "
          f"{qrels.height:,} judgements; measures {OURS}")

    def best(fn):
        times = []
        for _ in range(args.repeat):
            result, t = timed(fn)
            times.append(t)
        return result, min(times)

    ours, t_ours = best(lambda: evaluate(run, qrels, OURS))

    import pytrec_eval
    (run_d, t_run_d) = timed(lambda: to_dicts(run, "score"))
    (qrels_d, t_qrels_d) = timed(lambda: to_dicts(qrels, "grade"))
    evaluator, t_init = timed(lambda: pytrec_eval.RelevanceEvaluator(qrels_d, PYTREC))
    _, t_pytrec = best(lambda: evaluator.evaluate(run_d))
    t_pytrec += t_init

    import ranx
    # numba compiles per input type on first use: warm up on a slice of the same data.
    few = list(run_d)[:3]
    ranx.evaluate(ranx.Qrels({q: qrels_d[q] for q in few if q in qrels_d}),
                  ranx.Run({q: run_d[q] for q in few}), RANX)
    ranx_run, t_ranx_run = timed(lambda: ranx.Run(run_d))
    ranx_qrels, t_ranx_qrels = timed(lambda: ranx.Qrels(qrels_d))
    _, t_ranx = best(lambda: ranx.evaluate(ranx_qrels, ranx_run, RANX))

    e2e_pytrec = t_run_d + t_qrels_d + t_pytrec
    e2e_ranx = t_run_d + t_qrels_d + t_ranx_run + t_ranx_qrels + t_ranx
    rows = [
        ("ours (polars in)", t_ours, t_ours),
        ("pytrec_eval", t_pytrec, e2e_pytrec),
        ("ranx", t_ranx, e2e_ranx),
    ]
    print(f"\n{'':18} {'score s':>9} {'end to end s':>13}")
    for name, t, e in rows:
        print(f"{name:18} {t:9.2f} {e:13.2f}")
    print(f"\nbuilding inputs: dicts {t_run_d + t_qrels_d:.2f} s, "
          f"ranx.Run {t_ranx_run:.2f} s, ranx.Qrels {t_ranx_qrels:.2f} s")
    print(f"ratio ours/pytrec_eval: score {t_ours / t_pytrec:.2f}, end to end {t_ours / e2e_pytrec:.2f}")
    print(f"ratio ours/ranx:        score {t_ours / t_ranx:.2f}, end to end {t_ours / e2e_ranx:.2f}")
    print("\nmeans (ranx breaks ties by its own sort, so its values may differ slightly):")
    print({k: round(v, 4) for k, v in ours.means().items()})


if __name__ == "__main__":
    main()
