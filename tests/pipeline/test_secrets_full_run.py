"""A full benchmark (the Prefect flow) with a fake API key for every HTTP provider kind, each
served by a local fake server that refuses requests without its key: no file the run wrote,
no captured log line, no Prefect log or artifact holds any key."""
from __future__ import annotations

import contextlib
import logging
from pathlib import Path

import pytest

from retbench.support.paths import ROOT
from retbench.support.faulty_server import FaultyServer

KINDS = {
    "openai-compatible": ("/v1", {"model": "fake"}),
    "cohere": ("", {"model": "embed-fake"}),
    "voyage": ("/v1", {"model": "voyage-fake"}),
    "tei": ("", {}),
    "ollama": ("", {"model": "nomic-fake"}),
}
SPEC = """
name: secrets-full
dataset: {{path: {data}, format: jsonl, split: dev}}
chunking: {{strategy: paragraph, max_words: 120}}
providers:
{providers}
indexes: {{ivf: null}}
output_dir: {out}
store_dir: {store}
"""


def test_no_key_anywhere_after_a_full_flow_run(tmp_path, monkeypatch, caplog, capfd, prefect_harness):
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_HOME

    from retbench.flows.benchmark import benchmark

    keys = {kind: f"sk-FAKE-{kind.replace('-', '')}-{i}-0123456789abcdef" for i, kind in enumerate(KINDS)}
    caplog.set_level(logging.DEBUG)
    with contextlib.ExitStack() as stack:
        lines, servers = [], {}
        for kind, (suffix, extra) in KINDS.items():
            server = servers[kind] = stack.enter_context(FaultyServer(dim=8, api_key=keys[kind]))
            # An error body that echoes the Authorization header, then a retry: the riskiest path.
            server.fault("status", status=503)
            env = f"RETBENCH_FAKE_{kind.upper().replace('-', '_')}_KEY"
            monkeypatch.setenv(env, keys[kind])
            options = {"base_url": server.base_url + suffix, "api_key_env": env, "max_retries": 2,
                       "backoff_base": 0.01, "backoff_max": 0.05, **extra}
            lines.append(f"  - {{name: {kind}-p, kind: {kind}, options: {options}}}")
        spec = tmp_path / "spec.yaml"
        spec.write_text(SPEC.format(data=ROOT / "data" / "sample", providers="\n".join(lines),
                                    out=tmp_path / "out", store=tmp_path / "store"), encoding="utf-8")
        flow_state = benchmark(str(spec), return_state=True)
        assert flow_state.is_completed(), flow_state
        for kind, server in servers.items():  # each key was really sent, and each 503 retried
            assert sum(seen.answered == 200 for seen in server.seen) >= 2, kind
            assert all(seen.headers.get("Authorization") == f"Bearer {keys[kind]}" for seen in server.seen), kind

    written = [p for p in tmp_path.rglob("*") if p.is_file() and p.name != "spec.yaml"]
    home = Path(PREFECT_HOME.value())
    if home.exists():
        written += [p for p in home.rglob("*") if p.is_file()]
    assert any(p.name == "summary.parquet" for p in written) and any("shard-" in p.name for p in written)

    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts()
        logs = client.read_logs()
    texts = {"captured logs": caplog.text, "captured output": "".join(capfd.readouterr()),
             "prefect logs": "\n".join(log.message for log in logs),
             "prefect artifacts": "\n".join(f"{a.key} {a.description} {a.data}" for a in artifacts)}
    assert any(a.key and a.key.startswith("secrets-full") for a in artifacts)
    assert "embedded" in texts["prefect logs"]

    hits = []
    for key in keys.values():
        for path in written:
            with contextlib.suppress(OSError):
                data = path.read_bytes()
                if key.encode() in data or key.encode("utf-16-le") in data:
                    hits.append(str(path))
        hits += [where for where, text in texts.items() if key in text]
    assert not hits, hits
    print(f"\nscanned {len(written)} files, {len(logs)} Prefect log lines, {len(artifacts)} artifacts for {len(keys)} keys: 0 hits")
