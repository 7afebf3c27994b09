"""Spec models for retrieval systems: BM25 first stages, fusion of two or more stages, rerankers,
and `systems:` entries that compose them; `check_references` names every dangling reference."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from retbench.tasks.config.measurement import RerankPricing
from retbench.tasks.config.spec_errors import AtKey, did_you_mean, unknown_name

_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$"
# bm25s's own stop-word lists (by language code), plus a short Hindi list we ship (bm25s has none).
STOPWORD_LANGUAGES = ("en", "de", "nl", "fr", "es", "pt", "it", "ru", "sv", "no", "zh", "tr", "ko", "da", "hi")
BM25_METHODS = ("lucene", "robertson", "atire", "bm25l", "bm25+")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TokenizerSpec(_Strict):
    """How BM25 turns text into terms; the same for documents and queries."""

    lowercase: bool = True
    stopwords: str | list[str] | None = Field(
        "en", description="a language code (en, hi, de, ...), 'none' / null for no stop words, or an explicit list")
    stemmer: str | None = Field(None, description="a PyStemmer algorithm (english, porter, hindi, ...); null: no stemming")
    min_length: int = Field(2, ge=1, description="shorter terms (in code points) are dropped, as bm25s's default does")

    @field_validator("stopwords")
    @classmethod
    def _known_language(cls, value):
        if isinstance(value, str):
            if value.lower() == "none":
                return None
            if value not in STOPWORD_LANGUAGES:
                raise ValueError(f"unknown stop-word language {value!r}{did_you_mean(value, STOPWORD_LANGUAGES)} (known: {', '.join(STOPWORD_LANGUAGES)}, none, or a list)")
        return value

    @field_validator("stemmer")
    @classmethod
    def _known_stemmer(cls, value):
        if value is None:
            return value
        import Stemmer

        if value not in Stemmer.algorithms():
            raise ValueError(f"unknown stemmer {value!r} (PyStemmer knows: {', '.join(Stemmer.algorithms())})")
        return value


class LexicalSpec(_Strict):
    """A BM25 first stage, referred to as `bm25:<name>`."""

    name: str = Field(pattern=_NAME, max_length=64)
    tokenizer: TokenizerSpec = Field(default_factory=TokenizerSpec)
    k1: float = Field(1.2, gt=0)
    b: float = Field(0.75, ge=0, le=1)
    method: Literal["lucene", "robertson", "atire", "bm25l", "bm25+"] = "lucene"
    delta: float = Field(0.5, ge=0, description="only bm25l and bm25+ use it")

    def index_settings(self) -> dict:
        """What changes the index (the name does not)."""
        settings = {"tokenizer": self.tokenizer.model_dump(mode="json"), "k1": self.k1, "b": self.b, "method": self.method}
        if self.method in ("bm25l", "bm25+"):
            settings["delta"] = self.delta
        return settings


class FusionSpec(_Strict):
    """How two first-stage runs become one."""

    method: Literal["rrf", "score"] = "rrf"
    k: int = Field(60, ge=1, description="RRF constant: 1 / (k + rank)")
    normalization: Literal["minmax", "zscore"] = "minmax"
    alpha: float | None = Field(None, ge=0, le=1, description="weight of `first` in score fusion; null: swept on dev")
    alphas: list[float] = Field(default_factory=lambda: [round(0.1 * i, 1) for i in range(11)],
                                description="the grid swept on the dev split when alpha is null")
    measure: str = Field("ndcg@10", description="what the alpha sweep maximises on dev")
    depth: int | None = Field(None, ge=1, description="documents kept per query; default: the spec's depth")

    @field_validator("alphas")
    @classmethod
    def _in_unit_interval(cls, values: list[float]) -> list[float]:
        if not values or any(not 0 <= v <= 1 for v in values):
            raise ValueError("alphas must be a non-empty list of numbers in [0, 1]")
        return sorted(set(values))


class RerankerSpec(_Strict):
    """A reranker, referred to by name from `systems[].rerank`."""

    name: str = Field(pattern=_NAME, max_length=64)
    kind: str
    options: dict[str, Any] = Field(default_factory=dict)
    batch_size: int = Field(32, ge=1, description="documents per call for the kinds that send one query per call "
                                                   "(HTTP APIs); a cross-encoder takes options.batch_size pairs of any queries per call")
    pricing: RerankPricing | None = Field(None, description="per search unit or per token, with the date it was read")

    @model_validator(mode="after")
    def _known_kind(self):
        from retbench.tasks.rerankers import known_kinds

        if self.kind not in known_kinds():
            raise AtKey("kind", unknown_name("reranker kind", self.kind, known_kinds()))
        return self


class SystemSpec(_Strict):
    """One retrieval system: a first stage (a dense `<provider>/<index>`, `bm25:<name>` or the name
    of another system), optionally fused with a `second` one (or `inputs: [a, b, c]`: a fusion of
    two or more), optionally reranked."""

    name: str = Field(pattern=_NAME, max_length=64)
    first: str | None = None
    second: str | None = None
    inputs: list[str] | None = Field(None, description="two or more stages fused (instead of first/second)")
    fusion: FusionSpec | None = None
    rerank: str | None = Field(None, description="the name of an entry in `rerankers:`")
    top_n: int = Field(100, ge=1, description="first-stage documents the reranker re-scores")

    @model_validator(mode="after")
    def _fusion_needs_two(self):
        if self.inputs is not None:
            if self.first is not None or self.second is not None:
                raise ValueError(f"system {self.name!r}: give either `inputs` or `first` [+ `second`], not both")
            if len(self.inputs) < 2:
                raise ValueError(f"system {self.name!r}: `inputs` fuses two or more stages (got {len(self.inputs)})")
            repeated = sorted({i for i in self.inputs if self.inputs.count(i) > 1})
            if repeated:
                raise ValueError(f"system {self.name!r}: `inputs` names {', '.join(map(repr, repeated))} more than once")
        elif self.first is None:
            raise ValueError(f"system {self.name!r}: needs a `first` stage (or `inputs` to fuse)")
        fused = self.second is not None or self.inputs is not None
        if fused and self.fusion is None:
            object.__setattr__(self, "fusion", FusionSpec())  # two first stages: RRF unless told otherwise
        if self.fusion is not None and not fused:
            raise ValueError(f"system {self.name!r}: fusion needs a `second` first stage")
        if self.second is not None and self.second == self.first:
            raise ValueError(f"system {self.name!r}: first and second are the same stage {self.first!r}")
        return self

    @property
    def references(self) -> list[tuple[str, str]]:
        """(key, reference) of every stage this system reads: `first`/`second` or `inputs[i]`."""
        if self.inputs is not None:
            return [(f"inputs[{i}]", reference) for i, reference in enumerate(self.inputs)]
        return [(key, reference) for key, reference in (("first", self.first), ("second", self.second)) if reference is not None]

    @property
    def fused(self) -> list[str]:
        """The stages fused, in order; empty when the system fuses nothing."""
        return [reference for _, reference in self.references] if self.fusion is not None else []


def check_references(systems: list[SystemSpec], known_first_stages: list[str] | set[str],
                     known_rerankers: list[str] | set[str] = (), *, root: str = "systems") -> list[str]:
    """Errors naming the key path of every unknown first stage or reranker, of repeated names, of
    score fusion over other than two stages and of systems built on themselves, e.g.
    "systems[0].first: unknown first stage 'e5/flatt' (known: bm25:plain, e5/flat)".
    A stage may also be the name of another system."""
    known = sorted(set(known_first_stages))
    rerankers = sorted(set(known_rerankers))
    names = {system.name for system in systems}
    errors: list[str] = []
    seen: dict[str, int] = {}
    for i, system in enumerate(systems):
        if system.name in seen:
            errors.append(f"{root}[{i}].name: {system.name!r} repeats {root}[{seen[system.name]}].name")
        seen.setdefault(system.name, i)
        for field, reference in system.references:
            if reference not in known and reference not in names:
                errors.append(f"{root}[{i}].{field}: {unknown_name('first stage', reference, known)}")
        if system.fusion is not None and system.fusion.method == "score" and len(system.fused) != 2:
            errors.append(f"{root}[{i}].fusion.method: score fusion weighs exactly 2 stages with alpha "
                          f"(got {len(system.fused)}); use method: rrf to fuse more")
        if system.rerank is not None and system.rerank not in rerankers:
            errors.append(f"{root}[{i}].rerank: {unknown_name('reranker', system.rerank, rerankers)}")
    return errors + cycle_errors(systems, root=root)


def _uses(systems: list[SystemSpec]) -> dict[str, list[str]]:
    """System name -> the systems it reads (references to first stages left out)."""
    names = {system.name for system in systems}
    return {system.name: [r for _, r in system.references if r in names] for system in systems}


def cycle_errors(systems: list[SystemSpec], *, root: str = "systems") -> list[str]:
    """One error per cycle of systems built on each other, naming it: "systems[0]: 'a' is built
    on itself through a -> b -> a"."""
    uses = _uses(systems)
    position = {system.name: i for i, system in reversed(list(enumerate(systems)))}
    errors, reported = [], set()
    for start in uses:
        path = _cycle_from(start, uses)
        if path is None or frozenset(path) in reported:
            continue
        reported.add(frozenset(path))
        first = min(path, key=position.get)  # the cycle named from its earliest entry in the spec
        turn = path.index(first)
        ring = path[turn:] + path[:turn] + [first]
        errors.append(f"{root}[{position[first]}]: system {first!r} is built on itself through {' -> '.join(ring)}")
    return errors


def _cycle_from(start: str, uses: dict[str, list[str]]) -> list[str] | None:
    """The systems of a cycle through `start` (in order, without repeating `start`), or None."""
    stack = [(start, [start])]
    visited = set()
    while stack:
        node, path = stack.pop()
        for nxt in uses.get(node, []):
            if nxt == start:
                return path
            if nxt not in visited:
                visited.add(nxt)
                stack.append((nxt, path + [nxt]))
    return None


def system_order(systems: list[SystemSpec]) -> list[SystemSpec]:
    """The systems with every system after those it reads (spec order otherwise): the order to
    build them in. Refuses a cycle (check_references names it at spec load)."""
    uses = _uses(systems)
    by_name = {system.name: system for system in systems}
    ordered: list[SystemSpec] = []
    placed: set[str] = set()
    remaining = [system.name for system in systems]
    while remaining:
        ready = [name for name in remaining if all(u in placed for u in uses[name])]
        if not ready:
            raise ValueError("systems built on each other in a cycle: " + "; ".join(cycle_errors(systems)))
        for name in ready:
            ordered.append(by_name[name])
            placed.add(name)
        remaining = [name for name in remaining if name not in placed]
    return ordered


def first_stage_names(providers: list[str], dense_indexes: list[str], lexical: list[LexicalSpec]) -> list[str]:
    """Every first stage a spec defines: `<provider>/<index>` for each provider and index kind, and `bm25:<name>`."""
    return [f"{p}/{i}" for p in providers for i in dense_indexes] + [f"bm25:{spec.name}" for spec in lexical]
