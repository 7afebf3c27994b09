"""Concurrent runs on one store: three processes running specs that share providers and the
dataset at once all succeed, write no duplicate or torn rows, and embed each text once."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl

from retbench.support import crash_worker
from retbench.support.crash_worker import PROVIDERS, TABLES, cache_rows
from retbench.support.crash_runs import provider_folders

PROCESSES = 3


def test_three_concurrent_runs_share_the_store_without_double_work(tmp_path):
    crash_worker.run(tmp_path / "ref" / "store", tmp_path / "ref" / "out")
    reference = {name: pl.read_parquet(tmp_path / "ref" / "out" / f"{name}.parquet") for name in TABLES}
    needed = {name: len(cache_rows(folder)[1]) for name, folder in provider_folders(tmp_path / "ref" / "store").items()}

    store = tmp_path / "shared-store"
    processes = [
        subprocess.Popen([sys.executable, str(crash_worker.__file__), str(store), str(tmp_path / f"out{i}"),
                          "--batch-delay", "0.01"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         cwd=crash_worker.ROOT)
        for i in range(PROCESSES)
    ]
    results = []
    for process in processes:
        stdout, stderr = process.communicate(timeout=240)
        assert process.returncode == 0, stderr[-3000:]
        results.append(json.loads(stdout.strip().splitlines()[-1].removeprefix("DONE ")))

    for name, folder in provider_folders(store).items():
        embedded = sum(r["embedded"][f"{name}/{role}"] for r in results for role in ("document", "query"))
        # The provider folder's lock makes the later runs wait, then find every row cached.
        assert embedded == needed[name], f"{name}: {embedded} texts embedded across {PROCESSES} runs, {needed[name]} needed"
        rows, keys = cache_rows(folder)
        assert rows == len(keys) == needed[name]
    for i in range(PROCESSES):
        for name in TABLES:
            assert pl.read_parquet(tmp_path / f"out{i}" / f"{name}.parquet").equals(reference[name]), (i, name)
    # Every index and run file was built once: one file per name, each with a matching checksum.
    from retbench.tasks.store.integrity import checksum_ok

    for path in list((store / "indexes").rglob("*.faiss")) + list((store / "runs").glob("*.parquet")):
        assert checksum_ok(path) is True, path
    assert len(list((store / "runs").glob("*.parquet"))) == len(list((tmp_path / "ref" / "store" / "runs").glob("*.parquet")))
