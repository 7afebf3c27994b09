"""Ctrl-C (SIGINT to the process group) and SIGTERM (to the pid) stop a `--dask` run on a local
cluster after the batches in flight: exit 130/143, the plain runner's one line with the kept
texts summed over every part, no worker or API process left; the rerun equals a plain run."""
import os
import re
import signal
import subprocess
import time

import numpy as np

from retbench.tasks.store import shards
from tests.pipeline.test_dask_progress import DOCS, progress_lines, slow_collection, start
from tests.pipeline.test_killed_run import alive, children, cmdline

STOPPED = re.compile(r"retbench: interrupted during embed slow documents: ([\d,]+) of ([\d,]+) texts kept; "
                     r"rerun to continue")


def descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        kids = children(todo.pop())
        found += kids
        todo += kids
    return found


def stop_while_two_parts_count(run: subprocess.Popen, output, send, after: int) -> tuple[int, str, list[int]]:
    """Wait for a progress line past `after` texts (more than a part holds: two parts counted), note the
    run's processes, `send` the signal; (exit code, output, the processes)."""
    deadline = time.monotonic() + 600  # a loaded machine: minutes for the cluster to start
    while not any(done > after for _, done, _ in progress_lines(output.read_text())):
        assert run.poll() is None and time.monotonic() < deadline, output.read_text()[-3000:]
        time.sleep(0.1)
    processes = descendants(run.pid)
    send()
    return run.wait(timeout=300), output.read_text(), processes


def left_behind(processes: list[int]) -> list[str]:
    """The run's processes still alive once it has exited: a worker or the resource tracker may
    take a moment to see its parent gone, so they get a few seconds."""
    deadline = time.monotonic() + 15
    while any(alive(pid) for pid in processes) and time.monotonic() < deadline:
        time.sleep(0.2)
    return [cmdline(pid)[:200] for pid in processes if alive(pid)]


def kept_documents(store) -> int:
    """Document texts whose vectors the store holds: in the cache's shards (finished parts) and
    in the journals of the parts left pending (stopped parts)."""
    import pyarrow.parquet as pq

    from retbench.tasks.stages.embed import shard_paths

    sets = [pq.read_table(path, columns=["key"]) for path in store.glob("sets/*.parquet")]
    documents = set(next(table for table in sets if table.num_rows == DOCS).column("key").to_pylist())
    keys = set()
    for folder in store.glob("embeddings/*/"):
        for path in shard_paths(folder):
            keys.update(pq.read_table(path, columns=["key"]).column("key").to_pylist())
        for path in folder.glob("pending/*.parquet"):
            for batch in shards.journal_batches(path):
                keys.update(batch.column("key").to_pylist())
    return len(keys & documents)


def test_sigint_and_sigterm_stop_a_dask_run_with_summed_counts_and_the_rerun_equals_a_plain_run(tmp_path):
    from retbench.tasks.config.spec import load_spec
    from retbench.tasks.pipeline import Selection, run_pipeline
    from retbench.tasks.stages.embed import read_vectors

    spec = slow_collection(tmp_path)
    env = {"RETBENCH_PROGRESS_EVERY": "0"}  # a line per count: the stop is sent mid-embedding
    runs = []
    try:
        # 1. Ctrl-C: SIGINT to the whole group, the local cluster's workers included.
        run, output = start(tmp_path, spec, "sigint", env=env)
        runs.append(run)
        code, text, processes = stop_while_two_parts_count(run, output, lambda: os.killpg(run.pid, signal.SIGINT), 100)
        assert code == 130, text[-3000:]
        found = STOPPED.search(text)
        assert found and text.rstrip().splitlines()[-1] == found[0], text[-3000:]
        assert "Traceback" not in text and "KeyboardInterrupt" not in text
        assert len(processes) >= 3 and left_behind(processes) == []  # 2 workers and the API server
        first, total = int(found[1].replace(",", "")), int(found[2].replace(",", ""))
        assert total == DOCS and 100 < first < DOCS
        assert first == kept_documents(tmp_path / "store")  # every part's kept batches, summed

        # 2. SIGTERM to the pid alone.
        run, output = start(tmp_path, spec, "sigterm", env=env)
        runs.append(run)
        code, text, processes = stop_while_two_parts_count(run, output, lambda: os.kill(run.pid, signal.SIGTERM), first + 16)
        assert code == 143, text[-3000:]
        found = STOPPED.search(text)
        assert found and text.rstrip().splitlines()[-1] == found[0], text[-3000:]
        assert left_behind(processes) == []
        second, total = int(found[1].replace(",", "")), int(found[2].replace(",", ""))
        # Its total is what its plan found missing (parts the first run finished are cached);
        # what the line leaves to do is what the store lacks.
        kept = kept_documents(tmp_path / "store")
        assert first < kept < DOCS and total - second == DOCS - kept

        # 3. To the end, then the vectors equal a plain run's into a store of its own.
        run, output = start(tmp_path, spec, "rest", env=env)
        runs.append(run)
        assert run.wait(timeout=900) == 0, output.read_text()[-3000:]
        assert not list((tmp_path / "store").glob("embeddings/*/pending/*.parquet"))
    finally:
        for run in runs:
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)
                run.wait()
    import json

    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    documents = next(e for e in manifest["embedding"] if e["role"] == "document")
    assert (documents["from_cache"], documents["embedded"], documents["count"]) == (kept, DOCS - kept, DOCS)
    plain_spec = load_spec(spec, output_dir=str(tmp_path / "plain-out"), store_dir=str(tmp_path / "plain-store"))
    plain = next(e for e in run_pipeline(plain_spec, Selection(stage="embed")).embeddings if e.role == "document")
    from retbench.tasks.stages.embed import EmbeddingSet
    from dataclasses import fields

    names = {f.name for f in fields(EmbeddingSet)}
    on_dask = EmbeddingSet(**{k: v for k, v in documents.items() if k in names})
    ids_a, a = read_vectors(plain)[:2]
    ids_b, b = read_vectors(on_dask)[:2]
    assert ids_a == ids_b and np.array_equal(a, b)
