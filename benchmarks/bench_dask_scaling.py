"""Embedding throughput of one latency-bound HTTP provider on 1, 2 and 4 Dask workers, side by side.

    python benchmarks/bench_dask_scaling.py [--workers 1 2 4] [--latency 0.5] [--concurrency 4] [--batch 32]
                                            [--shards 8] [--texts N] [--dataset DIR]

A local OpenAI-compatible server on 127.0.0.1 (support/latency_server.py, its own process) answers
every request after a fixed sleep, like a hosted API: a worker's throughput is bounded by
concurrency x batch / latency, not by CPU, so on 2 cores the workers still add up. For each
worker count, the benchmark flow runs up to the embed stage on a fresh local Dask cluster
(one thread per worker) into a fresh store (cold cache), with the same provider settings
(per-worker concurrency fixed). Throughput = documents embedded / the document set's embed
seconds (plan to finish; the cluster's start-up is not in it). Prints each count's texts/s,
its ratio to 1 worker (targets: >= 1.8 at 2, >= 3.2 at 4) and the server's most requests
in flight (at most workers x concurrency). Corpus: NPL (11,429 documents) from the shared data
when present, else the sample corpus repeated with numbered variants up to --texts.
The machine is shared and noisy: compare the ratios of one run, not runs.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import retbench.flows  # noqa: E402,F401  (Prefect environment defaults)

SHARED = Path(os.environ.get("RETBENCH_SHARED_DATA", ROOT.parent / "shared" / "data"))
if not SHARED.exists():
    SHARED = Path("/work/shared/data")

SPEC = """
name: scaling
dataset: {{path: "{data}", format: {format}, split: all}}
chunking: {{strategy: none}}
providers:
  - name: api
    kind: openai-compatible
    batch_size: {batch}
    shards: {shards}
    options: {{base_url: "{url}", model: latency-bound, encoding_format: base64, concurrency: {concurrency}}}
indexes: {{ivf: null}}
output_dir: "{out}"
store_dir: "{store}"
history: {{enabled: false}}
"""


def synthetic_corpus(folder: Path, texts: int) -> Path:
    rows = [json.loads(line) for line in (ROOT / "data" / "sample" / "corpus.jsonl").read_text().splitlines() if line.strip()]
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "corpus.jsonl", "w") as corpus:
        for i in range(texts):
            row = rows[i % len(rows)]
            corpus.write(json.dumps({"_id": f"d{i}", "title": row.get("title", ""), "text": f"{row['text']} (copy {i})"}) + "\n")
    shutil.copy(ROOT / "data" / "sample" / "queries.jsonl", folder / "queries.jsonl")
    shutil.copy(ROOT / "data" / "sample" / "qrels.jsonl", folder / "qrels.jsonl")
    return folder


def prepared_store(base: Path, data: Path, fmt: str, options) -> Path:
    """The dataset loaded and chunked once (plain runner): each timed run starts from a copy
    without embeddings, so it spends its time embedding, not parsing the collection again."""
    from retbench.tasks.config.spec import load_spec
    from retbench.tasks.pipeline import Selection, run_pipeline

    folder = base / "prepared"
    folder.mkdir(parents=True)
    spec = folder / "spec.yaml"
    spec.write_text(SPEC.format(data=data, format=fmt, batch=options.batch, shards=options.shards, url="http://127.0.0.1:9/v1",
                                concurrency=options.concurrency, out=folder / "out", store=folder / "store"))
    run_pipeline(load_spec(spec), Selection(stage="chunk"))
    return folder / "store"


def run(workers: int, base: Path, data: Path, fmt: str, options, store: Path) -> dict:
    from prefect_dask import DaskTaskRunner

    from retbench.flows.benchmark import benchmark
    from retbench.support.latency_server import latency_server, stats

    folder = base / f"workers-{workers}"
    shutil.copytree(store, folder / "store")  # cold embedding cache: no embeddings/ or sets/ yet
    with latency_server(options.latency, dim=options.dim) as url:
        spec = folder / "spec.yaml"
        spec.write_text(SPEC.format(data=data, format=fmt, batch=options.batch, shards=options.shards, url=url,
                                    concurrency=options.concurrency, out=folder / "out", store=folder / "store"))
        runner = DaskTaskRunner(cluster_kwargs={"n_workers": workers, "threads_per_worker": 1, "processes": True})
        started = time.perf_counter()
        benchmark.with_options(task_runner=runner)(str(spec), stage="embed")
        wall = time.perf_counter() - started
        served = stats(url)
    manifest = json.loads((folder / "out" / "manifest.json").read_text())
    documents = next(e for e in manifest["embedding"] if e["role"] == "document")
    return {"workers": workers, "texts": documents["embedded"], "seconds": documents["seconds"], "wall": wall,
            "texts_per_second": documents["embedded"] / documents["seconds"], "max_in_flight": served["max_in_flight"],
            "requests": served["requests"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--latency", type=float, default=0.5, help="seconds the server sleeps per request")
    parser.add_argument("--concurrency", type=int, default=4, help="requests in flight per worker")
    parser.add_argument("--batch", type=int, default=32, help="texts per request")
    parser.add_argument("--shards", type=int, default=8, help="part task runs per set (the spec default)")
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--texts", type=int, default=8000, help="synthetic corpus size when NPL is absent")
    parser.add_argument("--dataset", type=Path, default=SHARED / "glasgow" / "npl")
    options = parser.parse_args()

    if options.dataset.exists():
        data, fmt = options.dataset, "glasgow"
    else:
        data, fmt = synthetic_corpus(Path(tempfile.mkdtemp(prefix="retbench-scaling-data-")), options.texts), "jsonl"
    base = Path(tempfile.mkdtemp(prefix="retbench-scaling-"))
    print(f"corpus {data}; latency {options.latency}s per request, {options.batch} texts per request, "
          f"concurrency {options.concurrency} per worker, {options.shards} parts per set; load {os.getloadavg()[0]:.1f}")
    results = []
    try:
        store = prepared_store(base, data, fmt, options)
        for workers in options.workers:
            results.append(run(workers, base, data, fmt, options, store))
            r = results[-1]
            print(f"  {workers} worker(s): {r['texts']} documents in {r['seconds']:.1f}s = {r['texts_per_second']:.0f} texts/s "
                  f"(flow wall {r['wall']:.1f}s; {r['requests']} requests, at most {r['max_in_flight']} in flight)", flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    one = next((r for r in results if r["workers"] == 1), results[0])
    ceiling = options.concurrency * options.batch / options.latency
    print(f"\nthroughput vs {one['workers']} worker(s), side by side (load {os.getloadavg()[0]:.1f}; "
          f"latency-bound ceiling {ceiling:.0f} texts/s per worker):")
    targets = {2: 1.8, 4: 3.2}
    for r in results:
        ratio = r["texts_per_second"] / one["texts_per_second"]
        target = f" (target >= {targets[r['workers']]}: {'met' if ratio >= targets[r['workers']] else 'NOT met'})" \
            if r["workers"] in targets else ""
        print(f"  {r['workers']} worker(s): {ratio:.3f}x{target}")


if __name__ == "__main__":
    main()
