"""Metadata filters: which documents a query's filter allows, and search restricted to them inside
FAISS (an IDSelectorBatch on the allowed chunk rows, passed in SearchParameters), for exact and
approximate indexes alike, so nothing is over-fetched and then thrown away.

A filter is {field: value} (equality) or {field: [values]} (membership); every condition must
hold; a document without the field fails it. Judgments outside the filter stay in the qrels
(the filter costs that recall, and the `filters` table says how much), they are never dropped.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import faiss
import numpy as np
import polars as pl
import pyarrow.parquet as pq

from retbench.tasks.indexes import kind_of_index
from retbench.tasks.stages.maxp import search_documents
from retbench.tasks.store.build import StageResult, build_once
from retbench.tasks.store.files import stable_hash
from retbench.tasks.store.integrity import parquet_readable

FILTER_REPORT_SCHEMA = {
    "query_id": pl.String,
    "filter": pl.String,
    "allowed_docs": pl.Int64,
    "selectivity": pl.Float64,  # allowed documents / documents
    "relevant_judged": pl.Int64,
    "relevant_outside_filter": pl.Int64,  # judged relevant but excluded by the filter: unreachable
    "outside_doc_ids": pl.List(pl.String),
}


def matches(metadata: dict, condition: dict) -> bool:
    for field, wanted in condition.items():
        if field not in metadata:
            return False
        values = wanted if isinstance(wanted, list) else [wanted]
        # JSON equality: 1 == 1.0, but "1" != 1 and true != 1
        if not any(metadata[field] == v and isinstance(metadata[field], bool) == isinstance(v, bool) for v in values):
            return False
    return True


def filter_groups(metadata: pl.DataFrame | None, filters: pl.DataFrame, corpus_ids: list[str]) -> pl.DataFrame:
    """One row per distinct filter: filter (canonical JSON), query_ids, doc_ids (the allowed documents)."""
    by_doc = {d: json.loads(m) for d, m in metadata.iter_rows()} if metadata is not None else {}
    rows = []
    for (text,), group in filters.group_by("filter", maintain_order=True):
        condition = json.loads(text)
        allowed = [d for d in corpus_ids if matches(by_doc.get(d, {}), condition)]
        rows.append((text, group["query_id"].to_list(), allowed))
    return pl.DataFrame(rows, schema={"filter": pl.String, "query_ids": pl.List(pl.String),
                                      "doc_ids": pl.List(pl.String)}, orient="row")


@dataclass(frozen=True, kw_only=True)
class FiltersRef(StageResult):
    """The filter groups of a dataset in the store; `queries`: how many queries are filtered."""

    queries: int
    groups: int


def plan_filters(dataset_path: str, dataset_key: str, store: str | Path, force: bool = False) -> FiltersRef | None:
    """The dataset's filter groups as a store file, or None when no query has a filter."""
    from retbench.tasks.stages.dataset import load_saved_dataset

    if not (Path(dataset_path) / "filters.parquet").is_file():
        return None  # no query has a filter (save_dataset writes the table only then): skip reading the corpus
    saved = load_saved_dataset(dataset_path)
    if saved.filters is None:
        return None
    key = stable_hash("filters-v1", dataset_key)
    path = Path(store) / "filters" / f"{key[:32]}.parquet"
    groups = filter_groups(saved.metadata, saved.filters, saved.corpus["doc_id"].to_list())
    made = build_once(str(store), path, lambda tmp: pq.write_table(groups.to_arrow(), tmp, compression="zstd"),
                      parse=parquet_readable, force=force)
    return FiltersRef(path=str(path), key=key, computed=made.computed, seconds=made.seconds,
                      queries=saved.filters.height, groups=groups.height)


def filter_report(groups: pl.DataFrame, qrels: pl.DataFrame, documents: int, relevance_level: int = 1) -> pl.DataFrame:
    """Per filtered query: its filter, how many documents it allows, and the judged-relevant
    documents it excludes (they stay in the qrels, so they count as misses)."""
    relevant = qrels.filter(pl.col("grade") >= relevance_level)
    rows = []
    for text, query_ids, doc_ids in groups.iter_rows():
        allowed = set(doc_ids)
        for query_id in query_ids:
            judged = relevant.filter(pl.col("query_id") == query_id)["doc_id"].to_list()
            outside = sorted(d for d in judged if d not in allowed)
            rows.append((query_id, text, len(allowed), len(allowed) / documents if documents else 0.0, len(judged),
                         len(outside), outside))
    return pl.DataFrame(rows, schema=FILTER_REPORT_SCHEMA, orient="row").sort("query_id")


# ---------------------------------------------------------------- search inside FAISS


def search_parameters(index: faiss.Index, selector: faiss.IDSelector, nprobe: int | None = None,
                      ef_search: int | None = None) -> faiss.SearchParameters:
    """SearchParameters carrying the selector, of the kind the index takes (IVF keeps its nprobe),
    as the index's kind (tasks/indexes) makes them."""
    query_params = {k: v for k, v in (("nprobe", nprobe), ("ef_search", ef_search)) if v}
    return kind_of_index(index).search_parameters(index, query_params, selector)


class Restricted:
    """An index seen through a selector: what search_documents needs (search, ntotal).
    `search_parameters(selector)`, when given, makes the SearchParameters (the index's kind with
    its query parameters); otherwise they are found from the index."""

    def __init__(self, index: faiss.Index, rows: np.ndarray, nprobe: int | None = None, ef_search: int | None = None,
                 search_parameters_of=None):
        self.selector = faiss.IDSelectorBatch(np.ascontiguousarray(rows, dtype=np.int64))
        self.params = (search_parameters_of(self.selector) if search_parameters_of is not None
                       else search_parameters(index, self.selector, nprobe, ef_search))
        self.index = index
        self.ntotal = len(rows)

    def search(self, queries: np.ndarray, k: int):
        return self.index.search(queries, k, params=self.params)


def search_with_filters(index, queries: np.ndarray, query_ids: list[str], doc_codes: np.ndarray, chunk_doc_ids: np.ndarray,
                        depth: int, groups: pl.DataFrame, nprobe: int | None = None, search_parameters=None) -> pl.DataFrame:
    """search_documents for every query, the filtered ones restricted to the chunks of their allowed
    documents; returns the same hits frame (query row, chunk row, score). `search_parameters`:
    selector -> faiss.SearchParameters (default: found from the index, with `nprobe`)."""
    row_of = {q: i for i, q in enumerate(query_ids)}
    filtered = np.zeros(len(query_ids), dtype=bool)
    parts = []
    for _, members, doc_ids in groups.iter_rows():
        rows = np.array([row_of[q] for q in members if q in row_of], dtype=np.int64)
        if not len(rows):
            continue
        filtered[rows] = True
        allowed = np.flatnonzero(np.isin(chunk_doc_ids, np.array(doc_ids, dtype=object)))
        if not len(allowed):  # the filter allows no chunk: these queries retrieve nothing
            continue
        view = Restricted(index, allowed, nprobe, search_parameters_of=search_parameters)
        hits = search_documents(view, queries[rows], doc_codes, depth)
        parts.append(hits.with_columns(query=pl.Series(rows).gather(hits["query"])))
    free = np.flatnonzero(~filtered)
    if len(free):
        hits = search_documents(index, queries[free], doc_codes, depth)
        parts.append(hits.with_columns(query=pl.Series(free).gather(hits["query"])))
    return pl.concat(parts).sort("query", "score", descending=[False, True], maintain_order=True)
