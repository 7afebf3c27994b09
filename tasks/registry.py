"""Kinds found by name: the registry behind tasks/providers and tasks/rerankers. Each plug-in
file registers its class under a `kind`; the built-in files are imported on first lookup, so
importing a package loads no model library."""
from __future__ import annotations

from typing import Callable, Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, what: str, load_builtin: Callable[[], None]):
        self.what = what
        self._load_builtin = load_builtin
        self._kinds: dict[str, T] = {}

    def register(self, kind: str) -> Callable[[T], T]:
        def decorator(factory: T) -> T:
            if kind in self._kinds:
                raise ValueError(f"{self.what} kind {kind!r} is registered twice")
            self._kinds[kind] = factory
            return factory

        return decorator

    def kinds(self) -> list[str]:
        self._load_builtin()
        return sorted(self._kinds)

    def get(self, kind: str) -> T:
        self._load_builtin()
        if kind not in self._kinds:
            raise ValueError(f"unknown {self.what} kind {kind!r} (known: {', '.join(sorted(self._kinds))})")
        return self._kinds[kind]
