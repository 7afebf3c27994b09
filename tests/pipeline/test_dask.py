"""The flow on prefect-dask's DaskTaskRunner (a local cluster) gives the default runner's results."""
import polars as pl
from polars.testing import assert_frame_equal

from retbench.support.paths import ROOT

SPEC = """
name: dask
dataset: {{path: {data}, format: jsonl, split: all}}
chunking: {{strategy: sentence, max_words: 80}}
providers:
  - {{name: wide, kind: hashing, options: {{dim: 512}}}}
  - {{name: narrow, kind: hashing, options: {{dim: 128}}}}
indexes: {{ivf: {{nprobe: [1, 3]}}}}
output_dir: {out}
store_dir: {store}
"""


def test_dask_runner_matches_default_runner(tmp_path, prefect_harness):
    from retbench.flows.benchmark import with_task_runner

    results = {}
    for runner in (None, "local"):
        base = tmp_path / (runner or "default")
        spec = base / "spec.yaml"
        base.mkdir()
        # Separate stores: the Dask run must compute everything itself, not read the other's cache.
        spec.write_text(SPEC.format(data=ROOT / "data" / "sample", out=base / "out", store=base / "store"))
        with_task_runner(runner)(str(spec))
        results[runner] = {name: pl.read_parquet(base / "out" / f"{name}.parquet") for name in ("summary", "per_query", "runs")}
    order = {"summary": ["provider", "index", "nprobe", "measure"],
             "per_query": ["provider", "index", "nprobe", "query_id", "measure"],
             "runs": ["provider", "index", "nprobe", "query_id", "rank"]}
    for name, keys in order.items():
        assert_frame_equal(results[None][name].sort(keys, nulls_last=False), results["local"][name].sort(keys, nulls_last=False))
    assert set(results["local"]["summary"]["provider"]) == {"wide", "narrow"}


SHARDED = """
name: sharded
dataset: {{path: {data}, format: jsonl, split: all}}
chunking: {{strategy: sentence, max_words: 80}}
providers:
  - {{name: hash, kind: hashing, batch_size: 16, shards: 6, options: {{dim: 64}}}}
  - name: api
    kind: openai-compatible
    batch_size: 16
    shards: 6
    options: {{base_url: "{url}", model: m, encoding_format: base64, concurrency: 2}}
indexes: {{ivf: null}}
output_dir: {out}
store_dir: {store}
"""


def test_one_providers_parts_on_two_dask_workers_give_the_plain_runners_vectors(tmp_path, prefect_harness):
    """Each provider's texts are embedded as 6 part task runs spread over a 2-worker local
    cluster; the vectors equal the plain runner's (parts in sequence, one process), and the HTTP
    provider never has more than `concurrency` requests in flight per worker."""
    import json
    from dataclasses import fields

    import numpy as np

    from retbench.flows.benchmark import with_task_runner
    from retbench.tasks.config.spec import load_spec
    from retbench.tasks.pipeline import Selection, run_pipeline
    from retbench.tasks.stages.embed import EmbeddingSet, read_vectors
    from retbench.support.latency_server import latency_server, stats

    def spec_file(name: str, url: str):
        base = tmp_path / name
        base.mkdir()
        path = base / "spec.yaml"
        path.write_text(SHARDED.format(data=ROOT / "data" / "sample", url=url, out=base / "out", store=base / "store"))
        return path

    with latency_server(latency=0.02, dim=32) as url:
        plain = run_pipeline(load_spec(spec_file("plain", url)), Selection(stage="embed")).embeddings
        assert stats(url)["max_in_flight"] <= 2
        dask_spec = spec_file("dask", url)
        with_task_runner("local")(str(dask_spec), stage="embed")
        assert stats(url)["max_in_flight"] <= 2 * 2  # two workers, each within the provider's concurrency
    manifest = json.loads((dask_spec.parent / "out" / "manifest.json").read_text())
    names = {f.name for f in fields(EmbeddingSet)}
    on_dask = {(e["provider"], e["role"]): EmbeddingSet(**{k: v for k, v in e.items() if k in names})
               for e in manifest["embedding"]}
    assert len(on_dask) == len(plain) == 4
    for reference in plain:
        other = on_dask[(reference.provider, reference.role)]
        assert other.embedded == reference.embedded > 0 and other.key == reference.key
        ids_a, a = read_vectors(reference)[:2]
        ids_b, b = read_vectors(other)[:2]
        assert ids_a == ids_b and np.array_equal(a, b)
