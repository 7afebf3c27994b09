"""Peak memory of the pipeline's index + retrieve stages with `indexes.shards` unset and 2, on
synthetic vectors in the embedding cache: does any process hold the full matrix?

    nice python benchmarks/bench_sharded_index.py [--rows 500000] [--dim 384] [--queries 200]
                                                 [--nlist 256] [--train 16384] [--dir /tmp/retbench-shardindex]

Setup (once, its own process): seeded unit vectors stored in DIR/store's embedding cache as one
set (tasks/stages/embed.store_vectors, in cache shards of 8,192 rows), queries likewise, one document per chunk. Then, each in a
fresh process with the store's indexes and runs removed first: "sharded" (build_sharded_index for
flat and IVF, then retrieve with shards=2, 2 local Dask workers) and "single" (build_index, then
retrieve in one process). Reported per mode: ru_maxrss of the main process and of each worker
(read inside the worker before the cluster stops), the matrix's size for scale, which index files
the store holds, and whether the run files equal the single-process ones (same rows, same scores).
"""
from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def setup(folder: Path, rows: int, dim: int, queries: int) -> None:
    import pickle

    import numpy as np
    import polars as pl

    from retbench.tasks.stages.embed import store_vectors

    if (folder / "sets.pickle").exists():
        return
    rng = np.random.default_rng(0)
    matrix = rng.standard_normal((rows, dim), dtype=np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    ids = [f"c{i:08d}" for i in range(rows)]
    fingerprint = {"kind": "synthetic", "seed": 0, "rows": rows, "dim": dim}
    # Written 8,192 rows at a time, as the embed stage's shards hold row groups of ~8k rows (one
    # store_vectors call would write one row group of every row, which a reader decodes whole).
    for start in range(0, rows, 8192):
        store_vectors(folder / "store", "synthetic", fingerprint, "document", ids[start:start + 8192],
                      matrix[start:start + 8192])
    docs = store_vectors(folder / "store", "synthetic", fingerprint, "document", ids, matrix)  # the set; all cached
    del matrix
    q = rng.standard_normal((queries, dim), dtype=np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    query_set = store_vectors(folder / "store", "synthetic", fingerprint, "query", [f"q{i}" for i in range(queries)], q)
    pl.DataFrame({"chunk_id": ids, "doc_id": [f"d{i:08d}" for i in range(rows)]}).write_parquet(folder / "chunks.parquet")
    (folder / "sets.pickle").write_bytes(pickle.dumps((docs, query_set)))


def measure(folder: Path, mode: str, nlist: int, train: int, kinds: list[str]) -> dict:
    import pickle

    import polars as pl

    from retbench.tasks.stages.index import IndexSettings, build_index, resolve_ivf
    from retbench.tasks.stages.retrieve import retrieve
    from retbench.tasks.stages.sharded_index import build_sharded_index
    from retbench.tasks.stages import sharded_search

    docs, queries = pickle.loads((folder / "sets.pickle").read_bytes())
    store = folder / "store"
    for name in ("indexes", "runs"):
        shutil.rmtree(store / name, ignore_errors=True)
    figures = {"mode": mode, "kinds": kinds, "rows": docs.count, "dim": docs.dim, "matrix_gib": docs.count * docs.dim * 4 / 2**30}
    runs = {}
    for kind, nprobe in (("flat", None), ("ivf", 8)):
        if kind not in kinds:
            continue
        settings = IndexSettings("flat") if kind == "flat" else resolve_ivf(docs.count, nlist, train, 0)
        if mode == "sharded":
            built = build_sharded_index(docs, settings, store, shards=2)
            run = retrieve(built, docs, queries, str(folder / "chunks.parquet"), 100, nprobe, store, shards=2)
        else:
            built = build_index(docs, settings, store)
            run = retrieve(built, docs, queries, str(folder / "chunks.parquet"), 100, nprobe, store)
        runs[kind] = run.path
        figures[f"{kind}_index_bytes"] = built.size_bytes
    if mode == "sharded":
        client = sharded_search._local[2]
        workers = client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
        figures["worker_peak_gib"] = sorted(round(v / 2**20, 3) for v in workers.values())
        sharded_search.close_local_clusters()
    figures["main_peak_gib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3)
    figures["index_files"] = sorted(p.name for p in (store / "indexes").rglob("*.faiss"))
    for kind, path in runs.items():
        pl.read_parquet(path).write_parquet(folder / f"run-{mode}-{kind}.parquet")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--nlist", type=int, default=256)
    parser.add_argument("--train", type=int, default=16_384)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/retbench-shardindex"))
    parser.add_argument("--kinds", nargs="+", choices=["flat", "ivf"], default=["flat", "ivf"],
                        help="the indexes built and searched in one process run (each alone: its own peaks)")
    parser.add_argument("--step", choices=["setup", "sharded", "single"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    if args.step == "setup":
        setup(args.dir, args.rows, args.dim, args.queries)
        return
    if args.step:
        print(json.dumps(measure(args.dir, args.step, args.nlist, args.train, args.kinds)))
        return
    base = [sys.executable, __file__, "--rows", str(args.rows), "--dim", str(args.dim), "--queries", str(args.queries),
            "--nlist", str(args.nlist), "--train", str(args.train), "--dir", str(args.dir), "--kinds", *args.kinds]
    subprocess.run(base + ["--step", "setup"], check=True)
    results = {}
    for mode in ("sharded", "single"):  # sharded first: the store then holds no full index file at all
        out = subprocess.run(base + ["--step", mode], check=True, capture_output=True, text=True).stdout
        results[mode] = json.loads(out.strip().splitlines()[-1])
        print(json.dumps(results[mode]))
    import polars as pl

    for kind in args.kinds:
        same = pl.read_parquet(args.dir / f"run-sharded-{kind}.parquet").equals(
            pl.read_parquet(args.dir / f"run-single-{kind}.parquet"))
        print(f"{kind}: run files equal: {same}")


if __name__ == "__main__":
    main()
