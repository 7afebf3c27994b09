"""`retbench check --estimate` (tasks/stages/estimate.py): the store's size from rows, dimensions
and index kinds, and the embedding time from texts embedded now (its value is the machine's, so
only what it is made of is asserted)."""
from retbench.tasks.config.spec import load_spec
from retbench.tasks.stages.estimate import estimate_first_run, index_sizes, summary, timed_batches
from retbench.tasks.stages.preflight import chunk_tables, plan_run, preflight

from tests.unit.test_preflight import spec_file


def test_index_sizes_follow_rows_dimension_and_kind(tmp_path):
    spec = load_spec(spec_file(tmp_path))  # ivf: null
    assert index_sizes(spec, 100, 32) == ({"flat": 100 * 32 * 4}, ())
    spec = spec.model_copy(update={"indexes": spec.indexes.model_validate({"ivf": {"nlist": 4}, "hnsw": {"M": 8}})})
    sizes, unsized = index_sizes(spec, 1000, 32)
    # IVF: each vector and its int64 id, plus nlist float32 centroids.
    assert sizes == {"flat": 1000 * 32 * 4, "ivf": 1000 * (32 * 4 + 8) + 4 * 32 * 4} and unsized == ("hnsw",)


def test_an_estimate_counts_the_texts_the_run_would_embed_at_the_models_dimension(tmp_path):
    spec = load_spec(spec_file(tmp_path))  # hashing, dim 32; 3 chunks + 2 queries, one text twice
    dataset, key = preflight(spec, create_folders=False)
    plan = plan_run(spec, dataset, key)
    [estimate] = estimate_first_run(spec, plan, chunk_tables(spec, dataset, key))
    assert (estimate.provider, estimate.texts, estimate.dim) == ("h", 4, 32)
    assert estimate.cache_bytes == int(4 * 32 * 4 * 1.5) and estimate.index_bytes == {"flat": 3 * 32 * 4}
    assert estimate.sampled == 3 and estimate.seconds_per_text > 0  # few texts: all timed, after a warm-up call
    said = summary([estimate])
    assert said.startswith("Estimate (measured now, --estimate: each model was loaded and embedded a few texts)")
    assert "to embed 4 texts" in said and "32-dimensional" in said and "Not estimated: indexing" in said


def test_the_timed_batches_are_neighbours_in_length_at_each_quarter():
    texts = ["x" * n for n in range(100, 0, -1)]  # 100 texts, lengths 1..100, in no useful order
    batches = timed_batches(texts)
    assert [[len(t) for t in batch] for batch in batches] == [list(range(9, 17)), list(range(34, 42)),
                                                              list(range(59, 67)), list(range(84, 92))]
    assert timed_batches(["b", "aaa", "cc"]) == [["b", "cc", "aaa"]]  # too few for windows: all of them
