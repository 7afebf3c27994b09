"""Keyed caches kept as a folder of Parquet shards (the embedding cache, the rerank score cache).

A cache that grows batch by batch cannot be one `build_once` file: each batch is written as a
shard the moment it is computed, so a crash loses at most the batch in flight. This module is
that routine, once: the folder's lock (writers exclusive, readers shared), writing a shard
(temp file, rename, checksum via `build.write_checked`), removing one, and scanning the folder
(temp files of killed writers deleted, damaged shards quarantined, sidecar-less ones given a
checksum). What a row means, and which of two rows with one key wins, is the cache's business.
"""
from __future__ import annotations

import contextlib
import time
import uuid
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from tasks.store.build import write_checked
from tasks.store.integrity import checksum_ok, file_lock, quarantine, record_checksum, sidecar
from tasks.store.remote import removed, store_of, synced


@contextlib.contextmanager
def folder_lock(directory: str | Path, shared: bool = False) -> Iterator[None]:
    """Exclusive for writers (check the cache, compute what is missing, write it); shared for
    readers, so no writer merges or deletes shards under them. On an object store the folder is
    first brought in line with its prefix (one listing of this folder, its missing shards
    fetched, shards merged away elsewhere dropped)."""
    if store_of(directory) is not None:
        Path(directory).mkdir(parents=True, exist_ok=True)  # a reader's first look at this folder
    with file_lock(Path(directory) / ".lock", shared=shared):
        synced(directory, keep_local=False)
        yield


def shard_paths(directory: str | Path) -> list[Path]:
    """Oldest first (names start with a nanosecond time stamp)."""
    return sorted(Path(directory).glob("shard-*.parquet"))


def shard_stamp(path: Path) -> int:
    return int(path.name.split("-")[1])


def write_shard(directory: str | Path, table: pa.Table, stamp: int | None = None) -> Path:
    """One shard, complete on disk with its checksum before this returns. `stamp` keeps a
    rewritten shard's place in the order."""
    name = f"shard-{stamp or time.time_ns():020d}-{uuid.uuid4().hex[:8]}.parquet"
    return write_checked(Path(directory) / name, lambda tmp: pq.write_table(table, tmp, compression="zstd"))


def remove_shard(path: Path) -> None:
    # The sidecar first: without it an object-store reader already treats the shard as gone.
    for part in (sidecar(path), path):
        removed(part)
        part.unlink(missing_ok=True)


def merge_shards(directory: str | Path, shards: list[Path]) -> None:
    """Shards written by one call become one. The merged shard is on disk before the small ones
    go, so a crash here leaves duplicate rows, never a gap (the next scan's caller drops them)."""
    if len(shards) < 2:
        return
    write_shard(directory, pa.concat_tables([read_shard(p) for p in shards], promote_options="permissive"))
    for path in shards:
        remove_shard(path)


def read_shard(path: str | Path, columns: list[str] | None = None) -> pa.Table:
    """A shard's rows (or some columns). Through ParquetFile, not pq.read_table, which imports
    pyarrow.dataset: a second of a fully cached run."""
    with pq.ParquetFile(path) as shard:
        return shard.read(columns=columns)


def scan_shards(directory: str | Path, store: str | Path, columns: list[str],
                newest_first: bool = False) -> Iterator[tuple[Path, pa.Table]]:
    """(shard, its `columns` that exist) for every intact shard. Call with the lock held.

    Leftover temporary files of killed writers are deleted; a shard whose bytes do not match
    its sidecar, or that does not parse, is quarantined (its rows are computed again); a shard
    written without its sidecar (killed between the two renames) gets one."""
    directory = Path(directory)
    for stale in directory.glob(".shard-*.tmp"):
        stale.unlink(missing_ok=True)
    paths = shard_paths(directory)
    for path in paths[::-1] if newest_first else paths:
        state = checksum_ok(path)
        if state is False:
            quarantine(path, store, "checksum mismatch (truncated or corrupted)")
            continue
        try:
            # ParquetFile, not read_table: the latter imports pyarrow.dataset (a second on a cached run).
            with pq.ParquetFile(path) as shard:
                head = shard.read(columns=[c for c in columns if c in shard.schema_arrow.names])
        except Exception as error:  # whatever pyarrow raises, an unreadable shard is damage
            quarantine(path, store, f"unreadable shard ({type(error).__name__}: {error})")
            continue
        if state is None:
            record_checksum(path)
        yield path, head


@contextlib.contextmanager
def writing(directory: str | Path) -> Iterator[Path]:
    """The folder, created and locked for a writer."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    with folder_lock(directory):
        yield directory
