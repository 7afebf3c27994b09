"""The pre-flight (tasks/stages/preflight.py): every id and grade refused before any work, and what a
run would embed and build counted from content keys against the store, without loading a model."""
import json
from pathlib import Path

import pytest

from retbench.tasks.config.spec import load_spec
from retbench.tasks.datasets.errors import DatasetError
from retbench.tasks.providers import create_provider
from retbench.tasks.stages.embed import embed_texts
from retbench.tasks.stages.preflight import plan_run, preflight


def collection(folder: Path, grade: int = 1) -> Path:
    """Three documents, two of them the same text; two judged queries (one dev, one test)."""
    folder.mkdir(parents=True)
    docs = [("d1", "refund policy for annual plans"), ("d2", "password reset steps"), ("d3", "password reset steps")]
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in docs))
    (folder / "queries.jsonl").write_text(json.dumps({"id": "q1", "text": "refund", "split": "dev"}) + "\n"
                                          + json.dumps({"id": "q2", "text": "reset", "split": "test"}) + "\n")
    (folder / "qrels.jsonl").write_text(json.dumps({"query_id": "q1", "doc_id": "d1", "grade": 2}) + "\n"
                                        + json.dumps({"query_id": "q2", "doc_id": "d2", "grade": grade}) + "\n")
    return folder


def spec_file(tmp_path: Path, grade: int = 1) -> Path:
    collection(tmp_path / "data", grade)
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: tiny\ndataset: {path: data, format: jsonl, split: all}\nchunking: {strategy: none}\n"
                    "providers: [{name: h, kind: hashing, options: {dim: 32}}]\nindexes: {ivf: null}\n"
                    "k: [1, 10]\ndepth: 10\noutput_dir: out\nstore_dir: store\n")
    return spec


def test_a_grade_off_the_scale_is_refused_naming_file_and_line(tmp_path):
    with pytest.raises(DatasetError, match=r"qrels\.jsonl:2: grade 9 for query 'q2' is outside 0\.\.3"):
        preflight(load_spec(spec_file(tmp_path, grade=9)))


def test_an_unknown_document_id_is_refused(tmp_path):
    spec = spec_file(tmp_path)
    (tmp_path / "data" / "qrels.jsonl").write_text(json.dumps({"query_id": "q1", "doc_id": "d9", "grade": 1}) + "\n")
    with pytest.raises(DatasetError, match=r"qrels\.jsonl:1: doc id 'd9' is not in .*corpus\.jsonl"):
        preflight(load_spec(spec))


def test_an_empty_store_has_every_distinct_text_to_embed_and_every_index_to_build(tmp_path):
    spec = load_spec(spec_file(tmp_path))
    dataset, key = preflight(spec)
    plan = plan_run(spec, dataset, key)
    assert key is None and plan.chunks == {"default": 3}
    # 3 chunks + 2 queries, but d2 and d3 are one text: 4 distinct texts to embed.
    assert [(p.provider, p.texts, p.missing) for p in plan.providers] == [("h", 5, 4)]
    assert [(i.setting, i.kind, i.built) for i in plan.indexes] == [("h", "flat", False)]
    summary = plan.summary()
    assert "3 documents, 2 judged queries (dev 1, test 1), 2 judgments" in summary
    # The duplicate is said as such, not as a text already cached.
    assert "Embedding: h 4 texts to embed (1 duplicate of other texts; none in the cache yet)." in summary
    assert "Indexes to build: 1 of 1 (flat)" in summary


def test_texts_in_the_cache_and_a_built_index_are_not_counted_again(tmp_path):
    from retbench.tasks.stages.chunk import ChunkConfig, chunk_corpus
    from retbench.tasks.stages.index import IndexSettings, build_index

    spec = load_spec(spec_file(tmp_path))
    dataset, key = preflight(spec)
    provider = create_provider("hashing", {"dim": 32})
    store = Path(spec.store_dir)
    # The documents embedded as the run embeds them (its chunker's ids and texts), the queries not.
    chunks = chunk_corpus(dataset.corpus, ChunkConfig(**spec.chunking_variants[0].model_dump(exclude={"name"})))
    documents = embed_texts(provider, "h", chunks["chunk_id"].to_list(), chunks["text"].to_list(), "document", store)
    plan = plan_run(spec, dataset, key)
    assert [(p.texts, p.missing, p.cached) for p in plan.providers] == [(5, 2, 2)]  # the two queries
    assert "h 2 texts to embed (1 duplicate of other texts; 2 already in the cache)" in plan.summary()
    assert [i.built for i in plan.indexes] == [False]
    build_index(documents, IndexSettings("flat"), store)
    assert [i.built for i in plan_run(spec, dataset, key).indexes] == [True]


def test_a_dataset_a_run_stored_is_read_from_the_store(tmp_path):
    from retbench.tasks.stages.prepare import prepare_dataset

    spec = load_spec(spec_file(tmp_path))
    stored = prepare_dataset(spec)
    dataset, key = preflight(spec)
    assert key == stored.key and dataset.corpus.height == 3
    assert "already in the store" in plan_run(spec, dataset, key).summary()
