"""`retbench check --estimate` against the first run it estimates, per provider and stage.

    python benchmarks/bench_estimate.py [SPEC ...] [--rounds N]

For each spec (default: specs/sample.yaml and specs/npl.yaml), each round uses a fresh store and
output folder in a temp folder:
1. the estimate, as `check --estimate` makes it (the same functions, in a child process so the
   model loads cold, as in a user's shell), printed per provider and stage;
2. `retbench run SPEC` into that empty store; the measured seconds per provider and stage come from
   its manifest (embedding, index, retrieve) and its latency table (the profile's timed calls).
Prints estimated / measured per provider for each stage and for the sum of the stages the estimate
covers (target: within a factor of 1.5). Not covered by the estimate, and printed apart: the rest
of the run's wall time (Prefect's start, loading and chunking, scoring, the ANN sweep, BM25,
rerankers, the report).
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
STAGES = ("embed", "index", "retrieve", "latency profile")


def estimate(spec_path: str, store: str, out: str) -> dict:
    """Child process: the estimate as `check --estimate` makes it, as JSON per provider."""
    from retbench.tasks.config.spec import load_spec
    from retbench.tasks.stages.estimate import estimate_first_run
    from retbench.tasks.stages.preflight import chunk_tables, plan_run, preflight

    spec = load_spec(spec_path, output_dir=out, store_dir=store)
    dataset, key = preflight(spec, create_folders=False)
    chunks = chunk_tables(spec, dataset, key)
    plan = plan_run(spec, dataset, key, chunks)
    estimates = estimate_first_run(spec, plan, chunks, dataset.queries["text"].to_list(), measure_now=True)
    return {e.provider: {**e.stage_seconds, "load": e.load_seconds} for e in estimates}


def measured(out: Path) -> dict:
    """Seconds per provider and stage, from the run's manifest and latency table."""
    import polars as pl

    manifest = json.loads((out / "manifest.json").read_text())
    seconds: dict[str, dict[str, float]] = {}

    def add(provider, stage, value):
        seconds.setdefault(provider, {}).setdefault(stage, 0.0)
        seconds[provider][stage] += value or 0.0

    for e in manifest["embedding"]:
        add(e["provider"], "embed", e["seconds"])
    for i in manifest["indexes"]:
        add(i["provider"], "index", i["seconds"])
    for r in manifest["retrieval"]:
        add(r["provider"], "retrieve", r["search_seconds"])
    warmup = (manifest["spec"].get("latency") or {}).get("warmup", 1)
    latency = out / "latency.parquet"
    if latency.exists():
        for row in pl.read_parquet(latency).iter_rows(named=True):
            # The table times its calls and leaves the warm-up call of each setting out; the estimate
            # counts it, so it is counted here at the setting's own rate.
            if row.get("texts_per_second") and row.get("provider") in seconds:
                texts = (row["calls"] + warmup) * row["batch_size"]
                add(row["provider"], "latency profile", texts / row["texts_per_second"])
    return seconds


def one_round(spec: str) -> tuple[dict, dict, float, float]:
    with tempfile.TemporaryDirectory(prefix="bench-estimate-") as scratch:
        store, out = Path(scratch) / "store", Path(scratch) / "out"
        started = time.perf_counter()
        said = subprocess.run([sys.executable, __file__, "--child", spec, str(store), str(out)],
                              check=True, capture_output=True, text=True).stdout
        check_seconds = time.perf_counter() - started
        guess = json.loads(said.strip().splitlines()[-1])
        started = time.perf_counter()
        subprocess.run([str(Path(sys.executable).parent / "retbench"), "run", spec, "--store-dir", str(store),
                        "--output-dir", str(out)], check=True, capture_output=True, text=True,
                       env={**os.environ, "PREFECT_HOME": str(Path(scratch) / "prefect")})
        wall = time.perf_counter() - started
        return guess, measured(out), wall, check_seconds


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        print(json.dumps(estimate(*sys.argv[2:5])))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("specs", nargs="*", default=[str(ROOT / "specs/sample.yaml"), str(ROOT / "specs/npl.yaml")])
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    for spec in args.specs:
        for round_ in range(args.rounds):
            guess, real, wall, check_seconds = one_round(spec)
            print(f"\n{Path(spec).name}, round {round_ + 1}: check --estimate {check_seconds:.1f} s, first run "
                  f"{wall:.1f} s wall")
            print(f"{'provider':<12} {'stage':<16} {'estimated s':>12} {'measured s':>11} {'ratio':>6}")
            covered_total = 0.0
            for provider, stages in guess.items():
                got = real.get(provider, {})
                total_guess = total_real = 0.0
                for stage in STAGES:
                    g, m = stages.get(stage), got.get(stage)
                    if g is None and not m:
                        continue
                    total_guess += g or 0.0
                    total_real += m or 0.0
                    ratio = f"{g / m:.2f}" if g and m else "-"
                    print(f"{provider:<12} {stage:<16} {g or 0:>12.2f} {m or 0:>11.2f} {ratio:>6}")
                total_guess += stages.get("load", 0.0)
                ratio = f"{total_guess / total_real:.2f}" if total_real else "-"
                print(f"{provider:<12} {'all (+ load)':<16} {total_guess:>12.2f} {total_real:>11.2f} {ratio:>6}")
                covered_total += total_real
            print(f"not estimated (the rest of the wall time): {wall - covered_total:.1f} s")


if __name__ == "__main__":
    main()
