"""The layout's rules, checked: the import graph of tasks/ and flows/ (every import, also inside
functions) has no cycle and no arrow up the layers, what the command line loads, and that putting
things in the store goes through one routine."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from retbench.support.paths import ROOT

HEAVY = ("faiss", "torch", "prefect", "sentence_transformers", "matplotlib")


# The layers, bottom-up (the order of issue 21): a module may import its own layer or a lower one,
# never a higher one. Declared once, here; a module in no layer fails, so a new package must be placed.
# A name holds the module and everything under it; "=retbench.tasks" is that module (its __init__) alone.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("L0 foundation", ("=retbench.tasks", "retbench.tasks.store", "retbench.tasks.registry", "retbench.tasks.plugins", "retbench.tasks.user_code", "retbench.tasks.extras", "retbench.tasks.devices", "retbench.tasks.language", "retbench.tasks.allocator", "retbench.tasks.progress", "retbench.tasks.worker_events", "retbench.tasks.worker_plugin")),
    ("L1 plug-ins", ("retbench.tasks.providers", "retbench.tasks.rerankers", "retbench.tasks.datasets", "retbench.tasks.indexes")),
    ("L2 spec models", ("retbench.tasks.config",)),
    ("L3 analysis", ("retbench.tasks.analysis",)),
    ("L4 stages", ("retbench.tasks.stages",)),
    ("L5 reporting", ("retbench.tasks.reporting",)),
    ("L6 wiring", ("retbench.tasks.stage_calls", "retbench.tasks.pipeline", "retbench.tasks.stage_units", "retbench.tasks.stage_list", "retbench.tasks.side_stages")),
    ("L7 entry points", ("retbench.flows",)),
    ("L8 public API", ("=retbench", "retbench.api", "retbench.results")),
)
# What the layers cover (tests and benchmarks may import anything); folder -> its installed name
# (setup.py: the folders are installed as subpackages of retbench).
PACKAGES = {"tasks": "retbench.tasks", "flows": "retbench.flows", "retbench": "retbench"}


def module_files(root: Path, packages: dict[str, str] = PACKAGES) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file under the packages (a package is its __init__)."""
    found = {}
    for folder, installed in packages.items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = (*installed.split("."), *path.relative_to(root / folder).with_suffix("").parts)
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _nearest(name: str, modules: dict[str, Path]) -> str | None:
    """`name` if it is one of `modules`, else the nearest one enclosing it (a.b.f -> a.b); None outside."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> dict[str, int]:
    """The modules (of `modules`) that `module` imports -> the line of its first import of each.

    Every import statement counts, at the top, inside a function or under `if TYPE_CHECKING`:
    `import a.b`, `from a import b` (the submodule a.b when b is one, else a) and relative
    imports. The parent packages Python runs on the way (a/__init__ for `import a.b`) are not
    edges of their own: they are imported by whatever imports a.b, whoever that is."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [_nearest(alias.name, modules) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:
                parts = package.split(".")
                source = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
            targets = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else _nearest(source, modules)
                       for alias in node.names]
        else:
            continue
        for target in targets:
            if target is not None and target != module:
                found[target] = min(found.get(target, node.lineno), node.lineno)
    return found


def import_graph(root: Path, packages: dict[str, str] = PACKAGES) -> dict[str, dict[str, int]]:
    """module -> {imported module: line}, over every module of the packages."""
    modules = module_files(root, packages)
    return {module: imports_of(module, path, modules) for module, path in modules.items()}


def import_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One cycle [a, b, ..., a] for each group of modules that import one another (Tarjan's
    strongly connected components); empty when the graph has no cycle."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []
    for root in sorted(graph):
        if root in order:
            continue
        order[root] = low[root] = len(order)
        stack.append(root)
        work = [(root, iter(sorted(graph[root])))]  # iterative: a long import chain must not hit the recursion limit
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None and child not in order:
                order[child] = low[child] = len(order)
                stack.append(child)
                work.append((child, iter(sorted(graph.get(child, {})))))
            elif child is not None:
                if child in stack:
                    low[node] = min(low[node], order[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == order[node]:
                    group = set()
                    while not group or member != node:
                        member = stack.pop()
                        group.add(member)
                    if len(group) > 1:
                        groups.append(group)
    return sorted(_cycle_in(group, graph) for group in groups)


def _cycle_in(group: set[str], graph: dict[str, dict[str, int]]) -> list[str]:
    """The shortest cycle through the group's first module, found breadth first inside the group."""
    start = min(group)
    came_from = {start: start}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node]):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if child in group and child not in came_from:
                    came_from[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError(f"{sorted(group)} import one another but no cycle through {start} was found")


def layer_of(module: str) -> int | None:
    """Which of LAYERS holds `module` (its longest matching prefix), or None if none does."""
    matches = [(len(prefix), index) for index, (_, prefixes) in enumerate(LAYERS) for prefix in prefixes
               if module == prefix.lstrip("=") or (module.startswith(f"{prefix}.") and not prefix.startswith("="))]
    return max(matches)[1] if matches else None


def test_no_import_cycles_counting_imports_inside_functions():
    graph, files = import_graph(ROOT), module_files(ROOT)
    named = [" -> ".join(f"{a} ({files[a].relative_to(ROOT)}:{graph[a][b]})" for a, b in zip(cycle, cycle[1:]))
             + f" -> {cycle[-1]}" for cycle in import_cycles(graph)]
    assert named == []


def test_every_module_is_in_a_layer():
    assert [module for module in module_files(ROOT) if layer_of(module) is None] == []


def test_no_import_points_up_the_layers():
    graph, files = import_graph(ROOT), module_files(ROOT)
    upward = [f"{files[module].relative_to(ROOT)}:{line} ({LAYERS[layer_of(module)][0]}) imports {target} "
              f"({LAYERS[layer_of(target)][0]})"
              for module, targets in sorted(graph.items()) for target, line in sorted(targets.items())
              if None not in (layer_of(module), layer_of(target)) and layer_of(target) > layer_of(module)]
    assert upward == []


def test_the_graph_sees_a_cycle_closed_by_an_import_inside_a_function(tmp_path):
    """a -> b -> c at module level, and c -> a only inside a function, relatively: a cycle of
    three; d imports into it without being on it. Without c's import, no cycle."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("import pkg.b\n")
    (package / "b.py").write_text("from pkg.c import helper\n")
    (package / "c.py").write_text("import os\n\n\ndef helper():\n    from . import a\n    return a, os\n")
    (package / "d.py").write_text("from pkg import a, b\n")
    graph = import_graph(tmp_path, {"pkg": "pkg"})
    assert graph["pkg.c"] == {"pkg.a": 5} and graph["pkg.d"] == {"pkg.a": 1, "pkg.b": 1}
    assert import_cycles(graph) == [["pkg.a", "pkg.b", "pkg.c", "pkg.a"]]

    (package / "c.py").write_text("def helper():\n    return None\n")
    assert import_cycles(import_graph(tmp_path, {"pkg": "pkg"})) == []


def test_each_cycle_is_named_once():
    graph = {"x": {"y": 1}, "y": {"x": 2}, "p": {"q": 1}, "q": {"r": 1}, "r": {"p": 1, "x": 3}, "z": {"p": 1}}
    assert import_cycles(graph) == [["p", "q", "r", "p"], ["x", "y", "x"]]


@pytest.mark.parametrize("package, forbidden", [
    ("retbench.tasks.analysis", ("retbench.tasks.providers", "retbench.tasks.rerankers")),  # functions on tables build no model
    ("retbench.tasks.indexes", ("retbench.tasks.providers", "retbench.tasks.rerankers")),  # index kinds: the store, the registry, FAISS
])
def test_narrower_rules_than_the_layers(package, forbidden):
    graph = import_graph(ROOT)
    offenders = {module: sorted(t for t in targets if t.startswith(forbidden)) for module, targets in graph.items()
                 if module == package or module.startswith(f"{package}.")}
    assert {module: targets for module, targets in offenders.items() if targets} == {}


def files_under(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def test_metrics_import_nothing_from_the_rest_of_retbench_but_the_measure_names():
    """metrics.py stands alone (its kernels could be lifted out); the names it scores are declared
    with the spec (tasks/config/measures.py), which itself imports nothing."""
    graph = import_graph(ROOT)
    assert set(graph["retbench.tasks.analysis.metrics"]) <= {"retbench.tasks.config.measures"} and graph["retbench.tasks.config.measures"] == {}


def loaded_by(code: str) -> list[str]:
    probe = f"import sys\n{code}\nprint(__import__('json').dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("argv", [["--help"], ["eval", "--help"], ["run", "--help"], ["check", "--help"],
                                  ["init", "--help"]])
def test_the_command_line_help_loads_no_engine(argv):
    code = f"from retbench.flows.cli import main\ntry:\n    main({argv!r})\nexcept SystemExit:\n    pass"
    loaded = loaded_by(code)
    assert not [m for m in HEAVY if m in loaded]
    assert "numpy" not in loaded and "polars" not in loaded  # nothing but argparse is needed to print help


def test_loading_a_spec_loads_no_stage_and_no_engine():
    loaded = loaded_by(f"from retbench.tasks.config.spec import load_spec\nload_spec({str(ROOT / 'specs' / 'sample.yaml')!r})")
    assert not [m for m in loaded if m.startswith(("retbench.tasks.stages", "retbench.tasks.pipeline", "retbench.tasks.reporting"))]
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
    from retbench.tasks.pipeline import PipelineResult  # noqa: F401  (the pipeline module imports cleanly)
    from retbench.tasks.stages.embed import EmbeddingSet
    from retbench.tasks.stages.index import BuiltIndex
    from retbench.tasks.stages.prepare import ChunksRef, DatasetRef
    from retbench.tasks.stages.retrieve import RunResult
    from retbench.tasks.stages.sweep import SweepResult
    from retbench.tasks.store.build import StageResult

    for record in (DatasetRef, ChunksRef, EmbeddingSet, BuiltIndex, RunResult, SweepResult):
        assert issubclass(record, StageResult), record


def test_the_crash_worker_runs_the_shipped_pipeline():
    source = (ROOT / "support" / "crash_worker.py").read_text(encoding="utf-8")
    assert "from retbench.tasks.pipeline import" in source and "run_pipeline(" in source
    for stage_function in ("embed_texts(", "build_index(", "retrieve(", "score_runs("):
        assert stage_function not in source  # no copy of the wiring


@pytest.mark.parametrize("folder", ["benchmarks", "support"])
def test_benchmarks_and_support_never_import_tests(folder):
    """What a benchmark shares with the tests lives in support/, so tests can move between layers."""
    offenders = {str(path.relative_to(ROOT)): sorted(m for m in top_level_names(path) if m.split(".")[0] == "tests")
                 for path in files_under(folder)}
    assert not {k: v for k, v in offenders.items() if v}


@pytest.mark.parametrize("folder", ["tasks", "flows", "retbench", "support", "benchmarks", "tests", "docs", "deployments"])
def test_nothing_imports_the_folders_by_their_repository_names(folder):
    """tasks/, flows/ and support/ are installed as retbench.tasks, retbench.flows and
    retbench.support: an import of plain `tasks` would find a user's own tasks.py first (a
    notebook folder's), or a second copy of our modules with registries of their own."""
    offenders = {str(path.relative_to(ROOT)): sorted(m for m in top_level_names(path)
                                                     if m.split(".")[0] in ("tasks", "flows", "support"))
                 for path in files_under(folder)}
    assert not {k: v for k, v in offenders.items() if v}


def top_level_names(path: Path) -> set[str]:
    """Every absolute module name a file imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def test_every_test_file_is_in_a_layer():
    """tests/unit: pure functions and stages on small inputs; tests/pipeline: whole runs, Prefect,
    real models and servers. A test file left at tests/ would belong to neither."""
    assert sorted(p.name for p in (ROOT / "tests").glob("test_*.py")) == []


# This file is the exception: it reads the code (and imports the pipeline module to see that it imports).
@pytest.mark.parametrize("path", sorted(p for p in (ROOT / "tests" / "unit").glob("test_*.py") if p.name != "test_architecture.py"),
                         ids=lambda p: p.name)
def test_unit_tests_run_no_pipeline_no_prefect_and_no_server(path):
    pipeline_level = {"retbench.tasks.pipeline", "retbench.flows.benchmark", "retbench.flows.cli", "retbench.flows.prefect_server", "prefect",
                      "retbench.support.faulty_server", "retbench.support.latency_server", "retbench.support.moto_s3", "retbench.support.headless",
                      "retbench.support.crash_worker"}
    names = top_level_names(path)
    assert not {n for n in names if n in pipeline_level or n.startswith("prefect.")}
    assert "prefect_harness" not in path.read_text(encoding="utf-8")
