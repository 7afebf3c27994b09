"""The documentation against the code: the README's promises (its first lines are the two set-up
commands, it stays short, its links resolve), every spec example in the README and docs/ loads,
the generated spec reference renders types and defaults as a reader needs them, and every table
the stages declare has a section in the tables reference. (`mkdocs build --strict` and the
columns of a real run: tests/pipeline/test_docs_site.py.)"""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import pytest
import yaml

from retbench.support.docs_tables import TABLES_PAGE, documented_columns
from retbench.support.paths import ROOT

README = ROOT / "README.md"
DOCS = ROOT / "docs"
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
_YAML_BLOCK = re.compile(r"^```yaml\n(.*?)^```", re.S | re.M)


def _hook():
    spec = importlib.util.spec_from_file_location("reference_hook", DOCS / "reference_hook.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _pages():
    return sorted(p for p in DOCS.rglob("*.md") if "_incoming" not in p.parts)


def test_readme_starts_with_the_two_set_up_commands():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert lines[:6] == [
        "# retbench",
        "",
        "```",
        "make run     # fresh machine: creates .venv, runs the sample benchmark offline, prints the results table",
        "make test    # runs the test suite",
        "```",
    ]


def test_readme_is_at_most_200_lines():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 200


@pytest.mark.parametrize("page", [README, *_pages()], ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve_to_files(page):
    """Every relative link and image (anchors aside) names a file that exists; the docs pages'
    anchors are checked by `mkdocs build --strict`. The generated reference pages exist on disk
    too: the hook fills in a marker of a committed page."""
    missing = []
    for target in _LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (page.parent / target.split("#")[0]).resolve()
        if not path.exists():
            missing.append(target)
    assert not missing, f"{page.relative_to(ROOT)}: links to missing files {missing}"


def test_readme_links_into_the_docs_pages():
    targets = {t.split("#")[0] for t in _LINK.findall(README.read_text(encoding="utf-8"))}
    for page in ("docs/quickstart.md", "docs/concepts.md", "docs/reference/spec.md", "docs/reference/tables.md",
                 "docs/results.md", "docs/images/report.png"):
        assert page in targets


def _spec_examples():
    """(where, mapping) for every ```yaml block of the README and docs/ that holds spec keys."""
    from retbench.tasks.config.spec import BenchmarkSpec

    keys = set(BenchmarkSpec.model_fields)
    for page in [README, *_pages()]:
        for number, block in enumerate(_YAML_BLOCK.findall(page.read_text(encoding="utf-8")), 1):
            example = yaml.safe_load(block)
            if isinstance(example, dict) and keys & set(example):
                yield f"{page.relative_to(ROOT)} yaml block {number}", example


# What a fragment (chunking alone, systems alone, ...) is read against: the sample's providers and BM25.
_BASE = {
    "name": "docs-example",
    "dataset": {"path": "data/sample"},
    "providers": [{"name": "hashing", "kind": "hashing"}, {"name": "minilm", "kind": "sentence-transformers"},
                  {"name": "e5-small", "kind": "e5-multilingual"}],
    "lexical": [{"name": "bm25"}],
}


def test_every_spec_example_in_the_docs_loads():
    """A spec example that no longer loads (a renamed key, a changed kind) fails here, naming the
    page and block. Fragments are read on top of a base spec; rewrite files are not opened."""
    from pydantic import ValidationError

    from retbench.tasks.config.spec import BenchmarkSpec, provider_option_errors, system_errors

    examples = list(_spec_examples())
    assert len(examples) >= 8  # README, concepts, variants, providers, systems, fine-tuning, ANN, ...
    problems = []
    for where, example in examples:
        try:
            spec = BenchmarkSpec.model_validate({**_BASE, **example})
        except ValidationError as error:
            problems.append(f"{where}: {error}")
            continue
        problems += [f"{where}: {line}" for line in provider_option_errors(spec) + system_errors(spec)]
    assert not problems, "\n".join(problems)


def test_spec_reference_renders_types_defaults_and_bounds():
    from retbench.tasks.config.spec import BenchmarkSpec

    rows = {row[0]: row[1:] for row in _hook().key_rows(BenchmarkSpec)}
    assert rows["indexes.ivf.nprobe"][:2] == ("list[int]", "`[1, 4, 16]`")
    assert rows["dataset.split"][:2] == ('"train" \\| "dev" \\| "test" \\| "all"', '`"all"`')
    assert rows["providers"][1] == "**required**"
    assert rows["indexes.ivf"][:2] == ("mapping \\| null", "on (its defaults)")
    assert rows["latency"][:2] == ("mapping \\| null", "null")  # a side stage: off unless set
    assert rows["depth"][2].endswith("(>= 1)")
    assert rows["providers[].shards"][2].endswith("(>= 1, <= 4096)")
    assert "chunking[].name" in rows and "queries.variants[].prefix" in rows and "systems[].fusion.alpha" in rows


def test_spec_reference_lists_every_section_and_plug_in_kind():
    """The generated page names every side stage's spec section and every registered kind, so a
    new one is documented by registering it."""
    from retbench.tasks.config.sections import spec_sections
    from retbench.tasks.datasets import known_formats
    from retbench.tasks.indexes import known_kinds as index_kinds
    from retbench.tasks.providers import known_kinds as provider_kinds
    from retbench.tasks.rerankers import known_kinds as reranker_kinds

    page = _hook().spec_keys()
    for section in spec_sections():
        assert f"| `{section.name}` |" in page
    for kind in [*provider_kinds(), *reranker_kinds()]:
        assert f"### `{kind}`" in page
    for name in [*known_formats(), *index_kinds()]:
        assert f"| `{name}` |" in page


def test_every_table_the_stages_declare_has_a_section():
    from retbench.tasks.stage_list import SIDE_STAGES

    documented = documented_columns()
    page = TABLES_PAGE.read_text(encoding="utf-8")
    for name in {t.removesuffix("_csv") for stage in SIDE_STAGES for t in stage.tables}:
        assert name in documented or f"`{name}.json`" in page, f"tables.md: no section for {name!r}"
    assert all(columns for columns in documented.values())


def test_the_tables_page_parser_reads_placeholders_and_types():
    from retbench.support.docs_tables import mistyped, undocumented

    assert undocumented("ann_sweep", ["delta_ndcg@10_ci_low", "neighbour_recall@10", "flat_mrr"]) == []
    assert undocumented("summary", ["setting", "valeu"]) == ["valeu"]
    assert undocumented("no_such_table", ["a"]) == ["a"]
    assert mistyped("summary", {"value": "Float64", "queries": "UInt32", "setting": "String"}) == []
    assert mistyped("summary", {"value": "String"}) == ["value: written String, documented float"]
    # A name written out wins over a placeholder that matches it too.
    assert mistyped("cheaper_variants", {"delta_basis": "String", "delta_ndcg@10": "Float64"}) == []
    assert mistyped("failures", {"top_k": "List(Struct({'rank': Int64}))"}) == []


_CHECK_EXTENSIONS = """
import numpy as np
from retbench.tasks.config.spec import BenchmarkSpec
from retbench.tasks.indexes import index_kind
from retbench.tasks.providers import create_provider
from retbench.tasks.rerankers import create_reranker

vectors = create_provider("letter-counts", {"alphabet": "ab"}).encode(["a bab", "xyz"], "document")
assert vectors.tolist() == [[2.0, 2.0], [0.0, 0.0]], vectors
assert create_reranker("word-overlap").score("Reset my PIN", ["pin reset steps", "card limits"]).tolist() == [2.0, 0.0]
kind = index_kind("sq4")
assert kind.file_name(kind.complete({})) == "sq4_train-1000_seed-0.faiss", kind.file_name(kind.complete({}))
spec = BenchmarkSpec.model_validate({
    "name": "x", "dataset": {"path": "."}, "providers": [{"name": "letters", "kind": "letter-counts", "options": {"alphabet": "aeiou"}}],
    "rerankers": [{"name": "overlap", "kind": "word-overlap"}], "indexes": {"sq4": {"train_size": 500}},
    "systems": [{"name": "letters+overlap", "first": "letters/flat", "rerank": "overlap"}]})
index = kind.factory(8, kind.complete({"train_size": 500}))
index.train(np.random.default_rng(0).standard_normal((600, 8)).astype("float32"))
print("ok")
"""


def test_the_extending_examples_run(tmp_path):
    """docs/extending.md's provider, reranker and index kind, registered in a fresh interpreter
    (the registries are process-wide) and used as the page says the spec then uses them."""
    blocks = re.findall(r"^```python\n(.*?)^```", (DOCS / "extending.md").read_text(encoding="utf-8"), re.S | re.M)
    assert len(blocks) == 3
    script = tmp_path / "extensions.py"
    script.write_text("\n\n".join(blocks) + _CHECK_EXTENSIONS, encoding="utf-8")
    result = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]
