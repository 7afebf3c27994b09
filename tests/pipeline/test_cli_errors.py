"""Expected failures of `retbench run` end with one line `retbench: ...` on stderr and exit
code 2, without tracebacks (those come with --debug); bad inputs fail before Prefect starts."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from retbench.support.paths import ROOT
from retbench.support.faulty_server import FaultyServer

SPEC = """name: tiny
dataset: {{path: {data}, format: jsonl, split: all}}
providers: [{provider}]
indexes: {{ivf: null}}
k: [5, 10]
depth: 20
output_dir: {out}
store_dir: {store}
"""


def tiny_collection(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "corpus.jsonl").write_text("".join(
        json.dumps({"id": f"d{i}", "text": f"document {i} about topic {i % 3}"}) + "\n" for i in range(6)))
    (folder / "queries.jsonl").write_text("".join(
        json.dumps({"id": f"q{i}", "text": f"topic {i}", "split": "dev"}) + "\n" for i in range(3)))
    (folder / "qrels.jsonl").write_text("".join(
        json.dumps({"query_id": f"q{i}", "doc_id": f"d{i}", "grade": 1}) + "\n" for i in range(3)))
    return folder


def write_spec(tmp_path: Path, provider: str = "{name: h, kind: hashing}", **paths) -> Path:
    values = {"data": tmp_path / "data", "out": tmp_path / "out", "store": tmp_path / "store", **paths}
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(provider=provider, **values))
    return spec


def retbench(*args, cwd: Path, prefect_home: Path, **popen) -> subprocess.CompletedProcess | subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PREFECT_HOME": str(prefect_home)}
    env.pop("PREFECT_API_URL", None)
    command = [sys.executable, "-m", "retbench.flows.cli", *map(str, args)]
    if popen:
        return subprocess.Popen(command, cwd=cwd, env=env, **popen)
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def prefect_home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("prefect-home")


def test_missing_dataset_is_one_line_before_prefect_starts_and_debug_adds_the_traceback(tmp_path, prefect_home):
    spec = write_spec(tmp_path, data=tmp_path / "no-such-folder")
    done = retbench("run", spec, cwd=tmp_path, prefect_home=prefect_home)
    message = (f"retbench: dataset.path {tmp_path / 'no-such-folder'}: not found; expected the jsonl collection's folder "
               "(relative paths are read from the spec file's folder)")
    assert (done.returncode, done.stderr) == (2, message + "\n")
    debug = retbench("run", spec, "--debug", cwd=tmp_path, prefect_home=prefect_home)
    assert debug.returncode == 2 and debug.stderr.startswith("Traceback") and debug.stderr.splitlines()[-1] == message
    assert "DatasetError" in debug.stderr


def test_output_dir_that_is_a_file_is_one_line_before_prefect_starts(tmp_path, prefect_home):
    tiny_collection(tmp_path / "data")
    (tmp_path / "taken").write_text("a file\n")
    done = retbench("run", write_spec(tmp_path, out=tmp_path / "taken"), cwd=tmp_path, prefect_home=prefect_home)
    assert (done.returncode, done.stderr) == (2, (
        f"retbench: output_dir {tmp_path / 'taken'} is a file, not a folder; point --output-dir (or output_dir in "
        "the spec) at a folder\n"))
    done = retbench("run", write_spec(tmp_path), "--output-dir", tmp_path / "taken" / "sub", cwd=tmp_path, prefect_home=prefect_home)
    assert done.returncode == 2 and done.stderr.startswith(
        f"retbench: output_dir {tmp_path / 'taken' / 'sub'} (its parent {tmp_path / 'taken'}) is a file")
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").iterdir())


def test_a_spec_with_several_errors_is_still_one_line(tmp_path, prefect_home):
    spec = write_spec(tmp_path).read_text().replace("k: [5, 10]", "k: [0]").replace("depth: 20", "depth: 20\nbogus: 1")
    (tmp_path / "spec.yaml").write_text(spec)
    done = retbench("run", tmp_path / "spec.yaml", cwd=tmp_path, prefect_home=prefect_home)
    assert (done.returncode, done.stderr) == (2, (
        f"retbench: {tmp_path / 'spec.yaml'}: invalid benchmark spec: k: k must be a non-empty list of "
        "positive integers; bogus: unknown key (expected one of: name, dataset, judgments, chunking, queries, providers, indexes, k, "
        "depth, output_dir, store_dir, store_mirror, history, statistics, lexical, rerankers, systems, report, plugins, "
        "python_path, filter_sweep, latency, sweep, verdict)\n"))


@pytest.mark.slow  # starts a real Prefect API server (tens of seconds on a busy machine)
def test_http_401_inside_the_flow_is_one_line(tmp_path, prefect_home):
    tiny_collection(tmp_path / "data")
    with FaultyServer(dim=8, api_key="the-key") as server:
        provider = f"{{name: api, kind: openai-compatible, options: {{base_url: '{server.base_url}/v1', model: m, max_retries: 0}}}}"
        spec = write_spec(tmp_path, provider=provider)
        done = retbench("run", spec, cwd=tmp_path, prefect_home=prefect_home)
        host = server.base_url.removeprefix("http://")
    message = (f"retbench: 401 from {host}: check the API key (none configured: set options.api_key_env "
               "or options.api_key_secret)")
    lines = done.stderr.splitlines()
    assert done.returncode == 2 and lines[-1] == message
    # Prefect's progress lines stay; the failure is told once, without Prefect's tracebacks and echoes.
    # Counted as "401 from", not "401": a log timestamp such as 08:40:14.401 or a port holds "401" too.
    assert "Traceback" not in done.stderr and done.stderr.count("401 from") == 1
    assert "Unauthorized" not in done.stderr and "HTTPStatusError" not in done.stderr
    assert not [line for line in lines if "| ERROR" in line or "Failed" in line]


def test_check_inputs_names_the_spec_key(tmp_path):
    from retbench.tasks.config.spec import load_spec
    from retbench.tasks.datasets.errors import DatasetError
    from retbench.tasks.stages.prepare import check_inputs
    from retbench.tasks.store.integrity import StoreError

    (tmp_path / "afile").write_text("x")
    tiny_collection(tmp_path / "data")
    check_inputs(load_spec(write_spec(tmp_path)))
    assert (tmp_path / "out").is_dir() and (tmp_path / "store").is_dir()
    with pytest.raises(DatasetError, match=r"dataset\.path .*afile: a file; expected the folder of the jsonl collection"):
        check_inputs(load_spec(write_spec(tmp_path, data=tmp_path / "afile")))
    with pytest.raises(StoreError, match=r"store_dir .*afile is a file, not a folder; point --store-dir"):
        check_inputs(load_spec(write_spec(tmp_path, store=tmp_path / "afile")))
    spec = write_spec(tmp_path)
    spec.write_text(spec.read_text().replace("split: all}", f"split: all, qrels: {tmp_path / 'none.qrels'}}}"))
    with pytest.raises(DatasetError, match=r"dataset\.qrels .*none\.qrels: not found; expected a TREC qrels file"):
        check_inputs(load_spec(spec))


def test_expected_failures_and_their_one_line(tmp_path):
    import errno

    from retbench.flows.errors import expected_failure, one_line
    from retbench.tasks.providers import create_provider
    from retbench.tasks.providers.secrets import resolve_secret
    from retbench.tasks.datasets.errors import DatasetError
    from retbench.tasks.store.files import write_bytes

    def raised(action) -> BaseException:
        try:
            action()
        except BaseException as error:  # noqa: BLE001
            return error
        raise AssertionError("nothing raised")

    def disk_full():
        def write(tmp):
            raise OSError(errno.ENOSPC, "No space left on device")
        from retbench.tasks.store.files import atomic_write
        atomic_write(tmp_path / "table.parquet", write)

    full = raised(disk_full)
    assert re.fullmatch(
        rf"retbench: no space left on the device while writing {re.escape(str(tmp_path / 'table.parquet'))} "
        r"\([\d.]+ [kMG]B free\); nothing stored was changed and the work done so far is kept: free space or move the "
        r"store / output directory, then rerun", one_line(expected_failure(full)))
    typo = raised(lambda: create_provider("hashing", {"dimm": 8}))
    assert one_line(expected_failure(typo)) == "retbench: invalid provider options: dimm: unknown key"
    missing = raised(lambda: resolve_secret("RETBENCH_SURELY_UNSET", what="cohere API key"))
    assert one_line(missing) == "retbench: cohere API key: environment variable RETBENCH_SURELY_UNSET is not set (or empty)"

    def wrapped():
        try:
            raise DatasetError("corpus.jsonl:3: bad")
        except DatasetError as error:
            raise RuntimeError("stage failed") from error
    assert one_line(expected_failure(raised(wrapped))) == "retbench: corpus.jsonl:3: bad"
    # A bug is not an expected failure: it keeps its traceback.
    assert expected_failure(raised(lambda: write_bytes(tmp_path / "x", "not bytes"))) is None
    assert expected_failure(KeyError("x")) is None


def test_missing_key_variable_is_one_line_before_prefect_starts(tmp_path, monkeypatch):
    from retbench.tasks.config.spec import load_spec
    from retbench.tasks.providers.secrets import SecretLookupError
    from retbench.tasks.stages.prepare import check_inputs

    tiny_collection(tmp_path / "data")
    provider = ("{name: api, kind: openai-compatible, options: {base_url: 'http://127.0.0.1:9/v1', model: m, "
                "api_key_env: RETBENCH_SURELY_UNSET, query_params_env: {sig: RETBENCH_SIG_UNSET}}}")
    spec = write_spec(tmp_path, provider=provider)
    monkeypatch.delenv("RETBENCH_SURELY_UNSET", raising=False)
    monkeypatch.delenv("RETBENCH_SIG_UNSET", raising=False)
    with pytest.raises(SecretLookupError, match=r"^providers\[0\]\.options\.api_key_env: environment variable "
                                                r"RETBENCH_SURELY_UNSET is not set"):
        check_inputs(load_spec(spec))
    monkeypatch.setenv("RETBENCH_SURELY_UNSET", "a-key")
    with pytest.raises(SecretLookupError, match=r"^providers\[0\]\.options\.query_params_env\.sig: environment "
                                                r"variable RETBENCH_SIG_UNSET is not set"):
        check_inputs(load_spec(spec))
    monkeypatch.delenv("RETBENCH_SURELY_UNSET")
    # Through the command: one line, exit 2, and no Prefect server was started (no Prefect output at all).
    prefect_home = tmp_path / "prefect-home"
    done = retbench("run", spec, cwd=tmp_path, prefect_home=prefect_home)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "retbench: providers[0].options.api_key_env: environment variable RETBENCH_SURELY_UNSET is not set (or empty); "
        "export it before the run (keys are read from the environment or a Prefect Secret block, never from the spec)"]
    # The server's process was killed while importing: no log, no database, not even the folder.
    assert not prefect_home.exists()


def test_after_an_expected_failure_prefects_echoes_and_cancelled_siblings_are_dropped():
    import logging

    from retbench.flows.errors import QuietExpectedFailures

    def record(message, exc=None):
        return logging.LogRecord("prefect.task_runs", logging.ERROR, __file__, 1, message, None,
                                 (type(exc), exc, None) if exc else None)

    crash = "Crash detected! Execution was interrupted by an unexpected exception: CancelledError: Task run cancelled by the task runner"
    quiet = QuietExpectedFailures()
    assert quiet.filter(record(crash))  # before any expected failure: a crash is news
    import errno

    assert not quiet.filter(record("Task run failed", OSError(errno.ENOSPC, "No space left on device", "x.parquet")))
    assert not quiet.filter(record(crash))  # the sibling the runner cancelled because of it
    assert not quiet.filter(record("Finished in state Failed('Task run encountered an exception')"))
    assert quiet.filter(record("Crash detected! Execution was interrupted by an unexpected exception: MemoryError"))


def test_judge_export_refusals_are_one_line(tmp_path, prefect_home):
    """Through the installed entry point: a folder that is not a run's output names the file it
    lacks, --depth 0 is refused; both before anything is written."""
    (tmp_path / "not-a-run").mkdir()
    done = retbench("judge", "export", tmp_path / "not-a-run", cwd=tmp_path, prefect_home=prefect_home)
    assert (done.returncode, done.stderr) == (2, (
        f"retbench: {tmp_path / 'not-a-run' / 'manifest.json'}: missing; expected the manifest of a finished run "
        f"(is {tmp_path / 'not-a-run'} a run's output folder?)\n"))
    done = retbench("judge", "export", tmp_path / "not-a-run", "--depth", "0", cwd=tmp_path, prefect_home=prefect_home)
    assert (done.returncode, done.stderr) == (2, "retbench: --depth must be at least 1 (got 0)\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["not-a-run"]
