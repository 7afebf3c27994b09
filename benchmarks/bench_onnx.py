"""ONNX Runtime int8 vs torch fp32 for all-MiniLM-L6-v2, side by side in one process: texts/s
ratio on Cranfield documents, and the nDCG@10 change on Cranfield with a paired interval.

    python benchmarks/bench_onnx.py [--sample 300] [--rounds 3] [--store-dir DIR]

Speed: the same `--sample` documents encoded by each backend in alternating rounds (after one
warm-up batch each), batch size 64, longest texts first on both sides, as many threads on both
(torch's, onnxruntime's intra-op); the ratio is per round and its median is reported, so a
busy machine slows both sides alike. The load average is printed before and after. Quality: all 1,400 documents and 225 queries embedded by
each backend through the embedding cache (the backends have different fingerprints, so
different cache folders), exact search, nDCG@10 per query, paired bootstrap + randomization.
Target: int8 >= 1.5x the texts/s of torch fp32.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import faiss
import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from retbench.tasks.analysis.breakdown import paired_comparison  # noqa: E402
from retbench.tasks.analysis.metrics import evaluate  # noqa: E402
from retbench.tasks.providers import create_provider  # noqa: E402
from retbench.tasks.datasets.document_text import document_text  # noqa: E402
from retbench.tasks.stages.dataset import load_dataset  # noqa: E402
from retbench.tasks.stages.embed import embed_texts, load_vectors  # noqa: E402
from retbench.tasks.stages.maxp import search_documents  # noqa: E402

CRANFIELD = Path("/work/shared/data/cranfield")


def per_query(provider, label, dataset, texts, store) -> pl.DataFrame:
    docs = embed_texts(provider, label, dataset.corpus["doc_id"].to_list(), texts, "document", store)
    queries = embed_texts(provider, label, dataset.queries["query_id"].to_list(), dataset.queries["text"].to_list(), "query", store)
    index = faiss.IndexFlatIP(docs.dim)
    index.add(load_vectors(docs)[1])
    hits = search_documents(index, load_vectors(queries)[1], np.arange(docs.count), 100)
    run = pl.DataFrame({"query_id": dataset.queries["query_id"].gather(hits["query"]),
                        "doc_id": dataset.corpus["doc_id"].gather(hits["chunk"]), "score": hits["score"]})
    return evaluate(run, dataset.qrels, ["ndcg@10", "recall@10"]).per_query.with_columns(
        provider=pl.lit(label), index=pl.lit("flat"), nprobe=pl.lit(None, dtype=pl.Int64))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--skip-quality", action="store_true", help="texts/s only")
    parser.add_argument("--store-dir", type=Path, default=Path("/tmp/retbench-cheap-store"))
    parser.add_argument("--onnx-cache", type=Path, default=None)
    parser.add_argument("--batch-size", type=int, default=64, help="texts per encode call, the same on both sides")
    args = parser.parse_args()
    dataset = load_dataset(CRANFIELD, "cranfield", "all")
    texts = [document_text(t, x) for t, x in dataset.corpus.select("title", "text").iter_rows()]
    cache = {"onnx_cache": str(args.onnx_cache)} if args.onnx_cache else {}
    batching = {"batch_size": args.batch_size}
    backends = {"torch-fp32": create_provider("sentence-transformers", batching),
                "onnx-int8": create_provider("sentence-transformers", {"backend": "onnx-int8", **batching, **cache})}
    started = time.perf_counter()
    print("onnx-int8 fingerprint:", {k: v for k, v in backends["onnx-int8"].fingerprint().items() if k in ("backend", "onnx_sha256")},
          f"(export ready in {time.perf_counter() - started:.1f} s)")

    sample = sorted(np.random.default_rng(0).choice(len(texts), args.sample, replace=False).tolist())
    batch = [texts[i] for i in sample]
    for provider in backends.values():
        provider.encode(batch[:64], "document")  # warm-up: model load, first-call allocations
    import torch

    print(f"threads: torch {torch.get_num_threads()}, onnxruntime {backends['onnx-int8']._onnx.session.get_session_options().intra_op_num_threads}; "
          f"batch size {args.batch_size}; load average before {os.getloadavg()}")
    rates: dict[str, list[float]] = {name: [] for name in backends}
    for round_ in range(args.rounds):
        order = list(backends) if round_ % 2 == 0 else list(reversed(backends))
        for name in order:
            t0 = time.perf_counter()
            backends[name].encode(batch, "document")
            rates[name].append(len(batch) / (time.perf_counter() - t0))
    ratios = [o / t for o, t in zip(rates["onnx-int8"], rates["torch-fp32"])]
    for name, values in rates.items():
        print(f"{name}: texts/s per round {[round(v, 1) for v in values]}")
    print(f"texts/s ratio onnx-int8 / torch-fp32 per round {[round(r, 2) for r in ratios]}; "
          f"median {statistics.median(ratios):.2f}x (target >= 1.5x); load average after {os.getloadavg()}")
    if args.skip_quality:
        return

    scored = pl.concat([per_query(p, name, dataset, texts, args.store_dir) for name, p in backends.items()])
    compared = paired_comparison(scored, ("onnx-int8", "flat", None), ("torch-fp32", "flat", None))
    pl.Config.set_tbl_cols(20)
    pl.Config.set_tbl_width_chars(200)
    print(compared.select("measure", "n", "mean_a", "mean_b", "diff", "ci_low", "ci_high", "p_value")
          .rename({"mean_a": "onnx_int8", "mean_b": "torch_fp32"}))


if __name__ == "__main__":
    main()
