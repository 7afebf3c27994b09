"""Crash-safety soak: SIGKILL the pipeline at seeded random moments of every stage, rerun, and
check the guarantees (results equal an uninterrupted run's; no cache row duplicated or lost;
exactly the missing texts embedded again). Also kills the real `retbench run` CLI (the Prefect
flow) a few times.

    python benchmarks/bench_crash.py --trials 120 --cli 5 --seed 1

Prints one line per trial and a summary: trials, kills, rows lost, rows duplicated.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from retbench.support import crash_worker  # noqa: E402
from retbench.support.crash_runs import STAGES, WINDOW, check_rerun, provider_folders, start_and_kill  # noqa: E402

CLI_SPEC = """
name: crashcli
dataset: {{path: "{data}", format: jsonl, split: all}}
chunking: {{strategy: paragraph, max_words: 60}}
providers:
  - {{name: hash64, kind: hashing, batch_size: 16, options: {{dim: 64}}}}
indexes: {{ivf: {{nprobe: [1, 4]}}}}
k: [5, 10]
depth: 20
history: {{enabled: false}}
output_dir: "{out}"
store_dir: "{store}"
"""


def worker_trials(base: Path, trials: int, rng: random.Random) -> dict:
    import polars as pl

    from retbench.support.crash_worker import TABLES, cache_rows

    crash_worker.run(base / "ref" / "store", base / "ref" / "out")
    reference = ({n: pl.read_parquet(base / "ref" / "out" / f"{n}.parquet") for n in TABLES},
                 {n: cache_rows(f)[1] for n, f in provider_folders(base / "ref" / "store").items()})
    figures = {"trials": 0, "killed": 0, "failed": 0, "missing_after_kill": 0}
    for trial in range(trials):
        stage = STAGES[trial % len(STAGES)]
        delay = rng.uniform(0.0, WINDOW[stage])
        store, out = base / f"t{trial}" / "store", base / f"t{trial}" / "out"
        what = start_and_kill(store, out, stage, delay)
        try:
            missing = check_rerun(store, out, reference)["missing"]
            status = "ok"
        except AssertionError as error:
            missing, status = -1, f"FAILED: {error}"
            figures["failed"] += 1
        figures["trials"] += 1
        figures["killed"] += what == "killed"
        figures["missing_after_kill"] += max(missing, 0)
        print(f"worker trial {trial:3d} {stage:12s} +{delay:.3f}s {what:8s} missing {missing:5d} {status}", flush=True)
    return figures


def cli_trials(base: Path, trials: int, rng: random.Random) -> dict:
    """Kill `retbench run` (Prefect flow, embedded API) a random time after start, then rerun it."""
    import polars as pl

    from retbench.support.crash_worker import cache_rows

    def run_cli(store: Path, out: Path, kill_after: float | None) -> str:
        spec = base / "cli-spec.yaml"
        spec.write_text(CLI_SPEC.format(data=crash_worker.SAMPLE, out=out, store=store))
        env = {**os.environ, "PREFECT_HOME": str(base / "prefect-home")}
        process = subprocess.Popen([sys.executable, "-m", "retbench.flows.cli", "run", str(spec)], cwd=ROOT, env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
        if kill_after is None:
            _, stderr = process.communicate(timeout=600)
            if process.returncode:
                raise RuntimeError(stderr[-2000:])
            return "finished"
        time.sleep(kill_after)
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)  # the flow and its embedded API server
            process.wait()
            return "killed"
        process.wait()
        return "finished"

    run_cli(base / "cli-ref" / "store", base / "cli-ref" / "out", None)
    reference = pl.read_parquet(base / "cli-ref" / "out" / "summary.parquet")
    figures = {"trials": 0, "killed": 0, "failed": 0, "duplicated_rows": 0}
    for trial in range(trials):
        store, out = base / f"cli{trial}" / "store", base / f"cli{trial}" / "out"
        delay = rng.uniform(4.0, 20.0)  # the embedded API takes a few seconds to start
        what = run_cli(store, out, delay)
        run_cli(store, out, None)
        same = pl.read_parquet(out / "summary.parquet").equals(reference)
        duplicated = 0
        for folder in (store / "embeddings").iterdir():
            rows, keys = cache_rows(folder)
            duplicated += rows - len(keys)
        figures["trials"] += 1
        figures["killed"] += what == "killed"
        figures["failed"] += (not same) or duplicated > 0
        figures["duplicated_rows"] += duplicated
        print(f"cli trial {trial:3d} +{delay:5.2f}s {what:8s} summary {'equal' if same else 'DIFFERENT'} duplicated {duplicated}", flush=True)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=60, help="kills of the stage-function worker")
    parser.add_argument("--cli", type=int, default=3, help="kills of the real `retbench run` CLI")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="bench-crash-") as tmp:
        started = time.perf_counter()
        result = {"worker": worker_trials(Path(tmp), args.trials, rng)}
        if args.cli:
            result["cli"] = cli_trials(Path(tmp), args.cli, rng)
        result["seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(result, indent=2))
    return 1 if any(part["failed"] for part in result.values() if isinstance(part, dict)) else 0


if __name__ == "__main__":
    sys.exit(main())
