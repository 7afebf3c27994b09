"""Stages as declared units: a side stage added from outside the repository's modules (its spec
section as one new file of tasks/config/sections/, its stage and report section in this file, its
registration one entry) runs in `run_pipeline` when the spec has its section, and only then."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import polars as pl
import pytest

from retbench.support.paths import ROOT

# The side stage's configuration: the one file a new stage adds under tasks/config/sections/.
TOY_SECTION = '''"""`toy:` turns on the toy side stage of tests/test_stage_units.py."""
from pydantic import BaseModel, ConfigDict

from retbench.tasks.config.sections import SpecSection


class ToySpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    label: str = "toy"


SECTION = SpecSection("toy", ToySpec, "a table of one row per provider, for the test")
'''

SPEC = """
name: sample-toy
dataset: {{path: {data}, format: jsonl, split: all}}
chunking: {{strategy: paragraph, max_words: 120}}
providers:
  - {{name: hashing, kind: hashing}}
output_dir: {out}
store_dir: {store}
"""


# --- the side stage's module: its stage call, its tables, its report section


def toy_stage(doc_set, runs: list, spec) -> str:
    """One row per provider: how many vectors it embedded and how many runs it retrieved."""
    from retbench.tasks.store.files import write_parquet

    table = pl.DataFrame({"label": [spec.toy.label], "provider": [doc_set.provider], "vectors": [doc_set.count],
                          "runs": [len(runs)]})
    return str(write_parquet(table, Path(spec.output_dir) / "toy" / f"{doc_set.provider}.parquet"))


def submit_toy(produced) -> list:
    return [produced.runner.submit("toy", toy_stage, produced.embedded[p.name][0],
                                   [r for group in produced.retrieved for r in group.result()], produced.spec,
                                   label=f"toy-{p.name}")
            for p in produced.active]


def write_toy(produced) -> dict[str, str]:
    from retbench.tasks.reporting import tables as report

    table = pl.concat([pl.read_parquet(path) for path in produced.results_of("toy")])
    return report.write_tables(Path(produced.spec.output_dir), {"toy": table})


def toy_section(inputs):
    from retbench.tasks.reporting.html import Section
    from retbench.tasks.reporting.verdict import read_table

    table = read_table(inputs.output_dir, "toy")
    if table is None:
        return None
    section = Section("Toy side stage", "toy")
    section.paragraph("Vectors and runs per provider, written by the toy side stage.")
    section.table(table)
    return section


def toy_unit():
    from retbench.tasks.stage_units import SideStage

    return SideStage("toy", "retrieve", submit_toy, write_toy, tables=("toy",), section="toy",
                     report=("ann", toy_section))


# --- the registration, and runs with and without the section


@pytest.fixture
def with_toy(tmp_path, monkeypatch):
    """The toy's section file in a folder added to tasks/config/sections/, the spec model rebuilt
    from the sections found, and the toy appended to the registered side stages."""
    import retbench.tasks.config.sections as sections
    from retbench.tasks import pipeline
    from retbench.tasks.config import spec as spec_module
    from retbench.tasks.stage_list import SIDE_STAGES

    folder = tmp_path / "sections"
    folder.mkdir()
    (folder / "toy.py").write_text(TOY_SECTION, encoding="utf-8")
    monkeypatch.setattr(sections, "__path__", [*sections.__path__, str(folder)])
    monkeypatch.delitem(sys.modules, "retbench.tasks.config.sections.toy", raising=False)
    monkeypatch.setattr(spec_module, "BenchmarkSpec", spec_module.spec_model())
    monkeypatch.setattr(pipeline, "SIDE_STAGES", [*SIDE_STAGES, toy_unit()])
    yield
    sys.modules.pop("retbench.tasks.config.sections.toy", None)


def run_sample(base: Path, extra: str = ""):
    from retbench.tasks.config.spec import load_spec
    from retbench.tasks.pipeline import run_pipeline

    spec_path = base / "spec.yaml"
    spec_path.write_text(SPEC.format(data=ROOT / "data" / "sample", out=base / "out", store=base / "store") + extra,
                         encoding="utf-8")
    return run_pipeline(load_spec(spec_path), spec_path=spec_path)


def test_a_side_stage_declared_outside_the_repository_runs_and_is_reported(tmp_path, with_toy):
    result = run_sample(tmp_path, "toy: {label: hello}\n")
    out = Path(result.output_dir)
    table = pl.read_parquet(out / "toy.parquet")
    assert table.rows() == [("hello", "hashing", result.manifest["chunks"]["chunks"], len(result.manifest["retrieval"]))]
    assert json.loads((out / "manifest.json").read_text())["tables"]["toy"] == str(out / "toy.parquet")
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "Toy side stage" in page and "Vectors and runs per provider" in page
    assert page.index('<h2 id="ann"') < page.index('<h2 id="toy"') < page.index('<h2 id="tables"')
    assert "## Toy side stage" in (out / "report.md").read_text(encoding="utf-8")


def test_a_spec_without_the_section_does_not_run_it(tmp_path, with_toy, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "toy_stage", lambda *a: pytest.fail("the toy stage ran without its section"))
    result = run_sample(tmp_path)
    out = Path(result.output_dir)
    assert not (out / "toy.parquet").exists() and not (out / "toy").exists()
    assert "toy" not in result.tables
    assert "Toy side stage" not in (out / "report.html").read_text(encoding="utf-8")


def test_an_unknown_key_is_refused_without_the_section_file(tmp_path):
    from retbench.tasks.config.spec import SpecError, load_spec

    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(SPEC.format(data=ROOT / "data" / "sample", out=tmp_path / "out", store=tmp_path / "store")
                         + "toy: {label: hello}\n", encoding="utf-8")
    with pytest.raises(SpecError, match=r"toy: unknown key"):
        load_spec(spec_path)


def test_the_declared_lists_agree_with_the_spec_the_stages_and_the_report():
    from retbench.tasks.config.spec import BenchmarkSpec
    from retbench.tasks.config.stages import STAGES
    from retbench.tasks.reporting.html import SECTIONS
    from retbench.tasks.stage_list import MAIN_STAGES, SIDE_STAGES

    assert [s.name for s in MAIN_STAGES if s.name != "report"] == list(STAGES)
    sections = {name for name, _ in SECTIONS}
    for unit in [*MAIN_STAGES, *SIDE_STAGES]:
        assert set(unit.shown_in) <= sections, unit.name
    assert {u.section for u in SIDE_STAGES if u.section} == {"latency", "sweep", "filter_sweep"}
    assert {u.section for u in SIDE_STAGES if u.section} <= set(BenchmarkSpec.model_fields)
    names = [u.name for u in SIDE_STAGES]
    assert len(names) == len(set(names))


def test_report_sections_are_placed_after_the_named_section():
    from retbench.tasks.reporting.html import SECTIONS, section_builders

    first, second = (lambda inputs: "first"), (lambda inputs: "second")
    builders = section_builders([("verdict", first), ("trend", second), ("verdict", second)])
    names = [name for name, _ in SECTIONS]
    assert builders[1:3] == [first, second]
    assert builders[names.index("trend") + 3] is second
    assert len(builders) == len(SECTIONS) + 3
    with pytest.raises(ValueError, match=r"unknown section\(s\) \['nowhere'\] \(expected one of verdict, tradeoffs"):
        section_builders([("nowhere", first)])


def test_a_side_stage_writes_only_the_tables_it_declares():
    from retbench.tasks.stage_units import SideStage

    unit = SideStage("x", "score", tables=("x",))
    assert unit.written({"x": "x.parquet"}) == {"x": "x.parquet"}
    with pytest.raises(ValueError, match=r"side stage 'x' wrote table\(s\) \['summary'\] it does not declare \(expected some of: x\)"):
        unit.written({"x": "x.parquet", "summary": "summary.parquet"})


def test_a_side_stage_must_follow_a_main_stage_it_can_follow():
    from retbench.tasks.stage_units import SideStage

    with pytest.raises(ValueError, match=r"side stage 'x': after='chunk' \(expected one of embed, retrieve, score\)"):
        SideStage("x", "chunk")
