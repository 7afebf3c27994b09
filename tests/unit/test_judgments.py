"""Judgments overlays (`retbench judge import`): a pool's qrels file read and checked against the
dataset (ids, grade scale, conflicts) with file:line in every refusal; kept in the store by the
dataset's base content key, idempotent; merged into a run's judgments under a key of its own,
while the chunks and runs stay keyed by the dataset as read from its files."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import polars as pl
import pytest

from retbench.tasks.config.judgments import JudgmentsSpec
from retbench.tasks.config.spec import SpecError, load_spec
from retbench.tasks.datasets.errors import DatasetError
from retbench.tasks.datasets.judgments import conflict_summary, conflicts, grade_scale, merge, read_overlay
from retbench.tasks.datasets.model import CORPUS_SCHEMA, QRELS_SCHEMA, QUERIES_SCHEMA, Dataset
from retbench.tasks.stages.dataset import content_hash, load_saved_dataset, save_dataset
from retbench.tasks.stages.judgments import (chosen_overlays, import_overlay, judged_key, stored_overlays,
                                             with_overlays)
from retbench.tasks.stages.prepare import DatasetRef, chunks_address


def tiny() -> Dataset:
    corpus = pl.DataFrame([(f"d{i}", "", f"text {i}", "en") for i in range(1, 6)], schema=CORPUS_SCHEMA, orient="row")
    queries = pl.DataFrame([("q1", "one", "en", "keyword", "test"), ("q2", "two", "en", "keyword", "test")],
                           schema=QUERIES_SCHEMA, orient="row")
    qrels = pl.DataFrame([("q1", "d1", 2), ("q1", "d2", 0), ("q2", "d3", 1)], schema=QRELS_SCHEMA, orient="row")
    return Dataset("tiny", corpus, queries, qrels, unjudged_queries=("q9",))


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def store_spec(tmp_path: Path, **judgments) -> SimpleNamespace:
    return SimpleNamespace(store_dir=str(tmp_path / "store"), judgments=JudgmentsSpec(**judgments))


def test_a_pool_file_parses_to_judgments_with_their_lines(tmp_path):
    path = write(tmp_path, "pool.qrels", "q1 0 d3 1\n\nq2 0 d4 2\nq1 0 d3 1\n")
    table = read_overlay(path, tiny())
    assert table.rows() == [("q1", "d3", 1, 1), ("q2", "d4", 2, 3)]  # the repeat with the same grade kept once


@pytest.mark.parametrize("text, expected", [
    ("q1 0 d3 1\nq7 0 d3 1\n", "pool.qrels:2: query id 'q7' is not a query of dataset 'tiny'"),
    ("q9 0 d3 1\n", "pool.qrels:1: query id 'q9' has no judgments in the dataset, so the run drops it"),
    ("q1 0 d3 1\nq1 0 d99 1\n", "pool.qrels:2: doc id 'd99' is not a document of dataset 'tiny'"),
    ("q1 0 d3 3\n", "pool.qrels:1: grade 3 for query 'q1' is outside the dataset's scale 0..2"),
    ("q1 0 d3 -1\n", "pool.qrels:1: grade -1 for query 'q1' is outside the dataset's scale 0..2"),
    ("q1 0 d3 1\nq1 0 d3 2\n", "pool.qrels:2: query 'q1' doc 'd3' judged 2 here and 1 at"),
    ("q1 0 d3\n", "pool.qrels:1: expected 4 whitespace-separated fields"),
])
def test_a_bad_judgment_is_refused_naming_file_and_line(tmp_path, text, expected):
    with pytest.raises(DatasetError) as caught:
        read_overlay(write(tmp_path, "pool.qrels", text), tiny())
    assert expected in str(caught.value)


def test_the_grade_scale_is_that_of_the_datasets_own_judgments():
    assert grade_scale(tiny()) == (0, 2)


def test_conflicts_are_found_against_the_base_and_earlier_overlays_the_latest_standing(tmp_path):
    base = tiny().qrels
    earlier = pl.DataFrame([("q2", "d3", 2), ("q2", "d5", 1)], schema=QRELS_SCHEMA, orient="row")
    path = write(tmp_path, "new.qrels", "q1 0 d1 2\nq1 0 d2 1\nq2 0 d3 0\nq2 0 d5 1\nq2 0 d4 1\n")
    found = conflicts(read_overlay(path, tiny()), [("base", base), ("first.qrels", earlier)], path)
    # q1 d1 agrees with the base; q2 d3 is judged 1 by the base but 2 by the later overlay, which stands.
    assert [c.described() for c in found] == ["q1 d2: base 0, new 1", "q2 d3: first.qrels 2, new 0"]
    assert [c.where for c in found] == [f"{path}:2", f"{path}:3"]
    assert conflict_summary(found) == "2 conflicts with existing judgments: q1 d2: base 0, new 1; q2 d3: first.qrels 2, new 0"


def test_merge_lets_a_later_layer_win():
    base = tiny().qrels
    later = pl.DataFrame([("q1", "d2", 2), ("q1", "d4", 1)], schema=QRELS_SCHEMA, orient="row")
    merged = merge([base, later]).sort("query_id", "doc_id")
    assert merged.rows() == [("q1", "d1", 2), ("q1", "d2", 2), ("q1", "d4", 1), ("q2", "d3", 1)]


def test_an_import_is_kept_in_the_store_with_its_provenance_and_is_idempotent(tmp_path):
    spec, dataset = store_spec(tmp_path), tiny()
    path = write(tmp_path, "pool.qrels", "q1 0 d3 1\nq1 0 d1 2\n")
    first = import_overlay(spec, path, dataset, None, source="alice")
    key = content_hash(dataset)
    assert first.added and first.base_key == key and first.agreeing == 1 and first.overridden == ()
    (kept,) = stored_overlays(spec.store_dir, key)
    assert (kept.file, kept.source, kept.judgments, kept.overrides) == ("pool.qrels", "alice", 2, 0)
    assert len(kept.sha256) == 64 and kept.imported_at.endswith("+00:00")
    assert Path(kept.table).parent == tmp_path / "store" / "datasets" / "overlays" / key[:32]
    again = import_overlay(spec, write(tmp_path, "copy.qrels", path.read_text()), dataset, key, source="bob")
    assert not again.added and again.overlay == kept  # the same bytes: nothing changed
    assert stored_overlays(spec.store_dir, key) == [kept]
    assert path.read_text() == "q1 0 d3 1\nq1 0 d1 2\n"


def test_a_conflict_is_refused_and_listed_unless_overridden(tmp_path):
    spec, dataset = store_spec(tmp_path), tiny()
    path = write(tmp_path, "pool.qrels", "q1 0 d1 0\nq2 0 d3 2\nq1 0 d5 1\n")
    with pytest.raises(DatasetError) as caught:
        import_overlay(spec, path, dataset, None)
    assert "2 conflicts with existing judgments: q1 d1: base 2, new 0; q2 d3: base 1, new 2; nothing imported" \
        in str(caught.value) and "--override" in str(caught.value)
    assert stored_overlays(spec.store_dir, content_hash(dataset)) == []
    done = import_overlay(spec, path, dataset, None, override=True)
    assert done.added and [c.described() for c in done.overridden] == ["q1 d1: base 2, new 0", "q2 d3: base 1, new 2"]
    assert done.overlay.overrides == 2


def dataset_ref(tmp_path: Path, dataset: Dataset) -> DatasetRef:
    key = content_hash(dataset)
    folder = save_dataset(dataset, tmp_path / "store" / "datasets" / key[:32])
    return DatasetRef(path=str(folder), key=key, computed=False, seconds=0.0, name=dataset.name,
                      documents=dataset.corpus.height, queries=dataset.queries.height,
                      judgments=dataset.qrels.height, notes=())


def test_overlays_change_the_datasets_key_but_not_the_key_chunks_and_runs_use(tmp_path):
    from retbench.tasks.stages.chunk import ChunkConfig

    dataset = tiny()
    ref = dataset_ref(tmp_path, dataset)
    plain = with_overlays(ref, store_spec(tmp_path))
    assert (plain.key, plain.collection_key, plain.overlays) == (ref.key, ref.key, ())
    import_overlay(store_spec(tmp_path), write(tmp_path, "a.qrels", "q1 0 d2 1\n"), dataset, ref.key, override=True)
    import_overlay(store_spec(tmp_path), write(tmp_path, "b.qrels", "q1 0 d4 2\n"), dataset, ref.key, source="bob")
    judged = with_overlays(ref, store_spec(tmp_path))
    overlays = stored_overlays(tmp_path / "store", ref.key)
    assert judged.key == judged_key(ref.key, overlays) != ref.key
    assert judged.collection_key == judged.base_key == ref.key
    config = ChunkConfig(strategy="none")
    assert chunks_address(tmp_path, judged.collection_key, config) == chunks_address(tmp_path, ref.key, config)
    merged = load_saved_dataset(judged.path)
    assert merged.qrels.sort("query_id", "doc_id").rows() == [
        ("q1", "d1", 2), ("q1", "d2", 1), ("q1", "d4", 2), ("q2", "d3", 1)]
    assert merged.corpus.equals(dataset.corpus) and judged.judgments == 4
    assert judged.judgments_from == (("base", 2), ("a.qrels", 1), ("b.qrels", 1))
    assert load_saved_dataset(ref.path).qrels.equals(dataset.qrels)  # the base folder is untouched
    # One overlay chosen by its source label: another key; use: base gives the dataset's own key back.
    only_bob = with_overlays(ref, store_spec(tmp_path, overlays=["bob"]))
    assert only_bob.key not in (ref.key, judged.key) and [o.file for o in only_bob.overlays] == ["b.qrels"]
    assert only_bob.overlays_unused == 1
    base = with_overlays(ref, store_spec(tmp_path, use="base"))
    assert (base.key, base.path, base.overlays_unused) == (ref.key, ref.path, 2)


def test_naming_an_overlay_the_store_does_not_hold_is_refused_at_its_key(tmp_path):
    dataset = tiny()
    import_overlay(store_spec(tmp_path), write(tmp_path, "a.qrels", "q1 0 d4 1\n"), dataset, None, source="alice")
    overlays = stored_overlays(tmp_path / "store", content_hash(dataset))
    assert chosen_overlays(store_spec(tmp_path, overlays=["a.qrels"]), overlays) == overlays
    with pytest.raises(SpecError, match=r"judgments.overlays\[1\]: no overlay imported for this dataset is named "
                                        r"'bob' .*imported: a.qrels \(source alice\)"):
        chosen_overlays(store_spec(tmp_path, overlays=["alice", "bob"]), overlays)


@pytest.mark.parametrize("judgments, expected", [
    ("{use: some}", "judgments.use:"),
    ("{use: base, overlays: [human]}", "judgments.overlays: names overlays, but use is base"),
    ("{overlays: [human, human]}", "judgments.overlays[1]: 'human' repeats overlays[0]"),
    ("{overlays: []}", "judgments.overlays:"),
    ("{ovrlays: [human]}", "judgments.ovrlays:"),
])
def test_the_judgments_key_is_validated_with_its_key_path(tmp_path, judgments, expected):
    path = write(tmp_path, "spec.yaml", f"name: t\ndataset: {{path: data}}\njudgments: {judgments}\n"
                                        "providers: [{name: h, kind: hashing}]\n")
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert expected in str(caught.value)


def test_the_judgments_key_defaults_to_every_overlay(tmp_path):
    path = write(tmp_path, "spec.yaml", "name: t\ndataset: {path: data}\nproviders: [{name: h, kind: hashing}]\n")
    assert load_spec(path).judgments == JudgmentsSpec(use="all", overlays=None)


def test_a_new_series_says_which_overlay_started_it():
    from retbench.tasks.analysis.history import judgments_stamp, series_reason

    overlay = {"file": "pool.qrels", "sha256": "ab" * 32, "source": "human", "judgments": 3, "imported_at": "x"}
    before = {"dataset_hash": "k" * 64, "dataset_base": "k" * 64, "judgments": judgments_stamp([])}
    after = {"dataset_hash": "j" * 64, "dataset_base": "k" * 64, "judgments": judgments_stamp([overlay])}
    added = "judgments overlay pool.qrels (source human, 3 judgments, sha256 abababababab) added"
    assert series_reason(before, after) == added
    assert series_reason(after, before) == added.replace("added", "no longer used")
    files = {"dataset_hash": "f" * 64, "dataset_base": "f" * 64, "judgments": "[]"}
    assert series_reason(before, files) == "dataset changed (kkkkkkkkkkkk -> ffffffffffff)"
    assert series_reason({"dataset_hash": "k" * 64}, after).startswith("dataset changed")  # recorded before the stamp


def test_two_imports_of_one_file_name_are_told_apart_by_their_sha256(tmp_path):
    dataset = tiny()
    ref = dataset_ref(tmp_path, dataset)
    first = write(tmp_path, "pool.qrels", "q1 0 d4 1\n")
    import_overlay(store_spec(tmp_path), first, dataset, ref.key)
    import_overlay(store_spec(tmp_path), write(tmp_path, "pool.qrels",
                                               "q1 0 d4 1\nq1 0 d5 2\n"), dataset, ref.key)
    one, two = stored_overlays(tmp_path / "store", ref.key)
    judged = with_overlays(ref, store_spec(tmp_path))
    assert judged.judgments_from == (("base", 3), (f"pool.qrels@{one.sha256[:8]}", 0),
                                     (f"pool.qrels@{two.sha256[:8]}", 2))


SHEET = ("pool_rank\tquery_id\tquery\tdoc_id\tchunk_id\ttext\tsettings\tbest_rank\treciprocal_rank_sum\tranked_by\tgrade\r\n"
         "1\tq1\tone\td3\td3#0\t\"a title\r\n\r\nand its text\"\thashing/flat\t1\t1.0\t1:hashing/flat\t1\r\n"
         "2\tq2\ttwo\td4\td4#0\tplain\thashing/flat\t2\t0.5\t2:hashing/flat\t\r\n"
         "3\tq2\ttwo\td5\td5#0\tplain\thashing/flat\t3\t0.3\t3:hashing/flat\t 2 \r\n")


@pytest.mark.parametrize("delimiter, name", [("\t", "judging-pool.tsv"), (",", "judging-pool.csv")])
def test_a_graded_pool_sheet_is_read_by_its_columns(tmp_path, delimiter, name):
    """`judge export --format tsv|csv` graded in a spreadsheet goes straight back in: a text cell with
    line breaks stays one row, an empty grade is no judgment, the line is where the row ends."""
    import csv
    import io

    rows = list(csv.reader(io.StringIO(SHEET, newline=""), delimiter="\t"))
    buffer = io.StringIO()
    csv.writer(buffer, delimiter=delimiter, lineterminator="\r\n").writerows(rows)
    table = read_overlay(write(tmp_path, name, buffer.getvalue()), tiny())
    assert table.rows() == [("q1", "d3", 1, 4), ("q2", "d5", 2, 6)]


def test_a_sheet_with_no_grade_or_a_bad_one_is_refused_naming_file_and_line(tmp_path):
    ungraded = SHEET.replace("\t1\r\n", "\t\r\n").replace("\t 2 \r\n", "\t\r\n")
    with pytest.raises(DatasetError, match=r"pool.tsv: no judgments; expected a grade in the sheet's grade column"):
        read_overlay(write(tmp_path, "pool.tsv", ungraded), tiny())
    with pytest.raises(DatasetError, match=r"pool.tsv:6: grade must be an integer, found '2.0'"):
        read_overlay(write(tmp_path, "pool.tsv", SHEET.replace(" 2 ", "2.0")), tiny())
    with pytest.raises(DatasetError, match=r"pool.tsv:1: a judging-pool sheet needs the columns .* missing \['grade'\]"):
        read_overlay(write(tmp_path, "pool.tsv", "pool_rank\tquery_id\tdoc_id\n1\tq1\td3\n"), tiny())
