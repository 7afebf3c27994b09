"""`retbench run --dask` reads like a plain run: the plan line, a progress line at least every
10 s of embedding with counts summed over every part and worker (never going down, ending at the
total), one line naming the cluster, and none of Dask's own INFO lines; on a local cluster and
on a scheduler address."""
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

from tests.pipeline.test_cli_errors import retbench

DOCS = 600  # 75 batches of 8 at 0.3 s: about 11 s of embedding on 2 workers, more on a busy machine
# A resumed set says what is left, with what a stopped run kept apart: "353/473 texts (75%; 56 more already kept)".
PROGRESS = re.compile(r"^(\d\d:\d\d:\d\d\.\d+) .*embed slow documents: ([\d,]+)/([\d,]+) texts \(\d+%"
                      r"(?:; ([\d,]+) more already kept)?\)", re.M)
PLAN = f"slow document texts: {DOCS} to embed in 8 part(s)"
SLOW_MODEL = '''
import hashlib
import time

import numpy as np


def embed(texts, role):
    time.sleep(0.3)  # a model slow enough that the parts take seconds
    return np.array([np.frombuffer(hashlib.sha256(t.encode()).digest()[:16], dtype=np.uint8).astype(np.float32) + 1
                     for t in texts])
'''


def slow_collection(base: Path) -> Path:
    """A spec embedding DOCS documents with a `kind: python` model that sleeps per batch."""
    data = base / "data"
    data.mkdir(parents=True)
    words = "orbit signal engine cache vector index query answer ranking model batch journal shard corpus".split()
    rng = random.Random(11)
    (data / "corpus.jsonl").write_text("".join(
        json.dumps({"id": f"d{i}", "text": f"document {i}: " + " ".join(rng.choices(words, k=20))}) + "\n"
        for i in range(DOCS)))
    (data / "queries.jsonl").write_text("".join(
        json.dumps({"id": f"q{i}", "text": " ".join(rng.choices(words, k=4)), "split": "dev"}) + "\n" for i in range(3)))
    (data / "qrels.jsonl").write_text("".join(
        json.dumps({"query_id": f"q{i}", "doc_id": f"d{i}", "grade": 1}) + "\n" for i in range(3)))
    (base / "slow_model.py").write_text(SLOW_MODEL)
    spec = base / "spec.yaml"
    spec.write_text(f"""name: slow
dataset: {{path: {data}, format: jsonl, split: all}}
providers: [{{name: slow, kind: python, batch_size: 8, options: {{callable: "slow_model:embed"}}}}]
output_dir: {base / 'out'}
store_dir: {base / 'store'}
""")
    return spec


def start(base: Path, spec: Path, name: str, *extra: str, env: dict | None = None) -> tuple[subprocess.Popen, Path]:
    """`retbench run SPEC --stage embed --dask ...` in its own session, its output in a file."""
    output = base / f"{name}.log"
    saved = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        with output.open("w") as sink:
            run = retbench("run", spec, "--stage", "embed", "--dask", *extra, cwd=base, prefect_home=base / "prefect",
                           stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return run, output


def progress_lines(text: str) -> list[tuple[float, int, int]]:
    """(seconds of the day, done, total) of each documents progress line, what was kept before
    included in both."""
    def seconds(stamp: str) -> float:
        moment = datetime.strptime(stamp, "%H:%M:%S.%f")
        return moment.hour * 3600 + moment.minute * 60 + moment.second + moment.microsecond / 1e6
    def number(group: str | None) -> int:
        return int(group.replace(",", "")) if group else 0
    return [(seconds(m[1]), number(m[2]) + number(m[4]), number(m[3]) + number(m[4])) for m in PROGRESS.finditer(text)]


def plan_time(text: str) -> float:
    line = next(line for line in text.splitlines() if PLAN in line)
    return progress_lines(line.replace(PLAN, "embed slow documents: 0/1 texts (0%)"))[0][0]


def test_a_local_cluster_run_shows_the_plan_and_summed_progress_and_no_dask_chatter(tmp_path):
    spec = slow_collection(tmp_path)
    run, output = start(tmp_path, spec, "local")  # the default: a line at most every 10 s
    try:
        assert run.wait(timeout=900) == 0, output.read_text()[-3000:]
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    text = output.read_text()
    lines = progress_lines(text)
    assert text.count(PLAN) == 1, text[-3000:]
    counts = [done for _, done, _ in lines]
    assert counts == sorted(counts) and counts[-1] == DOCS, counts  # summed over 8 parts: ends at the total
    assert {total for _, _, total in lines} == {DOCS}  # the plan's total, from the first line on
    # At least one line per 10 s of embedding (plan line to the last count), none more often.
    span = lines[-1][0] - plan_time(text)
    assert len(lines) >= int(span // 10), (span, lines)
    assert all(b[0] - a[0] >= 9.0 for a, b in zip(lines, lines[1:-1]))  # the closing line may follow at once
    assert not re.search(r"\| (INFO|DEBUG)\s+\| distributed\.", text), text[:3000]
    assert "jupyter-server-proxy" not in text and "Start Nanny" not in text
    cluster = [line for line in text.splitlines() if "retbench - dask: local cluster at tcp://127.0.0.1:" in line]
    assert len(cluster) == 1 and "(2 workers), dashboard http://" in cluster[0]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    documents = next(e for e in manifest["embedding"] if e["role"] == "document")
    assert (documents["embedded"], documents["count"]) == (DOCS, DOCS)


def test_a_run_on_a_scheduler_address_shows_the_workers_progress(tmp_path):
    spec = slow_collection(tmp_path)
    dask = Path(sys.executable).parent / "dask"
    scheduler_file = tmp_path / "scheduler.json"
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}  # the workers import the spec's slow_model
    processes = [subprocess.Popen([str(dask), "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                                   "--scheduler-file", str(scheduler_file)], env=env, cwd=tmp_path,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    run = None
    try:
        deadline = time.monotonic() + 300
        while not scheduler_file.exists():
            assert time.monotonic() < deadline and processes[0].poll() is None, "the scheduler did not start"
            time.sleep(0.2)
        address = json.loads(scheduler_file.read_text())["address"]
        processes += [subprocess.Popen([str(dask), "worker", "--scheduler-file", str(scheduler_file), "--host", "127.0.0.1",
                                        "--nthreads", "1", "--no-dashboard"], env=env, cwd=tmp_path,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(2)]
        from distributed import Client

        with Client(address, timeout=300) as client:  # both workers joined, so the cluster line counts 2
            client.wait_for_workers(2, timeout=300)
        run, output = start(tmp_path, spec, "address", address, env={"RETBENCH_PROGRESS_EVERY": "0"})
        assert run.wait(timeout=900) == 0, output.read_text()[-3000:]
        text = output.read_text()
        counts = [done for _, done, _ in progress_lines(text)]
        assert text.count(PLAN) == 1 and len(counts) >= 5, text[-3000:]
        assert counts == sorted(counts) and counts[-1] == DOCS
        assert f"retbench - dask: cluster at {address} (2 workers)" in text
        assert not re.search(r"\| (INFO|DEBUG)\s+\| distributed\.", text)
    finally:
        if run is not None and run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
