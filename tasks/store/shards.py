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
from typing import Callable, Iterator

import pyarrow as pa
import pyarrow.ipc  # noqa: F401  (pa.ipc)
import pyarrow.parquet as pq

from retbench.tasks.store.build import write_checked
from retbench.tasks.store.files import DISK_FAULTS, DiskFault, disk_fault
from retbench.tasks.store.integrity import file_lock, quarantine, record_checksum, recorded_checksum, sidecar, verify
from retbench.tasks.store.remote import removed, store_of, synced


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


def set_aside(path: Path, store: str | Path, reason: str) -> Path | None:
    """An intact file that does not belong in its folder (a shard or journal of another vector
    dimension) moved to quarantine, sidecar and all; the caller tells the user in one line."""
    return quarantine(path, store, reason, quiet=True)


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
        unrecorded = recorded_checksum(path) is None
        if not verify(path, store):  # a checksum mismatch is quarantined there
            continue
        try:
            # ParquetFile, not read_table: the latter imports pyarrow.dataset (a second on a cached run).
            with pq.ParquetFile(path) as shard:
                head = shard.read(columns=[c for c in columns if c in shard.schema_arrow.names])
        except Exception as error:  # whatever pyarrow raises, an unreadable shard is damage
            quarantine(path, store, f"unreadable shard ({type(error).__name__}: {error})")
            continue
        if unrecorded:
            record_checksum(path)
        yield path, head


@contextlib.contextmanager
def writing(directory: str | Path) -> Iterator[Path]:
    """The folder, created and locked for a writer."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    with folder_lock(directory):
        yield directory


# ---- pending work: a planned part of a cache fill, claimed by one worker at a time
# (tasks/stages/embed_shards.py): the planner writes each part's inputs as a file under
# `pending/`, a worker holds the part's lock while it computes and removes the file when done.


def pending_dir(directory: str | Path) -> Path:
    return Path(directory) / "pending"


def pending_paths(directory: str | Path, bucket: bool = False) -> list[Path]:
    """The parts in `pending/`. `bucket=True` (call with the folder lock held), on an object
    store: the parts the bucket holds (one listing of `pending/`), so a part planned on another
    machine is seen (and fetched when read), and a local copy of one that a worker elsewhere
    finished (deleted from the bucket) is dropped rather than handed out again. Dropping needs no
    grace period: parts are written and removed under the folder lock, so none is half-uploaded."""
    folder = pending_dir(directory)
    store = store_of(folder) if bucket else None
    if store is None:
        return sorted(folder.glob("*.parquet"))
    listed = store.listing(folder)
    for path in folder.glob("*.parquet"):
        if path.name not in listed or sidecar(path).name not in listed:
            sidecar(path).unlink(missing_ok=True)
            path.unlink(missing_ok=True)
    return sorted(folder / name for name in listed if name.endswith(".parquet") and f"{name}.sha256" in listed)


def write_pending(directory: str | Path, name: str, table: pa.Table) -> Path:
    """A part's inputs, complete with its checksum before this returns. Call with the folder lock held."""
    return write_checked(pending_dir(directory) / f"{name}.parquet",
                         lambda tmp: pq.write_table(table, tmp, compression="zstd"))


def read_pending(path: Path, store: str | Path) -> pa.Table | None:
    """The part's inputs, or None when it is done (removed) or damaged (quarantined: the next
    plan finds its rows missing and plans them again). On an object store a worker of another
    machine fetches the part (planned there); a part gone from the bucket is done."""
    if not verify(path, store):  # gone (done), or damaged and quarantined there
        return None
    try:
        return pq.read_table(path)
    except FileNotFoundError:
        return None
    except Exception as error:  # whatever pyarrow raises, an unreadable file is damage
        quarantine(path, store, f"unreadable pending work ({type(error).__name__}: {error})")
        return None


def work_lock(path: str | Path):
    """Held by the one worker computing a pending part: a second run's worker waits, then finds it done."""
    path = Path(path)
    return file_lock(path.parent / f".{path.name}.lock")


def remove_pending(path: Path) -> None:
    """A finished part's file, its checksum and its lock file (call with its work lock held: part
    names carry their plan's time stamp and are never reused, so a waiter on the old lock finds
    the part gone and nobody opens that lock again)."""
    remove_shard(path)
    drop_journal(path)
    (path.parent / f".{path.name}.lock").unlink(missing_ok=True)


# ---- a part's journal: its computed rows, appended batch by batch (one write, no rename, no
# checksum, no lock: the part's work lock covers it), so per-batch cost stays small while a
# killed worker still loses only its in-flight batch. Finished (or recovered by the next
# worker), the journal becomes one checked shard.
# On an object store each batch is also uploaded as one object under `pending/<part>.journal/`:
# the part's retry may run on another machine, whose scratch folder never saw the journal
# (`fetch_journal` makes the uploaded batches its journal). The objects go with the journal.


_ROW_GROUP = 8192


def journal_path(part: Path) -> Path:
    return Path(part).with_suffix(".arrows")


@contextlib.contextmanager
def journal(part: Path, schema: pa.Schema) -> Iterator[Callable[[pa.RecordBatch], None]]:
    """An append function for the part's journal (a fresh Arrow IPC stream); each batch is
    flushed to the kernel before it returns, so a killed process keeps it. A full disk is told
    as the store's other writes tell it (tasks/store/files.py: atomic_write)."""
    path = journal_path(part)
    store = store_of(part)
    uploaded = [0]
    try:
        with open(path, "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
            def append(batch: pa.RecordBatch) -> None:
                writer.write_batch(batch)
                sink.flush()
                if store is not None:  # in the bucket before the batch counts as kept
                    store.put_bytes(journal_folder(part) / f"{uploaded[0]:06d}.arrows", _stream_bytes(batch))
                    uploaded[0] += 1

            yield append
    except OSError as error:
        if error.errno not in DISK_FAULTS or isinstance(error, DiskFault):
            raise
        raise disk_fault(error.errno, path, "the batches embedded before it are kept (the next run reuses them) and "
                                            "nothing else stored was changed", "the store") from error


def journal_folder(part: Path) -> Path:
    """Where an object store holds a part's journal, one object per batch."""
    return Path(part).with_suffix(".journal")


def _stream_bytes(batch: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def fetch_journal(part: Path) -> int:
    """On an object store, when this scratch folder has no journal for the part: the batches a
    worker of another machine uploaded before it was killed become this one's journal (the part's
    recovery then moves them into the cache). Returns the batches fetched. Call with the part's
    work lock held, or before anyone here writes its journal."""
    store = store_of(part)
    path = journal_path(part)
    if store is None or path.exists():
        return 0
    folder = journal_folder(part)
    batches: list[pa.RecordBatch] = []
    try:
        for name in sorted(n for n in store.listing(folder) if n.endswith(".arrows")):
            if store.fetch(folder / name):
                with pa.ipc.open_stream(pa.memory_map(str(folder / name))) as reader:
                    batches += [b for b in reader if not batches or b.schema.equals(batches[0].schema)]
        if batches:
            tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
            with open(tmp, "wb") as sink, pa.ipc.new_stream(sink, batches[0].schema) as writer:
                for batch in batches:
                    writer.write_batch(batch)
            tmp.replace(path)
    finally:
        for local in folder.glob("*.arrows*"):  # the fetched copies: the journal holds them now
            local.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            folder.rmdir()
    return len(batches)


def journal_batches(part: Path) -> list[pa.RecordBatch]:
    """The complete batches of a part's journal; a torn last batch (killed mid-write) is dropped."""
    path = journal_path(part)
    if not path.exists():
        return []
    batches = []
    try:
        with pa.ipc.open_stream(pa.memory_map(str(path))) as reader:
            for batch in reader:
                batches.append(batch)
    except (pa.ArrowInvalid, OSError, EOFError):
        pass  # the tail a killed writer left; everything before it is whole
    return batches


def journal_keys(part: Path) -> list[str]:
    """The keys of the complete batches in a part's journal: rows a stopped or killed run kept."""
    return [key for batch in journal_batches(part) for key in batch.column("key").to_pylist()]


def kept_in_journals(directory: str | Path) -> set[str]:
    """Keys computed by stopped or killed runs, kept in the journals of the parts in `pending/`
    and not yet moved into the cache (the next run that claims a part moves them)."""
    return {key for part in pending_paths(directory) for key in journal_keys(part)}


def shard_from_journal(directory: str | Path, part: Path, skip: set[str] = frozenset()) -> list[str]:
    """The journal's rows, less those whose key is in `skip` (already in a shard: a recovery
    killed after its shard was written and before the journal went), as one shard written batch
    by batch and checked; then the journal goes. Returns the keys written. Call with the folder lock held."""
    import pyarrow.compute as pc

    batches = journal_batches(part)
    if skip:
        wanted = pa.array(sorted(skip), pa.string())
        batches = [b.filter(pc.invert(pc.is_in(b.column("key"), value_set=wanted))) for b in batches]
    batches = [b for b in batches if b.num_rows]
    if batches:
        def write(tmp: str) -> None:
            with pq.ParquetWriter(tmp, batches[0].schema, compression="zstd") as writer:
                group: list[pa.RecordBatch] = []
                for batch in batches + [None]:  # row groups of ~8k rows, not one per small batch
                    if group and (batch is None or sum(b.num_rows for b in group) >= _ROW_GROUP):
                        writer.write_table(pa.Table.from_batches(group))
                        group = []
                    if batch is not None:
                        group.append(batch)

        name = f"shard-{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.parquet"
        write_checked(Path(directory) / name, write)
    drop_journal(part)
    return [key for b in batches for key in b.column("key").to_pylist()]


def journal_schema(part: Path) -> pa.Schema | None:
    """The schema a part's journal was opened with (None: no journal, or not even its header)."""
    try:
        with pa.ipc.open_stream(pa.memory_map(str(journal_path(part)))) as reader:
            return reader.schema
    except (pa.ArrowInvalid, OSError, EOFError):
        return None


def drop_journal(part: Path) -> None:
    journal_path(part).unlink(missing_ok=True)
    store = store_of(part)
    if store is not None:  # its batches' objects (one listing of the part's journal folder)
        folder = journal_folder(part)
        for name in store.listing(folder):
            store.delete(folder / name)
