"""A spec's problems in the spec's own words: each one `key.path[i]: what is wrong`, pydantic's
wording replaced (a user never wrote a pydantic model), and "did you mean" for a near-miss name."""
from __future__ import annotations

import difflib
import re
import types
import typing
from typing import Annotated, Iterable

from pydantic import BaseModel, ValidationError

# Tags of discriminated unions (the spec's `chunking`): a branch's name, not a key a user wrote.
UNION_TAGS: set[str] = set()


class AtKey(ValueError):
    """A problem a validator finds at a key below the one it validates (a section's check that
    names one entry): reported at `path`, relative to where the validator runs."""

    def __init__(self, path: str, message: str):
        super().__init__(f"{path}: {message}")
        self.path, self.message = path, message

    def __reduce__(self):  # its two arguments, so it survives a trip to another process (Dask, Prefect)
        return type(self), (self.path, self.message)


def did_you_mean(word: object, choices: Iterable[str]) -> str:
    """" (did you mean 'x'?)" when `word` is near one of `choices`, else an empty string."""
    close = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def unknown_name(what: str, name: object, known: Iterable[str]) -> str:
    """"unknown provider kind 'x' (did you mean 'y'?) (known: ...)": the one wording of a name that
    is not among `known` (kinds, formats, first stages, rerankers)."""
    known = list(known)
    return f"unknown {what} {name!r}{did_you_mean(name, known)} (known: {', '.join(known) or 'none'})"


def key_path(loc: Iterable) -> str:
    """A location as a key path: ("providers", 1, "kind") -> providers[1].kind."""
    out = ""
    for part in loc:
        if part in UNION_TAGS:
            continue
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def join_path(*parts: str) -> str:
    """Key paths joined: ("providers[1]", "kind") -> providers[1].kind; ("providers", "[1]") -> providers[1]."""
    out = ""
    for part in parts:
        if part:
            out += part if not out or part.startswith("[") else f".{part}"
    return out


def describe(error: ValidationError, model: type[BaseModel] | None = None, prefix: tuple = ()) -> list[str]:
    """One `path: message` line per problem of `error`; `model` (what was validated) lets an
    unknown key be matched against the keys that exist there; `prefix` is where it sits in the spec."""
    lines = []
    for item in error.errors():
        loc = (*prefix, *item["loc"])
        where, message = explain(item, _keys_at(model, item["loc"][:-1]) if model is not None else ())
        where = join_path(key_path(loc), where)
        # A section's check may name the deeper key itself (indexes.hnsw.M: ...): said at that key.
        deeper = re.match(rf"({re.escape(where)}(?:\.[\w-]+|\[\d+\])+): (.*)", message, re.S) if where else None
        if deeper:
            where, message = deeper.groups()
        lines.append(f"{where}: {message}" if where else message)
    return list(dict.fromkeys(lines))  # a union's branches can report one problem twice


def explain(item: dict, keys_here: Iterable[str] = ()) -> tuple[str, str]:
    """(a deeper path the message belongs at, or "", the message) for one pydantic error item."""
    kind, ctx, given = item["type"], item.get("ctx") or {}, item.get("input")
    got = f" (got {_shown(given)})"
    if kind == "extra_forbidden":
        keys = [k for k in keys_here if k != item["loc"][-1]]
        hint = did_you_mean(item["loc"][-1], keys)
        return "", "unknown key" + (hint or (f" (expected one of: {', '.join(keys)})" if keys else ""))
    if kind in ("value_error", "assertion_error"):
        cause = ctx.get("error")
        if isinstance(cause, AtKey):
            return cause.path, cause.message
        return "", str(cause) if cause is not None else _plain(item["msg"])
    if kind == "missing":
        return "", "required, but not given"
    if kind == "literal_error":
        allowed = [a.strip("'\"") for a in _literal_options(ctx.get("expected", ""))]
        return "", f"expected one of {', '.join(allowed)}{got}{did_you_mean(given, allowed)}"
    simple = {
        "int_type": "expected a whole number", "int_parsing": "expected a whole number",
        "int_from_float": "expected a whole number", "float_type": "expected a number",
        "float_parsing": "expected a number", "bool_type": "expected true or false",
        "bool_parsing": "expected true or false", "string_type": "expected text", "list_type": "expected a list",
        "dict_type": "expected a mapping of keys to values", "model_type": "expected a mapping of keys to values",
        "model_attributes_type": "expected a mapping of keys to values", "date_type": "expected a date (YYYY-MM-DD)",
        "date_parsing": "expected a date (YYYY-MM-DD)", "date_from_datetime_parsing": "expected a date (YYYY-MM-DD)",
        "path_type": "expected a path", "none_required": "expected null",
    }
    if kind in simple:
        return "", simple[kind] + got
    bounds = {"greater_than": ("gt", "above"), "greater_than_equal": ("ge", "at least"),
              "less_than": ("lt", "below"), "less_than_equal": ("le", "at most")}
    if kind in bounds:
        key, words = bounds[kind]
        return "", f"must be {words} {ctx.get(key)}{got}"
    if kind in ("too_short", "too_long"):
        limit = ctx.get("min_length") if kind == "too_short" else ctx.get("max_length")
        return "", f"expected {'at least' if kind == 'too_short' else 'at most'} {limit} item{'s' * (limit != 1)}{got}"
    if kind in ("string_too_short", "string_too_long"):
        limit = ctx.get("min_length") if kind == "string_too_short" else ctx.get("max_length")
        return "", f"expected {'at least' if kind == 'string_too_short' else 'at most'} {limit} characters{got}"
    if kind == "string_pattern_mismatch":
        return "", f"{_shown(given)} is not a valid name (it must match {ctx.get('pattern')})"
    return "", _plain(item["msg"]) + got


def _literal_options(expected: str) -> list[str]:
    return re.findall(r"'([^']*)'", expected)


def _plain(message: str) -> str:
    """pydantic's words for an error type not translated above, made to read as ours."""
    for prefix in ("Value error, ", "Assertion failed, "):
        if message.startswith(prefix):
            message = message[len(prefix):]
    return message.replace("Input should be", "expected").replace("Input", "the value")


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _keys_at(model: type[BaseModel], loc: tuple) -> list[str]:
    """The keys a spec may hold at `loc` below `model` (for "did you mean" on an unknown key)."""
    current = _branches(model)
    for part in loc:
        if part in UNION_TAGS:
            continue
        following = []
        for branch in current:
            origin = typing.get_origin(branch)
            if isinstance(part, int) and origin in (list, tuple):
                following += _branches(typing.get_args(branch)[0])
            elif isinstance(part, str) and origin is dict:
                following += _branches(typing.get_args(branch)[1])
            elif isinstance(part, str) and isinstance(branch, type) and issubclass(branch, BaseModel) \
                    and part in branch.model_fields:
                following += _branches(branch.model_fields[part].annotation)
        current = following
    keys = [name for branch in current if isinstance(branch, type) and issubclass(branch, BaseModel)
            for name in branch.model_fields]
    return list(dict.fromkeys(keys))


def _branches(annotation) -> list:
    """The types an annotation allows, unwrapped from Annotated, Optional and unions."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _branches(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [b for arg in typing.get_args(annotation) for b in _branches(arg)]
    return [annotation]
