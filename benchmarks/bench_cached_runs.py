"""A user's cached rerun against their first run, the way they run it: `retbench run SPEC`.

    python benchmarks/bench_cached_runs.py [--guard RATIO] [SPEC ...]   (default: specs/sample.yaml)

With --guard (issue 36: 0.015 for a 10,000+ document collection such as specs/npl.yaml, held at
0.01), it exits 1 naming every spec whose cached/first is above RATIO: a regression of the
cached rerun fails the benchmark instead of only printing a larger number.

For each spec: a first run into a fresh store, then the same command again (everything cached:
embeddings, indexes, runs, and the latency profile and ANN sweep measured on this machine),
each as its own `retbench run` process, so imports and Prefect's start and stop are counted.
Prints both wall times and cached/first (targets: sample <= 0.15, a 10,000+ document
collection <= 0.05), then where a cached run's time goes: Python imports, an empty Prefect
flow (start and stop of the embedded API), and the rest. The machine is shared and noisy:
read the ratios.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RETBENCH = [sys.executable, "-m", "retbench.flows.cli"]


def timed(command: list[str]) -> float:
    started = time.perf_counter()
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    return seconds


def overheads() -> dict[str, float]:
    """Seconds of a bare import of the flow module, and of an empty flow on the embedded API."""
    imports = timed([sys.executable, "-c", "import retbench.flows.benchmark, retbench.tasks.pipeline"])
    empty_flow = timed([sys.executable, "-c", "import retbench.flows\nfrom prefect import flow\n"
                        "@flow\ndef nothing():\n    return 1\nnothing()"])
    return {"imports": imports, "empty_flow_including_imports": empty_flow}


def main(argv: list[str]) -> None:
    guard = None
    if argv[:1] == ["--guard"]:
        guard, argv = float(argv[1]), argv[2:]
    specs = [Path(s).resolve() for s in argv] or [ROOT / "specs" / "sample.yaml"]
    over = []
    work = Path(tempfile.mkdtemp(prefix="retbench-cached-"))
    print(f"scratch: {work}")
    for spec in specs:
        store, out = work / f"{spec.stem}-store", work / f"{spec.stem}-out"
        base = [*RETBENCH, "run", str(spec), "--store-dir", str(store), "--output-dir", str(out)]
        first = timed(base)
        cached = timed(base)
        manifest = json.loads((out / "manifest.json").read_text())
        print(f"{spec.name}: first {first:.1f}s, cached {cached:.1f}s, cached/first = {cached / first:.4f} "
              f"(embedded on the cached run: {manifest['texts']['embedded']}, stages {manifest['stage_seconds']})")
        if guard is not None and cached / first > guard:
            over.append(f"{spec.name} {cached / first:.4f}")
    parts = overheads()
    print("fixed costs of any run: " + ", ".join(f"{k} {v:.2f}s" for k, v in parts.items()))
    if over:
        sys.exit(f"cached/first above the guard {guard}: {', '.join(over)}")
    if guard is not None:
        print(f"guard {guard}: held by every spec")


if __name__ == "__main__":
    main(sys.argv[1:])
