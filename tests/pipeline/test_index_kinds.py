"""Index kinds are plug-ins: a kind registered here, inside the test, goes through the index stage,
retrieval, scoring, the ANN sweep, the cheaper-variants table and the report with no other module
edited; the spec names it under `indexes:` and `sweep:` and checks its parameters."""
from __future__ import annotations

import json

import polars as pl
import pytest

from retbench.tasks.config.spec import SpecError, load_spec
from retbench.tasks.indexes import IndexKind, Parameter, index_kind, register
from retbench.support.paths import ROOT


class FourBitScalar(IndexKind):
    """4 bits a component (faiss.IndexScalarQuantizer QT_4bit), ranges learnt from a seeded sample."""

    name = "sq4"
    build_parameters = (Parameter("train_size", "train", default=1000), Parameter("seed", default=0, minimum=None))

    def factory(self, dim, params):
        import faiss

        return faiss.IndexScalarQuantizer(dim, faiss.ScalarQuantizer.QT_4bit, faiss.METRIC_INNER_PRODUCT)

    def training_rows(self, params):
        return params["train_size"]

    def bytes_per_vector(self, dim, params):
        return dim / 2


@pytest.fixture
def sq4():
    kind = register(FourBitScalar())
    yield kind
    # A test's kind leaves with it (the registry offers no removal: plug-ins stay for the process).
    from retbench.tasks.indexes import _REGISTRY

    _REGISTRY._kinds.pop(kind.name)


SPEC = """
name: toy-kind
dataset: {{path: {data}, format: jsonl, split: all}}
chunking: {{strategy: paragraph, max_words: 120}}
providers:
  - {{name: hashing, kind: hashing, options: {{dim: 64}}}}
indexes: {{ivf: {{nprobe: [2]}}, {indexes}}}
sweep: {{ivf: null, hnsw: null, ivfpq: null, sq: null, binary: null, {sweep}
         repeats: 1, latency_queries: 5, bootstrap: 50}}
statistics: {{resamples: 100, permutations: 100}}
history: {{enabled: false}}
output_dir: {out}
store_dir: {store}
"""


def write_spec(tmp_path, indexes="sq4: {train_size: 500}", sweep="sq4: {train_size: [500]},"):
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.format(data=ROOT / "data" / "sample", out=tmp_path / "out", store=tmp_path / "store",
                                indexes=indexes, sweep=sweep), encoding="utf-8")
    return path


def test_a_kind_registered_in_a_test_runs_through_the_pipeline_and_the_report(tmp_path, sq4):
    from retbench.tasks.pipeline import run_pipeline

    # a built-in kind the spec could not name before, with its query parameter, beside the test's own
    run_pipeline(load_spec(write_spec(tmp_path, indexes="sq4: {train_size: 500}, hnsw: {M: 8, ef_search: [16]}")))
    out = tmp_path / "out"
    built = sorted(p.name for p in (tmp_path / "store" / "indexes").rglob("*.faiss"))
    assert {"sq4_train-500_seed-0.faiss", "hnsw_M-8_efc-40.faiss", "flat.faiss"} <= set(built)
    summary = pl.read_parquet(out / "summary.parquet")
    assert set(summary["index"]) == {"flat", "ivf", "sq4", "hnsw-ef_search16"}
    # Every query-time parameter is in `params`, nprobe and efSearch alike; `index` keeps the run label.
    named = set(summary.select("setting", "params", "index", "nprobe").unique().rows())
    assert {("hashing/hnsw-ef_search16", '{"ef_search": 16}', "hnsw-ef_search16", None),
            ("hashing/sq4", "{}", "sq4", None), ("hashing/ivf", '{"nprobe": 2}', "ivf", 2)} <= named
    per_query = pl.read_parquet(out / "per_query.parquet")
    assert per_query.filter(pl.col("index") == "sq4").height == per_query.filter(pl.col("index") == "flat").height
    sweep = pl.read_parquet(out / "ann_sweep.parquet")
    row = sweep.filter(pl.col("index_kind") == "sq4").row(0, named=True)
    assert json.loads(row["build_params"]) == {"train_size": 500, "seed": 0} and row["query_params"] == "{}"
    cheaper = pl.read_parquet(out / "cheaper_variants.parquet")
    assert cheaper["index"].to_list() == ["flat", "sq4"]  # it declares fewer bytes than float vectors
    report = (out / "report.html").read_text(encoding="utf-8")
    assert "sq4" in report[report.index('<h2 id="cheaper">'):]
    assert report.count("sq4") > 2


def test_the_spec_checks_a_kind_against_what_it_declares(tmp_path, sq4):
    assert index_kind("sq4") is sq4
    with pytest.raises(SpecError, match=r"indexes\.sq4\.bogus: unknown key \(expected: train_size, seed\)"):
        load_spec(write_spec(tmp_path, indexes="sq4: {bogus: 1}"))
    with pytest.raises(SpecError, match=r"indexes\.sq4\.train_size: expected an integer >= 1"):
        load_spec(write_spec(tmp_path, indexes="sq4: {train_size: 0}"))
    with pytest.raises(SpecError, match=r"indexes\.nope: unknown key: not a field of `indexes` nor an index kind "
                                        r"\(index kinds: binary, flat, hnsw, ivf, ivfpq, sq, sq4\)"):
        load_spec(write_spec(tmp_path, indexes="nope: {}"))
    with pytest.raises(SpecError, match=r"indexes\.sq\.qtype: required"):
        load_spec(write_spec(tmp_path, indexes="sq: {}"))
    with pytest.raises(SpecError, match=r"sweep\.sq4\.train_size: expected a non-empty list"):
        load_spec(write_spec(tmp_path, sweep="sq4: {train_size: 500},"))
    spec = load_spec(write_spec(tmp_path, indexes="sq4: true, hnsw: {M: 8, ef_construction: 20, ef_search: [16]}"))
    assert spec.indexes.other_kinds() == {"sq4": {}, "hnsw": {"M": 8, "ef_construction": 20, "ef_search": [16]}}


def test_the_existing_spellings_keep_their_meaning(tmp_path):
    spec = load_spec(ROOT / "specs" / "sample.yaml")
    assert spec.indexes.other_kinds() == {} and spec.indexes.ivf.nprobe == [1, 4, 8]
    assert [kind for kind, _ in spec.sweep.index_sections()] == ["ivf", "hnsw", "ivfpq", "sq", "binary"]
    assert "sq4" not in spec.model_dump_json()  # no key added to the spec's content hash


def test_the_kinds_and_a_spec_naming_them_load_no_faiss(tmp_path):
    from tests.unit.test_architecture import loaded_by

    path = write_spec(tmp_path, indexes="hnsw: {M: 8, ef_search: [16]}, sq: {qtype: fp16}", sweep="")
    loaded = loaded_by(f"from retbench.tasks.config.spec import load_spec\nfrom retbench.tasks.indexes import known_kinds\n"
                       f"load_spec({str(path)!r})\nprint(known_kinds())")
    assert "retbench.tasks.indexes.hnsw" in loaded and "faiss" not in loaded
