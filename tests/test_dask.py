"""The flow on prefect-dask's DaskTaskRunner (a local cluster) gives the default runner's results."""
import polars as pl
from polars.testing import assert_frame_equal

from tests.conftest import ROOT

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
    from flows.benchmark import with_task_runner

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
