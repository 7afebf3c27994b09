"""The benchmark spec: one YAML file, validated with pydantic, unknown keys refused.

Relative paths in a spec are resolved against the folder the spec file is in, so
a spec means the same thing whichever directory it is run from.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from tasks.config.measurement import LatencySpec, PricingSpec
from tasks.config.stages import STAGES  # noqa: F401  (re-exported)
from tasks.config.sweep import SweepSpec
from tasks.store.files import stable_hash


class SpecError(ValueError):
    pass


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DatasetSpec(_Strict):
    path: Path
    format: Literal["jsonl", "beir", "cranfield", "xquad"] = "jsonl"
    split: Literal["dev", "test", "all"] = "dev"
    qrels: Path | None = Field(None, description="a TREC qrels file that replaces the dataset's own judgments")
    grade_map: dict[int, int] | None = None
    options: dict[str, Any] = Field(default_factory=dict, description="format-specific options, e.g. xquad languages")


class ChunkingSpec(_Strict):
    strategy: Literal["none", "fixed", "sentence", "paragraph"] = "paragraph"
    size: int = Field(200, gt=0)
    overlap: int = Field(40, ge=0)
    unit: Literal["words", "tokens"] = "words"
    max_words: int = Field(200, gt=0)

    @model_validator(mode="after")
    def _overlap_below_size(self):
        if self.strategy == "fixed" and self.overlap >= self.size:
            raise ValueError(f"chunking.overlap ({self.overlap}) must be smaller than chunking.size ({self.size})")
        return self


class ProviderSpec(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=64)
    kind: str
    options: dict[str, Any] = Field(default_factory=dict)
    batch_size: int = Field(64, ge=1, description="texts per cache shard: a crash loses at most one batch")
    pricing: PricingSpec | None = Field(None, description="price per 1M tokens, with the date it was read")
    dimensions: int | None = Field(None, ge=1, description="keep the first N components of every vector, re-normalised")


class IVFSpec(_Strict):
    nlist: int | None = Field(None, ge=1, description="default: derived from the number of vectors")
    train_size: int | None = Field(None, ge=1, description="vectors sampled for k-means; default 256 per list")
    nprobe: list[int] = Field(default_factory=lambda: [1, 4, 16])
    seed: int = 0

    @field_validator("nprobe")
    @classmethod
    def _positive_sorted(cls, values: list[int]) -> list[int]:
        if not values or any(v < 1 for v in values):
            raise ValueError("nprobe must be a non-empty list of positive integers")
        return sorted(set(values))


class IndexesSpec(_Strict):
    flat: bool = True
    ivf: IVFSpec | None = Field(default_factory=IVFSpec)

    @model_validator(mode="after")
    def _flat_needed(self):
        if not self.flat:
            raise ValueError("indexes.flat cannot be false: exact search is the reference every ANN index is measured against")
        return self


class StatisticsSpec(_Strict):
    """How the score stage computes intervals, paired tests and the failure log."""

    resamples: int = Field(1000, ge=1, description="bootstrap resamples over queries for every 95% interval")
    permutations: int = Field(10000, ge=1, description="sign flips of the paired randomization test")
    seed: int = 0
    confidence: float = Field(0.95, gt=0, lt=1)
    failure_threshold: float = Field(0.5, ge=0, le=1, description="a query scoring below this (nDCG@10, or the largest k under 10) is a failure")


class HistorySpec(_Strict):
    enabled: bool = True
    baseline_run: str | None = Field(None, description="a run id to compare every run with, besides the previous run")
    fail_on_regression: bool = False
    measures: list[str] = Field(default_factory=lambda: ["ndcg@10", "recall@10", "mrr"])


class BenchmarkSpec(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    dataset: DatasetSpec
    chunking: ChunkingSpec = Field(default_factory=ChunkingSpec)
    providers: list[ProviderSpec] = Field(min_length=1)
    indexes: IndexesSpec = Field(default_factory=IndexesSpec)
    k: list[int] = Field(default_factory=lambda: [5, 10, 20])
    depth: int = Field(100, ge=1, description="documents retrieved per query (MRR and MAP look this deep)")
    output_dir: Path = Path("out")
    store_dir: str = Field(".store", description="a local folder, or an object-store URI such as s3://bucket/prefix")
    store_mirror: Path | None = Field(None, description="local working copy of a remote store (default ~/.cache/retbench/mirrors/...)")
    history: HistorySpec = Field(default_factory=HistorySpec)
    statistics: StatisticsSpec = Field(default_factory=StatisticsSpec)
    latency: LatencySpec | None = Field(None, description="latency profile by batch size (off unless set: it costs time and, on paid APIs, money)")
    sweep: SweepSpec | None = Field(None, description="ANN sweep grid (IVF, HNSW, IVF-PQ) against exact search")

    @field_validator("k")
    @classmethod
    def _k_values(cls, values: list[int]) -> list[int]:
        if not values or any(v < 1 for v in values):
            raise ValueError("k must be a non-empty list of positive integers")
        return sorted(set(values))

    @model_validator(mode="after")
    def _consistent(self):
        names = [p.name for p in self.providers]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"provider names must be unique; repeated: {duplicates}")
        if self.depth < max(self.k):
            raise ValueError(f"depth ({self.depth}) must be at least the largest k ({max(self.k)})")
        from tasks.providers import known_kinds

        for provider in self.providers:
            if provider.kind not in known_kinds():
                raise ValueError(f"provider {provider.name!r}: unknown kind {provider.kind!r} (known: {', '.join(known_kinds())})")
        return self

    def content_hash(self) -> str:
        return stable_hash(self.model_dump(mode="json"))


def load_spec(path: str | Path, **overrides: Any) -> BenchmarkSpec:
    """Read, validate and resolve a spec file; `overrides` replace top-level keys (e.g. output_dir)."""
    path = Path(path)
    if not path.is_file():
        raise SpecError(f"spec file not found: {path}")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as error:
        raise SpecError(f"{path}: not UTF-8 text (invalid byte at offset {error.start})") from None
    except yaml.YAMLError as error:
        raise SpecError(f"{path}: not valid YAML: {error}") from error
    except RecursionError:
        raise SpecError(f"{path}: nested too deeply to be a benchmark spec") from None
    if not isinstance(raw, dict):
        raise SpecError(f"{path}: expected a mapping at the top level, found {type(raw).__name__}")
    raw.update({k: v for k, v in overrides.items() if v is not None})
    try:
        spec = BenchmarkSpec.model_validate(raw)
    except ValidationError as error:
        raise SpecError(f"{path}: invalid benchmark spec:\n{_describe(error)}") from None
    problems = provider_option_errors(spec)
    if not problems:  # the variant checks build providers from options that must be valid first
        from tasks.config.variants import variant_errors

        problems = variant_errors(spec)
    if problems:
        raise SpecError(f"{path}: invalid benchmark spec:\n" + "\n".join(f"  {line}" for line in problems))
    return _resolve_paths(spec, path.parent)


def provider_option_errors(spec: BenchmarkSpec) -> list[str]:
    """`providers[i].options` checked against the option model each provider kind declares,
    so a typo is refused at load rather than in the embed stage."""
    from tasks.providers import options_model

    problems = []
    for i, provider in enumerate(spec.providers):
        model = options_model(provider.kind)
        try:
            model.model_validate(provider.options)
        except ValidationError as error:
            expected = ", ".join(model.model_fields)
            for item in error.errors():
                where = _path(("providers", i, "options", *item["loc"]))
                if item["type"] == "extra_forbidden":
                    problems.append(f"{where}: unknown key (expected: {expected})")
                else:
                    problems.append(f"{where}: {item['msg']}")
    return problems


def _describe(error: ValidationError) -> str:
    lines = []
    for item in error.errors():
        where = _path(item["loc"]) or "(top level)"
        message = item["msg"]
        if item["type"] == "extra_forbidden":
            message = "unknown key"
        lines.append(f"  {where}: {message}")
    return "\n".join(lines)


def _path(loc) -> str:
    """A pydantic location as a key path: providers[0].options.dim."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _resolve_paths(spec: BenchmarkSpec, base: Path) -> BenchmarkSpec:
    def resolve(p: Path | None) -> Path | None:
        return None if p is None else (p if p.is_absolute() else (base / p)).resolve()

    dataset = spec.dataset.model_copy(update={"path": resolve(spec.dataset.path), "qrels": resolve(spec.dataset.qrels)})
    from tasks.store.remote import is_remote

    store = spec.store_dir if is_remote(spec.store_dir) else str(resolve(Path(spec.store_dir)))
    return spec.model_copy(update={
        "dataset": dataset,
        "output_dir": resolve(spec.output_dir),
        "store_dir": store,
        "store_mirror": resolve(spec.store_mirror),
    })


_SLUG = re.compile(r"[^a-z0-9-]+")


def slug(text: str) -> str:
    return _SLUG.sub("-", text.lower()).strip("-")




def select_providers(spec: BenchmarkSpec, names: list[str] | None) -> list[ProviderSpec]:
    """The spec's providers named in `names` (all when empty); unknown names are an error."""
    if not names:
        return list(spec.providers)
    known = {p.name for p in spec.providers}
    unknown = sorted(set(names) - known)
    if unknown:
        raise SpecError(f"unknown provider(s) {unknown}; the spec has {sorted(known)}")
    return [p for p in spec.providers if p.name in names]
