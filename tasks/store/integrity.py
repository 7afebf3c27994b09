"""Store integrity: checksum sidecars, quarantine of damaged files, and file locks.

Every store file we write gets a `<file>.sha256` sidecar, written atomically after the file.
A file whose bytes no longer match its sidecar (truncated, flipped bits) is moved to
`<store>/quarantine/` with a warning naming it, and its stage recomputes it. A file without a
sidecar (written before sidecars existed, or a crash between the two renames) is trusted if it
parses: it was itself written atomically.

Locks are `fcntl.flock` on a `.lock` file next to what they protect; they serialise "check the
store, compute what is missing, write it" between processes on one machine (and NFS clients
that honour flock). They do not cover object stores: see tasks/store/remote.py.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import struct
import time
import uuid
from pathlib import Path
from typing import Callable, Iterator

from retbench.tasks.store.files import file_sha256, write_text

log = logging.getLogger("retbench.integrity")
# `extra` of a log record that tells of a change made to the store (a file quarantined or set
# aside): the change is not made again, so the line must be said even when the attempt that
# made it is discarded (the fast path's held-back lines, flows/fast_path.py).
STORE_CHANGED = {"store_changed": True}

SIDECAR_SUFFIX = ".sha256"
QUARANTINE = "quarantine"


class StoreError(RuntimeError):
    """The store (or output directory) cannot be used; the message says why and how to fix it."""


# ---------------------------------------------------------------- checksums


def sidecar(path: str | Path) -> Path:
    return Path(f"{path}{SIDECAR_SUFFIX}")


def record_checksum(path: str | Path) -> Path:
    """Write `<path>.sha256` (atomically) holding the sha256 of the file's current bytes."""
    path = Path(path)
    return write_text(sidecar(path), f"{file_sha256(path)}  {path.name}\n")


def recorded_checksum(path: str | Path) -> str | None:
    try:
        text = sidecar(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    digest = text.split(" ", 1)[0].strip()
    return digest if len(digest) == 64 else None


def checksum_ok(path: str | Path) -> bool | None:
    """True: bytes match the sidecar; False: they do not; None: no sidecar to check against."""
    expected = recorded_checksum(path)
    if expected is None:
        return None
    try:
        return file_sha256(path) == expected
    except OSError:
        return False


def verify(path: str | Path, store: str | Path, parse: Callable[[Path], object] | None = None) -> bool:
    """Is `path` intact? A damaged file (checksum mismatch, or no sidecar and `parse` fails)
    is moved to quarantine and False is returned; a missing file is simply False."""
    path = Path(path)
    if not path.exists() and not fetched_with_sidecar(path):
        return False
    ok = checksum_ok(path)
    if ok is None and parse is not None:
        try:
            parse(path)
            ok = True
        except Exception as error:  # any parse failure of an unverified file means damage
            quarantine(path, store, f"unreadable ({type(error).__name__}: {error})")
            return False
    if ok is False:
        quarantine(path, store, "checksum mismatch (truncated or corrupted)")
        return False
    return True


def fetched_with_sidecar(path: Path) -> bool:
    """For a store on an object store: fetch a missing file, which counts as present only when
    its sidecar (uploaded after it) is there too. Always False for a local store."""
    from retbench.tasks.store.remote import store_of

    remote = store_of(path)
    return remote is not None and remote.fetch(sidecar(path)) and remote.fetch(path)


def quarantine(path: str | Path, store: str | Path, reason: str, quiet: bool = False) -> Path | None:
    """Move `path` (and its sidecar) under `<store>/quarantine/`, keeping its relative path.
    `quiet`: the caller tells it, in its own words (several files in one line)."""
    path, store = Path(path), Path(store)
    try:
        relative = path.resolve().relative_to(store.resolve())
    except ValueError:
        relative = Path(path.name)
    target = store / QUARANTINE / f"{relative}.{time.time_ns()}-{uuid.uuid4().hex[:6]}"
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(path, target)
    except FileNotFoundError:
        return None  # another process got there first
    with contextlib.suppress(FileNotFoundError):
        os.replace(sidecar(path), Path(f"{target}{SIDECAR_SUFFIX}"))
    from retbench.tasks.store.remote import removed

    # On an object store the damaged object goes too (the quarantined copy keeps the evidence),
    # so the next run does not fetch it again; the rebuilt file is uploaded in its place.
    removed(sidecar(path))
    removed(path)
    if not quiet:
        log.warning("damaged store file %s: %s; moved to %s and it will be recomputed", path, reason, target,
                    extra=STORE_CHANGED)
    return target


def parquet_readable(path: Path) -> None:
    import pyarrow.parquet as pq

    pq.read_metadata(path)


# ---------------------------------------------------------------- FAISS headers


def faiss_dimension(path: str | Path) -> int:
    """The dimension in a FAISS index file's header (fourcc, then int32 d, for every kind we write)."""
    with open(path, "rb") as handle:
        header = handle.read(8)
    if len(header) < 8:
        raise ValueError(f"{path}: too short to be a FAISS index")
    return struct.unpack("<i", header[4:8])[0]


# ---------------------------------------------------------------- locks


@contextlib.contextmanager
def file_lock(path: str | Path, shared: bool = False) -> Iterator[None]:
    """Hold an flock on `path` (created if needed): exclusive for writers, shared for readers.

    Blocks until granted. Two threads of one process each open their own descriptor, so they
    exclude each other too. Do not nest the same lock in one thread (it would wait on itself).
    """
    path = Path(path)
    if not shared:
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as error:
        if shared and error.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            yield  # a store nobody can write needs no reader lock
            return
        raise
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock, also if the process dies


def lock_for(path: str | Path) -> Path:
    """The lock file guarding one store file: `<dir>/.<name>.lock`."""
    path = Path(path)
    return path.parent / f".{path.name}.lock"


# ---------------------------------------------------------------- environment checks


def ensure_writable(directory: str | Path, what: str, create: bool = True) -> Path:
    """Fail early, with the fix, when `directory` cannot be written (read-only filesystem,
    permissions, missing parent we cannot create). Writes and removes one probe file:
    `os.access` alone says yes to root on a read-only mount. With create=False (`retbench
    check`, which leaves the disk as it found it) a missing folder is not made: the probe goes
    into its nearest existing parent, where the run would create it."""
    directory = Path(directory)
    try:
        if create:
            directory.mkdir(parents=True, exist_ok=True)
        probed = directory if create else next((p for p in (directory, *directory.parents) if p.exists()), directory)
        probe = probed / f".write-probe-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        with open(probe, "wb") as handle:
            handle.write(b"ok")
            handle.flush()
            os.fsync(handle.fileno())
        probe.unlink()
    except OSError as error:
        reason = {errno.EROFS: "read-only filesystem", errno.EACCES: "permission denied",
                  errno.EPERM: "operation not permitted", errno.ENOSPC: "no space left on device"}.get(error.errno, error.strerror)
        option = "--store-dir (or store_dir in the spec)" if what == "store" else "--output-dir (or output_dir in the spec)"
        fix = "free space on that device" if error.errno == errno.ENOSPC else "fix the mount or permissions"
        raise StoreError(
            f"{what} directory {directory} is not writable ({reason}); {fix}, or point {option} at a writable folder"
        ) from error
    return directory
