"""The embedded Prefect API server of a `retbench run`: its process is started first, imports
Prefect's server while this process checks the spec and data, and serves once they pass (or
ends, having written nothing, when they are refused); it boots while this process loads the
pipeline, and is tied to this process's life, so that a run killed with SIGKILL (no atexit,
no cleanup) leaves no server process behind.

Prefect 3's own "ephemeral" mode starts the same server (`python -m uvicorn --factory
prefect.server.api.server:create_app`, SubprocessASGIServer) lazily, from the first client,
and waits for it there: the server's seconds of imports and migrations then come on top of
ours, and importing SubprocessASGIServer imports the whole server into this process too.
Here the child (flows/embedded_api_child.py) is launched first, with the environment Prefect
gives it, and Prefect is pointed at it through PREFECT_API_URL before it is imported. The child
asks the kernel for SIGTERM when its parent dies (prctl PR_SET_PDEATHSIG), set between fork and
exec.
"""
from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib.util
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from retbench.flows import prefect_database
from retbench.flows.environment import EnvironmentFault, api_start_failure, loopback_port

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
# What SubprocessASGIServer._run_uvicorn_command adds to the environment (Prefect 3.4-3.9).
_SERVER_ENV = {"PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1"}
# Our default, unless the environment says otherwise: no automations (reactive triggers and
# their actions) on a server that exists only for the run. Starting them read the automation
# tables on every start: 0.3 s of a 3.8 s boot, on the run's critical path.
_SERVER_DEFAULTS = {"PREFECT_SERVER_SERVICES_TRIGGERS_ENABLED": "false"}


def _die_with_parent(parent_pid: int, prctl) -> None:
    # Runs in the forked child: only a system call and getppid, no imports or allocation.
    prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


class EmbeddedApi:
    """A launched API server process: wait for it with `wait_until_ready`, end it with `stop`."""

    def __init__(self, process: subprocess.Popen, port: int, log_path: Path, builds_database: bool = False):
        self.process, self.port, self.log_path = process, port, log_path
        self.api_url = f"http://127.0.0.1:{port}/api"
        self.builds_database = builds_database  # from nothing: kept as the template once it is up

    def wait_until_ready(self) -> None:
        """Block until the server answers its health check, within Prefect's start-up timeout."""
        import httpx

        timeout = float(os.environ.get("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90"))
        deadline = time.monotonic() + timeout
        with httpx.Client() as client:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise api_start_failure(self.process.returncode, self.port, self.log_path)
                try:
                    if client.get(f"{self.api_url}/health", timeout=2).status_code == 200:
                        if self.builds_database:
                            prefect_database.keep_as_template(self.log_path.parent)
                        self._yield_to_the_run()
                        return
                except httpx.HTTPError:
                    pass
                time.sleep(0.05)
        raise EnvironmentFault(f"the embedded Prefect API server did not answer within {timeout:.0f} s (its log: "
                               f"{self.log_path}); raise PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS on a busy machine")

    def _yield_to_the_run(self) -> None:
        """Its start-up was on the run's critical path; what it does from now on (recording
        events and logs) is not, and it shares the cores with the model's threads, which all
        wait when one is preempted: it runs at a lower priority (nice 10), still at full speed
        on an idle core. Linux keeps a nice value per thread (threads started later inherit
        their starter's), hence every thread of it."""
        for task in Path(f"/proc/{self.process.pid}/task").glob("*"):
            with contextlib.suppress(OSError, ValueError):
                os.setpriority(os.PRIO_PROCESS, int(task.name), 10)

    def stop(self) -> None:
        """Send the logs and events still queued for the API, then stop the server (instead of
        at exit, so that a line printed after this is the last one)."""
        if self.process.poll() is None:
            drain_prefect_queues()
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class PendingApi:
    """The server's process, importing Prefect's server while this one checks its inputs:
    `start()` once they pass, `discard()` when they are refused (it then ends having written
    nothing: no port, no database, no log; an empty PREFECT_HOME it created is removed)."""

    def __init__(self, process: subprocess.Popen, port: int, log_path: Path, home_existed: bool):
        self.process, self.port, self.log_path, self.home_existed = process, port, log_path, home_existed

    def start(self) -> EmbeddedApi:
        """Let the server start serving, and point Prefect (not imported yet) at it."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        builds_database = prefect_database.seed(self.log_path.parent)  # a new home: a migrated copy
        with contextlib.suppress(BrokenPipeError):  # it died: wait_until_ready reports that
            self.process.stdin.write(b"start\n")
            self.process.stdin.close()
        api = EmbeddedApi(self.process, self.port, self.log_path, builds_database)
        atexit.register(api.stop)
        os.environ["PREFECT_API_URL"] = api.api_url
        # The server is this installation's own Prefect: the client's version handshake (a
        # request to /admin/version when the flow starts) can only agree.
        os.environ.setdefault("PREFECT_CLIENT_SERVER_VERSION_CHECK_ENABLED", "false")
        return api

    def discard(self) -> None:
        # Killed, not told: it may still be importing for seconds, and it has written nothing.
        self.process.kill()
        self.process.wait()
        with contextlib.suppress(BrokenPipeError):
            self.process.stdin.close()
        if not self.home_existed:  # importing Prefect made PREFECT_HOME; a refused run keeps no trace
            with contextlib.suppress(OSError):
                self.log_path.parent.rmdir()


def preload_embedded_api() -> PendingApi | None:
    """Start the embedded API server's process now, before the inputs are checked: it spends
    its seconds of imports while this process checks them, and serves only on `start()`.
    None when an API URL is configured or embedded mode is off.

    Must run before Prefect is imported here (Prefect reads PREFECT_API_URL into its settings
    then). The parent-death signal fires when the *thread* that forked the child ends: the main
    thread lives as long as the run.
    """
    if "prefect" in sys.modules:
        raise RuntimeError("preload_embedded_api() must run before Prefect is imported")
    if not sys.platform.startswith("linux") or os.environ.get("PREFECT_API_URL"):
        return None
    if os.environ.get("PREFECT_SERVER_EPHEMERAL_ENABLED", "true").lower() in {"0", "false", "no"}:
        return None
    prefect_dir = Path(importlib.util.find_spec("prefect").origin).parent
    port = loopback_port()  # RETBENCH_API_PORT, or a free one; one that cannot be bound is refused now
    parent, prctl = os.getpid(), ctypes.CDLL(None, use_errno=True).prctl  # looked up here, not after fork
    # The server's own messages (e.g. a request cut off when it is stopped at the end of a run)
    # go to a file in PREFECT_HOME, not into the run's console output.
    home = Path(os.environ.get("PREFECT_HOME", Path.home() / ".prefect"))
    log_path, home_existed = home / "embedded-api.log", home.exists()
    process = subprocess.Popen(
        [sys.executable, "-m", "retbench.flows.embedded_api_child", str(log_path), "--app-dir", str(prefect_dir.parent),
         "--factory", "prefect.server.api.server:create_app", "--host", "127.0.0.1", "--port", str(port),
         "--log-level", "error", "--lifespan", "on"],
        env={**_SERVER_DEFAULTS, **os.environ, **_SERVER_ENV}, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, preexec_fn=lambda: _die_with_parent(parent, prctl),
        # Its own session: a Ctrl-C sent to the terminal's process group would stop it under the
        # run, which is still sending it logs and events (then "EventsWorker failed" and tracebacks);
        # the run stops it itself (flows/interrupts.py), or the parent-death signal does.
        start_new_session=True,
    )
    return PendingApi(process, port, log_path, home_existed)


def drain_prefect_queues() -> None:
    """Send what Prefect's log and events workers still hold while the server is up: drained
    only at interpreter exit, after the server stopped, the last task runs' state events (the
    server records task runs from them) and log lines were lost, after a wait on a dead socket."""
    if "prefect._internal.concurrency.services" not in sys.modules:
        return
    from prefect._internal.concurrency.services import QueueService

    # Each service warns "Still processing items: N items remaining..." under its class name when
    # it is stopped with items queued: chatter of the drain asked for here, which a loaded machine
    # printed above a stopped run's one `retbench:` line. A dropped item (a full queue) still warns.
    chatter = _DrainChatter()
    services = [logging.getLogger(cls.__name__) for cls in _subclasses(QueueService)]
    for service in services:
        service.addFilter(chatter)
    try:
        QueueService.drain_all(timeout=10)
    finally:
        for service in services:
            service.removeFilter(chatter)


class _DrainChatter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Still processing items")


def _subclasses(cls: type) -> list[type]:
    found = []
    for sub in cls.__subclasses__():
        found += [sub, *_subclasses(sub)]
    return found
