"""A minimal Chrome DevTools Protocol client for headless Chromium: open a page at a given
viewport, read layout facts (scrollWidth), time the load, take a full-page screenshot.

The page itself runs no script (its CSP forbids it); DevTools evaluation is outside the page's CSP.
"""
from __future__ import annotations

import base64
import itertools
import json
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from websockets.sync.client import connect

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
_LISTENING = re.compile(r"DevTools listening on (ws://\S+)")


class Chromium:
    """One headless browser process; use as a context manager (the process is stopped on exit)."""

    def __init__(self, extra_args: list[str] | None = None):
        if CHROMIUM is None:
            raise RuntimeError("chromium is not installed")
        self.profile = tempfile.TemporaryDirectory(prefix="retbench-chromium-")
        self.process = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync",
             "--disable-background-networking", "--disable-component-update", "--hide-scrollbars",
             f"--user-data-dir={self.profile.name}", "--remote-debugging-port=0", *(extra_args or []), "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        url = None
        deadline = time.monotonic() + 60
        while url is None and time.monotonic() < deadline:
            line = self.process.stderr.readline()
            if not line and self.process.poll() is not None:
                break
            found = _LISTENING.search(line)
            url = found.group(1) if found else None
        if url is None:
            self.close()
            raise RuntimeError("chromium did not start its DevTools endpoint")
        self.ws = connect(url, max_size=None, open_timeout=30)
        self._ids = itertools.count(1)

    def send(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 60) -> dict:
        message_id = next(self._ids)
        message = {"id": message_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        self.ws.send(json.dumps(message))
        deadline = time.monotonic() + timeout
        while True:
            reply = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if reply.get("id") == message_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def wait_for(self, event: str, session: str, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            reply = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if reply.get("method") == event and reply.get("sessionId") == session:
                return reply.get("params", {})

    def open(self, url: str, width: int = 1280, height: int = 900) -> "Page":
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}, session)
        self.send("Page.enable", {}, session)
        started = time.perf_counter()
        self.send("Page.navigate", {"url": url}, session)
        self.wait_for("Page.loadEventFired", session)
        return Page(self, session, (time.perf_counter() - started) * 1000)

    def close(self):
        if getattr(self, "ws", None) is not None:
            self.ws.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.profile.cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Page:
    def __init__(self, browser: Chromium, session: str, load_ms: float):
        self.browser, self.session, self.load_ms = browser, session, load_ms

    def evaluate(self, expression: str, await_promise: bool = False):
        result = self.browser.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                        "awaitPromise": await_promise}, self.session)
        return result["result"].get("value")

    def first_frame_ms(self) -> float:
        """Milliseconds from the start of navigation to the first frame painted after the load event."""
        return self.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(performance.now()))))",
                             await_promise=True)

    def screenshot(self, path: str | Path, full_page: bool = True) -> Path:
        params: dict = {"format": "png"}
        if full_page:
            width = self.evaluate("document.documentElement.clientWidth")
            height = self.evaluate("document.documentElement.scrollHeight")
            params.update(captureBeyondViewport=True, clip={"x": 0, "y": 0, "width": width, "height": height, "scale": 1})
        data = self.browser.send("Page.captureScreenshot", params, self.session)["data"]
        path = Path(path)
        path.write_bytes(base64.b64decode(data))
        return path
