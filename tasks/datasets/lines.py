"""Reading a collection's files line by line and field by field, every error naming file:line and
what was expected; shared by the format readers."""
from __future__ import annotations

import codecs
import gzip
import json
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from retbench.tasks.datasets.controls import refuse_control_id
from retbench.tasks.datasets.errors import DatasetError


# Read as they are, in place of the file they compress: `corpus.jsonl.gz` for `corpus.jsonl`.
READ_COMPRESSED = (".gz",)
# Named when the file itself is missing, never read: the user unpacks them.
PACKED = (".bz2", ".xz", ".zst", ".lz4", ".7z", ".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz")


def located(path: Path) -> Path | None:
    """The file read for `path`: itself, else its gzip-compressed sibling `path.gz`; None if neither is."""
    if path.is_file():
        return path
    return next((path.with_name(path.name + ext) for ext in READ_COMPRESSED
                 if path.with_name(path.name + ext).is_file()), None)


def open_binary(path: Path) -> IO[bytes]:
    """`path` for reading bytes, decompressed when it is a `.gz` file."""
    return gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")


def packed_siblings(path: Path) -> list[Path]:
    """Files beside a missing `path` that hold it packed: `path.<ext>`, `<stem>.<ext>`, and any
    archive in its folder (a downloaded `scifact.zip` holds the collection's files)."""
    folder = path.parent
    if not folder.is_dir():
        return []
    named = {path.with_name(path.name + ext) for ext in PACKED} | {path.with_name(path.stem + ext) for ext in PACKED}
    archives = (".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".7z")
    found = {p for p in named if p.is_file()}
    found |= {p for p in folder.iterdir() if p.is_file() and p.name.endswith(archives)}
    return sorted(found)


def missing_file_error(path: Path, what: str) -> DatasetError:
    """`<path>: missing; expected <what>`, naming a packed sibling to unpack when there is one."""
    siblings = packed_siblings(path)
    hint = ""
    if siblings:
        names = ", ".join(p.name for p in siblings[:3]) + (f" and {len(siblings) - 3} more" if len(siblings) > 3 else "")
        hint = (f"; found {names} beside it: unpack it into {path.parent} (only {', '.join(READ_COMPRESSED)} "
                "files are read as they are)")
    return DatasetError(f"{path}: missing; expected {what}{hint}")


def text_lines(path: Path, what: str) -> Iterator[tuple[int, str]]:
    """Yield (line number, line) for non-blank lines of `path` (or of `path.gz`, decompressed);
    a BOM and CRLF endings are tolerated. Errors name the file read."""
    found = located(path)
    if found is None:
        raise missing_file_error(path, what)
    path = found
    with open_binary(path) as f:
        lineno = 0
        try:
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
        except (OSError, EOFError, zlib.error) as e:  # a truncated or corrupt .gz
            if not path.name.endswith(".gz"):
                raise
            raise DatasetError(f"{path}:{lineno + 1}: not readable as gzip ({e}); expected a complete .gz file") from None


def json_lines(path: Path, what: str) -> Iterator[tuple[str, dict]]:
    """(file:line, object) per non-blank line; `path` may be read from `path.gz` (named as such)."""
    path = located(path) or path
    for lineno, line in text_lines(path, what):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise DatasetError(f"{path}:{lineno}: {json_error(e)}; expected one JSON object per line") from None
        if not isinstance(obj, dict):
            raise DatasetError(f"{path}:{lineno}: expected a JSON object, found {json_type(obj)}")
        yield f"{path}:{lineno}", obj


def json_error(e: json.JSONDecodeError) -> str:
    """`malformed JSON (<what> at column N)`, with the advice JSON itself gives for a raw control character."""
    # json words some errors "... at" ("Invalid control character at"): drop it, the column follows.
    what = e.msg.removesuffix(" at")
    if what == "Invalid control character":
        char = e.doc[e.pos] if e.pos < len(e.doc) else ""
        code = f" U+{ord(char):04X}" if char else ""
        return (f"malformed JSON (raw control character{code} in a string at column {e.colno}; JSON writes it "
                "escaped, as \\u0000; in a title or text retbench then replaces it by a space)")
    return f"malformed JSON ({what} at column {e.colno})"


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
        refuse_control_id(id_, where)
        if id_ in self.first:
            raise DatasetError(f"{where}: duplicate id {id_!r} (first at {self.first[id_]})")
        self.first[id_] = where


def smart_text(lines: list[str]) -> str:
    # SMART wraps lines at a fixed width: the line breaks carry no meaning.
    return " ".join(part.strip() for part in lines if part.strip())
