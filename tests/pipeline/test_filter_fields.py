"""A query filter on a metadata field the documents do not have (or the spec did not declare) is
refused before any work: by `check_inputs`, and through the CLI before Prefect starts."""
import json

import pytest

from retbench.tasks.config.spec import SpecError, load_spec
from retbench.tasks.datasets.errors import DatasetError
from retbench.tasks.stages.filter_fields import check_filter_fields, document_fields
from retbench.tasks.stages.prepare import check_inputs
from retbench.support.paths import ROOT
from tests.pipeline.test_cli_errors import retbench

DOCS = [
    {"id": "d1", "text": "cards fees", "metadata": {"product": "cards", "year": 2024}},
    {"id": "d2", "text": "loan rates", "metadata": {"product": "loans", "region": "eu"}},
    {"id": "d3", "text": "no metadata"},
]
SPEC = """name: f
dataset: {{path: {data}, format: jsonl, split: all{extra}}}
providers: [{{name: h, kind: hashing}}]
indexes: {{ivf: null}}
output_dir: {out}
store_dir: {store}
"""


def collection(folder, queries, docs=DOCS):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    # a blank line 2: line numbers count it, as the dataset stage does
    lines = [json.dumps(q) for q in queries]
    (folder / "queries.jsonl").write_text("\n".join(lines[:1] + [""] + lines[1:]) + "\n")
    (folder / "qrels.jsonl").write_text(json.dumps({"query_id": "q1", "doc_id": "d1", "grade": 1}) + "\n")
    return folder


def spec_file(tmp_path, extra=""):
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.format(data=tmp_path / "data", out=tmp_path / "out", store=tmp_path / "store", extra=extra))
    return path


QUERIES = [{"id": "q1", "text": "fees", "filter": {"product": "cards"}},
           {"id": "q2", "text": "rates", "filter": {"region": ["eu", "us"], "prodcut": "loans"}}]


def test_an_unknown_filter_field_names_the_queries_line_the_field_and_the_known_fields(tmp_path):
    data = collection(tmp_path / "data", QUERIES)
    with pytest.raises(DatasetError) as error:
        check_filter_fields(data, "jsonl")
    # q2 is on line 3 (line 2 is blank)
    assert str(error.value) == (f"{data / 'queries.jsonl'}:3: filter field 'prodcut' is not a metadata field of any "
                                "document (known: product, region, year; did you mean 'product'?)")
    with pytest.raises(DatasetError, match=r"queries\.jsonl:3: filter field 'prodcut'"):
        check_inputs(load_spec(spec_file(tmp_path)))
    assert not (tmp_path / "store" / "datasets").exists()  # no stage ran


def test_valid_filters_pass_and_the_corpus_is_read_only_until_every_field_is_found(tmp_path):
    data = collection(tmp_path / "data", QUERIES[:1])
    check_filter_fields(data, "jsonl")
    check_inputs(load_spec(spec_file(tmp_path)))
    # the first document has product: reading stops there, region (second document) is not seen
    assert document_fields(data / "corpus.jsonl", {"product"}) == {"product", "year"}
    assert document_fields(data / "corpus.jsonl") == {"product", "year", "region"}


def test_filters_with_no_metadata_anywhere_and_malformed_lines_left_to_the_dataset_stage(tmp_path):
    data = collection(tmp_path / "data", QUERIES[:1], docs=[{"id": "d1", "text": "x"}])
    with pytest.raises(DatasetError, match=r"queries\.jsonl:1: filter field 'product' is not a metadata field of any "
                                           r"document \(known: none: no document has metadata\)"):
        check_filter_fields(data, "jsonl")
    (data / "queries.jsonl").write_text('{"id": "q1", "filter": {"product": \n')  # malformed: the dataset stage names it
    check_filter_fields(data, "jsonl")


def test_a_declared_field_list_refuses_undeclared_filters_and_declared_fields_no_document_has(tmp_path):
    data = collection(tmp_path / "data", QUERIES[:1] + [{"id": "q2", "text": "rates", "filter": {"region": "eu"}}])
    check_inputs(load_spec(spec_file(tmp_path, ", metadata_fields: [product, region]")))
    with pytest.raises(DatasetError) as error:
        check_inputs(load_spec(spec_file(tmp_path, ", metadata_fields: [product, year]")))
    assert str(error.value) == (f"{data / 'queries.jsonl'}:3: filter field 'region' is not declared in "
                                "dataset.metadata_fields (declared: product, year)")
    with pytest.raises(DatasetError) as error:
        check_inputs(load_spec(spec_file(tmp_path, ", metadata_fields: [product, regoin, region]")))
    assert str(error.value) == (f"dataset.metadata_fields[1] 'regoin': no document in {data / 'corpus.jsonl'} has this "
                                "metadata field (known: product, region, year; did you mean 'region'?)")


def test_metadata_fields_are_refused_at_spec_load_for_a_format_without_filters(tmp_path):
    path = spec_file(tmp_path, ", metadata_fields: [a]").read_text().replace("format: jsonl", "format: cranfield")
    (tmp_path / "spec.yaml").write_text(path)
    with pytest.raises(SpecError, match=r"dataset\.metadata_fields: only the jsonl format carries query "
                                        r"filters \(format is 'cranfield'\)"):
        load_spec(tmp_path / "spec.yaml")
    (tmp_path / "spec.yaml").write_text(spec_file(tmp_path, ", metadata_fields: []").read_text())
    with pytest.raises(SpecError, match=r"dataset\.metadata_fields"):
        load_spec(tmp_path / "spec.yaml")


def test_the_shipped_sample_passes_the_check(tmp_path):
    check_filter_fields(ROOT / "data" / "sample", "jsonl")


def test_cli_refuses_an_unknown_filter_field_in_one_line_before_prefect_starts(tmp_path):
    data = collection(tmp_path / "data", QUERIES)
    home = tmp_path / "prefect-home"
    home.mkdir()
    done = retbench("run", spec_file(tmp_path), cwd=tmp_path, prefect_home=home)
    assert (done.returncode, done.stderr) == (2, (
        f"retbench: {data / 'queries.jsonl'}:3: filter field 'prodcut' is not a metadata field of any document "
        "(known: product, region, year; did you mean 'product'?)\n"))
    assert not (tmp_path / "store" / "datasets").exists()
    assert not list(home.rglob("*.db"))  # Prefect's database: the API server never started
