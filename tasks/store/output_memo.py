"""Output files kept in the store by the content of what they were computed from, so a cached
rerun copies them into its output folder instead of computing them again (the score stage's
tables: metrics, breakdowns with bootstrap intervals, paired tests with permutations).

    scores/<key>/<file>   one checked copy of each output file (checksum sidecars)
    scores/<key>.json     {"files": [...], "extra": {...}}, written last: its presence means complete

The key is the caller's: the content keys of the inputs, the settings that matter, and
`code_version()`, so a change to any module under tasks/ computes everything again.
"""
from __future__ import annotations

import functools
import hashlib
import json
import shutil
from pathlib import Path

from retbench.tasks.store.build import build_once
from retbench.tasks.store.files import atomic_write
from retbench.tasks.store.integrity import verify

_TASKS = Path(__file__).resolve().parent.parent


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """sha256 over every module of the `tasks` package (path and bytes): conservative on purpose,
    a copied result must never outlive a change to the code that computed it."""
    digest = hashlib.sha256()
    for path in sorted(_TASKS.rglob("*.py")):
        digest.update(str(path.relative_to(_TASKS)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _paths(store: str | Path, section: str, key: str) -> tuple[Path, Path]:
    folder = Path(store) / section / key[:40]
    return folder, folder.with_name(f"{folder.name}.json")


def keep(store: str | Path, section: str, key: str, files: list[str | Path], extra: dict) -> None:
    """Copy the finished output `files` into the store under `key`, the index last. Each write
    goes through build_once (its lock, checksum and rename), always writing: the caller computed
    these files because the copy kept under `key` was missing or damaged."""
    folder, index = _paths(store, section, key)
    for file in files:
        build_once(store, folder / Path(file).name, _copy_of(file), force=True)
    text = json.dumps({"files": [Path(f).name for f in files], "extra": extra}, sort_keys=True)
    build_once(store, index, _text_of(text), force=True)


def _copy_of(source: str | Path):
    def write(tmp: str) -> None:  # None: build_once would store a returned value as metadata
        shutil.copyfile(source, tmp)
    return write


def _text_of(text: str):
    def write(tmp: str) -> None:
        Path(tmp).write_text(text, encoding="utf-8")
    return write


def reuse(store: str | Path, section: str, key: str, output_dir: str | Path) -> dict | None:
    """Copy the files kept under `key` into `output_dir` and return the `extra` kept with them;
    None when nothing intact is kept (a damaged copy is quarantined by `verify`)."""
    folder, index = _paths(store, section, key)
    if not verify(index, store):
        return None
    kept = json.loads(index.read_text(encoding="utf-8"))
    if not all(verify(folder / name, store) for name in kept["files"]):
        return None
    for name in kept["files"]:
        atomic_write(Path(output_dir) / name, lambda tmp, source=folder / name: shutil.copyfile(source, tmp))
    return kept["extra"]
