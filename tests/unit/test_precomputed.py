"""tasks/providers/precomputed.py: a team's own vectors, read from Parquet or .npy by id, and the
ids, dimensions and chunking it refuses before any work."""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from retbench.tasks.providers import create_provider

DOCS = {"d1": [1.0, 0.0, 0.0], "d2": [0.0, 1.0, 0.0], "d3": [0.0, 0.0, 1.0]}
QUERIES = {"q1": [1.0, 1.0, 0.0], "q2": [0.0, 1.0, 1.0]}


def write_parquet(path, vectors: dict, fixed: bool = True, id_column="id", vector_column="vector"):
    flat = pa.array(np.array(list(vectors.values()), dtype=np.float32).reshape(-1))
    dim = len(next(iter(vectors.values())))
    column = pa.FixedSizeListArray.from_arrays(flat, dim) if fixed else pa.array(list(vectors.values()), pa.list_(pa.float64()))
    pq.write_table(pa.table({id_column: list(vectors), vector_column: column}), path)
    return path


def provider(tmp_path, documents=DOCS, queries=QUERIES, **options):
    return create_provider("precomputed", {"documents": str(write_parquet(tmp_path / "docs.parquet", documents)),
                                           "queries": str(write_parquet(tmp_path / "queries.parquet", queries, fixed=False)),
                                           **options})


def needed(docs=DOCS, queries=QUERIES):
    return {"document": {f"{d}#0" for d in docs}, "query": set(queries)}


def test_vectors_come_back_by_id_in_the_order_asked_for(tmp_path):
    p = provider(tmp_path)
    assert p.encode(["d3#0", "d1#0"], "document").tolist() == [DOCS["d3"], DOCS["d1"]]  # chunk id -> document id
    assert p.encode(["q2", "q1"], "query").tolist() == [QUERIES["q2"], QUERIES["q1"]]
    assert p.keyed_by_id and p.token_counts(["q1"], "query") == ([0], "none")
    assert p.check_ids(needed(), {"document": set(DOCS), "query": set(QUERIES)}, "none") == []


def test_npy_with_ids_in_a_text_or_json_file(tmp_path):
    np.save(tmp_path / "docs.npy", np.array(list(DOCS.values()), dtype=np.float32))
    (tmp_path / "doc_ids.txt").write_text("\n".join(DOCS) + "\n")
    np.save(tmp_path / "queries.npy", np.array(list(QUERIES.values()), dtype=np.float64))
    (tmp_path / "query_ids.json").write_text(json.dumps(list(QUERIES)))
    p = create_provider("precomputed", {"documents": str(tmp_path / "docs.npy"), "document_ids": str(tmp_path / "doc_ids.txt"),
                                        "queries": str(tmp_path / "queries.npy"), "query_ids": str(tmp_path / "query_ids.json")})
    assert p.encode(["d2#0"], "document").tolist() == [DOCS["d2"]] and p.encode(["q2"], "query").tolist() == [QUERIES["q2"]]
    with pytest.raises(ValueError, match="a .npy file holds no ids; give document_ids"):
        create_provider("precomputed", {"documents": str(tmp_path / "docs.npy"), "queries": str(tmp_path / "queries.npy"),
                                        "query_ids": str(tmp_path / "query_ids.json")})


def test_missing_extra_and_other_dimension_are_counted_with_examples(tmp_path):
    p = provider(tmp_path, documents={**{k: v for k, v in DOCS.items() if k != "d2"}, "x9": [1.0, 1.0, 1.0]},
                 queries={"q1": [1.0, 0.0], "q2": [0.0, 1.0]})
    problems = p.check_ids(needed(), {"document": set(DOCS), "query": set(QUERIES)}, "none")
    assert problems == [
        "documents: 1 of the 3 document ids this run needs have no vector in docs.parquet (e.g. 'd2')",
        "documents: docs.parquet holds 1 ids the collection does not have (e.g. 'x9'): vectors of another collection?",
        "the document vectors are 3-dimensional but the query vectors 2-dimensional: both must come from one model"]
    # Queries of another split may be in the file: not extra when the collection's queries are not all known.
    (tmp_path / "other").mkdir()
    extra_query = provider(tmp_path / "other", queries={**QUERIES, "q-train": [0.0, 0.0, 1.0]})
    assert extra_query.check_ids(needed(), {"document": set(DOCS), "query": None}, "none") == []


def test_document_vectors_need_chunking_none_or_chunk_ids(tmp_path):
    p = provider(tmp_path)
    (problem,) = p.check_ids(needed(), {"document": set(DOCS), "query": set(QUERIES)}, "paragraph")
    assert problem.startswith("keyed_by documents needs chunking: none (chunking is 'paragraph')")
    chunked = create_provider("precomputed", {
        "documents": str(write_parquet(tmp_path / "chunks.parquet", {"d1#0": [1.0, 0.0], "d1#1": [0.0, 1.0]})),
        "queries": str(write_parquet(tmp_path / "q2.parquet", {"q1": [1.0, 1.0]})), "keyed_by": "chunks"})
    assert chunked.encode(["d1#1"], "document").tolist() == [[0.0, 1.0]]
    assert chunked.check_ids({"document": {"d1#0", "d1#1"}, "query": {"q1"}}, {"document": {"d1"}, "query": {"q1"}},
                             "paragraph") == []


def test_the_fingerprint_is_the_files_content(tmp_path):
    first = provider(tmp_path).fingerprint()
    assert provider(tmp_path).fingerprint() == first
    changed = provider(tmp_path, documents={**DOCS, "d1": [0.5, 0.5, 0.0]}).fingerprint()
    assert changed["documents"] != first["documents"] and changed["queries"] == first["queries"]


def test_unreadable_vector_columns_are_named(tmp_path):
    pq.write_table(pa.table({"id": ["d1", "d2"], "vector": pa.array([[1.0, 2.0], [1.0]], pa.list_(pa.float32()))}),
                   tmp_path / "ragged.parquet")
    p = create_provider("precomputed", {"documents": str(tmp_path / "ragged.parquet"),
                                        "queries": str(write_parquet(tmp_path / "q.parquet", QUERIES))})
    (problem,) = [line for line in p.check_ids({"document": {"d1#0", "d2#0"}, "query": set(QUERIES)},
                                               {"document": {"d1", "d2"}, "query": set(QUERIES)}, "none")
                  if line.startswith("documents")]
    assert "vectors of different lengths: id 'd1' has 2, id 'd2' has 1" in problem
    pq.write_table(pa.table({"doc": ["d1"], "emb": pa.array([[1.0]], pa.list_(pa.float32()))}), tmp_path / "names.parquet")
    named = create_provider("precomputed", {"documents": str(tmp_path / "names.parquet"),
                                            "queries": str(tmp_path / "q.parquet")})
    with pytest.raises(ValueError, match=r"no column 'id' \(found \['doc', 'emb'\]\); set id_column / vector_column"):
        named.files["document"].rows()
