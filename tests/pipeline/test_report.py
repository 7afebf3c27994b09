"""The HTML report in headless Chromium: it renders, has the tables, runs no script from
the data, and makes no network request (a loopback recorder counts any attempt)."""
import json
import re
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import polars as pl
import pytest

from retbench.tasks.reporting.html import md_escape
from retbench.support.paths import ROOT

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


# Chromium's own background traffic (clock sync, component updates), present for an
# empty page too; anything else reaching the recorder came from the report.
BROWSER_HOSTS = re.compile(r"^(GET|POST|CONNECT) (http://)?[a-z0-9.-]*(google\.com|googleapis\.com)[:/]")


class Recorder:
    """A TCP listener on 127.0.0.1 that keeps the first line of every request (used as beacon target and proxy)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.requests: list[str] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.settimeout(2)
            try:
                self.requests.append(conn.recv(512).decode("latin-1").split("\r\n")[0])
            except OSError:
                self.requests.append("(connection without a request line)")
            conn.close()

    def page_requests(self) -> list[str]:
        return [r for r in self.requests if not BROWSER_HOSTS.match(r)]

    def close(self):
        self.sock.close()


def hostile_sample(target: Path, beacon: str) -> None:
    """The sample benchmark with script and image payloads in titles, texts and ids."""
    shutil.copytree(ROOT / "data" / "sample", target)
    payloads = [
        f'<script>document.title="PWNED"</script><img src="{beacon}/script">',
        f'<img src=x onerror="document.title=\'PWNED\'"><img src="{beacon}/img">',
        f'[link](javascript:alert(1)) | <iframe src="{beacon}/frame"></iframe>',
    ]
    corpus = [json.loads(line) for line in (target / "corpus.jsonl").read_text().splitlines()]
    queries = [json.loads(line) for line in (target / "queries.jsonl").read_text().splitlines()]
    qrels = [json.loads(line) for line in (target / "qrels.jsonl").read_text().splitlines()]
    for i, payload in enumerate(payloads):
        corpus[i]["title"] = payload + corpus[i]["title"]
        queries[i]["text"] = payload + " " + queries[i]["text"]
        queries[i]["category"] = payload
    old_id = queries[3]["id"]
    # No whitespace (ids cannot hold it); browsers read "/" as an attribute separator, so this is still a live tag.
    queries[3]["id"] = f'<img/src="{beacon}/id">'
    for row in qrels:
        if row["query_id"] == old_id:
            row["query_id"] = queries[3]["id"]
    for name, rows in (("corpus", corpus), ("queries", queries), ("qrels", qrels)):
        (target / f"{name}.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


@pytest.fixture(scope="module")
def hostile_report(tmp_path_factory, prefect_harness):
    from retbench.flows.benchmark import benchmark

    recorder = Recorder()
    base = tmp_path_factory.mktemp("report")
    beacon = f"http://127.0.0.1:{recorder.port}"
    hostile_sample(base / "data", beacon)
    spec = base / "spec.yaml"
    spec.write_text(f"""
name: hostile
dataset: {{path: {base / 'data'}, format: jsonl, split: all}}
chunking: {{strategy: paragraph, max_words: 120}}
providers: [{{name: lexical, kind: hashing}}]
indexes: {{ivf: {{nprobe: [1]}}}}
output_dir: {base / 'out'}
store_dir: {base / 'store'}
""")
    benchmark(str(spec))
    yield base / "out", recorder
    recorder.close()


@pytest.mark.skipif(CHROMIUM is None, reason="Debian chromium is not installed (.ci/run installs it)")
def test_report_renders_offline_without_running_data(hostile_report, tmp_path):
    out, recorder = hostile_report
    command = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
        # Any request the page makes, to any host, goes to the recorder.
        f"--proxy-server=http://127.0.0.1:{recorder.port}", "--proxy-bypass-list=<-loopback>",
        "--virtual-time-budget=3000", "--dump-dom", (out / "report.html").as_uri(),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    dom = result.stdout
    assert "<h1>retbench: hostile</h1>" in dom, result.stderr[-2000:]
    for heading in ("Verdict", "Quality against cost, latency and size", "Regressions", "Where it fails",
                    "Languages and categories", "Approximate search", "Cost, latency and storage"):
        assert f">{heading}</h2>" in dom
    # The verdict's, the slices' and the trend's figures are inline SVG; setting names in them stay text.
    assert dom.count("<table>") >= 5 and dom.count("<svg") >= 2 and 'role="img"' in dom
    assert "PWNED" not in dom.split("</title>")[0]  # no payload changed the title
    assert "<script" not in dom.lower()  # payloads stayed text
    assert "&lt;script&gt;" in dom or "&lt;img" in dom
    time.sleep(0.5)
    assert recorder.page_requests() == []


def test_markdown_report_escapes_user_text(hostile_report):
    out, _ = hostile_report
    markdown = (out / "report.md").read_text()
    assert "<script" not in markdown and "<img" not in markdown and "<iframe" not in markdown
    assert "\\[link\\]\\(javascript:alert\\(1\\)\\) \\|" in markdown or "javascript" not in markdown
    assert md_escape("a|b<c>") == "a\\|b&lt;c&gt;"


def test_report_lists_every_setting(hostile_report):
    out, _ = hostile_report
    summary = pl.read_parquet(out / "summary.parquet")
    html = (out / "report.html").read_text()
    assert html.count("<tr>") > summary.select("provider", "index", "nprobe").unique().height
    assert "Content-Security-Policy" in html and "default-src 'none'" in html
