"""Crash safety: a run killed with SIGKILL at a seeded random moment of any stage, then rerun,
gives exactly the results of an uninterrupted run, with no cache row duplicated and exactly
the missing texts embedded again."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from tests import crash_worker
from tests.crash_worker import PROVIDERS, TABLES, cache_rows

WORKER = Path(crash_worker.__file__)
STAGES = ("load-dataset", "chunk", "embed", "index", "retrieve", "score")
# Seconds after a stage starts within which the kill lands (about each stage's length with
# --batch-delay 0.01; a kill after the run finished is counted as such).
WINDOW = {"load-dataset": 0.3, "chunk": 0.3, "embed": 2.5, "index": 0.4, "retrieve": 0.5, "score": 0.5}
TRIALS = 24


def provider_folders(store: Path) -> dict[str, Path]:
    from tasks.stages.embed import cache_dir_for
    from tasks.providers import create_provider

    return {name: cache_dir_for(store, create_provider("hashing", options))[0] for name, options in PROVIDERS.items()}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    base = tmp_path_factory.mktemp("reference")
    crash_worker.run(base / "store", base / "out")
    tables = {name: pl.read_parquet(base / "out" / f"{name}.parquet") for name in TABLES}
    needed = {name: cache_rows(folder)[1] for name, folder in provider_folders(base / "store").items()}
    return tables, needed


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


def test_kill_at_random_moments_of_every_stage_then_rerun(tmp_path, reference):
    rng = random.Random(20240607)
    outcomes = []
    for trial in range(TRIALS):
        stage = STAGES[trial % len(STAGES)]
        delay = rng.uniform(0.0, WINDOW[stage])
        store, out = tmp_path / f"t{trial}" / "store", tmp_path / f"t{trial}" / "out"
        what = start_and_kill(store, out, stage, delay)
        figures = check_rerun(store, out, reference)
        outcomes.append((stage, round(delay, 3), what, figures["missing"]))
    killed = [o for o in outcomes if o[2] == "killed"]
    print("\ntrials (stage, delay, outcome, texts missing after the kill):", *outcomes, sep="\n  ")
    assert len(killed) >= TRIALS * 3 // 4, outcomes
    # Kills inside the embed stage must have left some, not all, texts to embed again.
    assert any(0 < o[3] < 2 * sum(len(k) for k in reference[1].values()) for o in killed if o[0] == "embed"), outcomes


def test_kill_between_a_parts_shard_and_its_journals_removal_leaves_no_duplicate_after_rerun(tmp_path, reference,
                                                                                            monkeypatch):
    """The known gap: a finished part's journal becomes a shard, then the journal is deleted."""
    from tasks.store import shards

    real_drop = shards.drop_journal
    calls = {"n": 0}

    def dies_after_one(part):
        calls["n"] += 1
        if calls["n"] > 1:
            raise KeyboardInterrupt("killed between the part's shard and the journal's removal")
        real_drop(part)

    monkeypatch.setattr(shards, "drop_journal", dies_after_one)
    with pytest.raises(KeyboardInterrupt):
        crash_worker.run(tmp_path / "store", tmp_path / "out")
    monkeypatch.setattr(shards, "drop_journal", real_drop)
    folder = provider_folders(tmp_path / "store")["hash64"]
    rows, keys = cache_rows(folder)
    assert rows > len(keys)  # the crash did leave duplicates ...
    check_rerun(tmp_path / "store", tmp_path / "out", reference)  # ... and the rerun removed them, embedding nothing


def test_force_reembed_leaves_one_row_per_key(tmp_path):
    from tasks.stages.embed import embed_texts, load_vectors
    from tasks.providers import create_provider

    provider = create_provider("hashing", {"dim": 32})
    texts = [f"text number {i}" for i in range(40)]
    embed_texts(provider, "h", texts, texts, "document", tmp_path, batch_size=8)
    again = embed_texts(provider, "h", texts[:10], texts[:10], "document", tmp_path, batch_size=8, force=True)
    rows, keys = cache_rows(Path(again.cache_dir))
    assert (rows, len(keys)) == (40, 40)
    assert load_vectors(again)[1].shape == (10, 32)
