"""Hostile and malformed inputs: the loaders, the TREC readers and the spec either accept an
input or refuse it with their documented error (DatasetError / SpecError / ValueError) naming
the file; nothing escapes from deep inside, and nothing is written outside the store or the
output directory, whatever the ids look like. How many examples each property tried:
`pytest --hypothesis-show-statistics` (hypothesis counts them itself)."""
from __future__ import annotations

import codecs
import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from retbench.tasks.datasets.errors import DatasetError
from retbench.tasks.stages.dataset import load_dataset
from retbench.tasks.config.spec import SpecError, load_spec
from retbench.tasks.analysis.trec import read_qrels, read_run
from retbench.support import crash_worker

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# Ids that break naive code: path parts, separators, NUL and control characters, numbers,
# whitespace, unicode look-alikes, BOMs, and very long ones.
HOSTILE_IDS = st.one_of(
    st.sampled_from(["../../etc/passwd", "..", ".", "/", "a/b", "a\\b", "C:\\x", "007", "7", "1e3", "-0", "NaN",
                     "\x00", "a\x00b", "\x1b[31m", " ", "", "\ufeffid", "id\r", "é", "e\u0301", "<script>", "%2e%2e"]),
    st.text(min_size=0, max_size=12),
    st.text(alphabet="./\\\x00\n\r\t ", min_size=1, max_size=6),
    st.integers(min_value=1, max_value=5000).map(lambda n: "x" * n),
)
JSON_VALUES = st.one_of(st.none(), st.booleans(), st.integers(min_value=-10**20, max_value=10**20),
                        st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
                        st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


def write_jsonl(path: Path, rows: list, bom: bool = False, crlf: bool = False, ascii_only: bool = True) -> None:
    newline = "\r\n" if crlf else "\n"
    text = newline.join(json.dumps(row, ensure_ascii=ascii_only) for row in rows) + newline
    data = text.encode("utf-8", "surrogatepass")
    path.write_bytes((codecs.BOM_UTF8 if bom else b"") + data)


def base_dataset(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    write_jsonl(folder / "corpus.jsonl", [{"id": "d1", "text": "alpha"}, {"id": "d2", "text": "beta"}])
    write_jsonl(folder / "queries.jsonl", [{"id": "q1", "text": "alpha?", "split": "dev"}])
    write_jsonl(folder / "qrels.jsonl", [{"query_id": "q1", "doc_id": "d1", "grade": 2}])
    return folder


def expect_documented(call, folder: Path, error_types=(DatasetError,)):
    """Run `call`; it returns or raises one of `error_types` naming a file of `folder`."""
    try:
        return call()
    except error_types as error:
        message = str(error)
        assert str(folder) in message or "option" in message, message
        return error


@SETTINGS
@given(data=st.binary(max_size=400), which=st.sampled_from(["corpus.jsonl", "queries.jsonl", "qrels.jsonl"]))
def test_arbitrary_bytes_in_any_jsonl_file(tmp_path_factory, data, which):
    folder = base_dataset(tmp_path_factory.mktemp("bytes"))
    (folder / which).write_bytes(data)
    outcome = expect_documented(lambda: load_dataset(folder, "jsonl", "all"), folder)
    if isinstance(outcome, DatasetError):
        assert which in str(outcome) or "corpus.jsonl" in str(outcome) or "queries.jsonl" in str(outcome)


@SETTINGS
@given(doc_ids=st.lists(HOSTILE_IDS, min_size=1, max_size=4), query_id=HOSTILE_IDS, bom=st.booleans(),
       crlf=st.booleans(), ascii_only=st.booleans(), text=st.text(max_size=40))
def test_hostile_ids_are_kept_exactly_or_refused_with_file_and_line(tmp_path_factory, doc_ids, query_id, bom, crlf, ascii_only, text):
    folder = tmp_path_factory.mktemp("ids")
    write_jsonl(folder / "corpus.jsonl", [{"id": d, "text": f"{text} doc {i}"} for i, d in enumerate(doc_ids)], bom, crlf, ascii_only)
    write_jsonl(folder / "queries.jsonl", [{"id": query_id, "text": text or "q", "split": "dev"}], bom, crlf, ascii_only)
    write_jsonl(folder / "qrels.jsonl", [{"query_id": query_id, "doc_id": doc_ids[0], "grade": 1}], bom, crlf, ascii_only)
    outcome = expect_documented(lambda: load_dataset(folder, "jsonl", "all"), folder)
    if isinstance(outcome, DatasetError):
        message = str(outcome)
        if "duplicate id" in message:
            assert len(set(doc_ids)) < len(doc_ids) and ".jsonl:" in message
        if "contains control character" in message:
            assert ".jsonl:" in message
    else:
        assert outcome.corpus["doc_id"].to_list() == doc_ids  # no normalisation, "007" stays "007"
        assert outcome.queries["query_id"].to_list() == [query_id]


@SETTINGS
@given(grade=JSON_VALUES)
def test_grades_must_be_integers_in_range(tmp_path_factory, grade):
    folder = base_dataset(tmp_path_factory.mktemp("grades"))
    write_jsonl(folder / "qrels.jsonl", [{"query_id": "q1", "doc_id": "d1", "grade": grade}])
    outcome = expect_documented(lambda: load_dataset(folder, "jsonl", "all"), folder)
    valid = isinstance(grade, int) and not isinstance(grade, bool) and 0 <= grade <= 3
    assert isinstance(outcome, DatasetError) != valid, (grade, outcome)
    if not valid:
        assert "qrels.jsonl:1" in str(outcome)


@SETTINGS
@given(lines=st.lists(st.text(alphabet=st.characters(codec="utf-8"), max_size=60), max_size=6), data=st.binary(max_size=80),
       use_bytes=st.booleans(), fmt=st.sampled_from(["trec-qrels", "beir", "cranfield", "xquad"]))
def test_other_formats_refuse_garbage_with_their_error(tmp_path_factory, lines, data, use_bytes, fmt):
    folder = base_dataset(tmp_path_factory.mktemp(fmt))
    content = data if use_bytes else "\n".join(lines).encode("utf-8", "surrogatepass")
    if fmt == "trec-qrels":
        (folder / "q.trec").write_bytes(content)
        call = lambda: load_dataset(folder, "jsonl", "all", qrels_path=folder / "q.trec")
    elif fmt == "beir":
        (folder / "qrels").mkdir()
        (folder / "qrels" / "test.tsv").write_bytes(content)
        call = lambda: load_dataset(folder, "beir", "test")
    elif fmt == "cranfield":
        for name in ("cran.all.1400", "cran.qry", "cran.qrels"):
            (folder / name).write_bytes(content)
        call = lambda: load_dataset(folder, "cranfield", "all")
    else:
        (folder / "xquad.en.json").write_bytes(content)
        call = lambda: load_dataset(folder, "xquad", "all")
    expect_documented(call, folder)


@SETTINGS
@given(score=st.one_of(st.sampled_from(["nan", "NaN", "-nan", "inf", "-inf", "1e999", "0x1p3", "1_0", "", "\x00", "٣"]),
                       st.floats(allow_nan=True).map(repr), st.text(max_size=6)),
       bom=st.booleans(), crlf=st.booleans(), junk=st.binary(max_size=20))
def test_trec_run_scores(tmp_path_factory, score, bom, crlf, junk):
    path = tmp_path_factory.mktemp("run") / "run.trec"
    newline = b"\r\n" if crlf else b"\n"
    body = newline.join([b"q1 Q0 d1 1 0.5 tag", f"q1 Q0 d2 2 {score} tag".encode("utf-8", "surrogatepass"), junk])
    path.write_bytes((codecs.BOM_UTF8 if bom else b"") + body)
    try:
        run = read_run(path)
    except ValueError as error:
        assert str(path) in str(error), str(error)
        return
    assert not any(math.isnan(v) for v in run["score"].to_list())


@SETTINGS
@given(body=st.binary(max_size=200))
def test_trec_qrels_bytes(tmp_path_factory, body):
    path = tmp_path_factory.mktemp("qrels") / "qrels.txt"
    path.write_bytes(body)
    try:
        read_qrels(path)
    except ValueError as error:
        assert str(path) in str(error), str(error)


SPEC = """name: {name}
dataset: {{path: data}}
providers:
  - {{name: {provider}, kind: hashing}}
"""


@SETTINGS
@given(name=HOSTILE_IDS, provider=HOSTILE_IDS)
def test_spec_and_provider_names_that_could_escape_a_path_are_refused(tmp_path_factory, name, provider):
    path = tmp_path_factory.mktemp("spec") / "spec.yaml"
    path.write_text(SPEC.format(name=json.dumps(name), provider=json.dumps(provider)), encoding="utf-8")
    try:
        spec = load_spec(path)
    except SpecError as error:
        assert str(path) in str(error)
        return
    for value in (spec.name, spec.providers[0].name):
        assert "/" not in value and "\\" not in value and not value.startswith(".") and "\x00" not in value
        assert value.isascii() and value.strip() == value


@SETTINGS
@given(body=st.one_of(st.binary(max_size=300), st.text(max_size=300).map(lambda t: t.encode("utf-8", "surrogatepass"))))
def test_spec_garbage_gives_spec_error(tmp_path_factory, body):
    path = tmp_path_factory.mktemp("spec") / "spec.yaml"
    path.write_bytes(body)
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert str(path) in str(caught.value)


def test_enormous_line_and_document_are_read(tmp_path):
    folder = base_dataset(tmp_path / "big")
    write_jsonl(folder / "corpus.jsonl", [{"id": "d1", "text": "word " * 2_000_000}, {"id": "d2", "text": "beta"}])
    dataset = load_dataset(folder, "jsonl", "all")
    assert len(dataset.corpus["text"][0]) == 10_000_000


def test_empty_files_are_refused_naming_the_file(tmp_path):
    for name in ("corpus.jsonl", "queries.jsonl", "qrels.jsonl"):
        folder = base_dataset(tmp_path / name)
        (folder / name).write_bytes(b"")
        with pytest.raises(DatasetError) as caught:
            load_dataset(folder, "jsonl", "all")
        assert str(folder) in str(caught.value)


def test_pipeline_with_hostile_ids_writes_only_under_store_and_output(tmp_path):
    """Ids never name files: a run over ids like `../../x`, `a/b`, `..` and `007` writes
    nothing outside its store and output directory, and keeps the ids exactly."""
    import polars as pl

    # No whitespace or control character: ids cannot hold them (refused at load).
    ids = ["../../escape", "a/b", "..", "/abs", "C:\\win", "007", "7", "x%00y", "[2J", "<img/src=x/onerror=alert(1)>"]
    folder = tmp_path / "data"
    folder.mkdir()
    words = ["alpha beta", "gamma delta", "epsilon zeta", "eta theta", "iota kappa", "lambda mu", "nu xi",
             "omicron pi", "rho sigma", "tau upsilon"]
    write_jsonl(folder / "corpus.jsonl", [{"id": d, "text": f"{w} " * 30} for d, w in zip(ids, words)])
    write_jsonl(folder / "queries.jsonl", [{"id": q, "text": w, "split": "dev"} for q, w in zip(ids, words)])
    write_jsonl(folder / "qrels.jsonl", [{"query_id": q, "doc_id": q, "grade": 1} for q in ids])
    before = {p for p in tmp_path.parent.rglob("*")}
    spec_dir = tmp_path / "work"
    # The worker's IVF needs >= 39 vectors per list: keep flat only by giving it a tiny corpus spec.
    spec = crash_worker.write_spec(spec_dir, tmp_path / "store", tmp_path / "out", folder)
    spec.write_text(spec.read_text().replace("indexes: {ivf: {nprobe: [1, 4]}}", "indexes: {ivf: {nprobe: [1], nlist: 1}}"))
    from retbench.tasks.config.spec import load_spec as load

    loaded = load(spec)
    from retbench.tasks.stages import index as index_mod, retrieve as retrieve_mod
    from retbench.tasks.stages.embed import embed_texts
    from retbench.tasks.providers import create_provider
    from retbench.tasks.stages.prepare import chunk_dataset, prepare_dataset

    dataset = prepare_dataset(loaded)
    chunks = chunk_dataset(dataset, loaded)
    texts = pl.read_parquet(chunks.path)
    queries = pl.read_parquet(dataset.queries_path)
    for provider in loaded.providers:
        model = create_provider(provider.kind, provider.options)
        doc_set = embed_texts(model, provider.name, texts["chunk_id"].to_list(), texts["text"].to_list(), "document", Path(loaded.store_dir))
        query_set = embed_texts(model, provider.name, queries["query_id"].to_list(), queries["text"].to_list(), "query", Path(loaded.store_dir))
        built = index_mod.build_index(doc_set, index_mod.IndexSettings("flat"), Path(loaded.store_dir))
        run = retrieve_mod.retrieve(built, doc_set, query_set, chunks.path, 5, None, Path(loaded.store_dir))
        table = pl.read_parquet(run.path)
        assert set(table["query_id"].to_list()) == set(ids) and set(table["doc_id"].to_list()) <= set(ids)
        # Ids with whitespace are refused at load, so every hostile id left writes to TREC.
        retrieve_mod.write_trec_run(table, tmp_path / "out" / f"{provider.name}.trec")
    written = {p for p in tmp_path.parent.rglob("*") if p.is_file()} - before
    allowed = (tmp_path / "store", tmp_path / "out", spec_dir)
    outside = [p for p in written if not any(p.is_relative_to(root) for root in allowed)]
    assert not outside, outside
    assert dataset.queries == len(ids)
