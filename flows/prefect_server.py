"""The embedded Prefect API server of a `retbench run`, tied to this process's life:
a run killed with SIGKILL (no atexit, no cleanup) leaves no server process behind.

Prefect 3 starts its "ephemeral" API as a child process (`python -m uvicorn ...
prefect.server.api.server:create_app`, SubprocessASGIServer) and stops it from an
atexit hook, which a SIGKILL skips. Here the child asks the kernel for SIGTERM when
its parent dies (prctl PR_SET_PDEATHSIG), set between fork and exec.
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import types

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _die_with_parent(parent_pid: int, prctl) -> None:
    # Runs in the forked child: only a system call and getppid, no imports or allocation.
    prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


class _SubprocessDyingWithParent(types.ModuleType):
    """`subprocess` as Prefect's server module sees it: its Popen children get a parent-death signal."""

    def __init__(self) -> None:
        super().__init__("subprocess")
        self._prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here, not after fork

    def __getattr__(self, name: str):
        return getattr(subprocess, name)

    def Popen(self, *args, **kwargs):  # noqa: N802 - same name as what it stands for
        parent = os.getpid()
        kwargs.setdefault("preexec_fn", lambda: _die_with_parent(parent, self._prctl))
        return subprocess.Popen(*args, **kwargs)


def start_ephemeral_server():
    """Start Prefect's embedded API server now, from this (the main) thread, so that it dies
    with this process; returns the server (to stop) or None when an API URL is configured.

    The parent-death signal fires when the *thread* that forked the child ends, so the server
    must not be started lazily from one of Prefect's worker threads: started here first, the
    later lazy starts find it running (SubprocessASGIServer is a per-port singleton).
    """
    if not sys.platform.startswith("linux"):
        return None
    from prefect.server.api import server as server_module
    from prefect.settings import PREFECT_API_URL, PREFECT_SERVER_EPHEMERAL_ENABLED

    if PREFECT_API_URL.value() or not PREFECT_SERVER_EPHEMERAL_ENABLED.value():
        return None
    if not isinstance(server_module.subprocess, _SubprocessDyingWithParent):
        server_module.subprocess = _SubprocessDyingWithParent()
    server = server_module.SubprocessASGIServer()
    server.start()
    return server


def stop_ephemeral_server(server) -> None:
    """Send the logs still queued for the API, then stop the server (instead of at exit,
    so that a line printed after this is the last one)."""
    import logging

    from prefect.logging.handlers import APILogHandler

    loggers = [logging.getLogger()] + [logger for logger in logging.Logger.manager.loggerDict.values()
                                       if isinstance(logger, logging.Logger)]
    for handler in {h for logger in loggers for h in logger.handlers if isinstance(h, APILogHandler)}:
        handler.flush()
    server.stop()
