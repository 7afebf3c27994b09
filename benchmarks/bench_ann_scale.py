"""The ANN sweep at scale: index + retrieve + score on n x d float32 vectors (default 1,000,000 x 384)
read from the Parquet embedding cache, with peak memory and the retrieval stage's overhead.

    python benchmarks/bench_ann_scale.py [--n 1000000] [--d 384] [--nq 1000] [--work /tmp/retbench-ann-scale]
                                         [--nlist 1024] [--train 65536] [--nprobe 1 4 16 64] [--no-ivfpq] [--hnsw-m 0]
                                         [--compare-loader N]

1. A child process generates seeded clustered vectors (retbench.tasks.stages.sweep.SyntheticDataset), judgments from
   exact neighbours, and writes them in the cache format (float32 fixed_size_list, zstd); a rerun
   with the same parameters reuses the files. The child keeps generation out of this process's peak.
2. This process runs retbench.tasks.stages.sweep.run_sweep (flat, IVF, IVF-PQ; HNSW if --hnsw-m) into a fresh index
   folder and prints its stage times, the loader's copy report, peak RSS (VmHWM) and its ratio to
   the raw vector bytes (target <= 2).
3. Side by side on the same arrays, alternating, best of 3: `index.search(queries, depth)` against
   retbench.tasks.stages.maxp.search_documents (MaxP), with integer document codes (as the sweep calls it) and
   with the string document ids retbench.tasks.stages.retrieve.retrieve passes; target <= 1.10x.
Step 2 also times retbench.tasks.stages.embed.read_vectors alone and reports what it decoded and copied.
With --compare-loader N, two more children load an N-vector set with retbench.tasks.stages.embed.load_vectors and
with retbench.tasks.stages.embed.read_vectors and report each one's peak RSS.
The machine is shared and noisy: compare ratios, not absolute seconds.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

GiB = 1 << 30
# Idle OpenMP threads sleep instead of spinning: on a shared 2-core machine spinning made FAISS
# k-means 4x slower with 2 threads than with 1. Must be set before faiss loads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def vm_kib(field: str) -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def peak_bytes() -> int:
    # VmHWM is this process's resident high-water mark. ru_maxrss (KiB on Linux) is only the
    # fallback: it survives fork + exec, so a child started by a big parent reports the parent's peak.
    return (vm_kib("VmHWM") or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0), so a stage's own peak can be read."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def rss_bytes() -> int:
    return vm_kib("VmRSS") * 1024


def generate(args) -> None:

    from retbench.tasks.stages.sweep import SyntheticDataset

    work = Path(args.work)
    data = SyntheticDataset(d=args.d, nb=args.n, nq=args.nq, clusters=args.clusters, spread=args.spread,
                            chunks_per_doc=2, seed=0)
    started = time.perf_counter()
    doc_set, query_set, chunks_path, qrels = data.write(work / "store", provider="synthetic")
    qrels_path = work / "qrels.parquet"
    qrels.write_parquet(qrels_path)
    (work / "data.json").write_text(json.dumps({
        "params": vars(args) | {"work": None},
        "doc_set": asdict(doc_set), "query_set": asdict(query_set),
        "chunks_path": chunks_path, "qrels_path": str(qrels_path),
        "seconds": time.perf_counter() - started,
    }))


def load_in_child(args) -> None:
    from retbench.tasks.stages.embed import read_vectors as load_vectors_mapped
    from retbench.tasks.stages.embed import EmbeddingSet, load_vectors

    doc_set = EmbeddingSet(**json.loads(Path(args.loader_set).read_text()))
    before = rss_bytes()
    started = time.perf_counter()
    if args.loader == "load_vectors":
        _, matrix = load_vectors(doc_set)
    else:
        _, matrix, _ = load_vectors_mapped(doc_set)
    print(json.dumps({"loader": args.loader, "seconds": time.perf_counter() - started, "peak": peak_bytes(),
                      "rss_before": before, "matrix": matrix.nbytes}))


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--d", type=int, default=384)
    parser.add_argument("--nq", type=int, default=1000)
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--spread", type=float, default=1.0, help="within-cluster noise norm (centres are unit vectors)")
    parser.add_argument("--work", default="/tmp/retbench-ann-scale")
    parser.add_argument("--nlist", type=int, default=1024)
    parser.add_argument("--train", type=int, default=65_536)
    parser.add_argument("--pq-train", type=int, default=16_384, help="IVF-PQ training sample (PQ k-means is the slow part)")
    parser.add_argument("--nprobe", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--no-ivfpq", action="store_true")
    parser.add_argument("--hnsw-m", type=int, default=0, help="also build HNSW with this M (slow at 1M on 2 cores)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--latency-queries", type=int, default=100)
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--compare-loader", type=int, default=0, metavar="N")
    parser.add_argument("--generate", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--loader", help=argparse.SUPPRESS)
    parser.add_argument("--loader-set", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.generate:
        return generate(args)
    if args.loader:
        return load_in_child(args)

    work = Path(args.work)
    data_params = {"n": args.n, "d": args.d, "nq": args.nq, "clusters": args.clusters, "spread": args.spread}
    meta_path = work / "data.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else None
    if meta is None or {k: meta["params"][k] for k in data_params} != data_params:
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        print(f"generating {args.n:,} x {args.d} vectors and {args.nq} queries in a child process ...", flush=True)
        started = time.perf_counter()
        subprocess.run([sys.executable, __file__, "--generate", "--n", str(args.n), "--d", str(args.d), "--nq", str(args.nq),
                        "--clusters", str(args.clusters), "--spread", str(args.spread), "--work", str(work)], check=True)
        print(f"  generated and written in {time.perf_counter() - started:.1f}s", flush=True)
        meta = json.loads(meta_path.read_text())
    else:
        print(f"reusing the generated cache under {work}")

    import faiss
    import numpy as np
    import polars as pl

    from retbench.tasks.stages.embed import read_vectors as load_vectors_mapped
    from retbench.tasks.stages.embed import EmbeddingSet
    from retbench.tasks.stages.maxp import document_run, search_documents
    from retbench.tasks.stages.sweep import SweepSpec, run_sweep

    doc_set = EmbeddingSet(**meta["doc_set"])
    query_set = EmbeddingSet(**meta["query_set"])
    raw = doc_set.count * doc_set.dim * 4
    shard_bytes = sum(p.stat().st_size for p in Path(doc_set.cache_dir).glob("shard-*-document.parquet"))
    print(f"vectors: {doc_set.count:,} x {doc_set.dim} float32 = {raw / GiB:.2f} GiB raw; Parquet shard {shard_bytes / GiB:.2f} GiB (zstd); "
          f"{query_set.count} queries; threads {faiss.omp_get_max_threads()}")
    print(f"baseline RSS after imports: {rss_bytes() / GiB:.2f} GiB")

    # A fresh index folder each run: the sweep must build (timed) rather than reuse.
    store = work / "store"
    shutil.rmtree(store / "indexes", ignore_errors=True)
    spec = SweepSpec(
        ivf={"nlist": [args.nlist], "train_size": [args.train], "nprobe": args.nprobe},
        hnsw={"M": [args.hnsw_m], "ef_construction": [40], "ef_search": [16, 64, 128]} if args.hnsw_m else None,
        ivfpq=None if args.no_ivfpq else {"nlist": [args.nlist], "m": [args.d // 8], "nbits": [8], "train_size": [args.pq_train],
                                          "nprobe": [p for p in args.nprobe if p > 1] or args.nprobe},
        k=10, depth=args.depth, repeats=args.repeats, latency_queries=args.latency_queries,
    )
    started = time.perf_counter()
    result = run_sweep(doc_set, query_set, meta["chunks_path"], meta["qrels_path"], spec, store, work / "out",
                       progress=lambda m: print("  " + m, flush=True))
    sweep_seconds = time.perf_counter() - started
    sweep_peak = peak_bytes()
    print(f"\nsweep: {sweep_seconds:.1f}s wall; stages {result.timings}")
    print(f"loader: {result.load_report}")
    print(f"peak RSS during the sweep (VmHWM): {sweep_peak / GiB:.2f} GiB = {sweep_peak / raw:.2f}x the raw vector bytes (target <= 2)")
    print(f"recommendation: {result.recommendation}")
    table = pl.read_parquet(result.path)
    with pl.Config(tbl_rows=50, tbl_cols=20, tbl_width_chars=200, float_precision=4):
        print(table.select("index_kind", "build_params", "query_params", "neighbour_recall@10", "delta_recall@10", "delta_mrr",
                           "delta_ndcg@10", "delta_ndcg@10_ci_low", "delta_ndcg@10_ci_high", "build_seconds", "train_seconds",
                           "bytes_per_vector", "qps_batch", "p50_ms_single_thread", "p99_ms_single_thread", "p50_ms_all_threads",
                           "p99_ms_all_threads"))

    # The loader alone, in this process (the sweep dropped its matrix).
    can_reset = reset_peak()
    before = rss_bytes()
    started = time.perf_counter()
    _, matrix, report = load_vectors_mapped(doc_set)
    load_seconds = time.perf_counter() - started
    print(f"\nloader alone: {load_seconds:.1f}s, {report}; RSS +{(rss_bytes() - before) / GiB:.2f} GiB for a "
          f"{matrix.nbytes / GiB:.2f} GiB matrix"
          + (f"; stage peak +{(peak_bytes() - before) / GiB:.2f} GiB" if can_reset else ""))
    del matrix

    # Retrieval overhead, side by side on the same arrays.
    _, query_matrix, _ = load_vectors_mapped(query_set)
    queries = query_matrix  # unit vectors from the cache
    chunk_ids = pl.read_parquet(doc_set.path, columns=["id"])["id"]
    chunks = pl.read_parquet(meta["chunks_path"])
    doc_ids = pl.DataFrame({"chunk_id": chunk_ids}).join(chunks, on="chunk_id", how="left", maintain_order="left")["doc_id"]
    doc_strings = doc_ids.to_numpy()
    doc_codes = doc_ids.rank("dense").to_numpy().astype(np.int64) - 1  # as retbench.tasks.stages.retrieve.retrieve computes them
    query_ids = pl.Series(list(map(str, range(len(queries)))))
    index_dir = store / "indexes" / doc_set.key[:32]
    print(f"\nretrieval overhead, {len(queries)} queries, depth {args.depth} documents (best of {args.repeats}, alternating):")
    overhead = {}
    for name, nprobe in [("flat.faiss", None), (f"ivf_nlist-{args.nlist}_train-{args.train}_seed-0.faiss", 16)]:
        index = faiss.read_index(str(index_dir / name))
        if nprobe:
            index.nprobe = nprobe
        direct = direct2 = maxp = full = strings = float("inf")
        for _ in range(args.repeats):
            direct = min(direct, best_of(lambda: index.search(queries, args.depth), 1))
            # search_documents starts at 2 x depth chunks: the same FAISS work, without MaxP.
            direct2 = min(direct2, best_of(lambda: index.search(queries, 2 * args.depth), 1))
            maxp = min(maxp, best_of(lambda: search_documents(index, queries, doc_codes, args.depth), 1))

            def stage():
                hits = search_documents(index, queries, doc_codes, args.depth)
                return document_run(hits, doc_codes, query_ids, doc_ids, chunk_ids)

            full = min(full, best_of(stage, 1))
        strings = best_of(lambda: search_documents(index, queries, doc_strings, args.depth), 1)
        label = name.removesuffix(".faiss") + (f" nprobe={nprobe}" if nprobe else "")
        overhead[label] = {"direct_s": direct, "direct_2x_depth_s": direct2, "search_documents_s": maxp, "with_run_frame_s": full, "string_doc_ids_s": strings}
        print(f"  {label}: faiss search k={args.depth} {direct:.3f}s, k={2 * args.depth} {direct2:.3f}s | "
              f"search_documents {maxp:.3f}s ({maxp / direct:.2f}x; {maxp / direct2:.2f}x vs k={2 * args.depth}) | "
              f"+ run in trec order (document_run) {full:.3f}s ({full / direct:.2f}x) | with string doc ids, factorised on every call "
              f"{strings:.3f}s ({strings / direct:.2f}x)")
        del index

    final_peak = peak_bytes() if not can_reset else max(sweep_peak, peak_bytes())
    print(f"\npeak RSS over the whole run: {max(sweep_peak, final_peak) / GiB:.2f} GiB "
          f"({max(sweep_peak, final_peak) / raw:.2f}x raw)")
    (work / "out").mkdir(parents=True, exist_ok=True)
    (work / "out" / "bench_ann_scale.json").write_text(json.dumps({
        "n": doc_set.count, "d": doc_set.dim, "queries": query_set.count, "raw_bytes": raw,
        "sweep_seconds": sweep_seconds, "stage_seconds": result.timings, "load_report": result.load_report,
        "sweep_peak_bytes": sweep_peak, "peak_ratio": sweep_peak / raw, "overhead": overhead,
        "recommendation": result.recommendation.to_dict() if result.recommendation else None,
    }, indent=2, default=str))

    if args.compare_loader:
        compare_loaders(args, work)


def compare_loaders(args, work: Path) -> None:
    """Peak RSS of each loader on an N-vector set, each in its own child process."""
    from retbench.tasks.stages.sweep import SyntheticDataset

    sub = work / f"loader-{args.compare_loader}"
    if not (sub / "set.json").exists():
        data = SyntheticDataset(d=args.d, nb=args.compare_loader, nq=10, clusters=100, seed=1)
        docs = data.documents()
        from retbench.tasks.stages.sweep import write_embedding_set

        doc_set = write_embedding_set(sub / "store", "synthetic", {"kind": "synthetic", "n": args.compare_loader}, "document",
                                      data.chunk_ids(), docs)
        sub.mkdir(parents=True, exist_ok=True)
        (sub / "set.json").write_text(json.dumps(asdict(doc_set)))
        del docs
    raw = args.compare_loader * args.d * 4
    print(f"\nloader comparison on {args.compare_loader:,} x {args.d} ({raw / GiB:.2f} GiB raw), one child each:")
    for loader in ("load_vectors", "load_vectors_mapped"):
        out = subprocess.run([sys.executable, __file__, "--loader", loader, "--loader-set", str(sub / "set.json")],
                             check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
        found = json.loads(out)
        print(f"  {loader}: {found['seconds']:.2f}s, peak RSS {found['peak'] / GiB:.2f} GiB "
              f"(+{(found['peak'] - found['rss_before']) / raw:.2f}x raw over the RSS before loading)")


if __name__ == "__main__":
    main()
