"""A cached rerun does no work it did before: no tokenizer, no re-measured latency or ANN sweep;
and an index the spec asks for but the corpus cannot hold is planned away, not failed on."""
from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from retbench.support.paths import ROOT

SPEC = """
name: cached
dataset: {{path: "{data}", format: jsonl, split: all}}
chunking: {{strategy: paragraph, max_words: 120}}
providers:
  - {{name: hashing, kind: hashing, options: {{dim: 64}}}}
indexes: {{ivf: {ivf}}}
k: [5, 10]
depth: 20
output_dir: "{out}"
store_dir: "{store}"
history: {{enabled: false}}
statistics: {{resamples: 20, permutations: 20}}
{extra}
"""
MEASURED = """
latency: {batch_sizes: [1, 8], iterations: 1, warmup: 0, texts: 20}
sweep: {ivf: {nprobe: [1, 4]}, hnsw: null, ivfpq: null, repeats: 1, warmup: 0, latency_queries: 5, bootstrap: 20}
"""


def write_spec(tmp_path: Path, name: str, ivf: str = "{nprobe: [1, 4]}", extra: str = "", out: str = "out") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(SPEC.format(data=ROOT / "data" / "sample", ivf=ivf, out=tmp_path / out, store=tmp_path / "store",
                                extra=extra), encoding="utf-8")
    return path


def run(spec_path: Path, **selection):
    from retbench.tasks.config.spec import load_spec
    from retbench.tasks.pipeline import Selection, run_pipeline

    return run_pipeline(load_spec(spec_path), Selection(**selection))


class CountingHashing:
    """The hashing provider, counting how often the pipeline asks it to count tokens."""

    calls = 0

    @classmethod
    def make(cls, provider):
        from retbench.tasks.providers.hashing import HashingProvider

        class Counting(HashingProvider):
            def token_counts(self, texts, role):
                CountingHashing.calls += 1
                return super().token_counts(texts, role)

        return Counting(**provider.options)


def test_a_cached_rerun_counts_no_tokens_and_reports_the_same_cost(tmp_path):
    from retbench.tasks.config.spec import load_spec
    from retbench.tasks.pipeline import run_pipeline

    spec = load_spec(write_spec(tmp_path, "tokens"))
    first = run_pipeline(spec, make_provider=CountingHashing.make)
    assert CountingHashing.calls > 0
    CountingHashing.calls = 0
    second = run_pipeline(spec.model_copy(update={"output_dir": tmp_path / "out2"}), make_provider=CountingHashing.make)
    assert CountingHashing.calls == 0  # token counts come from the cache rows
    assert sum(second.embedded().values()) == 0
    spared = {e.role: e.cached_tokens for e in second.embeddings}
    paid = {e.role: e.tokens for e in first.embeddings}
    # Tokens spared by the cache = tokens paid on the first run, plus repeats of one text
    # (paid once, spared for every copy) - so at least as many.
    assert all(spared[role] >= paid[role] > 0 for role in paid), (spared, paid)
    cost = pl.read_parquet(tmp_path / "out2" / "cost.parquet")
    assert cost["tokens_from_cache"].item() == sum(spared.values())


def test_latency_and_sweep_are_measured_once_per_machine_unless_remeasured(tmp_path):
    spec = write_spec(tmp_path, "measured", extra=MEASURED)
    first = run(spec)
    latency_first = pl.read_parquet(tmp_path / "out" / "latency.parquet")
    sweep_first = pl.read_parquet(tmp_path / "out" / "ann_sweep.parquet")
    second = run(spec)
    assert second.manifest["ann_sweep"][0]["built"] == 0
    assert "measured_before" in second.manifest["ann_sweep"][0]["stage_seconds"]
    # Reused, not measured again: the very same timings.
    assert pl.read_parquet(tmp_path / "out" / "latency.parquet").equals(latency_first)
    assert pl.read_parquet(tmp_path / "out" / "ann_sweep.parquet")["qps_batch"].equals(sweep_first["qps_batch"])
    assert (tmp_path / "out" / "ann_sweep" / "hashing.png").exists()
    third = run(spec, remeasure=True)
    assert "measured_before" not in third.manifest["ann_sweep"][0]["stage_seconds"]
    remeasured = pl.read_parquet(tmp_path / "out" / "latency.parquet")
    assert not remeasured["p50_ms"].equals(latency_first["p50_ms"])  # a new measurement (timings never repeat exactly)
    assert first.manifest["ann_sweep"][0]["recommendation"] == second.manifest["ann_sweep"][0]["recommendation"]


def test_an_ivf_nlist_larger_than_the_corpus_is_skipped_and_every_other_result_written(tmp_path):
    result = run(write_spec(tmp_path, "big-nlist", ivf="{nlist: 100000, nprobe: [1]}"))
    notes = result.manifest["index_notes"]
    assert any(note.startswith("ivf skipped: IVF nlist=100000 is larger than the number of vectors") for note in notes), notes
    summary = pl.read_parquet(tmp_path / "out" / "summary.parquet")
    assert set(summary["index"]) == {"flat"} and summary.height > 0
    assert (tmp_path / "out" / "report.html").exists()


def test_clipped_nprobe_and_a_one_list_ivf_are_said_in_the_manifest(tmp_path):
    result = run(write_spec(tmp_path, "clipped", ivf="{nlist: 1, nprobe: [1, 4, 16]}"))
    notes = " | ".join(result.manifest["index_notes"])
    assert "nprobe [4, 16] exceed nlist=1" in notes
    assert "returns exactly what flat search returns" in notes
    runs = pl.read_parquet(tmp_path / "out" / "runs.parquet").filter(pl.col("index") == "ivf")
    assert runs["nprobe"].unique().to_list() == [1]


def test_indexes_ivf_null_runs_flat_only(tmp_path, caplog):
    import logging

    caplog.set_level(logging.INFO, logger="retbench")
    result = run(write_spec(tmp_path, "flat-only", ivf="null"))
    assert set(pl.read_parquet(tmp_path / "out" / "summary.parquet")["index"]) == {"flat"}
    assert result.manifest["index_notes"] == ["ivf: off (the spec's indexes: sets ivf: null, or names flat without ivf)"]
    said = [r for r in caplog.records if r.getMessage().startswith("ivf: off")]
    assert said and all(r.levelno == logging.INFO for r in said)  # the spec's choice: not a WARNING
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["index_notes"] == result.manifest["index_notes"]


@pytest.mark.parametrize("options, message", [
    ({"batchsize": 8}, "providers[0].options.batchsize: unknown key (expected one of: dim, word_ngrams, char_ngrams, lowercase)"),
    ({"dim": 4}, "providers[0].options.dim: must be at least 16 (got 4)"),
])
def test_provider_options_are_refused_at_load_with_their_key_path(tmp_path, options, message):
    from retbench.tasks.config.spec import SpecError, load_spec

    path = write_spec(tmp_path, "options")
    path.write_text(path.read_text().replace("options: {dim: 64}", f"options: {json.dumps(options)}"))
    with pytest.raises(SpecError) as error:
        load_spec(path)
    assert message in str(error.value)


def test_torch_is_imported_while_the_server_boots_only_for_a_provider_with_nothing_cached(tmp_path):
    """`retbench run` imports a provider's heavy modules (onnxruntime, transformers: ~5 s) in
    the seconds it waits for Prefect's API server, when the provider will embed; a cached rerun,
    a run that stops before the embed stage and a remote store import nothing."""
    import numpy as np

    from retbench.tasks.config.spec import load_spec
    from retbench.tasks.pipeline import Selection, default_provider, modules_of_providers_to_embed
    from retbench.tasks.stages.embed import store_vectors

    spec_path = write_spec(tmp_path, "two")
    text = spec_path.read_text(encoding="utf-8").replace(
        "  - {name: hashing, kind: hashing, options: {dim: 64}}",
        "  - {name: hashing, kind: hashing, options: {dim: 64}}\n  - {name: minilm, kind: sentence-transformers}\n"
        "  - {name: minilm-128, kind: sentence-transformers, dimensions: 128}")
    spec_path.write_text(text, encoding="utf-8")
    spec = load_spec(spec_path)
    heavy = ["onnxruntime", "transformers"]  # backend auto: ONNX Runtime, with transformers' tokenizer (and torch)
    assert modules_of_providers_to_embed(spec, Selection()) == heavy  # once, for both MiniLM providers
    assert modules_of_providers_to_embed(spec, Selection(stage="chunk")) == []
    assert modules_of_providers_to_embed(spec, Selection(providers=("hashing",))) == []
    remote = spec.model_copy(update={"store_dir": "s3://bucket/store"})
    assert modules_of_providers_to_embed(remote, Selection()) == []

    # Rows in both MiniLM folders (written by the cache's own writer): a cached rerun.
    for name in ("minilm", "minilm-128"):
        provider_spec = next(p for p in spec.providers if p.name == name)
        fingerprint = default_provider(provider_spec).fingerprint()
        store_vectors(Path(spec.store_dir), name, fingerprint, "document", ["d1"], np.ones((1, 4), np.float32))
    assert modules_of_providers_to_embed(spec, Selection()) == []
    assert modules_of_providers_to_embed(spec, Selection(stage="embed", force=True, providers=("minilm",))) == heavy
    # A provider that cannot even be built is the embed stage's to report, in its place: no guess here.
    broken = spec.model_copy(update={"providers": [p.model_copy(update={"options": {"model": str(tmp_path / "nowhere")}})
                                                   for p in spec.providers if p.name == "minilm"]})
    assert modules_of_providers_to_embed(broken, Selection()) == []
