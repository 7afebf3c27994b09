"""Faults of the machine a run starts on, not of its spec: a Prefect API URL that does not answer,
a PREFECT_HOME that cannot be written, a loopback port that cannot be bound. Checked before any
stage runs, each refused with one line that says what to change (flows/errors.py: exit 2)."""
from __future__ import annotations

import contextlib
import errno
import os
import socket
import uuid
from pathlib import Path

API_URL_FIX = "start that server, correct the variable, or unset it (retbench then starts its own API for the run)"
_PROBE_SECONDS = 5.0  # an API that does not answer its health check within this is down for the run


class EnvironmentFault(RuntimeError):
    """The environment cannot run a benchmark; the message names the variable or path and the fix."""


def check_environment() -> list[str]:
    """Every check of this module that applies, fastest first; raises EnvironmentFault. Returns
    what the caller should say at INFO (a PREFECT_HOME moved to the cache folder)."""
    notices = check_prefect_home()
    if os.environ.get("PREFECT_API_URL"):
        check_api_url(os.environ["PREFECT_API_URL"])
    return notices


def check_prefect_home(defaulted: bool | None = None) -> list[str]:
    """PREFECT_HOME must be a folder this process can write (Prefect keeps its profile, and the
    embedded API its database and log, there). When it is retbench's default, ./.prefect, in a
    working directory that cannot be written (a read-only checkout, a container's /), it moves
    to the per-user cache folder (prefect_cache_home) and says so; a PREFECT_HOME the user set is
    never moved. Folders created only to probe are removed, so a run refused later leaves no trace.
    `defaulted`: whether PREFECT_HOME is the default (None: as retbench.flows found it)."""
    if defaulted is None:
        from retbench.flows import PREFECT_HOME_DEFAULTED as defaulted
    home = Path(os.environ.get("PREFECT_HOME", Path.home() / ".prefect"))
    try:
        _probe_folder(home)
        return []
    except OSError as error:
        if not defaulted:
            raise EnvironmentFault(f"PREFECT_HOME {home} cannot be written ({_reason(error)}); point PREFECT_HOME "
                                   "at a writable folder") from error
        first = error
    fallback = prefect_cache_home()
    try:
        _probe_folder(fallback)
    except OSError as error:
        raise EnvironmentFault(f"PREFECT_HOME: neither the default {home} ({_reason(first)}) nor {fallback} "
                               f"({_reason(error)}) can be written; point PREFECT_HOME at a writable folder") from error
    os.environ["PREFECT_HOME"] = str(fallback)
    return [f"PREFECT_HOME: {home} cannot be written ({_reason(first)}), so Prefect's files go to {fallback} "
            "(set PREFECT_HOME to choose)"]


def prefect_cache_home() -> Path:
    """Where PREFECT_HOME goes when ./.prefect cannot be written: $XDG_CACHE_HOME/retbench/prefect,
    else ~/.cache/retbench/prefect (the XDG base directory default)."""
    cache = os.environ.get("XDG_CACHE_HOME", "").strip()
    root = Path(cache) if cache and Path(cache).is_absolute() else Path.home() / ".cache"  # relative: ignored, per XDG
    return root / "retbench" / "prefect"


def _probe_folder(home: Path) -> None:
    """Create `home` (and its parents), write and remove a file in it; the folders made only for
    this are removed again. Raises OSError when it cannot be written."""
    created = [folder for folder in (home, *home.parents) if not folder.exists()]  # deepest first
    try:
        home.mkdir(parents=True, exist_ok=True)
        probe = home / f".write-probe-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        probe.write_bytes(b"ok")
        probe.unlink()
    finally:
        for folder in created:
            with contextlib.suppress(OSError):
                folder.rmdir()


def check_api_url(url: str) -> None:
    """A PREFECT_API_URL set in the environment must answer Prefect's health check (`<url>/health`)."""
    import httpx

    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError) as error:
        raise EnvironmentFault(f"PREFECT_API_URL {url!r} is not a URL ({error}); expected e.g. "
                               f"http://127.0.0.1:4200/api: {API_URL_FIX}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise EnvironmentFault(f"PREFECT_API_URL {url!r} is not an http(s) URL with a host; expected e.g. "
                               f"http://127.0.0.1:4200/api: {API_URL_FIX}")
    health = url.rstrip("/") + "/health"
    headers = {"Authorization": f"Bearer {os.environ['PREFECT_API_KEY']}"} if os.environ.get("PREFECT_API_KEY") else {}
    try:
        answer = httpx.get(health, headers=headers, timeout=_PROBE_SECONDS, verify=_tls_verify())
    except httpx.TimeoutException:
        raise EnvironmentFault(f"PREFECT_API_URL {url}: no answer within {_PROBE_SECONDS:.0f} s; {API_URL_FIX}") from None
    except httpx.HTTPError as error:
        raise EnvironmentFault(f"PREFECT_API_URL {url}: cannot connect ({_httpx_reason(error)}); {API_URL_FIX}") from None
    if answer.status_code in (401, 403):
        raise EnvironmentFault(f"PREFECT_API_URL {url}: HTTP {answer.status_code} from {health}; check PREFECT_API_KEY")
    if answer.status_code != 200:
        raise EnvironmentFault(f"PREFECT_API_URL {url}: HTTP {answer.status_code} from {health}, not a Prefect API "
                               f"(its URL ends in /api, e.g. http://127.0.0.1:4200/api); {API_URL_FIX}")


def loopback_port() -> int:
    """The embedded API's port: RETBENCH_API_PORT when set (a firewall that opens one port), else
    one the kernel has free; either way bound once here, so a port that cannot be had is told now."""
    wanted = os.environ.get("RETBENCH_API_PORT", "").strip()
    try:
        port = int(wanted or 0)
        if not 0 <= port <= 65535:
            raise ValueError
    except ValueError:
        raise EnvironmentFault(f"RETBENCH_API_PORT {wanted!r} is not a port number (1-65535); "
                               "correct it, or unset it for a free port") from None
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", port))
            return sock.getsockname()[1]
    except OSError as error:
        where = f"port {port} of 127.0.0.1 (RETBENCH_API_PORT)" if port else "a free port of 127.0.0.1"
        fix = "choose another RETBENCH_API_PORT or unset it" if port else "set PREFECT_API_URL to a running Prefect server"
        raise EnvironmentFault(f"the embedded Prefect API cannot bind {where} ({_reason(error)}); {fix}") from None


def api_start_failure(code: int, port: int, log_path: Path) -> EnvironmentFault:
    """The embedded API server exited while starting: its log's last line says why (a port taken
    in the moment between our probe and its bind is the usual one)."""
    last = ""
    with contextlib.suppress(OSError):
        lines = [line.strip() for line in log_path.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
        last = lines[-1] if lines else ""
    if "address already in use" in last.lower():
        return EnvironmentFault(f"the embedded Prefect API could not bind port {port} of 127.0.0.1 (address already "
                                "in use: another process took it); rerun, or set RETBENCH_API_PORT to a free port")
    said = f": {last}" if last else ""
    return EnvironmentFault(f"the embedded Prefect API server exited with code {code} while starting on port {port}"
                            f"{said} (its log: {log_path})")


def _tls_verify():
    """Prefect's own TLS settings for its client, so the probe trusts what the run will trust."""
    if os.environ.get("PREFECT_API_TLS_INSECURE_SKIP_VERIFY", "").lower() in ("1", "true", "yes"):
        return False
    return os.environ.get("PREFECT_API_SSL_CERT_FILE") or True


def _reason(error: OSError) -> str:
    names = {errno.EROFS: "read-only filesystem", errno.EACCES: "permission denied", errno.EPERM: "operation not permitted",
             errno.ENOSPC: "no space left on device", errno.ENOTDIR: "a parent is a file, not a folder",
             errno.EADDRINUSE: "address already in use", errno.EADDRNOTAVAIL: "address not available"}
    return names.get(error.errno, error.strerror or type(error).__name__)


def _httpx_reason(error: Exception) -> str:
    # httpx wraps the socket error; its innermost cause reads best ("[Errno 111] Connection refused").
    while error.__cause__ is not None or error.__context__ is not None:
        error = error.__cause__ or error.__context__
    return str(error) or type(error).__name__
