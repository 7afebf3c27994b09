"""Ctrl-C (SIGINT to the process group) and SIGTERM (to the pid alone, as a scheduler sends it)
stop a real MiniLM run after the batch in flight: one line, exit 130/143, no traceback, the
embedded API server ended, every batch kept; the rerun serves them from the cache."""
import json
import os
import random
import re
import signal
import subprocess
import time
from pathlib import Path

from retbench.tasks.store import shards
from tests.pipeline.test_cli_errors import retbench
from tests.pipeline.test_killed_run import alive, children, cmdline

DOCS = 400  # 8 per batch: 50 batches, seconds of MiniLM even on a fast machine, so the stop lands mid-set
STOPPED = re.compile(r"retbench: interrupted during embed minilm documents: ([\d,]+) of ([\d,]+) texts kept; "
                     r"rerun to continue")


def small_collection(folder: Path) -> None:
    folder.mkdir(parents=True)
    words = "orbit signal engine cache vector index query answer ranking model batch journal shard corpus".split()
    rng = random.Random(7)
    (folder / "corpus.jsonl").write_text("".join(
        json.dumps({"id": f"d{i}", "text": f"document {i}: " + " ".join(rng.choices(words, k=30))}) + "\n"
        for i in range(DOCS)))
    (folder / "queries.jsonl").write_text("".join(
        json.dumps({"id": f"q{i}", "text": " ".join(rng.choices(words, k=4)), "split": "dev"}) + "\n" for i in range(3)))
    (folder / "qrels.jsonl").write_text("".join(
        json.dumps({"query_id": f"q{i}", "doc_id": f"d{i}", "grade": 1}) + "\n" for i in range(3)))


def write_spec(tmp_path: Path) -> Path:
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"""name: stopped
dataset: {{path: {tmp_path / 'data'}, format: jsonl, split: all}}
providers: [{{name: minilm, kind: sentence-transformers, batch_size: 8}}]
output_dir: {tmp_path / 'out'}
store_dir: {tmp_path / 'store'}
""")
    return spec


def start(tmp_path: Path, spec: Path, name: str) -> tuple[subprocess.Popen, Path]:
    """`retbench run --stage embed` in its own session (as a terminal runs it), a progress line
    per batch (RETBENCH_PROGRESS_EVERY=0), its output in a file."""
    output = tmp_path / f"{name}.log"
    with output.open("w") as sink:
        run = retbench("run", spec, "--stage", "embed", cwd=tmp_path, prefect_home=tmp_path / "prefect",
                       stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    return run, output


def stop_after_a_batch(run: subprocess.Popen, output: Path, send) -> tuple[int, str, list[int]]:
    """Wait for the first batch's progress line, note the API server, `send` the signal;
    (exit code, output, server pids)."""
    deadline = time.monotonic() + 600  # a loaded machine: minutes
    while "embed minilm documents: " not in output.read_text() and run.poll() is None:
        assert time.monotonic() < deadline, "no progress line: " + output.read_text()[-2000:]
        time.sleep(0.05)
    servers = [pid for pid in children(run.pid) if "prefect.server.api.server:create_app" in cmdline(pid)]
    send()
    return run.wait(timeout=300), output.read_text(), servers


def kept(text: str) -> tuple[int, int]:
    found = STOPPED.search(text)
    assert found, text[-2000:]
    return int(found[1].replace(",", "")), int(found[2].replace(",", ""))


def test_sigint_and_sigterm_stop_a_minilm_run_and_the_rerun_serves_the_kept_batches(tmp_path, monkeypatch):
    monkeypatch.setenv("RETBENCH_PROGRESS_EVERY", "0")
    small_collection(tmp_path / "data")
    spec = write_spec(tmp_path)
    runs = []
    try:
        # 1. Ctrl-C: SIGINT to the whole process group, as a terminal sends it.
        run, output = start(tmp_path, spec, "sigint")
        runs.append(run)
        code, text, servers = stop_after_a_batch(run, output, lambda: os.killpg(run.pid, signal.SIGINT))
        assert code == 130, text[-3000:]
        assert text.rstrip().splitlines()[-1] == STOPPED.search(text)[0]  # the last line, the only one of its kind
        assert "Traceback" not in text and "EventsWorker" not in text and "Crash detected" not in text
        assert servers and not any(alive(pid) for pid in servers)
        first, total = kept(text)
        assert total == DOCS and 8 <= first < DOCS and first % 8 == 0  # whole batches only
        pending = list((tmp_path / "store" / "embeddings").glob("*/pending/*.parquet"))
        assert len(pending) == 1  # one part holds the whole set: the stop came between its batches
        assert sum(batch.num_rows for batch in shards.journal_batches(pending[0])) == first

        # 2. SIGTERM to the pid alone, as a scheduler or `kill` sends it.
        run, output = start(tmp_path, spec, "sigterm")
        runs.append(run)
        code, text, servers = stop_after_a_batch(run, output, lambda: os.kill(run.pid, signal.SIGTERM))
        assert code == 143, text[-3000:]
        assert "Traceback" not in text and "EventsWorker" not in text
        assert servers and not any(alive(pid) for pid in servers)
        second, total = kept(text)
        assert total == DOCS and first < second < DOCS  # the first run's batches count as kept

        # 3. To the end: the batches both stopped runs kept come from the cache.
        run, output = start(tmp_path, spec, "rest")
        runs.append(run)
        assert run.wait(timeout=600) == 0, output.read_text()[-3000:]
        manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
        documents = next(e for e in manifest["embedding"] if e["role"] == "document")
        assert (documents["from_cache"], documents["embedded"], documents["count"]) == (second, DOCS - second, DOCS)
        assert not list((tmp_path / "store" / "embeddings").glob("*/pending/*.parquet"))
    finally:
        for run in runs:
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)
                run.wait()
