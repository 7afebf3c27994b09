"""Document metadata and query filters as the jsonl and BEIR formats carry them: objects of scalar
fields, and filters naming only fields some document has."""
from __future__ import annotations

import difflib
from typing import Any

from retbench.tasks.datasets.errors import DatasetError
from retbench.tasks.datasets.lines import json_type

_SCALAR = (str, int, float, bool)


def metadata_field(value: Any, where: str, strict: bool = True) -> dict:
    """A document's metadata: an object of scalar fields (strings, numbers, booleans); not strict:
    other values are left out."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        if not strict:
            return {}
        raise DatasetError(f"{where}: field 'metadata' must be an object, found {json_type(value)}")
    if not strict:
        return {k: v for k, v in value.items() if isinstance(v, _SCALAR)}
    for key, item in value.items():
        if not isinstance(item, _SCALAR):
            raise DatasetError(f"{where}: metadata field {key!r} must be a string, number or boolean, "
                               f"found {json_type(item)}")
    return dict(value)


def metadata_fields(metadata: dict[str, dict]) -> set[str]:
    return {key for fields in metadata.values() for key in fields}


def known_fields(key: str, fields: set[str] | list[str]) -> str:
    """`known: a, b, c` for an error message, and `did you mean ...?` when one is close to a mistyped `key`."""
    if not fields:
        return "known: none: no document has metadata"
    close = difflib.get_close_matches(key, list(fields), n=1)
    return f"known: {', '.join(sorted(fields))}" + (f"; did you mean {close[0]!r}?" if close else "")


def parse_filter(value: Any, where: str, fields: set[str]) -> dict:
    """A query's filter: {field: value} (equality) or {field: [values]} (membership), every field
    one that some document's metadata has; all conditions must hold."""
    if not isinstance(value, dict) or not value:
        raise DatasetError(f"{where}: field 'filter' must be a non-empty object of metadata conditions, "
                           f"found {json_type(value)} {value!r}")
    for key, wanted in value.items():
        if key not in fields:
            raise DatasetError(f"{where}: filter field {key!r} is not a metadata field of any document "
                               f"({known_fields(key, fields)})")
        values = wanted if isinstance(wanted, list) else [wanted]
        if not values or not all(isinstance(v, _SCALAR) for v in values):
            raise DatasetError(f"{where}: filter field {key!r} must be a string, number or boolean, or a non-empty "
                               f"list of them, found {wanted!r}")
    return dict(value)
