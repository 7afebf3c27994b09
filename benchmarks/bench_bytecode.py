"""What compiled bytecode saves a `retbench` process, the way the suite and a user start one.

    python benchmarks/bench_bytecode.py [--repeats N]

uv installs no .pyc files (pip does), and this machine sets PYTHONDONTWRITEBYTECODE=1, so a
process that finds no .pyc compiles every module it imports from source, every time. The
Makefile now installs with `uv pip install --compile-bytecode` and compiles the checkout's own
modules. This script times, alternately in one command, the same commands with the .pyc files
in use and with them hidden (PYTHONPYCACHEPREFIX pointed at an empty folder, so Python looks
for them there and finds none):

- `retbench check` of a hashing-only cut of the sample (spec load, data checks, no model);
- a cached `retbench run` of it (everything in the store: the fixed cost of any run);
- a first `retbench run` of it into a fresh store (chunk, embed, index, retrieve, score, report).

Prints each command's wall and CPU seconds and the ratio with/without (CPU is the figure that
adds up over a test suite of a few hundred processes on two cores). The machine is shared and
noisy: read the ratios of sums.
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RETBENCH = [sys.executable, "-m", "retbench.flows.cli"]


def spec_text(store: Path, out: Path) -> str:
    return (f"name: bytecode\ndataset: {{format: jsonl, path: {ROOT / 'data' / 'sample'}, split: all}}\n"
            "providers:\n  - {name: hashing, kind: hashing}\nindexes: {flat: true}\n"
            f"output_dir: {out}\nstore_dir: {store}\n")


def timed(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU (user + system, children included) seconds of one process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="retbench-bytecode-"))
    with_pyc = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    without_pyc = {**with_pyc, "PYTHONPYCACHEPREFIX": str(work / "no-pyc-here")}
    totals: dict[tuple[str, str], list[float]] = {}
    for n in range(args.repeats):
        for label, env in (("with .pyc", with_pyc), ("from source", without_pyc)):
            tag = f"{n}-{label.split()[0]}"
            spec = work / f"{tag}.yaml"
            spec.write_text(spec_text(work / f"store-{tag}", work / f"out-{tag}"))
            for command, argv in (("check", ["check", str(spec)]), ("first run", ["run", str(spec)]),
                                  ("cached run", ["run", str(spec)])):
                wall, cpu = timed([*RETBENCH, *argv], env)
                sums = totals.setdefault((command, label), [0.0, 0.0])
                sums[0] += wall
                sums[1] += cpu
                print(f"  {n}: {command:10s} {label:11s} {wall:6.2f}s wall {cpu:6.2f}s CPU", flush=True)
    print(f"\nsums over {args.repeats} alternated repeats:")
    for command in ("check", "first run", "cached run"):
        w_wall, w_cpu = totals[(command, "with .pyc")]
        s_wall, s_cpu = totals[(command, "from source")]
        print(f"{command:10s} with .pyc {w_wall:6.1f}s wall {w_cpu:6.1f}s CPU; from source {s_wall:6.1f}s wall "
              f"{s_cpu:6.1f}s CPU; with/without = {w_wall / s_wall:.2f} wall, {w_cpu / s_cpu:.2f} CPU")


if __name__ == "__main__":
    main()
