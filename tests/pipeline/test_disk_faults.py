"""Disk faults in one line (issue 35, item 3): a write into the store or the output folder that
meets a full disk, a quota, a read-only mount or a lost permission ends the run with one
`retbench: ...` line naming the file, the free space there and what to do (exit 2); the work done
is kept and the rerun completes, embedding only what was missing. The faults are injected at the
atomic writer (RETBENCH_FAIL_WRITE, tasks/store/files.py); the refusal of a run too big for its
store's free space is tried on a real 1 MB tmpfs."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import polars as pl
import pytest

from retbench.flows.errors import expected_failure, one_line
from retbench.support import crash_worker
from retbench.support.crash_runs import check_rerun, provider_folders
from retbench.support.crash_worker import TABLES, cache_rows
from retbench.tasks.store.files import DiskFault
from tests.pipeline.test_cli_errors import retbench
from tests.pipeline.test_environment_faults import _can_mount

KEPT = "nothing stored was changed and the work done so far is kept"
# (the hook's errno, the part of the path of the write that fails, its count among those writes,
# the line's start, the line's fix); the 8th write under embeddings/ is the second provider's first part, after the
# first provider's shard
CASES = [
    ("ENOSPC", "/embeddings/", 8, "no space left on the device", "free space or move the store / output directory"),
    ("EDQUOT", "/indexes/", 1, "disk quota exceeded", "free space within your quota or move the store / output directory"),
    ("EROFS", "/runs/", 2, "read-only file system",
     "remount it read-write or move the store / output directory to a writable disk"),
    ("EACCES", "/.staging-", 4, "permission denied",  # said of the output folder, not of the staging folder
     r"give this user write access to (?P<parent>\S+) or move the store / output directory"),
]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    base = tmp_path_factory.mktemp("reference")
    crash_worker.run(base / "store", base / "out")
    tables = {name: pl.read_parquet(base / "out" / f"{name}.parquet") for name in TABLES}
    needed = {name: cache_rows(folder)[1] for name, folder in provider_folders(base / "store").items()}
    return tables, needed


def test_a_fault_at_each_kind_of_write_is_one_line_keeps_the_work_and_the_rerun_completes(tmp_path, monkeypatch,
                                                                                          reference):
    store, out = tmp_path / "store", tmp_path / "out"
    kept_after = []
    for code, part, count, what, fix in CASES:
        monkeypatch.setenv("RETBENCH_FAIL_WRITE", f"{count}:{code}:{part}")
        with pytest.raises(DiskFault) as caught:
            crash_worker.run(store, out)
        line = one_line(expected_failure(caught.value))
        found = re.fullmatch(rf"retbench: {what} while writing (?P<path>\S+) \((?P<free>[\d.]+ (kB|MB|GB)|\d+ bytes) "
                             rf"free\); {KEPT}: {fix}, then rerun", line)
        assert found, line
        path = Path(found["path"])
        # a staged file is said of its place in the output folder, and the folder to give access
        # to is the output folder (its subfolder exists only in staging until the run publishes)
        said_of_output = out in path.parents and part not in str(path)
        assert (part in str(path) if part != "/.staging-" else said_of_output), line
        if "parent" in found.groupdict():
            assert found["parent"] == str(out) and out.is_dir(), line
        else:
            assert path.parent.is_dir(), line
        assert not list(store.rglob("*.tmp")) and not list(out.rglob("*.tmp")), "a half-written temp file was left"
        # Nothing of the stopped run is published: the folder has no tables, and no staging folder is left.
        assert not list(out.glob("*.parquet")) and not list(out.glob(".staging-*"))
        kept_after.append(sum(cache_rows(folder)[0] for folder in provider_folders(store).values() if folder.exists()))
    # The embedding done before the first fault is kept (the next runs do not embed it again).
    assert 0 < kept_after[0] <= kept_after[-1]
    monkeypatch.delenv("RETBENCH_FAIL_WRITE")
    check_rerun(store, out, reference)  # embeds exactly the missing texts; tables equal a clean run's


def test_retbench_run_on_a_full_disk_ends_in_one_line_with_exit_2_and_the_rerun_completes(tmp_path, monkeypatch):
    spec = crash_worker.write_spec(tmp_path, tmp_path / "store", tmp_path / "out")
    monkeypatch.setenv("RETBENCH_FAIL_WRITE", "5:ENOSPC:/embeddings/")
    failed = retbench("run", spec, cwd=tmp_path, prefect_home=tmp_path / "prefect")
    assert failed.returncode == 2, failed.stderr[-3000:]
    assert "Traceback" not in failed.stderr and failed.stderr.count("retbench: ") == 1, failed.stderr[-3000:]
    assert re.fullmatch(rf"retbench: no space left on the device while writing {re.escape(str(tmp_path / 'store'))}"
                        rf"/embeddings/\S+ \([\d.]+ [kMG]B free\); {KEPT}: free space or move the store / output "
                        r"directory, then rerun", failed.stderr.splitlines()[-1]), failed.stderr.splitlines()[-1]
    monkeypatch.delenv("RETBENCH_FAIL_WRITE")
    rerun = retbench("run", spec, cwd=tmp_path, prefect_home=tmp_path / "prefect")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert (tmp_path / "out" / "summary.parquet").is_file()


@pytest.fixture
def small_tmpfs(tmp_path):
    if not _can_mount():
        pytest.skip("needs root and mount for a real small filesystem")
    point = tmp_path / "mnt"
    point.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(point)], capture_output=True).returncode:
        pytest.skip("this sandbox does not allow mounting a tmpfs")
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


def test_a_store_too_small_for_the_run_is_refused_before_it_starts(tmp_path, small_tmpfs):
    store = small_tmpfs / "store"
    spec = crash_worker.write_spec(tmp_path, store, tmp_path / "out")
    refused = retbench("run", spec, cwd=tmp_path, prefect_home=tmp_path / "prefect")
    assert refused.returncode == 2
    # Before any stage: nothing embedded, no Prefect output, the one line alone.
    found = re.fullmatch(rf"retbench: store_dir {re.escape(str(store))}: (?P<free>[\d.]+ (?:[kMG]B|bytes)) free, and this run would "
                         r"add about (?P<needed>[\d.]+ [kM]B) to it \(the vectors of 1,706 texts to embed and the indexes "
                         r"to build\); free space on that disk or point --store-dir \(or store_dir in the spec\) at a "
                         r"larger one \(`retbench check` shows the estimate\)\n", refused.stderr)
    assert found, refused.stderr
    free, needed = size(found["free"]), size(found["needed"])
    assert free <= 1.05e6 and 1.2e6 < needed < 4e6  # `retbench check` says ~1.8 MB for the sample's two providers
    assert not (store / "embeddings").exists()


def size(said: str) -> float:
    number, unit = said.split()
    return float(number) * {"bytes": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9}[unit]
