"""Embedding on a GPU: texts/s of torch fp32, torch fp16 and ONNX Runtime (CUDAExecutionProvider) for
all-MiniLM-L6-v2 (or --model) on the sample collection's texts, and what fp16 and ONNX cost in quality.

    python benchmarks/bench_gpu.py [--device cuda] [--rounds 3] [--texts 4096] [--batch-size N] [--model DIR]

Run it on the GPU host. On a host without the device it says so in one line and exits 2: it never
measures the CPU instead (a CPU figure under a GPU label is the mistake the pipeline's device check
exists to prevent; benchmarks/bench_onnx.py measures the CPU).

Speed: the sample's 220 documents and 110 queries, cycled to --texts texts, encoded by each engine
in alternating rounds after one warm-up call each; the median texts/s of the rounds is printed,
with the load average before and after. The batch is the pipeline's own on that device (chosen
from the card's free memory, tasks/devices.py) unless --batch-size sets it; the same for every
engine. ONNX runs the pipeline's fp32 export on ONNX Runtime's CUDAExecutionProvider when
onnxruntime offers it (the onnxruntime-gpu package), else it is skipped with the reason.
Quality, against torch fp32's vectors of the same texts: the smallest cosine of one text's two
vectors, and nDCG@10 of exact search on the sample collection (110 queries) with its difference.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from retbench.tasks.analysis.metrics import evaluate  # noqa: E402
from retbench.tasks.datasets.document_text import document_text  # noqa: E402
from retbench.tasks.devices import DeviceUnavailable, missing_device  # noqa: E402
from retbench.tasks.providers import create_provider  # noqa: E402
from retbench.tasks.stages.dataset import load_dataset  # noqa: E402

SAMPLE = ROOT / "data" / "sample"


def normalized(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


def ndcg10(doc_vectors: np.ndarray, query_vectors: np.ndarray, dataset) -> float:
    """Mean nDCG@10 of exact (inner product) search over the sample's documents."""
    scores = normalized(query_vectors) @ normalized(doc_vectors).T
    top = np.argsort(-scores, axis=1, kind="stable")[:, :100]
    doc_ids, query_ids = dataset.corpus["doc_id"].to_list(), dataset.queries["query_id"].to_list()
    run = pl.DataFrame({"query_id": [query_ids[q] for q in range(len(query_ids)) for _ in top[q]],
                        "doc_id": [doc_ids[d] for row in top for d in row],
                        "score": [float(scores[q, d]) for q, row in enumerate(top) for d in row]})
    per_query = evaluate(run, dataset.qrels, ["ndcg@10"]).per_query
    return float(per_query.filter(pl.col("measure") == "ndcg@10")["value"].mean())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N or mps")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--texts", type=int, default=4096, help="texts per round (the sample's, cycled)")
    parser.add_argument("--batch-size", type=int, default=None, help="default: the pipeline's batch on the device")
    parser.add_argument("--model", default=None, help="a local sentence-transformers folder; default: all-MiniLM-L6-v2")
    parser.add_argument("--onnx-cache", type=Path, default=None)
    args = parser.parse_args()
    missing = missing_device(args.device)
    if args.device == "cpu" or missing is not None:
        why = missing.why if missing else "this benchmark measures a GPU"
        print(f"bench_gpu: --device {args.device}: {why}; run it on a host with the device "
              "(benchmarks/bench_onnx.py measures the CPU)", file=sys.stderr)
        return 2

    dataset = load_dataset(SAMPLE, "jsonl", "all")
    documents = [document_text(t, x) for t, x in dataset.corpus.select("title", "text").iter_rows()]
    queries = dataset.queries["text"].to_list()
    pool = documents + queries
    timed = [pool[i % len(pool)] for i in range(args.texts)]
    common = {"device": args.device, **({"model": args.model} if args.model else {})}
    if args.onnx_cache:
        common["onnx_cache"] = str(args.onnx_cache)
    try:
        torch_provider = create_provider("sentence-transformers", {**common, "backend": "torch"})
    except DeviceUnavailable as error:  # onnxruntime-gpu with a torch built without CUDA
        print(f"bench_gpu: {error}", file=sys.stderr)
        return 2
    batch, how = ((args.batch_size, f"{args.batch_size} texts per call (--batch-size)") if args.batch_size
                  else torch_provider.device_batch_size())

    import torch
    from sentence_transformers import SentenceTransformer

    fp32 = torch_provider._model  # the pipeline's own model object, on the device
    fp16 = SentenceTransformer(str(torch_provider.path), device=args.device, local_files_only=True).half()
    fp16.max_seq_length = fp32.max_seq_length

    def torch_encoder(model):
        return lambda texts: model.encode(texts, batch_size=batch, convert_to_numpy=True, show_progress_bar=False)

    engines = {"torch-fp32": torch_encoder(fp32), "torch-fp16": torch_encoder(fp16)}
    try:
        onnx_provider = create_provider("sentence-transformers", {**common, "backend": "onnx", "batch_size": batch})
        onnx_provider.encode(["warm-up"], "document")  # the export (once per machine) and the session
        engines["onnx-cuda"] = lambda texts: onnx_provider.encode(texts, "document")
    except DeviceUnavailable as error:
        print(f"onnx: skipped ({error.why})")
    name = Path(args.model).name if args.model else "all-MiniLM-L6-v2"
    label = torch.cuda.get_device_name(torch.device(args.device)) if args.device.startswith("cuda") else args.device
    print(f"{name} on {args.device} ({label}); {how}; {len(timed)} texts per round; load average {os.getloadavg()}")

    for encode in engines.values():
        encode(timed[:batch])  # warm-up: kernels, allocator, first-call costs
    rates: dict[str, list[float]] = {engine: [] for engine in engines}
    for round_ in range(args.rounds):
        for engine in (list(engines) if round_ % 2 == 0 else list(reversed(engines))):
            started = time.perf_counter()
            engines[engine](timed)  # returns numpy arrays: the device has finished
            rates[engine].append(len(timed) / (time.perf_counter() - started))

    reference = {role: normalized(engines["torch-fp32"](texts)) for role, texts in (("docs", documents), ("queries", queries))}
    base = ndcg10(reference["docs"], reference["queries"], dataset)
    print(f"{'engine':<11} {'texts/s':>9}  {'min cosine to fp32':>18}  {'nDCG@10':>8}  {'delta':>8}")
    for engine, encode in engines.items():
        vectors = {role: normalized(encode(texts)) for role, texts in (("docs", documents), ("queries", queries))}
        cosine = min(float(np.min(np.sum(vectors[role] * reference[role], axis=1))) for role in vectors)
        score = ndcg10(vectors["docs"], vectors["queries"], dataset)
        print(f"{engine:<11} {statistics.median(rates[engine]):>9.1f}  {cosine:>18.6f}  {score:>8.4f}  {score - base:>+8.4f}")
    print(f"texts/s per round: { {engine: [round(r, 1) for r in values] for engine, values in rates.items()} }; "
          f"load average after {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
