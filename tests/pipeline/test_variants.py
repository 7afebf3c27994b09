"""Chunking variants and query-preprocessing variants as settings: spec, preprocessing, the
buried-answer signal, and one pipeline run on the shipped sample with the hashing provider."""
import numpy as np
import polars as pl
import pytest

from retbench.tasks.analysis.breakdown import comparison_pairs
from retbench.tasks.config.spec import SpecError, load_spec
from retbench.tasks.config.variants import QueryVariantSpec
from retbench.tasks.stages.buried import buried_table
from retbench.tasks.stages.variants import preprocess, rewriter
from retbench.support.paths import ROOT

MINIMAL = """
name: t
dataset: {path: data, format: jsonl}
providers: [{name: h, kind: hashing}]
"""


def _load(tmp_path, extra):
    path = tmp_path / "spec.yaml"
    path.write_text(MINIMAL + extra)
    return load_spec(path)


# ---------------------------------------------------------------- spec


def test_single_chunking_form_is_the_default_variant(tmp_path):
    spec = _load(tmp_path, "chunking: {strategy: sentence, max_words: 50}\n")
    [only] = spec.chunking_variants
    assert (only.name, only.strategy, only.max_words) == ("default", "sentence", 50)


def test_chunking_list_keeps_order_and_names(tmp_path):
    spec = _load(tmp_path, "chunking:\n  - {name: para, strategy: paragraph}\n  - {name: fix, strategy: fixed, size: 50, overlap: 10}\n")
    assert [(c.name, c.strategy) for c in spec.chunking_variants] == [("para", "paragraph"), ("fix", "fixed")]


@pytest.mark.parametrize("extra, message", [
    ("chunking:\n  - {name: a, strategy: paragraph}\n  - {name: a, strategy: sentence}\n",
     "chunking[1].name: 'a' repeats chunking[0].name"),
    ("chunking:\n  - {name: a, strategy: paragraph, strategyy: 1}\n", "chunking[0].strategyy: unknown key"),
    ("chunking:\n  - {strategy: paragraph}\n", "chunking[0].name: required, but not given"),
    ("chunking: []\n", "chunking: an empty list"),
    ("queries: {variants: [{name: l, lowercase: true}, {name: l, unicode: nfc}]}\n",
     "queries.variants[1].name: 'l' repeats queries.variants[0].name"),
    ("queries: {variants: [{name: nothing}]}\n", "query variant 'nothing' changes nothing"),
    ("queries: {variants: [{name: raw, lowercase: true}]}\n", "reserved"),
    ("queries: {variants: [{name: u, unicode: nfd}]}\n", "queries.variants[0].unicode"),
])
def test_bad_variants_are_refused_naming_the_key_path(tmp_path, extra, message):
    with pytest.raises(SpecError) as error:
        _load(tmp_path, extra)
    assert message in str(error.value)


def test_malformed_rewrite_line_is_refused_at_load_with_file_and_line(tmp_path):
    (tmp_path / "rw.txt").write_text("# comment\nbeema -> बीमा\n\npolicy => पॉलिसी\n", encoding="utf-8")
    with pytest.raises(SpecError) as error:
        _load(tmp_path, "queries: {variants: [{name: rw, rewrite_file: rw.txt}]}\n")
    assert f"queries.variants[0].rewrite_file: {tmp_path / 'rw.txt'}:4: expected `from -> to`" in str(error.value)


@pytest.mark.parametrize("text, where", [("a -> b\n -> c\n", ":2:"), ("a -> b -> c\n", ":1:"), ("x -> y\nX -> z\n", ":2:")])
def test_every_kind_of_bad_rewrite_line_names_its_line(tmp_path, text, where):
    (tmp_path / "rw.txt").write_text(text)
    with pytest.raises(SpecError, match=f"rw.txt{where}"):
        _load(tmp_path, "queries: {variants: [{name: rw, rewrite_file: rw.txt}]}\n")


def test_rewrite_file_is_resolved_against_the_spec_folder(tmp_path):
    (tmp_path / "rw.txt").write_text("beema -> बीमा\n", encoding="utf-8")
    spec = _load(tmp_path, "queries: {variants: [{name: rw, rewrite_file: rw.txt}]}\n")
    assert spec.queries.variants[0].rewrite_file == (tmp_path / "rw.txt").resolve()


# ---------------------------------------------------------------- preprocessing


def test_rewrites_are_whole_word_case_insensitive_and_single_pass():
    rewrite = rewriter([("beema", "बीमा"), ("claim", "दावा"), ("beema claim", "बीमा दावा फ़ॉर्म")])
    # longest first; "beemas" is another word; a rewritten word is not rewritten again
    assert rewrite("Beema claim kaise kare, beemas, BEEMA?") == "बीमा दावा फ़ॉर्म kaise kare, beemas, बीमा?"
    # a Devanagari vowel sign is part of the word: "बीमा" must not match inside "बीमार"
    assert rewriter([("बीमा", "insurance")])("बीमार बीमा") == "बीमार insurance"


def test_sample_rewrite_table_changes_exactly_the_hinglish_queries():
    queries = pl.read_ndjson(ROOT / "data" / "sample" / "queries.jsonl")
    variant = QueryVariantSpec(name="rw", rewrite_file=ROOT / "data" / "sample" / "rewrites.txt")
    rewritten = preprocess(queries["text"].to_list(), variant)
    changed = {q for q, a, b in zip(queries["id"], queries["text"], rewritten) if a != b}
    assert changed == set(queries.filter(pl.col("language") == "hinglish")["id"])
    assert rewritten[queries["id"].to_list().index("q099")] == "database backup for how many days is kept"


def test_preprocessing_steps_in_their_documented_order(tmp_path):
    (tmp_path / "rw.txt").write_text("api key -> API credential\n")
    variant = QueryVariantSpec(name="all", unicode="nfc", whitespace=True, lowercase=True,
                               rewrite_file=tmp_path / "rw.txt", prefix="query: ")
    decomposed = "Cafe\u0301  API\tKey "
    # NFC composes é; whitespace collapsed; lowercased; then the rewrite (its target keeps case); then the prefix
    assert preprocess([decomposed], variant) == ["query: café API credential"]
    assert preprocess(["x"], QueryVariantSpec(name="n", unicode="nfc")) == ["x"]


# ---------------------------------------------------------------- comparisons and the buried signal


def test_variants_pair_with_their_baseline_not_with_other_providers():
    rows = [(p, i, n, "q1", "ndcg@10", 0.5) for p, i, n in
            [("a", "flat", None), ("b", "flat", None), ("a@s", "flat", None), ("a", "ivf", 4), ("a@s", "ivf", 4),
             ("a+low", "flat", None)]]
    per_query = pl.DataFrame(rows, schema=["provider", "index", "nprobe", "query_id", "measure", "value"], orient="row")
    pairs = comparison_pairs(per_query, {"a@s": "a", "a+low": "a"})
    assert pairs == [
        (("a", "flat", None), ("b", "flat", None)),
        (("a", "ivf", 4), ("a", "flat", None)),
        (("a@s", "ivf", 4), ("a@s", "flat", None)),
        (("a@s", "flat", None), ("a", "flat", None)),
        (("a@s", "ivf", 4), ("a", "ivf", 4)),
        (("a+low", "flat", None), ("a", "flat", None)),
    ]


def test_buried_when_the_chunk_ranks_beyond_k_but_its_best_passage_within_k():
    # one query (unit vector e0); the relevant doc d1 was ranked 3rd by its chunk (score 0.2)
    # but its second passage scores 0.8, above every other document (0.9 > 0.8 > 0.5):
    # passage rank 2 <= k=2 < chunk rank 3 -> buried
    run = pl.DataFrame({"provider": ["s"] * 3, "query_id": ["q"] * 3, "doc_id": ["x", "y", "d1"],
                        "chunk_id": ["x#0", "y#0", "d1#0"], "rank": [1, 2, 3], "score": [0.9, 0.5, 0.2]})
    passages = pl.DataFrame({"chunk_id": ["d1#0", "d1#1"], "doc_id": ["d1", "d1"], "text": ["a", "b"]})
    vectors = np.array([[0.2, np.sqrt(1 - 0.04)], [0.8, 0.6]], dtype=np.float32)
    qrels = pl.DataFrame({"query_id": ["q"], "doc_id": ["d1"], "grade": [2]})
    table = buried_table(run, ["q"], np.array([[1.0, 0.0]], dtype=np.float32), passages, ["d1#0", "d1#1"], vectors,
                         qrels, k=2)
    row = table.row(0, named=True)
    assert (row["chunk_rank"], row["passage_rank"], row["passage_id"], row["buried"]) == (3, 2, "d1#1", True)
    assert row["passage_score"] == pytest.approx(0.8)
    # with k=1 the passage would still rank 2nd: not buried
    assert not buried_table(run, ["q"], np.array([[1.0, 0.0]], dtype=np.float32), passages, ["d1#0", "d1#1"],
                            vectors, qrels, k=1)["buried"][0]


# ---------------------------------------------------------------- a run on the sample

SPEC = """
name: variants
dataset: {{path: {data}, format: jsonl, split: all}}
chunking:
  - {{name: para120, strategy: paragraph, max_words: 120}}
  - {{name: para200, strategy: paragraph, max_words: 200}}
  - {{name: sent40, strategy: sentence, max_words: 40}}
queries:
  variants:
    - {{name: lower, lowercase: true, whitespace: true}}
    - {{name: rw, rewrite_file: {rewrites}}}
providers:
  - {{name: hashing, kind: hashing}}
indexes: {{ivf: {{nprobe: [2]}}}}
statistics: {{resamples: 200, permutations: 200}}
history: {{enabled: false}}
output_dir: {out}
store_dir: {store}
"""


@pytest.fixture(scope="module")
def variant_run(tmp_path_factory):
    from retbench.tasks.pipeline import run_pipeline

    base = tmp_path_factory.mktemp("variants")
    (base / "spec.yaml").write_text(SPEC.format(data=ROOT / "data" / "sample", out=base / "out", store=base / "store",
                                                rewrites=ROOT / "data" / "sample" / "rewrites.txt"))
    spec = load_spec(base / "spec.yaml")
    return base, spec, run_pipeline(spec)


def test_texts_shared_by_two_chunkings_are_embedded_once(variant_run):
    base, _, result = variant_run
    store = base / "store" / "chunks"
    chunk_texts = {}
    for ref in result.manifest["variants"]["chunking"].values():
        chunk_texts[ref["file"]] = set(pl.read_parquet(store / ref["file"])["text"].to_list())
    files = result.manifest["variants"]["chunking"]
    para120, para200, sent40 = (chunk_texts[files[n]["file"]] for n in ("para120", "para200", "sent40"))
    embedded = result.embedded()
    # every distinct text once, in the order the sets were embedded (documents: para120, para200, sent40)
    assert embedded["hashing/document"] == len(para120)
    assert embedded["hashing@para200/document"] == len(para200 - para120)
    assert embedded["hashing@sent40/document"] == len(sent40 - para120 - para200)
    # the two paragraph chunkings differ only in the long guides: most texts were not embedded again
    assert 0 < len(para200 - para120) < len(para200) // 10
    # the lowercase variant sends only queries it changed; identical ones come from the cache
    assert embedded["hashing+lower/query"] < 110 and embedded["hashing/query"] == 110
    # the rewrite table changes the 12 Hinglish queries only: the other 98 come from the cache
    assert embedded["hashing+rw/query"] == 12


def test_every_setting_has_rows_in_every_table(variant_run):
    _, _, result = variant_run
    labels = {"hashing", "hashing@para200", "hashing@sent40", "hashing+lower", "hashing+rw"}
    settings = pl.read_parquet(result.tables["settings"])
    assert set(settings["setting"]) == labels
    assert settings.filter(pl.col("setting") == "hashing@sent40").select(
        "provider", "chunking", "chunking_config", "query_variant", "variant_kind", "baseline").row(0) == (
        "hashing", "sent40", "sentence_max-words-40", "raw", "chunking", "hashing")
    for name in ("summary", "per_query", "breakdown", "runs", "ann_vs_exact"):
        table = pl.read_parquet(result.tables[name])
        assert set(table["provider"]) == labels, name
    comparisons = pl.read_parquet(result.tables["comparisons"])
    variant_pairs = set(comparisons.filter(pl.col("a_provider") != pl.col("b_provider"))
                        .select("a_provider", "b_provider", "a_index").unique().rows())
    assert variant_pairs == {(v, "hashing", i) for v in labels - {"hashing"} for i in ("flat", "ivf")}


def test_query_variant_deltas_per_language_pair_and_category(variant_run):
    _, _, result = variant_run
    table = pl.read_parquet(result.tables["variant_comparisons"])
    assert set(table["slice_kind"]) == {"all", "language_pair", "category"}
    assert set(table["measure"]) == {"ndcg@10", "recall@10"}
    hinglish = table.filter((pl.col("setting") == "hashing+rw") & (pl.col("slice") == "hinglish")
                            & (pl.col("measure") == "ndcg@10")).row(0, named=True)
    assert hinglish["n"] == 12 and hinglish["ci_low"] <= hinglish["diff"] <= hinglish["ci_high"]
    every = table.filter((pl.col("slice_kind") == "all")).select("setting", "n").unique()
    assert set(every["n"]) == {110}
    # queries the rewrite table leaves alone cannot move: outside Hinglish every delta is exactly 0
    untouched = table.filter((pl.col("setting") == "hashing+rw") & (pl.col("slice_kind") == "category")
                             & (pl.col("slice") != "hinglish"))
    assert untouched.height > 0 and (untouched["diff"] == 0).all()


def test_failure_log_names_the_variant_that_surfaced_the_answer(variant_run):
    _, _, result = variant_run
    failures = pl.read_parquet(result.tables["failures"]).filter(pl.col("index") == "flat")
    runs = pl.read_parquet(result.tables["runs"])
    qrels = pl.read_ndjson(ROOT / "data" / "sample" / "qrels.jsonl").filter(pl.col("grade") >= 1)
    surfaced = failures.filter(pl.col("surfaced_by").list.len() > 0).row(0, named=True)
    hit = surfaced["surfaced_by"][0]
    assert hit["setting"] != surfaced["provider"] and hit["rank"] <= 10
    # the named setting did rank that relevant document there for this query
    rank = runs.filter((pl.col("provider") == hit["setting"]) & (pl.col("index") == "flat")
                       & (pl.col("query_id") == surfaced["query_id"]) & (pl.col("doc_id") == hit["doc_id"]))["rank"]
    assert rank.to_list() == [hit["rank"]]
    assert qrels.filter((pl.col("query_id") == surfaced["query_id"]) & (pl.col("doc_id") == hit["doc_id"])).height == 1
    buried = failures.filter(pl.col("buried").fill_null(False))
    assert buried.height > 0
    assert (buried["buried_passage_rank"] <= 10).all()
    assert ((buried["buried_chunk_rank"].is_null()) | (buried["buried_chunk_rank"] > 10)).all()


def test_report_shows_variants_and_buried_answers(variant_run):
    base, _, _ = variant_run
    report = (base / "out" / "report.md").read_text(encoding="utf-8")
    assert "## Variants vs baseline" in report and "## Buried answers" in report
    assert "hashing@sent40" in report
