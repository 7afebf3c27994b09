"""Sanity checks for the shipped sample benchmark in data/sample/.

Uses only the standard library so it runs without the project installed.
"""

import json
import re
from collections import Counter, defaultdict

import pytest

from retbench.support.paths import ROOT

SAMPLE = ROOT / "data" / "sample"

DOC_LANGUAGES = {"en", "hi"}
QUERY_LANGUAGES = {"en", "hi", "hinglish"}
CATEGORIES = {
    "keyword",
    "vague",
    "typo",
    "domain_term",
    "multi_answer",
    "buried_answer",
    "natural",
    "hindi",
    "hinglish",
    "filtered",
}
PRODUCTS = {"auth", "keys", "billing", "deploy", "webhooks", "ratelimit", "teams", "audit", "privacy", "cli", "sdk",
            "logs", "status", "db", "storage", "support", "platform", "security", "api"}
SPLITS = {"dev", "test"}
DEVANAGARI = re.compile(r"[\u0900-\u097F]")


def _load(name):
    path = SAMPLE / name
    raw = path.read_bytes()
    assert not raw.startswith(b"\xef\xbb\xbf"), f"{name} has a UTF-8 BOM"
    rows = []
    for lineno, line in enumerate(raw.decode("utf-8").splitlines(), 1):
        assert line.strip(), f"{name}:{lineno} is blank"
        obj = json.loads(line)
        assert isinstance(obj, dict), f"{name}:{lineno} is not a JSON object"
        rows.append(obj)
    assert rows, f"{name} is empty"
    return rows


@pytest.fixture(scope="module")
def corpus():
    return _load("corpus.jsonl")


@pytest.fixture(scope="module")
def queries():
    return _load("queries.jsonl")


@pytest.fixture(scope="module")
def qrels():
    return _load("qrels.jsonl")


def test_corpus_fields(corpus):
    for doc in corpus:
        assert set(doc) == {"id", "title", "text", "language", "metadata"}, doc.get("id")
        assert all(isinstance(doc[k], str) and doc[k].strip() for k in doc if k != "metadata"), doc["id"]
        assert doc["language"] in DOC_LANGUAGES, doc["id"]


def test_query_fields(queries):
    for q in queries:
        assert set(q) - {"filter"} == {"id", "text", "language", "category", "split"}, q.get("id")
        assert ("filter" in q) == (q["category"] == "filtered"), q["id"]
        assert isinstance(q["text"], str) and q["text"].strip(), q["id"]
        assert q["language"] in QUERY_LANGUAGES, q["id"]
        assert q["category"] in CATEGORIES, q["id"]
        assert q["split"] in SPLITS, q["id"]


def test_qrels_fields(qrels):
    for r in qrels:
        assert set(r) == {"query_id", "doc_id", "grade"}, r
        assert isinstance(r["grade"], int) and not isinstance(r["grade"], bool), r
        assert 0 <= r["grade"] <= 3, r


def test_ids_unique(corpus, queries, qrels):
    doc_ids = [d["id"] for d in corpus]
    query_ids = [q["id"] for q in queries]
    assert len(doc_ids) == len(set(doc_ids))
    assert len(query_ids) == len(set(query_ids))
    pairs = [(r["query_id"], r["doc_id"]) for r in qrels]
    assert len(pairs) == len(set(pairs)), "duplicate (query_id, doc_id) judgment"


def test_qrels_reference_existing_ids(corpus, queries, qrels):
    doc_ids = {d["id"] for d in corpus}
    query_ids = {q["id"] for q in queries}
    for r in qrels:
        assert r["query_id"] in query_ids, r
        assert r["doc_id"] in doc_ids, r


def test_every_query_has_a_relevant_doc(queries, qrels):
    best = defaultdict(int)
    for r in qrels:
        best[r["query_id"]] = max(best[r["query_id"]], r["grade"])
    missing = [q["id"] for q in queries if best[q["id"]] < 1]
    assert not missing, f"queries without a relevant document: {missing}"


def test_multi_answer_queries_have_several_answers(queries, qrels):
    strong = Counter(r["query_id"] for r in qrels if r["grade"] >= 2)
    for q in queries:
        if q["category"] == "multi_answer":
            assert 2 <= strong[q["id"]] <= 5, (q["id"], strong[q["id"]])


def test_some_confusables_judged_not_relevant(qrels):
    assert any(r["grade"] == 0 for r in qrels)


def test_query_count(queries):
    assert len(queries) >= 80


def test_every_category_used_and_split(queries):
    splits = defaultdict(set)
    for q in queries:
        splits[q["category"]].add(q["split"])
    assert set(splits) == CATEGORIES
    for category, seen in splits.items():
        assert seen == SPLITS, f"{category} is missing a split: {seen}"


def test_hindi_queries_are_devanagari(queries):
    for q in queries:
        if q["language"] == "hi":
            assert DEVANAGARI.search(q["text"]), q["id"]


def test_hinglish_queries_are_latin_only(queries):
    for q in queries:
        if q["language"] == "hinglish":
            assert q["text"].isascii(), q["id"]
            assert re.search(r"[A-Za-z]", q["text"]), q["id"]


def test_language_matches_category(queries):
    for q in queries:
        if q["category"] == "hindi":
            assert q["language"] == "hi", q["id"]
        elif q["category"] == "hinglish":
            assert q["language"] == "hinglish", q["id"]
        else:
            assert q["language"] == "en", q["id"]


def test_hindi_docs_are_devanagari(corpus):
    for doc in corpus:
        if doc["language"] == "hi":
            assert DEVANAGARI.search(doc["text"]), doc["id"]


def test_corpus_language_counts(corpus):
    counts = Counter(d["language"] for d in corpus)
    assert counts["en"] >= 180
    assert counts["hi"] >= 15


def test_long_documents(corpus):
    long_docs = [d for d in corpus if len(d["text"].split()) > 600]
    assert len(long_docs) >= 5
    for doc in long_docs:
        assert doc["text"].count("\n\n") >= 5, f"{doc['id']} needs paragraph breaks"


def test_document_metadata(corpus):
    for doc in corpus:
        meta = doc["metadata"]
        assert set(meta) == {"product", "doc_type"}, doc["id"]
        assert meta["product"] in PRODUCTS, doc["id"]
        kind = {"hi": "translation", "guide": "guide"}.get(doc["id"].rsplit("-", 1)[0], "article")
        assert meta["doc_type"] == kind, doc["id"]


def test_filters_name_metadata_fields_and_allow_a_relevant_document(corpus, queries, qrels):
    meta = {d["id"]: d["metadata"] for d in corpus}
    fields = {k for m in meta.values() for k in m}
    filtered = [q for q in queries if "filter" in q]
    assert len(filtered) == 8

    def allowed(doc_id, condition):
        return all(meta[doc_id].get(f) in (v if isinstance(v, list) else [v]) for f, v in condition.items())

    outside = 0
    for q in filtered:
        assert set(q["filter"]) <= fields, q["id"]
        relevant = [r["doc_id"] for r in qrels if r["query_id"] == q["id"] and r["grade"] >= 1]
        assert any(allowed(d, q["filter"]) for d in relevant), q["id"]
        outside += sum(not allowed(d, q["filter"]) for d in relevant)
    # q108 (privacy-001, hi-019) and q109 (hi-006, hi-007) have judged answers the filter excludes
    assert outside == 4
