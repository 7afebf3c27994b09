"""A setting as one frozen value: its first stage, fusion and rerank steps, chunking and query
variant, with one canonical `label` (the `setting` column of every table) and one stable `key`.

The label is the name a `systems:` entry uses for the stage, so what a table shows can be pasted
into a spec: a dense first stage is `<provider>/<index kind>` (a chunking variant
`<provider>@<chunking>/<index>`, a query variant `<provider>+<variant>/<index>`), BM25 is
`bm25:<name>`, a `systems:` entry is its name, and a named system's hybrid before its reranker is
`<system>/rrf`. The index kind's query parameters (IVF's nprobe) are the `params` column, so a
label and its params name one row. The columns `provider` (today's names: a provider with its
variant marks, a BM25 config's name, a system's name), `index` and `nprobe` are derived from the
setting, kept for downstream readers.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

from retbench.tasks.config.variants import RAW_QUERIES
from retbench.tasks.store.files import stable_hash

if TYPE_CHECKING:
    from retbench.tasks.config.systems import SystemSpec


def _sorted_pairs(values: dict[str, Any] | None) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted((values or {}).items()))


@dataclass(frozen=True)
class FirstStage:
    """A dense search (an embedding provider over an index kind, with that kind's query
    parameters) or a BM25 search (a `lexical:` config)."""

    provider: str | None = None
    index: str | None = None
    query_params: tuple[tuple[str, Any], ...] = ()  # sorted (name, value) pairs, e.g. (("nprobe", 4),)
    lexical: str | None = None

    def __post_init__(self):
        if (self.lexical is None) == (self.provider is None):
            raise ValueError(f"a first stage is dense (provider and index) or bm25 (lexical), not both nor neither: {self!r}")
        if self.provider is not None and not self.index:
            raise ValueError(f"dense first stage {self.provider!r} needs an index kind")

    @classmethod
    def dense(cls, provider: str, index: str, query_params: dict[str, Any] | None = None) -> FirstStage:
        return cls(provider=provider, index=index, query_params=_sorted_pairs(query_params))

    @classmethod
    def bm25(cls, lexical: str) -> FirstStage:
        return cls(lexical=lexical)

    @property
    def index_kind(self) -> str:
        return "bm25" if self.lexical is not None else self.index

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.query_params)

    def canonical(self) -> dict:
        if self.lexical is not None:
            return {"bm25": self.lexical}
        return {"dense": self.provider, "index": self.index, "params": self.params}


@dataclass(frozen=True)
class Fusion:
    """Two or more settings fused into one run: `rrf` (any number of inputs) or `score` (two)."""

    inputs: tuple[Setting, ...]
    method: str = "rrf"
    params: tuple[tuple[str, Any], ...] = ()  # the fusion's own parameters (k, normalization, alpha, ...), sorted

    def __post_init__(self):
        if len(self.inputs) < 2:
            raise ValueError(f"a fusion needs 2 or more inputs (got {len(self.inputs)})")
        if self.method == "score" and len(self.inputs) != 2:
            raise ValueError(f"score fusion weighs exactly 2 inputs with alpha (got {len(self.inputs)})")

    @property
    def index_kind(self) -> str:
        """The `index` column of a fused run: `rrf`, or `fusion-<normalization>` for score fusion."""
        return "rrf" if self.method == "rrf" else f"fusion-{dict(self.params).get('normalization', 'minmax')}"

    def canonical(self) -> dict:
        return {"fusion": self.method, "params": dict(self.params), "inputs": [i.canonical() for i in self.inputs]}


@dataclass(frozen=True)
class Rerank:
    """The top `top_n` documents of one setting re-scored by a reranker."""

    input: Setting
    reranker: str
    top_n: int

    @property
    def index_kind(self) -> str:
        return f"{self.input.index}+{self.reranker}"

    def canonical(self) -> dict:
        return {"rerank": self.reranker, "top_n": self.top_n, "input": self.input.canonical()}


Stage = Union[FirstStage, Fusion, Rerank]


@dataclass(frozen=True)
class Setting:
    """What one row of a table was computed with.

    `chunking` is None for the spec's first (baseline) chunking config; `name` is a `systems:`
    entry's name (its label and provider column); `part_of` names the system an unnamed inner
    stage belongs to (a named system's hybrid before its reranker: label `<system>/rrf`)."""

    stage: Stage
    chunking: str | None = None
    query_variant: str = RAW_QUERIES
    name: str | None = None
    part_of: str | None = None

    @property
    def variant_label(self) -> str:
        """A dense first stage's provider with its variant marks: `minilm`, `minilm@sent40`, `minilm+typos`."""
        stage = self.stage
        base = stage.provider if isinstance(stage, FirstStage) and stage.provider else ""
        chunking = f"@{self.chunking}" if self.chunking is not None else ""
        query = f"+{self.query_variant}" if self.query_variant != RAW_QUERIES else ""
        return f"{base}{chunking}{query}"

    @property
    def label(self) -> str:
        """The `setting` column: a system's name, a provider with its variant marks, a BM25 config's
        name; an unnamed composition spells out its stages, e.g. `rrf(minilm/flat, bm25:plain) >> ce@100`."""
        if self.name is not None:
            return self.name
        if self.part_of is not None:
            return f"{self.part_of}/{self.index}"
        stage = self.stage
        if isinstance(stage, FirstStage):
            return f"bm25:{stage.lexical}" if stage.lexical is not None else f"{self.variant_label}/{stage.index}"
        if isinstance(stage, Fusion):
            return f"{stage.index_kind}({', '.join(i.label for i in stage.inputs)})"
        return f"{stage.input.label} >> {stage.reranker}@{stage.top_n}"

    @property
    def provider(self) -> str:
        """The derived `provider` column (today's names): a dense stage's provider with its variant
        marks, a BM25 config's name, a system's name (also for a system's inner hybrid)."""
        if self.part_of is not None:
            return self.part_of
        stage = self.stage
        if self.name is None and isinstance(stage, FirstStage):
            return stage.lexical if stage.lexical is not None else self.variant_label
        return self.label

    @property
    def index(self) -> str:
        """The derived `index` column: the index kind, `bm25`, `rrf`, `fusion-minmax`, `flat+<reranker>`."""
        return self.stage.index_kind

    @property
    def params(self) -> dict[str, Any]:
        """The query parameters: a first stage's own, a reranked setting's input's, none for a fusion."""
        stage = self.stage
        if isinstance(stage, FirstStage):
            return stage.params
        return stage.input.params if isinstance(stage, Rerank) else {}

    @property
    def params_json(self) -> str:
        """The `params` column: JSON with sorted keys, `{}` when there is none."""
        return json.dumps(self.params, sort_keys=True, separators=(", ", ": "))

    @property
    def nprobe(self) -> int | None:
        """The derived `nprobe` column."""
        return self.params.get("nprobe")

    def canonical(self) -> dict:
        """What the setting computes, without its display names (two names for one computation share a key)."""
        return {"stage": self.stage.canonical(), "chunking": self.chunking, "query_variant": self.query_variant}

    @property
    def key(self) -> str:
        return stable_hash("setting-v1", self.canonical())

    def columns(self) -> tuple[str, str, str, str, int | None]:
        """(setting, params, provider, index, nprobe) as the tables hold them."""
        return self.label, self.params_json, self.provider, self.index, self.nprobe


def _frozen(value: Any) -> Any:
    """Lists as tuples, so a stage's parameters can be part of a frozen (hashable) value."""
    return tuple(_frozen(v) for v in value) if isinstance(value, list) else value


def system_settings(system: SystemSpec, inputs: list[Setting]) -> list[Setting]:
    """The settings a `systems:` entry computes, from the settings of the stages it reads (in
    `system.references` order): [hybrid] when it fuses, [reranked] when it reranks one stage,
    [hybrid, reranked] when it does both (the hybrid is then labelled `<name>/rrf`), [renamed]
    when it only names another stage."""
    if system.fusion is not None:
        params = tuple(sorted((k, _frozen(v)) for k, v in system.fusion.model_dump(mode="json").items()))
        fusion = Fusion(tuple(inputs), system.fusion.method, params)
        if system.rerank is None:
            return [Setting(fusion, name=system.name)]
        hybrid = Setting(fusion, part_of=system.name)
        return [hybrid, Setting(Rerank(hybrid, system.rerank, system.top_n), name=system.name)]
    (source,) = inputs
    if system.rerank is not None:
        return [Setting(Rerank(source, system.rerank, system.top_n), name=system.name)]
    return [Setting(source.stage, source.chunking, source.query_variant, name=system.name)]
