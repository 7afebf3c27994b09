"""Kill the crash worker at a chosen moment of a stage, rerun it in-process and check every
guarantee: what the crash-safety tests and benchmarks/bench_crash.py both do."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl

from retbench.support import crash_worker
from retbench.support.crash_worker import PROVIDERS, TABLES, cache_rows

WORKER = Path(crash_worker.__file__)
STAGES = ("load-dataset", "chunk", "embed", "index", "retrieve", "score")
# Seconds after a stage starts within which the kill lands (about each stage's length with
# --batch-delay 0.01; a kill after the run finished is counted as such).
WINDOW = {"load-dataset": 0.3, "chunk": 0.3, "embed": 2.5, "index": 0.4, "retrieve": 0.5, "score": 0.5}


def provider_folders(store: Path) -> dict[str, Path]:
    from retbench.tasks.stages.embed import cache_dir_for
    from retbench.tasks.providers import create_provider

    return {name: cache_dir_for(store, create_provider("hashing", options))[0] for name, options in PROVIDERS.items()}



def start_and_kill(store: Path, out: Path, stage: str, delay: float, timeout: float = 60.0) -> str:
    """Run the worker, SIGKILL it `delay` seconds after `stage` starts; returns what happened."""
    process = subprocess.Popen(
        [sys.executable, str(WORKER), str(store), str(out), "--batch-delay", "0.01"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=crash_worker.ROOT,
    )
    deadline = time.monotonic() + timeout
    try:
        for line in process.stdout:
            if line.strip() == f"STAGE {stage}":
                time.sleep(delay)
                break
            if time.monotonic() > deadline:
                break
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
            return "killed"
        return "finished"
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
        process.wait()
        process.stdout.close()


def check_rerun(store: Path, out: Path, reference) -> dict:
    """Rerun in-process after a kill and check every guarantee; returns the trial's figures."""
    tables, needed = reference
    folders = provider_folders(store)
    present = {name: cache_rows(folder)[1] if folder.exists() else set() for name, folder in folders.items()}
    missing = {name: len(needed[name] - present[name]) for name in folders}

    result = crash_worker.run(store, out)

    for name in folders:
        embedded = result["embedded"][f"{name}/document"] + result["embedded"][f"{name}/query"]
        assert embedded == missing[name], f"{name}: embedded {embedded} on the rerun, {missing[name]} were missing"
        rows, keys = cache_rows(folders[name])
        assert keys == needed[name], f"{name}: cache holds {len(keys)} keys, the run needs {len(needed[name])}"
        assert rows == len(keys), f"{name}: {rows - len(keys)} duplicated cache rows survived the rerun"
        assert not list(folders[name].glob(".shard-*.tmp")), "a killed writer's temp file survived the rerun"
    for name in TABLES:
        got = pl.read_parquet(out / f"{name}.parquet")
        assert got.equals(tables[name]), f"{name} differs from the uninterrupted run's"
    return {"missing": sum(missing.values())}
