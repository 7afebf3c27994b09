"""Pre-flight check of query filters: every field a query's `filter` names must be a metadata field
of the documents (and, when the spec declares `dataset.metadata_fields`, a declared one).

Run by `check_inputs` before Prefect starts or any stage runs. It reads only what it needs: the
query lines that mention "filter", then document lines that mention "metadata" until every
field asked for is found (so a valid spec rarely reads the whole corpus). Lines it cannot parse
are left to the dataset stage, which names them; this check only refuses what it is sure of.
"""
from __future__ import annotations

import codecs
import json
import zlib
from collections.abc import Iterator
from pathlib import Path

from retbench.tasks.datasets.errors import DatasetError
from retbench.tasks.datasets.lines import located, open_binary
from retbench.tasks.datasets.metadata import known_fields, parse_filter


def _objects(path: Path, marker: bytes) -> Iterator[tuple[int, dict]]:
    """(line number, object) of the JSON lines of `path` containing `marker`; line numbers as the
    dataset stage counts them (1-based, blank lines included)."""
    try:
        with open_binary(path) as f:
            for lineno, data in enumerate(f, 1):
                if lineno == 1 and data.startswith(codecs.BOM_UTF8):
                    data = data[len(codecs.BOM_UTF8):]
                if marker not in data:
                    continue
                try:
                    obj = json.loads(data)
                except ValueError:  # malformed JSON or UTF-8: the dataset stage reports it with its line
                    continue
                if isinstance(obj, dict):
                    yield lineno, obj
    except (OSError, EOFError, zlib.error):  # a damaged .gz: the dataset stage reports it
        return


def query_filters(queries_file: Path) -> list[tuple[str, object]]:
    """(file:line, filter value) of every query line carrying a `filter`."""
    return [(f"{queries_file}:{lineno}", obj["filter"]) for lineno, obj in _objects(queries_file, b'"filter"')
            if obj.get("filter") is not None]


def _has_text(path: Path) -> bool:
    """Whether `path` holds a line that is not blank (a BOM alone counts as blank)."""
    try:
        with open_binary(path) as f:
            return any(line.replace(codecs.BOM_UTF8, b"").strip() for line in f)
    except (OSError, EOFError, zlib.error):  # a damaged .gz: the dataset stage reports it
        return True


def document_fields(corpus_file: Path, wanted: set[str] = frozenset()) -> set[str]:
    """Metadata field names of the documents; stops reading once every `wanted` field is found."""
    found: set[str] = set()
    for _, obj in _objects(corpus_file, b'"metadata"'):
        metadata = obj.get("metadata")
        if isinstance(metadata, dict):
            found.update(metadata)
            if wanted and wanted <= found:
                break
    return found


def check_filter_fields(path: Path, format: str, declared: list[str] | None = None) -> None:
    """Refuse, naming file:line (or the spec's key path), a query filter on a field no document has
    or the spec did not declare, and a declared field no document has. Only the jsonl format
    carries query filters; other formats pass (a declaration is refused for them at spec load)."""
    if format != "jsonl":
        return
    corpus_file, queries_file = located(path / "corpus.jsonl"), located(path / "queries.jsonl")  # or their .gz
    if corpus_file is None or queries_file is None:
        return  # the dataset stage names the missing file
    filters = query_filters(queries_file)
    asked = {key for _, value in filters if isinstance(value, dict) for key in value}
    wanted = asked | set(declared or ())
    if not wanted:
        return
    fields = document_fields(corpus_file, wanted)
    if not wanted <= fields and not _has_text(corpus_file):
        # No document, so no field: say that, not that the filter names an unknown field.
        raise DatasetError(f"{corpus_file}: no documents; expected at least one (corpus.jsonl with id, title?, "
                           "text, language?, metadata?)")
    for i, name in enumerate(declared or ()):
        if name not in fields:
            raise DatasetError(f"dataset.metadata_fields[{i}] {name!r}: no document in {corpus_file} has this metadata "
                               f"field ({known_fields(name, fields)})")
    for where, value in filters:
        if declared is not None and isinstance(value, dict):
            for key in value:
                if key not in declared:
                    raise DatasetError(f"{where}: filter field {key!r} is not declared in dataset.metadata_fields "
                                       f"({known_fields(key, declared).replace('known', 'declared', 1)})")
        parse_filter(value, where, fields)
