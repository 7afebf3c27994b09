"""A cluster as a team deploys it: `dask scheduler` and two `dask worker` processes started with
Dask's own command lines, each worker in its own working directory, environment and scratch
folder (a mount namespace puts an empty folder of its own at the run's scratch path, as on
another machine), and the store in a bucket (moto's S3 server). All on 127.0.0.1, stopped by the test.

1. `retbench run SPEC --dask tcp://...` (store_dir s3://..., embedding in 4 parts, flat and IVF
   search over 2 shards); the scheduler stopped while the workers embed: one `retbench: ...` line
   naming it, exit 2, no traceback.
2. The rerun on a new cluster, one of its workers SIGKILLed three batches into its part: it
   completes, embeds none of the texts the bucket held, embeds no text twice beyond the killed
   worker's batch in flight (the slow model logs every text it embeds, per process), and writes
   the plain run's summary, per_query and runs tables, value for value.
3. The fake S3 key pair appears in no log, manifest, table, scratch folder or object.

Not isolated: the dataset folder and the output folder, which the workers see at the same path
as the run (every stage call is a task run that may land on any worker; docs/guide/scale.md).
"""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from retbench.support.moto_s3 import moto_s3
from tests.pipeline.test_cli_errors import retbench

BUCKET = "retbench-cluster"
DOCS = 320  # 40 batches of 8; 4 parts of about 80 texts (10 batches of 0.3 s each) over 2 workers
BATCH = 8
PARTS = 4
QUERIES = 24
# A fake key pair that must show up nowhere the run writes.
ACCESS_KEY = "AKIACLUSTER33FAKEKEY"
SECRET_KEY = "cluster33-fake-secret-wJalrXUtnFEMI"
TABLES = ("summary", "per_query", "runs")

MODEL = '''"""A slow model: a fixed sleep per batch (SLOW_MODEL_SLEEP), vectors from the text's hash; with
SLOW_MODEL_LOG set, every text it embedded is appended to <folder>/<role>-<pid>.log (after the batch)."""
import hashlib
import os
import time

import numpy as np


def embed(texts, role):
    time.sleep(float(os.environ.get("SLOW_MODEL_SLEEP", "0")))
    vectors = np.array([np.frombuffer(hashlib.sha256(t.encode()).digest()[:16], dtype=np.uint8).astype(np.float32) + 1
                        for t in texts])
    folder = os.environ.get("SLOW_MODEL_LOG")
    if folder:
        with open(os.path.join(folder, f"{role}-{os.getpid()}.log"), "a") as log:
            log.write("".join(hashlib.sha256(t.encode()).hexdigest()[:16] + "\\n" for t in texts))
    return vectors
'''


def write_collection(base: Path) -> Path:
    """The corpus, queries, judgments and the slow model; returns the data folder."""
    data = base / "data"
    data.mkdir(parents=True)
    words = "orbit signal engine cache vector index query answer ranking model batch journal shard corpus".split()
    rng = random.Random(33)
    (data / "corpus.jsonl").write_text("".join(
        json.dumps({"id": f"d{i}", "text": f"document {i}: " + " ".join(rng.choices(words, k=20))}) + "\n"
        for i in range(DOCS)))
    (data / "queries.jsonl").write_text("".join(
        json.dumps({"id": f"q{i}", "text": " ".join(rng.choices(words, k=4)), "split": "dev"}) + "\n"
        for i in range(QUERIES)))
    (data / "qrels.jsonl").write_text("".join(
        json.dumps({"query_id": f"q{i}", "doc_id": f"d{j}", "grade": 1}) + "\n"
        for i in range(QUERIES) for j in rng.sample(range(DOCS), 3)))
    model = base / "model"
    model.mkdir()
    (model / "slow_model.py").write_text(MODEL)
    return data


def write_spec(base: Path, name: str, store: str, scratch: Path | None, sharded: bool) -> Path:
    """`sharded`: 4 embed parts per set and flat and IVF search over 2 shards (the plain run: neither)."""
    shards = f", shards: {PARTS}" if sharded else ""
    spec = base / f"{name}.yaml"
    spec.write_text(f"""name: cluster
dataset: {{path: {base / 'data'}, format: jsonl, split: all}}
python_path: [{base / 'model'}]
providers: [{{name: slow, kind: python, batch_size: {BATCH}{shards}, options: {{callable: "slow_model:embed"}}}}]
indexes: {{{'shards: 2, ' if sharded else ''}ivf: {{nlist: 4, nprobe: [2]}}}}
output_dir: {base / f'out-{name}'}
store_dir: "{store}"
""" + (f"store_mirror: {scratch}\n" if scratch else ""))
    return spec


def _private_mounts() -> list[str] | None:
    """The `unshare` words that give a process a mount namespace of its own (as root, or as a
    mapped root in a user namespace); None when neither works here."""
    for words in (["unshare", "--mount", "--propagation", "private"],
                  ["unshare", "--user", "--map-root-user", "--mount", "--propagation", "private"]):
        if shutil.which("unshare") and subprocess.run([*words, "true"], capture_output=True).returncode == 0:
            return words
    return None


class Cluster:
    """`dask scheduler` and `dask worker` processes from the venv's Dask, all on 127.0.0.1.
    Each worker: its own folder (working directory, HOME, TMPDIR, --local-directory, log) and
    an empty folder of its own mounted at the run's scratch path, found through
    RETBENCH_OBJECT_STORES as on another machine."""

    def __init__(self, base: Path, name: str, scratch: Path, store: str, env: dict[str, str], workers: int = 2):
        self.base, self.name = base / name, name
        self.base.mkdir(parents=True)
        dask = str(Path(sys.executable).parent / "dask")
        scheduler_file = self.base / "scheduler.json"  # read by this test only: the workers get the address
        self.logs: list[Path] = []
        self.scheduler = self._start([dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                                      "--scheduler-file", str(scheduler_file)], self.base, "scheduler", dict(os.environ))
        deadline = time.monotonic() + 120
        while not scheduler_file.exists():
            assert time.monotonic() < deadline and self.scheduler.poll() is None, self._tail("scheduler")
            time.sleep(0.1)
        self.address = json.loads(scheduler_file.read_text())["address"]
        self.workers, self.folders = [], []
        mounts = _private_mounts()
        scratch.mkdir(parents=True, exist_ok=True)
        for i in range(workers):
            folder = self.base / f"worker{i}"
            for sub in ("cwd", "home", "tmp", "local", "scratch", "embedded"):
                (folder / sub).mkdir(parents=True)
            worker_env = {"PATH": os.environ["PATH"], "HOME": str(folder / "home"), "TMPDIR": str(folder / "tmp"),
                          "PYTHONPATH": str(base / "model"),  # the model's code, installed on every worker
                          "RETBENCH_OBJECT_STORES": json.dumps({str(scratch): store}), **env,
                          "SLOW_MODEL_LOG": str(folder / "embedded")}
            command = [dask, "worker", self.address, "--host", "127.0.0.1", "--nthreads", "1", "--no-nanny",
                       "--no-dashboard", "--name", f"{name}-w{i}", "--local-directory", str(folder / "local")]
            # Its own scratch folder at the run's scratch path; the mount is the worker's alone.
            command = [*mounts, "sh", "-c", 'mount --bind "$1" "$2" || exit 97; shift 2; exec "$@"', "sh",
                       str(folder / "scratch"), str(scratch), *command]
            self.workers.append(self._start(command, folder / "cwd", f"worker{i}", worker_env))
            self.folders.append(folder)
        from distributed import Client

        with Client(self.address, timeout=120) as client:
            client.wait_for_workers(workers, timeout=120)

    def _start(self, command: list[str], cwd: Path, name: str, env: dict) -> subprocess.Popen:
        log = self.base / f"{name}.log"
        self.logs.append(log)
        with log.open("w") as sink:
            return subprocess.Popen(command, cwd=cwd, env=env, stdout=sink, stderr=subprocess.STDOUT)

    def _tail(self, name: str) -> str:
        return (self.base / f"{name}.log").read_text()[-3000:]

    def embedded(self, role: str = "document") -> list[str]:
        """Every text any of the workers' model calls embedded (a key a line), repeats kept."""
        return [key for folder in self.folders for log in sorted((folder / "embedded").glob(f"{role}-*.log"))
                for key in log.read_text().split()]

    def embedded_by(self, worker: int, role: str = "document") -> int:
        return sum(len(log.read_text().split()) for log in (self.folders[worker] / "embedded").glob(f"{role}-*.log"))

    def stop(self) -> None:
        for process in [*self.workers, self.scheduler]:
            if process.poll() is None:
                process.terminate()
        for process in [*self.workers, self.scheduler]:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    pytest.importorskip("moto")
    with moto_s3(tmp_path_factory.mktemp("moto"), BUCKET) as endpoint:
        yield endpoint


def _uri(endpoint: str, prefix: str) -> str:
    return f"s3://{BUCKET}/{prefix}?endpoint_override={endpoint}&scheme=http&region=us-east-1"


def run_on(cluster: Cluster, spec: Path, name: str) -> tuple[subprocess.Popen, Path]:
    """`retbench run SPEC --dask ADDRESS` in its own session, its output in a file."""
    output = cluster.base / f"{name}.log"
    with output.open("w") as sink:
        run = retbench("run", spec, "--dask", cluster.address, cwd=cluster.base, prefect_home=cluster.base / "prefect",
                       stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    return run, output


def tables_of(folder: Path) -> dict[str, pl.DataFrame]:
    """The compared tables, rows in one order (the run's id column left out: it names the run)."""
    tables = {}
    for name in TABLES:
        table = pl.read_parquet(folder / f"{name}.parquet")
        table = table.drop([c for c in ("run_id",) if c in table.columns])
        tables[name] = table.sort(table.columns, nulls_last=True)
    return tables


def bucket_keys(uri: str, folder: str, suffix: str) -> set[str]:
    """The content keys in the bucket's objects under `folder` whose names end with `suffix`:
    cache shards (Parquet) or uploaded journal batches (Arrow streams)."""
    import pyarrow as pa
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    fs, root = pafs.FileSystem.from_uri(uri)
    found = set()
    for info in fs.get_file_info(pafs.FileSelector(f"{root}/{folder}", recursive=True, allow_not_found=True)):
        if info.type == pafs.FileType.File and info.base_name.endswith(suffix) and (
                suffix != ".parquet" or info.base_name.startswith("shard-")):  # not the pending parts' inputs
            with fs.open_input_file(info.path) as handle:
                table = pq.read_table(handle) if suffix == ".parquet" else pa.ipc.open_stream(handle).read_all()
            found.update(table.column("key").to_pylist())
    return found


def text_hashes(store: Path) -> dict[str, str]:
    """Document content key -> the slow model's name for its text (from the plain run's store)."""
    import hashlib

    sets = [pl.read_parquet(path) for path in store.glob("sets/*.parquet")]
    documents = next(table for table in sets if table.height == DOCS)
    chunks = pl.concat([pl.read_parquet(path) for path in store.glob("chunks/*.parquet")])
    text = dict(zip(chunks["chunk_id"], chunks["text"]))
    return {key: hashlib.sha256(text[i].encode()).hexdigest()[:16] for i, key in zip(documents["id"], documents["key"])}


def files_holding(folders: list[Path], secrets: tuple[str, ...]) -> list[str]:
    found = []
    for folder in folders:
        for path in folder.rglob("*"):
            if path.is_file() and any(s.encode() in path.read_bytes() for s in secrets):
                found.append(str(path))
    return found


def bucket_holding(uri: str, secrets: tuple[str, ...]) -> list[str]:
    import pyarrow.fs as pafs

    fs, root = pafs.FileSystem.from_uri(uri)
    found = []
    for info in fs.get_file_info(pafs.FileSelector(root, recursive=True)):
        if info.type == pafs.FileType.File:
            with fs.open_input_stream(info.path) as handle:
                data = handle.read()
            found += [info.path] if any(s.encode() in data for s in secrets) else []
    return found


@pytest.mark.server  # Dask's scheduler and workers, moto's S3 server, the run's Prefect API (runs in CI)
def test_a_deployed_cluster_on_a_bucket(tmp_path, s3, monkeypatch):
    if _private_mounts() is None:
        pytest.skip("no mount namespace (unshare) here: the workers would share the run's scratch folder")
    started = time.monotonic()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)  # the run's environment; never in the spec
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    write_collection(tmp_path)

    # The plain run: one process, a local store, nothing sharded, a model without the sleep.
    from retbench.tasks.config.spec import load_spec
    from retbench.tasks.pipeline import run_pipeline

    plain = run_pipeline(load_spec(write_spec(tmp_path, "plain", str(tmp_path / "plain-store"), None, sharded=False)))
    expected = tables_of(Path(plain.output_dir))
    assert expected["per_query"].height > 0
    text_of = text_hashes(tmp_path / "plain-store")
    phases = {"plain run": time.monotonic() - started}

    uri = _uri(s3, "cluster")
    scratch = tmp_path / "scratch"
    spec = write_spec(tmp_path, "cluster", uri, scratch, sharded=True)
    worker_env = {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
                  "AWS_DEFAULT_REGION": "us-east-1", "SLOW_MODEL_SLEEP": "0.3"}
    clusters, runs = [], []
    try:
        # 1. The scheduler stopped while the workers embed: one line naming it, exit 2.
        mark = time.monotonic()
        first = Cluster(tmp_path, "first", scratch, uri, worker_env)
        clusters.append(first)
        phases["first cluster up"] = time.monotonic() - mark
        mark = time.monotonic()
        run, output = run_on(first, spec, "stopped")
        runs.append(run)
        deadline = time.monotonic() + 300
        while len(first.embedded()) < 6 * BATCH:
            assert run.poll() is None and time.monotonic() < deadline, output.read_text()[-3000:]
            time.sleep(0.05)
        stopped_at = time.monotonic()
        first.scheduler.terminate()
        code = run.wait(timeout=300)
        ended_after = time.monotonic() - stopped_at
        text = output.read_text()
        last = text.rstrip().splitlines()[-1]
        print(f"\nscheduler stopped: exit {code} after {ended_after:.1f}s: {last}")
        assert code == 2 and last.startswith("retbench: ") and first.address in last, text[-3000:]
        assert "Traceback" not in text, text[-3000:]
        phases["stopped run"] = time.monotonic() - mark
        for worker in first.workers:  # their hosts gone too: a batch in flight is lost
            worker.kill()
        first.stop()
        held = {text_of[key] for key in bucket_keys(uri, "embeddings", ".parquet") | bucket_keys(uri, "embeddings", ".arrows")
                if key in text_of}
        before = first.embedded()
        assert 0 < len(held) < DOCS

        # 2. A new cluster resumes from the bucket; a worker SIGKILLed in the middle of its part.
        mark = time.monotonic()
        second = Cluster(tmp_path, "second", scratch, uri, worker_env)
        clusters.append(second)
        phases["second cluster up"] = time.monotonic() - mark
        mark = time.monotonic()
        run, output = run_on(second, spec, "resumed")
        runs.append(run)
        deadline = time.monotonic() + 300
        while second.embedded_by(0) < 3 * BATCH:  # three batches into its first part (a part: about 10)
            assert run.poll() is None and time.monotonic() < deadline, output.read_text()[-3000:]
            time.sleep(0.05)
        second.workers[0].kill()
        killed_after = second.embedded_by(0)
        assert run.wait(timeout=600) == 0, output.read_text()[-5000:]
        after = second.embedded()
        phases["resumed run"] = time.monotonic() - mark
    finally:
        for run in runs:
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)
                run.wait()
        for cluster in clusters:
            cluster.stop()

    manifest = json.loads((tmp_path / "out-cluster" / "manifest.json").read_text())
    documents = next(e for e in manifest["embedding"] if e["role"] == "document")
    twice = len(after) - len(set(after))
    again = set(before) & set(after)
    print(f"first cluster: {len(before)} texts embedded, {len(held)} in the bucket when stopped; second: {len(after)} "
          f"embedded ({twice} twice; worker 0 killed after {killed_after}), {len(again)} embedded by both clusters; "
          f"manifest: {documents['embedded']} embedded, {documents['from_cache']} from cache")
    assert not held & set(after)  # the rerun embedded only what the bucket lacked
    assert set(before) | set(after) == set(text_of.values())
    assert twice <= BATCH  # the killed worker's batch in flight, at most
    assert len(again) <= 2 * BATCH  # the first cluster's batches in flight when its workers were killed
    assert documents["from_cache"] >= len(held) and documents["embedded"] + documents["from_cache"] == DOCS
    got = tables_of(tmp_path / "out-cluster")
    for name in TABLES:
        assert got[name].equals(expected[name]), name

    # The key pair: in no log, manifest, table, scratch folder or Prefect home, nor in the bucket.
    leaks = files_holding([tmp_path], (ACCESS_KEY, SECRET_KEY)) + bucket_holding(uri, (ACCESS_KEY, SECRET_KEY))
    assert leaks == [], leaks
    print(f"wall time {time.monotonic() - started:.0f}s: " + ", ".join(f"{k} {v:.0f}s" for k, v in phases.items()))
