"""Reading a collection's files line by line and field by field, every error naming file:line and
what was expected; shared by the format readers."""
from __future__ import annotations

import codecs
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tasks.datasets.errors import DatasetError


def text_lines(path: Path, what: str) -> Iterator[tuple[int, str]]:
    """Yield (line number, line) for non-blank lines; a BOM and CRLF endings are tolerated."""
    if not path.is_file():
        raise DatasetError(f"{path}: missing; expected {what}")
    with open(path, "rb") as f:
        for lineno, data in enumerate(f, 1):
            if lineno == 1 and data.startswith(codecs.BOM_UTF8):
                data = data[len(codecs.BOM_UTF8):]
            try:
                line = data.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DatasetError(
                    f"{path}:{lineno}: invalid UTF-8 at byte {e.start + 1} of the line; expected UTF-8 text"
                ) from None
            line = line.rstrip("\r\n")
            if line.strip():
                yield lineno, line


def json_lines(path: Path, what: str) -> Iterator[tuple[str, dict]]:
    for lineno, line in text_lines(path, what):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise DatasetError(
                f"{path}:{lineno}: malformed JSON ({e.msg} at column {e.colno}); expected one JSON object per line"
            ) from None
        if not isinstance(obj, dict):
            raise DatasetError(f"{path}:{lineno}: expected a JSON object, found {json_type(obj)}")
        yield f"{path}:{lineno}", obj


def json_type(value: Any) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    return names.get(type(value), "number")


def str_field(obj: dict, key: str, where: str, *, default: str | None = None, nonempty: bool = False) -> str:
    """A string field; missing (or null) is an error unless a default is given."""
    value = obj.get(key)
    if value is None:
        if default is None:
            raise DatasetError(_absent(obj, key, where, "a string"))
        return default
    if not isinstance(value, str):
        raise DatasetError(f"{where}: field {key!r} must be a string, found {json_type(value)} {value!r}")
    if nonempty and not value.strip():
        raise DatasetError(f"{where}: field {key!r} is empty; expected non-empty text")
    return value


def _absent(obj: dict, key: str, where: str, expected: str) -> str:
    if key in obj:  # present as JSON null: saying "missing" while listing it would confuse
        return f"{where}: field {key!r} is null; expected {expected}"
    return f"{where}: missing required field {key!r} (found fields {sorted(obj)})"


def int_field(obj: dict, key: str, where: str) -> int:
    value = obj.get(key)
    if value is None:
        raise DatasetError(_absent(obj, key, where, "an integer"))
    # bool is an int subclass in Python; true/false are not grades.
    if isinstance(value, bool) or not isinstance(value, int):
        raise DatasetError(f"{where}: field {key!r} must be an integer, found {json_type(value)} {value!r}")
    return value


def parse_int(text: str, where: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise DatasetError(f"{where}: {what} must be an integer, found {text!r}") from None


class UniqueIds:
    """Refuses a second row with the same id, naming both lines."""

    def __init__(self) -> None:
        self.first: dict[str, str] = {}

    def add(self, id_: str, where: str) -> None:
        if any(c.isspace() for c in id_):
            # runs.trec and TREC qrels separate their fields by whitespace: such an id
            # would be split in two there, and `retbench eval` would refuse the run.
            raise DatasetError(
                f"{where}: id {id_!r} contains whitespace; expected an id without spaces, tabs or "
                f"line breaks (TREC run and qrels files cannot hold it), e.g. {'_'.join(id_.split())!r}"
            )
        if id_ in self.first:
            raise DatasetError(f"{where}: duplicate id {id_!r} (first at {self.first[id_]})")
        self.first[id_] = where


def smart_text(lines: list[str]) -> str:
    # SMART wraps lines at a fixed width: the line breaks carry no meaning.
    return " ".join(part.strip() for part in lines if part.strip())
