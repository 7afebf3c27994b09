"""Metadata filters: loading and refusing them, search restricted inside FAISS, the `filters`
table of judged documents a filter excludes, and what filters cost IVF/HNSW."""
import json

import faiss
import numpy as np
import polars as pl
import pytest

from retbench.tasks.datasets.errors import DatasetError
from retbench.tasks.stages.dataset import load_dataset
from retbench.tasks.stages.filtered_ann import filtered_fidelity
from retbench.tasks.stages.filters import filter_groups, filter_report, matches, search_with_filters
from retbench.tasks.stages.sweep import SyntheticDataset
from retbench.support.paths import ROOT


def _write_jsonl(folder, docs, queries, qrels):
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in (("corpus", docs), ("queries", queries), ("qrels", qrels)):
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


DOCS = [
    {"id": "d1", "text": "cards fees", "metadata": {"product": "cards", "year": 2024}},
    {"id": "d2", "text": "loan rates", "metadata": {"product": "loans", "year": 2023}},
    {"id": "d3", "text": "savings", "metadata": {"product": "savings"}},
    {"id": "d4", "text": "no metadata here"},
]
QRELS = [{"query_id": "q1", "doc_id": "d1", "grade": 2}, {"query_id": "q1", "doc_id": "d3", "grade": 1},
         {"query_id": "q2", "doc_id": "d2", "grade": 1}]


def test_metadata_and_filters_are_loaded(tmp_path):
    queries = [{"id": "q1", "text": "fees", "split": "dev", "filter": {"product": ["cards", "loans"]}},
               {"id": "q2", "text": "rates", "split": "dev"}]
    _write_jsonl(tmp_path, DOCS, queries, QRELS)
    ds = load_dataset(tmp_path, "jsonl")
    assert dict(ds.metadata.iter_rows()) == {"d1": '{"product":"cards","year":2024}',
                                             "d2": '{"product":"loans","year":2023}', "d3": '{"product":"savings"}'}
    assert ds.filters.rows() == [("q1", '{"product":["cards","loans"]}')]
    groups = filter_groups(ds.metadata, ds.filters, ds.corpus["doc_id"].to_list())
    assert groups.rows() == [('{"product":["cards","loans"]}', ["q1"], ["d1", "d2"])]
    report = filter_report(groups, ds.qrels, ds.corpus.height).row(0, named=True)
    # d3 is judged relevant to q1 but the filter excludes it: reported, and it stays in the qrels
    assert (report["allowed_docs"], report["selectivity"], report["relevant_judged"],
            report["relevant_outside_filter"], report["outside_doc_ids"]) == (2, 0.5, 2, 1, ["d3"])
    assert ds.qrels.filter(pl.col("doc_id") == "d3").height == 1


def test_matches_is_equality_and_membership_and_a_missing_field_fails():
    assert matches({"product": "cards", "year": 2024}, {"product": "cards", "year": [2023, 2024]})
    assert not matches({"product": "cards"}, {"year": 2024})
    assert not matches({"flag": True}, {"flag": 1})  # JSON true is not the number 1
    assert matches({"n": 1}, {"n": 1.0})


@pytest.mark.parametrize("query, message", [
    ({"filter": {"prodcut": "cards"}}, "queries.jsonl:1: filter field 'prodcut' is not a metadata field of any document (known: product, year; did you mean 'product'?)"),
    ({"filter": "cards"}, "queries.jsonl:1: field 'filter' must be a non-empty object"),
    ({"filter": {"product": {"in": ["cards"]}}}, "queries.jsonl:1: filter field 'product' must be a string, number or boolean, or a non-empty list"),
    ({"filter": {"product": []}}, "non-empty list"),
])
def test_bad_filters_are_refused_naming_file_and_line(tmp_path, query, message):
    _write_jsonl(tmp_path, DOCS, [{"id": "q1", "text": "fees", "split": "dev", **query}], QRELS[:2])
    with pytest.raises(DatasetError) as error:
        load_dataset(tmp_path, "jsonl")
    assert message in str(error.value)


def test_metadata_must_be_an_object_of_scalars(tmp_path):
    docs = [{"id": "d1", "text": "x", "metadata": {"tags": ["a", "b"]}}]
    _write_jsonl(tmp_path, docs, [{"id": "q1", "text": "x", "split": "dev"}], [{"query_id": "q1", "doc_id": "d1", "grade": 1}])
    with pytest.raises(DatasetError, match=r"corpus.jsonl:1: metadata field 'tags' must be a string, number or boolean"):
        load_dataset(tmp_path, "jsonl")


def test_beir_extra_fields_become_metadata(tmp_path):
    (tmp_path / "qrels").mkdir(parents=True)
    (tmp_path / "corpus.jsonl").write_text(
        json.dumps({"_id": "d1", "title": "", "text": "a", "source": "wiki", "metadata": {"year": 2020, "authors": ["x"]}}) + "\n"
        + json.dumps({"_id": "d2", "title": "", "text": "b"}) + "\n")
    (tmp_path / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "a"}) + "\n")
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    ds = load_dataset(tmp_path, "beir", split="test")
    assert ds.metadata.rows() == [("d1", '{"source":"wiki","year":2020}')]  # nested values left out


# ---------------------------------------------------------------- search inside FAISS


def _brute_force(docs, query, allowed_rows, k):
    scores = docs[allowed_rows] @ query
    order = np.argsort(-scores, kind="stable")[:k]
    return [int(allowed_rows[i]) for i in order]


@pytest.mark.parametrize("kind", ["flat", "ivf"])
def test_filtered_search_returns_the_best_allowed_documents(kind):
    rng = np.random.default_rng(0)
    docs = rng.standard_normal((300, 16)).astype(np.float32)
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    queries = docs[[5, 77, 150]] + 0.1 * rng.standard_normal((3, 16)).astype(np.float32)
    doc_ids = np.array([f"d{i:03d}" for i in range(300)], dtype=object)  # one chunk per document
    doc_codes = np.arange(300, dtype=np.int64)
    if kind == "flat":
        index = faiss.IndexFlatIP(16)
    else:
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(16), 16, 8, faiss.METRIC_INNER_PRODUCT)
        index.train(docs)
        index.nprobe = 8  # every list: filtered IVF must then equal filtered exact search
    index.add(docs)
    allowed = [f"d{i:03d}" for i in range(0, 300, 7)]
    groups = pl.DataFrame({"filter": ['{"x":1}'], "query_ids": [["q0", "q2"]], "doc_ids": [allowed]})
    hits = search_with_filters(index, queries, ["q0", "q1", "q2"], doc_codes, doc_ids, 5, groups)
    allowed_rows = np.arange(0, 300, 7)
    for row, filtered in ((0, True), (1, False), (2, True)):
        got = hits.filter(pl.col("query") == row)["chunk"].to_list()
        expected = _brute_force(docs, queries[row], allowed_rows if filtered else np.arange(300), 5)
        if kind == "flat" or filtered:
            assert got == expected, (row, got, expected)


def test_a_filter_allowing_nothing_retrieves_nothing():
    docs = np.eye(4, dtype=np.float32)
    index = faiss.IndexFlatIP(4)
    index.add(docs)
    groups = pl.DataFrame({"filter": ['{"x":1}'], "query_ids": [["q0"]], "doc_ids": [["nope"]]},
                          schema={"filter": pl.String, "query_ids": pl.List(pl.String), "doc_ids": pl.List(pl.String)})
    hits = search_with_filters(index, docs[:2], ["q0", "q1"], np.arange(4), np.array(["a", "b", "c", "d"], dtype=object),
                               3, groups)
    assert hits.filter(pl.col("query") == 0).height == 0 and hits.filter(pl.col("query") == 1).height == 3


# ---------------------------------------------------------------- what filters cost ANN


def test_filtered_ivf_recall_falls_with_selectivity_and_full_probing_is_exact():
    data = SyntheticDataset(d=32, nb=4000, nq=60, clusters=20)
    docs = data.documents()
    queries = data.queries(docs)
    ivf = faiss.IndexIVFFlat(faiss.IndexFlatIP(32), 32, 32, faiss.METRIC_INNER_PRODUCT)
    ivf.train(docs)
    ivf.add(docs)
    table = filtered_fidelity(docs, queries, [("ivf", ivf, [{"nprobe": 1}, {"nprobe": 32}])], resamples=100)
    assert set(table["selectivity"]) == {0.5, 0.1, 0.01} and set(table["filter_kind"]) == {"random", "correlated"}
    assert set(table.filter(pl.col("selectivity") == 0.01)["allowed"]) == {40}
    full = table.filter(pl.col("params") == '{"nprobe": 32}')
    assert (full["neighbour_recall"] == 1.0).all() and (full["starved_queries"] == 0).all()
    one = table.filter((pl.col("params") == '{"nprobe": 1}') & (pl.col("filter_kind") == "random")).sort("selectivity")
    recall = one["neighbour_recall"].to_list()
    assert recall[0] < recall[2]  # 1% loses more than 50%
    assert one["starved_queries"][0] > 0
    # post-filtering the unfiltered top 10k cannot fill a 1% filter's top k for most queries
    post = table.filter(pl.col("index").str.starts_with("flat+postfilter") & (pl.col("selectivity") == 0.01)
                        & (pl.col("filter_kind") == "random"))
    assert post["neighbour_recall"][0] < 0.5


def _circle(n: int = 36) -> np.ndarray:
    """Unit vectors at 0, 10, 20, ... degrees: cosine order is angle order, checkable by hand."""
    angles = np.radians(np.arange(n) * 360 / n)
    return np.stack([np.cos(angles), np.sin(angles)], axis=1).astype(np.float32)


def test_filtered_hnsw_by_hand_on_a_circle():
    docs = _circle()
    query = np.array([[np.cos(np.radians(4)), np.sin(np.radians(4))]], dtype=np.float32)  # 4 degrees
    hnsw = faiss.IndexHNSWFlat(2, 4, faiss.METRIC_INNER_PRODUCT)
    hnsw.add(docs)
    # allowed: 10, 50, 90 and 200 degrees, 6, 46, 86 and 196 degrees from the query
    allowed = np.array([1, 5, 9, 20], dtype=np.int64)
    selector = faiss.IDSelectorBatch(allowed)
    _, ids = hnsw.search(query, 3, params=faiss.SearchParametersHNSW(sel=selector, efSearch=36))
    assert ids.tolist() == [[1, 5, 9]]
    _, free = hnsw.search(query, 3, params=faiss.SearchParametersHNSW(efSearch=36))
    assert free.tolist() == [[0, 1, 35]]  # 4, 6 and 14 degrees away
    # the fidelity table's rows for this filter: HNSW finds the filtered exact top 3
    table = filtered_fidelity(docs, query, [("hnsw", hnsw, [{"efSearch": 36}])], k=3, resamples=10,
                              filters=[("by hand", 0.11, allowed)], overfetch=(2,))
    rows = {r["index"]: r for r in table.iter_rows(named=True)}
    assert rows["hnsw"]["params"] == '{"efSearch": 36}' and rows["hnsw"]["allowed"] == 4
    assert rows["hnsw"]["neighbour_recall"] == 1.0 and rows["hnsw"]["starved_queries"] == 0
    # post-filtering the unfiltered top 6 (0, 1, 35, 2, 34, 3) keeps only row 1: 2 of 3 are missing
    post = rows["flat+postfilter x2"]
    assert post["neighbour_recall"] == pytest.approx(1 / 3) and post["starved_queries"] == 1


def test_filtered_hnsw_recall_falls_with_selectivity_and_a_full_ef_is_exact():
    data = SyntheticDataset(d=32, nb=4000, nq=60, clusters=20)
    docs = data.documents()
    queries = data.queries(docs)
    hnsw = faiss.IndexHNSWFlat(32, 16, faiss.METRIC_INNER_PRODUCT)
    hnsw.add(docs)
    table = filtered_fidelity(docs, queries, [("hnsw", hnsw, [{"efSearch": 16}, {"efSearch": 4000}])],
                              kinds=("random",), resamples=100)
    full = table.filter(pl.col("params") == '{"efSearch": 4000}')
    assert (full["neighbour_recall"] == 1.0).all() and (full["starved_queries"] == 0).all()
    small = table.filter(pl.col("params") == '{"efSearch": 16}').sort("selectivity")["neighbour_recall"].to_list()
    assert small[0] < small[2] - 0.2  # a 1% filter costs HNSW far more than a 50% one


# ---------------------------------------------------------------- the sample, end to end

SPEC = """
name: filters
dataset: {{path: {data}, format: jsonl, split: all}}
chunking: {{strategy: paragraph, max_words: 120}}
providers: [{{name: hashing, kind: hashing}}]
indexes: {{ivf: {{nprobe: [1, 100]}}}}
statistics: {{resamples: 100, permutations: 100}}
history: {{enabled: false}}
filter_sweep: {{selectivities: [0.5, 0.1, 0.01], kinds: [random], hnsw: {{M: 16, ef_search: [16, 1000]}}}}
output_dir: {out}
store_dir: {store}
"""


@pytest.fixture(scope="module")
def filtered_run(tmp_path_factory):
    from retbench.tasks.config.spec import load_spec
    from retbench.tasks.pipeline import run_pipeline

    base = tmp_path_factory.mktemp("filters")
    (base / "spec.yaml").write_text(SPEC.format(data=ROOT / "data" / "sample", out=base / "out", store=base / "store"))
    return run_pipeline(load_spec(base / "spec.yaml"))


def test_sample_filters_table_reports_excluded_judgments(filtered_run):
    table = pl.read_parquet(filtered_run.tables["filters"])
    assert table.height == 8
    outside = dict(table.filter(pl.col("relevant_outside_filter") > 0).select("query_id", "outside_doc_ids").iter_rows())
    assert outside == {"q108": ["hi-019", "privacy-001"], "q109": ["hi-006", "hi-007"]}
    assert table.filter(pl.col("query_id") == "q106")["allowed_docs"].item() == 18  # 12 logs + 6 audit pages


def test_filtered_queries_retrieve_only_allowed_documents_and_full_ivf_equals_flat(filtered_run):
    runs = pl.read_parquet(filtered_run.tables["runs"])
    corpus = pl.read_ndjson(ROOT / "data" / "sample" / "corpus.jsonl")
    product = dict(zip(corpus["id"], corpus["metadata"].struct.field("product")))
    q103 = runs.filter(pl.col("query_id") == "q103")
    assert q103.height > 0 and {product[d] for d in q103["doc_id"]} == {"logs"}
    assert q103.filter(pl.col("index") == "flat").height == 12  # all 12 logs pages, nothing else
    flat = runs.filter((pl.col("index") == "flat") & pl.col("query_id").is_in(["q103", "q106", "q109"]))
    nlist = max(n for n in runs["nprobe"].drop_nulls())
    full = runs.filter((pl.col("nprobe") == nlist) & pl.col("query_id").is_in(["q103", "q106", "q109"]))
    assert flat.select("query_id", "doc_id", "rank").equals(full.select("query_id", "doc_id", "rank"))


def test_a_starved_filtered_query_scores_zero_rather_than_disappearing(filtered_run):
    per_query = pl.read_parquet(filtered_run.tables["per_query"]).filter(pl.col("measure") == "ndcg@10")
    counts = per_query.group_by("index", "nprobe").agg(pl.len())["len"].to_list()
    assert set(counts) == {110}


def test_filtered_ann_table_on_the_run_vectors(filtered_run):
    table = pl.read_parquet(filtered_run.tables["filtered_ann"])
    assert set(table["selectivity"]) == {0.5, 0.1, 0.01} and set(table["provider"]) == {"hashing"}
    probes = table.filter(pl.col("index").str.starts_with("ivf"))["params"].unique().to_list()
    assert len(probes) == 2
    hnsw = table.filter(pl.col("index") == "hnsw_M-16_efc-40")
    assert sorted(hnsw["params"].unique()) == ['{"efSearch": 1000}', '{"efSearch": 16}']
    assert hnsw.height == 6  # 3 selectivities x 2 efSearch, the same columns as the IVF rows
    # efSearch above the number of vectors explores the whole graph: filtered HNSW is exact
    full = hnsw.filter(pl.col("params") == '{"efSearch": 1000}')
    assert (full["neighbour_recall"] == 1.0).all() and (full["starved_queries"] == 0).all()
