"""`sweep:` in the benchmark spec: the ANN grid (IVF, HNSW, IVF-PQ) and the compressed indexes
(scalar quantisation, binary codes) measured against exact search.

Configuration only: validated at spec load, with no stage code (and so no FAISS) imported."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from retbench.tasks.config.measures import canonical_measure
from retbench.tasks.config.spec_errors import AtKey, did_you_mean

class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _positive(values: list[int] | None, name: str) -> list[int] | None:
    if values is None:
        return None
    if not values or any(v < 1 for v in values):
        raise ValueError(f"{name} must be a non-empty list of positive integers (or null for the default)")
    return sorted(set(values))


class IVFGrid(_Strict):
    nlist: list[int] | None = Field(None, description="build-time; null: [~4*sqrt(n)] as the main flow")
    train_size: list[int] | None = Field(None, description="build-time k-means sample; null: 256 per list, capped at n")
    nprobe: list[int] | None = Field(None, description="query-time; null: 1, 2, 4, ... up to nlist")
    seed: int = 0

    _check = field_validator("nlist", "train_size", "nprobe")(classmethod(lambda cls, v, info: _positive(v, info.field_name)))


class HNSWGrid(_Strict):
    M: list[int] = Field(default_factory=lambda: [32], description="build-time graph degree")
    ef_construction: list[int] = Field(default_factory=lambda: [40], description="build-time")
    ef_search: list[int] = Field(default_factory=lambda: [16, 32, 64, 128, 256], description="query-time")

    _check = field_validator("M", "ef_construction", "ef_search")(classmethod(lambda cls, v, info: _positive(v, info.field_name)))


class IVFPQGrid(_Strict):
    nlist: list[int] | None = Field(None, description="build-time; null: as IVF")
    m: list[int] | None = Field(None, description="build-time sub-quantizers, must divide the dimension; null: ~dim/8")
    nbits: list[int] | None = Field(None, description="build-time bits per code; null: 8, fewer on small sets")
    train_size: list[int] | None = Field(None, description="build-time; null: max(256*nlist, 39*2^nbits), capped at n")
    nprobe: list[int] | None = Field(None, description="query-time; null: 1, 2, 4, ... up to nlist")
    seed: int = 0

    _check = field_validator("nlist", "m", "nbits", "train_size", "nprobe")(
        classmethod(lambda cls, v, info: _positive(v, info.field_name)))

    @field_validator("nbits")
    @classmethod
    def _nbits_range(cls, values):
        if values and any(v > 16 for v in values):
            raise ValueError("nbits must be at most 16")
        return values


class SQGrid(_Strict):
    qtype: list[Literal["fp16", "8bit"]] = Field(default_factory=lambda: ["fp16", "8bit"],
                                                 description="fp16: 2 bytes per component; 8bit: 1 byte, trained ranges")
    train_size: int | None = Field(None, ge=1, description="8bit: vectors sampled to learn the ranges; null: all, up to 100,000")
    seed: int = 0

    @field_validator("qtype")
    @classmethod
    def _some(cls, values):
        if not values:
            raise ValueError("qtype must name at least one of fp16, 8bit")
        return sorted(set(values), key=["fp16", "8bit"].index)


class BinaryGrid(_Strict):
    rescore: list[int] = Field(default_factory=lambda: [0, 100],
                               description="query-time: Hamming candidates re-scored with the float vectors; 0: none")

    @field_validator("rescore")
    @classmethod
    def _non_negative(cls, values):
        if not values or any(v < 0 for v in values):
            raise ValueError("rescore must be a non-empty list of integers >= 0")
        return sorted(set(values))


class SweepSpec(BaseModel):
    """`sweep:` in the benchmark spec. A family set to null is skipped; a null list inside one is
    derived from the number of vectors (and the dimension) at run time. Any other registered
    index kind (tasks/indexes) may be swept by its name: a mapping of its build parameters to
    lists of values (every combination is built) and its query parameter to a list."""

    model_config = ConfigDict(extra="allow")

    ivf: IVFGrid | None = Field(default_factory=IVFGrid)
    hnsw: HNSWGrid | None = Field(default_factory=HNSWGrid)
    ivfpq: IVFPQGrid | None = Field(default_factory=IVFPQGrid)
    sq: SQGrid | None = Field(default_factory=SQGrid)
    binary: BinaryGrid | None = Field(default_factory=BinaryGrid)
    project_vectors: int | None = Field(None, ge=1, description="also report each index's size projected to this many vectors")
    k: int = Field(10, ge=1, description="neighbour recall@k and the metric cutoffs")
    depth: int = Field(100, ge=1, description="documents retrieved per query (MRR looks this deep)")
    repeats: int = Field(3, ge=1, description="timed runs per measurement, after the warm-up")
    warmup: int = Field(1, ge=0)
    latency_queries: int | None = Field(200, ge=1, description="queries timed one by one (seeded sample); null: all")
    loss_budget: float = Field(0.01, ge=0, description="largest relative loss of `measure` versus flat")
    measure: str = "ndcg@10"
    budget_on: Literal["mean", "ci_low"] = Field("mean", description="ci_low: the budget must hold at the interval's worst end")
    bootstrap: int = Field(1000, ge=0, description="resamples over queries for the delta intervals; 0: none")
    confidence: float = Field(0.95, gt=0, lt=1)
    relevance_level: int = Field(1, ge=1)
    seed: int = 0

    @field_validator("measure")
    @classmethod
    def _known_measure(cls, value: str) -> str:
        return canonical_measure(value)

    @model_validator(mode="after")
    def _depth_covers_k(self):
        if self.depth < self.k:
            raise ValueError(f"depth ({self.depth}) must be at least k ({self.k})")
        from retbench.tasks.indexes import index_kind, known_kinds  # the kinds' declarations; no FAISS is loaded

        for name, section in (self.model_extra or {}).items():
            where = f"sweep.{name}"
            if name not in known_kinds():
                keys = [*type(self).model_fields, *known_kinds()]
                raise AtKey(name, f"unknown key{did_you_mean(name, keys)} (expected a field of `sweep` or an index "
                                  f"kind: {', '.join(known_kinds())})")
            if section is None:
                continue
            if not isinstance(section, dict):
                raise ValueError(f"{where}: expected a mapping of the kind's parameters to lists, or null (got {section!r})")
            kind = index_kind(name)
            for key, values in section.items():
                if not isinstance(values, list) or not values:
                    raise ValueError(f"{where}.{key}: expected a non-empty list (got {values!r})")
                for value in values:
                    kind.check_entry({key: [value] if key == kind.query_parameter else value}, where)
        return self

    def index_sections(self) -> list[tuple[str, object]]:
        """(index kind, its grid section) for every kind swept, in the spec's order: the
        built-in families, then the other kinds named."""
        built_in = [(name, getattr(self, name)) for name in type(self).model_fields
                    if isinstance(getattr(self, name), BaseModel)]
        others = [(name, section) for name, section in (self.model_extra or {}).items() if section is not None]
        return built_in + others

    def measures(self) -> list[str]:
        names = [f"recall@{self.k}", "mrr", f"ndcg@{self.k}"]
        return names + ([self.measure] if self.measure not in names else [])
