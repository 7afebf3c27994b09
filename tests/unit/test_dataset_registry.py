"""Dataset formats come from a registry (tasks/datasets): a format registered there is one a spec may
name and the load-dataset stage reads; an unknown one is refused naming the known ones."""
from __future__ import annotations

from pathlib import Path

import pytest

import retbench.tasks.datasets as datasets
from retbench.tasks.config.spec import SpecError, load_spec
from retbench.tasks.datasets import format_reader, known_formats, register
from retbench.tasks.datasets.errors import DatasetError
from retbench.tasks.datasets.lines import parse_int, text_lines
from retbench.tasks.datasets.model import DEFAULT_CATEGORY, Judgment, RawCollection
from retbench.tasks.datasets.reader import FormatReader
from retbench.tasks.stages.dataset import load_dataset, load_spec_dataset, reader_code_files

BUILT_IN = ["beir", "cranfield", "glasgow", "jsonl", "xquad"]

# A made-up format: one file `toy.txt`, a line per record, `D <id> <text>` for a document and
# `Q <id> <doc id> <grade> <text>` for a query judged against one document.
TOY = """\
D d1 wings lift aircraft
D d2 rivers carry water
Q q1 d1 2 what lifts a wing
Q q2 d2 1 where does water go
"""


def _read_toy(folder: Path, split: str, name: str | None = None, grade_shift: int = 0) -> RawCollection:
    docs, queries, qrels = [], [], []
    for lineno, line in text_lines(folder / "toy.txt", "toy.txt with D and Q lines"):
        kind, record_id, rest = line.split(" ", 2)
        if kind == "D":
            docs.append((record_id, "", rest, "en"))
        else:
            doc_id, grade, text = rest.split(" ", 2)
            where = f"{folder / 'toy.txt'}:{lineno}"
            queries.append((record_id, text, "en", DEFAULT_CATEGORY, "test"))
            qrels.append(Judgment(record_id, doc_id, parse_int(grade, where, "grade") + grade_shift, where))
    return RawCollection(name or "toy", docs, queries, qrels, str(folder / "toy.txt"), str(folder / "toy.txt"),
                         notes=["toy collection"], max_grade=3)


@pytest.fixture
def toy_registered(monkeypatch):
    """The toy format registered for one test; the registry is as before afterwards."""
    known_formats()  # the built-in formats first, so the copy below holds them
    monkeypatch.setattr(datasets._REGISTRY, "_kinds", dict(datasets._REGISTRY._kinds))
    return register(FormatReader("toy", frozenset({"name", "grade_shift"}), _read_toy))


def test_the_built_in_formats_are_registered_under_their_names():
    assert known_formats() == BUILT_IN
    assert all(format_reader(name).name == name for name in BUILT_IN)


def test_a_registered_format_is_named_by_a_spec_and_read_by_the_stage(tmp_path, toy_registered):
    (tmp_path / "toy").mkdir()
    (tmp_path / "toy" / "toy.txt").write_text(TOY, encoding="utf-8")
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text("name: t\n"
                         "dataset: {path: toy, format: toy, split: test, options: {grade_shift: 1}}\n"
                         "providers: [{name: h, kind: hashing}]\n")
    spec = load_spec(spec_file)
    assert spec.dataset.format == "toy"

    dataset = load_spec_dataset(spec.dataset)
    assert dataset.name == "toy"
    assert dataset.corpus["doc_id"].to_list() == ["d1", "d2"]
    assert sorted(dataset.qrels.iter_rows()) == [("q1", "d1", 3), ("q2", "d2", 2)]  # shifted by the option
    assert dataset.notes[0] == "toy collection"
    # The shared validation applies to it as to every format: options, grade scale.
    with pytest.raises(DatasetError, match=r"unknown option\(s\) \['lang'\] for format 'toy'"):
        load_dataset(tmp_path / "toy", "toy", "test", lang="en")
    with pytest.raises(DatasetError, match=r"toy\.txt:3: grade 4 for query 'q1' is outside 0\.\.3"):
        load_dataset(tmp_path / "toy", "toy", "test", grade_shift=2)
    # Its module's code is part of what decides the parsed dataset (the stage's source key).
    assert Path(__file__) in reader_code_files("toy")


def test_a_format_name_is_registered_once(toy_registered):
    with pytest.raises(ValueError, match="dataset format kind 'toy' is registered twice"):
        register(FormatReader("toy", frozenset({"name"}), _read_toy))


def test_an_unknown_format_is_refused_naming_the_known_ones(tmp_path):
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text("name: t\ndataset: {path: data, format: csv}\nproviders: [{name: h, kind: hashing}]\n")
    with pytest.raises(SpecError, match=r"dataset\.format: unknown dataset format 'csv' "
                                        r"\(known: beir, cranfield, glasgow, jsonl, xquad\)"):
        load_spec(spec_file)
    with pytest.raises(DatasetError, match=r"unknown dataset format 'csv' \(expected one of \['beir', "):
        load_dataset(tmp_path, "csv")
