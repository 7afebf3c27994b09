"""Spec sections for the cheapest interventions compared as settings: named chunking configs
(see spec.py) and named query-preprocessing variants, with their rewrite-table files."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

DEFAULT_CHUNKING = "default"  # name of the chunking config written in the single form
RAW_QUERIES = "raw"  # the queries as written: the baseline of every query variant
ARROW = "->"


class RewriteError(ValueError):
    """A rewrite file that cannot be used; the message names file:line."""


class QueryVariantSpec(BaseModel):
    """One named preprocessing of the query texts, applied before embedding, in this order:
    Unicode normalisation, whitespace, lowercase, rewrites, prefix."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=40)
    unicode: Literal["nfc", "nfkc"] | None = None
    whitespace: bool = Field(False, description="collapse runs of whitespace to one space, strip the ends")
    lowercase: bool = False
    rewrite_file: Path | None = Field(None, description="lines `from -> to`; whole-word, case-insensitive")
    prefix: str | None = Field(None, description="text put before every query (an instruction)")

    @model_validator(mode="after")
    def _does_something(self):
        if not (self.unicode or self.whitespace or self.lowercase or self.rewrite_file or self.prefix):
            raise ValueError(f"query variant {self.name!r} changes nothing; set unicode, whitespace, lowercase, "
                             "rewrite_file or prefix")
        if self.name == RAW_QUERIES:
            raise ValueError(f"query variant name {RAW_QUERIES!r} is reserved for the queries as written")
        return self


class QueriesSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    variants: list[QueryVariantSpec] = Field(default_factory=list)


class FilterHNSWSpec(BaseModel):
    """The HNSW index the filter sweep builds on the run's vectors (stored, shared with the ANN sweep)."""

    model_config = ConfigDict(extra="forbid")

    M: int = Field(32, ge=2, description="build-time graph degree")
    ef_construction: int = Field(40, ge=1, description="build-time")
    ef_search: list[int] = Field(default_factory=lambda: [16, 64, 256], description="query-time, each a row")

    @model_validator(mode="after")
    def _positive(self):
        if not self.ef_search or any(e < 1 for e in self.ef_search):
            raise ValueError("ef_search must be a non-empty list of positive integers")
        self.ef_search = sorted(set(self.ef_search))
        return self


class FilterSweepSpec(BaseModel):
    """Recall that a metadata filter costs the IVF and HNSW indexes, against filtered exact search,
    on the run's own vectors with synthetic filters of these selectivities (tasks/stages/filtered_ann.py)."""

    model_config = ConfigDict(extra="forbid")

    selectivities: list[float] = Field(default_factory=lambda: [0.5, 0.1, 0.01])
    kinds: list[Literal["random", "correlated"]] = Field(default_factory=lambda: ["random", "correlated"])
    k: int = Field(10, ge=1)
    overfetch: list[int] = Field(default_factory=lambda: [10], description="post-filtering after fetching k x factor")
    seed: int = 0
    hnsw: FilterHNSWSpec | None = Field(default_factory=FilterHNSWSpec, description="null: IVF only")

    @model_validator(mode="after")
    def _fractions(self):
        if not self.selectivities or any(not 0 < s <= 1 for s in self.selectivities):
            raise ValueError("selectivities must be a non-empty list of fractions in (0, 1]")
        return self


def repeated_names(key: str, names: list[str]) -> None:
    """Refuse a name given twice in the list at `key`, naming both positions."""
    first: dict[str, int] = {}
    for i, name in enumerate(names):
        if name in first:
            raise ValueError(f"{key}[{i}].name: {name!r} repeats {key}[{first[name]}].name; names must be unique")
        first[name] = i


def resolve_rewrite_files(queries: QueriesSpec, resolve: Callable[[Path | None], Path | None]) -> QueriesSpec:
    variants = [v.model_copy(update={"rewrite_file": resolve(v.rewrite_file)}) for v in queries.variants]
    return queries.model_copy(update={"variants": variants})


def read_rewrites(path: str | Path) -> list[tuple[str, str]]:
    """(from, to) pairs of a rewrite file: one `from -> to` per line; blank lines and lines
    starting with # are skipped. Refused: a line without exactly one `->`, an empty side, and a
    `from` given twice (which `to` wins would be a guess)."""
    path = Path(path)
    if not path.is_file():
        raise RewriteError(f"{path}: missing; expected a rewrite file of `from -> to` lines")
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except UnicodeDecodeError as error:
        raise RewriteError(f"{path}: not UTF-8 text (invalid byte at offset {error.start})") from None
    pairs: list[tuple[str, str]] = []
    seen: dict[str, int] = {}
    for lineno, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        parts = text.split(ARROW)
        if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
            raise RewriteError(f"{path}:{lineno}: expected `from -> to` with text on both sides of one `->`, "
                               f"found {text!r}")
        source, target = parts[0].strip(), parts[1].strip()
        folded = source.casefold()
        if folded in seen:
            raise RewriteError(f"{path}:{lineno}: {source!r} is rewritten already at line {seen[folded]}")
        seen[folded] = lineno
        pairs.append((source, target))
    return pairs
