"""What a metadata filter costs an approximate index: neighbour recall@k of filtered IVF/HNSW
search against filtered exact search, at chosen filter selectivities.

Both restrict the search inside FAISS with an IDSelector (SearchParametersIVF with nprobe,
SearchParametersHNSW with efSearch). A restrictive filter starves IVF: the nprobe lists nearest the query may hold few or no allowed
vectors, so fewer than k come back although exact search finds k. Filters are drawn two ways:
`random` (a uniform sample of the documents: allowed vectors spread over every list) and
`correlated` (the share of vectors furthest along one random direction: the allowed vectors sit
in a few lists, often not the query's). Over-fetching and filtering afterwards ("postfilter xF":
the unfiltered top k*F, allowed ones kept) is measured next to filtering inside FAISS.
"""
from __future__ import annotations

import json

import faiss
import numpy as np
import polars as pl

from retbench.tasks.indexes import kind_of_index
from retbench.tasks.stages.sweep import bootstrap_ci, exact_scores_of, neighbour_recall

FILTER_KINDS = ("random", "correlated")
FIDELITY_SCHEMA = {
    "filter_kind": pl.String,
    "selectivity": pl.Float64,
    "allowed": pl.Int64,
    "index": pl.String,
    "params": pl.String,
    "k": pl.Int64,
    "queries": pl.Int64,
    "neighbour_recall": pl.Float64,  # filtered, against filtered exact search
    "ci_low": pl.Float64,
    "ci_high": pl.Float64,
    "unfiltered_neighbour_recall": pl.Float64,  # same index and parameters, no filter
    "recall_lost": pl.Float64,  # unfiltered - filtered
    "starved_queries": pl.Int64,  # queries given fewer results than filtered exact search gave
}


def allowed_rows(documents: np.ndarray, selectivity: float, kind: str, seed: int) -> np.ndarray:
    n = len(documents)
    count = max(1, round(selectivity * n))
    rng = np.random.default_rng([seed, int(selectivity * 1e6)])
    if kind == "random":
        return np.sort(rng.choice(n, count, replace=False))
    if kind == "correlated":
        direction = rng.standard_normal(documents.shape[1]).astype(np.float32)
        return np.sort(np.argsort(-(documents @ direction), kind="stable")[:count])
    raise ValueError(f"unknown filter kind {kind!r} (expected one of {FILTER_KINDS})")


def _params(index: faiss.Index, setting: dict, selector=None):
    return kind_of_index(index).search_parameters(index, setting, selector)


def stored_hnsw(doc_set, config, store) -> tuple[str, faiss.Index, list[dict]]:
    """(name, index, efSearch settings) of the HNSW index `config` (a FilterHNSWSpec) asks for on
    these vectors, built through the store (the ANN sweep reuses the same file)."""
    from pathlib import Path

    from retbench.tasks.stages.index import IndexSettings, build_index, load_index

    settings = IndexSettings("hnsw", M=config.M, ef_construction=config.ef_construction)
    built = build_index(doc_set, settings, Path(store))
    return (settings.file_name.removesuffix(".faiss"), load_index(built.path, expected_dim=doc_set.dim),
            [{"efSearch": e} for e in config.ef_search])


def filtered_fidelity(documents: np.ndarray, queries: np.ndarray, indexes: list[tuple[str, faiss.Index, list[dict]]],
                      selectivities=(0.5, 0.1, 0.01), k: int = 10, kinds=FILTER_KINDS, seed: int = 0,
                      resamples: int = 1000, overfetch: tuple[int, ...] = (10,),
                      filters: list[tuple[str, float, np.ndarray]] | None = None) -> pl.DataFrame:
    """FIDELITY_SCHEMA rows: every (filter kind, selectivity) x (index, query-time parameters),
    plus exact search post-filtered after over-fetching `overfetch` x k. `indexes`: (name, index
    built on `documents`, [{"nprobe": 4}, ...] or [{"efSearch": 64}, ...]). `filters`, when given,
    replaces the drawn ones: (kind, nominal selectivity, allowed rows), e.g. from a metadata field."""
    flat = faiss.IndexFlatIP(documents.shape[1])
    flat.add(documents)
    _, free_exact_ids = flat.search(queries, k)
    free_exact_scores = exact_scores_of(flat, queries, free_exact_ids)
    if filters is None:
        filters = [(kind, s, allowed_rows(documents, s, kind, seed)) for kind in kinds for s in selectivities]
    rows = []
    for kind, selectivity, allowed in filters:
        selector = faiss.IDSelectorBatch(allowed.astype(np.int64))
        exact_scores, exact_ids = flat.search(queries, k, params=faiss.SearchParameters(sel=selector))
        wanted = (exact_ids >= 0).sum(axis=1)

        def row(name, params, ids, free_recall):
            recall = neighbour_recall(exact_ids, exact_scores, ids, exact_scores_of(flat, queries, ids), k)
            low, high = bootstrap_ci(recall, resamples, seed)
            starved = int(((ids >= 0).sum(axis=1) < wanted).sum())
            rows.append((kind, selectivity, len(allowed), name, json.dumps(params, sort_keys=True), k, len(queries),
                         float(recall.mean()), low, high, free_recall, free_recall - float(recall.mean()), starved))

        for factor in overfetch:
            depth = min(k * factor, flat.ntotal)
            _, many = flat.search(queries, depth)
            kept = np.where(np.isin(many, allowed), many, -1)
            # the first k allowed ids of each query, in rank order
            order = np.argsort(kept < 0, axis=1, kind="stable")
            ids = np.take_along_axis(kept, order, axis=1)[:, :k]
            row(f"flat+postfilter x{factor}", {"overfetch": factor}, ids, 1.0)
        for name, index, settings in indexes:
            for setting in settings:
                _, free_ids = index.search(queries, k, params=_params(index, setting))
                free = neighbour_recall(free_exact_ids, free_exact_scores, free_ids,
                                        exact_scores_of(flat, queries, free_ids), k)
                _, ids = index.search(queries, k, params=_params(index, setting, selector))
                row(name, setting, ids, float(free.mean()))
    return pl.DataFrame(rows, schema=FIDELITY_SCHEMA, orient="row")
