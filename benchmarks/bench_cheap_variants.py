"""Cheaper variants of a model on Cranfield: truncated dimensions (384/256/128), scalar-quantised
(fp16, 8-bit) and binary (+ float re-scoring) indexes: bytes per vector, index bytes and the
nDCG@10 and Recall@10 changes with paired bootstrap intervals.

    python benchmarks/bench_cheap_variants.py [--models minilm e5-small] [--store-dir DIR]

Whole documents (title + text) are embedded once per model through the cache. A truncated set is
the cached full vectors cut to their first N components and re-normalised (tasks/stages/vectors.py
`truncated`, the same operation the `dimensions:` option applies before caching), stored as its
own embedding set. Each set goes through the ANN sweep (tasks/stages/sweep.py) with only the
sq and binary families: `delta_vs_own_flat` is the sweep's delta against exact search on the same
vectors; `delta_vs_full` compares the truncated set's exact search with the full model's.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import faiss
import numpy as np
import polars as pl
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from retbench.tasks.analysis.breakdown import paired_comparison  # noqa: E402
from retbench.tasks.analysis.metrics import evaluate  # noqa: E402
from retbench.tasks.providers import create_provider  # noqa: E402
from retbench.tasks.datasets.document_text import document_text  # noqa: E402
from retbench.tasks.stages.dataset import load_dataset  # noqa: E402
from retbench.tasks.stages.embed import embed_texts, load_vectors  # noqa: E402
from retbench.tasks.stages.maxp import search_documents  # noqa: E402
from retbench.tasks.stages.sweep import SweepSpec, run_sweep, write_embedding_set  # noqa: E402
from retbench.tasks.stages.vectors import truncated  # noqa: E402

CRANFIELD = Path("/work/shared/data/cranfield")
MODELS = {"minilm": "sentence-transformers", "e5-small": "e5-multilingual"}


def flat_per_query(docs: np.ndarray, queries: np.ndarray, doc_ids: pl.Series, query_ids: pl.Series, qrels, label) -> pl.DataFrame:
    index = faiss.IndexFlatIP(docs.shape[1])
    index.add(docs)
    hits = search_documents(index, queries, np.arange(len(docs)), 100)
    run = pl.DataFrame({"query_id": query_ids.gather(hits["query"]), "doc_id": doc_ids.gather(hits["chunk"]), "score": hits["score"]})
    return evaluate(run, qrels, ["ndcg@10", "recall@10"]).per_query.with_columns(
        provider=pl.lit(label), index=pl.lit("flat"), nprobe=pl.lit(None, dtype=pl.Int64))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["minilm"], choices=list(MODELS))
    parser.add_argument("--dims", nargs="+", type=int, default=[384, 256, 128])
    parser.add_argument("--store-dir", type=Path, default=Path("/tmp/retbench-cheap-store"))
    parser.add_argument("--csv", type=Path, default=None, help="also write the table here")
    args = parser.parse_args()
    store, out = args.store_dir, args.store_dir / "out"
    dataset = load_dataset(CRANFIELD, "cranfield", "all")
    doc_ids, query_ids = dataset.corpus["doc_id"], dataset.queries["query_id"]
    texts = [document_text(t, x) for t, x in dataset.corpus.select("title", "text").iter_rows()]
    chunks_path = store / "chunks" / "cranfield-documents.parquet"
    chunks_path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pl.DataFrame({"chunk_id": doc_ids, "doc_id": doc_ids}).to_arrow(), chunks_path)
    spec = SweepSpec(ivf=None, hnsw=None, ivfpq=None, binary={"rescore": [0, 100]}, k=10, depth=100, repeats=1,
                     latency_queries=50, bootstrap=1000, project_vectors=1_000_000)
    rows = []
    for model in args.models:
        provider = create_provider(MODELS[model])
        full_docs = embed_texts(provider, model, doc_ids.to_list(), texts, "document", store, progress=print)
        full_queries = embed_texts(provider, model, query_ids.to_list(), dataset.queries["text"].to_list(), "query", store)
        docs, queries = load_vectors(full_docs)[1], load_vectors(full_queries)[1]
        full_pq = flat_per_query(docs, queries, doc_ids, query_ids, dataset.qrels, f"{model}-{docs.shape[1]}")
        for dims in args.dims:
            label = f"{model}-{dims}"
            if dims == docs.shape[1]:
                doc_set, query_set = full_docs, full_queries
                short_docs, short_queries = docs, queries
            else:
                short_docs, short_queries = truncated(docs, dims), truncated(queries, dims)
                fingerprint = {"kind": "truncated-benchmark", "of": full_docs.key, "dimensions": dims}
                doc_set = write_embedding_set(store, label, fingerprint, "document", doc_ids.to_list(), short_docs)
                query_set = write_embedding_set(store, label, {**fingerprint, "of": full_queries.key}, "query",
                                                query_ids.to_list(), short_queries)
            own = flat_per_query(short_docs, short_queries, doc_ids, query_ids, dataset.qrels, label)
            compared = paired_comparison(pl.concat([own, full_pq]) if label != full_pq["provider"][0] else full_pq,
                                         (label, "flat", None), (full_pq["provider"][0], "flat", None))
            versus = {r["measure"]: r for r in compared.iter_rows(named=True)}
            result = run_sweep(doc_set, query_set, chunks_path, dataset.qrels, spec, store, out)
            table = pl.read_parquet(result.path)
            for r in table.iter_rows(named=True):
                rows.append({
                    "model": model, "dims": dims, "index": r["index_kind"],
                    "params": ", ".join(f"{k}={v}" for k, v in {**__import__("json").loads(r["build_params"]),
                                                                **__import__("json").loads(r["query_params"])}.items()),
                    "bytes_per_vector": round(r["bytes_per_vector"], 1), "rescore_bytes": r["rescore_bytes_per_vector"],
                    "index_bytes": r["index_bytes"], "projected_1M_MB": round(r["projected_index_bytes"] / 1e6, 1),
                    "neighbour_recall@10": round(r["neighbour_recall@10"], 3),
                })
                for measure in ("ndcg@10", "recall@10"):
                    rows[-1] |= {
                        measure: round(r[f"flat_{measure}"] + r[f"delta_{measure}"], 4),
                        f"{measure}_vs_own_flat": round(r[f"delta_{measure}"], 4),
                        f"{measure}_own_ci": f"[{r[f'delta_{measure}_ci_low']:+.4f}, {r[f'delta_{measure}_ci_high']:+.4f}]",
                        # the flat search of this dimension against the full model's; an index's
                        # own delta adds to it (means add; the interval is of the flat part only)
                        f"{measure}_flat_vs_full": round(versus[measure]["diff"], 4),
                        f"{measure}_full_ci": f"[{versus[measure]['ci_low']:+.4f}, {versus[measure]['ci_high']:+.4f}]",
                    }
    pl.Config.set_tbl_rows(100)
    pl.Config.set_tbl_cols(40)
    pl.Config.set_tbl_width_chars(400)
    table = pl.DataFrame(rows)
    print(table)
    if args.csv:
        table.write_csv(args.csv)
        print(f"written {args.csv}")


if __name__ == "__main__":
    main()
