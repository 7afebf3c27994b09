"""Rerun one stage after a model update: exactly which stages run, and how many texts are embedded."""
import json
from pathlib import Path

import pytest

from retbench.support.paths import ROOT

SPEC = """
name: rerun
dataset: {{path: {data}, format: jsonl, split: dev}}
chunking: {{strategy: paragraph, max_words: 120}}
providers:
  - {{name: steady, kind: hashing, options: {{dim: 256}}}}
  - {{name: swapped, kind: hashing, options: {{dim: {dim}}}}}
indexes: {{ivf: {{nprobe: [2]}}}}
output_dir: {out}
store_dir: {store}
"""


def _run(base, dim, **params):
    from retbench.flows.benchmark import benchmark

    spec = base / f"spec-{dim}.yaml"
    spec.write_text(SPEC.format(data=ROOT / "data" / "sample", dim=dim, out=base / "out", store=base / "store"))
    benchmark(str(spec), **params)
    return json.loads((base / "out" / "manifest.json").read_text())


def _computed(manifest, stage):
    return sorted({(w["provider"], w["what"]) for w in manifest["work"] if w["stage"] == stage and w["computed"]})


@pytest.fixture(scope="module")
def history(tmp_path_factory, prefect_harness):
    base = tmp_path_factory.mktemp("rerun")
    first = _run(base, 128)
    swapped = _run(base, 512)  # the "model update": a new fingerprint for one provider
    embed_only = _run(base, 512, stage="embed", providers=["swapped"], force=True)
    return first, swapped, embed_only


def test_first_run_computes_everything(history):
    first, _, _ = history
    chunks = first["chunks"]["chunks"]
    queries = first["dataset"]["queries"]
    assert first["texts"]["embedded"] == 2 * (chunks + queries) - sum(e["repeated"] for e in first["embedding"])
    assert {w["stage"] for w in first["work"] if w["computed"]} == {"load-dataset", "chunk", "embed", "index", "retrieve"}


def test_model_swap_recomputes_only_that_provider(history):
    first, swapped, _ = history
    swapped_embeds = [e for e in swapped["embedding"] if e["provider"] == "swapped"]
    steady_embeds = [e for e in swapped["embedding"] if e["provider"] == "steady"]
    assert sum(e["embedded"] for e in steady_embeds) == 0
    assert sum(e["embedded"] for e in swapped_embeds) == sum(e["embedded"] for e in first["embedding"] if e["provider"] == "swapped")
    assert _computed(swapped, "embed") == [("swapped", "document"), ("swapped", "query")]
    assert {p for p, _ in _computed(swapped, "index")} == {"swapped"}
    assert {p for p, _ in _computed(swapped, "retrieve")} == {"swapped"}
    assert len(_computed(swapped, "index")) == 2 and len(_computed(swapped, "retrieve")) == 2
    assert _computed(swapped, "load-dataset") == [] and _computed(swapped, "chunk") == []
    # Both providers are still scored.
    assert set(swapped["providers"]) == {"steady", "swapped"}
    assert swapped["providers"]["swapped"]["dim"] == 512


def test_forced_single_stage_runs_only_that_stage_for_that_provider(history):
    _, swapped, embed_only = history
    assert embed_only["run"]["stage"] == "embed"
    assert {e["provider"] for e in embed_only["embedding"]} == {"swapped"}
    assert sum(e["embedded"] for e in embed_only["embedding"]) == sum(e["embedded"] for e in swapped["embedding"])
    assert embed_only["indexes"] == [] and embed_only["retrieval"] == []
    # The folder keeps the last full run's tables and report; the manifest lists them and says whose they are.
    assert embed_only["tables"] == swapped["tables"]
    assert embed_only["tables_from"]["finished_at"] == swapped["run"]["finished_at"]
    assert "partial run up to stage embed" in embed_only["run"]["note"]


def test_editing_one_paragraph_reembeds_only_that_chunk(tmp_path, prefect_harness):
    import shutil

    from retbench.flows.benchmark import benchmark

    data = tmp_path / "data"
    shutil.copytree(ROOT / "data" / "sample", data)
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"""
name: edit
dataset: {{path: {data}, format: jsonl, split: dev}}
chunking: {{strategy: paragraph, max_words: 120}}
providers: [{{name: lexical, kind: hashing}}]
indexes: {{ivf: null}}
output_dir: {tmp_path / 'out'}
store_dir: {tmp_path / 'store'}
""")
    benchmark(str(spec))
    lines = (data / "corpus.jsonl").read_text().splitlines()
    index = next(i for i, line in enumerate(lines) if json.loads(line)["id"] == "guide-001")
    doc = json.loads(lines[index])
    paragraphs = doc["text"].split("\n\n")
    assert len(paragraphs) > 3
    paragraphs[2] += " An added sentence about webhook retries."
    doc["text"] = "\n\n".join(paragraphs)
    lines[index] = json.dumps(doc, ensure_ascii=False)
    (data / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    benchmark(str(spec))
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    embedded = {e["role"]: e["embedded"] for e in manifest["embedding"]}
    assert embedded == {"document": 1, "query": 0}


def test_a_moved_store_is_still_a_cache(history, tmp_path):
    import shutil

    from retbench.flows.benchmark import benchmark

    first, _, _ = history
    old_store = Path(first["spec"]["store_dir"])
    shutil.move(str(old_store), str(tmp_path / "moved"))
    try:
        spec = tmp_path / "spec.yaml"
        spec.write_text(SPEC.format(data=ROOT / "data" / "sample", dim=512, out=tmp_path / "out", store=tmp_path / "moved"))
        benchmark(str(spec))
    finally:
        shutil.move(str(tmp_path / "moved"), str(old_store))
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert [w for w in manifest["work"] if w["computed"]] == []
