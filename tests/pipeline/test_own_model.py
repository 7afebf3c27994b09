"""Your own model through the pipeline, from a folder outside the repo: a function, a BEIR-style
class, an MTEB-style class and a factory (kind: python); a reranker of your own; editing the code
re-embeds; what is refused, in one line, keeping what was done; vectors you already have (kind:
precomputed); `retbench check` trying your code."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml

from retbench.support.paths import ROOT

SAMPLE = ROOT / "data" / "sample"

# Toy models over the hashing provider: each kind of object gives the hashing provider's vectors,
# so each run through the pipeline must give the hashing provider's scores, value for value.
MODELS = '''\
"""Toy models standing in for a team's own."""
import os

import numpy as np

from helpers import hashed


def embed(texts):
    return hashed(texts).tolist()


def embed_with_role(texts, role):
    assert role in ("query", "document")
    return hashed(texts)


class BeirModel:
    def encode_queries(self, queries, batch_size=16, **kwargs):
        return hashed(queries)

    def encode_corpus(self, corpus, batch_size=16, **kwargs):
        return hashed([(d["title"] + " " + d["text"]).strip() for d in corpus])


class MtebModel:
    def __init__(self, dim=256):
        self.dim = dim

    def encode(self, sentences, *, task_name, prompt_type=None, **kwargs):
        return hashed(list(sentences), self.dim)


def make_model(dim=256):
    return MtebModel(dim=dim)


def fails_after_two_calls(texts):
    # The third call fails while RETBENCH_TEST_FAIL is set: the run stops, the two batches stay.
    calls = int(os.environ.get("RETBENCH_TEST_CALLS", "0")) + 1
    os.environ["RETBENCH_TEST_CALLS"] = str(calls)
    if os.environ.get("RETBENCH_TEST_FAIL") and calls > 2:
        raise RuntimeError("out of GPU memory")
    return hashed(texts)


def overlap(query, documents):
    words = set(query.lower().split())
    return [len(words & set(d.lower().split())) for d in documents]
'''

HELPERS = '''\
"""Shared by the toy models."""
from retbench.tasks.providers.hashing import HashingProvider


def hashed(texts, dim=256):
    return HashingProvider(dim=dim).encode(list(texts), "document")
'''


def write_folder(base: Path) -> Path:
    folder = base / "team"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "my_models.py").write_text(MODELS)
    (folder / "helpers.py").write_text(HELPERS)
    return folder


def write_spec(folder: Path, providers: list[dict], name: str = "own", **extra) -> Path:
    spec = {"name": name, "dataset": {"path": str(SAMPLE), "format": "jsonl"}, "chunking": {"strategy": "none"},
            "providers": providers, "indexes": {"flat": True, "ivf": None}, "output_dir": f"out-{name}",
            "store_dir": ".store", **extra}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def run(spec_path: Path, **selection):
    from retbench.tasks.config.spec import load_spec
    from retbench.tasks.pipeline import Runner, Selection, run_pipeline

    spec = load_spec(spec_path)
    return run_pipeline(spec, Selection(**selection), spec_path=spec_path, runner=Runner())


def means(output_dir) -> dict:
    summary = pl.read_parquet(Path(output_dir) / "summary.parquet")
    return {(row["provider"], row["measure"]): row["value"] for row in summary.iter_rows(named=True)}


@pytest.fixture(scope="module")
def four_kinds(tmp_path_factory):
    folder = write_folder(tmp_path_factory.mktemp("own"))
    spec = write_spec(folder, [
        {"name": "hashing", "kind": "hashing", "options": {"dim": 256}},
        {"name": "function", "kind": "python", "options": {"callable": "my_models:embed"}},
        {"name": "with-role", "kind": "python", "options": {"callable": "my_models:embed_with_role"}},
        {"name": "beir", "kind": "python", "options": {"callable": "my_models:BeirModel"}},
        {"name": "mteb", "kind": "python", "options": {"callable": "my_models:MtebModel", "kwargs": {"dim": 256}}},
        {"name": "factory", "kind": "python", "options": {"callable": "my_models:make_model", "kwargs": {"dim": 256}}},
    ], rerankers=[{"name": "overlap", "kind": "python", "options": {"callable": "my_models:overlap"}}],
        systems=[{"name": "function+overlap", "first": "function/flat", "rerank": "overlap", "top_n": 20}])
    return folder, spec, run(spec)


def test_each_kind_of_object_gives_the_hashing_providers_scores(four_kinds):
    _, _, result = four_kinds
    scores = means(result.output_dir)
    measures = sorted({m for p, m in scores if p == "hashing"})
    assert len(measures) >= 8
    for name in ("function", "with-role", "beir", "mteb", "factory"):
        assert {m: scores[(name, m)] for m in measures} == {m: scores[("hashing", m)] for m in measures}, name
    fingerprints = result.manifest["providers"]
    assert fingerprints["factory"]["callable"] == "my_models:make_model" and fingerprints["factory"]["kwargs"] == {"dim": 256}
    assert fingerprints["function"]["code"] == fingerprints["beir"]["code"]  # one module, one digest
    assert "search_path" not in json.dumps(fingerprints)  # where the project lies is not its identity


def test_the_reranker_of_your_own_reorders_the_top(four_kinds):
    _, _, result = four_kinds
    cost = pl.read_parquet(Path(result.output_dir) / "rerank_cost.parquet")
    row = cost.filter(pl.col("system") == "function+overlap").row(0, named=True)
    assert row["reranker"] == "overlap" and row["kind"] == "python" and row["pairs_scored_this_run"] > 2000
    scores = means(result.output_dir)
    assert scores[("function+overlap", "ndcg@10")] != scores[("function", "ndcg@10")]


def test_editing_the_function_reembeds_it_and_a_docstring_elsewhere_does_not(tmp_path):
    folder = write_folder(tmp_path)
    spec = write_spec(folder, [{"name": "mine", "kind": "python", "options": {"callable": "my_models:embed"}},
                               {"name": "steady", "kind": "hashing", "options": {"dim": 256}}])
    first = run(spec).manifest["texts"]
    (folder / "helpers.py").write_text(HELPERS.replace('"""Shared by the toy models."""', '"""Shared, reworded."""'))
    assert run(spec).manifest["texts"]["embedded"] == 0  # a docstring of an imported module: same code
    (folder / "my_models.py").write_text(MODELS.replace("return hashed(texts).tolist()", "return hashed(texts, 128).tolist()"))
    edited = run(spec).manifest
    assert edited["texts"]["embedded"] == first["embedded"] // 2  # only "mine", all of its texts
    assert {e["provider"] for e in edited["embedding"] if e["embedded"]} == {"mine"}


@pytest.mark.parametrize("function, message", [
    ("def f(texts):\n    raise ValueError('weights not found')\n",
     r"providers\[0\] \('bad'\), callable bad:f raised ValueError: weights not found \(on a batch of 16 document texts"),
    ("def f(texts):\n    return [[1.0, 2.0]] * (len(texts) - 1)\n", "callable bad:f returned 15 vectors for 16 texts"),
    ("def f(texts):\n    return [[1.0, 2.0]] * (len(texts) - 1) + [[1.0]]\n", "returned ragged vectors: row 0 has 2 values, row 15 has 1"),
    ("def f(texts):\n    return [[1.0, float('nan')]] * len(texts)\n", r"returned a non-finite value \(nan\) in row 0 of 16"),
    ("n = [0]\ndef f(texts):\n    n[0] += 1\n    return [[1.0] * (2 if n[0] < 3 else 3)] * len(texts)\n",
     "returned 3-dimensional vectors after 2-dimensional ones"),
])
def test_what_your_code_gets_wrong_is_refused_naming_it(tmp_path, function, message):
    from retbench.tasks.user_code import UserCodeError

    (tmp_path / "bad.py").write_text(function)
    spec = write_spec(tmp_path, [{"name": "bad", "kind": "python", "batch_size": 16, "options": {"callable": "bad:f"}}])
    with pytest.raises(UserCodeError, match=message):
        run(spec)
    sys.modules.pop("bad", None)


def test_a_failure_is_one_line_and_the_batches_before_it_are_kept(tmp_path):
    folder = write_folder(tmp_path)
    spec = write_spec(folder, [{"name": "flaky", "kind": "python", "batch_size": 50,
                                "options": {"callable": "my_models:fails_after_two_calls"}}])
    env = {**__import__("os").environ, "RETBENCH_TEST_FAIL": "1", "PYTHONPATH": ""}
    failed = subprocess.run([sys.executable, "-m", "retbench.flows.cli", "run", str(spec)], cwd=folder, env=env,
                            capture_output=True, text=True, timeout=300)
    assert failed.returncode == 2, failed.stderr[-2000:]
    last = failed.stderr.strip().splitlines()[-1]
    assert last == ("retbench: providers[0] ('flaky'), callable my_models:fails_after_two_calls raised RuntimeError: "
                    "out of GPU memory (on a batch of 50 document texts; --debug shows its traceback)")
    assert "Traceback" not in failed.stderr
    # The rerun embeds only what the two kept batches did not hold: 220 documents + 110 queries - 100.
    assert run(spec).manifest["texts"]["embedded"] == 220 + 110 - 100


def test_check_imports_your_code_and_embeds_two_texts(tmp_path):
    folder = write_folder(tmp_path)
    spec = write_spec(folder, [{"name": "mine", "kind": "python", "options": {"callable": "my_models:make_model",
                                                                             "kwargs": {"dim": 64}}}])
    checked = subprocess.run([sys.executable, "-m", "retbench.flows.cli", "check", str(spec)], cwd=folder,
                             capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, checked.stderr
    said = " ".join(checked.stdout.split())
    assert "providers[0] ('mine'), callable my_models:make_model: 64-dimensional vectors" in said
    assert "ms per text (one document and one query embedded now, not cached" in said
    assert not (folder / ".store").exists() or not list((folder / ".store").rglob("*.parquet"))


@pytest.mark.slow
def test_vectors_exported_from_the_minilm_cache_give_the_minilm_runs_summary(tmp_path):
    """The MiniLM run's own vectors, written as a team would hand them over (Parquet, by id),
    give that run's summary value for value."""
    from retbench.tasks.stages.embed import load_vectors

    minilm = write_spec(tmp_path, [{"name": "minilm", "kind": "sentence-transformers"}], name="minilm")
    result = run(minilm)
    sets = {e.role: e for e in result.embeddings if e.provider == "minilm"}
    for role, name in (("document", "docs"), ("query", "queries")):
        ids, vectors = load_vectors(sets[role])
        ids = [i.rpartition("#")[0] for i in ids] if role == "document" else ids
        pl.DataFrame({"id": ids, "vector": vectors.tolist()}).write_parquet(tmp_path / f"{name}.parquet")
    mine = write_spec(tmp_path, [{"name": "minilm", "kind": "precomputed",
                                  "options": {"documents": "docs.parquet", "queries": "queries.parquet"}}],
                      name="precomputed")
    again = run(mine)
    assert again.manifest["texts"]["embedded"] == 330  # read from the files into a cache of its own
    assert means(again.output_dir) == means(result.output_dir)
    assert run(mine).manifest["texts"]["embedded"] == 0


def test_precomputed_vectors_that_do_not_fit_are_refused_before_any_work(tmp_path):
    from retbench.tasks.config.spec import SpecError, load_spec
    from retbench.tasks.stages.preflight import preflight

    rng = np.random.default_rng(0)
    docs = pl.read_ndjson(SAMPLE / "corpus.jsonl")["id"].to_list()
    queries = pl.read_ndjson(SAMPLE / "queries.jsonl")["id"].to_list()
    pl.DataFrame({"id": docs[3:] + ["not-in-the-corpus"], "vector": rng.random((len(docs) - 2, 8)).tolist()}
                 ).write_parquet(tmp_path / "docs.parquet")
    pl.DataFrame({"id": queries, "vector": rng.random((len(queries), 6)).tolist()}).write_parquet(tmp_path / "q.parquet")
    spec = write_spec(tmp_path, [{"name": "ours", "kind": "precomputed",
                                  "options": {"documents": "docs.parquet", "queries": "q.parquet"}}])
    with pytest.raises(SpecError) as refused:
        preflight(load_spec(spec))
    message = str(refused.value)
    assert f"providers[0] ('ours', kind precomputed): documents: 3 of the {len(docs)} document ids this run needs" in message
    assert "holds 1 ids the collection does not have (e.g. 'not-in-the-corpus')" in message
    assert "the document vectors are 8-dimensional but the query vectors 6-dimensional" in message
    assert not [p for p in (tmp_path / ".store").rglob("*") if p.is_file()]  # nothing embedded, nothing cached


def test_a_plugin_package_installed_with_an_entry_point_adds_a_provider(tmp_path):
    """A real package, installed by pip (into a folder of its own: the test venv stays as it
    was), registering a provider kind through the `retbench.plugins` entry-point group."""
    package = tmp_path / "package"
    (package / "reversed_plugin").mkdir(parents=True)
    (package / "pyproject.toml").write_text(textwrap.dedent("""\
        [build-system]
        requires = ["setuptools>=68"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "reversed-plugin"
        version = "1.2.0"
        [project.entry-points."retbench.plugins"]
        reversed = "reversed_plugin"
        """))
    (package / "reversed_plugin" / "__init__.py").write_text(textwrap.dedent("""\
        import retbench
        from retbench.tasks.providers.hashing import HashingProvider


        @retbench.register_provider("reversed-hashing")
        class ReversedHashing(HashingProvider):
            kind = "reversed-hashing"

            def encode(self, texts, role):
                return super().encode([t[::-1] for t in texts], role)
        """))
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--target", str(site), str(package)], check=True, capture_output=True, timeout=300)
    env = {**__import__("os").environ, "PYTHONPATH": str(site)}
    listed = subprocess.run([sys.executable, "-m", "retbench.flows.cli", "plugins"], env=env, capture_output=True,
                            text=True, timeout=120, check=True).stdout
    (line,) = [line for line in listed.splitlines() if "reversed-hashing" in line]
    assert line.split()[:2] == ["provider", "reversed-hashing"]
    assert "entry point reversed = reversed_plugin (reversed-plugin 1.2.0)" in line
    spec = write_spec(tmp_path, [{"name": "rev", "kind": "reversed-hashing", "options": {"dim": 64}}])
    ran = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""\
        import json, sys
        from retbench.tasks.config.spec import load_spec
        from retbench.tasks.pipeline import Runner, run_pipeline
        result = run_pipeline(load_spec({str(spec)!r}), runner=Runner())
        print(json.dumps(result.manifest["providers"]["rev"]))
        """)], env=env, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert json.loads(ran.stdout.strip().splitlines()[-1])["kind"] == "reversed-hashing"


def test_a_spec_plugins_module_next_to_the_spec_registers_before_the_spec_is_checked(tmp_path, registries_restored):
    """Each of the four registries takes a kind from a plug-in module: a provider, a reranker, an
    index kind and a dataset format, all used by one spec and listed by `retbench plugins`."""
    (tmp_path / "local_kinds.py").write_text(textwrap.dedent("""\
        import retbench
        from retbench.tasks.datasets import jsonl
        from retbench.tasks.indexes.sq import SQ
        from retbench.tasks.providers.hashing import HashingProvider
        from retbench.tasks.rerankers.python_callable import PythonReranker


        @retbench.register_provider("spec-plugin-hashing")
        class SpecPluginHashing(HashingProvider):
            kind = "spec-plugin-hashing"


        @retbench.register_reranker("spec-plugin-reranker")
        class SpecPluginReranker(PythonReranker):
            kind = "spec-plugin-reranker"


        class SpecPluginSq(SQ):
            name = "spec-plugin-sq"


        retbench.register_index_kind(SpecPluginSq())
        retbench.register_dataset_format(retbench.FormatReader("spec-plugin-jsonl", jsonl.READER.options,
                                                               jsonl.READER.read_rows))
        """))
    (tmp_path / "scoring.py").write_text("def score(query, documents):\n    return [-len(d) for d in documents]\n")
    spec = write_spec(tmp_path, [{"name": "p", "kind": "spec-plugin-hashing", "options": {"dim": 64}}],
                      plugins=["local_kinds"],
                      rerankers=[{"name": "short-first", "kind": "spec-plugin-reranker", "options": {"callable": "scoring:score"}}],
                      systems=[{"name": "p+short", "first": "p/flat", "rerank": "short-first", "top_n": 10}])
    raw = yaml.safe_load(spec.read_text())
    raw["dataset"]["format"] = "spec-plugin-jsonl"
    raw["indexes"]["spec-plugin-sq"] = {"qtype": "fp16"}
    spec.write_text(yaml.safe_dump(raw))
    listed = subprocess.run([sys.executable, "-m", "retbench.flows.cli", "plugins", str(spec)], capture_output=True,
                            text=True, timeout=120, check=True).stdout
    origins = {tuple(line.split()[:-3]): line.split()[-3:] for line in listed.splitlines() if "spec-plugin" in line}
    assert origins == {(what, *kind.split()): ["spec", "plugins:", "local_kinds"] for what, kind in (
        ("provider", "spec-plugin-hashing"), ("reranker", "spec-plugin-reranker"), ("index", "kind spec-plugin-sq"),
        ("dataset", "format spec-plugin-jsonl"))}
    result = run(spec)
    assert result.manifest["providers"]["p"]["kind"] == "spec-plugin-hashing"
    assert "spec-plugin-sq" in {i["settings"]["kind"] for i in result.manifest["indexes"]}
    assert ("p+short", "ndcg@10") in means(result.output_dir)
    missing = write_spec(tmp_path, [{"name": "p", "kind": "hashing"}], name="missing", plugins=["not_a_module"])
    from retbench.tasks.config.spec import SpecError, load_spec

    with pytest.raises(SpecError, match=r"plugins\[0\]: module 'not_a_module' not found"):
        load_spec(missing)
