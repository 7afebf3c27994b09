"""An output folder that always describes exactly one run: a run writes its tables, report and
manifest into a staging folder inside it and publishes them together at its end; a lock keeps a
second live run out.

    <output_dir>/.run.lock           flock'd by the live run; holds its pid, spec and start time
    <output_dir>/.staging-<run id>/  the run's files, as they are written
    <output_dir>/.publishing.json    the commit point: the run id, the files to move in and to remove
    <output_dir>/.published.json     the folder's runs: each file's sha256 and the run that wrote it

Publishing writes `.publishing.json`, moves each staged file into place (a rename within one file
system), writes `.published.json` and removes `.publishing.json`. A stop or crash before the
commit point leaves the previous run's files untouched; after it, the next start (or
`retbench.load`) finishes the moves. The lock is an flock, so it ends with its process: a killed
run never leaves a stale lock behind.
"""
from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
import re
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pyarrow.parquet as pq

from retbench.tasks.store.files import DiskFault, _fsync_dir, atomic_write, file_sha256, write_json
from retbench.tasks.store.integrity import StoreError

LOCK = ".run.lock"
PUBLISHING = ".publishing.json"
PUBLISHED = ".published.json"
STAGING_PREFIX = ".staging-"
RUN_ID_KEY = b"retbench.run_id"  # the Parquet footer's key-value metadata every published table carries


class OutputFolderBusy(StoreError):
    """Another live run is writing the same output folder."""


@contextmanager
def live_run(output_dir: str | Path, spec_name: str, run_id: str) -> Iterator[Path]:
    """Hold the output folder for this run (refused at once if another live run holds it); yields
    this run's empty staging folder, after finishing an interrupted publication and clearing the
    staging folders of dead runs."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(output_dir / LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OutputFolderBusy(f"{output_dir} is being written by another run ({_holder(fd)}); wait for it to "
                                   f"end, or give this run another output_dir (--output-dir)") from None
        started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        about = json.dumps({"pid": os.getpid(), "spec": spec_name, "run_id": run_id, "started": started})
        try:  # a courtesy to the run refused: on a full disk, the lock holds without it
            os.ftruncate(fd, 0)
            os.pwrite(fd, about.encode(), 0)
        except OSError:
            pass
        finish_publishing(output_dir)
        for abandoned in output_dir.glob(f"{STAGING_PREFIX}*"):  # a killed run's: we hold the lock, it is dead
            shutil.rmtree(abandoned, ignore_errors=True)
        staging = output_dir / f"{STAGING_PREFIX}{run_id}"
        staging.mkdir()
        try:
            yield staging
        except DiskFault as fault:  # said of the output folder: the staging folder is gone when it is read
            # the folder to give access to is one the reader can find: the output folder itself,
            # not a subfolder that exists only in staging until the run publishes
            text = re.sub(rf"(write access to ){re.escape(str(staging))}\S*", lambda m: m[1] + str(output_dir),
                          fault.strerror)
            raise DiskFault(fault.errno, text.replace(str(staging), str(output_dir))) from fault
        finally:
            _end_the_run(output_dir, staging)
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
    finally:
        os.close(fd)  # releases the flock


def _end_the_run(output_dir: Path, staging: Path) -> None:
    """A publication stopped after its commit point (a Ctrl-C between two moves) is finished now;
    else the staging folder holds nothing published (moved out) or an abandoned run's files."""
    if (output_dir / PUBLISHING).exists():
        try:
            finish_publishing(output_dir)
        except Exception:  # noqa: BLE001  (a full disk, say: the next start or a reader finishes it)
            return
    shutil.rmtree(staging, ignore_errors=True)


def _holder(fd: int) -> str:
    try:
        about = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except ValueError:
        about = {}
    if not about:
        return "it has just started"
    return f"pid {about.get('pid')}, spec {about.get('spec')!r}, started {about.get('started')}"


def stamp_run_id(path: str | Path, run_id: str) -> None:
    """Write `run_id` into a Parquet file's footer metadata (a table copied from the store's
    output memo was written by an earlier run: the stamp says which run published it here)."""
    table = pq.read_table(path)
    metadata = dict(table.schema.metadata or {}) | {RUN_ID_KEY: run_id.encode()}
    stamped = table.replace_schema_metadata(metadata)
    atomic_write(path, lambda tmp: pq.write_table(stamped, tmp, compression="zstd"))


def run_id_of(path: str | Path) -> str | None:
    """The run id a published Parquet table carries (None: written before publishing existed)."""
    metadata = pq.read_schema(path).metadata or {}
    value = metadata.get(RUN_ID_KEY)
    return value.decode() if value is not None else None


def publish(staging: Path, output_dir: str | Path, run_id: str, replaces_all: bool) -> list[str]:
    """Move every file of `staging` into `output_dir` as one publication; returns their paths
    relative to the folder. `replaces_all` (a full run): the files the previous runs published
    and this one did not write are removed; a partial run leaves them (its manifest names them)."""
    output_dir = Path(output_dir)
    files = sorted(str(p.relative_to(staging)) for p in staging.rglob("*") if p.is_file() and not p.name.endswith(".tmp"))
    for name in files:
        if name.endswith(".parquet"):
            stamp_run_id(staging / name, run_id)
    entries = {name: {"sha256": file_sha256(staging / name), "run_id": run_id} for name in files}
    previous = published(output_dir)
    leftover = {name: entry for name, entry in previous.get("files", {}).items() if name not in entries}
    commit = {"run_id": run_id, "staging": staging.name, "files": entries,
              "remove": sorted(leftover) if replaces_all else [],
              "keep": {} if replaces_all else leftover}
    write_json(output_dir / PUBLISHING, commit)
    finish_publishing(output_dir)
    return files


def finish_publishing(output_dir: str | Path) -> bool:
    """Finish a publication a stop or crash interrupted after its commit point (idempotent);
    True when there was one."""
    output_dir = Path(output_dir)
    commit_path = output_dir / PUBLISHING
    try:
        commit = json.loads(commit_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return False
    except ValueError:  # written atomically, so never half: an unreadable one is not ours to act on
        raise StoreError(f"{commit_path}: not valid JSON; remove it and rerun the benchmark") from None
    staging = output_dir / commit["staging"]
    for name in commit["files"]:
        source, target = staging / name, output_dir / name
        if source.exists():  # else moved before the interruption
            _move(source, target)
    for name in commit["remove"]:
        (output_dir / name).unlink(missing_ok=True)
    for folder in {(output_dir / name).parent for name in commit["files"]} - {output_dir}:
        _fsync_dir(folder)  # the renames into subfolders (ann_sweep/) survive a power cut; the top one below
    write_json(output_dir / PUBLISHED, {"run_id": commit["run_id"], "files": commit["keep"] | commit["files"]})
    commit_path.unlink()
    shutil.rmtree(staging, ignore_errors=True)
    return True


def _move(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(source, target)


def finish_if_abandoned(output_dir: str | Path) -> bool:
    """For a reader (`retbench.load`): finish a publication whose run died after its commit point,
    unless a live run holds the folder (it finishes its own); True when one was finished."""
    output_dir = Path(output_dir)
    if not (output_dir / PUBLISHING).exists():
        return False
    fd = os.open(output_dir / LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    else:
        return finish_publishing(output_dir)
    finally:
        os.close(fd)


def published(output_dir: str | Path) -> dict:
    """The folder's `.published.json` ({} when nothing was published here)."""
    try:
        return json.loads((Path(output_dir) / PUBLISHED).read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return {}


def rebased(path: str, staging: Path, output_dir: str | Path) -> str:
    """Where a staged file's path lands once published."""
    try:
        return str(Path(output_dir) / Path(path).relative_to(staging))
    except ValueError:
        return path
