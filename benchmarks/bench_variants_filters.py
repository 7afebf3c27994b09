"""The cheapest interventions on real collections with MiniLM: chunking variants and query variants
against their baseline (nDCG@10 and Recall@10 deltas, 95% paired bootstrap intervals), the chunk
texts embedded once across chunking variants, and what a metadata filter costs IVF and HNSW.

    python benchmarks/bench_variants_filters.py [--datasets sample cranfield xquad-en xquad-hi] [--data /work/shared/data]
                                                [--store /tmp/retbench-variants] [--skip-filters] [--more-chunkings]

`sample` (the shipped sample, not run by default) adds its Hinglish rewrite table as a query
variant and the pipeline's own `filter_sweep` (filtered IVF and HNSW on its MiniLM vectors).
Each collection is one pipeline run (tasks/pipeline.py `run_pipeline`, no Prefect) of a spec with
chunking variants, query variants, the MiniLM provider and exact search; the deltas are the run's
`variant_comparisons` table. "Embedded once": chunk texts that two or more chunking variants
share, counted from the chunk files (sum of chunks minus distinct texts), beside what the run
embedded per set (a rerun with the store kept embeds 0).

Filters: Cranfield has no metadata, so a synthetic field is assigned by hashing the doc ids
(bucket = crc32(doc_id) mod 1000; a filter of selectivity s allows bucket < 1000 s). On the MiniLM
vectors of the baseline chunks, filtered IVF (each nprobe) and filtered HNSW (each efSearch),
both restricted inside FAISS by an IDSelector, are compared with filtered exact search:
neighbour recall@10 with a bootstrap interval (tasks/stages/filtered_ann.py). Quality only, no
timings, so the numbers do not depend on the machine's load.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import zlib
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from retbench.tasks.config.spec import load_spec  # noqa: E402
from retbench.tasks.pipeline import run_pipeline  # noqa: E402

INSTRUCTION = "Represent this sentence for searching relevant passages: "
CHUNKINGS = {
    # Cranfield's abstracts come in many short paragraphs: para120 makes 4,076 chunks of 1,398
    # documents; para200 (3,237) repeats ~1,980 texts of para120/whole, fixed200 (1,923) ~940. sent60 (5,700
    # chunks) and fixed80 (4,331) only with --more-chunkings: MiniLM embeds ~3 texts/s on this
    # shared machine.
    "cranfield": [
        {"name": "whole", "strategy": "none"},
        {"name": "para120", "strategy": "paragraph", "max_words": 120},
        {"name": "para200", "strategy": "paragraph", "max_words": 200},
        {"name": "fixed200", "strategy": "fixed", "size": 200, "overlap": 40},
    ],
    "cranfield-more": [
        {"name": "sent60", "strategy": "sentence", "max_words": 60},
        {"name": "fixed80", "strategy": "fixed", "size": 80, "overlap": 20},
    ],
    "sample": [
        {"name": "para120", "strategy": "paragraph", "max_words": 120},  # as specs/sample.yaml
        {"name": "para200", "strategy": "paragraph", "max_words": 200},
        {"name": "sent60", "strategy": "sentence", "max_words": 60},
        {"name": "fixed80", "strategy": "fixed", "size": 80, "overlap": 20},
    ],
    "xquad": [
        {"name": "whole", "strategy": "none"},
        {"name": "sent60", "strategy": "sentence", "max_words": 60},
        {"name": "fixed40", "strategy": "fixed", "size": 40, "overlap": 10},
    ],
}
QUERY_VARIANTS = [
    {"name": "norm", "unicode": "nfkc", "whitespace": True, "lowercase": True},
    {"name": "instruction", "prefix": INSTRUCTION},
]


def spec_for(name: str, data: Path, out: Path, store: Path, more: bool = False) -> dict:
    variants = QUERY_VARIANTS
    extra = {}
    if name == "sample":  # the shipped sample, with its Hinglish rewrites and the filter sweep on its vectors
        dataset = {"path": str(ROOT / "data" / "sample"), "format": "jsonl", "split": "all"}
        chunking = CHUNKINGS["sample"]
        variants = QUERY_VARIANTS + [{"name": "rewrites", "rewrite_file": str(ROOT / "data" / "sample" / "rewrites.txt")}]
        extra = {"indexes": {"flat": True, "ivf": {"nprobe": [1, 4, 16]}}, "filter_sweep": {}}
    elif name == "cranfield":
        dataset = {"path": str(data / "cranfield"), "format": "cranfield", "split": "all"}
        chunking = CHUNKINGS["cranfield"] + (CHUNKINGS["cranfield-more"] if more else [])
    else:
        language = name.split("-")[1]
        dataset = {"path": str(data / "xquad"), "format": "xquad", "split": "all",
                   "options": {"query_language": language, "doc_language": language}}
        chunking = CHUNKINGS["xquad"]
    return {
        "name": f"variants-{name}", "dataset": dataset, "chunking": chunking,
        "providers": [{"name": "minilm", "kind": "sentence-transformers"}],
        "queries": {"variants": variants},
        "indexes": {"flat": True, "ivf": None}, "k": [10], "depth": 100,
        "statistics": {"buried_answers": False}, "history": {"enabled": False},
        "output_dir": str(out / name), "store_dir": str(store), **extra,
    }


def shared_texts(store: Path, manifest: dict) -> tuple[int, int, int]:
    """(chunks over all chunking variants, sum of each variant's distinct texts, distinct texts over
    all variants): the last two differ by the texts a variant shares with an earlier one."""
    files = [store / "chunks" / v["file"] for v in manifest["variants"]["chunking"].values()]
    texts = [pl.read_parquet(f, columns=["text"])["text"] for f in files]
    return sum(t.len() for t in texts), sum(t.n_unique() for t in texts), pl.concat(texts).n_unique()


def run_collection(name: str, args) -> object:
    path = args.store / "specs" / f"{name}.json"  # JSON is YAML: load_spec reads it
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(spec_for(name, args.data, args.store / "out", args.store, args.more_chunkings)))
    result = run_pipeline(load_spec(path))
    table = pl.read_parquet(result.tables["variant_comparisons"])
    total, per_variant, distinct = shared_texts(args.store, result.manifest)
    print(f"\n== {name}: MiniLM, exact search, variant minus baseline (paired bootstrap 95% interval)")
    rows = (table.filter(pl.col("slice_kind") != "category")
            .select("setting", "variant_kind", "slice", "measure", "n", pl.col("mean_baseline").round(4).alias("baseline"),
                    pl.col("mean_variant").round(4).alias("variant"), pl.col("diff").round(4),
                    pl.col("ci_low").round(4), pl.col("ci_high").round(4), pl.col("p_value").round(4)))
    print(rows)
    print(f"chunks over {len(result.manifest['variants']['chunking'])} chunking variants: {total} ({total - per_variant} "
          f"repeat a text of their own variant); distinct texts per variant, summed: {per_variant}; distinct over all "
          f"variants: {distinct}; texts shared across variants, embedded once: {per_variant - distinct}")
    if "filtered_ann" in result.tables:
        print(f"\n== {name}: filter_sweep on the run's MiniLM vectors: neighbour recall@10 vs filtered exact search")
        print(pl.read_parquet(result.tables["filtered_ann"]).select(
            "filter_kind", "selectivity", "allowed", "index", "params", pl.col("neighbour_recall").round(3),
            pl.col("ci_low").round(3), pl.col("ci_high").round(3), pl.col("unfiltered_neighbour_recall").round(3).alias("unfiltered"),
            "starved_queries"))
    print("this run, per set: " + ", ".join(f"{e.provider}/{e.role} {e.embedded} embedded + {e.from_cache} cached"
                                             for e in result.embeddings))
    return result


def hashed_filters(doc_of_row: list[str], selectivities=(0.5, 0.1, 0.01)) -> list[tuple[str, float, np.ndarray]]:
    buckets = np.array([zlib.crc32(d.encode()) % 1000 for d in doc_of_row])
    return [("hashed doc id", s, np.flatnonzero(buckets < round(1000 * s))) for s in selectivities]


def filter_cost(result, store: Path, nprobes: list[int], efs: list[int]) -> None:
    import faiss

    from retbench.tasks.stages.embed import load_vectors
    from retbench.tasks.stages.filtered_ann import filtered_fidelity
    from retbench.tasks.stages.index import default_nlist

    doc_set = next(e for e in result.embeddings if e.provider == "minilm" and e.role == "document")
    query_set = next(e for e in result.embeddings if e.provider == "minilm" and e.role == "query")
    chunk_ids, documents = load_vectors(doc_set)
    _, queries = load_vectors(query_set)
    baseline = next(iter(result.manifest["variants"]["chunking"].values()))["file"]
    chunks = pl.read_parquet(store / "chunks" / baseline, columns=["chunk_id", "doc_id"])
    doc_of = dict(zip(chunks["chunk_id"], chunks["doc_id"]))
    filters = hashed_filters([doc_of[c] for c in chunk_ids])
    nlist = default_nlist(len(documents))
    ivf = faiss.IndexIVFFlat(faiss.IndexFlatIP(documents.shape[1]), documents.shape[1], nlist, faiss.METRIC_INNER_PRODUCT)
    ivf.cp.seed = 0
    ivf.train(documents)
    ivf.add(documents)
    hnsw = faiss.IndexHNSWFlat(documents.shape[1], 32, faiss.METRIC_INNER_PRODUCT)
    hnsw.hnsw.efConstruction = 40
    hnsw.add(documents)
    table = filtered_fidelity(documents, queries, [(f"ivf nlist={nlist}", ivf, [{"nprobe": n} for n in nprobes]),
                                                   ("hnsw M=32 efc=40", hnsw, [{"efSearch": e} for e in efs])],
                              k=10, filters=filters)
    print(f"\n== cranfield: what a metadata filter costs (MiniLM, {len(documents)} chunk vectors, {len(queries)} queries; "
          "synthetic field crc32(doc_id) mod 1000); neighbour recall@10 vs filtered exact search")
    print(table.select("selectivity", "allowed", "index", "params", pl.col("neighbour_recall").round(3),
                       pl.col("ci_low").round(3), pl.col("ci_high").round(3),
                       pl.col("unfiltered_neighbour_recall").round(3).alias("unfiltered"),
                       pl.col("recall_lost").round(3), "starved_queries"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["cranfield", "xquad-en", "xquad-hi"],
                        choices=["sample", "cranfield", "xquad-en", "xquad-hi"])
    parser.add_argument("--data", type=Path, default=Path("/work/shared/data"))
    parser.add_argument("--store", type=Path, default=Path("/tmp/retbench-variants"))
    parser.add_argument("--nprobe", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--ef", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--skip-filters", action="store_true")
    parser.add_argument("--more-chunkings", action="store_true", help="Cranfield also with sent60 and fixed80")
    parser.add_argument("--quiet", action="store_true", help="no stage progress on stderr")
    args = parser.parse_args()
    if not args.quiet:
        logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(message)s")
        logging.getLogger("retbench").setLevel(logging.INFO)
    pl.Config.set_tbl_rows(200)
    pl.Config.set_tbl_cols(20)
    pl.Config.set_tbl_width_chars(220)
    pl.Config.set_tbl_hide_dataframe_shape(True)
    results = {name: run_collection(name, args) for name in args.datasets}
    if "cranfield" in results and not args.skip_filters:
        filter_cost(results["cranfield"], args.store, args.nprobe, args.ef)


if __name__ == "__main__":
    main()
