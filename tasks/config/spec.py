"""The benchmark spec: one YAML file, validated with pydantic, unknown keys refused.

Relative paths in a spec are resolved against the folder the spec file is in, so
a spec means the same thing whichever directory it is run from.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import (BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError, create_model, field_validator,
                      model_validator)

from retbench.tasks.config.judgments import JudgmentsSpec
from retbench.tasks.config.measurement import PricingSpec
from retbench.tasks.config.measures import canonical_measure, default_measures, default_primary_measure
from retbench.tasks.config.sections import SpecSection, spec_sections
from retbench.tasks.config.spec_errors import UNION_TAGS, AtKey, describe, did_you_mean, unknown_name
from retbench.tasks.config.stages import STAGES  # noqa: F401  (re-exported)
from retbench.tasks.config.systems import LexicalSpec, RerankerSpec, SystemSpec, check_references
from retbench.tasks.config.variants import DEFAULT_CHUNKING, QueriesSpec, repeated_names, resolve_rewrite_files
from retbench.tasks.store.files import stable_hash


class SpecError(ValueError):
    pass


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DatasetSpec(_Strict):
    path: Path
    format: str = Field("jsonl", description="a format registered in tasks/datasets (jsonl, beir, cranfield, xquad, glasgow, ...)")
    split: Literal["train", "dev", "test", "all"] = Field(
        "all", description="the queries kept: one split, or all (every query, each scored under its own split)")
    qrels: Path | None = Field(None, description="a TREC qrels file that replaces the dataset's own judgments")
    grade_map: dict[int, int] | None = None
    unicode: Literal["nfc", "raw", "nfc_strip_joiners"] = Field(
        "nfc", description="nfc: titles and texts normalised to Unicode NFC at load; raw: as read; nfc_strip_joiners: "
                           "NFC with the zero-width joiner and non-joiner (U+200D, U+200C) removed, so spellings of a "
                           "word that differ only by them are one text (one cache row); texts holding them are "
                           "counted in the dataset notes either way")
    options: dict[str, Any] = Field(default_factory=dict, description="format-specific options, e.g. xquad languages")
    metadata_fields: list[str] | None = Field(None, min_length=1, description="jsonl: the document metadata fields "
                                              "query filters may use; checked against the files before any work")

    @field_validator("format")
    @classmethod
    def _known_format(cls, value: str) -> str:
        from retbench.tasks.datasets import known_formats

        if value not in known_formats():
            raise ValueError(unknown_name("dataset format", value, known_formats()))
        return value

    @model_validator(mode="after")
    def _metadata_fields_need_filters(self):
        if self.metadata_fields is not None and self.format != "jsonl":
            raise AtKey("metadata_fields", f"only the jsonl format carries query filters (format is {self.format!r})")
        return self


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


class ChunkingVariantSpec(ChunkingSpec):
    """One named chunking config of a list; the first of the list is the baseline."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=40)


# Union tags of `chunking`, left out of key paths in error messages.
_ONE, _MANY = "<one chunking config>", "<list of chunking configs>"
UNION_TAGS.update((_ONE, _MANY))


class ProviderSpec(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=64)
    kind: str
    options: dict[str, Any] = Field(default_factory=dict)
    batch_size: int = Field(64, ge=1, description="texts per embedding call and cache shard: a crash loses at most one "
                                                  "batch; unset on a GPU, the provider's (sized from the card's free memory)")
    shards: int | None = Field(None, ge=1, le=4096, description="task runs the missing texts are split into (by content key), "
                               "so Dask spreads one provider over its workers; default: 8 on Dask, 1 on the in-process runner")
    pricing: PricingSpec | None = Field(None, description="price per 1M tokens, with the date it was read")
    dimensions: int | None = Field(None, ge=1, description="keep the first N components of every vector, re-normalised")

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, value: str) -> str:
        from retbench.tasks.providers import known_kinds  # after the spec's plugins are imported (load_spec_data)

        if value not in known_kinds():
            raise ValueError(unknown_name("provider kind", value, known_kinds()))
        return value


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


class IndexesSpec(BaseModel):
    """`indexes:` flat (always) and IVF (on unless `ivf: null`, or a mapping that names flat but not
    ivf); any other registered index kind (tasks/indexes)
    by its name: `hnsw: {M: 32, ef_construction: 40, ef_search: [64]}`, its build parameters and
    its query parameter as a list, checked against what the kind declares (`true`: its defaults;
    null or false: off)."""

    model_config = ConfigDict(extra="allow")

    flat: bool = True
    ivf: IVFSpec | None = Field(default_factory=IVFSpec)
    shards: int | None = Field(None, ge=1, le=1024, description="search flat and IVF indexes over this many Dask workers, "
                               "each holding one row range of the vectors (the flow's cluster on --dask, else a local one); "
                               "the runs equal one process's. Default: one process")

    @model_validator(mode="before")
    @classmethod
    def _flat_named_alone_means_no_ivf(cls, data):
        # `indexes: {flat: true}` reads as "flat only": building IVF beside it (and warning about its
        # nprobe) surprised everyone who wrote it. IVF stays on when `indexes:` is left out, or
        # names ivf, or names neither (e.g. only `shards:` or another kind).
        if isinstance(data, dict) and "flat" in data and "ivf" not in data:
            return {**data, "ivf": None}
        return data

    @model_validator(mode="after")
    def _flat_needed(self):
        if not self.flat:
            raise ValueError("indexes.flat cannot be false: exact search is the reference every ANN index is measured against")
        from retbench.tasks.indexes import index_kind, known_kinds  # the kinds' declarations; no FAISS is loaded

        for name, entry in (self.model_extra or {}).items():
            where = f"indexes.{name}"
            if name not in known_kinds():
                keys = [*type(self).model_fields, *known_kinds()]
                raise AtKey(name, f"unknown key: not a field of `indexes` nor an index kind{did_you_mean(name, keys)} "
                                  f"(index kinds: {', '.join(known_kinds())})")
            if entry is None or entry is False:
                continue
            if entry is not True and not isinstance(entry, dict):
                raise ValueError(f"{where}: expected a mapping of the kind's parameters, true or null (got {entry!r})")
            index_kind(name).check_entry({} if entry is True else entry, where)
        return self

    def other_kinds(self) -> dict[str, dict]:
        """kind -> its entry, for the kinds besides flat and ivf that are switched on."""
        return {name: ({} if entry is True else dict(entry)) for name, entry in (self.model_extra or {}).items()
                if entry is not None and entry is not False}


class StatisticsSpec(_Strict):
    """How the score stage computes intervals, paired tests and the failure log."""

    resamples: int = Field(1000, ge=1, description="bootstrap resamples over queries for every 95% interval")
    permutations: int = Field(10000, ge=1, description="sign flips of the paired randomization test")
    seed: int = 0
    confidence: float = Field(0.95, gt=0, lt=1)
    failure_threshold: float = Field(0.5, ge=0, le=1, description="a query scoring below this (nDCG@10, or the largest k under 10) is a failure")
    buried_answers: bool | None = Field(None, description="embed the passages of relevant documents to flag buried answers "
                                                          "in the failure log (tasks/stages/buried.py); default: on when "
                                                          "chunking is a list of variants")


class HistorySpec(_Strict):
    enabled: bool = True
    baseline_run: str | None = Field(None, description="a run id to compare every run with, besides the previous run")
    fail_on_regression: bool = False
    measures: list[str] = Field(default_factory=lambda: ["ndcg@10", "recall@10", "mrr"],
                                description="compared with earlier runs; default: nDCG and recall at the primary "
                                            "measure's cutoff (derived from `k`), and MRR")

    @field_validator("measures")
    @classmethod
    def _known_measures(cls, values: list[str]) -> list[str]:
        names = []
        for i, value in enumerate(values):
            try:
                names.append(canonical_measure(value))
            except ValueError as error:
                raise AtKey(f"[{i}]", str(error)) from None
        return names
    min_queries: int = Field(20, ge=1, description="paired queries a setting x measure needs before it can be flagged "
                                                  "as a regression (fewer: reported as too few, never flagged)")


class ReportSpec(_Strict):
    primary_measure: str | None = Field(None, description="the measure the verdict ranks settings by (one the run scores); "
                                        "default: nDCG at the spec's cutoff nearest 10 (on a tie the larger), "
                                        "see BenchmarkSpec.primary_measure")


class _BenchmarkSpecBase(_Strict):
    """The spec's keys but the side stages' sections (tasks/config/sections/), which
    `spec_model` adds to make `BenchmarkSpec`."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    dataset: DatasetSpec
    judgments: JudgmentsSpec = Field(default_factory=JudgmentsSpec, description="the judgments a run scores with: the "
                                     "dataset's own, or also the overlays `retbench judge import` added")
    chunking: Annotated[Union[Annotated[ChunkingSpec, Tag(_ONE)], Annotated[list[ChunkingVariantSpec], Tag(_MANY)]],
                        Discriminator(lambda v: _MANY if isinstance(v, list) else _ONE)] = Field(
        default_factory=ChunkingSpec,
        description="one config, or a list of named configs compared as settings (the first is the baseline)")
    queries: QueriesSpec = Field(default_factory=QueriesSpec, description="query preprocessing variants")
    providers: list[ProviderSpec] = Field(min_length=1)
    indexes: IndexesSpec = Field(default_factory=IndexesSpec)
    k: list[int] = Field(default_factory=lambda: [5, 10, 20])
    depth: int = Field(100, ge=1, description="documents retrieved per query (MRR and MAP look this deep)")
    output_dir: Path = Path("out")
    store_dir: str = Field(".store", description="a local folder, or an object-store URI such as s3://bucket/prefix")
    store_mirror: Path | None = Field(None, description="local scratch folder of a remote store: objects fetched on demand, uploaded as written (default ~/.cache/retbench/scratch/...)")
    history: HistorySpec = Field(default_factory=HistorySpec)
    statistics: StatisticsSpec = Field(default_factory=StatisticsSpec)
    lexical: list[LexicalSpec] = Field(default_factory=list, description="BM25 first stages (bm25s), each a setting")
    rerankers: list[RerankerSpec] = Field(default_factory=list)
    systems: list[SystemSpec] = Field(default_factory=list, description="a first stage, optionally fused with a second, optionally reranked")
    report: ReportSpec = Field(default_factory=ReportSpec)
    plugins: list[str] = Field(default_factory=list, description="modules imported before the spec is checked, which "
                               "register providers, rerankers, index kinds or dataset formats (found next to the spec, "
                               "then in python_path, then on sys.path)")
    python_path: list[Path] = Field(default_factory=list, description="folders searched for plugins and for the modules "
                                    "of kind: python, after the spec's own folder and before sys.path")

    @field_validator("k")
    @classmethod
    def _k_values(cls, values: list[int]) -> list[int]:
        if not values or any(v < 1 for v in values):
            raise ValueError("k must be a non-empty list of positive integers")
        return sorted(set(values))

    @model_validator(mode="after")
    def _consistent(self):
        if isinstance(self.chunking, list):
            if not self.chunking:
                raise ValueError("chunking: an empty list; expected one config or a non-empty list of named configs")
            repeated_names("chunking", [c.name for c in self.chunking])
        repeated_names("queries.variants", [v.name for v in self.queries.variants])
        names = [p.name for p in self.providers]
        for i, name in enumerate(names):
            if names.index(name) != i:
                raise AtKey(f"providers[{i}].name", f"{name!r} repeats providers[{names.index(name)}].name "
                                                    "(provider names must be unique)")
        self._measures_from_k()
        return self

    def _measures_from_k(self) -> None:
        """Measures a section asks for by default, derived from `k` as the primary measure is: with
        `k: [5]` the defaults ndcg@10 and recall@10 would be scored by no run. A measure the user
        wrote is kept, and refused by measure_errors if `k` cannot score it."""
        cutoff = default_primary_measure(self.k).split("@")[1]
        if "measures" not in self.history.model_fields_set:
            self.history.measures = [f"ndcg@{cutoff}", f"recall@{cutoff}", "mrr"]
        sweep = getattr(self, "sweep", None)
        if sweep is not None and "measure" not in sweep.model_fields_set:
            sweep.measure = self.primary_measure  # what the verdict ranks by, and the ANN budget is then on

    @property
    def primary_measure(self) -> str:
        """The measure the verdict ranks by: report.primary_measure, or nDCG at the cutoff of `k`
        nearest 10 when that is not set (default_primary_measure)."""
        return self.report.primary_measure or default_primary_measure(self.k)

    @property
    def primary_measure_defaulted(self) -> bool:
        """True when report.primary_measure was not set and `primary_measure` is the default."""
        return self.report.primary_measure is None

    @property
    def chunking_variants(self) -> list[ChunkingVariantSpec]:
        """Every chunking config, named; the single form is named "default"."""
        if isinstance(self.chunking, list):
            return list(self.chunking)
        return [ChunkingVariantSpec(name=DEFAULT_CHUNKING, **self.chunking.model_dump())]

    def content_hash(self) -> str:
        return stable_hash(self.model_dump(mode="json"))


def spec_model(extra: tuple[SpecSection, ...] = ()) -> type[_BenchmarkSpecBase]:
    """The spec model: the base keys plus one optional key per section of tasks/config/sections/
    (and `extra`, for a test's own section)."""
    sections = spec_sections() + list(extra)
    return create_model("BenchmarkSpec", __base__=_BenchmarkSpecBase, __module__=__name__,
                        **{s.name: (s.model | None, Field(None, description=s.description)) for s in sections})


BenchmarkSpec = spec_model()


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
    return load_spec_data(raw, path, **overrides)


def load_spec_data(raw: dict, path: str | Path, **overrides: Any) -> BenchmarkSpec:
    """Validate and resolve a spec given as a mapping (what a spec file holds); `path` is the file it
    came from or stands for: relative paths in it are resolved against its folder."""
    path = Path(path)
    if not isinstance(raw, dict):
        raise SpecError(f"{path}: expected a mapping at the top level, found {type(raw).__name__}")
    raw = {**raw, **{k: v for k, v in overrides.items() if v is not None}}
    import_spec_plugins(raw, path.parent)
    try:
        spec = BenchmarkSpec.model_validate(raw)
    except ValidationError as error:
        raise SpecError(f"{path}: invalid benchmark spec:\n"
                        + "\n".join(f"  {line}" for line in describe(error, BenchmarkSpec))) from None
    problems = (depth_errors(spec) + provider_option_errors(spec) + system_errors(spec)
                + rewrite_file_errors(spec, path.parent) + report_errors(spec) + measure_errors(spec))
    if not problems:  # the model-variant checks build providers from options that must be valid first
        from retbench.tasks.config.model_variants import variant_errors

        problems = variant_errors(spec)
    if problems:
        raise SpecError(f"{path}: invalid benchmark spec:\n" + "\n".join(f"  {line}" for line in problems))
    return _resolve_paths(spec, path.parent)


def code_folders(raw_python_path: Any, base: Path) -> list[str]:
    """Where a spec's own code is looked for: its folder, then its python_path, absolute."""
    entries = raw_python_path if isinstance(raw_python_path, list) else []
    return [str(base.resolve())] + [str((base / str(p)).resolve()) for p in entries]


def import_spec_plugins(raw: dict, base: Path) -> None:
    """The spec's `plugins:` imported before it is checked (their kinds are then known)."""
    from retbench.tasks.plugins import PluginError, import_plugins

    modules, folders = raw.get("plugins") or [], raw.get("python_path") or []
    if not isinstance(modules, list) or not all(isinstance(m, str) and m for m in modules):
        raise SpecError(f"plugins: expected a list of module names such as [my_pkg.retbench_plugins] (got {modules!r})")
    if not isinstance(folders, list) or not all(isinstance(f, str) and f for f in folders):
        raise SpecError(f"python_path: expected a list of folders (got {folders!r})")
    try:
        import_plugins(modules, code_folders(folders, base))
    except PluginError as error:
        raise SpecError(str(error)) from error


def depth_errors(spec: BenchmarkSpec) -> list[str]:
    """Cutoffs deeper than what is retrieved, refused rather than clipped: a k above `depth`
    would score documents never retrieved, and a reranker's `top_n` above the depth of its input
    would rerank fewer documents than the manifest and the setting's label say."""
    problems = [f"k: {k} is above depth ({spec.depth}): a run retrieves {spec.depth} documents per query; "
                f"raise depth to at least {k} or drop the cutoff" for k in spec.k if k > spec.depth]
    by_name = {system.name: system for system in spec.systems}

    def output_depth(reference: str, seen: frozenset = frozenset()) -> int:
        """Documents per query of a first stage (the spec's depth) or of a system."""
        system = by_name.get(reference)
        if system is None or reference in seen:  # a first stage; a cycle is reported by system_errors
            return spec.depth
        if system.fusion is not None:
            return system.fusion.depth or spec.depth
        return output_depth(system.first, seen | {reference})

    for i, system in enumerate(spec.systems):
        if system.fusion is not None and system.fusion.depth is not None and system.fusion.depth < max(spec.k):
            problems.append(f"systems[{i}].fusion.depth: {system.fusion.depth} is below the largest k ({max(spec.k)}): "
                            f"the fused ranking would be scored deeper than it goes; set it to at least {max(spec.k)}")
        if system.rerank is None:
            continue
        reranked = (system.fusion.depth or spec.depth) if system.fusion is not None else output_depth(system.first or "")
        if system.top_n > reranked:
            given = "" if "top_n" in system.model_fields_set else " (the default)"
            source = "its fusion's depth" if system.fusion is not None and system.fusion.depth else (
                f"the depth of system {system.first!r}" if system.first in by_name else "the spec's depth")
            problems.append(f"systems[{i}].top_n: {system.top_n}{given} is above {source} ({reranked}): only {reranked} "
                            f"documents per query reach the reranker; set top_n to at most {reranked} or raise the depth")
    return problems


def report_errors(spec: BenchmarkSpec) -> list[str]:
    """A report.primary_measure the run does not score (checked here, with the other errors,
    rather than in the model, where its refusal would hide them)."""
    chosen = spec.report.primary_measure
    scored = default_measures(spec.k)
    if chosen is None or chosen in scored:
        return []
    return [f"report.primary_measure: {chosen!r} is not scored by this spec (with k={spec.k}: {', '.join(scored)})"
            + did_you_mean(chosen, scored)]


def measure_errors(spec: BenchmarkSpec) -> list[str]:
    """history.measures the run does not score: a regression check on them would compare nothing."""
    if "measures" not in spec.history.model_fields_set:
        return []
    scored = default_measures(spec.k)
    return [f"history.measures[{i}]: {name!r} is not scored by this spec (with k={spec.k}: {', '.join(scored)})"
            + did_you_mean(name, scored) for i, name in enumerate(spec.history.measures) if name not in scored]


def system_errors(spec: BenchmarkSpec) -> list[str]:
    """Dangling references in `systems:` and names that two settings would share."""
    providers = [p.name for p in spec.providers]
    lexical = [entry.name for entry in spec.lexical]
    stages = [f"{p}/flat" for p in providers] + ([f"{p}/ivf" for p in providers] if spec.indexes.ivf else [])
    stages += [f"bm25:{name}" for name in lexical]
    errors = check_references(list(spec.systems), stages, [r.name for r in spec.rerankers])
    taken = {name: "providers" for name in providers}
    for root, names in (("lexical", lexical), ("systems", [s.name for s in spec.systems])):
        for i, name in enumerate(names):
            if name in taken and taken[name] != root:
                errors.append(f"{root}[{i}].name: {name!r} is already the name of an entry in `{taken[name]}`")
            taken.setdefault(name, root)
    for i, name in enumerate(lexical):
        if lexical.index(name) != i:
            errors.append(f"lexical[{i}].name: {name!r} repeats lexical[{lexical.index(name)}].name")
    return errors
def rewrite_file_errors(spec: BenchmarkSpec, base: Path) -> list[str]:
    """Every rewrite file read now, so a malformed line is refused at load as file:line."""
    from retbench.tasks.config.variants import RewriteError, read_rewrites

    problems = []
    for i, variant in enumerate(spec.queries.variants):
        if variant.rewrite_file is None:
            continue
        file = variant.rewrite_file if variant.rewrite_file.is_absolute() else base / variant.rewrite_file
        try:
            read_rewrites(file)
        except RewriteError as error:
            problems.append(f"queries.variants[{i}].rewrite_file: {error}")
    return problems


def provider_option_errors(spec: BenchmarkSpec) -> list[str]:
    """`providers[i].options` checked against the option model each provider kind declares,
    so a typo is refused at load rather than in the embed stage."""
    from retbench.tasks.providers import options_model

    problems = []
    for i, provider in enumerate(spec.providers):
        model = options_model(provider.kind)
        try:
            model.model_validate(provider.options)
        except ValidationError as error:
            problems += describe(error, model, prefix=("providers", i, "options"))
    return problems


def _resolve_paths(spec: BenchmarkSpec, base: Path) -> BenchmarkSpec:
    def resolve(p: Path | None) -> Path | None:
        return None if p is None else (p if p.is_absolute() else (base / p)).resolve()

    dataset = spec.dataset.model_copy(update={"path": resolve(spec.dataset.path), "qrels": resolve(spec.dataset.qrels)})
    from retbench.tasks.store.remote import is_remote

    store = spec.store_dir if is_remote(spec.store_dir) else str(resolve(Path(spec.store_dir)))
    folders = code_folders([str(p) for p in spec.python_path], base)
    from retbench.tasks.providers import options_model
    from retbench.tasks.rerankers import reranker_options_model

    providers = [p.model_copy(update={"options": _resolved_options(options_model(p.kind), p.options, base, folders,
                                                                   f"providers[{i}] ({p.name!r})")})
                 for i, p in enumerate(spec.providers)]
    rerankers = [r.model_copy(update={"options": _resolved_options(reranker_options_model(r.kind), r.options, base,
                                                                   folders, f"rerankers[{i}] ({r.name!r})")})
                 for i, r in enumerate(spec.rerankers)]
    return spec.model_copy(update={
        "providers": providers,
        "rerankers": rerankers,
        "python_path": [Path(f) for f in folders[1:]],
        "dataset": dataset,
        "queries": resolve_rewrite_files(spec.queries, resolve),
        "output_dir": resolve(spec.output_dir),
        "store_dir": store,
        "store_mirror": resolve(spec.store_mirror),
    })


def _resolved_options(model, options: dict, base: Path, folders: list[str], where: str) -> dict:
    """A kind's options with its path-typed options relative to the spec's folder made absolute,
    and, for the python kinds, where their code is looked for and the spec key errors name."""
    from retbench.tasks.user_code import UserCodeOptions

    if model is None:
        return options
    resolved = dict(options)
    for name, field in model.model_fields.items():
        value = resolved.get(name)
        if isinstance(value, str) and _is_path_field(field.annotation) and not Path(value).is_absolute():
            resolved[name] = str((base / value).resolve())
    if issubclass(model, UserCodeOptions):
        resolved["search_path"] = folders
        resolved["where"] = where
    return resolved


def _is_path_field(annotation) -> bool:
    return annotation is Path or Path in getattr(annotation, "__args__", ())


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
