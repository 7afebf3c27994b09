"""Flat and IVF search sharded over Dask workers (`indexes.shards`): each worker reads one row range
of the embedding set from the cache and holds only that; tasks/indexes/sharded.py merges their
top-k exactly as one index orders it. The cluster is the one the task runs on (the flow on Dask),
or a local cluster of `shards` processes started once per process.
"""
from __future__ import annotations

import atexit
import logging
import threading
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from retbench.tasks.indexes.sharded import ExactSearch, build_shard, empty_ivf_like, shard_bounds
from retbench.tasks.stages.embed import EmbeddingSet, read_vector_range

SHARDABLE = ("flat", "ivf")  # kinds searched exactly over shards; the others load in one process

_lock = threading.Lock()
_local: dict[int, object] = {}  # workers -> client of a local cluster this process started
_held: dict[tuple, "LoadedShards"] = {}  # the shards of the last index searched (workers keep them for the next nprobe)


class CacheRows:
    """An embedding set's rows as a shard reads them (tasks/indexes/sharded.build_shard)."""

    # An IVF shard adds its rows a batch at a time (FAISS copies them into its lists), so it holds
    # its lists plus one batch, not its range twice; each batch is one more pass over the cache's keys.
    batch_rows = 65_536

    def __init__(self, embedding_set: EmbeddingSet):
        self.embedding_set = embedding_set
        self.shape = (embedding_set.count, embedding_set.dim)

    def read(self, start: int, stop: int, out: np.ndarray | None = None) -> np.ndarray:
        return read_vector_range(self.embedding_set, start, stop, out)


@dataclass
class LoadedShards:
    """Shard futures on their workers, and the client that holds them."""

    client: object
    futures: list
    workers: list
    ntotal: int

    def search(self, queries: np.ndarray, k: int, assignment) -> list[tuple[np.ndarray, np.ndarray]]:
        import faiss

        threads = faiss.omp_get_max_threads()  # the shards compute the floats with the caller's threads
        sent = self.client.scatter([queries, assignment], broadcast=True, hash=False)
        calls = [self.client.submit(_search_shard, shard, sent[0], k, sent[1], threads, workers=[worker], pure=False)
                 for shard, worker in zip(self.futures, self.workers)]
        with _seceded():
            return self.client.gather(calls)


def _search_shard(shard, queries, k, assignment, threads):
    return shard.search(queries, k, assignment, threads)


def sharded_search(source, shards: int, ivf=None, nprobe: int | None = None, key: tuple | None = None,
                   client=None) -> ExactSearch:
    """An ExactSearch over `shards` row ranges of `source` (a row source: tasks/indexes/sharded.py),
    each loaded by one worker. `ivf`: a trained IVF index (only its quantizer is read; a memory-
    mapped file will do) whose empty copy every shard fills with its rows. `key` names what is
    loaded: the shards of the last key stay on the workers for the next search of it."""
    import faiss
    from distributed import wait

    client = client or dask_client(shards)
    # Seceded before the lock, not inside it: on a worker with one thread, a second retrieve
    # task took the thread the first had given back while its shards loaded, then waited on the
    # lock, and the first could never rejoin (a deadlock, found on a `dask worker --nthreads 1`
    # cluster). Waiting on the lock seceded holds no thread; the lock is released before rejoining.
    with _seceded(), _lock:
        loaded = _held.get(key) if key is not None else None
        if loaded is None or loaded.client is not client:
            _held.clear()  # one sharded index held at a time: the workers' memory is for one
            template = None if ivf is None else faiss.serialize_index(empty_ivf_like(ivf))
            workers = sorted(client.scheduler_info()["workers"])
            placed = [workers[i % len(workers)] for i in range(shards)]
            futures = [client.submit(build_shard, source, start, stop, template, workers=[worker], pure=False,
                                     allow_other_workers=False)
                       for (start, stop), worker in zip(shard_bounds(source.shape[0], shards), placed)]
            wait(futures)  # not gathered: a shard stays on its worker
            for future in futures:
                if future.status != "finished":
                    future.result()  # raises the worker's error
            loaded = LoadedShards(client, futures, placed, source.shape[0])
            if key is not None:
                _held[key] = loaded
    coarse = None if ivf is None else empty_ivf_like(ivf)
    return ExactSearch(ntotal=source.shape[0], d=source.shape[1], search_shards=loaded.search, ivf=coarse, nprobe=nprobe)


def dask_client(workers: int):
    """The client of the cluster this task runs on, or of a local cluster of `workers` processes
    (one thread each) that this process starts on first use and stops at exit."""
    from distributed import get_client, get_worker

    try:
        get_worker()
        return get_client()
    except ValueError:
        pass
    with _lock:
        if workers not in _local:
            from distributed import Client, LocalCluster

            logging.getLogger("distributed").setLevel(logging.WARNING)  # its start-up lines would fill the run's log
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0")
            _local[workers] = Client(cluster)
            atexit.register(_close, workers)
        return _local[workers]


def close_local_clusters() -> None:
    """Stop the local clusters this process started (tests; otherwise at exit)."""
    for workers in list(_local):
        _close(workers)


def _close(workers: int) -> None:
    client = _local.pop(workers, None)
    _held.clear()
    if client is not None:
        cluster = client.cluster
        client.close()
        cluster.close()


@contextmanager
def _seceded():
    """Waiting inside a Dask task: give the worker's thread back while the shards work."""
    try:
        from distributed import get_worker, rejoin, secede

        get_worker()
    except ValueError:
        yield
        return
    secede()
    try:
        yield
    finally:
        rejoin()
