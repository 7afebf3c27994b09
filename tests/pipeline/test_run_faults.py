"""Faults of the machine and of a served model, through `retbench run` in its own process: an
unreachable or wrong PREFECT_API_URL, a PREFECT_HOME that cannot be written, a port that cannot be
bound, a model whose dimension changed between runs. Each ends in one `retbench: ...` line, exit 2."""
from __future__ import annotations

import functools
import json
import os
import socket
import subprocess
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from retbench.support.faulty_server import FaultyServer
from retbench.support.paths import ROOT
from tests.pipeline.test_cli_errors import tiny_collection, write_spec
from tests.pipeline.test_environment_faults import tmpfs  # noqa: F401  (a fixture)

FIX = "start that server, correct the variable, or unset it (retbench then starts its own API for the run)"


def retbench(*args, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "PREFECT_HOME": str(cwd / "prefect-home"), **env}
    for name in ("PREFECT_API_URL", "RETBENCH_API_PORT"):
        if name not in env:
            environment.pop(name, None)
    return subprocess.run([sys.executable, "-m", "retbench.flows.cli", *map(str, args)], cwd=cwd, env=environment,
                          capture_output=True, text=True, timeout=300)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def spec(tmp_path) -> Path:
    tiny_collection(tmp_path / "data")
    return write_spec(tmp_path)


def test_an_unreachable_or_wrong_prefect_api_url_is_one_line_before_anything_starts(tmp_path, spec):
    port = closed_port()
    done = retbench("run", spec, cwd=tmp_path, PREFECT_API_URL=f"http://127.0.0.1:{port}/api")
    message = (f"retbench: PREFECT_API_URL http://127.0.0.1:{port}/api: cannot connect ([Errno 111] Connection refused); "
               f"{FIX}")
    assert (done.returncode, done.stderr) == (2, message + "\n")
    debug = retbench("run", spec, "--debug", cwd=tmp_path, PREFECT_API_URL=f"http://127.0.0.1:{port}/api")
    assert debug.returncode == 2 and debug.stderr.startswith("Traceback") and debug.stderr.splitlines()[-1] == message

    done = retbench("run", spec, cwd=tmp_path, PREFECT_API_URL="localhost:4200/api")
    assert (done.returncode, done.stderr) == (2, "retbench: PREFECT_API_URL 'localhost:4200/api' is not an http(s) URL "
                                                 f"with a host; expected e.g. http://127.0.0.1:4200/api: {FIX}\n")

    # A web server that is not a Prefect API (here: files, so /not-api/health is a 404).
    web = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(tmp_path / "data")))
    threading.Thread(target=web.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{web.server_address[1]}/not-api"
        done = retbench("run", spec, cwd=tmp_path, PREFECT_API_URL=url)
    finally:
        web.shutdown()
        web.server_close()
    assert (done.returncode, done.stderr) == (2, (
        f"retbench: PREFECT_API_URL {url}: HTTP 404 from {url}/health, not a Prefect API (its URL ends in /api, "
        f"e.g. http://127.0.0.1:4200/api); {FIX}\n"))
    assert not (tmp_path / "out").exists() and not (tmp_path / "prefect-home").exists()  # nothing started, no trace


def test_a_prefect_home_that_cannot_be_written_is_one_line(tmp_path, spec):
    (tmp_path / "afile").write_text("not a folder\n")
    home = tmp_path / "afile" / "prefect"
    done = retbench("run", spec, cwd=tmp_path, PREFECT_HOME=str(home))
    assert (done.returncode, done.stderr) == (2, f"retbench: PREFECT_HOME {home} cannot be written (a parent is a file, "
                                                 "not a folder); point PREFECT_HOME at a writable folder\n")


def test_a_read_only_prefect_home_is_one_line(tmp_path, spec, tmpfs):  # noqa: F811
    point, remount = tmpfs
    (point / "prefect").mkdir()
    remount("ro")
    done = retbench("run", spec, cwd=tmp_path, PREFECT_HOME=str(point / "prefect"))
    assert (done.returncode, done.stderr) == (2, f"retbench: PREFECT_HOME {point / 'prefect'} cannot be written "
                                                 "(read-only filesystem); point PREFECT_HOME at a writable folder\n")


def test_a_cached_run_in_a_read_only_working_directory_moves_the_default_prefect_home(tmp_path, spec, tmpfs):  # noqa: F811
    """PREFECT_HOME unset: its default, ./.prefect, cannot be made in a read-only working directory,
    so it moves to the per-user cache folder, said in one INFO line; the run is not refused."""
    point, remount = tmpfs
    first = retbench("run", spec, cwd=tmp_path)  # fills the store and the output (PREFECT_HOME set)
    assert first.returncode == 0, first.stderr[-3000:]
    remount("ro")
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(tmp_path / "home")}
    for name in ("PREFECT_HOME", "PREFECT_API_URL", "XDG_CACHE_HOME", "RETBENCH_API_PORT"):
        environment.pop(name, None)
    done = subprocess.run([sys.executable, "-m", "retbench.flows.cli", "run", str(spec)], cwd=point,
                          env=environment, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    fallback = tmp_path / "home" / ".cache" / "retbench" / "prefect"
    said = [line for line in done.stderr.splitlines() if "PREFECT_HOME" in line]
    assert len(said) == 1 and "| INFO    | retbench - " in said[0], done.stderr[-3000:]
    assert said[0].endswith(f"PREFECT_HOME: {point / '.prefect'} cannot be written (read-only filesystem), so "
                            f"Prefect's files go to {fallback} (set PREFECT_HOME to choose)")
    assert "nothing to compute" in done.stderr
    assert not list(point.iterdir())


def test_a_port_that_cannot_be_bound_is_one_line(tmp_path, spec):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = retbench("run", spec, cwd=tmp_path, RETBENCH_API_PORT=str(port))
    assert (done.returncode, done.stderr) == (2, (
        f"retbench: the embedded Prefect API cannot bind port {port} of 127.0.0.1 (RETBENCH_API_PORT) (address already "
        "in use); choose another RETBENCH_API_PORT or unset it\n"))
    assert not (tmp_path / "out" / "summary.parquet").exists()


@pytest.mark.slow  # two runs with a real Prefect API server (tens of seconds on a busy machine)
def test_a_served_model_whose_dimension_changed_is_one_line_and_the_cache_is_kept(tmp_path):
    data = tiny_collection(tmp_path / "data")
    with FaultyServer(dim=8) as server:
        provider = f"{{name: api, kind: openai-compatible, options: {{base_url: '{server.base_url}/v1', model: m}}}}"
        spec = write_spec(tmp_path, provider=provider)
        assert retbench("run", spec, cwd=tmp_path).returncode == 0
        (folder,) = tmp_path.glob("store/embeddings/openai-compatible-*")
        assert json.loads((folder / "fingerprint.json").read_text())["vector_dim"] == 8
        kept = {p.name: p.read_bytes() for p in folder.glob("shard-*")}
        server.dim = 6  # another model behind the same URL and name; a new document to embed
        with open(data / "corpus.jsonl", "a") as corpus:
            corpus.write(json.dumps({"id": "d6", "text": "a new document"}) + "\n")
        done = retbench("run", spec, cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1] == (
        f"retbench: api: the server now returns 6-d vectors; the cache holds 8-d ones (model changed?): set a new model "
        f"name, or remove {folder}")
    assert {p.name: p.read_bytes() for p in folder.glob("shard-*")} == kept
