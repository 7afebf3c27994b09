"""A `retbench run` killed with SIGKILL leaves no Prefect API server process behind."""
import os
import signal
import subprocess
import time
from pathlib import Path

from tests.pipeline.test_cli_errors import retbench, tiny_collection, write_spec


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited; only its parent's wait is missing


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def test_sigkilled_run_leaves_no_prefect_server(tmp_path):
    tiny_collection(tmp_path / "data")
    run = retbench("run", write_spec(tmp_path), cwd=tmp_path, prefect_home=tmp_path / "prefect",
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server = None
    try:
        deadline = time.monotonic() + 120
        while server is None and time.monotonic() < deadline and run.poll() is None:
            server = next((pid for pid in children(run.pid) if "prefect.server.api.server:create_app" in cmdline(pid)), None)
            time.sleep(0.1)
        assert server is not None, "the run never started Prefect's API server"
        time.sleep(1.0)  # let the server get going
        os.kill(run.pid, signal.SIGKILL)
        run.wait()
        deadline = time.monotonic() + 10
        while alive(server) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(server), f"Prefect server {server} outlived the killed run: {cmdline(server)}"
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        if server is not None and alive(server) and "prefect.server.api.server:create_app" in cmdline(server):
            os.kill(server, signal.SIGKILL)
