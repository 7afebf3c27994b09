"""The `glasgow` dataset format: NPL, CISI and MED read in full and checked against the collections'
README (counts, formats) and their own text; malformed copies refused by file:line; a whole run's
measures equal pytrec_eval's. BM25 on these collections is checked against bm25s in
tests/unit/test_lexical.py."""
from pathlib import Path

import pytest

from retbench.support.paths import SHARED_DATA
from retbench.tasks.datasets.errors import DatasetError
from retbench.tasks.stages.dataset import load_dataset

GLASGOW = SHARED_DATA / "glasgow" if (SHARED_DATA / "glasgow").is_dir() else None


@pytest.fixture(scope="module")
def real():
    if GLASGOW is None:
        pytest.skip("shared/data/glasgow not present")
    return {c: load_dataset(GLASGOW / c, "glasgow", "all") for c in ("npl", "cisi", "med")}


# ---------------------------------------------------------------- the real collections


# The README table: docs, queries, judged queries, judgment rows. Unjudged queries (36 in CISI)
# are dropped by the assembler, so the loaded query count is the judged count.
@pytest.mark.parametrize("collection, docs, queries, judged, rows", [
    ("npl", 11429, 93, 93, 2083),
    ("cisi", 1460, 112, 76, 3114),
    ("med", 1033, 30, 30, 696),
])
def test_counts_match_the_readme_table(real, collection, docs, queries, judged, rows):
    ds = real[collection]
    assert ds.name == collection
    assert ds.corpus.height == docs and ds.corpus["doc_id"].n_unique() == docs
    assert ds.queries.height == judged
    assert ds.qrels.height == rows
    assert ds.qrels["query_id"].n_unique() == judged
    assert ds.qrels["grade"].unique().to_list() == [1]  # binary: every listed pair relevant
    assert set(ds.queries["split"]) == {"test"} and set(ds.corpus["language"]) == {"en"}
    # Ids are the collections' own numbers, 1..N with no gaps.
    assert set(ds.corpus["doc_id"]) == {str(i) for i in range(1, docs + 1)}
    assert any(f"{docs} documents, {judged} queries, {rows} judgments" in n for n in ds.notes)
    if queries != judged:
        assert any(n.startswith(f"{queries - judged} queries in split 'all' without judgments dropped") for n in ds.notes)


def test_npl_spot_checks(real):
    ds = real["npl"]
    doc = dict(zip(ds.corpus["doc_id"], ds.corpus["text"]))
    assert doc["1"].startswith("compact memories have flexible capacities  a digital data storage system")
    assert doc["11429"].endswith("reading handlettered sansserif alphanumeric characters")
    assert set(ds.corpus["title"]) == {""}
    queries = dict(zip(ds.queries["query_id"], ds.queries["text"]))
    assert queries["1"] == "MEASUREMENT OF DIELECTRIC CONSTANT OF LIQUIDS BY THE USE OF MICROWAVE TECHNIQUES"
    # Query 17 runs over two lines: they are joined with one space.
    assert queries["17"].endswith("HYDROMAGNETIC WAVES IN THE EXOSPHERE")
    q1 = sorted(ds.qrels.filter(ds.qrels["query_id"] == "1")["doc_id"], key=int)
    assert q1 == ["1239", "1502", "4462", "4569", "5472", "5502", "6471", "6480", "6664", "6824",
                  "7923", "8150", "8172", "8277", "9219", "9859", "9988", "10081", "10588"]


def test_cisi_spot_checks(real):
    ds = real["cisi"]
    title = dict(zip(ds.corpus["doc_id"], ds.corpus["title"]))
    text = dict(zip(ds.corpus["doc_id"], ds.corpus["text"]))
    assert title["1"] == "18 Editions of the Dewey Decimal Classifications"
    assert text["1"].startswith("The present study is a history of the DEWEY Decimal Classification.")
    # Cross-references (.X) are not text: doc 1's last abstract words are kept, its .X numbers are not.
    assert not text["1"].rstrip().endswith("1")
    queries = dict(zip(ds.queries["query_id"], ds.queries["text"]))
    assert queries["1"].startswith("What problems and concerns are there in making up descriptive titles?")
    # Query 58 is a paper: title, then abstract; its authors are not in the text.
    assert queries["58"].startswith("Directions in Library Networking Bibliographic control before and after MARC")
    assert "Avram" not in queries["58"]
    # Query 36 has no line in CISI.REL: dropped, and named in the notes.
    assert "36" not in queries and "111" in queries
    assert any(n.startswith("cisi: 36 of 112 queries in CISI.QRY have no judgments") for n in ds.notes)
    assert ds.qrels.filter(ds.qrels["query_id"] == "1").height == 46


def test_med_spot_checks(real):
    ds = real["med"]
    text = dict(zip(ds.corpus["doc_id"], ds.corpus["text"]))
    assert text["1"].startswith("correlation between maternal and fetal plasma levels of glucose and free fatty acids .")
    assert text["1033"].endswith("longterm prospective medicosocial studies.")
    queries = dict(zip(ds.queries["query_id"], ds.queries["text"]))
    assert queries["1"] == "the crystalline lens in vertebrates, including humans."
    assert ds.qrels.filter(ds.qrels["query_id"] == "1").height == 37
    assert ("30", "1033", 1) in set(ds.qrels.iter_rows())


def test_collection_is_inferred_and_dev_is_refused():
    if GLASGOW is None:
        pytest.skip("shared/data/glasgow not present")
    with pytest.raises(DatasetError, match=r"MED collection has no dev split.*expected split 'test' or 'all'"):
        load_dataset(GLASGOW / "med", "glasgow", "dev")
    # The parent folder holds no collection files itself: the error points at the subfolders.
    with pytest.raises(DatasetError, match=r"no Glasgow collection files \(it has subfolders cisi, med, npl"):
        load_dataset(GLASGOW, "glasgow", "test")
    ds = load_dataset(GLASGOW / "med", "glasgow", "test", collection="med", name="med-test")
    assert ds.name == "med-test" and ds.queries.height == 30


# ---------------------------------------------------------------- small malformed copies


def write(folder: Path, files: dict[str, str], crlf: bool = False) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_bytes(text.replace("\n", "\r\n" if crlf else "\n").encode())
    return folder


NPL = {
    "doc-text": "1\nwave guides for microwave\nradiation\n   /\n2\nbinary number systems\n   /\n",
    "query-text": "1\nMICROWAVE RADIATION\n/\n2\nBINARY NUMBERS\n/\n",
    "rlv-ass": "1\n    1\n   /\n2\n    2    1\n   /\n",
}
CISI = {
    "CISI.ALL": ".I 1\n.T\nLibrary networks\n.A\nAvram, H.D.\n.A\nMcCallum, S.H.\n.W\n  Networks of libraries.\n.X\n1\t5\t1\n"
                ".I 2\n.T\nIndexing\n.W\nIndex terms.\n.X\n2\t5\t2\n",
    "CISI.QRY": ".I 1\n.W\nHow do library networks work?\n.I 2\n.T\nA paper title\n.A\nSomeone, A.\n.W\nIts abstract.\n.I 3\n.W\nAn unjudged question.\n",
    "CISI.REL": "     1      1\t0\t0.000000\n     2      2\t0\t0.000000\n     2      1\t0\t0.000000\n",
}
MED = {
    "MED.ALL": ".I 1\n.W\ncorrelation of glucose\n .016 ug/100 ml . in the patients\n.I 2\n.W\nlung tissue culture\n",
    "MED.QRY": ".I 1\n.W\n glucose levels\n",
    "MED.REL": "1 0 1 1\n1 0 2 1\n",
}


def test_small_collections_load(tmp_path):
    npl = load_dataset(write(tmp_path / "npl", NPL), "glasgow", "test")
    assert npl.corpus.rows() == [("1", "", "wave guides for microwave radiation", "en"),
                                 ("2", "", "binary number systems", "en")]
    assert sorted(npl.qrels.rows()) == [("1", "1", 1), ("2", "1", 1), ("2", "2", 1)]
    cisi = load_dataset(write(tmp_path / "cisi", CISI, crlf=True), "glasgow", "all")
    assert cisi.corpus.rows() == [("1", "Library networks", "Networks of libraries.", "en"),
                                  ("2", "Indexing", "Index terms.", "en")]
    assert cisi.queries["text"].to_list() == ["How do library networks work?", "A paper title Its abstract."]
    assert any(n.startswith("1 queries in split 'all' without judgments dropped") for n in cisi.notes)
    med = load_dataset(write(tmp_path / "med", MED), "glasgow", "test")
    # A text line starting with '.' is text, not a tag.
    assert med.corpus["text"][0] == "correlation of glucose .016 ug/100 ml . in the patients"


@pytest.mark.parametrize("collection, name, text, message", [
    # NPL: a missing '/' runs two records together; the next id is a bare number inside the text.
    ("npl", "doc-text", "1\nwave guides\n2\nbinary numbers\n   /\n",
     r"doc-text:3: a line holding only the number 2 inside record '1' \(started at line 1\)"),
    ("npl", "query-text", "1\nMICROWAVE\n/\n2\nBINARY\n",
     r"query-text:4: record '2' is not closed at the end of the file; expected a line holding only '/'"),
    ("npl", "doc-text", "1\nwave guides\n/\n2b\nbinary\n/\n", r"doc-text:4: document id must be a number, found '2b'"),
    ("npl", "doc-text", "1 wave guides\n/\n", r"doc-text:1: expected the document id alone on the first line"),
    ("npl", "rlv-ass", "1\n  1  x2\n/\n", r"rlv-ass:2 \(record of query 1 from line 1\): doc id must be a number, found 'x2'"),
    ("npl", "rlv-ass", "1\n  1  9\n/\n", r"rlv-ass:2 \(record of query 1 from line 1\): doc id '9' is not in .*doc-text"),
    ("npl", "rlv-ass", "1\n  1\n/\n1\n  2\n/\n", r"rlv-ass:4: duplicate id '1' \(first at .*rlv-ass:1\)"),
    ("npl", "rlv-ass", "1\n  1\n/\n3\n  2\n/\n", r"rlv-ass:5 \(record of query 3 from line 4\): query id '3' is not in .*query-text"),
    ("npl", "rlv-ass", "1\n/\n", r"rlv-ass:1: query '1' lists no documents"),
    ("npl", "query-text", "1\n/\n", r"query-text:1: query '1' has no text"),
    # CISI.REL: a line that is not `qid docid 0 0.0`.
    ("cisi", "CISI.REL", "1 1 0 0.0\n2 2 0\n", r"CISI.REL:2: expected 4 whitespace-separated fields 'qid docid 0 0.0'; found 3"),
    ("cisi", "CISI.REL", "1 1 0 0.0\n2 two 0 0.0\n", r"CISI.REL:2: doc id must be a number, found 'two'"),
    ("cisi", "CISI.REL", "1 1 0 0.0\n\n2 2 0 zero\n", r"CISI.REL:3: fourth field must be a number, found 'zero'"),
    ("cisi", "CISI.REL", "1 1 0 0.0\n2 7 0 0.0\n", r"CISI.REL:2: doc id '7' is not in .*CISI.ALL"),
    ("cisi", "CISI.ALL", ".I 1\n.T\nA\n.W\nB\n.I x\n.W\nC\n", r"CISI.ALL:6: expected '.I <number>', found '.I x'"),
    ("cisi", "CISI.ALL", ".I 1\n.T\nA\n.Z\nB\n", r"CISI.ALL:4: unknown field tag .Z; expected one of .I, .T, .A"),
    ("cisi", "CISI.QRY", "stray text\n.I 1\n.W\nQ\n", r"CISI.QRY:1: text outside a field"),
    ("cisi", "CISI.QRY", ".I 1\n.T\nOnly a title\n", r"CISI.QRY:1: query '1' has no .W text"),
    ("cisi", "CISI.ALL", ".I 1\n.W\nA\n.I 1\n.W\nB\n", r"CISI.ALL:4: duplicate id '1' \(first at .*CISI.ALL:1\)"),
    # MED: a .X tag is CISI's, not MED's; MED.REL grades outside 0..1 are not binary.
    ("med", "MED.ALL", ".I 1\n.W\nA\n.X\n1 5 1\n", r"MED.ALL:4: unknown field tag .X; expected one of .I, .W$"),
    ("med", "MED.REL", "1 0 1 1\n1 0 2 2\n", r"MED.REL:2: grade 2 for query '1' is outside 0..1"),
    ("med", "MED.REL", "1 0 1\n", r"MED.REL:1: expected 4 whitespace-separated fields 'qid 0 docid rel'; found 3"),
])
def test_malformed_input_is_refused_naming_file_and_line(tmp_path, collection, name, text, message):
    files = {"npl": NPL, "cisi": CISI, "med": MED}[collection]
    folder = write(tmp_path / collection, {**files, name: text})
    with pytest.raises(DatasetError, match=message):
        load_dataset(folder, "glasgow", "test")


def test_collection_option_and_inference_errors(tmp_path):
    with pytest.raises(DatasetError, match=r"collection='trec'; expected one of \['npl', 'cisi', 'med'\]"):
        load_dataset(write(tmp_path / "a", MED), "glasgow", "test", collection="trec")
    both = write(tmp_path / "b", {**MED, **CISI})
    with pytest.raises(DatasetError, match=r"several Glasgow collections \(cisi, med\); expected option collection"):
        load_dataset(both, "glasgow", "test")
    assert load_dataset(both, "glasgow", "test", collection="cisi").corpus.height == 2
    # One of the three files missing: named, with what it should hold.
    (tmp_path / "c").mkdir()
    write(tmp_path / "c", {"doc-text": NPL["doc-text"], "rlv-ass": NPL["rlv-ass"]})
    with pytest.raises(DatasetError, match=r"query-text: missing; expected NPL query-text"):
        load_dataset(tmp_path / "c", "glasgow", "test")
    with pytest.raises(DatasetError, match=r"unknown option\(s\) \['query_language'\] for format 'glasgow'"):
        load_dataset(tmp_path / "c", "glasgow", "test", query_language="en")


# ---------------------------------------------------------------- end to end


@pytest.mark.slow
def test_npl_hashing_run_agrees_with_pytrec_eval(tmp_path):
    """The whole pipeline on NPL with the hashing provider: scores equal pytrec_eval's per query.

    NPL query 55 has two relevant documents tied at one score (ranks 9 and 10) with no other
    document at it: the case tests/unit/test_metrics_ties.py pins down, here on real data.
    """
    if GLASGOW is None:
        pytest.skip("shared/data/glasgow not present")
    import polars as pl
    import pytrec_eval

    from retbench.tasks.config.spec import load_spec
    from retbench.tasks.pipeline import Selection, run_pipeline

    spec_file = tmp_path / "npl.yaml"
    spec_file.write_text(
        f"name: npl-hashing\n"
        f"dataset: {{path: {GLASGOW / 'npl'}, format: glasgow, split: all}}\n"
        "chunking: {strategy: none}\n"
        "providers: [{name: hashing, kind: hashing}]\n"
        "indexes: {ivf: null}\n"
        f"output_dir: {tmp_path / 'out'}\nstore_dir: {tmp_path / 'store'}\nhistory: {{enabled: false}}\n"
    )
    result = run_pipeline(load_spec(spec_file), Selection(stage="score"), spec_path=spec_file)
    assert result.manifest["dataset"]["documents"] == 11429
    assert result.manifest["dataset"]["queries"] == 93 and result.manifest["dataset"]["judgments"] == 2083
    dataset_dir = Path(result.manifest["dataset"]["path"])
    qrels, runs = pl.read_parquet(dataset_dir / "qrels.parquet"), pl.read_parquet(Path(result.tables["runs"]))
    judged: dict = {}
    ranked: dict = {}
    for q, d, g in qrels.iter_rows():
        judged.setdefault(q, {})[d] = g
    for q, d, s in runs.select("query_id", "doc_id", "score").iter_rows():
        ranked.setdefault(q, {})[d] = s
    top55 = sorted(ranked["55"].items(), key=lambda item: -item[1])[:11]
    tied = [d for d, s in top55 if s == top55[8][1]]
    assert len(tied) == 2 and all(d in judged["55"] for d in tied)

    reference = pytrec_eval.RelevanceEvaluator(judged, {"ndcg_cut.10", "recip_rank", "recall.10"}).evaluate(ranked)
    per_query = pl.read_parquet(Path(result.tables["per_query"]))
    for measure, key in [("ndcg@10", "ndcg_cut_10"), ("mrr", "recip_rank"), ("recall@10", "recall_10")]:
        ours = dict(per_query.filter(pl.col("measure") == measure).select("query_id", "value").iter_rows())
        assert ours.keys() == reference.keys()
        for q, value in ours.items():
            assert value == pytest.approx(reference[q][key], abs=1e-12), (measure, q)
