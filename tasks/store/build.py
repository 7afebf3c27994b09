"""The one routine every stage uses to put something in the store: find it, or build it once.

    lock -> verify (or quarantine) -> build into a temp file -> rename -> checksum sidecar -> metadata last

`build_once` is that sequence; `write_checked` is its unlocked middle part (temp file, rename,
checksum) for writers that already hold a broader lock, such as the embedding cache, whose
folder lock covers many shards. Every stage returns a `StageResult` (or a subclass adding
typed facts), so the manifest and the flow read the same field names from every stage.
"""
from __future__ import annotations

import json
import shutil
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Callable

from retbench.tasks.store.files import atomic_write, write_json
from retbench.tasks.store.integrity import file_lock, lock_for, record_checksum, sidecar, verify
from retbench.tasks.store.remote import fetched, uploaded


@dataclass(frozen=True, kw_only=True)
class StageResult:
    """What a stage put in (or found in) the store."""

    path: str  # the file (or folder) in the store
    key: str  # the content key that addresses it
    computed: bool  # False: it was already there and intact
    seconds: float

    def facts(self) -> dict:
        """The stage's own facts (the fields a subclass adds), as plain values."""
        common = {f.name for f in fields(StageResult)}
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in common}


class WorkNeeded(Exception):
    """Raised under `cached_only()` where the run would compute something rather than read it."""


_only_cached: list[bool] = []  # a module global, not a context variable: it must hold in every thread


@contextmanager
def cached_only():
    """Within: `need_work(what)` raises WorkNeeded. `retbench run` first tries a run this way,
    in its own process, and starts the orchestrator only when something has to be computed
    (flows/fast_path.py): a rerun with every output in the store costs its reads, not Prefect's start."""
    _only_cached.append(True)
    try:
        yield
    finally:
        _only_cached.pop()


def need_work(what: str) -> None:
    """Called before a model runs, an index is built or anything else lands in the store."""
    if _only_cached:
        raise WorkNeeded(what)


def metadata_path(path: str | Path) -> Path:
    """`<file>.json`: facts about how a store file was made, written after the file itself."""
    return Path(f"{path}.json")


def read_metadata(path: str | Path) -> dict:
    try:
        return json.loads(metadata_path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def write_checked(path: str | Path, write: Callable[[str], object]) -> Path:
    """`write(tmp)` fills a temporary file next to `path`; it is fsynced, renamed over `path`,
    and its checksum sidecar is written. Call with the lock that guards `path` held."""
    path = atomic_write(path, write)
    record_checksum(path)
    return path


@dataclass(frozen=True)
class Built:
    """build_once's answer: where, whether this call built it, how long it took, its metadata."""

    path: Path
    computed: bool
    seconds: float
    metadata: dict


def build_once(
    store: str | Path,
    path: str | Path,
    build: Callable[[str], dict | None],
    *,
    parse: Callable[[Path], object] | None = None,
    force: bool = False,
    lock: bool = True,
    work: bool = True,
) -> Built:
    """Make sure `path` holds an intact artifact, building it at most once across processes.

    - `build(tmp)` writes the artifact to the temporary path `tmp` and may return a dict of
      metadata, stored as `<path>.json` after the artifact and its checksum (so a reused file
      still reports, say, how long it took to build);
    - an existing file is checked against its checksum sidecar (or, with no sidecar, by
      `parse`); a damaged one is quarantined and rebuilt;
    - `force` rebuilds even an intact file;
    - `lock=False` when the caller already holds a lock covering `path`;
    - `work=False` for what every run makes as part of its report (a figure): not refused by
      `cached_only()`, so a run with nothing else to do still skips the orchestrator.
    """
    path = Path(path)
    started = time.perf_counter()
    with file_lock(lock_for(path)) if lock else _no_lock():
        here = path.exists()
        computed = force or not verify(path, store, parse)
        if not computed and not here:
            fetched(metadata_path(path))  # the file came from an object store: its metadata too
        metadata = None
        if computed:
            if work and not force:  # force: a deliberate rewrite (a run's own outputs), not missing work
                need_work(f"build {path}")
            holder: dict = {}
            write_checked(path, lambda tmp: holder.setdefault("metadata", build(tmp)))
            metadata = holder.get("metadata")
            if metadata is not None:  # last: its presence means the rest is done
                write_checked(metadata_path(path), lambda tmp: write_json(tmp, metadata))
    return Built(path=path, computed=computed, seconds=time.perf_counter() - started,
                 metadata=metadata if metadata is not None else read_metadata(path))


def build_folder_once(
    store: str | Path,
    folder: str | Path,
    files: tuple[str, ...],
    build: Callable[[Path], None],
    *,
    parse: Callable[[Path], object] | None = None,
    force: bool = False,
    work: bool = True,
) -> Built:
    """`build_once` for an artifact made of several files: `build(tmp_folder)` writes `files`
    (the last one named is the folder's metadata, e.g. dataset.json) into a temporary folder,
    which gets checksums and is renamed into place whole. A folder with a damaged or missing
    file is quarantined and rebuilt. `work=False`: not refused by `cached_only()` (as build_once)."""
    folder = Path(folder)
    started = time.perf_counter()
    with file_lock(lock_for(folder)):
        intact = all(verify(folder / name, store, None if name.endswith(".json") else parse) for name in files)
        computed = force or not intact
        if computed:
            if work and not force:
                need_work(f"build {folder}")
            tmp = folder.parent / f".{folder.name}.{uuid.uuid4().hex[:8]}.tmp"
            try:
                build(tmp)
                for name in files:
                    record_checksum(tmp / name)
                if folder.exists():
                    # Damaged files were quarantined by `verify`; the rest is rebuilt identically.
                    shutil.rmtree(folder)
                tmp.replace(folder)
                for name in files:  # an object store gets each file, then its sidecar; the metadata last
                    uploaded(folder / name)
                    uploaded(sidecar(folder / name))
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    return Built(path=folder, computed=computed, seconds=time.perf_counter() - started, metadata={})


class _no_lock:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False
