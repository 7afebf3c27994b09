import json

import faiss
import numpy as np
import polars as pl
import pytest
from pydantic import ValidationError

from retbench.tasks.stages.embed import read_vectors
from retbench.tasks.stages.embed import embed_texts, load_vectors
from retbench.tasks.stages.index import IndexSettings
from retbench.tasks.providers import create_provider
from retbench.tasks.stages.sweep import (
    SweepSpec, SyntheticDataset, bootstrap_ci, default_pq_nbits, neighbour_recall, recommend, resolve_grid,
    run_sweep, write_sweep_tables,
)

SPEC = SweepSpec(
    ivf={"nlist": [16], "nprobe": [1, 2, 4, 16]},
    hnsw={"M": [8], "ef_construction": [20], "ef_search": [4, 64]},
    ivfpq={"nlist": [16], "m": [4], "nbits": [4], "nprobe": [16]},
    sq=None, binary=None,  # tests/unit/test_compressed_index.py sweeps those
    k=10, depth=20, repeats=1, latency_queries=5, bootstrap=200,
)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """One small sweep on clustered synthetic data, shared by the tests below."""
    root = tmp_path_factory.mktemp("sweep")
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)  # tiny data: OpenMP start-up on a busy machine costs more than it saves
    try:
        data = SyntheticDataset(d=16, nb=1500, nq=40, clusters=12, chunks_per_doc=2, seed=3)
        doc_set, query_set, chunks_path, qrels = data.write(root / "store")
        first = run_sweep(doc_set, query_set, chunks_path, qrels, SPEC, root / "store", root / "out")
        index_dir = root / "store" / "indexes" / doc_set.key[:32]
        mtimes = {p.name: p.stat().st_mtime_ns for p in index_dir.glob("*.faiss")}
        second = run_sweep(doc_set, query_set, chunks_path, qrels, SPEC, root / "store", root / "out2")
        after = {p.name: p.stat().st_mtime_ns for p in index_dir.glob("*.faiss")}
    finally:
        faiss.omp_set_num_threads(threads)
    return {"first": first, "second": second, "mtimes": (mtimes, after), "root": root,
            "table": pl.read_parquet(first.path), "lost": pl.read_parquet(first.lost_path),
            "inputs": (doc_set, query_set, chunks_path, qrels)}


def _rows(table, kind, **query):
    rows = table.filter(pl.col("index_kind") == kind)
    if query:
        rows = rows.filter(pl.col("query_params") == json.dumps(query, separators=(",", ":")))
    return rows


def test_ivf_probing_every_list_equals_flat(sweep):
    row = _rows(sweep["table"], "ivf", nprobe=16).row(0, named=True)
    assert row["neighbour_recall@10"] == 1.0
    for measure in ("recall@10", "mrr", "ndcg@10"):
        assert row[f"delta_{measure}"] == 0.0
        assert (row[f"delta_{measure}_ci_low"], row[f"delta_{measure}_ci_high"]) == (0.0, 0.0)
    lost = sweep["lost"].filter((pl.col("index_kind") == "ivf") & (pl.col("query_params") == '{"nprobe":16}'))
    assert lost.height == 0


def test_neighbour_recall_rises_with_nprobe_on_clustered_data(sweep):
    ivf = _rows(sweep["table"], "ivf").with_columns(
        nprobe=pl.col("query_params").str.json_decode(pl.Struct({"nprobe": pl.Int64})).struct.field("nprobe")).sort("nprobe")
    recall = ivf["neighbour_recall@10"].to_list()
    assert ivf["nprobe"].to_list() == [1, 2, 4, 16]
    assert all(a <= b for a, b in zip(recall, recall[1:]))
    assert recall[0] < 0.95 and recall[-1] == 1.0


def test_lost_documents_are_relevant_and_were_in_the_exact_top_k(sweep):
    lost, table = sweep["lost"], sweep["table"]
    assert lost.height > 0
    assert lost["grade"].min() >= 1 and lost["exact_rank"].max() <= 10
    # A setting that loses relevant docs from the exact top 10 cannot gain recall@10 on them all.
    worst = _rows(table, "ivf", nprobe=1).row(0, named=True)
    assert worst["delta_recall@10"] <= 0 or lost.filter(pl.col("query_params") == '{"nprobe":1}').height == 0


def test_table_has_speed_and_size_per_setting(sweep):
    table = sweep["table"]
    assert table.height == 1 + 4 + 2 + 1  # flat, ivf x 4 nprobe, hnsw x 2 efSearch, ivfpq x 1
    for column in ("qps_batch", "p50_ms_single_thread", "p99_ms_single_thread", "p50_ms_all_threads", "p95_ms_all_threads",
                   "index_bytes", "bytes_per_vector", "build_seconds"):
        assert table[column].null_count() == 0 and (table[column] > 0).all(), column
    flat = _rows(table, "flat").row(0, named=True)
    pq = _rows(table, "ivfpq").row(0, named=True)
    assert flat["bytes_per_vector"] >= 16 * 4  # float32 codes
    assert pq["bytes_per_vector"] < flat["bytes_per_vector"]  # 4 one-byte... codes plus an id
    assert _rows(table, "ivf")["train_seconds"].min() > 0 and flat["train_seconds"] < flat["build_seconds"]
    assert sweep["first"].plot_path and (sweep["root"] / "out" / "ann_sweep" / "synthetic.png").stat().st_size > 1000


def test_second_sweep_builds_nothing(sweep):
    first, second = sweep["first"], sweep["second"]
    assert (first.built, first.reused) == (4, 0)
    assert (second.built, second.reused) == (0, 4)
    assert second.load_report is None  # the document vectors were not even read
    before, after = sweep["mtimes"]
    assert sorted(before) == ["flat.faiss", "hnsw_M-8_efc-20.faiss", "ivf_nlist-16_train-1500_seed-0.faiss",
                              "ivfpq_nlist-16_m-4_nbits-4_train-1500_seed-0.faiss"]
    assert before == after
    # Build timings survive the reuse (read from the sidecar).
    table = pl.read_parquet(second.path)
    assert table.filter(~pl.col("built"))["build_seconds"].null_count() == 0


def test_tables_for_all_providers_and_one_line_recommendation(sweep, tmp_path):
    paths = write_sweep_tables([sweep["first"]], tmp_path)
    assert pl.read_parquet(paths["ann_sweep"]).height == sweep["table"].height
    saved = json.loads((tmp_path / "ann_recommendation.json").read_text())
    line = saved["lines"][0]
    assert line.startswith("synthetic: ") and "\n" not in line and "budget 1%" in line


def test_tie_tolerant_neighbour_recall():
    # Exact top-3 of query 0 is [5, 7, 9] with scores .9 .8 .7; vector 11 ties vector 9 at .7.
    exact_ids = np.array([[5, 7, 9], [1, 2, 3]])
    exact_scores = np.array([[0.9, 0.8, 0.7], [0.6, 0.5, 0.4]], dtype=np.float32)
    approx_ids = np.array([[5, 7, 11], [1, 4, -1]])
    approx_scores = np.array([[0.9, 0.8, 0.7], [0.6, 0.39, -np.inf]], dtype=np.float32)
    recall = neighbour_recall(exact_ids, exact_scores, approx_ids, approx_scores, k=3)
    np.testing.assert_allclose(recall, [1.0, 1 / 3])  # 11 counts (tie at the k-th); 4 scores below, -1 is padding
    strict = neighbour_recall(exact_ids, exact_scores, approx_ids, approx_scores - np.float32(1e-3), k=3)
    np.testing.assert_allclose(strict, [2 / 3, 1 / 3])  # without the tie, 11 is a miss


def test_neighbour_recall_with_fewer_vectors_than_k():
    exact_ids = np.array([[0, 1, -1]])
    scores = np.array([[0.5, 0.2, -np.inf]])
    assert neighbour_recall(exact_ids, scores, np.array([[1, 0, -1]]), np.array([[0.2, 0.5, -np.inf]]), k=3)[0] == 1.0


def _table(rows):
    base = {"provider": "p", "build_params": "{}", "query_params": "{}", "flat_ndcg@10": 0.5, "delta_ndcg@10_ci_low": None,
            "neighbour_recall@10": 1.0}
    return pl.DataFrame([{**base, **row} for row in rows])


def test_recommendation_picks_the_fastest_setting_within_budget():
    table = _table([
        {"index_kind": "flat", "qps_batch": 100.0, "delta_ndcg@10": 0.0, "index_bytes": 1000},
        {"index_kind": "ivf", "query_params": '{"nprobe":1}', "qps_batch": 5000.0, "delta_ndcg@10": -0.05, "index_bytes": 900},
        {"index_kind": "ivf", "query_params": '{"nprobe":4}', "qps_batch": 2000.0, "delta_ndcg@10": -0.004, "index_bytes": 900},
        {"index_kind": "ivf", "query_params": '{"nprobe":8}', "qps_batch": 1200.0, "delta_ndcg@10": -0.001, "index_bytes": 900},
        {"index_kind": "hnsw", "query_params": '{"ef_search":16}', "qps_batch": 1900.0, "delta_ndcg@10": 0.0, "index_bytes": 2000},
    ])
    pick = recommend(table, "ndcg@10", 0.01)["p"]
    # nprobe=1 loses 10% (over budget); nprobe=4 loses 0.8% and is the fastest of the rest.
    assert (pick.index_kind, pick.query_params) == ("ivf", {"nprobe": 4})
    assert pick.relative_loss == pytest.approx(0.008) and pick.candidates == 4
    assert "ivf (nprobe=4)" in str(pick) and "2,000 queries/s" in str(pick)
    # A tighter budget falls back to the next fastest qualifying setting, and flat is always there.
    assert recommend(table, "ndcg@10", 0.001)["p"].index_kind == "hnsw"
    assert recommend(table.filter(pl.col("index_kind") != "hnsw"), "nDCG@10", 0.0)["p"].index_kind == "flat"


def test_recommendation_on_ci_low_is_stricter():
    table = _table([
        {"index_kind": "flat", "qps_batch": 100.0, "delta_ndcg@10": 0.0, "delta_ndcg@10_ci_low": 0.0, "index_bytes": 10},
        {"index_kind": "ivf", "qps_batch": 900.0, "delta_ndcg@10": -0.002, "delta_ndcg@10_ci_low": -0.02, "index_bytes": 10},
    ])
    assert recommend(table, "ndcg@10", 0.01)["p"].index_kind == "ivf"
    assert recommend(table, "ndcg@10", 0.01, budget_on="ci_low")["p"].index_kind == "flat"


def _held_out_table():
    """flat 0.5 on all, 0.5 on 40 dev queries, 0.4 on 55 test queries; budget 1%."""
    split = {"flat_ndcg@10_dev": 0.5, "flat_ndcg@10_test": 0.4, "queries": 95, "queries_dev": 40, "queries_test": 55}
    zero = {"delta_ndcg@10_dev": 0.0, "delta_ndcg@10_test": 0.0, "delta_ndcg@10_dev_ci_low": 0.0,
            "delta_ndcg@10_test_ci_low": 0.0, "delta_ndcg@10_test_ci_high": 0.0}
    return _table([
        {"index_kind": "flat", "qps_batch": 100.0, "delta_ndcg@10": 0.0, "index_bytes": 1000, **split, **zero},
        # all queries: 0.8% loss, within budget; dev: 2%, over it. The all-query rule would pick it.
        {"index_kind": "ivf", "query_params": '{"nprobe":1}', "qps_batch": 5000.0, "delta_ndcg@10": -0.004,
         "index_bytes": 900, **split, **zero, "delta_ndcg@10_dev": -0.01, "delta_ndcg@10_dev_ci_low": -0.02},
        # dev: 0.5% loss, within budget; test: 3% (interval of the delta [-0.02, -0.004] -> loss [1%, 5%]).
        {"index_kind": "ivf", "query_params": '{"nprobe":4}', "qps_batch": 2000.0, "delta_ndcg@10": -0.007,
         "index_bytes": 900, **split, **zero, "delta_ndcg@10_dev": -0.0025, "delta_ndcg@10_dev_ci_low": -0.004,
         "delta_ndcg@10_test": -0.012, "delta_ndcg@10_test_ci_low": -0.02, "delta_ndcg@10_test_ci_high": -0.004},
    ])


def test_recommendation_is_chosen_on_dev_and_checked_on_test():
    pick = recommend(_held_out_table(), "ndcg@10", 0.01)["p"]
    # nprobe=1 is faster and within budget on all queries, but loses 2% on dev: not a candidate.
    assert (pick.index_kind, pick.query_params, pick.candidates) == ("ivf", {"nprobe": 4}, 2)
    assert (pick.chosen_on, pick.chosen_queries, pick.test_queries) == ("dev", 40, 55)
    assert pick.relative_loss == pytest.approx(0.005)  # the dev loss it was chosen on
    assert pick.test_relative_loss == pytest.approx(0.03)  # 0.012 / 0.4
    assert (pick.test_loss_low, pick.test_loss_high) == (pytest.approx(0.01), pytest.approx(0.05))
    assert pick.test_within_budget is False
    line = pick.line()
    assert "loss 0.50% (budget 1%)" in line and "chosen on 40 dev queries" in line
    assert line.endswith("held-out check: loss on 55 test queries 3.00% [1.00%, 5.00%]; within budget: NO")
    saved = json.loads(json.dumps(pick.to_dict()))
    assert saved["test_within_budget"] is False and saved["chosen_on"] == "dev"
    # On ci_low the dev interval of nprobe=4 (-0.004 / 0.5 = 0.8%) still fits; its test check is at ci_low too.
    strict = recommend(_held_out_table(), "ndcg@10", 0.01, budget_on="ci_low")["p"]
    assert strict.query_params == {"nprobe": 4} and strict.test_within_budget is False
    # A looser budget: nprobe=1 qualifies on dev too, and passes on test (no loss there).
    loose = recommend(_held_out_table(), "ndcg@10", 0.05)["p"]
    assert loose.query_params == {"nprobe": 1} and loose.test_within_budget is True
    assert loose.line().endswith("loss on 55 test queries 0.00% [0.00%, 0.00%]; within budget: yes")


def test_recommendation_without_a_held_out_split_is_as_before():
    one_split = _held_out_table().select(pl.exclude("^.*_(dev|test)(_ci_low|_ci_high)?$"))
    pick = recommend(one_split, "ndcg@10", 0.01)["p"]
    assert pick.query_params == {"nprobe": 1} and pick.relative_loss == pytest.approx(0.008)
    assert (pick.chosen_on, pick.chosen_queries, pick.test_queries, pick.test_within_budget) == ("all", 95, None, None)
    assert pick.line().endswith("; 2 settings within budget; chosen and judged on the same queries (no held-out split)")


def test_sweep_gives_dev_and_test_columns_when_the_queries_have_both(sweep, tmp_path):
    doc_set, query_set, chunks_path, qrels = sweep["inputs"]
    splits = pl.DataFrame({"query_id": [f"q{i}" for i in range(40)], "split": ["dev"] * 15 + ["test"] * 25})
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        result = run_sweep(doc_set, query_set, chunks_path, qrels, SPEC, sweep["root"] / "store", tmp_path, splits=splits)
        only_test = run_sweep(doc_set, query_set, chunks_path, qrels, SPEC, sweep["root"] / "store", tmp_path / "one",
                              splits=splits.with_columns(split=pl.lit("test")))
    finally:
        faiss.omp_set_num_threads(threads)
    table, plain = pl.read_parquet(result.path), sweep["table"]
    assert result.built == 0 and (table["queries_dev"] + table["queries_test"] == table["queries"]).all()
    assert table["queries_dev"].unique().to_list() == [15]
    # The all-query columns are unchanged, and each is the query-weighted mean of its two splits.
    for column in ("flat_ndcg@10", "delta_ndcg@10", "delta_mrr", "delta_ndcg@10_ci_low", "relative_loss"):
        assert table[column].to_list() == plain[column].to_list(), column
    for measure in ("ndcg@10", "mrr", "recall@10"):
        for kind in ("flat", "delta"):
            mixed = (table[f"{kind}_{measure}_dev"] * 15 + table[f"{kind}_{measure}_test"] * 25) / 40
            np.testing.assert_allclose(mixed.to_numpy(), table[f"{kind}_{measure}"].to_numpy(), atol=1e-12)
    exact = _rows(table, "ivf", nprobe=16).row(0, named=True)
    assert (exact["delta_ndcg@10_test"], exact["delta_ndcg@10_test_ci_low"], exact["relative_loss_dev"]) == (0.0, 0.0, 0.0)
    pick = result.recommendation
    assert pick.chosen_on == "dev" and (pick.chosen_queries, pick.test_queries) == (15, 25)
    chosen = table.filter((pl.col("index_kind") == pick.index_kind)
                          & (pl.col("build_params") == json.dumps(pick.build_params, separators=(",", ":")))
                          & (pl.col("query_params") == json.dumps(pick.query_params, separators=(",", ":")))).row(0, named=True)
    assert pick.relative_loss == chosen["relative_loss_dev"] <= SPEC.loss_budget
    assert pick.test_relative_loss == chosen["relative_loss_test"]
    assert pick.test_within_budget == (chosen["relative_loss_test"] <= SPEC.loss_budget)
    # Every query in one split: no split columns, the recommendation as before.
    one = pl.read_parquet(only_test.path)
    assert one.columns == plain.columns and only_test.recommendation.chosen_on == "all"


def test_bootstrap_interval_is_paired_and_seeded():
    assert bootstrap_ci(np.zeros(50), 1000, seed=0) == (0.0, 0.0)
    diffs = np.random.default_rng(1).normal(-0.1, 0.05, 50)
    low, high = bootstrap_ci(diffs, 1000, seed=0)
    assert low < diffs.mean() < high < 0
    # The same seed draws the same resamples for every setting: the intervals are paired.
    assert (low, high) == bootstrap_ci(diffs, 1000, seed=0)
    assert bootstrap_ci(diffs, 0, seed=0) != bootstrap_ci(diffs, 0, seed=0)  # no resamples: NaN, no interval


def test_spec_defaults_follow_the_number_of_vectors():
    grid = dict(resolve_grid(SweepSpec(hnsw=None), n_vectors=10_000, dim=384))
    ivf = next(s for s in grid if s.kind == "ivf")
    pq = next(s for s in grid if s.kind == "ivfpq")
    assert (ivf.nlist, ivf.train_size) == (256, 10_000)  # the main flow's default_nlist, 256 per list capped at n
    assert [q["nprobe"] for q in grid[ivf]] == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert (pq.m, pq.nbits) == (48, 8)  # 384/8 sub-quantizers; 39 * 2^8 = 9984 <= 10k training points
    assert (default_pq_nbits(5000), default_pq_nbits(500)) == (7, 4)
    assert not any(s.kind == "hnsw" for s in grid)
    # nprobe beyond nlist is clipped; a measure is named canonically.
    grid = resolve_grid(SweepSpec(ivf={"nlist": [4], "nprobe": [2, 8, 64]}, hnsw=None, ivfpq=None, measure="nDCG@5"), 1000, 8)
    assert grid[1][1] == [{"nprobe": 2}, {"nprobe": 4}]
    assert [s.kind for s, _ in resolve_grid(SweepSpec(sq=None, binary=None), 300, 8)] == ["flat", "ivf", "hnsw"]  # too small for PQ defaults
    assert SweepSpec(measure="nDCG@5").measures() == ["recall@10", "mrr", "ndcg@10", "ndcg@5"]


def test_spec_refuses_bad_values():
    with pytest.raises(ValidationError, match="depth"):
        SweepSpec(k=20, depth=10)
    with pytest.raises(ValidationError, match="unknown measure"):
        SweepSpec(measure="ndgc@10")
    with pytest.raises(ValidationError, match="Extra inputs"):
        SweepSpec(hnsw={"efSearch": [10]})
    with pytest.raises(ValueError, match="must divide the vector dimension 30"):
        resolve_grid(SweepSpec(ivfpq={"m": [8]}, hnsw=None, ivf=None), 5000, 30)


def test_index_file_names_are_their_build_parameters():
    assert IndexSettings("ivf", nlist=32, train_size=8192, seed=0).file_name == "ivf_nlist-32_train-8192_seed-0.faiss"
    assert IndexSettings("hnsw", M=32, ef_construction=40).file_name == "hnsw_M-32_efc-40.faiss"
    assert IndexSettings("ivfpq", nlist=64, m=16, nbits=8, train_size=16384).file_name == \
        "ivfpq_nlist-64_m-16_nbits-8_train-16384_seed-0.faiss"


def test_mapped_loader_matches_load_vectors(tmp_path):
    provider = create_provider("hashing", {"dim": 16})
    texts = [f"doc {i} topic {i % 5}" for i in range(30)]
    first = embed_texts(provider, "h", [str(i) for i in range(30)], texts, "document", tmp_path, batch_size=7)
    ids, vectors, report = read_vectors(first)
    assert report.shards == 1 and report.copied_bytes == vectors.nbytes == 30 * 16 * 4
    expected_ids, expected = load_vectors(first)
    assert ids == expected_ids and np.array_equal(vectors, expected)
    # A second call adds a shard and reorders and repeats texts: the rows are gathered from both.
    more = texts[::-1] + ["a new text", texts[3]]
    second = embed_texts(provider, "h", [f"x{i}" for i in range(len(more))], more, "document", tmp_path)
    ids, vectors, report = read_vectors(second)
    assert report.shards == 2
    expected_ids, expected = load_vectors(second)
    assert ids == expected_ids and np.array_equal(vectors, expected)


def test_a_reused_sweeps_plot_is_drawn_once_per_recommendation_and_copied_after(tmp_path):
    import polars as pl

    from retbench.tasks.stages.measurements import _kept_plot

    drawn = []

    def plot(table, path, k, recommendation):
        drawn.append(recommendation)
        path.write_bytes(b"png of " + str(recommendation).encode())
        return path

    table = pl.DataFrame({"provider": ["e5"], "index_kind": ["flat"]})
    folder = tmp_path / "store" / "measurements" / "ann_sweep" / "key"
    folder.mkdir(parents=True)
    first = _kept_plot(tmp_path / "store", folder, table, 10, None, tmp_path / "out1" / "e5.png", plot)
    again = _kept_plot(tmp_path / "store", folder, table, 10, None, tmp_path / "out2" / "e5.png", plot)
    assert drawn == [None] and first.read_bytes() == again.read_bytes() == b"png of None"
    assert _kept_plot(tmp_path / "store", folder, table.head(0), 10, None, tmp_path / "x.png", plot) is None
