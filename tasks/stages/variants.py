"""Settings beyond (provider, index, nprobe): chunking variants and query-preprocessing variants.

A setting is named by a label in the tables' `provider` column, so every table keeps its
columns: the baseline of a provider (first chunking config, queries as written) is labelled
with the provider's name, a chunking variant `<provider>@<chunking>`, a query variant
`<provider>+<variant>`. Variants are compared one change at a time against the baseline (no
cross product). `settings.parquet` maps each label back to provider, chunking and query variant.
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from retbench.tasks.config.setting import FirstStage, Setting
from retbench.tasks.config.spec import BenchmarkSpec
from retbench.tasks.config.variants import RAW_QUERIES, QueryVariantSpec, read_rewrites
from retbench.tasks.store.build import StageResult, build_once
from retbench.tasks.store.files import stable_hash
from retbench.tasks.store.integrity import parquet_readable

SETTINGS_SCHEMA = {
    "setting": pl.String,  # the label in the `provider` column of every table
    "provider": pl.String,
    "chunking": pl.String,
    "chunking_config": pl.String,  # ChunkConfig.name: the parameters that shape the chunks
    "query_variant": pl.String,
    "variant_kind": pl.String,  # baseline | chunking | query
    "baseline": pl.String,  # label this setting is paired against; null for a baseline
}


@dataclass(frozen=True)
class VariantSetting:
    label: str
    provider: str
    chunking: str
    query_variant: str
    kind: str  # baseline | chunking | query
    baseline: str | None

    def setting(self, index: str, nprobe: int | None, query_params: dict | None = None) -> Setting:
        """This (provider, chunking, query variant) searched with one index (its run label) and its
        query parameters (default: nprobe alone)."""
        params = dict(query_params) if query_params else ({} if nprobe is None else {"nprobe": nprobe})
        return Setting(FirstStage.dense(self.provider, index, params),
                       chunking=self.chunking if self.kind == "chunking" else None, query_variant=self.query_variant)


def plan_settings(spec: BenchmarkSpec) -> list[VariantSetting]:
    """Per provider: its baseline, one setting per further chunking config, one per query variant."""
    chunkings = [c.name for c in spec.chunking_variants]
    settings = []
    for provider in spec.providers:
        base = provider.name
        settings.append(VariantSetting(base, base, chunkings[0], RAW_QUERIES, "baseline", None))
        settings += [VariantSetting(f"{base}@{c}", base, c, RAW_QUERIES, "chunking", base) for c in chunkings[1:]]
        settings += [VariantSetting(f"{base}+{q.name}", base, chunkings[0], q.name, "query", base)
                     for q in spec.queries.variants]
    return settings


def settings_table(spec: BenchmarkSpec) -> pl.DataFrame:
    from retbench.tasks.stages.chunk import ChunkConfig

    configs = {c.name: ChunkConfig(**c.model_dump(exclude={"name"})).name for c in spec.chunking_variants}
    rows = [(s.label, s.provider, s.chunking, configs[s.chunking], s.query_variant, s.kind, s.baseline)
            for s in plan_settings(spec)]
    return pl.DataFrame(rows, schema=SETTINGS_SCHEMA, orient="row")


def run_settings(spec: BenchmarkSpec, runs: list) -> list[Setting]:
    """The Setting of each run record: a system's own, else its (provider, chunking, query variant)
    with the record's index kind and nprobe."""
    planned = {s.label: s for s in plan_settings(spec)}
    settings = []
    for run in runs:
        if getattr(run, "setting", None) is not None:
            settings.append(run.setting)
        elif run.provider in planned:
            settings.append(planned[run.provider].setting(run.index, run.nprobe, dict(run.query_params)))
        else:
            settings.append(VariantSetting(run.provider, run.provider, "", RAW_QUERIES, "baseline", None)
                            .setting(run.index, run.nprobe, dict(run.query_params)))
    return settings


def baselines(settings: pl.DataFrame) -> dict[str, str]:
    """Variant label -> the baseline label it is paired against."""
    return dict(settings.filter(pl.col("baseline").is_not_null()).select("setting", "baseline").iter_rows())


# ---------------------------------------------------------------- query preprocessing

# Word characters for rewrite boundaries: \w misses the Devanagari vowel signs and virama.
_WORD_CHAR = r"[\w\u0900-\u097F\u0300-\u036F]"
_SPACES = re.compile(r"\s+")


def rewriter(pairs: list[tuple[str, str]]):
    """A function applying whole-word, case-insensitive rewrites, longest `from` first, in one pass
    (a rewritten word is not rewritten again)."""
    if not pairs:
        return lambda text: text
    table = {source.casefold(): target for source, target in pairs}
    alternatives = "|".join(re.escape(s) for s, _ in sorted(pairs, key=lambda p: -len(p[0])))
    pattern = re.compile(rf"(?<!{_WORD_CHAR})(?:{alternatives})(?!{_WORD_CHAR})", re.IGNORECASE)
    return lambda text: pattern.sub(lambda m: table[m.group(0).casefold()], text)


def preprocess(texts: list[str], variant: QueryVariantSpec) -> list[str]:
    """The variant's steps in a fixed order: unicode, whitespace, lowercase, rewrites, prefix."""
    rewrite = rewriter(read_rewrites(variant.rewrite_file)) if variant.rewrite_file else (lambda t: t)
    out = []
    for text in texts:
        if variant.unicode:
            text = unicodedata.normalize(variant.unicode.upper(), text)
        if variant.whitespace:
            text = _SPACES.sub(" ", text).strip()
        if variant.lowercase:
            text = text.lower()
        text = rewrite(text)
        if variant.prefix:
            text = variant.prefix + text
        out.append(text)
    return out


@dataclass(frozen=True, kw_only=True)
class QueryTextsRef(StageResult):
    """The preprocessed queries of one variant (query_id, text), and how many it changed."""

    variant: str
    queries: int
    changed: int


def write_query_variant(queries_path: str, variant: QueryVariantSpec, store: str | Path, force: bool = False) -> QueryTextsRef:
    queries = pl.read_parquet(queries_path, columns=["query_id", "text"])
    texts = preprocess(queries["text"].to_list(), variant)
    variant_table = pl.DataFrame({"query_id": queries["query_id"], "text": pl.Series(texts, dtype=pl.String)})
    key = stable_hash("query-variant-v1", variant_table["query_id"].to_list(), texts)
    path = Path(store) / "queries" / f"{key[:32]}.parquet"
    made = build_once(str(store), path, lambda tmp: pq.write_table(variant_table.to_arrow(), tmp, compression="zstd"),
                      parse=parquet_readable, force=force)
    changed = sum(a != b for a, b in zip(queries["text"].to_list(), texts))
    return QueryTextsRef(path=str(path), key=key, computed=made.computed, seconds=made.seconds,
                         variant=variant.name, queries=queries.height, changed=changed)
