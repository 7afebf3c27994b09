"""Kinds found by name: the registry behind tasks/providers and tasks/rerankers. A package lists
its built-in plug-ins by name; they are imported on first lookup, so importing a package loads no
model library. A plug-in file never imports its package's registry: the package imports the
plug-ins, not the other way round (no import cycle; tests/test_architecture.py). After the built-in
kinds, the first lookup loads the plug-ins of installed packages and of the spec (tasks/plugins.py);
every kind remembers where it came from (`origins`, what `retbench plugins` lists)."""
from __future__ import annotations

import inspect
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
        self._busy = False
        self._kinds: dict[str, T] = {}
        self._origins: dict[str, str] = {}

    def register(self, kind: str, origin: str | None = None) -> Callable[[T], T]:
        def decorator(factory: T) -> T:
            from retbench.tasks.plugins import current_origin

            if kind in self._kinds and not _same(self._kinds[kind], factory):
                raise ValueError(f"{self.what} kind {kind!r} is registered twice: by {self._origins[kind]} and by "
                                 f"{origin or current_origin() or _defined_in(factory)}")
            self._kinds[kind] = factory
            self._origins[kind] = origin or current_origin() or _defined_in(factory)
            return factory

        return decorator

    def _load_builtin(self) -> None:
        if self._builtin_loaded:
            return
        with self._loading:
            if self._builtin_loaded or self._busy:  # a plug-in looking kinds up while it loads
                return
            self._busy = True
            try:
                for kind, factory in (self._builtin() or {}).items():
                    self.register(kind, origin="built-in")(factory)
                from retbench.tasks.plugins import load_all

                load_all()
                self._builtin_loaded = True
            finally:
                self._busy = False

    def origins(self) -> dict[str, str]:
        """kind -> where it came from: built-in, an entry point, a spec plug-in, or its module."""
        self._load_builtin()
        return dict(sorted(self._origins.items()))

    def kinds(self) -> list[str]:
        self._load_builtin()
        return sorted(self._kinds)

    def get(self, kind: str) -> T:
        self._load_builtin()
        if kind not in self._kinds:
            raise ValueError(f"unknown {self.what} kind {kind!r} (known: {', '.join(sorted(self._kinds))})")
        return self._kinds[kind]


def _same(a, b) -> bool:
    """The same kind registered again: one object, or one class or function defined again by a
    module imported a second time. Two instances (readers, index kinds) are the same only if identical."""
    if a is b:
        return True
    named = lambda f: isinstance(f, type) or inspect.isfunction(f)  # noqa: E731
    return named(a) and named(b) and (a.__module__, a.__qualname__) == (b.__module__, b.__qualname__)


def _defined_in(factory) -> str:
    module = getattr(factory, "__module__", None) or type(factory).__module__
    return f"module {module}"
