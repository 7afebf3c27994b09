"""`retbench eval` end to end from TREC files against pytrec_eval from the same files.

    python benchmarks/bench_eval_files.py [--queries 10000 --depth 1000] [--repeat 3] [--work DIR]
                                          [--mode both|process|inprocess]

Writes one seeded run (with many tied scores, as benchmarks/bench_metrics.py) and its qrels as
TREC files, then times, in alternating rounds (ours, pytrec_eval, ours, ...):
- process (the target, issue 36): the whole command in its own process, start-up included.
  Ours: `retbench eval -q -m ...` printing its table to a file; pytrec_eval: `python -c` that
  imports it, runs parse_qrel / parse_run over the open files + RelevanceEvaluator + evaluate,
  and prints every value (per query, then the means) the same way. Both children run without
  PYTHONDONTWRITEBYTECODE, after one untimed run each: they read the compiled modules an
  installed package has, not Python sources compiled again on every start.
- inprocess: retbench.flows.eval_command.score_files (what `retbench eval -q` does before
  printing) against pytrec_eval's parse + evaluate, in this process (no start-up, no output).
Prints the load, each side's best time, the ratio of the best times and the ratio of each
round (pytrec_eval / ours, target >= 4: met or not), and the largest per-query difference
between the two sides (~0 in process; the table prints 4 decimals, so < 5e-5 there).
Compare ratios, not seconds: the machine is shared.
"""
from __future__ import annotations

import argparse
import logging
import os
import statistics
import subprocess
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
TARGET = 4.0

# The pytrec_eval side of a process round: what a script scoring the same files with pytrec_eval
# does, printing in `retbench eval -q`'s layout (measure, query, value; the means as query "all").
PYTREC_CHILD = """
import sys, pytrec_eval
qrels_path, run_path, names, keys = sys.argv[1], sys.argv[2], sys.argv[3].split(","), sys.argv[4].split(",")
with open(qrels_path) as f:
    qrels = pytrec_eval.parse_qrel(f)
with open(run_path) as f:
    run = pytrec_eval.parse_run(f)
ev = pytrec_eval.RelevanceEvaluator(qrels, set(sys.argv[5].split(",")))
scores = ev.evaluate(run)
out = []
for q in sorted(scores):
    for name, key in zip(names, keys):
        out.append(f"{name}\\t{q}\\t{scores[q][key]!r}\\n")
for name, key in zip(names, keys):
    out.append(f"{name}\\tall\\t{sum(s[key] for s in scores.values()) / len(scores)!r}\\n")
sys.stdout.write("".join(out))
"""
PYTREC_NAMES = "ndcg_cut.10,recall.100,recip_rank,map,P.10"


def ours(run_path: Path, qrels_path: Path) -> pl.DataFrame:
    table = score_files(qrels_path, run_path, OURS, per_query=True)
    return table.filter(pl.col("query_id") != "all")


def pytrec(run_path: Path, qrels_path: Path) -> dict:
    import pytrec_eval

    with open(qrels_path) as f:
        qrels = pytrec_eval.parse_qrel(f)
    with open(run_path) as f:
        run = pytrec_eval.parse_run(f)
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, set(PYTREC_NAMES.split(",")))
    return evaluator.evaluate(run)


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def _retbench_command() -> list[str]:
    script = Path(sys.executable).with_name("retbench")
    return [str(script)] if script.exists() else [sys.executable, "-m", "retbench.flows.cli"]


def _child(argv: list[str], out: Path) -> float:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    start = time.perf_counter()
    with open(out, "w") as f:
        subprocess.run(argv, stdout=f, env=env, check=True)
    return time.perf_counter() - start


def _table(path: Path) -> dict[tuple[str, str], float]:
    rows = (line.split("\t") for line in path.read_text().splitlines())
    return {(m.strip(), q): float(v) for m, q, v in rows}


def process_rounds(run_path: Path, qrels_path: Path, repeat: int, work: Path) -> tuple[list[float], list[float], float]:
    measures = [a for m in OURS for a in ("-m", m)]
    mine_out, theirs_out = work / "ours.txt", work / "pytrec_eval.txt"
    ours_argv = [*_retbench_command(), "eval", "-q", *measures, str(qrels_path), str(run_path)]
    pytrec_argv = [sys.executable, "-c", PYTREC_CHILD, str(qrels_path), str(run_path), ",".join(OURS),
                   ",".join(PYTREC[m] for m in OURS), PYTREC_NAMES]
    _child(ours_argv, mine_out), _child(pytrec_argv, theirs_out)  # untimed: compiled modules, files in the page cache
    t_ours, t_pytrec = [], []
    for _ in range(repeat):
        t_ours.append(_child(ours_argv, mine_out))
        t_pytrec.append(_child(pytrec_argv, theirs_out))
    mine, theirs = _table(mine_out), _table(theirs_out)
    if mine.keys() != theirs.keys():
        raise SystemExit(f"the two outputs hold different rows: {len(mine)} against {len(theirs)}")
    return t_ours, t_pytrec, max(abs(mine[k] - theirs[k]) for k in mine)


def inprocess_rounds(run_path: Path, qrels_path: Path, repeat: int) -> tuple[list[float], list[float], float]:
    t_ours, t_pytrec = [], []
    for _ in range(repeat):
        mine, t = timed(lambda: ours(run_path, qrels_path))
        t_ours.append(t)
        theirs, t = timed(lambda: pytrec(run_path, qrels_path))
        t_pytrec.append(t)
    expected = pl.DataFrame(
        [(q, m, theirs[q][PYTREC[m]]) for q in theirs for m in OURS],
        schema={"query_id": pl.String, "measure": pl.String, "value": pl.Float64}, orient="row")
    both = mine.join(expected, on=["query_id", "measure"], how="full", coalesce=True)
    gap = float(np.nanmax(np.abs((both["value"] - both["value_right"]).fill_null(np.inf).to_numpy())))
    return t_ours, t_pytrec, gap


def report(title: str, t_ours: list[float], t_pytrec: list[float], gap: float) -> None:
    rounds = [p / o for o, p in zip(t_ours, t_pytrec)]
    best = min(t_pytrec) / min(t_ours)
    print(f"\n{title}")
    print(f"  ours          best {min(t_ours):7.2f} s   rounds {' '.join(f'{t:.2f}' for t in t_ours)}")
    print(f"  pytrec_eval   best {min(t_pytrec):7.2f} s   rounds {' '.join(f'{t:.2f}' for t in t_pytrec)}")
    print(f"  ratio pytrec_eval / ours: best times {best:.2f}x, rounds {' '.join(f'{r:.2f}' for r in rounds)} "
          f"(median {statistics.median(rounds):.2f}x); target >= {TARGET:g}x "
          f"{'met' if best >= TARGET else 'NOT met'} (best times)")
    print(f"  largest per-query difference: {gap:.3g}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--depth", type=int, default=1_000)
    ap.add_argument("--repeat", type=int, default=3, help="alternating rounds per mode")
    ap.add_argument("--mode", choices=["both", "process", "inprocess"], default="both")
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
    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} "
          f"({os.cpu_count()} cores)", flush=True)

    if args.mode in ("both", "process"):
        report("whole process (start-up and output included): `retbench eval -q` against a pytrec_eval script",
               *process_rounds(run_path, qrels_path, args.repeat, args.work))
    if args.mode in ("both", "inprocess"):
        report("in this process (read + score, no start-up, no output): score_files against pytrec_eval",
               *inprocess_rounds(run_path, qrels_path, args.repeat))
    print(f"\nload average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
