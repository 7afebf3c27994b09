"""Kinds found by name: the registry behind tasks/providers and tasks/rerankers. A package lists
its built-in plug-ins by name; they are imported on first lookup, so importing a package loads no
model library. A plug-in file never imports its package's registry: the package imports the
plug-ins, not the other way round (no import cycle; tests/test_architecture.py)."""
from __future__ import annotations

import threading
from typing import Callable, Generic, Mapping, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, what: str, builtin: Callable[[], Mapping[str, T] | None]):
        """`builtin()` imports the package's own plug-ins and returns them by kind; they are
        registered once, on the first lookup. (A loader returning None registered them itself,
        from plug-in files that import the registry: the old way, an import cycle.)"""
        self.what = what
        self._builtin = builtin
        self._builtin_loaded = False
        self._loading = threading.RLock()  # two threads' first lookups must not register twice
        self._kinds: dict[str, T] = {}

    def register(self, kind: str) -> Callable[[T], T]:
        def decorator(factory: T) -> T:
            if kind in self._kinds:
                raise ValueError(f"{self.what} kind {kind!r} is registered twice")
            self._kinds[kind] = factory
            return factory

        return decorator

    def _load_builtin(self) -> None:
        if self._builtin_loaded:
            return
        with self._loading:
            if not self._builtin_loaded:
                for kind, factory in (self._builtin() or {}).items():
                    self.register(kind)(factory)
                self._builtin_loaded = True

    def kinds(self) -> list[str]:
        self._load_builtin()
        return sorted(self._kinds)

    def get(self, kind: str) -> T:
        self._load_builtin()
        if kind not in self._kinds:
            raise ValueError(f"unknown {self.what} kind {kind!r} (known: {', '.join(sorted(self._kinds))})")
        return self._kinds[kind]
