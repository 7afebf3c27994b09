"""Integrity: a truncated or corrupted store file is detected when read, moved to
`<store>/quarantine/` with a warning naming it, recomputed, and the run still gives the
results of an undamaged store."""
from __future__ import annotations

import logging
import shutil
from pathlib import Path

import polars as pl
import pytest

from retbench.support import crash_worker
from retbench.support.crash_worker import TABLES, cache_rows
from retbench.support.crash_runs import provider_folders


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    base = tmp_path_factory.mktemp("pristine")
    crash_worker.run(base / "store", base / "out")
    return base, {name: pl.read_parquet(base / "out" / f"{name}.parquet") for name in TABLES}


def _pick(store: Path, kind: str) -> Path:
    pattern = {
        "shard": "embeddings/hashing-*/shard-*.parquet",
        "flat index": "indexes/*/flat.faiss",
        "ivf index": "indexes/*/ivf_*.faiss",
        "run file": "runs/*.parquet",
        "dataset corpus": "datasets/*/corpus.parquet",
        "dataset qrels": "datasets/*/qrels.parquet",
        "chunks": "chunks/*.parquet",
        "set file": "sets/*.parquet",
    }[kind]
    return sorted(store.glob(pattern))[0]


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    for offset in (len(data) // 3, len(data) // 2):
        data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


CASES = [(kind, damage) for kind in ("shard", "flat index", "ivf index", "run file", "dataset corpus", "dataset qrels", "chunks", "set file")
         for damage in (truncate, flip)]


@pytest.mark.parametrize("kind, damage", CASES, ids=[f"{k}-{d.__name__}" for k, d in CASES])
def test_damaged_file_is_quarantined_recomputed_and_the_run_completes(tmp_path, pristine, caplog, kind, damage):
    base, reference = pristine
    store, out = tmp_path / "store", tmp_path / "out"
    shutil.copytree(base / "store", store)
    if kind == "run file":
        shutil.rmtree(store / "runs")  # run keys include the chunk file's path: make this store's own
        crash_worker.run(store, out)
    victim = _pick(store, kind)
    rows = cache_rows(victim.parent)[0] if kind == "shard" else 0
    shard_rows = len(pl.read_parquet(victim)) if kind == "shard" else 0
    damage(victim)

    caplog.set_level(logging.WARNING, logger="retbench")
    result = crash_worker.run(store, out)

    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any(str(victim) in message for message in warnings), warnings
    quarantined = [p for p in (store / "quarantine").rglob("*") if p.is_file() and not p.name.endswith(".sha256")]
    assert len(quarantined) == 1 and quarantined[0].name.startswith(victim.name)
    assert victim.exists() or kind == "shard"  # recomputed in place (a shard's rows go to a new shard)
    for name in TABLES:
        assert pl.read_parquet(out / f"{name}.parquet").equals(reference[name]), name
    if kind == "shard":
        # Exactly the damaged shard's rows were embedded again; nothing is duplicated.
        assert sum(result["embedded"].values()) == shard_rows
        assert cache_rows(victim.parent)[0] == rows
    else:
        assert sum(result["embedded"].values()) == 0


def test_unverified_legacy_shard_that_does_not_parse_is_quarantined(tmp_path, pristine, caplog):
    """A shard without a sidecar (older store, or killed between the two renames) is trusted
    only if it parses."""
    base, reference = pristine
    store = tmp_path / "store"
    shutil.copytree(base / "store", store)
    victim = _pick(store, "shard")
    Path(f"{victim}.sha256").unlink()
    truncate(victim)
    caplog.set_level(logging.WARNING, logger="retbench")
    crash_worker.run(store, tmp_path / "out")
    assert any(str(victim) in r.getMessage() and "unreadable" in r.getMessage() for r in caplog.records)
    assert pl.read_parquet(tmp_path / "out" / "summary.parquet").equals(reference["summary"])


def test_missing_sidecar_of_an_intact_shard_is_recorded_not_quarantined(tmp_path, pristine):
    base, _ = pristine
    store = tmp_path / "store"
    shutil.copytree(base / "store", store)
    victim = _pick(store, "shard")
    Path(f"{victim}.sha256").unlink()
    result = crash_worker.run(store, tmp_path / "out")
    assert sum(result["embedded"].values()) == 0
    assert Path(f"{victim}.sha256").exists() and not (store / "quarantine").exists()


def test_every_store_file_has_a_checksum(pristine):
    base, _ = pristine
    from retbench.tasks.store.integrity import checksum_ok

    files = [p for p in (base / "store").rglob("*") if p.is_file() and p.suffix in (".parquet", ".faiss", ".json")
             and p.name != "fingerprint.json"]
    assert files and all(checksum_ok(p) is True for p in files), [p for p in files if checksum_ok(p) is not True]
    assert all(cache_rows(f)[0] == len(cache_rows(f)[1]) for f in provider_folders(base / "store").values())


def test_a_shard_quarantined_on_the_cached_path_is_said_in_the_runs_output(tmp_path):
    """`retbench run` first tries the fast path (no Prefect) and drops its held-back lines when a
    stage has work; a shard it quarantined there must still be said, once, since the flow that
    takes over finds it gone and says nothing (issue 35)."""
    from tests.pipeline.test_cli_errors import retbench, tiny_collection, write_spec

    tiny_collection(tmp_path / "data")
    spec = write_spec(tmp_path)
    first = retbench("run", spec, cwd=tmp_path, prefect_home=tmp_path / "prefect")
    assert first.returncode == 0, first.stderr[-3000:]
    victim = _pick(tmp_path / "store", "shard")
    flip(victim)
    done = retbench("run", spec, cwd=tmp_path, prefect_home=tmp_path / "prefect")
    assert done.returncode == 0, done.stderr[-3000:]
    said = [line for line in (done.stdout + done.stderr).splitlines() if "damaged store file" in line]
    assert len(said) == 1, said
    assert "| WARNING | retbench.integrity - " in said[0]
    assert f"damaged store file {victim}: checksum mismatch (truncated or corrupted); moved to " \
           f"{tmp_path / 'store' / 'quarantine'}" in said[0]
    assert "texts embedded" in done.stderr or " embedded, " in done.stderr  # its rows were embedded again
