"""Cross-lingual check on XQuAD: nDCG@10 and recall@10 by language pair, with 95% bootstrap CIs.

    python benchmarks/bench_xquad_languages.py [--limit N] [--store-dir DIR] [--resamples 1000]

Builds the four pairings en->en, hi->hi, hi->en and en->hi from ../shared/data/xquad (each
question's one relevant document is its paragraph in the document language; every pairing
searches the 240 paragraphs of its document language), embeds them with all-MiniLM-L6-v2
(`sentence-transformers`) and multilingual-e5-small (`e5-multilingual`) through the embedding
cache (a rerun embeds nothing), searches exactly, scores with retbench.tasks.analysis.metrics and prints the
breakdown table's language-pair slices and paired e5 - MiniLM comparisons per pair.

Published MTEB XQuADRetrieval nDCG@10 for comparison: MiniLM en 0.944, hi 0.048; e5-small hi 0.954.
An English-only model must collapse wherever Hindi is involved; the multilingual one must not.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from retbench.tasks.analysis.breakdown import breakdown_table, paired_comparison  # noqa: E402
from retbench.tasks.datasets.document_text import document_text  # noqa: E402
from retbench.tasks.stages.dataset import load_dataset  # noqa: E402
from retbench.tasks.stages.embed import embed_texts, load_vectors  # noqa: E402
from retbench.tasks.providers import create_provider  # noqa: E402
from retbench.tasks.analysis.runs import RUN_SCHEMA, trec_order  # noqa: E402
from retbench.tasks.analysis.score import score_runs  # noqa: E402

XQUAD = ROOT.parent / "shared" / "data" / "xquad"
PAIRINGS = (("en", "en"), ("hi", "hi"), ("hi", "en"), ("en", "hi"))
MODELS = {"minilm": "sentence-transformers", "e5-small": "e5-multilingual"}
MEASURES = ["ndcg@10", "recall@10", "mrr@10"]
PUBLISHED = {("minilm", "en->en"): 0.94357, ("minilm", "hi->hi"): 0.04773, ("e5-small", "hi->hi"): 0.95441}
DEPTH = 100


def build_collection(limit: int | None = None, max_documents: int | None = None
                     ) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """(corpus, queries, qrels) of all four pairings in one collection.

    Ids are prefixed so the pairings can share tables: documents by their language
    ("hi:3-1"), queries by their pairing ("hi->en:<xquad id>-hi"). `limit` keeps the first
    questions of each pairing (file order); `max_documents` the first paragraphs of each
    language plus any paragraph a kept question needs (default: all 240).
    """
    corpora, queries, qrels = {}, [], []
    for q_lang, d_lang in PAIRINGS:
        ds = load_dataset(XQUAD, "xquad", "test", query_language=q_lang, doc_language=d_lang)
        pairing = f"{q_lang}->{d_lang}:"
        chosen = ds.queries.head(limit) if limit else ds.queries
        judged = ds.qrels.join(chosen.select("query_id"), on="query_id", how="semi")
        docs = ds.corpus
        if max_documents:
            docs = docs.filter((pl.int_range(pl.len()) < max_documents) | pl.col("doc_id").is_in(judged["doc_id"].implode()))
        docs = docs.with_columns(doc_id=pl.lit(f"{d_lang}:") + pl.col("doc_id"))
        corpora[d_lang] = docs if d_lang not in corpora else pl.concat([corpora[d_lang], docs]).unique("doc_id", maintain_order=True)
        queries.append(chosen.with_columns(
            source_id=pl.col("query_id"), query_id=pl.lit(pairing) + pl.col("query_id")))
        qrels.append(judged.with_columns(query_id=pl.lit(pairing) + pl.col("query_id"),
                                         doc_id=pl.lit(f"{d_lang}:") + pl.col("doc_id")))
    return pl.concat(corpora.values()), pl.concat(queries), pl.concat(qrels)


def embed(model: str, kind: str, corpus: pl.DataFrame, queries: pl.DataFrame, store: Path,
          log=print) -> dict[tuple[str, str], tuple[list[str], np.ndarray]]:
    """{(role, language): (ids, vectors)}: each language's documents and questions embedded once."""
    provider = create_provider(kind)
    vectors = {}
    for language in ("en", "hi"):
        docs = corpus.filter(pl.col("language") == language)
        texts = [document_text(t, x) for t, x in docs.select("title", "text").iter_rows()]
        questions = queries.filter(pl.col("language") == language).unique("source_id", maintain_order=True)
        for role, ids, role_texts in (("document", docs["doc_id"].to_list(), texts),
                                      ("query", questions["source_id"].to_list(), questions["text"].to_list())):
            started = time.perf_counter()
            result = embed_texts(provider, model, ids, role_texts, role, store, batch_size=32)
            log(f"  {model} {language} {'queries' if role == 'query' else 'documents'}: {result.embedded} embedded, {result.from_cache} from cache "
                f"({time.perf_counter() - started:.1f}s)")
            vectors[(role, language)] = load_vectors(result)
    return vectors


def exact_run(model: str, vectors: dict, queries: pl.DataFrame, depth: int = DEPTH) -> pl.DataFrame:
    """Exact inner-product search (vectors are L2-normalised: cosine) of every pairing, as a run table."""
    parts = []
    for q_lang, d_lang in PAIRINGS:
        chosen = queries.filter(pl.col("query_id").str.starts_with(f"{q_lang}->{d_lang}:"))
        q_ids, q_vec = vectors[("query", q_lang)]
        d_ids, d_vec = vectors[("document", d_lang)]
        row_of = {qid: i for i, qid in enumerate(q_ids)}
        q_rows = np.array([row_of[s] for s in chosen["source_id"].to_list()], dtype=np.int64)
        scores = q_vec[q_rows] @ d_vec.T
        top = min(depth, len(d_ids))
        best = np.argsort(-scores, axis=1, kind="stable")[:, :top]
        doc_ids = np.asarray(d_ids, dtype=object)[best].ravel()
        parts.append(pl.DataFrame({
            "query_id": np.repeat(chosen["query_id"].to_numpy(), top),
            "doc_id": doc_ids.astype(str),
            "chunk_id": [f"{d}#0" for d in doc_ids],
            "score": np.take_along_axis(scores, best, axis=1).ravel().astype(np.float64),
        }))
    run = pl.concat(parts).with_columns(provider=pl.lit(model), index=pl.lit("flat"),
                                        nprobe=pl.lit(None, dtype=pl.Int64), rank=pl.lit(0, dtype=pl.Int64))
    return trec_order(run).select(list(RUN_SCHEMA)).cast(RUN_SCHEMA)


def xquad_language_pairs(store: Path, limit: int | None = None, models: dict[str, str] = MODELS,
                         resamples: int = 1000, seed: int = 0, max_documents: int | None = None,
                         log=print) -> dict[str, pl.DataFrame]:
    """run, per_query, breakdown, its language-pair slices, and per-pair paired comparisons of
    the two models (a = the second model, e5; b = the first, MiniLM)."""
    corpus, queries, qrels = build_collection(limit, max_documents)
    log(f"xquad: {corpus.height} documents, {queries.height} queries ({limit or 'all'} per pairing)")
    runs = []
    for model, kind in models.items():
        vectors = embed(model, kind, corpus, queries, store, log)
        runs.append(exact_run(model, vectors, queries))
    run = pl.concat(runs)
    meta = queries.drop("source_id")
    per_query = score_runs(run, qrels, meta, MEASURES)
    breakdown = breakdown_table(per_query, meta, qrels, corpus, resamples=resamples, seed=seed)
    pairs = breakdown.filter(pl.col("slice_kind") == "language_pair")
    comparisons = []
    if len(models) == 2:
        a, b = ((name, "flat", None) for name in reversed(list(models)))
        with_pair = per_query.with_columns(pair=pl.col("query_id").str.extract(r"^([a-z]+->[a-z]+):"))
        for (pair,), part in with_pair.group_by("pair", maintain_order=True):
            comparisons.append(paired_comparison(part.drop("pair"), a, b, resamples=resamples, seed=seed)
                               .with_columns(pair=pl.lit(pair)))
    return {
        "run": run,
        "per_query": per_query,
        "breakdown": breakdown,
        "language_pairs": pairs,
        "comparisons": pl.concat(comparisons) if comparisons else pl.DataFrame(),
    }


def language_pair_text(pairs: pl.DataFrame) -> str:
    order = {f"{q}->{d}": i for i, (q, d) in enumerate(PAIRINGS)}
    lines = [f"{'model':<10} {'pair':<7} {'n':>5}  {'nDCG@10 [95% CI]':<26} {'recall@10 [95% CI]':<26} published nDCG@10"]
    rows = pairs.filter(pl.col("measure").is_in(["ndcg@10", "recall@10"]))
    for (model, pair), group in sorted(rows.group_by(["provider", "slice"]), key=lambda g: (g[0][0], order.get(g[0][1], 9))):
        cells = {}
        for measure, mean, low, high, n in group.select("measure", "mean", "ci_low", "ci_high", "n").iter_rows():
            cells[measure] = f"{mean:.3f} [{low:.3f}, {high:.3f}]"
        published = PUBLISHED.get((model, pair))
        lines.append(f"{model:<10} {pair:<7} {n:>5}  {cells['ndcg@10']:<26} {cells['recall@10']:<26} "
                     f"{'' if published is None else f'{published:.3f}'}")
    return "\n".join(lines)


def comparison_text(comparisons: pl.DataFrame) -> str:
    if comparisons.height == 0:
        return ""
    a, b = comparisons.row(0, named=True)["a_provider"], comparisons.row(0, named=True)["b_provider"]
    lines = [f"{'pair':<7} {'measure':<10} {'n':>5}  {a:>8} {b:>8} {'diff [95% CI]':<26} p (10,000 sign flips)"]
    for row in comparisons.filter(pl.col("measure").is_in(["ndcg@10", "recall@10"])).iter_rows(named=True):
        lines.append(f"{row['pair']:<7} {row['measure']:<10} {row['n']:>5}  {row['mean_a']:>8.3f} {row['mean_b']:>8.3f} "
                     f"{row['diff']:+.3f} [{row['ci_low']:+.3f}, {row['ci_high']:+.3f}]     {row['p_value']:.4f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, default=None, help="first N questions per pairing (default: all 1,190)")
    parser.add_argument("--max-documents", type=int, default=None, help="first N paragraphs per language (default: all 240)")
    parser.add_argument("--store-dir", type=Path, default=ROOT / ".store", help="embedding cache root (default: .store)")
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if not XQUAD.is_dir():
        print(f"{XQUAD}: missing; expected the XQuAD files of ../shared/data", file=sys.stderr)
        return 2
    started = time.perf_counter()
    result = xquad_language_pairs(args.store_dir, args.limit, resamples=args.resamples, seed=args.seed,
                                  max_documents=args.max_documents)
    print()
    print("language pairs (exact search, 95% percentile bootstrap CIs, seeded)")
    print(language_pair_text(result["language_pairs"]))
    print()
    print("paired comparison per pair (diff = a - b, paired bootstrap CI, randomization test)")
    print(comparison_text(result["comparisons"]))
    print(f"\n{time.perf_counter() - started:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
