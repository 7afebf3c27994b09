"""What metadata filters cost approximate search: neighbour recall@k of filtered IVF and HNSW
search (FAISS IDSelectorBatch) and of post-filtered exact search, against filtered exact search,
at filter selectivities 50%, 10% and 1%, on seeded clustered vectors (retbench.tasks.stages.sweep.SyntheticDataset).

    python benchmarks/bench_filtered_ann.py [--n 20000] [--d 64] [--nq 200] [--nlist 256]
                                            [--nprobe 1 4 16] [--hnsw-m 32] [--ef 16 64 256] [--out table.parquet]

Quality only (no timings), so the numbers do not depend on the machine's load.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import faiss  # noqa: E402
import polars as pl  # noqa: E402

from retbench.tasks.stages.filtered_ann import filtered_fidelity  # noqa: E402
from retbench.tasks.stages.sweep import SyntheticDataset  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--d", type=int, default=64)
    parser.add_argument("--nq", type=int, default=200)
    parser.add_argument("--clusters", type=int, default=50)
    parser.add_argument("--nlist", type=int, default=256)
    parser.add_argument("--nprobe", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--hnsw-m", type=int, default=32)
    parser.add_argument("--ef", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    data = SyntheticDataset(d=args.d, nb=args.n, nq=args.nq, clusters=args.clusters)
    docs = data.documents()
    queries = data.queries(docs)
    ivf = faiss.IndexIVFFlat(faiss.IndexFlatIP(args.d), args.d, args.nlist, faiss.METRIC_INNER_PRODUCT)
    ivf.train(docs)
    ivf.add(docs)
    indexes = [(f"ivf nlist={args.nlist}", ivf, [{"nprobe": n} for n in args.nprobe])]
    if args.hnsw_m:
        hnsw = faiss.IndexHNSWFlat(args.d, args.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        hnsw.add(docs)
        indexes.append((f"hnsw M={args.hnsw_m}", hnsw, [{"efSearch": e} for e in args.ef]))
    table = filtered_fidelity(docs, queries, indexes, k=args.k)
    if args.out:
        table.write_parquet(args.out)
    pl.Config.set_tbl_rows(200)
    pl.Config.set_tbl_cols(20)
    pl.Config.set_tbl_width_chars(200)
    pl.Config.set_tbl_hide_dataframe_shape(True)
    print(f"n={args.n} d={args.d} nq={args.nq} clusters={args.clusters} k={args.k}: neighbour recall@{args.k} vs filtered exact search")
    print(table.select("filter_kind", "selectivity", "allowed", "index", "params", pl.col("neighbour_recall").round(3),
                       pl.col("ci_low").round(3), pl.col("ci_high").round(3),
                       pl.col("unfiltered_neighbour_recall").round(3).alias("unfiltered"),
                       pl.col("recall_lost").round(3), "starved_queries"))


if __name__ == "__main__":
    main()
