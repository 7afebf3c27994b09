"""MkDocs hook: the reference pages' generated parts, rendered from the code at every build, so
they cannot drift: every spec key (the spec's pydantic models, the plug-in registries' options)
and every command's `--help` (flows/cli.py's argparse parser).

A page asks for a part with a marker line: `<!-- generated: spec-keys -->` or `<!-- generated: cli -->`.
Also usable without MkDocs: `python docs/reference_hook.py spec-keys` prints that part.
"""
from __future__ import annotations

import argparse
import contextlib
import enum
import inspect
import io
import json
import os
import sys
import types
import typing
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pydantic import BaseModel  # noqa: E402
from pydantic_core import PydanticUndefined  # noqa: E402

MARKER = "<!-- generated: {} -->"


# --- types and defaults as a reader of a YAML file sees them ------------------------------------------

def type_name(annotation) -> str:
    """A field's annotation in YAML terms: `int`, `list[int]`, `"nfc" | "raw"`, `Providers` ..."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_name(args[0])
    if origin is typing.Literal:
        return " \\| ".join(json.dumps(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        names = [type_name(a) for a in args if a is not type(None)]
        return " \\| ".join(names) + (" \\| null" if type(None) in args else "")
    if origin in (list, tuple, set, frozenset):
        return f"list[{type_name(args[0])}]" if args else "list"
    if origin is dict:
        return f"map[{type_name(args[0])}, {type_name(args[1])}]" if args else "map"
    if annotation is typing.Any:
        return "any"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "mapping"
    if annotation is Path:
        return "path"
    if annotation is date:
        return "date"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return " \\| ".join(json.dumps(m.value) for m in annotation)
    return getattr(annotation, "__name__", str(annotation))


def default_text(field) -> str:
    if field.default is PydanticUndefined and field.default_factory is None:
        return "**required**"
    value = field.default_factory() if field.default_factory is not None else field.default
    if isinstance(value, BaseModel):
        return "on (its defaults)"
    if value is None:
        return "null"
    if isinstance(value, Path):
        return f"`{value}`"
    return f"`{json.dumps(value, default=str)}`"


_BOUNDS = (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="), ("min_length", "length >="), ("max_length", "length <="))


def constraints(field) -> str:
    """The bounds pydantic checks on a field (`>= 1`, `length >= 1`), as the reader must respect them."""
    found = []
    for item in field.metadata:
        for attribute, sign in _BOUNDS:
            value = getattr(item, attribute, None)
            if value is not None:
                found.append(f"{sign} {value}")
    return ", ".join(found)


def _models_in(annotation) -> list[tuple[str, type[BaseModel]]]:
    """The pydantic models a field holds, each with the path suffix that reaches it ("" or "[]")."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [("", annotation)]
    if origin is typing.Annotated:
        return _models_in(args[0])
    if origin in (typing.Union, types.UnionType):
        return [found for a in args for found in _models_in(a)]
    if origin in (list, tuple):
        return [("[]" + suffix, model) for suffix, model in _models_in(args[0])] if args else []
    return []


def _first_line(doc: str | None) -> str:
    return " ".join((doc or "").strip().split("\n\n")[0].split())


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def key_rows(model: type[BaseModel], prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(key path, type, default, description) for every field of `model`, nested models after their key."""
    rows = []
    for name, field in model.model_fields.items():
        path = f"{prefix}.{name}" if prefix else name
        nested = _models_in(field.annotation)
        description = field.description or ""
        if not description and len(nested) == 1:
            description = _first_line(nested[0][1].__doc__)
        limits = constraints(field)
        description = f"{description} ({limits})" if description and limits else description or (f"({limits})" if limits else "")
        rows.append((path, type_name(field.annotation), default_text(field), _cell(description)))
        for suffix, inner in nested:
            rows.extend(key_rows(inner, path + suffix))
        if model.model_config.get("extra") == "allow" and name == list(model.model_fields)[-1]:
            rows.append((f"{prefix}.<index kind>" if prefix else "<index kind>", "mapping \\| true \\| null", "null",
                         "any registered index kind by its name, with its build parameters and its query parameter "
                         "(see *Index kinds* below)"))
    return rows


def _table(rows, header=("key", "type", "default", "description")) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(f"`{r[0]}`" if i == 0 else r[i] for i in range(len(header))) + " |" for r in rows]
    return "\n".join(lines)


def spec_keys() -> str:
    """Every key of a benchmark spec, then the options of every registered plug-in kind."""
    from retbench.tasks.config.spec import BenchmarkSpec
    from retbench.tasks.datasets import format_reader, known_formats
    from retbench.tasks.indexes import index_kind, known_kinds as index_kinds
    from retbench.tasks.providers import known_kinds as provider_kinds, options_model
    from retbench.tasks.rerankers import _REGISTRY as rerankers, known_kinds as reranker_kinds, reranker_options_model

    parts = ["## Every key", "", _table(key_rows(BenchmarkSpec)), ""]
    parts += ["## Dataset formats and their options", "",
              "`dataset.options` holds the keys its format declares (tasks/datasets/):", "",
              "| format | options |", "|---|---|"]
    for name in known_formats():
        options = sorted(format_reader(name).options - {"name"})
        parts.append(f"| `{name}` | {', '.join(f'`{o}`' for o in options) or '(none)'} |")
    parts += ["", "## Provider kinds and their options", "",
              "`providers[].options`, by `kind` (each kind's `Options` model in tasks/providers/; "
              "unknown keys are refused at load):", ""]
    for kind in provider_kinds():
        parts += [f"### `{kind}`", "", _table(key_rows(options_model(kind))), ""]
    parts += ["## Reranker kinds and their options", "", "`rerankers[].options`, by `kind` (tasks/rerankers/):", ""]
    for kind in reranker_kinds():
        model = reranker_options_model(kind) or _options_model_of_module(rerankers.get(kind))
        if model is not None:
            parts += [f"### `{kind}`", "", _table(key_rows(model)), ""]
        else:
            rows = []
            for name, parameter in inspect.signature(rerankers.get(kind)).parameters.items():
                if parameter.kind in (parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL):
                    continue
                default = "**required**" if parameter.default is parameter.empty else f"`{json.dumps(parameter.default, default=str)}`"
                annotation = parameter.annotation if parameter.annotation is not parameter.empty else "any"
                rows.append((name, _cell(str(annotation)), default, ""))
            parts += [f"### `{kind}`", "", _table(rows) if rows else "(no options)", ""]
    parts += ["## Index kinds", "",
              "`indexes.<kind>` and `sweep.<kind>` (tasks/indexes/): build parameters are single values in "
              "`indexes:` and lists in `sweep:`; the query parameter is a list in both.", "",
              "| kind | build parameters (default) | query parameter (default grid) |", "|---|---|---|"]
    for name in index_kinds():
        kind = index_kind(name)
        build = ", ".join(f"`{p.name}` ({'required' if p.required else ('derived' if p.default is None else p.default)}"
                          f"{'; ' + ' / '.join(map(str, p.choices)) if p.choices else ''})" for p in kind.build_parameters)
        query = f"`{kind.query_parameter}` ({', '.join(map(str, kind.query_grid_default))})" if kind.query_parameter else "none"
        parts.append(f"| `{name}` | {build or 'none'} | {query} |")
    return "\n".join(parts) + "\n"


def _options_model_of_module(factory) -> type[BaseModel] | None:
    """The `...Options` pydantic model a kind's module defines, for a kind that names none as `Options`."""
    module = sys.modules.get(getattr(factory, "__module__", ""))
    found = [value for name, value in vars(module or object()).items() if name.endswith("Options")
             and isinstance(value, type) and issubclass(value, BaseModel) and value.__module__ == module.__name__]
    return found[0] if len(found) == 1 else None


# --- the command line -----------------------------------------------------------------------------------

def cli_help() -> str:
    """`retbench --help` and every subcommand's `--help`, from the parser flows/cli.py builds."""
    from retbench.flows.cli import build_parser

    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        parser = build_parser()
        parts = ["### The full `--help` of each command", "", "```", parser.format_help().rstrip(), "```", ""]
        for name, sub in _subcommands(parser, "retbench"):
            parts += [f"#### `{name} --help`", "", "```", sub.format_help().rstrip(), "```", ""]
    finally:
        if previous is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = previous
    return "\n".join(parts)


def _subcommands(parser: argparse.ArgumentParser, prefix: str):
    """(`retbench judge export`, its parser) for every command and every command of a group, in order."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield f"{prefix} {name}", sub
                yield from _subcommands(sub, f"{prefix} {name}")


GENERATORS = {"spec-keys": spec_keys, "cli": cli_help}


def on_page_markdown(markdown: str, page, config, files) -> str:  # the MkDocs hook
    for name, generate in GENERATORS.items():
        marker = MARKER.format(name)
        if marker in markdown:
            with contextlib.redirect_stdout(io.StringIO()):
                markdown = markdown.replace(marker, generate())
    return markdown


if __name__ == "__main__":
    print(GENERATORS[sys.argv[1]]())
