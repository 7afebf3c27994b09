"""Code a user brings, found and identified once for the providers and rerankers of kind `python`:
a callable named "module:attribute", searched for in the spec's folders before sys.path, or a live
object handed to `retbench.run` in this process.

Its identity, which the cache is keyed by, is its import name plus a digest of its code: the module
that defines it and the user's own modules it imports (those in the searched folders, not installed
packages), each as its syntax tree without docstrings, so editing the code re-embeds while a changed
comment, docstring or layout does not. Weights or data the code loads from elsewhere are not in it:
a `version` option names those.
"""
from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.machinery
import inspect
import re
import sys
import sysconfig
import threading
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

_SECRET_NAME = re.compile(r"(api_?key|token|secret|password|credential)", re.I)  # kwargs that must not be hashed
_IMPORTING = threading.RLock()  # sys.path and sys.modules are the process's: one import at a time
_LOADED: dict[str, tuple[str, str]] = {}  # module name -> (file, digest of its bytes) when we imported it
_LIVE: dict[str, Any] = {}  # token -> an object handed to retbench.run in this process


class UserCodeError(RuntimeError):
    """User code that cannot be used: not found, raised, or returned something else than asked
    for. The message names the spec key, the callable and what came back (one line)."""


# ---------------------------------------------------------------- live objects (the Python API)


def keep_live(obj: Any, name: str) -> str:
    """Remember `obj` for this process under a token a spec can name (`options.object`)."""
    token = f"{name}@{id(obj):x}"
    _LIVE[token] = obj
    return token


def live_object(token: str, where: str) -> Any:
    if token not in _LIVE:
        raise UserCodeError(
            f"{where}: object {token!r} was handed to retbench.run in another process; an object lives only in the "
            f"process that made it: name it by import path instead (options.callable: \"module:attribute\")")
    return _LIVE[token]


def is_live(token: str) -> bool:
    return token in _LIVE


# ---------------------------------------------------------------- finding and importing a callable


def split_reference(reference: str) -> tuple[str, str]:
    """("package.module", "attribute.path") of "package.module:attribute.path"."""
    module, sep, attribute = reference.partition(":")
    names = module.split(".") + (attribute.split(".") if attribute else [])
    if not sep or not attribute or not all(part.isidentifier() for part in names):
        raise ValueError(f"expected \"module:attribute\" such as \"my_models.embed:embed\" (got {reference!r})")
    return module, attribute


def import_reference(reference: str, folders: Sequence[str | Path], where: str) -> Any:
    """The object named by "module:attribute", its module imported with `folders` searched first
    (the spec's folder, then its python_path). A module of the user's that changed on disk since we
    imported it is imported again, so the code that runs is the code the identity was taken of."""
    module_name, attribute = split_reference(reference)
    with _IMPORTING:
        _put_first_on_path(folders)
        local = local_modules(module_name, folders)
        for name, (path, digest) in local.items():
            if name in sys.modules and _LOADED.get(name) != (str(path), digest):
                del sys.modules[name]  # another folder's module of that name, or older code: import afresh
        try:
            target: Any = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if error.name and module_name.startswith(error.name):
                searched = ", ".join(str(f) for f in folders) or "(none)"
                raise UserCodeError(f"{where}: module {module_name!r} not found (searched {searched}, then sys.path); "
                                    f"put it next to the spec or name its folder in the spec's python_path") from None
            raise UserCodeError(f"{where}: importing {module_name!r} failed: {error}") from error
        except Exception as error:  # noqa: BLE001  the user's module failed while running its top level
            raise UserCodeError(f"{where}: importing {module_name!r} raised {type(error).__name__}: {error}") from error
        for name, (path, digest) in local.items():
            if name in sys.modules:
                _LOADED[name] = (str(path), digest)
    for part in attribute.split("."):
        if not hasattr(target, part):
            known = sorted(n for n in vars(target) if not n.startswith("_")) if hasattr(target, "__dict__") else []
            raise UserCodeError(f"{where}: {reference!r}: {getattr(target, '__name__', target)!r} has no attribute "
                                f"{part!r}" + (f" (it has: {', '.join(known[:12])})" if known else ""))
        target = getattr(target, part)
    return target


def _put_first_on_path(folders: Sequence[str | Path]) -> None:
    for folder in reversed([str(f) for f in folders]):
        if folder in sys.path:
            sys.path.remove(folder)
        sys.path.insert(0, folder)


def _installed_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple({str(Path(paths[key]).resolve()) for key in ("stdlib", "platstdlib", "purelib", "platlib")})


def _is_users(path: Path, roots: Sequence[Path]) -> bool:
    """A file of the user's: inside a searched folder, and not an installed package or the stdlib."""
    text = str(path)
    if any(text.startswith(root + "/") for root in _installed_roots()) or "site-packages" in path.parts:
        return False
    return any(path.is_relative_to(root) for root in roots)


def _find(name: str, roots: Sequence[Path]) -> Path | None:
    """The file of module `name` in `roots` (then sys.path for a package's submodules), found by
    path alone: nothing is executed, unlike importlib.util.find_spec on a dotted name."""
    parts = name.split(".")
    spec = importlib.machinery.PathFinder.find_spec(parts[0], [str(r) for r in roots] + sys.path)
    for depth in range(1, len(parts)):
        if spec is None or not spec.submodule_search_locations:
            return None
        spec = importlib.machinery.PathFinder.find_spec(".".join(parts[: depth + 1]), list(spec.submodule_search_locations))
    if spec is None or not spec.origin or not spec.has_location or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin).resolve()


def _imports_of(tree: ast.AST, module_name: str, is_package: bool) -> Iterable[str]:
    package = module_name if is_package else module_name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".") if package else []
                parts = parts[: len(parts) - node.level + 1] if node.level > 1 else parts
                base = ".".join(parts + ([node.module] if node.module else []))
            if base:
                yield base
            for alias in node.names:
                yield f"{base}.{alias.name}" if base else alias.name


def local_modules(module_name: str, folders: Sequence[str | Path]) -> dict[str, tuple[Path, str]]:
    """The user's modules behind `module_name`: it, its parent packages and what they import from
    the searched folders (or the module's own folder), transitively -> (file, digest of its bytes)."""
    roots = [Path(f).resolve() for f in folders]
    first = _find(module_name, roots)
    if first is None:
        return {}
    top = first.parent if first.name != "__init__.py" else first.parent.parent
    for _ in module_name.split(".")[1:]:
        top = top.parent
    roots.append(top)
    found: dict[str, tuple[Path, str]] = {}
    parts = module_name.split(".")
    todo = [".".join(parts[:n]) for n in range(1, len(parts) + 1)]
    while todo:
        name = todo.pop()
        if name in found:
            continue
        path = _find(name, roots)
        if path is None or not _is_users(path, roots):
            continue
        data = path.read_bytes()
        found[name] = (path, hashlib.sha256(data).hexdigest())
        try:
            tree = ast.parse(data, filename=str(path))
        except SyntaxError:
            continue  # the import reports it, with its line
        todo += [n for n in _imports_of(tree, name, path.name == "__init__.py") if n not in found]
    return found


# ---------------------------------------------------------------- identity


def code_digest(source: str | bytes, filename: str = "<source>") -> str:
    """A digest of the code's meaning: its syntax tree without docstrings or positions, so that
    comments, docstrings and layout do not count. Source that does not parse counts as text."""
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError:
        return hashlib.sha256(source if isinstance(source, bytes) else source.encode("utf-8")).hexdigest()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return hashlib.sha256(ast.dump(tree, annotate_fields=False, include_attributes=False).encode("utf-8")).hexdigest()


def reference_code_identity(reference: str, folders: Sequence[str | Path]) -> str | None:
    """The digest of the code behind "module:attribute": each of its user modules by name and
    code digest (their place on disk is not in it, so a moved project keeps its cache); None
    when the module is not a file of the user's (an installed package: name a `version`)."""
    module_name, _ = split_reference(reference)
    modules = local_modules(module_name, folders)
    if not modules:
        return None
    digest = hashlib.sha256()
    for name in sorted(modules):
        path, _ = modules[name]
        digest.update(f"{name}\0{code_digest(path.read_bytes(), str(path))}\0".encode("utf-8"))
    return digest.hexdigest()


def object_identity(obj: Any) -> dict:
    """What names a live object: its qualified name, the digest of its source (or its class's)
    where Python can find the source, else the installed package and version that defines it."""
    described = obj if (inspect.isfunction(obj) or inspect.ismethod(obj) or inspect.isclass(obj)) else type(obj)
    name = f"{getattr(described, '__module__', '?')}.{getattr(described, '__qualname__', type(obj).__name__)}"
    identity: dict[str, Any] = {"object": name}
    try:
        identity["code"] = code_digest(inspect.getsource(described))
    except (OSError, TypeError):
        identity["code"] = None
    module = sys.modules.get(getattr(described, "__module__", "") or "")
    if identity["code"] is None or (module is not None and _from_installed_package(module)):
        identity["package"] = _package_version(getattr(described, "__module__", "") or "")
    return identity


def _from_installed_package(module) -> bool:
    path = getattr(module, "__file__", None)
    return bool(path) and ("site-packages" in Path(path).parts or "dist-packages" in Path(path).parts)


def _package_version(module_name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, packages_distributions, version

    top = module_name.partition(".")[0]
    for distribution in packages_distributions().get(top, []):
        try:
            return f"{distribution}=={version(distribution)}"
        except PackageNotFoundError:
            continue
    return None


def probe_signature(vectors: np.ndarray) -> str:
    """What an object's vectors look like, coarsely: the signs of 64 fixed projections of each
    probe vector. A model with other weights flips about half of them; the same model on another
    machine (other rounding in the last bits) flips one only when a projection sits within
    rounding of zero. It tells two objects apart whose code reads the same (two models loaded by
    one function), without a full hash that every rounding difference would change."""
    vectors = np.asarray(vectors, dtype=np.float64)
    directions = np.random.default_rng(20261203).standard_normal((vectors.shape[1], 64))
    bits = (vectors @ directions > 0).astype(np.uint8)
    return f"{vectors.shape[1]}d:" + np.packbits(bits, axis=1).tobytes().hex()


# ---------------------------------------------------------------- what comes back


def as_matrix(value: Any, rows: int, where: str) -> np.ndarray:
    """The vectors a user's code returned as a (rows, dim) float32 array: a list of lists, a
    numpy array, a torch tensor or a list of either. Anything else is refused naming `where`."""
    if value is None:
        raise UserCodeError(f"{where} returned None for {rows} texts; expected {rows} vectors")
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor, without importing torch
        value = value.detach().float().cpu().numpy()
    elif isinstance(value, (list, tuple)) and value and hasattr(value[0], "detach"):
        value = [v.detach().float().cpu().numpy() for v in value]
    if isinstance(value, (list, tuple)):
        lengths = [len(v) if hasattr(v, "__len__") and not isinstance(v, (str, bytes)) else None for v in value]
        if any(n is None for n in lengths):
            bad = lengths.index(None)
            raise UserCodeError(f"{where} returned a list whose item {bad} is a {type(value[bad]).__name__}, not a vector")
        if len(set(lengths)) > 1:
            odd = next(i for i, n in enumerate(lengths) if n != lengths[0])
            raise UserCodeError(f"{where} returned ragged vectors: row 0 has {lengths[0]} values, row {odd} has {lengths[odd]}")
    try:
        array = np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError) as error:
        raise UserCodeError(f"{where} returned a {type(value).__name__} that is not numbers ({error})") from None
    if array.ndim != 2:
        raise UserCodeError(f"{where} returned an array shaped {array.shape} for {rows} texts; expected ({rows}, dim)")
    if array.shape[0] != rows:
        raise UserCodeError(f"{where} returned {array.shape[0]} vectors for {rows} texts")
    if array.shape[1] == 0:
        raise UserCodeError(f"{where} returned vectors with no components")
    finite = np.isfinite(array)
    if not finite.all():
        row = int(np.flatnonzero(~finite.all(axis=1))[0])
        value_found = array[row][~finite[row]][0]
        raise UserCodeError(f"{where} returned a non-finite value ({value_found}) in row {row} of {rows}")
    return array


def as_scores(value: Any, count: int, where: str) -> np.ndarray:
    """One float64 score per document, from a list, an array or a tensor."""
    if hasattr(value, "detach") and hasattr(value, "cpu"):
        value = value.detach().float().cpu().numpy()
    try:
        scores = np.asarray(value, dtype=np.float64).reshape(-1) if value is not None else None
    except (TypeError, ValueError) as error:
        raise UserCodeError(f"{where} returned a {type(value).__name__} that is not numbers ({error})") from None
    if scores is None:
        raise UserCodeError(f"{where} returned None for {count} documents; expected {count} scores")
    if len(scores) != count:
        raise UserCodeError(f"{where} returned {len(scores)} scores for {count} documents")
    if not np.isfinite(scores).all():
        bad = int(np.flatnonzero(~np.isfinite(scores))[0])
        raise UserCodeError(f"{where} returned a non-finite score ({scores[bad]}) for document {bad} of {count}")
    return scores


def raised(where: str, error: Exception, what: str) -> UserCodeError:
    """The one line for user code that raised: its own error, where, and on what."""
    message = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return UserCodeError(f"{where} raised {type(error).__name__}{': ' + message if message else ''} ({what}; "
                         f"--debug shows its traceback)")


# ---------------------------------------------------------------- the options both python kinds share


class UserCodeOptions(BaseModel):
    """`options` of the python provider and reranker: what to call, and what names it in the cache."""

    model_config = ConfigDict(extra="forbid")
    callable: str | None = Field(None, description="\"module:attribute\": a function, class, factory or object; the "
                                 "module is found next to the spec first, then in python_path, then on sys.path")
    object: str | None = Field(None, description="set by retbench.run for an object handed to it (this process only)")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="passed to a factory or class once, or to a "
                                   "function on every call; part of the cache identity")
    factory: bool | None = Field(None, description="call the function once with kwargs and use what it returns "
                                 "(default: yes when it can be called with kwargs alone, no when it needs more)")
    version: str | None = Field(None, description="part of the cache identity: change it when something the code "
                                "reads from elsewhere changes (weights, a model folder)")
    hash_source: bool = Field(True, description="the digest of the code (the defining module and the user modules it "
                              "imports, without docstrings and comments) is part of the cache identity; false: only "
                              "the import name, kwargs and version are")
    secret_kwargs: dict[str, str] = Field(default_factory=dict, description="kwarg name -> environment variable holding "
                                          "its value (an API key): read when the code is made, never written into the "
                                          "cache identity, the manifest or a message")
    search_path: list[str] = Field(default_factory=list, description="set by the spec loader: the spec's folder, then "
                                   "python_path; not part of the cache identity")
    where: str = Field("python", description="set by the spec loader: the spec key named in errors")

    @model_validator(mode="after")
    def _one_target(self):
        if (self.callable is None) == (self.object is None):
            raise ValueError("give callable: \"module:attribute\" (a function, class or factory)")
        if self.callable is not None:
            split_reference(self.callable)
        secret_looking = sorted(k for k in self.kwargs if _SECRET_NAME.search(k))
        if secret_looking:
            raise ValueError(f"kwargs.{secret_looking[0]} looks like a secret, and kwargs are written into the cache "
                             f"identity and the manifest: pass it as secret_kwargs: {{{secret_looking[0]}: ENV_VARIABLE}}")
        both = sorted(set(self.kwargs) & set(self.secret_kwargs))
        if both:
            raise ValueError(f"{both[0]} is in kwargs and in secret_kwargs; give it once")
        return self

    @property
    def described(self) -> str:
        """The spec key and the callable, as errors name them."""
        return f"{self.where}, {'callable ' + self.callable if self.callable else 'object'}"

    def target(self) -> Any:
        """What `callable` names (imported) or the live `object`."""
        if self.callable is not None:
            return import_reference(self.callable, self.search_path, self.described)
        return live_object(self.object, self.where)

    def identity(self, kind: str, probe: Any = None) -> dict:
        """The cache identity: kind, kwargs, version, and the import name with its code digest, or
        the live object's identity with `probe()` (a signature of what it returns)."""
        identity: dict[str, Any] = {"kind": kind, "kwargs": self.kwargs, "version": self.version}
        if self.secret_kwargs:
            identity["secret_kwargs"] = sorted(self.secret_kwargs)  # their names only, never their values
        if self.callable is not None:
            identity["callable"] = self.callable
            if self.hash_source:
                identity["code"] = reference_code_identity(self.callable, self.search_path)
            return identity
        described = object_identity(live_object(self.object, self.where))
        identity |= described if self.hash_source else {"object": described["object"]}
        if probe is not None:
            identity["probe"] = probe()
        return identity
