"""Spec models for retrieval systems: BM25 first stages, fusion of two first stages, rerankers,
and `systems:` entries that compose them; `check_references` names every dangling reference."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tasks.config.measurement import RerankPricing

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
                raise ValueError(f"unknown stop-word language {value!r} (known: {', '.join(STOPWORD_LANGUAGES)}, none, or a list)")
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
    batch_size: int = Field(32, ge=1, description="documents per call (and per cache shard)")
    pricing: RerankPricing | None = Field(None, description="per search unit or per token, with the date it was read")

    @model_validator(mode="after")
    def _known_kind(self):
        from tasks.rerankers import known_kinds

        if self.kind not in known_kinds():
            raise ValueError(f"reranker {self.name!r}: unknown kind {self.kind!r} (known: {', '.join(known_kinds())})")
        return self


class SystemSpec(_Strict):
    """One retrieval system: a first stage (a dense `<provider>/<index>` or `bm25:<name>`), optionally
    fused with a `second` first stage, optionally reranked."""

    name: str = Field(pattern=_NAME, max_length=64)
    first: str
    second: str | None = None
    fusion: FusionSpec | None = None
    rerank: str | None = Field(None, description="the name of an entry in `rerankers:`")
    top_n: int = Field(100, ge=1, description="first-stage documents the reranker re-scores")

    @model_validator(mode="after")
    def _fusion_needs_two(self):
        if self.second is not None and self.fusion is None:
            object.__setattr__(self, "fusion", FusionSpec())  # two first stages: RRF unless told otherwise
        if self.fusion is not None and self.second is None:
            raise ValueError(f"system {self.name!r}: fusion needs a `second` first stage")
        if self.second is not None and self.second == self.first:
            raise ValueError(f"system {self.name!r}: first and second are the same stage {self.first!r}")
        return self


def check_references(systems: list[SystemSpec], known_first_stages: list[str] | set[str],
                     known_rerankers: list[str] | set[str] = (), *, root: str = "systems") -> list[str]:
    """Errors naming the key path of every unknown first stage or reranker and of repeated names,
    e.g. "systems[0].first: unknown first stage 'e5/flatt' (known: bm25:plain, e5/flat)"."""
    known = sorted(set(known_first_stages))
    rerankers = sorted(set(known_rerankers))
    errors: list[str] = []
    seen: dict[str, int] = {}
    for i, system in enumerate(systems):
        if system.name in seen:
            errors.append(f"{root}[{i}].name: {system.name!r} repeats {root}[{seen[system.name]}].name")
        seen.setdefault(system.name, i)
        for field in ("first", "second"):
            reference = getattr(system, field)
            if reference is not None and reference not in known:
                errors.append(f"{root}[{i}].{field}: unknown first stage {reference!r} (known: {', '.join(known) or 'none'})")
        if system.rerank is not None and system.rerank not in rerankers:
            errors.append(f"{root}[{i}].rerank: unknown reranker {system.rerank!r} (known: {', '.join(rerankers) or 'none'})")
    return errors


def first_stage_names(providers: list[str], dense_indexes: list[str], lexical: list[LexicalSpec]) -> list[str]:
    """Every first stage a spec defines: `<provider>/<index>` for each provider and index kind, and `bm25:<name>`."""
    return [f"{p}/{i}" for p in providers for i in dense_indexes] + [f"bm25:{spec.name}" for spec in lexical]
