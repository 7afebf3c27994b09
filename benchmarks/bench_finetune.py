"""Base all-MiniLM-L6-v2 vs the same model fine-tuned on dev-split hard negatives, on the shipped
sample or XQuAD: nDCG@10 and Recall@10 on dev and on test with paired intervals, by language pair
and category, training time (wall and CPU) and peak RSS.

    python benchmarks/bench_finetune.py [--store-dir DIR] [--epochs 1] [--batch-size 16] [--max-seq-length N]
        [--max-per-query N] [--max-triples N] [--lr X] [--threads N] [--xquad en-en,hi-hi [--dev-fraction 0.5]]

Whole documents (title + text) are embedded and searched exactly; the base model's dev run is
mined for hard negatives (tasks/analysis/hard_negatives.py), the model is fine-tuned once per
inputs (tasks/stages/finetune.py; a rerun reuses the stored folder and reports the training
time and peak RSS recorded when it was trained), and both models are scored on all queries.
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

import faiss
import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from retbench.tasks.analysis.finetune_verdict import finetune_verdict  # noqa: E402
from retbench.tasks.analysis.hard_negatives import hard_negative_pairs  # noqa: E402
from retbench.tasks.analysis.metrics import evaluate  # noqa: E402
from retbench.tasks.providers import create_provider  # noqa: E402
from retbench.tasks.providers.finetuned import FinetunedOptions  # noqa: E402
from retbench.tasks.datasets.document_text import document_text  # noqa: E402
from retbench.tasks.stages.dataset import load_dataset  # noqa: E402
from retbench.tasks.stages.embed import embed_texts, load_vectors  # noqa: E402
from retbench.tasks.stages.finetune import drop_held_out_texts, finetune_provider  # noqa: E402
from retbench.tasks.stages.finetune_step import capped  # noqa: E402
from retbench.tasks.stages.maxp import search_documents  # noqa: E402

MEASURES = ["ndcg@10", "recall@10"]
SHARED = Path(os.environ.get("RETBENCH_SHARED_DATA", "/work/shared/data"))


def document_run(provider, name: str, dataset, store: Path, depth: int = 100) -> pl.DataFrame:
    texts = [document_text(t, x) for t, x in dataset.corpus.select("title", "text").iter_rows()]
    docs = embed_texts(provider, name, dataset.corpus["doc_id"].to_list(), texts, "document", store)
    queries = embed_texts(provider, name, dataset.queries["query_id"].to_list(), dataset.queries["text"].to_list(), "query", store)
    index = faiss.IndexFlatIP(docs.dim)
    index.add(load_vectors(docs)[1])
    hits = search_documents(index, load_vectors(queries)[1], np.arange(docs.count), depth)
    return pl.DataFrame({
        "query_id": dataset.queries["query_id"].gather(hits["query"]),
        "doc_id": dataset.corpus["doc_id"].gather(hits["chunk"]),
        "score": hits["score"],
    }).with_columns(provider=pl.lit(name), index=pl.lit("flat"), nprobe=pl.lit(None, dtype=pl.Int64))


def xquad(pairs: list[str], dev_fraction: float):
    """XQuAD's language pairs as one collection: documents of every language, each question
    judged against its paragraph in the pair's document language; dev/test by a stable hash of
    the XQuAD question id (tasks/datasets/xquad.py), so a question and its translation share a split."""
    from retbench.tasks.datasets.model import Dataset

    corpus, queries, qrels = [], [], []
    for pair in pairs:
        query_language, doc_language = pair.split("-")
        part = load_dataset(SHARED / "xquad", "xquad", "all", query_language=query_language,
                            doc_language=doc_language, dev_fraction=dev_fraction)
        doc_id = pl.concat_str(pl.lit(f"{doc_language}:"), "doc_id")
        query_id = pl.concat_str(pl.lit(f"{pair}:"), "query_id")
        corpus.append(part.corpus.with_columns(doc_id=doc_id))
        queries.append(part.queries.with_columns(query_id=query_id))
        qrels.append(part.qrels.with_columns(doc_id=doc_id, query_id=query_id))
    return Dataset(f"xquad-{'+'.join(pairs)}", pl.concat(corpus).unique("doc_id", keep="first", maintain_order=True),
                   pl.concat(queries), pl.concat(qrels))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store-dir", type=Path, default=Path("/tmp/retbench-finetune-store"))
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--max-seq-length", type=int, default=None, help="default: the provider's")
    parser.add_argument("--max-per-query", type=int, default=None, help="hard negatives per dev query; default: the provider's")
    parser.add_argument("--lr", type=float, default=None)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own choice)")
    parser.add_argument("--max-triples", type=int, default=None, help="default: the provider's")
    parser.add_argument("--force", action="store_true", help="train again even when the store holds the model")
    parser.add_argument("--xquad", default=None, metavar="PAIRS",
                        help="XQuAD instead of the sample: query-document language pairs, e.g. en-en,hi-hi")
    parser.add_argument("--dev-fraction", type=float, default=0.5, help="XQuAD questions put in dev (by id hash)")
    args = parser.parse_args()

    dataset = (xquad(args.xquad.split(","), args.dev_fraction) if args.xquad
               else load_dataset(ROOT / "data" / "sample", "jsonl", "all"))
    print("queries per split:", dict(dataset.queries.group_by("split").len().iter_rows()))
    base = create_provider("sentence-transformers")
    base_run = document_run(base, "minilm", dataset, args.store_dir)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    tuning = {k: v for k, v in (("max_seq_length", args.max_seq_length), ("max_per_query", args.max_per_query),
                                ("lr", args.lr), ("max_triples", args.max_triples)) if v is not None}
    chosen = FinetunedOptions(base="minilm", **tuning)
    mined = hard_negative_pairs(base_run, dataset, "minilm", max_per_query=chosen.max_per_query)
    kept, dropped = drop_held_out_texts(mined, dataset.queries)
    pairs = capped(kept, chosen)
    print(f"mined {mined.height} triples from {mined['query_id'].n_unique()} dev queries ({dropped} dropped: the text "
          f"of a test query); training on {pairs.height} "
          f"(options {chosen.model_dump(exclude={'model'})})")
    options = {"base": "minilm", "epochs": args.epochs, "batch_size": args.batch_size, **tuning}
    started = time.perf_counter()
    tuned = finetune_provider(base, "minilm", pairs, dataset.queries, options, args.store_dir, force=args.force,
                              progress=print)
    print(f"fine-tune call: {time.perf_counter() - started:.1f} s ({'trained now' if tuned.computed else 'reused'})")
    tuned_run = document_run(tuned.provider(options), "minilm-ft", dataset, args.store_dir)

    per_query = pl.concat([
        evaluate(run.drop("provider", "index", "nprobe"), dataset.qrels, MEASURES).per_query.with_columns(
            provider=pl.lit(name), index=pl.lit("flat"), nprobe=pl.lit(None, dtype=pl.Int64))
        for name, run in (("minilm", base_run), ("minilm-ft", tuned_run))
    ], how="diagonal_relaxed")
    verdict = finetune_verdict(per_query, dataset.queries, ("minilm", "flat", None), ("minilm-ft", "flat", None),
                               dataset.qrels, dataset.corpus, resamples=args.resamples)
    pl.Config.set_tbl_rows(200)
    pl.Config.set_tbl_cols(20)
    pl.Config.set_tbl_width_chars(200)
    print(tuned.table())
    print(verdict.filter(pl.col("slice_kind") == "all"))
    print(verdict.filter(pl.col("slice_kind") != "all"))
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; torch threads {__import__('torch').get_num_threads()}")
    print(f"training: {tuned.train_seconds:.1f} s wall, {tuned.train_cpu_seconds or float('nan'):.1f} s CPU, peak RSS of the training process {tuned.peak_rss_mb:.0f} MB; "
          f"this process peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
