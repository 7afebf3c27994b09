"""`kind: precomputed`: vectors a team already has, read from files and keyed by document and query
id, so its index and ANN choices are benchmarked without embedding anything again.

Each file is Parquet (an id column and a vector column: a list or fixed-size list of numbers) or a
`.npy` matrix with its ids in a separate file (one id per line, a JSON list, or Parquet with the id
column), row i of the matrix being id i. Document vectors are keyed by document id, so chunking
must be `none`; with `keyed_by: chunks` the file holds the chunk ids the run makes instead
("<doc_id>#<n>", see tasks/stages/chunk.py). Missing ids, extra ids and a dimension that differs
between the two files are refused before any work (`check_ids`, called by the pre-flight).

The cache identity is the files' content hashes: new vectors in the files are a new cache folder.
"""
from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Literal, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from retbench.tasks.providers.base import Provider, Role
from retbench.tasks.store.files import file_sha256

READ_BATCH = 65536  # rows looked up per call: the lookups are cheap, the cache writes one shard per call


class PrecomputedOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    documents: Path = Field(description="document vectors: Parquet (id and vector columns) or .npy (with document_ids)")
    queries: Path = Field(description="query vectors: Parquet (id and vector columns) or .npy (with query_ids)")
    document_ids: Path | None = Field(None, description="ids of the rows of a .npy documents file: one per line "
                                      "(.txt), a JSON list (.json) or Parquet with the id column")
    query_ids: Path | None = Field(None, description="ids of the rows of a .npy queries file (as document_ids)")
    id_column: str = Field("id", description="the id column of a Parquet file")
    vector_column: str = Field("vector", description="the vector column of a Parquet file")
    keyed_by: Literal["documents", "chunks"] = Field(
        "documents", description="documents: the file holds document ids (chunking must be none); chunks: it holds the "
                                 "run's chunk ids, \"<doc_id>#<n>\"")
    version: str | None = Field(None, description="part of the cache identity, besides the files' hashes")

    @model_validator(mode="after")
    def _ids_for_npy(self):
        for role, path, ids in (("documents", self.documents, self.document_ids), ("queries", self.queries, self.query_ids)):
            if path.suffix == ".npy" and ids is None:
                raise ValueError(f"{role}: a .npy file holds no ids; give {role[:-1]}_ids (the id of each row)")
            if path.suffix not in (".npy", ".parquet"):
                raise ValueError(f"{role}: expected a .parquet or .npy file (got {path.name!r})")
        return self


class VectorFile:
    """One file's ids and vectors: ids read at once, vectors read on demand (a .npy is mapped)."""

    def __init__(self, path: Path, ids_path: Path | None, id_column: str, vector_column: str):
        self.path, self.ids_path = Path(path), ids_path
        self.id_column, self.vector_column = id_column, vector_column
        self._lock = threading.Lock()
        self._matrix: np.ndarray | None = None
        self._ids: list[str] | None = None
        self._rows: dict[str, int] | None = None

    def ids(self) -> list[str]:
        if self._ids is None:
            self._ids = self._read_ids()
        return self._ids

    def rows(self) -> dict[str, int]:
        if self._rows is None:
            ids = self.ids()
            self._rows = {id_: row for row, id_ in enumerate(ids)}
            if len(self._rows) != len(ids):
                seen: set[str] = set()
                repeated = next(i for i in ids if i in seen or seen.add(i))
                raise ValueError(f"{self.path}: id {repeated!r} appears more than once")
        return self._rows

    def _read_ids(self) -> list[str]:
        if self.path.suffix == ".parquet":
            import pyarrow.parquet as pq

            names = pq.read_schema(self.path).names
            for column in (self.id_column, self.vector_column):
                if column not in names:
                    raise ValueError(f"{self.path}: no column {column!r} (found {names}); set id_column / vector_column")
            return [str(v) for v in pq.read_table(self.path, columns=[self.id_column]).column(0).to_pylist()]
        ids_path = Path(self.ids_path)
        if ids_path.suffix == ".json":
            values = json.loads(ids_path.read_text(encoding="utf-8"))
            if not isinstance(values, list):
                raise ValueError(f"{ids_path}: expected a JSON list of ids")
            return [str(v) for v in values]
        if ids_path.suffix == ".parquet":
            import pyarrow.parquet as pq

            return [str(v) for v in pq.read_table(ids_path, columns=[self.id_column]).column(0).to_pylist()]
        return ids_path.read_text(encoding="utf-8").splitlines()

    def matrix(self) -> np.ndarray:
        """The (rows, dim) vectors: a .npy mapped from disk, a Parquet column decoded once."""
        with self._lock:
            if self._matrix is None:
                self._matrix = self._read_matrix()
        return self._matrix

    def _read_matrix(self) -> np.ndarray:
        if self.path.suffix == ".npy":
            matrix = np.load(self.path, mmap_mode="r")
            if matrix.ndim != 2:
                raise ValueError(f"{self.path}: expected a 2-d matrix (rows, dim), found shape {matrix.shape}")
            if len(self.ids()) != matrix.shape[0]:
                raise ValueError(f"{self.path}: {matrix.shape[0]} rows but {len(self.ids())} ids in {self.ids_path}")
            return matrix
        import pyarrow as pa
        import pyarrow.parquet as pq

        column = pq.read_table(self.path, columns=[self.vector_column]).column(0).combine_chunks()
        if not (pa.types.is_list(column.type) or pa.types.is_large_list(column.type)
                or pa.types.is_fixed_size_list(column.type)):
            raise ValueError(f"{self.path}: column {self.vector_column!r} is {column.type}, expected a list of numbers")
        if column.null_count:
            raise ValueError(f"{self.path}: {column.null_count} rows of {self.vector_column!r} are null")
        if pa.types.is_fixed_size_list(column.type):
            dim = column.type.list_size
        else:
            lengths = np.asarray(column.value_lengths())
            if len(lengths) and (lengths != lengths[0]).any():
                odd = int(np.flatnonzero(lengths != lengths[0])[0])
                raise ValueError(f"{self.path}: vectors of different lengths: id {self.ids()[0]!r} has {lengths[0]}, "
                                 f"id {self.ids()[odd]!r} has {lengths[odd]}")
            dim = int(lengths[0]) if len(lengths) else 0
        values = column.flatten().to_numpy(zero_copy_only=False).astype(np.float32, copy=False)
        return values.reshape(-1, dim)

    def dim(self) -> int:
        if self.path.suffix == ".npy":
            return int(self.matrix().shape[1])
        import pyarrow as pa
        import pyarrow.parquet as pq

        field_type = pq.read_schema(self.path).field(self.vector_column).type
        if pa.types.is_fixed_size_list(field_type):
            return field_type.list_size
        return int(self.matrix().shape[1])


class PrecomputedProvider(Provider):
    kind = "precomputed"
    Options = PrecomputedOptions
    keyed_by_id = True  # the embed stage hands it ids, not texts (and keys the cache by them)

    def __init__(self, **options):
        super().__init__(**options)
        o = self.options
        self.files = {"document": VectorFile(o.documents, o.document_ids, o.id_column, o.vector_column),
                      "query": VectorFile(o.queries, o.query_ids, o.id_column, o.vector_column)}

    def fingerprint(self) -> dict:
        o = self.options
        digest = {name: file_sha256(path) if path is not None else None for name, path in
                  (("documents", o.documents), ("queries", o.queries), ("document_ids", o.document_ids),
                   ("query_ids", o.query_ids))}
        return {"kind": self.kind, **digest, "id_column": o.id_column, "vector_column": o.vector_column,
                "keyed_by": o.keyed_by, "version": o.version}

    def declared_dim(self) -> int | None:
        return None  # read from the files at the pre-flight, not at spec load

    def file_id(self, id_: str, role: Role) -> str:
        """The id the file holds for a chunk id (documents keyed by document: "<doc_id>#0" -> doc_id)."""
        if role == "document" and self.options.keyed_by == "documents":
            return id_.rpartition("#")[0]
        return id_

    def encode(self, texts: list[str], role: Role) -> np.ndarray:
        vector_file = self.files[role]
        rows = vector_file.rows()
        positions = np.fromiter((rows[self.file_id(t, role)] for t in texts), dtype=np.int64, count=len(texts))
        order = np.argsort(positions, kind="stable")  # a mapped file is read front to back
        out = np.empty((len(texts), vector_file.dim()), dtype=np.float32)
        out[order] = vector_file.matrix()[positions[order]]
        return out

    def plan_batches(self, texts: Sequence[str], role: Role, batch_size: int) -> list[list[int]]:
        # Large calls in file order: a lookup costs nothing next to writing a cache shard per call.
        rows = self.files[role].rows()
        order = sorted(range(len(texts)), key=lambda i: rows.get(self.file_id(texts[i], role), -1))
        size = max(batch_size, READ_BATCH)
        return [order[start:start + size] for start in range(0, len(order), size)]

    def token_counts(self, texts: Sequence[str], role: Role) -> tuple[list[int], str]:
        return [0] * len(texts), "none"  # nothing is sent anywhere

    def without_window(self) -> str:
        return "none cut here: the vectors were made elsewhere"

    def check_ids(self, needed: dict[str, set[str]], known: dict[str, set[str] | None], chunking: str) -> list[str]:
        """What is wrong between the files and the run's ids, said before any work: ids the run
        needs (role -> chunk or query ids) that have no vector, ids in a file that the collection
        does not know (role -> its ids; None: not checked, e.g. queries of another split that the
        file may hold), a dimension that differs between the files, chunking that does not fit."""
        o = self.options
        if o.keyed_by == "documents" and chunking != "none":
            return [f"keyed_by documents needs chunking: none (chunking is {chunking!r}): a file of document vectors "
                    f"holds one vector per document; set chunking.strategy: none, or write the run's chunk ids "
                    f"(\"<doc_id>#<n>\") into the file and set keyed_by: chunks"]
        problems: list[str] = []
        dims = {}
        for role, vector_file in self.files.items():
            name = "documents" if role == "document" else "queries"
            try:
                have = set(vector_file.rows())
                dims[role] = vector_file.dim()
            except (OSError, ValueError) as error:
                problems.append(f"{name}: {error}")
                continue
            wanted = {self.file_id(i, role) for i in needed[role]}
            missing = sorted(wanted - have)
            if missing:
                problems.append(f"{name}: {len(missing)} of the {len(wanted)} {role} ids this run needs have no vector "
                                f"in {vector_file.path.name} (e.g. {', '.join(map(repr, missing[:3]))})")
            if known.get(role) is not None:
                # Keyed by chunks, the collection's ids are the chunks the run cuts.
                known_ids = set(needed[role]) if role == "document" and o.keyed_by == "chunks" else known[role]
                extra = sorted(have - known_ids)
                if extra:
                    problems.append(f"{name}: {vector_file.path.name} holds {len(extra)} ids the collection does not have "
                                    f"(e.g. {', '.join(map(repr, extra[:3]))}): vectors of another collection?")
        if len(set(dims.values())) > 1:
            problems.append(f"the document vectors are {dims['document']}-dimensional but the query vectors "
                            f"{dims['query']}-dimensional: both must come from one model")
        return problems


__all__ = ["PrecomputedProvider", "PrecomputedOptions", "VectorFile"]
