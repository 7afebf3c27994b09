"""The documentation site builds with `mkdocs build --strict` (every link and anchor resolves,
the generated references render), and every column of every table a run writes is documented in
docs/reference/tables.md: the sample, with the fast hashing provider and every side stage on but
fine-tuning (tests/pipeline/test_finetune_pipeline.py), run twice so the second writes regressions."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from retbench.support.docs_tables import mistyped, undocumented
from retbench.support.paths import ROOT

SPEC = """
name: docs-tables
dataset: {{path: {data}, format: jsonl, split: all}}
chunking:
  - {{name: para120, strategy: paragraph, max_words: 120}}
  - {{name: sent60, strategy: sentence, max_words: 60}}
queries: {{variants: [{{name: lower, lowercase: true, whitespace: true}}]}}
providers:
  - {{name: hashing, kind: hashing}}
  - {{name: hashing-256, kind: hashing, dimensions: 256}}
lexical: [{{name: bm25}}]
rerankers: [{{name: rescore, kind: embedding-rescore, options: {{provider: hashing}}}}]
systems:
  - {{name: bm25+hashing, first: "bm25:bm25", second: hashing/flat}}
  - {{name: hashing+rescore, first: hashing/flat, rerank: rescore, top_n: 20}}
indexes: {{ivf: {{nprobe: [1, 4]}}}}
sweep: {{ivf: {{nprobe: [1]}}, hnsw: {{ef_search: [16]}}, ivfpq: null, sq: {{qtype: [8bit]}}, binary: {{rescore: [0, 20]}},
        repeats: 1, latency_queries: 5, bootstrap: 20}}
latency: {{batch_sizes: [1, 10], iterations: 1, concurrency: [1], texts: 20}}
filter_sweep: {{selectivities: [0.5], hnsw: {{ef_search: [16]}}}}
statistics: {{resamples: 50, permutations: 200}}
output_dir: {out}
store_dir: {store}
"""

# A per-provider file inside a folder of the output holds the rows of the table named here.
_FOLDER_TABLES = {"latency": "latency", "search_latency": "search_latency", "buried": "buried_answers", "filtered_ann": "filtered_ann", "ann_sweep": "ann_sweep"}


def _table_of(path: Path, out: Path) -> str:
    relative = path.relative_to(out)
    if len(relative.parts) == 1:
        return path.name.removesuffix(".parquet")
    if relative.parts[0] == "ann_sweep" and path.name.endswith(".lost.parquet"):
        return "ann_lost"
    return _FOLDER_TABLES[relative.parts[0]]


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    from retbench.tasks.config.spec import load_spec
    from retbench.tasks.pipeline import run_pipeline

    base = tmp_path_factory.mktemp("docs-tables")
    spec_path = base / "spec.yaml"
    spec_path.write_text(SPEC.format(data=ROOT / "data" / "sample", out=base / "out", store=base / "store"))
    spec = load_spec(spec_path)
    run_pipeline(spec)
    run_pipeline(spec.model_copy(update={"output_dir": base / "out2"}))
    return base / "out", base / "out2"


def test_every_column_a_run_writes_is_documented_with_its_type(two_runs):
    missing, wrong = {}, {}
    for out in two_runs:
        for path in sorted(out.rglob("*.parquet")):
            table = _table_of(path, out)
            schema = {name: str(dtype) for name, dtype in pl.read_parquet_schema(path).items()}
            if undocumented(table, list(schema)):
                missing[str(path.relative_to(out))] = undocumented(table, list(schema))
            if mistyped(table, schema):
                wrong[str(path.relative_to(out))] = mistyped(table, schema)
    assert not missing, f"columns missing from docs/reference/tables.md: {missing}"
    assert not wrong, f"columns whose type docs/reference/tables.md gets wrong: {wrong}"


def test_the_run_wrote_the_tables_the_page_documents_beside_the_core_ones(two_runs):
    """The check above means something only if the side stages' tables were written."""
    first, second = two_runs
    names = {p.name.removesuffix(".parquet") for p in first.glob("*.parquet")}
    assert {"ann_sweep", "ann_lost", "latency", "filtered_ann", "buried_answers", "variant_comparisons", "systems",
            "rerank_cost", "cheaper_variants", "settings", "filters"} <= names
    assert (second / "regressions.parquet").exists()


def test_mkdocs_build_strict(tmp_path):
    """Strict: a broken link or anchor, or a page missing from the nav, fails the build. The
    generated references are filled in from the code (docs/reference_hook.py)."""
    site = tmp_path / "site"
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                            cwd=ROOT, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    spec_page = (site / "reference" / "spec" / "index.html").read_text(encoding="utf-8")
    assert "indexes.ivf.nprobe" in spec_page and "generated: spec-keys" not in spec_page
    cli_page = (site / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    assert "--remeasure" in cli_page and "generated: cli" not in cli_page
    assert (site / "images" / "report.png").exists()
    assert not (site / "_incoming").exists() and not (site / "reference_hook.py").exists()
