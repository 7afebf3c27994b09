"""NFC and NFD spellings of the same text load as the same text (dataset.unicode: nfc, the
default), so they share cache keys and scores; `raw` keeps the code points as read."""
import json
import unicodedata
from pathlib import Path

import numpy as np
import pytest

from retbench.tasks.providers import create_provider
from retbench.tasks.datasets.errors import DatasetError
from retbench.tasks.stages.dataset import content_hash, load_dataset
from retbench.tasks.stages.embed import embed_texts

CORPUS = [("d1", "Café crème brûlée, the classic French dessert"), ("d2", "A naïve résumé gets few interviews"),
          ("d3", "Plain ASCII text about trains")]
QUERIES = [("q1", "crème brûlée café"), ("q2", "résumé tips")]


def collection(folder: Path, form: str) -> Path:
    folder.mkdir()
    norm = lambda text: unicodedata.normalize(form, text)
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"id": i, "title": norm("Über"), "text": norm(t)}) + "\n" for i, t in CORPUS))
    (folder / "queries.jsonl").write_text("".join(json.dumps({"id": i, "text": norm(t), "split": "dev"}) + "\n" for i, t in QUERIES))
    (folder / "qrels.jsonl").write_text('{"query_id": "q1", "doc_id": "d1", "grade": 1}\n{"query_id": "q2", "doc_id": "d2", "grade": 1}\n')
    return folder


def scores(dataset, store: Path):
    provider = create_provider("hashing", {"dim": 256})
    docs = embed_texts(provider, "h", dataset.corpus["doc_id"].to_list(), dataset.corpus["text"].to_list(), "document", store)
    queries = embed_texts(provider, "h", dataset.queries["query_id"].to_list(), dataset.queries["text"].to_list(), "query", store)
    doc_vectors = provider.encode(dataset.corpus["text"].to_list(), "document")
    query_vectors = provider.encode(dataset.queries["text"].to_list(), "query")
    return docs, queries, query_vectors @ doc_vectors.T


def test_nfc_and_nfd_spellings_load_as_the_same_text(tmp_path):
    nfc, nfd = collection(tmp_path / "nfc", "NFC"), collection(tmp_path / "nfd", "NFD")
    assert (nfc / "corpus.jsonl").read_bytes() != (nfd / "corpus.jsonl").read_bytes()
    from_nfc, from_nfd = load_dataset(nfc, "jsonl", "dev"), load_dataset(nfd, "jsonl", "dev")
    assert from_nfd.corpus.equals(from_nfc.corpus) and from_nfd.queries.equals(from_nfc.queries)
    assert content_hash(from_nfd) == content_hash(from_nfc)
    assert "text normalised to Unicode NFC (dataset.unicode: nfc): 3 documents and 2 queries changed" in from_nfd.notes
    assert "text normalised to Unicode NFC (dataset.unicode: nfc): 0 documents and 0 queries changed" in from_nfc.notes

    store = tmp_path / "store"
    docs_nfc, queries_nfc, scores_nfc = scores(from_nfc, store)
    docs_nfd, queries_nfd, scores_nfd = scores(from_nfd, store)
    assert (docs_nfc.embedded, queries_nfc.embedded) == (3, 2)
    assert (docs_nfd.embedded, docs_nfd.from_cache, queries_nfd.embedded, queries_nfd.from_cache) == (0, 3, 0, 2)
    assert docs_nfd.key == docs_nfc.key and queries_nfd.key == queries_nfc.key
    np.testing.assert_array_equal(scores_nfd, scores_nfc)


def test_raw_keeps_the_code_points_and_so_the_difference(tmp_path):
    nfc, nfd = collection(tmp_path / "nfc", "NFC"), collection(tmp_path / "nfd", "NFD")
    from_nfc, from_nfd = load_dataset(nfc, "jsonl", "dev", unicode="raw"), load_dataset(nfd, "jsonl", "dev", unicode="raw")
    assert from_nfd.corpus["text"][0] == unicodedata.normalize("NFD", CORPUS[0][1])
    assert content_hash(from_nfd) != content_hash(from_nfc)
    assert "text kept as read (dataset.unicode: raw, no Unicode normalisation)" in from_nfd.notes
    store = tmp_path / "store"
    _, _, scores_nfc = scores(from_nfc, store)
    docs_nfd, _, scores_nfd = scores(from_nfd, store)
    assert docs_nfd.embedded == 2  # the two accented texts are new to the cache (titles are not embedded here)
    assert not np.allclose(scores_nfd, scores_nfc)
    with pytest.raises(DatasetError, match=r"unknown unicode form 'nfkc' \(expected one of \['nfc', 'raw', 'nfc_strip_joiners'\]\)"):
        load_dataset(nfc, "jsonl", "dev", unicode="nfkc")
