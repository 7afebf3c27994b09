"""Atomic file writes and content hashing for the store and the output directory.

Every file the pipeline writes goes through here, so a reader never sees a
half-written file: data goes to a temporary file in the same folder, is flushed
and fsynced, then renamed over the target.
"""
from __future__ import annotations

import errno
import functools
import hashlib
import json
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.parquet as pq

from retbench.tasks.store.cache_dir import user_cache_dir
from retbench.tasks.store.remote import uploaded


def stable_hash(*parts: Any) -> str:
    """sha256 hex of a canonical JSON rendering of `parts` (dict key order does not matter)."""
    payload = json.dumps(parts, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def file_sha256(path: str | Path) -> str:
    """sha256 of a file's bytes, remembered per (path, size, mtime, ctime, inode): for this
    process, and for files of 16 MB and more (model weights, hashed into every fingerprint)
    also across runs, in the user's cache folder. A rewritten file changes its mtime and
    ctime (ctime cannot be set back), so it is hashed again."""
    stat = os.stat(path)
    return _file_sha256(str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino)


_REMEMBERED_FROM = 16 << 20  # smaller files hash in a few ms: not worth a file of their own


@functools.lru_cache(maxsize=256)
def _file_sha256(path: str, size: int, mtime_ns: int, ctime_ns: int, inode: int) -> str:
    identity = [path, size, mtime_ns, ctime_ns, inode]
    memo = _hash_memo(path) if size >= _REMEMBERED_FROM else None
    if memo is not None:
        try:
            kept = json.loads(memo.read_text(encoding="utf-8"))
            if kept.get("identity") == identity:
                return kept["sha256"]
        except (OSError, ValueError, AttributeError, KeyError):
            pass  # absent or damaged: hash the file
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    if memo is not None:
        try:  # best effort: a read-only cache folder only costs the hashing next time
            text = json.dumps({"identity": identity, "sha256": digest.hexdigest()})
            atomic_write(memo, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
        except OSError:
            pass
    return digest.hexdigest()


def _hash_memo(path: str) -> Path:
    return user_cache_dir() / "file-sha256" / f"{hashlib.sha256(path.encode()).hexdigest()[:24]}.json"


# Disk faults a write can meet, as one line each: what happened, and what to do about it.
DISK_FAULTS = {
    errno.ENOSPC: ("no space left on the device", "free space or move {folder}"),
    errno.EDQUOT: ("disk quota exceeded", "free space within your quota or move {folder}"),
    errno.EROFS: ("read-only file system", "remount it read-write or move {folder} to a writable disk"),
    errno.EACCES: ("permission denied", "give this user write access to {parent} or move {folder}"),
    errno.EPERM: ("operation not permitted", "give this user write access to {parent} or move {folder}"),
}
# Those only a write meets (a permission error can be a read's): a bare one is worded as a write's.
WRITE_FAULTS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)
# Libraries that wrap the OSError in their own error (FAISS's RuntimeError) keep its text.
_STRERRORS = {os.strerror(code): code for code in DISK_FAULTS}


class DiskFault(OSError):
    """A write that failed on a full, read-only or forbidden disk, said in one line (its strerror)."""


def free_space(path: str | Path) -> str:
    """"1.2 GB free" on the device of `path` (or of its nearest existing parent)."""
    path = Path(path)
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    try:
        return f"{human_bytes(shutil.disk_usage(existing).free)} free" if existing is not None else "free space unknown"
    except OSError:
        return "free space unknown"


def human_bytes(n: int) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"


def disk_fault(code: int, path: str | Path, kept: str, folder: str) -> DiskFault:
    """The one way a disk fault is told: the file being written, the free space there, what
    survived, what to do."""
    what, fix = DISK_FAULTS[code]
    fix = fix.format(folder=folder, parent=Path(path).parent)
    return DiskFault(code, f"{what} while writing {path} ({free_space(Path(path).parent)}); {kept}: {fix}, then rerun")


def disk_full(path: str | Path, kept: str, folder: str) -> DiskFault:
    return disk_fault(errno.ENOSPC, path, kept, folder)


def disk_fault_code(error: BaseException) -> int | None:
    """The disk fault behind `error` (an OSError's errno, or the text of a library's own error), else None."""
    if isinstance(error, OSError):
        return error.errno if error.errno in DISK_FAULTS else None
    text = str(error)
    return next((code for strerror, code in _STRERRORS.items() if strerror in text), None)


def _injected_fault(path: Path) -> None:
    """Test hook: RETBENCH_FAIL_WRITE=N:CODE[:TEXT] makes this process's Nth atomic write (of a path
    containing TEXT) fail with that errno (ENOSPC, EROFS, EACCES, EPERM, EDQUOT), as a real disk would."""
    hook = os.environ.get("RETBENCH_FAIL_WRITE")
    if not hook:
        return
    count, name, *text = hook.split(":", 2)
    if text and text[0] not in str(path):
        return
    with _writes_lock:
        if _writes[1] != hook:  # another hook (a test's next case): count from the start
            _writes[:] = [0, hook]
        _writes[0] += 1
        if _writes[0] != int(count):
            return
    code = getattr(errno, name)
    raise OSError(code, os.strerror(code), str(path))


_writes: list = [0, None]  # atomic writes counted for the hook, and the hook counted for
_writes_lock = threading.Lock()


def atomic_write(path: str | Path, write: Callable[[str], None]) -> Path:
    """Call `write(tmp_path)`, fsync the result, then rename it to `path`."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as error:
        if error.errno in DISK_FAULTS:
            raise disk_fault(error.errno, path, _KEPT, "the store / output directory") from error
        raise
    # mkstemp creates 0600; a plain open() would give 0666 minus the umask, which
    # is what a reader of the output (a dashboard user, a teammate) expects.
    os.fchmod(fd, 0o666 & ~current_umask())
    os.close(fd)
    try:
        _injected_fault(path)
        write(tmp)
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as error:
        Path(tmp).unlink(missing_ok=True)
        code = disk_fault_code(error) if isinstance(error, Exception) else None
        if code is not None and not isinstance(error, DiskFault):
            # The target (if any) is untouched: the half-written temp file is gone.
            raise disk_fault(code, path, _KEPT, "the store / output directory") from error
        raise
    _fsync_dir(path.parent)
    _upload_if_in_object_store(path)
    return path


_KEPT = "nothing stored was changed and the work done so far is kept"


def _upload_if_in_object_store(path: Path) -> None:
    # Every store file is written here, so this is where an object store gets it: one PUT
    # of the finished file (tasks/store/remote.py; nothing happens for a local store).
    try:
        uploaded(path)
    except BaseException:
        # Not in the bucket means not stored: a scratch copy alone would hide the miss from
        # this machine's next run, which would then never upload it.
        path.unlink(missing_ok=True)
        raise


def current_umask() -> int:
    """The process umask, read without changing it (os.umask can only set it, which
    would race with threads creating files)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _fsync_dir(directory: Path) -> None:
    # The rename itself is only durable once the directory entry is flushed.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_bytes(path: str | Path, data: bytes) -> Path:
    def write(tmp: str) -> None:
        with open(tmp, "wb") as handle:
            handle.write(data)

    return atomic_write(path, write)


def write_text(path: str | Path, text: str) -> Path:
    return write_bytes(path, text.encode("utf-8"))


def write_json(path: str | Path, obj: Any) -> Path:
    return write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, sort_keys=True, default=str) + "\n")


def write_parquet(table: pa.Table | Any, path: str | Path, compression: str = "zstd") -> Path:
    """Write a pyarrow Table or a polars DataFrame atomically as Parquet."""
    if not isinstance(table, pa.Table):
        table = table.to_arrow()
    return atomic_write(path, lambda tmp: pq.write_table(table, tmp, compression=compression))
