"""Slice every mean by language pair, category and split, with bootstrap confidence intervals,
and compare settings query by query (paired bootstrap CI and a sign-flip randomization test).

A mean over 30 queries is not a result without its interval, and an overall mean can hide a
language on which a model collapses: these tables show both. All resampling is seeded and
vectorised with numpy; the same slice draws the same resamples for every setting, so two
settings scored on the same queries get comparable intervals.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import polars as pl

from retbench.tasks.analysis.stats import (  # noqa: F401  (bootstrap_ci: part of this module's API)
    bootstrap_ci, bootstrap_means, check_level, percentile_interval, randomization_p_value, seeded_rng,
)
from retbench.tasks.language import detect_language

SETTING = ["provider", "index", "nprobe"]
FLAT = "flat"
SLICE_KINDS = ("all", "language_pair", "category", "split")
NO_RELEVANT = "none"  # document language of a query with no relevant document

BREAKDOWN_SCHEMA = {
    "provider": pl.String,
    "index": pl.String,
    "nprobe": pl.Int64,
    "slice_kind": pl.String,
    "slice": pl.String,
    "measure": pl.String,
    "mean": pl.Float64,
    "ci_low": pl.Float64,
    "ci_high": pl.Float64,
    "n": pl.Int64,
}
COMPARISON_SCHEMA = {
    "a_provider": pl.String,
    "a_index": pl.String,
    "a_nprobe": pl.Int64,
    "b_provider": pl.String,
    "b_index": pl.String,
    "b_nprobe": pl.Int64,
    "measure": pl.String,
    "n": pl.Int64,
    "mean_a": pl.Float64,
    "mean_b": pl.Float64,
    "diff": pl.Float64,
    "ci_low": pl.Float64,
    "ci_high": pl.Float64,
    "p_value": pl.Float64,
}

def _require(df: pl.DataFrame, columns: Sequence[str], what: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{what}: missing columns {missing} (found {df.columns})")


# ---------------------------------------------------------------- language pairs


def language_pairs(queries: pl.DataFrame, qrels: pl.DataFrame, corpus: pl.DataFrame,
                   relevance_level: int = 1) -> pl.DataFrame:
    """query_id, query_language, doc_language, language_pair ("hi->en", "en->en+hi", "en->none").

    Languages come from the data's `language` column when set, else from the script
    (tasks/language.py: Latin -> en, Devanagari -> hi, und-Arab, ..., und when mixed; Hinglish can
    only come from the data). A query's document language is the
    sorted, "+"-joined set of languages of its relevant documents (grade >= relevance_level).
    """
    _require(queries, ["query_id", "text"], "queries")
    _require(qrels, ["query_id", "doc_id", "grade"], "qrels")
    _require(corpus, ["doc_id", "text"], "corpus")
    q_lang = _languages(queries, "query_id", ["text"]).rename({"language": "query_language"})
    d_lang = _languages(corpus, "doc_id", ["title", "text"]).rename({"language": "doc_lang"})
    relevant = qrels.filter(pl.col("grade") >= relevance_level).select("query_id", "doc_id")
    missing = relevant.join(d_lang, on="doc_id", how="anti")
    if missing.height:
        q, d = missing.row(0)
        raise ValueError(f"qrels: query {q!r} judges doc {d!r}, which is not in the corpus ({missing.height} such judgments)")
    doc_language = (
        relevant.join(d_lang, on="doc_id")
        .group_by("query_id")
        .agg(doc_language=pl.col("doc_lang").unique().sort().str.join("+"))
    )
    return (
        q_lang.join(doc_language, on="query_id", how="left", maintain_order="left")
        .with_columns(pl.col("doc_language").fill_null(NO_RELEVANT))
        .with_columns(language_pair=pl.concat_str("query_language", pl.lit("->"), "doc_language"))
    )


def _languages(frame: pl.DataFrame, id_column: str, text_columns: list[str]) -> pl.DataFrame:
    """id, language: the data's language where set, else detected from the script of the text."""
    columns = [c for c in text_columns if c in frame.columns]
    given = frame["language"] if "language" in frame.columns else pl.Series([None] * frame.height, dtype=pl.String)
    texts = frame.select(pl.concat_str([pl.col(c).fill_null("") for c in columns], separator=" ")).to_series()
    language = [g if g else detect_language(t) for g, t in zip(given.to_list(), texts.to_list())]
    return pl.DataFrame({id_column: frame[id_column], "language": pl.Series(language, dtype=pl.String)})


# ---------------------------------------------------------------- bootstrap


def _matrix(group: pl.DataFrame, measures: list[str]) -> tuple[list[str], np.ndarray]:
    """Query ids (sorted) and a (queries x measures) array; a query missing a measure is an error."""
    wide = group.pivot(on="measure", index="query_id", values="value").sort("query_id")
    absent = [m for m in measures if m not in wide.columns]
    if absent:
        raise ValueError(f"per_query: no values for measures {absent}")
    matrix = wide.select(measures)
    if matrix.null_count().sum_horizontal().item():
        raise ValueError("per_query: some queries lack a value for some measure; expected every measure for every query")
    return wide["query_id"].to_list(), matrix.to_numpy().astype(np.float64)


# ---------------------------------------------------------------- breakdown


def breakdown_table(per_query: pl.DataFrame, queries: pl.DataFrame, qrels: pl.DataFrame, corpus: pl.DataFrame,
                    resamples: int = 1000, seed: int = 0, level: float = 0.95,
                    relevance_level: int = 1) -> pl.DataFrame:
    """Mean, bootstrap CI and query count of every measure, per setting, for the whole query set
    and per language pair, category and split.

    Columns: provider, index, nprobe, slice_kind (all | language_pair | category | split), slice,
    measure, mean, ci_low, ci_high, n. Categories and splits come from `queries`; queries absent
    from it fall into "unknown".
    """
    check_level(level)
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1 (got {resamples})")
    _require(per_query, [*SETTING, "query_id", "measure", "value"], "per_query")
    _require(queries, ["query_id", "text", "category", "split"], "queries")
    pairs = language_pairs(queries, qrels, corpus, relevance_level)
    slices = (
        queries.select("query_id", "category", "split")
        .join(pairs.select("query_id", "language_pair"), on="query_id", how="left")
        .with_columns(pl.lit("all").alias("all"))
    )
    scored = per_query.select(*SETTING, "query_id", "measure", "value").join(slices, on="query_id", how="left")
    scored = scored.with_columns(pl.col("category", "split", "language_pair").fill_null("unknown"))
    measures = list(dict.fromkeys(per_query["measure"].to_list()))

    rows = []
    for kind in SLICE_KINDS:
        for (slice_value,), part in scored.group_by(kind, maintain_order=True):
            for setting, group in _settings(part):
                _, values = _matrix(group, measures)
                rng = seeded_rng(seed, kind, str(slice_value))
                low, high = percentile_interval(bootstrap_means(values, resamples, rng), level)
                mean = values.mean(axis=0)
                for j, measure in enumerate(measures):
                    rows.append((*setting, kind, str(slice_value), measure, float(mean[j]),
                                 float(low[j]), float(high[j]), values.shape[0]))
    table = pl.DataFrame(rows, schema=BREAKDOWN_SCHEMA, orient="row")
    kind_order = pl.col("slice_kind").replace_strict(list(SLICE_KINDS), list(range(len(SLICE_KINDS))))
    return table.sort([*SETTING, kind_order, "slice", "measure"], nulls_last=False, maintain_order=True)


def _settings(frame: pl.DataFrame) -> Iterator[tuple[tuple, pl.DataFrame]]:
    for setting, group in frame.group_by(SETTING, maintain_order=True):
        yield tuple(setting), group


# ---------------------------------------------------------------- paired comparisons


def paired_comparison(per_query: pl.DataFrame, a: tuple, b: tuple, resamples: int = 1000,
                      permutations: int = 10000, seed: int = 0, level: float = 0.95) -> pl.DataFrame:
    """Setting a vs setting b ((provider, index, nprobe) each) on the queries both scored, per measure.

    diff = mean_a - mean_b; its CI is a paired bootstrap (queries resampled, both settings
    together) and p_value a paired sign-flip randomization test.
    """
    check_level(level)
    if resamples < 1 or permutations < 1:
        raise ValueError(f"resamples and permutations must be >= 1 (got {resamples}, {permutations})")
    _require(per_query, [*SETTING, "query_id", "measure", "value"], "per_query")
    measures = list(dict.fromkeys(per_query["measure"].to_list()))
    ids_a, values_a = _matrix(_select(per_query, a), measures)
    ids_b, values_b = _matrix(_select(per_query, b), measures)
    common = sorted(set(ids_a) & set(ids_b))
    if not common:
        raise ValueError(f"settings {a} and {b} have no scored query in common")
    values_a = values_a[_positions(ids_a, common)]
    values_b = values_b[_positions(ids_b, common)]
    diffs = values_a - values_b
    key = "|".join(map(str, (*a, *b)))
    low, high = percentile_interval(bootstrap_means(diffs, resamples, seeded_rng(seed, "bootstrap", key)), level)
    p = randomization_p_value(diffs, permutations, seeded_rng(seed, "randomization", key))
    mean_a, mean_b = values_a.mean(axis=0), values_b.mean(axis=0)
    rows = [(*a, *b, m, len(common), float(mean_a[j]), float(mean_b[j]), float(mean_a[j] - mean_b[j]),
             float(low[j]), float(high[j]), float(p[j])) for j, m in enumerate(measures)]
    return pl.DataFrame(rows, schema=COMPARISON_SCHEMA, orient="row")


def _positions(ids: list[str], wanted: list[str]) -> np.ndarray:
    where = {query_id: i for i, query_id in enumerate(ids)}
    return np.array([where[query_id] for query_id in wanted], dtype=np.int64)


def _select(per_query: pl.DataFrame, setting: tuple) -> pl.DataFrame:
    if len(setting) != 3:
        raise ValueError(f"a setting is (provider, index, nprobe), got {setting!r}")
    provider, index, nprobe = setting
    nprobe_match = pl.col("nprobe").is_null() if nprobe is None else pl.col("nprobe") == nprobe
    group = per_query.filter((pl.col("provider") == provider) & (pl.col("index") == index) & nprobe_match)
    if group.height == 0:
        raise ValueError(f"per_query has no rows for setting provider={provider!r} index={index!r} nprobe={nprobe!r}")
    return group


def comparison_pairs(per_query: pl.DataFrame, baselines: dict[str, str] | None = None) -> list[tuple[tuple, tuple]]:
    """Every pair of providers at the flat index (in order of appearance), then every ANN setting
    (a) against the flat index of the same provider (b), then every variant setting (a) against
    its baseline (b) at the same index and nprobe. `baselines` maps variant label -> baseline
    label (tasks/stages/variants.py); variants are left out of the provider-vs-provider pairs."""
    baselines = baselines or {}
    settings = per_query.select(SETTING).unique(maintain_order=True).rows()
    flat = [s for s in settings if s[1] == FLAT]
    plain = [s for s in flat if s[0] not in baselines]
    pairs = [(plain[i], plain[j]) for i in range(len(plain)) for j in range(i + 1, len(plain))]
    flat_of = {s[0]: s for s in flat}
    pairs += [(s, flat_of[s[0]]) for s in settings if s[1] != FLAT and s[0] in flat_of]
    present = set(settings)
    pairs += [(s, b) for s in settings if s[0] in baselines
              and (b := (baselines[s[0]], s[1], s[2])) in present]
    return pairs


def comparison_table(per_query: pl.DataFrame, resamples: int = 1000, seed: int = 0,
                     permutations: int = 10000, level: float = 0.95,
                     baselines: dict[str, str] | None = None, extra_pairs=()) -> pl.DataFrame:
    """paired_comparison for every pair from comparison_pairs, then `extra_pairs` (e.g. a reranked
    system against its own first stage); an empty table when there is none."""
    pairs = list(dict.fromkeys([*comparison_pairs(per_query, baselines), *(tuple(map(tuple, pair)) for pair in extra_pairs)]))
    parts = [paired_comparison(per_query, a, b, resamples, permutations, seed, level) for a, b in pairs]
    return pl.concat(parts) if parts else pl.DataFrame(schema=COMPARISON_SCHEMA)
