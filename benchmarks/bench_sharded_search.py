"""Exact (flat) and IVF search sharded over 1, 2 and 4 local Dask workers against one process:
wall time, peak resident memory per worker, and whether every id and score equals one process's.

    nice python benchmarks/bench_sharded_search.py [--rows 2000000] [--dim 384] [--queries 1000] [--k 100]
                                                   [--workers 1 2 4] [--rounds 2] [--nlist 2048] [--nprobe 8]
                                                   [--flat-queries N] [--dir /tmp/retbench-sharded]

Data: seeded unit vectors written once to DIR/vectors.npy (rows 0..1999 repeated as the last
2,000 rows, so equal scores meet across shards), queries the same way (the first 200 are noisy
copies of the repeated rows). The IVF index is trained once (5 k-means iterations on a seeded sample
of 39 x nlist rows) and kept as DIR/ivf_empty.faiss; one process and every shard fill copies of it.
Every configuration runs in a fresh process, alternated round by round (single, 1, 2, 4 workers,
then the next round); each writes its (scores, ids) and its figures to DIR. Reported: load
seconds (rows read into the index), search seconds (the batch of queries, top-k, through
tasks/indexes/sharded.ExactSearch as retrieve searches), its ratio to one process's in the same
round, ru_maxrss of the process (single) or of each worker and of the client, the worker's
resident set before its shard (Python, Dask, FAISS: the fixed overhead), and identical = every id
and score bit equal to one process's result. Cluster start-up is not timed.
The machine is shared and noisy: compare ratios within a round.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

REPEATED = 2000


def write_data(folder: Path, rows: int, dim: int, queries: int) -> None:
    path = folder / "vectors.npy"
    if path.exists() and np.load(path, mmap_mode="r").shape == (rows, dim):
        return
    rng = np.random.default_rng(0)
    tmp = folder / "vectors.npy.tmp"
    with open(tmp, "wb") as handle:
        np.lib.format.write_array_header_1_0(handle, {"descr": "<f4", "fortran_order": False, "shape": (rows, dim)})
        head = None
        for start in range(0, rows, 100_000):
            n = min(100_000, rows - start)
            block = rng.standard_normal((n, dim), dtype=np.float32)
            block /= np.linalg.norm(block, axis=1, keepdims=True)
            if start == 0:
                head = block[:REPEATED].copy()
            tail = rows - REPEATED - start  # the last REPEATED rows repeat the first
            if tail < n:
                block[max(tail, 0):] = head[max(-tail, 0):max(-tail, 0) + n - max(tail, 0)]
            handle.write(block.tobytes())
    tmp.rename(path)
    q = rng.standard_normal((queries, dim), dtype=np.float32)
    near = min(200, queries)
    q[:near] = head[:near] + 0.05 * q[:near]
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    np.save(folder / "queries.npy", q)


def train_ivf(folder: Path, nlist: int) -> None:
    import faiss

    from retbench.tasks.indexes.sharded import NpyRows, empty_ivf_like

    path = folder / f"ivf_empty_{nlist}.faiss"
    if path.exists():
        return
    source = NpyRows(folder / "vectors.npy")
    n, dim = source.shape
    rows = np.sort(np.random.default_rng(0).choice(n, size=min(n, 39 * nlist), replace=False))
    sample = np.vstack([source.read(int(r), int(r) + 1) for r in rows])
    index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, nlist, faiss.METRIC_INNER_PRODUCT)
    index.cp.seed = 0
    index.cp.niter = 5  # the lists' quality is not measured here; 25 iterations cost many minutes on a shared machine
    started = time.perf_counter()
    index.train(sample)
    print(f"  trained IVF nlist={nlist} on {len(sample)} rows in {time.perf_counter() - started:.0f} s", flush=True)
    faiss.write_index(empty_ivf_like(index), str(path))


def maxrss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def worker_figures() -> dict:
    import psutil

    return {"rss": psutil.Process().memory_info().rss, "maxrss": maxrss_bytes()}


def warm_worker() -> dict:
    """Imports a shard needs, then the worker's resident set: the fixed overhead."""
    import faiss  # noqa: F401

    import retbench.tasks.indexes.sharded  # noqa: F401

    return worker_figures()


def run_one(args) -> None:
    """One configuration in this process; figures as JSON on the last line of stdout."""
    import faiss

    from retbench.tasks.indexes.sharded import ExactSearch, NpyRows, build_shard

    folder = Path(args.dir)
    source = NpyRows(folder / "vectors.npy")
    queries = np.load(folder / "queries.npy")
    queries = queries[:args.flat_queries] if args.kind == "flat" and args.flat_queries else queries
    ivf_path = folder / f"ivf_empty_{args.nlist}.faiss"
    template = faiss.read_index(str(ivf_path)) if args.kind == "ivf" else None
    nprobe = args.nprobe if args.kind == "ivf" else None
    n, dim = source.shape
    figures = {"kind": args.kind, "workers": args.run_workers}
    if args.run_workers == 0:
        started = time.perf_counter()
        shard = build_shard(source, 0, n, template)
        figures["load_seconds"] = time.perf_counter() - started
        search = ExactSearch(ntotal=n, d=dim, index=shard.index, ivf=shard.index if template is not None else None,
                             nprobe=nprobe)
    else:
        from distributed import Client, LocalCluster

        from retbench.tasks.stages.sharded_search import sharded_search

        cluster = LocalCluster(n_workers=args.run_workers, threads_per_worker=1, processes=True, dashboard_address=":0")
        client = Client(cluster)
        figures["worker_baseline"] = [f["rss"] for f in client.run(warm_worker).values()]
        started = time.perf_counter()
        search = sharded_search(source, args.run_workers, ivf=template, nprobe=nprobe, client=client)
        figures["load_seconds"] = time.perf_counter() - started
    started = time.perf_counter()
    scores, ids = search.search(queries, args.k)
    figures["search_seconds"] = time.perf_counter() - started
    figures["process_maxrss"] = maxrss_bytes()
    if args.run_workers:
        figures["worker_maxrss"] = [f["maxrss"] for f in client.run(worker_figures).values()]
        client.close()
        cluster.close()
    np.save(folder / f"result_{args.kind}_{args.run_workers}.npy", np.stack([scores.view(np.int32).astype(np.int64), ids]))
    print(json.dumps(figures), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--nlist", type=int, default=2048)
    parser.add_argument("--nprobe", type=int, default=8)
    parser.add_argument("--flat-queries", type=int, default=None, help="search flat with the first N queries only")
    parser.add_argument("--kinds", nargs="+", default=["flat", "ivf"])
    parser.add_argument("--dir", default="/tmp/retbench-sharded")
    parser.add_argument("--run-workers", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--kind", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run_workers is not None:
        run_one(args)
        return
    folder = Path(args.dir)
    folder.mkdir(parents=True, exist_ok=True)
    write_data(folder, args.rows, args.dim, args.queries)
    if "ivf" in args.kinds:
        train_ivf(folder, args.nlist)
    gib = 2 ** 30
    print(f"{args.rows:,} x {args.dim} vectors ({args.rows * args.dim * 4 / gib:.2f} GiB), {args.queries} queries, "
          f"k={args.k}; IVF nlist={args.nlist} nprobe={args.nprobe}"
          f"{f'; flat searched with the first {args.flat_queries} queries' if args.flat_queries else ''}"
          f"; {os.environ.get('OMP_NUM_THREADS', 'all')} FAISS thread(s)", flush=True)
    rows = []
    for round_ in range(args.rounds):
        for kind in args.kinds:
            for workers in [0, *args.workers]:
                command = [sys.executable, __file__, "--run-workers", str(workers), "--kind", kind, "--dir", args.dir,
                           "--k", str(args.k), *(["--flat-queries", str(args.flat_queries)] if args.flat_queries else []), "--nlist", str(args.nlist), "--nprobe", str(args.nprobe)]
                done = subprocess.run(command, capture_output=True, text=True)
                if done.returncode:
                    sys.exit(f"{kind} on {workers} workers failed:\n{done.stderr[-3000:]}")
                figures = json.loads(done.stdout.strip().splitlines()[-1])
                reference = np.load(folder / f"result_{kind}_0.npy")
                figures["identical"] = bool(np.array_equal(np.load(folder / f"result_{kind}_{workers}.npy"), reference))
                figures["round"] = round_ + 1
                single = next(r for r in rows[::-1] if r["kind"] == kind and r["workers"] == 0) if workers else figures
                figures["ratio"] = figures["search_seconds"] / single["search_seconds"]
                rows.append(figures)
                peak = max(figures.get("worker_maxrss") or [figures["process_maxrss"]])
                where = f"{workers} workers" if workers else "one process"
                extra = (f"  client {figures['process_maxrss'] / gib:4.2f} GiB"
                         f"  worker before shard {max(figures['worker_baseline']) / gib:4.2f} GiB") if workers else ""
                print(f"round {round_ + 1} {kind:4} {where:11}  load {figures['load_seconds']:6.1f} s"
                      f"  search {figures['search_seconds']:6.1f} s (x{figures['ratio']:.2f})"
                      f"  peak RSS {peak / gib:5.2f} GiB{extra}  identical {'yes' if figures['identical'] else 'NO'}",
                      flush=True)
    (folder / "figures.json").write_text(json.dumps(rows, indent=1))
    print(f"figures: {folder / 'figures.json'}")


if __name__ == "__main__":
    main()
