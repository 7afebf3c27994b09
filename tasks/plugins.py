"""Plug-ins without editing retbench: modules that register providers, rerankers, index kinds or
dataset formats into the registries the built-in kinds use (tasks/registry.py).

Two ways in:
- an installed package declares an entry point in the group `retbench.plugins`; its value is a
  module (imported) or a function (called with no argument) that registers its kinds. Every
  registry loads them on its first lookup, in every process, Dask workers included;
- a spec lists modules under `plugins:`; they are imported before the spec is checked, found
  next to the spec first, then in its `python_path`, then on sys.path. They are remembered in
  the environment (RETBENCH_PLUGINS), so that worker processes started by this one import
  them too; a worker on another host needs the same folders, or the package installed.

Each kind remembers where it came from; `retbench plugins` lists them.
"""
from __future__ import annotations

import contextlib
import contextvars
import importlib
import json
import os
import sys
import threading
from pathlib import Path
from typing import Iterator, Sequence

GROUP = "retbench.plugins"
ENVIRONMENT = "RETBENCH_PLUGINS"  # JSON list of {"module": ..., "folders": [...]}, for child processes

_origin: contextvars.ContextVar[str | None] = contextvars.ContextVar("retbench_plugin_origin", default=None)
_lock = threading.RLock()
_loaded_entry_points = False
_imported: set[str] = set()


class PluginError(RuntimeError):
    """A plug-in that could not be loaded: which one, from where, and why (one line)."""


def current_origin() -> str | None:
    """Where a kind registered now comes from ("entry point ...", "spec plugins: ..."), if known."""
    return _origin.get()


@contextlib.contextmanager
def origin(text: str) -> Iterator[None]:
    token = _origin.set(text)
    try:
        yield
    finally:
        _origin.reset(token)


def load_all() -> None:
    """The installed packages' entry points, and the spec plug-ins a parent process named; once."""
    global _loaded_entry_points
    with _lock:
        if not _loaded_entry_points:
            _loaded_entry_points = True
            _load_entry_points()
        for entry in json.loads(os.environ.get(ENVIRONMENT, "[]")):
            import_plugins([entry["module"]], entry.get("folders", []), remember=False)


def _load_entry_points() -> None:
    from importlib.metadata import entry_points

    for entry in entry_points(group=GROUP):
        distribution = getattr(entry, "dist", None)
        source = f"{distribution.name} {distribution.version}" if distribution is not None else "an installed package"
        where = f"entry point {entry.name} = {entry.value} ({source})"
        with origin(where):
            try:
                loaded = entry.load()
                if callable(loaded) and not isinstance(loaded, type(sys)):
                    loaded()
            except Exception as error:  # noqa: BLE001  a broken plug-in is named, not skipped silently
                raise PluginError(f"plug-in {where} failed to load: {type(error).__name__}: {error}; fix or uninstall "
                                  f"that package") from error


def import_plugins(modules: Sequence[str], folders: Sequence[str | Path], remember: bool = True,
                   where: str = "plugins") -> None:
    """Import the spec's plug-in modules, `folders` searched before sys.path; `remember` passes
    them on to child processes through the environment."""
    folders = [str(f) for f in folders]
    with _lock:
        for folder in reversed(folders):
            if folder in sys.path:
                sys.path.remove(folder)
            sys.path.insert(0, folder)
        for i, module in enumerate(modules):
            if module in _imported:
                continue
            with origin(f"spec plugins: {module}"):
                try:
                    importlib.import_module(module)
                except ModuleNotFoundError as error:
                    if error.name and module.startswith(error.name):
                        raise PluginError(f"{where}[{i}]: module {module!r} not found (searched "
                                          f"{', '.join(folders) or 'no spec folder'}, then sys.path)") from None
                    raise PluginError(f"{where}[{i}]: importing {module!r} failed: {error}") from error
                except Exception as error:  # noqa: BLE001
                    raise PluginError(f"{where}[{i}]: importing {module!r} raised {type(error).__name__}: {error}") from error
            _imported.add(module)
            if remember:
                listed = json.loads(os.environ.get(ENVIRONMENT, "[]"))
                if not any(e["module"] == module for e in listed):
                    os.environ[ENVIRONMENT] = json.dumps(listed + [{"module": module, "folders": folders}])
