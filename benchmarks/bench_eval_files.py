"""`retbench eval` end to end from TREC files against pytrec_eval from the same files.

    python benchmarks/bench_eval_files.py [--queries 10000 --depth 1000] [--repeat 1] [--work DIR]

Writes one seeded run (with many tied scores, as benchmarks/bench_metrics.py) and its qrels as
TREC files, then times, alternating, best of --repeat:
- ours: retbench.flows.eval_command.score_files, what `retbench eval -q` does before printing (read
  both files with retbench.tasks.analysis.trec, score with retbench.tasks.analysis.metrics.evaluate);
- pytrec_eval: its own parse_run / parse_qrel over the open files + RelevanceEvaluator +
  evaluate, on the same measures.
Prints each time, the ratio pytrec_eval / ours (target >= 4) and the largest per-query
difference between the two (must be ~0). Compare ratios, not seconds: the machine is shared.
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
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_metrics import make_run  # noqa: E402
from retbench.flows.eval_command import score_files  # noqa: E402
from retbench.tasks.analysis.trec import write_qrels, write_run  # noqa: E402

OURS = ["ndcg@10", "recall@100", "mrr", "map", "p@10"]
PYTREC = {"ndcg@10": "ndcg_cut_10", "recall@100": "recall_100", "mrr": "recip_rank", "map": "map",
          "p@10": "P_10"}


def ours(run_path: Path, qrels_path: Path) -> pl.DataFrame:
    table = score_files(qrels_path, run_path, OURS, per_query=True)
    return table.filter(pl.col("query_id") != "all")


def pytrec(run_path: Path, qrels_path: Path) -> dict:
    import pytrec_eval

    with open(qrels_path) as f:
        qrels = pytrec_eval.parse_qrel(f)
    with open(run_path) as f:
        run = pytrec_eval.parse_run(f)
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.100", "recip_rank", "map", "P.10"})
    return evaluator.evaluate(run)


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--depth", type=int, default=1_000)
    ap.add_argument("--repeat", type=int, default=1, help="best of this many alternating runs")
    ap.add_argument("--work", type=Path, default=Path("/tmp/retbench-bench-eval"))
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)

    args.work.mkdir(parents=True, exist_ok=True)
    run_path = args.work / f"run-{args.queries}x{args.depth}.trec"
    qrels_path = args.work / f"qrels-{args.queries}x{args.depth}.trec"
    if not (run_path.exists() and qrels_path.exists()):
        run, qrels = make_run(args.queries, args.depth)
        write_run(run, run_path, tag="bench")
        write_qrels(qrels, qrels_path)
    size = run_path.stat().st_size
    print(f"{args.queries} queries x {args.depth} docs; run file {size / 1e6:.0f} MB, "
          f"qrels {qrels_path.stat().st_size / 1e6:.1f} MB; measures {OURS}")

    t_ours = t_pytrec = float("inf")
    for _ in range(args.repeat):
        mine, t = timed(lambda: ours(run_path, qrels_path))
        t_ours = min(t_ours, t)
        theirs, t = timed(lambda: pytrec(run_path, qrels_path))
        t_pytrec = min(t_pytrec, t)

    expected = pl.DataFrame(
        [(q, m, theirs[q][PYTREC[m]]) for q in theirs for m in OURS],
        schema={"query_id": pl.String, "measure": pl.String, "value": pl.Float64}, orient="row")
    both = mine.join(expected, on=["query_id", "measure"], how="full", coalesce=True)
    gap = float(np.nanmax(np.abs((both["value"] - both["value_right"]).fill_null(np.inf).to_numpy())))

    print(f"\n{'end to end from files':24} {'seconds':>8}")
    print(f"{'ours (read + evaluate)':24} {t_ours:8.2f}")
    print(f"{'pytrec_eval':24} {t_pytrec:8.2f}")
    print(f"\nratio pytrec_eval / ours: {t_pytrec / t_ours:.2f}x (target >= 4)")
    print(f"largest per-query difference over {both.height:,} values: {gap:.3g}")


if __name__ == "__main__":
    main()
