"""What an index kind declares: its build parameters (they name the file), its query parameter
(swept without rebuilding), how to build it with FAISS, how to search it (with an IDSelector for
filters) and how many bytes a vector costs. The stages know no kind by name; they ask this.

FAISS is imported inside the methods only: the spec reads the kinds' parameters at load, and
loading a spec must not load FAISS.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, ClassVar

ADD_BATCH = 65_536  # rows added at a time: FAISS copies what it is given, so no full-size copy


@dataclass(frozen=True)
class Parameter:
    """One build parameter: its name, its label in the file name, its default (None: derived at
    run time, or not used by this setting) and the values it may take."""

    name: str
    label: str | None = None  # in the file name; default: the name
    default: Any = None
    type: type = int
    choices: tuple = ()
    minimum: int | None = 1
    required: bool = False  # an `indexes.<kind>` entry must give it (nothing to derive it from)

    def check(self, value: Any, where: str) -> Any:
        """The value, or a ValueError naming `where` (a key path) and what was expected."""
        if value is None:
            return None
        if self.choices:
            if value not in self.choices:
                raise ValueError(f"{where}: expected one of {', '.join(map(str, self.choices))} (got {value!r})")
            return value
        if self.type is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"{where}: expected an integer (got {value!r})")
        if self.minimum is not None and value < self.minimum:
            raise ValueError(f"{where}: expected an integer >= {self.minimum} (got {value!r})")
        return value


class IndexKind:
    """Base of every index kind; a kind module subclasses it and registers one instance
    (tasks/indexes/__init__.py: `register`)."""

    name: ClassVar[str]
    build_parameters: ClassVar[tuple[Parameter, ...]] = ()
    # The query-time parameter as the sweep table and the spec name it (None: nothing to tune),
    # and the values the sweep and the `indexes:` entry try when the spec gives none.
    query_parameter: ClassVar[str | None] = None
    query_grid_default: ClassVar[tuple[int, ...]] = ()
    binary: ClassVar[bool] = False  # codes searched by Hamming distance (faiss.IndexBinary)

    # --- parameters and file name -----------------------------------------------------------

    def parameter_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.build_parameters)

    def complete(self, params: dict[str, Any]) -> dict[str, Any]:
        """Every declared build parameter, the missing ones at their defaults; unknown names refused."""
        unknown = sorted(set(params) - set(self.parameter_names()))
        if unknown:
            expected = ", ".join(self.parameter_names()) or "none"
            raise ValueError(f"{self.name} index: unknown build parameter(s) {unknown} (expected: {expected})")
        return {p.name: params.get(p.name, p.default) for p in self.build_parameters}

    def validate(self, params: dict[str, Any]) -> None:
        """Refuse a setting that cannot be built (called for every settings value made)."""
        for parameter in self.build_parameters:
            parameter.check(params[parameter.name], f"{self.name} index: {parameter.name}")

    def build_params(self, params: dict[str, Any]) -> dict[str, Any]:
        """The parameters that matter for this setting, in a fixed order (the sweep table's
        `build_params`, and the file name)."""
        return {name: params[name] for name in self.parameter_names()}

    def file_name(self, params: dict[str, Any]) -> str:
        labels = {p.name: p.label or p.name for p in self.build_parameters}
        named = "".join(f"_{labels[name]}-{value}" for name, value in self.build_params(params).items())
        return f"{self.name}{named}.faiss"

    def bytes_per_vector(self, dim: int, params: dict[str, Any]) -> float:
        """What one vector costs in the index (codes plus ids and links), a declared estimate;
        fewer than 4 * dim means it is a compressed kind (the cheaper-variants table)."""
        return 4.0 * dim

    def search_bytes_per_vector(self, dim: int, query_params: dict[str, Any]) -> int:
        """Bytes a vector needs besides the index to search with these query parameters (the
        sweep's `rescore_bytes_per_vector`)."""
        return 0

    def is_compressed(self, dim: int, params: dict[str, Any]) -> bool:
        return self.bytes_per_vector(dim, params) < 4 * dim

    # --- the `indexes:` entry of the spec and the sweep grid --------------------------------

    def check_entry(self, entry: dict[str, Any], where: str) -> dict[str, Any]:
        """An `indexes.<kind>` entry of the spec (build parameters, and the query parameter as a
        list), checked against what the kind declares; errors name the key path."""
        allowed = [*self.parameter_names(), *([self.query_parameter] if self.query_parameter else [])]
        for parameter in self.build_parameters:
            if parameter.required and entry.get(parameter.name) is None:
                raise ValueError(f"{where}.{parameter.name}: required (the {self.name} index cannot derive it)")
        for key, value in entry.items():
            if key not in allowed:
                raise ValueError(f"{where}.{key}: unknown key (expected: {', '.join(allowed) or 'none'})")
            if key == self.query_parameter:
                if not isinstance(value, list) or not value or any(isinstance(v, bool) or not isinstance(v, int) or v < 0
                                                                   for v in value):
                    raise ValueError(f"{where}.{key}: expected a non-empty list of integers >= 0 (got {value!r})")
            else:
                next(p for p in self.build_parameters if p.name == key).check(value, f"{where}.{key}")
        return entry

    def plan(self, entry: dict[str, Any], n_vectors: int) -> tuple[dict[str, Any], list[dict], list[str]]:
        """(build parameters, query-parameter dicts, notes) for an `indexes.<kind>` entry on
        `n_vectors` vectors."""
        params = {k: v for k, v in entry.items() if k != self.query_parameter}
        if not self.query_parameter:
            return params, [{}], []
        values = entry.get(self.query_parameter) or self.query_grid_default
        return params, [{self.query_parameter: v} for v in sorted(set(values))], []

    def sweep_grid(self, section: Any, n_vectors: int, dim: int) -> list[tuple[dict[str, Any], list[dict]]]:
        """(build parameters, query-parameter dicts) per index the sweep builds from its
        `sweep.<kind>` section. The generic section is a mapping of build parameter -> list of
        values (every combination is built) and the query parameter -> list of values."""
        import itertools

        section = dict(section or {})
        names = list(self.parameter_names())
        choices = [section.get(name) or [None] for name in names]
        if self.query_parameter:
            queries = [{self.query_parameter: v} for v in section.get(self.query_parameter) or self.query_grid_default]
        else:
            queries = [{}]
        return [({n: v for n, v in zip(names, combo) if v is not None}, queries) for combo in itertools.product(*choices)]

    # --- building and searching -------------------------------------------------------------

    def factory(self, dim: int, params: dict[str, Any]):
        """The empty FAISS index (inner product) for this setting."""
        raise NotImplementedError(f"{self.name} index: no factory")

    def training_rows(self, params: dict[str, Any]) -> int | None:
        """How many vectors to sample to train the index (None: nothing to train)."""
        return None

    def before_training(self, index, params: dict[str, Any]) -> None:
        """Anything to set on the index before `train` (e.g. the k-means seed)."""

    def build(self, vectors, params: dict[str, Any]):
        """(index, train seconds, build seconds = train + add) over unit vectors.

        `vectors` is a matrix, or a row source with `shape` and row indexing
        (tasks/stages/build_vectors.py)."""
        import numpy as np

        n, dim = vectors.shape
        started = time.perf_counter()
        index = self.trained(vectors, params)
        train_seconds = time.perf_counter() - started
        for start in range(0, n, ADD_BATCH):
            index.add(np.ascontiguousarray(vectors[start : start + ADD_BATCH], dtype=np.float32))
        return index, train_seconds, time.perf_counter() - started

    def training_sample(self, n_vectors: int, params: dict[str, Any]):
        """The sorted row numbers `build` trains on (None: nothing to train): a seeded sample, so
        a sharded build (tasks/stages/sharded_index.py) reads exactly these rows and no others."""
        import numpy as np

        train = self.training_rows(params)
        if not train:
            return None
        rng = np.random.default_rng(params.get("seed", 0))
        return np.sort(rng.choice(n_vectors, size=min(n_vectors, train), replace=False))

    def trained(self, vectors, params: dict[str, Any]):
        """The empty index, trained on `training_sample`'s rows of `vectors` (anything with
        `shape` whose indexing by a row array gives those rows)."""
        import numpy as np

        n, dim = vectors.shape
        index = self.factory(dim, params)
        rows = self.training_sample(n, params)
        if rows is not None:
            self.before_training(index, params)
            index.train(np.ascontiguousarray(vectors[rows], dtype=np.float32))
        return index

    def set_query_params(self, index, query_params: dict[str, Any]) -> None:
        """Set the query-time parameters on a loaded index (FAISS's ParameterSpace names)."""
        import faiss

        for name, value in query_params.items():
            faiss.ParameterSpace().set_index_parameter(index, name, value)

    def search_parameters(self, index, query_params: dict[str, Any], selector=None):
        """faiss.SearchParameters for one search: the query parameters (the index's own when
        not given) and the IDSelector of a filter; None when there is nothing to pass."""
        import faiss

        return faiss.SearchParameters(sel=selector) if selector is not None else None

    def owns(self, index) -> bool:
        """Whether a loaded index is one of this kind (for callers that hold only the index)."""
        return False

    def run_label(self, query_params: dict[str, Any]) -> str:
        """The run's `index` column: the kind, and any query parameter but nprobe (which has
        its own column) that is set, e.g. `binary-rescore100`."""
        return self.name + "".join(f"-{k}{v}" for k, v in query_params.items() if k != "nprobe" and v)
