"""The layout's rules, checked: which folders may import which, what the command line loads,
and that putting things in the store goes through one routine."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from support.paths import ROOT

HEAVY = ("faiss", "torch", "prefect", "sentence_transformers", "matplotlib")


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def files_under(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


@pytest.mark.parametrize("folder, forbidden", [
    ("tasks", ("flows",)),  # stages and everything else under tasks/ never import the Prefect entry points
    ("tasks/config", ("tasks.stages", "tasks.pipeline", "tasks.reporting")),  # config imports no stage code
    ("tasks/store", ("tasks.stages", "tasks.analysis", "tasks.reporting", "tasks.providers", "tasks.pipeline")),
    ("tasks/analysis", ("tasks.providers", "tasks.pipeline", "tasks.reporting")),
    ("tasks/providers", ("tasks.stages", "tasks.pipeline", "tasks.reporting", "tasks.analysis")),
    ("tasks/datasets", ("tasks.config", "tasks.analysis", "tasks.stages", "tasks.pipeline", "tasks.reporting")),
    ("tasks/indexes", ("tasks.stages", "tasks.pipeline", "tasks.reporting", "tasks.analysis", "tasks.config",
                       "tasks.providers", "tasks.rerankers")),  # index kinds: the store, the registry, FAISS
])
def test_folders_import_only_what_the_layout_allows(folder, forbidden):
    offenders = {str(path.relative_to(ROOT)): sorted(m for m in imported_modules(path) if m.startswith(forbidden))
                 for path in files_under(folder)}
    assert not {k: v for k, v in offenders.items() if v}


def test_metrics_import_nothing_from_the_rest_of_retbench():
    assert not [m for m in imported_modules(ROOT / "tasks" / "analysis" / "metrics.py") if m.startswith("tasks")]


def loaded_by(code: str) -> list[str]:
    probe = f"import sys\n{code}\nprint(__import__('json').dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("argv", [["--help"], ["eval", "--help"], ["run", "--help"]])
def test_the_command_line_help_loads_no_engine(argv):
    code = f"from flows.cli import main\ntry:\n    main({argv!r})\nexcept SystemExit:\n    pass"
    loaded = loaded_by(code)
    assert not [m for m in HEAVY if m in loaded]
    assert "numpy" not in loaded and "polars" not in loaded  # nothing but argparse is needed to print help


def test_loading_a_spec_loads_no_stage_and_no_engine():
    loaded = loaded_by(f"from tasks.config.spec import load_spec\nload_spec({str(ROOT / 'specs' / 'sample.yaml')!r})")
    assert not [m for m in loaded if m.startswith(("tasks.stages", "tasks.pipeline", "tasks.reporting"))]
    assert not [m for m in HEAVY if m in loaded]


def test_one_routine_puts_artifacts_in_the_store():
    """Locks, checksums and quarantine are used under tasks/store alone: build.py (build_once, one
    artifact) and shards.py (keyed caches written batch by batch: embeddings, rerank scores)."""
    low_level = ("record_checksum", "quarantine", "file_lock", "lock_for")
    users = {}
    for path in files_under("tasks"):
        if path.parent.name == "store":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        calls = {node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call)
                 and isinstance(node.func, ast.Name) and node.func.id in low_level}
        if calls:
            users[str(path.relative_to(ROOT))] = sorted(calls)
    assert users == {}


def test_every_stage_record_is_a_stage_result():
    from tasks.pipeline import PipelineResult  # noqa: F401  (the pipeline module imports cleanly)
    from tasks.stages.embed import EmbeddingSet
    from tasks.stages.index import BuiltIndex
    from tasks.stages.prepare import ChunksRef, DatasetRef
    from tasks.stages.retrieve import RunResult
    from tasks.stages.sweep import SweepResult
    from tasks.store.build import StageResult

    for record in (DatasetRef, ChunksRef, EmbeddingSet, BuiltIndex, RunResult, SweepResult):
        assert issubclass(record, StageResult), record


def test_the_crash_worker_runs_the_shipped_pipeline():
    source = (ROOT / "support" / "crash_worker.py").read_text(encoding="utf-8")
    assert "from tasks.pipeline import" in source and "run_pipeline(" in source
    for stage_function in ("embed_texts(", "build_index(", "retrieve(", "score_runs("):
        assert stage_function not in source  # no copy of the wiring


@pytest.mark.parametrize("folder", ["benchmarks", "support"])
def test_benchmarks_and_support_never_import_tests(folder):
    """What a benchmark shares with the tests lives in support/, so tests can move between layers."""
    offenders = {str(path.relative_to(ROOT)): sorted(m for m in imported_modules(path) if m.split(".")[0] == "tests")
                 for path in files_under(folder)}
    assert not {k: v for k, v in offenders.items() if v}
