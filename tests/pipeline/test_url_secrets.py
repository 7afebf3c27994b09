"""A key passed in the URL (`base_url: ...?api_key=X`, or `query_params_env`) reaches the server
as a query parameter and never the fingerprint, the store's fingerprint.json or the manifest."""
import json
from urllib.parse import parse_qsl, urlsplit

import pytest

from retbench.tasks.config.spec import BenchmarkSpec
from retbench.tasks.providers import create_provider
from retbench.tasks.reporting.manifest import redacted_spec
from retbench.tasks.providers.fingerprint import full_fingerprint
from retbench.tasks.stages.embed import embed_texts
from retbench.support.faulty_server import FaultyServer, vector_for

URL_KEY = "url-key-0123456789"
ENV_KEY = "env-key-9876543210"


@pytest.fixture
def server():
    with FaultyServer(dim=8) as s:
        yield s


def test_query_in_base_url_is_kept_as_params_and_redacted_everywhere(server, tmp_path, monkeypatch):
    monkeypatch.setenv("RETBENCH_TEST_SIG", ENV_KEY)
    options = {"base_url": f"{server.base_url}/v1?api_key={URL_KEY}", "model": "m",
               "query_params": {"api-version": "2024-02-01"}, "query_params_env": {"sig": "RETBENCH_TEST_SIG"}}
    provider = create_provider("openai-compatible", options)
    result = embed_texts(provider, "gateway", ["d1"], ["a document"], "document", tmp_path / "store", batch_size=8)
    assert result.embedded == 1

    sent = urlsplit(server.seen[0].path)
    assert sent.path == "/v1/embeddings"  # not /v1?api_key=.../embeddings
    assert parse_qsl(sent.query) == [("api_key", URL_KEY), ("api-version", "2024-02-01"), ("sig", ENV_KEY)]

    fingerprint = full_fingerprint(provider)
    assert fingerprint["base_url"] == f"{server.base_url}/v1?api_key=***"
    assert fingerprint["query_params"] == {"api-version": "2024-02-01"}
    stored = {p.relative_to(tmp_path): p.read_bytes() for p in (tmp_path / "store").rglob("*") if p.is_file()}
    assert any(p.name == "fingerprint.json" for p in stored)
    assert not [p for p, data in stored.items() if URL_KEY.encode() in data or ENV_KEY.encode() in data]
    assert URL_KEY not in repr(provider)

    spec = BenchmarkSpec.model_validate({"name": "s", "dataset": {"path": "."},
                                         "providers": [{"name": "gateway", "kind": "openai-compatible", "options": options}]})
    dumped = json.dumps(redacted_spec(spec.model_dump(mode="json")))
    assert URL_KEY not in dumped and f"{server.base_url}/v1?api_key=***" in dumped
    assert "RETBENCH_TEST_SIG" in dumped and ENV_KEY not in dumped  # the variable's name, never its value


def test_a_missing_query_parameter_variable_fails_before_any_request(server, monkeypatch):
    monkeypatch.delenv("RETBENCH_TEST_SIG", raising=False)
    provider = create_provider("openai-compatible", {"base_url": server.base_url + "/v1", "model": "m",
                                                     "query_params_env": {"sig": "RETBENCH_TEST_SIG"}})
    with pytest.raises(Exception, match="query parameter sig: environment variable RETBENCH_TEST_SIG is not set"):
        provider.encode(["x"], "document")
    assert server.seen == []


def test_plain_base_url_fingerprint_is_unchanged(server):
    # Cache keys of every existing store depend on this rendering.
    provider = create_provider("openai-compatible", {"base_url": server.base_url + "/v1/", "model": "m"})
    assert provider.fingerprint()["base_url"] == server.base_url + "/v1"
    assert provider.encode(["x"], "document")[0] == pytest.approx(vector_for("x", 8))
