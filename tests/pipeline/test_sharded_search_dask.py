"""retrieve with `shards=2` (two local Dask workers, each reading its rows from the embedding
cache) writes the same run files as one process, for flat and IVF, ties included."""
from pathlib import Path

import faiss
import numpy as np
import polars as pl
import pyarrow.parquet as pq
from polars.testing import assert_frame_equal

from retbench.tasks.stages.embed import store_vectors
from retbench.tasks.stages.index import IndexSettings, build_index, resolve_ivf
from retbench.tasks.stages.retrieve import retrieve
from retbench.tasks.stages.sharded_index import build_sharded_index
from retbench.tasks.stages.sharded_search import close_local_clusters


def test_two_worker_sharded_search_writes_the_one_process_runs(tmp_path):
    rng = np.random.default_rng(0)
    # 2,600 chunks (three 1,024-row blocks: shards of 1,024 and 1,576), two per document; components
    # in quarters so many scores tie, and the first 600 chunks repeated at the end (ties across shards).
    chunks = np.round(rng.standard_normal((2600, 8)) * 2).astype(np.float32) / 4
    chunks[-600:] = chunks[:600]
    queries = np.round(rng.standard_normal((25, 8)) * 2).astype(np.float32) / 4
    fingerprint = {"kind": "synthetic-ties", "seed": 0}
    chunk_ids = [f"c{i:04d}" for i in range(len(chunks))]
    doc_set = store_vectors(tmp_path, "ties", fingerprint, "document", chunk_ids, chunks)
    query_set = store_vectors(tmp_path, "ties", fingerprint, "query", [f"q{i}" for i in range(len(queries))], queries)
    chunks_path = tmp_path / "chunks.parquet"
    pq.write_table(pl.DataFrame({"chunk_id": chunk_ids, "doc_id": [f"d{i // 2:04d}" for i in range(len(chunks))]}).to_arrow(),
                   chunks_path)
    try:
        for settings, nprobe in ((IndexSettings("flat"), None), (resolve_ivf(len(chunks), 16, None, 0), 3)):
            built = build_index(doc_set, settings, tmp_path)
            one = retrieve(built, doc_set, query_set, str(chunks_path), 40, nprobe, tmp_path)
            expected = pl.read_parquet(one.path)
            sharded = retrieve(built, doc_set, query_set, str(chunks_path), 40, nprobe, tmp_path, force=True, shards=2)
            assert sharded.path == one.path  # the same run: sharding does not name it
            got = pl.read_parquet(sharded.path)
            assert_frame_equal(got, expected)
            assert got.height == 25 * 40
            # Ties were there to settle: some query's 40 documents hold fewer than 40 distinct scores.
            assert got.group_by("query_id").agg(pl.col("score").n_unique()).get_column("score").min() < 40
            # Built for shards: a small file, no index over the rows; the same quantizer, the same runs.
            small = build_sharded_index(doc_set, settings, tmp_path, shards=2)
            assert small.path.endswith(".sharded.faiss") and faiss.read_index(small.path).ntotal == 0
            if settings.kind == "ivf":
                assert np.array_equal(centroids(small.path), centroids(built.path))
                assert small.size_bytes == Path(built.path).stat().st_size  # quantizer + lists, as one file holds them
            else:
                assert small.size_bytes == 2 * Path(small.path).stat().st_size + 2600 * 8 * 4
            from_small = retrieve(small, doc_set, query_set, str(chunks_path), 40, nprobe, tmp_path, shards=2)
            assert_frame_equal(pl.read_parquet(from_small.path), expected)
    finally:
        close_local_clusters()


def centroids(path: str) -> np.ndarray:
    index = faiss.read_index(path)  # held: the quantizer belongs to it
    quantizer = faiss.downcast_index(faiss.extract_index_ivf(index).quantizer)
    return quantizer.reconstruct_n(0, quantizer.ntotal)
