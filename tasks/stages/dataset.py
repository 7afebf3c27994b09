"""The load-dataset stage's plain functions: a collection read through its format's reader
(tasks/datasets, one module per format), its content hash, and the Parquet tables it is saved as
for the later stages.

Formats: the project's own JSONL folder, BEIR, Cranfield (SMART), XQuAD and the Glasgow
collections (NPL, CISI, MED); any of them can take its judgments from a TREC qrels file instead.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from retbench.tasks.datasets import format_reader, known_formats
from retbench.tasks.datasets.errors import DatasetError
from retbench.tasks.datasets.metadata import known_fields, parse_filter  # noqa: F401  (re-exported for unmoved importers)
from retbench.tasks.datasets.model import CORPUS_SCHEMA, EXTRA_TABLES, QRELS_SCHEMA, QUERIES_SCHEMA, TABLES, Dataset

if TYPE_CHECKING:
    from retbench.tasks.config.spec import DatasetSpec

__all__ = ["CORPUS_SCHEMA", "QRELS_SCHEMA", "QUERIES_SCHEMA", "Dataset", "DatasetError", "content_hash",
           "known_fields", "load_dataset", "load_saved_dataset", "parse_filter", "save_dataset"]


# ---------------------------------------------------------------- public API


def load_dataset(
    path: str | Path,
    format: str,
    split: str = "all",
    *,
    qrels_path: str | Path | None = None,
    grade_map: dict[int, int] | None = None,
    unicode: str = "nfc",
    **options: Any,
) -> Dataset:
    """Load and validate a collection, keeping only the queries of `split` ("train", "dev", "test",
    or "all", the default).

    `qrels_path` replaces the format's judgments by a TREC qrels file; `grade_map` maps raw
    grades before validation (it must cover every grade present). Queries without judgments
    are dropped; the corpus is kept whole. `unicode` "nfc" (default) normalises titles and
    texts to Unicode NFC, "raw" keeps them as read. Options: `name` for every format, and
    `query_language` / `doc_language` ("en" | "hi") and `dev_fraction` for xquad, `collection` ("npl" | "cisi" | "med")
    for glasgow.
    """
    if format not in known_formats():
        raise DatasetError(f"unknown dataset format {format!r} (expected one of {known_formats()})")
    return format_reader(format).read(path, split, options, qrels_path=qrels_path, grade_map=grade_map,
                                      unicode=unicode)


def load_spec_dataset(dataset: DatasetSpec) -> Dataset:
    """The collection a spec's `dataset:` section (a DatasetSpec) names, read and validated."""
    return load_dataset(dataset.path, dataset.format, dataset.split, qrels_path=dataset.qrels,
                        grade_map=dataset.grade_map, unicode=dataset.unicode, **dataset.options)


def reader_code_files(format: str) -> list[Path]:
    """The files whose code decides what a collection of `format` parses to: this module, every
    module of tasks/datasets, and the module the format's reader is defined in when elsewhere."""
    import inspect

    import retbench.tasks.datasets

    files = [Path(__file__), *sorted(Path(retbench.tasks.datasets.__file__).parent.glob("*.py"))]
    if format in known_formats():
        defined_in = Path(inspect.getfile(format_reader(format).read_rows))
        if defined_in not in files:
            files.append(defined_in)
    return files


def content_hash(ds: Dataset) -> str:
    """sha256 over corpus, queries and qrels, independent of row order (name and notes excluded)."""
    h = hashlib.sha256(b"retbench-dataset-v1\n")
    for label, schema in TABLES:
        frame: pl.DataFrame = getattr(ds, label)
        columns = list(schema)
        h.update(f"{label} {','.join(columns)}\n".encode())
        # Sorting on every column (ids first) makes the order total even for hand-made frames.
        for row in frame.select(columns).sort(columns).iter_rows():
            h.update(json.dumps(row, ensure_ascii=False, separators=(",", ":")).encode())
            h.update(b"\n")
    for label, frame in ds.extra_tables():
        h.update(f"{label}\n".encode())
        for row in frame.sort(frame.columns).iter_rows():
            h.update(json.dumps(row, ensure_ascii=False, separators=(",", ":")).encode() + b"\n")
    return h.hexdigest()


def save_dataset(ds: Dataset, directory: str | Path) -> Path:
    """Write corpus/queries/qrels.parquet and dataset.json (name, notes, content hash, and the
    sha256 of each table file, which the loader checks instead of re-hashing every row)."""
    from retbench.tasks.store.files import file_sha256

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tables = [(label, getattr(ds, label)) for label, _ in TABLES] + ds.extra_tables()
    for label, frame in tables:
        _write_atomically(directory / f"{label}.parquet", frame.write_parquet)
    meta = {"name": ds.name, "notes": list(ds.notes), "content_hash": content_hash(ds),
            "file_sha256": {f"{label}.parquet": file_sha256(directory / f"{label}.parquet") for label, _ in tables}}
    text = json.dumps(meta, ensure_ascii=False, indent=2) + "\n"
    # Written last: its hash then vouches for the three tables next to it.
    _write_atomically(directory / "dataset.json", lambda p: Path(p).write_text(text, encoding="utf-8"))
    return directory


def load_saved_dataset(directory: str | Path) -> Dataset:
    """Read what save_dataset wrote, checking columns and that the content hash still matches."""
    from retbench.tasks.store.remote import fetched

    directory = Path(directory)
    meta_path = directory / "dataset.json"
    # On an object store a worker of another machine fetches the files (saved by another
    # process): dataset.json, then the tables it lists.
    if not fetched(meta_path):
        raise DatasetError(f"{meta_path}: missing; expected a dataset saved by save_dataset")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DatasetError(f"{meta_path}: not readable JSON ({e})") from None
    listed = meta.get("file_sha256") if isinstance(meta, dict) else None
    for name in listed if isinstance(listed, dict) else [f"{label}.parquet" for label, _ in TABLES]:
        fetched(directory / name)
    frames = {}
    for label, schema in TABLES:
        file = directory / f"{label}.parquet"
        if not file.is_file():
            raise DatasetError(f"{file}: missing; expected the {label} table of a saved dataset")
        frame = pl.read_parquet(file)
        missing = [c for c in schema if c not in frame.columns]
        if missing:
            raise DatasetError(f"{file}: missing columns {missing} (found {frame.columns})")
        for column, dtype in schema.items():
            if frame.schema[column] != dtype:
                raise DatasetError(f"{file}: column {column!r} has type {frame.schema[column]}, expected {dtype}")
        frames[label] = frame.select(list(schema))
    for label, schema in EXTRA_TABLES:
        file = directory / f"{label}.parquet"
        if file.is_file():
            frames[label] = pl.read_parquet(file).select(list(schema)).cast(schema)
    keys = ("name", "notes", "content_hash")
    missing = [k for k in keys if k not in meta] if isinstance(meta, dict) else list(keys)
    if missing:
        raise DatasetError(f"{meta_path}: missing keys {missing}; expected what save_dataset writes")
    ds = Dataset(meta["name"], frames["corpus"], frames["queries"], frames["qrels"], tuple(meta["notes"]),
                 metadata=frames.get("metadata"), filters=frames.get("filters"))
    if not _files_match(directory, [f"{label}.parquet" for label in frames], meta.get("file_sha256")) \
            and content_hash(ds) != meta["content_hash"]:
        raise DatasetError(
            f"{directory}: tables do not match the content hash in dataset.json "
            "(changed after saving, or a save was interrupted); save the dataset again"
        )
    return ds


def _files_match(directory: Path, names: list[str], recorded: dict | None) -> bool:
    """The table files are the bytes save_dataset wrote (their sha256 is in dataset.json): then
    their rows are too, and the row-by-row content hash (a tenth of a second per 10,000
    documents, on every load) is not needed. False also when nothing was recorded (older saves)."""
    from retbench.tasks.store.files import file_sha256

    if not isinstance(recorded, dict) or set(recorded) != set(names):
        return False
    return all(file_sha256(directory / name) == recorded[name] for name in names)


# ---------------------------------------------------------------- files


def _write_atomically(target: Path, write: Callable[[str], Any]) -> None:
    """Write via a temp file in the same folder, fsync and os.replace (retbench.tasks.store.files.atomic_write),
    so a reader never sees half a file."""
    from retbench.tasks.store.files import atomic_write

    atomic_write(target, write)
