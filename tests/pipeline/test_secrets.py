"""API keys are named by reference and never written or shown anywhere."""
from __future__ import annotations

import json
import logging

import pytest

from retbench.tasks.providers.fingerprint import full_fingerprint
from retbench.tasks.stages.embed import embed_texts
from retbench.tasks.providers import create_provider
from retbench.tasks.providers.http_base import HttpAuthError, HttpRequestError
from retbench.tasks.providers.secrets import SecretLookupError, redact, resolve_secret
from retbench.support.faulty_server import FaultyServer

KEY = "sk-test-FAKE-0123456789abcdef"
ENV = "RETBENCH_TEST_API_KEY"


@pytest.fixture
def keyed_server():
    with FaultyServer(dim=8, api_key=KEY) as s:
        yield s


def options(server, **extra):
    return dict(base_url=server.base_url + "/v1", model="fake", api_key_env=ENV, concurrency=2,
                max_retries=2, backoff_base=0.01, backoff_max=0.05, **extra)


def test_key_from_env_is_sent_but_never_stored_logged_or_shown(keyed_server, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv(ENV, KEY)
    caplog.set_level(logging.DEBUG)  # httpx, httpcore and our retry warnings included
    # A 429 and a 503 make the provider log retries; the 503 body echoes the Authorization header.
    keyed_server.fault("status", match="t1", status=429, retry_after="0")
    keyed_server.fault("status", match="t3", status=503)
    provider = create_provider("openai-compatible", options(keyed_server, headers={"X-Team": "search"}))
    ids = [f"d{i}" for i in range(6)]
    texts = [f"t{i}" for i in range(6)]
    result = embed_texts(provider, "keyed", ids, texts, "document", tmp_path, batch_size=2, progress=logging.getLogger("p").info)
    assert result.embedded == 6
    assert all(s.headers.get("Authorization") == f"Bearer {KEY}" for s in keyed_server.seen)
    assert "retry" in caplog.text  # the retries were logged ...

    # ... and nothing anywhere holds the key: cache shards, fingerprint.json, set files, logs, reprs.
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"fingerprint.json"} and any(p.parent.name == "sets" for p in files)
    for path in files:
        assert KEY.encode() not in path.read_bytes(), path
    assert KEY not in caplog.text
    assert KEY not in json.dumps(full_fingerprint(provider))
    assert KEY not in repr(provider) and KEY not in repr(provider.options) and KEY not in repr(provider.api_key())
    assert "search" not in repr(provider.options)  # header values are hidden too
    assert ENV in json.dumps(provider.options.model_dump())  # the reference is all a spec holds


def test_fingerprint_holds_no_key_and_does_not_change_with_it(monkeypatch):
    monkeypatch.setenv(ENV, KEY)
    a = create_provider("openai-compatible", {"model": "m", "api_key_env": ENV})
    b = create_provider("openai-compatible", {"model": "m", "api_key_env": "OTHER_VAR"})
    c = create_provider("openai-compatible", {"model": "m", "headers": {"X-Gateway-Token": "tok-123456"}})
    assert full_fingerprint(a) == full_fingerprint(b) == full_fingerprint(c)
    assert "tok-123456" not in json.dumps(full_fingerprint(c))


def test_wrong_key_gives_401_naming_the_variable_not_the_value(keyed_server, tmp_path, monkeypatch, caplog):
    wrong = "sk-wrong-9876543210"
    monkeypatch.setenv(ENV, wrong)
    provider = create_provider("openai-compatible", options(keyed_server))
    with pytest.raises(HttpAuthError) as caught:
        embed_texts(provider, "keyed", ["a"], ["t0"], "query", tmp_path)
    message = str(caught.value)
    assert message == f"401 from 127.0.0.1:{keyed_server.base_url.rsplit(':', 1)[1]}: check {ENV}"
    assert len(keyed_server.seen) == 1  # not retried
    assert wrong not in message and wrong not in caplog.text


def test_error_bodies_that_echo_the_key_are_redacted(keyed_server, tmp_path, monkeypatch):
    monkeypatch.setenv(ENV, KEY)
    keyed_server.fault("status", status=400)  # the faulty server echoes the Authorization header
    with pytest.raises(HttpRequestError) as caught:
        embed_texts(create_provider("openai-compatible", options(keyed_server)), "k", ["a"], ["t0"], "query", tmp_path)
    assert "Bearer ***" in str(caught.value) and KEY not in str(caught.value)


def test_missing_env_var_is_named(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    provider = create_provider("openai-compatible", {"base_url": "http://127.0.0.1:9/v1", "model": "m", "api_key_env": ENV})
    with pytest.raises(SecretLookupError, match=f"environment variable {ENV} is not set"):
        provider.encode(["x"], "query")


def test_hosted_providers_require_a_key(monkeypatch):
    monkeypatch.delenv("CO_API_KEY", raising=False)
    with pytest.raises(SecretLookupError, match="CO_API_KEY"):
        create_provider("cohere", {"base_url": "http://127.0.0.1:9"}).encode(["x"], "query")


def test_prefect_secret_block_is_loaded_only_when_a_request_needs_it(keyed_server, monkeypatch):
    from prefect.blocks import system

    loads = []

    class FakeSecret:
        def get(self):
            return KEY

    monkeypatch.setattr(system.Secret, "load", classmethod(lambda cls, name: loads.append(name) or FakeSecret()))
    provider = create_provider("openai-compatible", {"base_url": keyed_server.base_url + "/v1", "model": "m",
                                                     "api_key_secret": "embedding-key"})
    full_fingerprint(provider)
    assert loads == []  # building and fingerprinting need no key
    assert provider.encode(["t0", "t1"], "query").shape == (2, 8)
    assert loads == ["embedding-key"]
    assert keyed_server.seen[-1].headers["Authorization"] == f"Bearer {KEY}"


def test_secret_headers_come_from_env(keyed_server, monkeypatch):
    monkeypatch.setenv("RETBENCH_TEST_GATEWAY", "gw-secret-value")
    monkeypatch.setenv(ENV, KEY)
    provider = create_provider("openai-compatible", options(keyed_server, secret_headers={"X-Gateway-Key": "RETBENCH_TEST_GATEWAY"}))
    provider.encode(["t0"], "query")
    assert keyed_server.seen[-1].headers["X-Gateway-Key"] == "gw-secret-value"
    assert "gw-secret-value" not in json.dumps(full_fingerprint(provider)) + repr(provider.options)


def test_azure_style_api_key_header(monkeypatch):
    monkeypatch.setenv(ENV, KEY)
    with FaultyServer(dim=4) as server:
        provider = create_provider("openai-compatible", {
            "base_url": server.base_url + "/openai/deployments/emb", "model": "text-embedding-3-small",
            "api_key_env": ENV, "auth_header": "api-key", "auth_scheme": "", "query_params": {"api-version": "2024-02-01"},
        })
        provider.encode(["t0"], "query")
        seen = server.seen[-1]
        assert seen.headers["api-key"] == KEY and "Authorization" not in seen.headers
        assert seen.path == "/openai/deployments/emb/embeddings?api-version=2024-02-01"


def test_resolve_and_redact():
    assert resolve_secret() is None
    with pytest.raises(SecretLookupError, match="not both"):
        resolve_secret("A", "b")
    assert redact(f"bad key {KEY}!", resolve_secret.__defaults__[0], KEY) == "bad key ***!"
