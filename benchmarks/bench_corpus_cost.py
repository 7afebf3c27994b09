"""The per-text figures behind the 10M-document costing (docs/results.md), measured on a real collection.

    python benchmarks/bench_corpus_cost.py [--dataset DIR] [--texts 1000] [--index-vectors 20000]

1. Texts/s of the local providers (sentence-transformers MiniLM, e5-multilingual small) in this
   process, encoding `--texts` documents of NPL (glasgow format, shared data) in batches of 64
   after a warm-up batch; tokens/text from each provider's own tokenizer, and chars/text.
2. Bytes per vector of each index kind (flat, IVF, HNSW M=32, IVF-PQ m=48, SQ fp16/8bit, binary)
   at 384 dimensions: the serialized index size over `--index-vectors` unit vectors, divided by
   their count (fixed overheads such as IVF centroids included, so small counts overstate).
The machine is shared and noisy: texts/s moves with the load average, printed alongside.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SHARED = Path(os.environ.get("RETBENCH_SHARED_DATA", ROOT.parent / "shared" / "data"))
if not SHARED.exists():
    SHARED = Path("/work/shared/data")


def documents(dataset: Path, count: int) -> list[str]:
    from retbench.tasks.stages.dataset import load_dataset

    corpus = load_dataset(dataset, "glasgow", "all").corpus
    texts = [f"{t or ''}\n{x}".strip() for t, x in zip(corpus["title"].to_list(), corpus["text"].to_list())]
    step = max(1, len(texts) // count)  # spread over the collection, not its first records
    return texts[::step][:count]


def provider_figures(kind: str, texts: list[str]) -> dict:
    from retbench.tasks.providers import create_provider

    provider = create_provider(kind)
    provider.encode(texts[:64], "document")  # warm-up: model load, first-call allocations
    load = os.getloadavg()[0]
    started = time.perf_counter()
    for start in range(0, len(texts), 64):
        provider.encode(texts[start:start + 64], "document")
    seconds = time.perf_counter() - started
    counts, source = provider.token_counts(texts, "document")
    return {"kind": kind, "texts_per_second": len(texts) / seconds, "tokens_per_text": sum(counts) / len(texts),
            "token_source": source, "load": load}


def index_bytes(n: int, dim: int = 384) -> dict[str, float]:
    import faiss
    import numpy as np

    from retbench.tasks.stages.index import IndexSettings, build_faiss_index

    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((n, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    nlist = 256
    settings = {
        "flat": IndexSettings("flat"),
        "ivf (nlist 256)": IndexSettings("ivf", nlist=nlist, train_size=n),
        "hnsw (M 32)": IndexSettings("hnsw", M=32, ef_construction=40),
        "ivfpq (m 48, 8 bits)": IndexSettings("ivfpq", nlist=nlist, train_size=n, m=48, nbits=8),
        "sq fp16": IndexSettings("sq", qtype="fp16"),
        "sq 8bit": IndexSettings("sq", qtype="8bit", train_size=n),
        "binary": IndexSettings("binary"),
    }
    sizes = {}
    for name, setting in settings.items():
        index = build_faiss_index(vectors, setting)[0]
        if setting.kind == "binary":
            data = faiss.serialize_index_binary(index.index if hasattr(index, "index") else index)
        else:
            data = faiss.serialize_index(index)
        sizes[name] = len(data) / n
    return sizes


def cache_bytes(n: int, dim: int = 384) -> float:
    """Bytes per text of the embedding cache (key, float32 vector, token count; zstd Parquet) and
    its set file (id, key)."""
    import hashlib
    import tempfile

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from retbench.tasks.stages.embed import _vector_table

    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((n, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    keys = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(n)]
    with tempfile.TemporaryDirectory() as folder:
        shard, set_file = Path(folder) / "shard.parquet", Path(folder) / "set.parquet"
        pq.write_table(_vector_table(keys, vectors, ([50] * n, "tokenizer")), shard, compression="zstd")
        pq.write_table(pa.table({"id": [f"doc-{i}" for i in range(n)], "key": keys}), set_file, compression="zstd")
        return (shard.stat().st_size + set_file.stat().st_size) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, default=SHARED / "glasgow" / "npl")
    parser.add_argument("--texts", type=int, default=1000)
    parser.add_argument("--index-vectors", type=int, default=20000)
    parser.add_argument("--providers", nargs="+", default=["sentence-transformers", "e5-multilingual"])
    options = parser.parse_args()

    texts = documents(options.dataset, options.texts)
    chars = sum(len(t) for t in texts) / len(texts)
    print(f"{len(texts)} documents of {options.dataset.name}: {chars:.0f} chars/text on average "
          f"(ceil(chars/4) estimate: {sum((len(t) + 3) // 4 for t in texts) / len(texts):.1f} tokens/text)")
    for kind in options.providers:
        f = provider_figures(kind, texts)
        print(f"  {kind}: {f['texts_per_second']:.1f} texts/s, {f['tokens_per_text']:.1f} tokens/text "
              f"({f['token_source']}); load {f['load']:.1f}", flush=True)
    print(f"embedding cache + set file: {cache_bytes(options.index_vectors):.0f} bytes per 384-d text")
    print(f"bytes per 384-d vector, {options.index_vectors} vectors:")
    for name, size in index_bytes(options.index_vectors).items():
        print(f"  {name}: {size:.0f}")


if __name__ == "__main__":
    main()
