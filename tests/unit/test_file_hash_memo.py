"""file_sha256 remembers the hash of a large file across processes (model weights are hashed
into every fingerprint), and never serves it once the file was rewritten."""
import hashlib
import json
import os

from retbench.tasks.store import files


def test_a_large_file_hash_is_remembered_across_processes_until_the_file_changes(tmp_path, monkeypatch):
    monkeypatch.setenv("RETBENCH_CACHE", str(tmp_path / "cache"))
    weights = tmp_path / "model.safetensors"
    first = os.urandom(1024) * (files._REMEMBERED_FROM // 1024)
    weights.write_bytes(first)
    assert files.file_sha256(weights) == hashlib.sha256(first).hexdigest()
    (memo,) = (tmp_path / "cache" / "file-sha256").iterdir()

    # A new process (no in-process cache) reads the memo: proven by a planted value.
    kept = json.loads(memo.read_text())
    memo.write_text(json.dumps({**kept, "sha256": "planted"}))
    files._file_sha256.cache_clear()
    assert files.file_sha256(weights) == "planted"

    # Rewritten in place with the same size: mtime and ctime change, so it is hashed again.
    second = bytes(reversed(first))
    weights.write_bytes(second)
    files._file_sha256.cache_clear()
    assert files.file_sha256(weights) == hashlib.sha256(second).hexdigest()


def test_small_files_and_an_unwritable_cache_are_hashed_without_a_memo(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    monkeypatch.setenv("RETBENCH_CACHE", str(blocker))  # the memo cannot be written: hashing still works
    big = tmp_path / "big.bin"
    big.write_bytes(b"\1" * files._REMEMBERED_FROM)
    small = tmp_path / "small.txt"
    small.write_text("abc")
    files._file_sha256.cache_clear()
    assert files.file_sha256(big) == hashlib.sha256(b"\1" * files._REMEMBERED_FROM).hexdigest()
    assert files.file_sha256(small) == hashlib.sha256(b"abc").hexdigest()
