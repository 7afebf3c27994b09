"""A run with `indexes.shards: 2` builds no index over every row (flat: no file of the rows; IVF:
only its trained quantizer) and writes the runs, scores and storage sizes one process writes."""
import json
from pathlib import Path

import faiss
import numpy as np
import polars as pl
from polars.testing import assert_frame_equal

from retbench.support.paths import ROOT

SPEC = """
name: shardindex
dataset: {{path: {data}, format: jsonl, split: dev}}
chunking: {{strategy: paragraph, max_words: 120}}
providers: [{{name: lexical, kind: hashing, options: {{dim: 64}}}}]
indexes: {{ivf: {{nlist: 4, nprobe: [2]}}{shards}}}
output_dir: {out}
store_dir: {store}
"""


def _unfiltered(base: Path) -> Path:
    """The sample without its queries' metadata filters (a filtered search is one-process)."""
    data = base / "data"
    data.mkdir(exist_ok=True)
    for name in ("corpus.jsonl", "qrels.jsonl"):
        (data / name).write_text((ROOT / "data" / "sample" / name).read_text())
    queries = [json.loads(line) for line in (ROOT / "data" / "sample" / "queries.jsonl").read_text().splitlines()]
    (data / "queries.jsonl").write_text("".join(json.dumps({k: v for k, v in q.items() if k != "filter"}) + "\n"
                                                for q in queries))
    return data


def _run(base: Path, name: str, shards: str) -> Path:
    from retbench.flows.benchmark import benchmark

    spec = base / f"{name}.yaml"
    spec.write_text(SPEC.format(data=_unfiltered(base), shards=shards, out=base / name, store=base / "store"))
    benchmark(str(spec))
    return base / name


def _centroids(path: Path) -> np.ndarray:
    index = faiss.read_index(str(path))  # held: the quantizer belongs to it
    quantizer = faiss.downcast_index(faiss.extract_index_ivf(index).quantizer)
    return quantizer.reconstruct_n(0, quantizer.ntotal)


def test_a_two_shard_run_writes_no_full_index_and_the_one_process_tables(tmp_path, prefect_harness):
    from retbench.tasks.stages.sharded_search import close_local_clusters

    try:
        sharded = _run(tmp_path, "sharded", ", shards: 2")
    finally:
        close_local_clusters()
    folder, = (tmp_path / "store" / "indexes").iterdir()
    written = sorted(p.name for p in folder.glob("*.faiss"))
    assert len(written) == 2 and all(name.endswith(".sharded.faiss") for name in written), written
    assert faiss.read_index(str(folder / "flat.sharded.faiss")).ntotal == 0

    single = _run(tmp_path, "single", "")  # the same store: the embeddings are reused, the full files built
    ivf_full, = folder.glob("ivf_*[0-9].faiss")
    assert np.array_equal(_centroids(ivf_full), _centroids(ivf_full.with_name(ivf_full.stem + ".sharded.faiss")))
    for table in ("runs", "per_query"):
        assert_frame_equal(pl.read_parquet(sharded / f"{table}.parquet"), pl.read_parquet(single / f"{table}.parquet"))
    storage = {name: pl.read_parquet(out / "storage.parquet").sort("index") for name, out in (("s", sharded), ("o", single))}
    assert storage["s"]["index"].to_list() == storage["o"]["index"].to_list()
    assert storage["s"]["shards"].to_list() == [2, 2] and storage["o"]["shards"].null_count() == 2
    flat_file = storage["s"].filter(pl.col("index") == "flat")
    vectors, dim = flat_file["vectors"][0], flat_file["dim"][0]
    assert flat_file["index_bytes"][0] == 2 * (folder / "flat.sharded.faiss").stat().st_size + vectors * dim * 4
    # IVF: what the shards hold is the one-process file's size, byte for byte.
    assert storage["s"].filter(pl.col("index") != "flat")["index_bytes"].to_list() == \
        storage["o"].filter(pl.col("index") != "flat")["index_bytes"].to_list()
    manifest = json.loads((sharded / "manifest.json").read_text())
    assert sorted(i["shards"] for i in manifest["indexes"]) == [2, 2]
