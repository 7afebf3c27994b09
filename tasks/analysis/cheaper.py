"""The `cheaper_variants` table: every provider and compressed index beside its full version, with
bytes per vector, index bytes, projected storage, texts/s and the quality change against the full model.
With a held-out split every quality value is on the test queries only, so a verdict never judges a
variant on the dev queries."""
from __future__ import annotations

import json

import polars as pl

from retbench.tasks.analysis.ann_recommend import HELD_OUT, split_column
from retbench.tasks.analysis.breakdown import paired_comparison

FLAT = "flat"

# How a row's delta against the full version was obtained.
PAIRED = "paired bootstrap vs full"
SWEEP = "ann sweep vs own flat"
SUM = "variant flat vs full + index vs own flat (no interval)"
ON_TEST = ", test queries"  # appended to a basis computed on the held-out test queries only


def _schema(measures: list[str]) -> dict:
    schema = {
        "provider": pl.String, "full_version": pl.String, "change": pl.String, "index": pl.String,
        "index_params": pl.String, "dim": pl.Int64, "vectors": pl.Int64, "bytes_per_vector": pl.Float64,
        "rescore_bytes_per_vector": pl.Float64, "index_bytes": pl.Int64, "projected_vectors": pl.Int64,
        "projected_index_bytes": pl.Float64, "projected_rescore_bytes": pl.Float64,
        "texts_per_second": pl.Float64, "texts_per_second_vs_full": pl.Float64,
    }
    for m in measures:
        schema |= {m: pl.Float64, f"delta_{m}": pl.Float64, f"delta_{m}_ci_low": pl.Float64,
                   f"delta_{m}_ci_high": pl.Float64, f"p_value_{m}": pl.Float64}
    return schema | {"delta_basis": pl.String, "delta_queries": pl.Int64}


def judged_queries(per_query: pl.DataFrame) -> tuple[pl.DataFrame, bool]:
    """The per-query rows a verdict may act on: the test queries when the run has test queries and
    others (dev, train), else every row. Returns them and whether they are the test split only."""
    if "split" not in per_query.columns:
        return per_query, False
    test = (pl.col("split") == HELD_OUT).fill_null(False)
    held_out = per_query.select(test.any().alias("any"), test.all().alias("all")).row(0, named=True)
    if held_out["any"] and not held_out["all"]:
        return per_query.filter(test), True
    return per_query, False


def encoding_speed(latency: pl.DataFrame | None) -> dict[str, float]:
    """provider -> texts/s at its largest measured batch size, one call at a time."""
    if latency is None or latency.height == 0:
        return {}
    one = latency.filter(pl.col("concurrency") == 1).sort("batch_size")
    return {row["provider"]: row["texts_per_second"] for row in one.group_by("provider").last().iter_rows(named=True)}


def cheaper_variants_table(per_query: pl.DataFrame, storage: pl.DataFrame, variants, providers: list[str],
                           measures: list[str], sweep: pl.DataFrame | None = None, latency: pl.DataFrame | None = None,
                           project_vectors: int | None = None, resamples: int = 1000, permutations: int = 10000,
                           seed: int = 0, level: float = 0.95) -> pl.DataFrame:
    """One row per provider at the flat index and per compressed index of the sweep.

    `variants` are tasks/config/cheaper.CheaperVariant; a provider that is no one's variant is
    its own full version (change "full"). The delta against the full version is a paired
    comparison on the queries both scored for a variant's flat index, the sweep's delta for a
    compressed index of the full model, and the sum of the two means for a compressed index of
    a variant (`delta_basis` says which). When per_query has test queries beside others, means,
    deltas, intervals and p-values are on the test queries only (`delta_basis` ends in ", test
    queries"; a compressed index's from the sweep's `_test` columns); `delta_queries` counts them."""
    per_query, on_test = judged_queries(per_query)
    variant_of = {v.provider: v for v in variants}
    speed = encoding_speed(latency)
    flat_rows = storage.filter(pl.col("index") == FLAT)
    flat_storage = {r["provider"]: r for r in flat_rows.iter_rows(named=True)}
    present = set(per_query.filter(pl.col("index") == FLAT)["provider"].unique().to_list())
    rows, flat_delta = [], {}
    for provider in [p for p in providers if p in present]:
        variant = variant_of.get(provider)
        full = variant.full if variant and variant.full in present else provider
        store = flat_storage.get(provider, {})
        vectors = store.get("vectors")
        row = {
            "provider": provider, "full_version": full, "change": variant.change if variant else "full",
            "index": FLAT, "index_params": "{}", "dim": store.get("dim"), "vectors": vectors,
            "bytes_per_vector": store.get("index_bytes_per_vector"), "rescore_bytes_per_vector": 0.0,
            "index_bytes": store.get("index_bytes"),
            "texts_per_second": speed.get(provider),
            "texts_per_second_vs_full": (speed[provider] / speed[full] if variant and variant.encoder_changed
                                         and provider in speed and speed.get(full) else None),
        }
        flat = per_query.filter((pl.col("provider") == provider) & (pl.col("index") == FLAT))
        means = dict(flat.group_by("measure").agg(pl.col("value").mean()).iter_rows())
        if full != provider:
            compared = paired_comparison(per_query.filter(pl.col("measure").is_in(measures)),
                                         (provider, FLAT, None), (full, FLAT, None), resamples, permutations, seed, level)
            by_measure = {r["measure"]: r for r in compared.iter_rows(named=True)}
        else:
            by_measure = {}
        for m in measures:
            got = by_measure.get(m)
            row |= {m: means.get(m),
                    f"delta_{m}": got["diff"] if got else (0.0 if full == provider else None),
                    f"delta_{m}_ci_low": got["ci_low"] if got else None,
                    f"delta_{m}_ci_high": got["ci_high"] if got else None,
                    f"p_value_{m}": got["p_value"] if got else None}
            flat_delta[(provider, m)] = row[f"delta_{m}"]
        row["delta_basis"] = PAIRED + (ON_TEST if on_test else "") if full != provider else None
        row["delta_queries"] = (next(iter(by_measure.values()))["n"] if by_measure
                                else flat.select(pl.col("query_id").n_unique()).item())
        rows.append(row)
        if sweep is not None:
            rows += _compressed_rows(sweep, provider, full, row, measures, flat_delta, on_test)
    table = pl.DataFrame(rows, schema=_schema(measures))
    projected = pl.lit(project_vectors, dtype=pl.Int64)
    return table.with_columns(
        projected_vectors=projected,
        projected_index_bytes=pl.col("bytes_per_vector") * projected,
        projected_rescore_bytes=pl.col("rescore_bytes_per_vector") * projected)


def _compressed_rows(sweep: pl.DataFrame, provider: str, full: str, flat_row: dict, measures: list[str],
                     flat_delta: dict, on_test: bool) -> list[dict]:
    rows = []
    mine = sweep.filter(pl.col("provider") == provider)
    # The sweep's test columns when the flat rows are on test (a sweep table without them, from
    # before held-out splits, gives all queries, and the basis then says so by lacking ", test queries").
    split = HELD_OUT if on_test and all(split_column(f"delta_{m}", HELD_OUT) in sweep.columns for m in measures) else None
    col = lambda name: split_column(name, split)  # noqa: E731
    for r in mine.iter_rows(named=True):
        if not _compressed(r["index_kind"], json.loads(r["build_params"]), flat_row["dim"]):
            continue
        params = {**json.loads(r["build_params"]), **json.loads(r["query_params"])}
        row = {**flat_row, "index": r["index_kind"], "index_params": json.dumps(params, separators=(",", ":")),
               "bytes_per_vector": r["bytes_per_vector"], "rescore_bytes_per_vector": float(r["rescore_bytes_per_vector"]),
               "index_bytes": r["index_bytes"],
               "delta_basis": (SWEEP if full == provider else SUM) + (ON_TEST if split else ""),
               "delta_queries": r.get(col("queries"))}
        for m in measures:
            if f"delta_{m}" not in r:
                row |= {m: None, f"delta_{m}": None, f"delta_{m}_ci_low": None, f"delta_{m}_ci_high": None,
                        f"p_value_{m}": None}
                continue
            own = r[col(f"delta_{m}")]
            base = flat_delta.get((provider, m))
            row |= {m: r[col(f"flat_{m}")] + own,
                    f"delta_{m}": own if full == provider else (None if base is None else base + own),
                    f"delta_{m}_ci_low": r[col(f"delta_{m}_ci_low")] if full == provider else None,
                    f"delta_{m}_ci_high": r[col(f"delta_{m}_ci_high")] if full == provider else None,
                    f"p_value_{m}": None}
        rows.append(row)
    return rows


def _compressed(kind: str, build_params: dict, dim: int | None) -> bool:
    """Whether the kind stores fewer bytes a vector than the float vectors, as it declares
    (tasks/indexes; IVF and HNSW trade speed, not bytes). A kind this process does not know
    (a sweep table from elsewhere) is left out."""
    from retbench.tasks.indexes import index_kind, known_kinds

    if kind not in known_kinds():
        return False
    index = index_kind(kind)
    return index.is_compressed(dim or 768, index.complete(build_params))
