"""The spec's optional top-level sections that turn side stages on, one module each: a module
here declares `SECTION = SpecSection(name, model, description)` and the spec gains that key
(tasks/config/spec.py), so a new side stage's configuration is one new file in this folder."""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass

from pydantic import BaseModel


@dataclass(frozen=True)
class SpecSection:
    """`name:` in the spec, validated by `model`; absent (None) means the side stage is off."""

    name: str
    model: type[BaseModel]
    description: str


def spec_sections() -> list[SpecSection]:
    """Every `SECTION` of the modules in this package, by module name."""
    found = []
    for module in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        section = getattr(importlib.import_module(f"{__name__}.{module.name}"), "SECTION", None)
        if not isinstance(section, SpecSection):
            raise TypeError(f"{__name__}.{module.name}: expected a module-level SECTION = SpecSection(...), "
                            f"found {type(section).__name__}")
        found.append(section)
    names = [s.name for s in found]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"spec sections declared twice: {repeated}")
    return found
