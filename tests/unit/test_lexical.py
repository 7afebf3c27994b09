"""BM25 first stage: tokeniser (Devanagari too), hand-computed scores, MaxP runs in the dense run
schema, the index built once and rebuilt when damaged, and parity with bm25s on real collections."""
from __future__ import annotations

import math
import re
from pathlib import Path

import bm25s
import numpy as np
import polars as pl
import pytest

from retbench.tasks.analysis.runs import RUN_SCHEMA, trec_order
from retbench.tasks.config.systems import LexicalSpec, TokenizerSpec
from retbench.tasks.stages.lexical import Tokenizer, bm25_run, build_bm25_index, search_bm25
from retbench.support.paths import SHARED_DATA

DATA = SHARED_DATA if SHARED_DATA.is_dir() else Path("/work/shared/data")
PLAIN = TokenizerSpec(stopwords=None, min_length=1)


def write_chunks(path: Path, rows: list[tuple[str, str, str]]) -> Path:
    pl.DataFrame(rows, schema={"chunk_id": pl.String, "doc_id": pl.String, "text": pl.String}, orient="row").write_parquet(path)
    return path


def queries(*rows: tuple[str, str]) -> pl.DataFrame:
    return pl.DataFrame(list(rows), schema={"query_id": pl.String, "text": pl.String}, orient="row")


# ---------------------------------------------------------------- tokeniser


def test_devanagari_words_stay_whole_where_bm25s_default_pattern_cuts_them():
    text = "भारत की राजधानी नई दिल्ली है। किताबें पढ़ना"
    # bm25s's default pattern: vowel signs and virama are not \w, so words fall apart.
    assert re.findall(r"(?u)\b\w\w+\b", text) == ["रत", "जध", "नई", "पढ"]
    assert Tokenizer(TokenizerSpec(stopwords=None))(text) == ["भारत", "की", "राजधानी", "नई", "दिल्ली", "है", "किताबें", "पढ़ना"]


def test_decomposed_nukta_is_normalised_to_the_composed_form():
    composed, decomposed = "पढ़ना", "पढ\u093cना"  # ढ़ as one code point vs ढ + nukta
    tok = Tokenizer(TokenizerSpec(stopwords=None))
    assert tok(decomposed) == tok(composed) == ["पढ़ना"]


def test_lowercase_stopwords_min_length_and_stemmer():
    text = "The Boundary-layer FLOWS of a wing, e.g. x"
    assert Tokenizer(TokenizerSpec(stopwords=None, lowercase=False))(text) == ["The", "Boundary", "layer", "FLOWS", "of", "wing"]
    assert Tokenizer(TokenizerSpec(stopwords=None))(text) == ["the", "boundary", "layer", "flows", "of", "wing"]
    assert Tokenizer(TokenizerSpec(stopwords="en"))(text) == ["boundary", "layer", "flows", "wing"]
    assert Tokenizer(TokenizerSpec(stopwords="en", stemmer="english"))(text) == ["boundari", "layer", "flow", "wing"]
    assert Tokenizer(TokenizerSpec(stopwords=["wing"], min_length=1))(text) == ["the", "boundary", "layer", "flows", "of", "a", "e", "g", "x"]
    assert Tokenizer(TokenizerSpec(stopwords="hi"))("भारत की राजधानी") == ["भारत", "राजधानी"]


def test_tokenizer_spec_refuses_unknown_language_and_stemmer():
    with pytest.raises(ValueError, match="unknown stop-word language 'xx'"):
        TokenizerSpec(stopwords="xx")
    with pytest.raises(ValueError, match="unknown stemmer 'klingon'"):
        TokenizerSpec(stemmer="klingon")
    assert TokenizerSpec(stopwords="none").stopwords is None


# ---------------------------------------------------------------- scores and runs


def test_lucene_bm25_scores_match_the_formula_by_hand(tmp_path):
    chunks = write_chunks(tmp_path / "c.parquet", [("d1#0", "d1", "apple banana"), ("d2#0", "d2", "apple apple cherry"),
                                                     ("d3#0", "d3", "cherry")])
    index = build_bm25_index(chunks, LexicalSpec(name="t", tokenizer=PLAIN, k1=1.2, b=0.75), tmp_path / "store")
    run = pl.read_parquet(bm25_run(index, queries(("q", "apple")), "bm25-t", 10, tmp_path / "store").path)
    # Lucene: idf = ln(1 + (N - df + .5) / (df + .5)) = ln(1 + 1.5 / 2.5); avgdl = 2;
    # tf part = tf / (tf + k1 (1 - b + b dl / avgdl)).
    idf = math.log(1 + 1.5 / 2.5)
    d1 = idf * 1 / (1 + 1.2 * (0.25 + 0.75 * 2 / 2))
    d2 = idf * 2 / (2 + 1.2 * (0.25 + 0.75 * 3 / 2))
    assert run["doc_id"].to_list() == ["d2", "d1"]  # d3 holds no query term: not in the run
    np.testing.assert_allclose(run["score"].to_numpy(), [d2, d1], rtol=1e-5)


def test_run_is_maxp_in_the_dense_run_schema_and_trec_order(tmp_path):
    chunks = write_chunks(tmp_path / "c.parquet", [
        ("a#0", "a", "wing flutter"), ("a#1", "a", "wing wing flutter flutter"), ("a#2", "a", "nothing here"),
        ("b#0", "b", "wing"), ("c#0", "c", "flutter"), ("d#0", "d", "wing"),  # b and d tie
        ("e#0", "e", "unrelated words"),
    ])
    store = tmp_path / "store"
    index = build_bm25_index(chunks, LexicalSpec(name="t", tokenizer=PLAIN), store)
    result = bm25_run(index, queries(("q1", "wing flutter"), ("q2", "zzz")), "bm25-t", 10, store)
    run = pl.read_parquet(result.path)
    assert run.schema == pl.Schema(RUN_SCHEMA)
    assert result.empty_queries == 1 and run["query_id"].unique().to_list() == ["q1"]
    Path(f"{result.path}.json").unlink()  # a crash between the run file and its metadata
    again = bm25_run(index, queries(("q1", "wing flutter"), ("q2", "zzz")), "bm25-t", 10, store)
    assert not again.computed and again.empty_queries == 1
    assert run["doc_id"].to_list()[0] == "a" and run["chunk_id"].to_list()[0] == "a#1"  # its best chunk
    assert sorted(run["doc_id"].to_list()) == ["a", "b", "c", "d"]  # one row per document, e never
    assert run.equals(trec_order(run))  # b/d tie: d before b (doc id descending), as trec_eval
    assert set(run["provider"]) == {"bm25-t"} and set(run["index"]) == {"bm25"} and run["nprobe"].null_count() == run.height
    # depth cuts documents, not chunks
    short = pl.read_parquet(bm25_run(index, queries(("q1", "wing flutter")), "bm25-t", 2, store).path)
    assert short["doc_id"].to_list() == run["doc_id"].to_list()[:2]


def test_maxp_reaches_depth_documents_when_one_document_owns_the_best_chunks(tmp_path):
    rows = [(f"big#{i}", "big", "rotor " * (5 - i % 3) + "x") for i in range(40)]
    rows += [("s1#0", "s1", "rotor blade blade blade blade"), ("s2#0", "s2", "rotor y y y y y y y y")]
    index = build_bm25_index(write_chunks(tmp_path / "c.parquet", rows), LexicalSpec(name="t", tokenizer=PLAIN), tmp_path / "s")
    run, _, _ = search_bm25(index.path, [["rotor"]], ["q"], depth=3)
    assert run["doc_id"].to_list() == ["big", "s1", "s2"]


def test_hindi_query_finds_its_document_through_the_stemmer(tmp_path):
    chunks = write_chunks(tmp_path / "c.parquet", [
        ("h1#0", "h1", "भारत की राजधानी नई दिल्ली है।"),
        ("h2#0", "h2", "लड़कियों ने किताबें पढ़ीं।"),
        ("h3#0", "h3", "गंगा भारत की सबसे लंबी नदी है।"),
    ])
    spec = LexicalSpec(name="hi", tokenizer=TokenizerSpec(stopwords="hi", stemmer="hindi"))
    index = build_bm25_index(chunks, spec, tmp_path / "store")
    run = pl.read_parquet(bm25_run(index, queries(("q", "किताब कौन पढ़ती है?"), ("r", "राजधानी")), "bm25-hi", 10, tmp_path / "store").path)
    assert run.filter(pl.col("query_id") == "q")["doc_id"].to_list() == ["h2"]  # किताब ~ किताबें after stemming
    assert run.filter(pl.col("query_id") == "r")["doc_id"].to_list() == ["h1"]


def test_index_built_once_per_content_and_settings_and_rebuilt_when_damaged(tmp_path):
    chunks = write_chunks(tmp_path / "c.parquet", [("a#0", "a", "wing flutter"), ("b#0", "b", "wing")])
    store = tmp_path / "store"
    spec = LexicalSpec(name="t", tokenizer=PLAIN)
    first = build_bm25_index(chunks, spec, store)
    again = build_bm25_index(chunks, spec.model_copy(update={"name": "renamed"}), store)
    assert first.computed and not again.computed and again.path == first.path  # the name is not a setting
    other = build_bm25_index(chunks, spec.model_copy(update={"k1": 0.9}), store)
    assert other.computed and other.path != first.path
    assert sorted(p.name for p in Path(first.path).iterdir() if not p.name.endswith(".sha256")) == sorted(
        ["data.csc.index.npy", "indices.csc.index.npy", "indptr.csc.index.npy", "vocab.index.json", "params.index.json",
         "chunks.parquet", "index.json"])
    vocab = Path(first.path) / "vocab.index.json"
    vocab.write_text(vocab.read_text()[:-5])  # damaged after the fact
    healed = build_bm25_index(chunks, spec, store)
    assert healed.computed and healed.path == first.path
    assert list((store / "quarantine").rglob("*")), "the damaged folder went to quarantine"
    run1 = bm25_run(healed, queries(("q", "wing")), "s", 5, store)
    run2 = bm25_run(healed, queries(("q", "wing")), "s", 5, store)
    assert run1.computed and not run2.computed and run1.path == run2.path
    assert pl.read_parquet(run2.path)["doc_id"].to_list() == ["b", "a"]  # shorter doc wins on one tf


def test_empty_chunks_are_indexed_and_a_corpus_without_terms_is_refused(tmp_path):
    chunks = write_chunks(tmp_path / "c.parquet", [("a#0", "a", ""), ("b#0", "b", None), ("c#0", "c", "the wing")])
    index = build_bm25_index(chunks, LexicalSpec(name="en"), tmp_path / "s")
    run = pl.read_parquet(bm25_run(index, queries(("q", "wings of the"), ("r", "the")), "s", 10, tmp_path / "s").path)
    assert run["doc_id"].to_list() == []  # "wings" is not "wing" without a stemmer; "the" is a stop word
    stopped = write_chunks(tmp_path / "d.parquet", [("a#0", "a", "the of"), ("b#0", "b", "")])
    with pytest.raises(ValueError, match=r"d\.parquet: none of the 2 chunks has a term left after tokenising"):
        build_bm25_index(stopped, LexicalSpec(name="en"), tmp_path / "s")


def test_bm25l_writes_and_verifies_its_extra_array(tmp_path):
    chunks = write_chunks(tmp_path / "c.parquet", [("a#0", "a", "wing flutter"), ("b#0", "b", "wing")])
    index = build_bm25_index(chunks, LexicalSpec(name="l", tokenizer=PLAIN, method="bm25l"), tmp_path / "s")
    assert (Path(index.path) / "nonoccurrence_array.index.npy").exists()
    assert not build_bm25_index(chunks, LexicalSpec(name="l", tokenizer=PLAIN, method="bm25l"), tmp_path / "s").computed


# ---------------------------------------------------------------- parity with bm25s (real collections)


def direct_bm25s_run(chunks: pl.DataFrame, query_frame: pl.DataFrame, tokenizer: Tokenizer, depth: int, **params) -> pl.DataFrame:
    """bm25s called directly with the same tokens: every chunk's score, MaxP by polars, trec order."""
    retriever = bm25s.BM25(**params)
    retriever.index(tokenizer.many(chunks["text"].to_list()), show_progress=False)
    frames = []
    for qid, text in query_frame.iter_rows():
        tokens = [t for t in tokenizer(text) if t in retriever.vocab_dict]
        if not tokens:
            continue
        scores = retriever.get_scores(tokens).astype(np.float64)
        matched = np.zeros(len(scores), dtype=bool)
        for t in tokens:  # chunks holding a query term
            tid = retriever.vocab_dict[t]
            matched[retriever.scores["indices"][retriever.scores["indptr"][tid]:retriever.scores["indptr"][tid + 1]]] = True
        frames.append(pl.DataFrame({"query_id": qid, "doc_id": chunks["doc_id"].filter(matched), "score": scores[matched]}))
    run = pl.concat(frames).group_by("query_id", "doc_id").agg(pl.col("score").max())
    return trec_order(run).filter(pl.col("rank") <= depth)


def assert_parity(tmp_path, name, chunks: pl.DataFrame, query_frame: pl.DataFrame, spec: LexicalSpec, depth=100):
    path = tmp_path / f"{name}.parquet"
    chunks.write_parquet(path)
    index = build_bm25_index(path, spec, tmp_path / "store")
    ours = pl.read_parquet(bm25_run(index, query_frame, "bm25", depth, tmp_path / "store").path)
    theirs = direct_bm25s_run(chunks, query_frame, Tokenizer(spec.tokenizer), depth, k1=spec.k1, b=spec.b, method=spec.method)
    assert ours.height == theirs.height > 0
    assert ours["query_id"].to_list() == theirs["query_id"].to_list()
    assert ours["doc_id"].to_list() == theirs["doc_id"].to_list(), f"{name}: rankings differ"
    np.testing.assert_array_equal(ours["score"].to_numpy(), theirs["score"].to_numpy())
    return ours


@pytest.mark.slow
def test_bm25s_parity_on_cranfield_with_multi_chunk_documents(tmp_path):
    from retbench.tasks.stages.chunk import ChunkConfig, chunk_corpus
    from retbench.tasks.stages.dataset import load_dataset

    ds = load_dataset(DATA / "cranfield", "cranfield", "all")
    chunks = chunk_corpus(ds.corpus, ChunkConfig("fixed", size=60, overlap=10))
    assert chunks.height > ds.corpus.height  # MaxP has work to do
    spec = LexicalSpec(name="en", tokenizer=TokenizerSpec(stopwords="en", stemmer="english"))
    run = assert_parity(tmp_path, "cranfield", chunks.select("chunk_id", "doc_id", "text"), ds.queries.select("query_id", "text"), spec)
    assert run["query_id"].n_unique() == ds.queries.height


@pytest.mark.slow
@pytest.mark.parametrize("collection", ["npl", "cisi", "med"])
def test_bm25s_parity_on_glasgow(tmp_path, collection):
    """The collections as the pipeline reads them (one chunk per document: title, blank line, text);
    the reader itself is checked against the collections' README in tests/pipeline/test_dataset_glasgow.py."""
    from retbench.tasks.stages.chunk import ChunkConfig, chunk_corpus
    from retbench.tasks.stages.dataset import load_dataset

    ds = load_dataset(DATA / "glasgow" / collection, "glasgow", "all")
    chunks = chunk_corpus(ds.corpus, ChunkConfig("none"))
    assert chunks.height == ds.corpus.height
    spec = LexicalSpec(name="g", tokenizer=TokenizerSpec(stopwords="en", stemmer="porter"), k1=0.9, b=0.4)
    run = assert_parity(tmp_path, collection, chunks.select("chunk_id", "doc_id", "text"), ds.queries.select("query_id", "text"), spec)
    assert run["query_id"].n_unique() == ds.queries.height
