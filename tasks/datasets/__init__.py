"""Dataset formats: one reader module each (jsonl, beir, cranfield, xquad, glasgow), found by the
format's name in a registry; `dataset.format` in a spec is checked against its names.

A format module reads a folder into rows (tasks/datasets/reader.py); validation into a Dataset is
shared (tasks/datasets/model.py). To add a format: a module here defining
`READER = FormatReader("name", frozenset({"name", ...options}), read_rows)`, listed in _builtin
(the module does not import this package: no import cycle).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from retbench.tasks.registry import Registry

if TYPE_CHECKING:
    from retbench.tasks.datasets.reader import FormatReader


def _builtin() -> dict[str, FormatReader]:
    # Imported on first lookup, so `import retbench.tasks.datasets` stays cheap.
    from retbench.tasks.datasets import beir, cranfield, glasgow, jsonl, xquad

    return {module.READER.name: module.READER for module in (beir, cranfield, glasgow, jsonl, xquad)}


_REGISTRY: Registry[FormatReader] = Registry("dataset format", _builtin)
kind_origins = _REGISTRY.origins  # kind -> built-in, an entry point, a spec plug-in (`retbench plugins`)
known_formats = _REGISTRY.kinds
format_reader = _REGISTRY.get


def register(reader: FormatReader) -> FormatReader:
    """Make `reader` found under its name; a second reader of the same name is refused."""
    return _REGISTRY.register(reader.name)(reader)


__all__ = ["register", "known_formats", "format_reader"]
