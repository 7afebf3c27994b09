"""A latency-bound OpenAI-compatible embedding server on 127.0.0.1, like a hosted API: every
`POST .../embeddings` answers deterministic vectors (base64, as `encoding_format: base64` asks)
after sleeping a fixed number of seconds; `GET /stats` tells requests served and the most ever
in flight at once (the tests' check on per-worker concurrency).

    python support/latency_server.py --port N --latency 0.25 --dim 384

`latency_server(...)` starts it as a separate process on a free port and stops it.
"""
from __future__ import annotations

import argparse
import base64
import contextlib
import json
import subprocess
import sys
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np


def vector_for(text: str, dim: int) -> np.ndarray:
    """The server's 'embedding' of `text`: what a correct client stores (before normalising)."""
    return np.random.default_rng(zlib.crc32(text.encode("utf-8"))).standard_normal(dim).astype("<f4")


class _State:
    def __init__(self):
        self.lock = threading.Lock()
        self.in_flight = self.max_in_flight = self.requests = self.texts = 0


def serve(port: int, latency: float, dim: int) -> None:
    state = _State()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: the client's pool reuses connections

        def log_message(self, *args):
            pass

        def do_GET(self):
            with state.lock:
                self._send(200, {"requests": state.requests, "texts": state.texts, "max_in_flight": state.max_in_flight})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            if not self.path.endswith("/embeddings"):
                return self._send(404, {"error": self.path})
            with state.lock:
                state.in_flight += 1
                state.max_in_flight = max(state.max_in_flight, state.in_flight)
            try:
                time.sleep(latency)
                texts = body["input"]
                data = [{"object": "embedding", "index": i,
                         "embedding": base64.b64encode(vector_for(t, dim).tobytes()).decode("ascii")}
                        for i, t in enumerate(texts)]
                tokens = sum(len(t.split()) for t in texts)
                self._send(200, {"object": "list", "data": data, "model": body.get("model"),
                                 "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})
            finally:
                with state.lock:
                    state.in_flight -= 1
                    state.requests += 1
                    state.texts += len(body.get("input", []))

        def _send(self, status: int, payload) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    server.serve_forever()


@contextlib.contextmanager
def latency_server(latency: float, dim: int = 64):
    """Base URL (…/v1) of a server process on a free port of 127.0.0.1; stopped on exit."""
    from retbench.support.faulty_server import free_port, stop_process, wait_for_http

    port = free_port()
    process = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--port", str(port),
                                "--latency", str(latency), "--dim", str(dim)])
    try:
        wait_for_http(f"http://127.0.0.1:{port}/stats", 30)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        stop_process(process)


def stats(base_url: str) -> dict:
    import httpx

    return httpx.get(base_url.removesuffix("/v1") + "/stats", timeout=10).json()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--latency", type=float, default=0.25)
    parser.add_argument("--dim", type=int, default=64)
    options = parser.parse_args()
    serve(options.port, options.latency, options.dim)
