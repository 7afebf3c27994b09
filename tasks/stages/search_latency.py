"""Search latency per setting, as a served query costs it: the held-out test queries searched one
at a time (at most QUERY_CAP of them, spread evenly over their sorted ids), after WARMUP
untimed searches, FAISS on one thread. Dense settings time the index search with MaxP to
documents, BM25 its tokenising and scoring, a hybrid its fusion of the stages' runs. Each
measurement is kept in the store under the run's content key and this machine, so a cached
rerun reads it instead of timing again (`--remeasure` times again)."""
from __future__ import annotations

import json
import time
from pathlib import Path

import faiss
import numpy as np
import polars as pl

from retbench.tasks.analysis.equivalence import quantile_band
from retbench.tasks.store.build import build_once
from retbench.tasks.store.files import stable_hash
from retbench.tasks.store.integrity import parquet_readable

QUERY_CAP = 200  # test queries timed per setting
WARMUP = 10  # untimed searches first (caches, lazily built structures)
HELD_OUT = "test"
UNFILTERED = "dense-unfiltered"  # the kind of a filtered dataset's dense row timed without its filters

SCHEMA = {"provider": pl.String, "index": pl.String, "nprobe": pl.Int64, "kind": pl.String,
          "queries": pl.Int64, "query_split": pl.String, "warmup": pl.Int64,
          "search_p50_ms": pl.Float64, "search_p95_ms": pl.Float64, "search_p95_low": pl.Float64,
          "search_p95_high": pl.Float64, "note": pl.String}


def timed_queries(queries_path: str | Path, available: list[str], cap: int = QUERY_CAP) -> tuple[list[str], str]:
    """(query ids to time, the split they come from): the test queries among `available`, or
    every available query when the dataset holds none out; at most `cap`, evenly spaced over
    their sorted ids so the choice is the same on every run."""
    have = set(available)
    queries = pl.read_parquet(queries_path)
    split = "all"
    ids = sorted(have)
    if "split" in queries.columns:
        held = sorted(set(queries.filter(pl.col("split") == HELD_OUT)["query_id"]) & have)
        if held:
            ids, split = held, HELD_OUT
    if len(ids) > cap:
        ids = [ids[i] for i in np.linspace(0, len(ids) - 1, cap).round().astype(int)]
    return ids, split


def percentiles(seconds: list[float]) -> dict:
    """p50, p95 and the p95's noise band, in ms."""
    ms = np.asarray(seconds, dtype=np.float64) * 1e3
    low, high = quantile_band(ms, 0.95)
    p50, p95 = np.percentile(ms, [50, 95])
    return {"search_p50_ms": float(p50), "search_p95_ms": float(p95), "search_p95_low": low, "search_p95_high": high}


def one_at_a_time(search, items: list, warmup: int = WARMUP) -> list[float]:
    """Seconds of `search(item)` per item, after `warmup` untimed calls on the first items."""
    for item in items[:warmup]:
        search(item)
    out = []
    for item in items:
        started = time.perf_counter()
        search(item)
        out.append(time.perf_counter() - started)
    return out


def _measured(store: str | Path, key: str, measure, remeasure: bool) -> pl.DataFrame:
    """The stored measurement for `key` (a content key that already names this machine), or
    `measure()` stored there now."""
    path = Path(store) / "measurements" / "search_latency" / f"{key[:32]}.parquet"
    build_once(store, path, lambda tmp: measure().write_parquet(tmp, compression="zstd"), parse=parquet_readable,
               force=remeasure)
    return pl.read_parquet(path)


def _row(provider, index, nprobe, kind, ids, split, timing: dict | None, note: str | None = None) -> pl.DataFrame:
    empty = dict.fromkeys(("search_p50_ms", "search_p95_ms", "search_p95_low", "search_p95_high"))
    return pl.DataFrame([{"provider": provider, "index": index, "nprobe": nprobe, "kind": kind, "queries": len(ids),
                          "query_split": split, "warmup": WARMUP, **(timing or empty), "note": note}],
                        schema=SCHEMA)


def dense_search_latency(run, built, doc_set, query_set, chunks_path: str, depth: int, queries_path: str,
                         store: str | Path, filters_path: str | None = None, remeasure: bool = False) -> pl.DataFrame:
    """One row: the run's setting (provider, index, nprobe) searched one test query at a time.
    `run` is the retrieve stage's RunResult: its key names the index's content, the query
    vectors, depth and query parameters, so the measurement is stored under it."""
    from retbench.tasks.stages.embed import load_vectors
    from retbench.tasks.stages.filters import search_with_filters
    from retbench.tasks.stages.index import load_index
    from retbench.tasks.stages.maxp import search_documents
    from retbench.tasks.stages.measurements import machine_id

    if built.shards:
        return _row(run.provider, run.index, run.nprobe, "dense", [], None, None,
                    "not timed: a sharded index is searched by several workers")
    params = dict(run.query_params)
    key = stable_hash("search-latency-v1", run.key, QUERY_CAP, WARMUP, machine_id())

    def measure() -> pl.DataFrame:
        query_ids, vectors = load_vectors(query_set)
        ids, split = timed_queries(queries_path, list(query_ids))
        row_of = {q: i for i, q in enumerate(query_ids)}
        chunk_ids = pl.read_parquet(doc_set.path, columns=["id"])["id"]
        chunks = pl.read_parquet(chunks_path, columns=["chunk_id", "doc_id"])
        chunk_doc = pl.DataFrame({"chunk_id": chunk_ids}).join(chunks, on="chunk_id", how="left", maintain_order="left")
        doc_codes = chunk_doc["doc_id"].rank("dense").to_numpy().astype(np.int64) - 1
        doc_ids = chunk_doc["doc_id"].to_numpy()
        kind = built.settings.index_kind
        index = load_index(Path(built.path), expected_dim=vectors.shape[1])
        if params.get("rescore"):
            index.vectors = load_vectors(doc_set)[1]
        kind.set_query_params(index, params)
        groups = pl.read_parquet(filters_path) if filters_path else None

        def filtered(query_id: str):
            one = vectors[row_of[query_id]: row_of[query_id] + 1]
            return search_with_filters(index, one, [query_id], doc_codes, doc_ids, depth, groups, params.get("nprobe"),
                                       search_parameters=lambda sel: kind.search_parameters(index, params, sel))

        def unfiltered(query_id: str):
            return search_documents(index, vectors[row_of[query_id]: row_of[query_id] + 1], doc_codes, depth)

        threads = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(1)  # one served query on one core, as the sweep's single-thread figure
        try:
            rows = [_row(run.provider, run.index, run.nprobe, "dense", ids, split,
                         percentiles(one_at_a_time(filtered if groups is not None else unfiltered, ids)))]
            if groups is not None:  # the ladder's filters step is paired with the search without them
                rows.append(_row(run.provider, run.index, run.nprobe, UNFILTERED, ids, split,
                                 percentiles(one_at_a_time(unfiltered, ids)), "the same search without metadata filters"))
        finally:
            faiss.omp_set_num_threads(threads)
        return pl.concat(rows)

    table = _measured(store, key, measure, remeasure)
    # A query variant's run is relabelled after it was made: its own label, the same measurement.
    return table.with_columns(provider=pl.lit(run.provider))


def bm25_search_latency(system, lexical, depth: int, queries_path: str, store: str | Path,
                        remeasure: bool = False) -> pl.DataFrame:
    """One row: a BM25 first stage (a SystemRun of kind bm25, `lexical` its spec entry) searched
    one test query at a time, tokenising included, down to each document's best chunk."""
    from retbench.tasks.stages.lexical import _CHUNKS, Tokenizer, _maxp_top, load_bm25
    from retbench.tasks.stages.measurements import machine_id

    folder = Path(system.facts["index_path"])
    key = stable_hash("search-latency-bm25-v1", system.key, folder.name, depth, QUERY_CAP, WARMUP, machine_id())

    def measure() -> pl.DataFrame:
        queries = pl.read_parquet(queries_path, columns=["query_id", "text"])
        ids, split = timed_queries(queries_path, queries["query_id"].to_list())
        text = dict(queries.select("query_id", "text").iter_rows())
        tokenize = Tokenizer(lexical.tokenizer)
        retriever = load_bm25(str(folder))
        doc_codes = pl.read_parquet(folder / _CHUNKS)["doc_id"].rank("dense").to_numpy().astype(np.int64) - 1
        indptr, postings = retriever.scores["indptr"], retriever.scores["indices"]

        def search(query_id: str):  # search_bm25's loop body, for one query
            token_ids = retriever.get_tokens_ids(tokenize(text[query_id]))
            if not token_ids:
                return None
            candidates = np.unique(np.concatenate([postings[indptr[t]:indptr[t + 1]] for t in token_ids]))
            if not len(candidates):
                return None
            return _maxp_top(candidates, retriever.get_scores(token_ids)[candidates].astype(np.float64), doc_codes, depth)

        return _row(system.system, "bm25", None, "bm25", ids, split, percentiles(one_at_a_time(search, ids)))

    return _measured(store, key, measure, remeasure)


def fusion_latency(system, fusion, input_paths: list[str], queries_path: str, store: str | Path,
                   remeasure: bool = False) -> pl.DataFrame:
    """One row: a hybrid's own step (a SystemRun of kind hybrid, `fusion` its spec's fusion), its
    stages' runs fused for one test query at a time; its stages' searches are their own rows."""
    from retbench.tasks.analysis.fusion import reciprocal_rank_fusion, score_fusion
    from retbench.tasks.stages.measurements import machine_id

    key = stable_hash("search-latency-fusion-v1", system.key, QUERY_CAP, WARMUP, machine_id())
    facts = system.facts

    def measure() -> pl.DataFrame:
        runs = [pl.read_parquet(p) for p in input_paths]
        available = sorted(set.union(*(set(r["query_id"]) for r in runs)))  # a stage may have no hit for one
        ids, split = timed_queries(queries_path, available)
        per_query = {q: [r.filter(pl.col("query_id") == q) for r in runs] for q in ids}  # sliced before the clock
        cut = fusion.depth if fusion is not None else None
        if fusion is None or fusion.method == "rrf":
            k = facts.get("k", 60)
            fuse = lambda parts: reciprocal_rank_fusion(*parts, k=k, name=system.system, depth=cut)  # noqa: E731
        else:
            alpha = float(facts.get("alpha", fusion.alpha if fusion.alpha is not None else 0.5))
            fuse = lambda parts: score_fusion(*parts, alpha=alpha, normalization=fusion.normalization,  # noqa: E731
                                              name=system.system, depth=cut)
        seconds = one_at_a_time(lambda q: fuse(per_query[q]), ids)
        return _row(system.system, system.index, None, "fusion", ids, split, percentiles(seconds),
                    "the fusion step alone; the system adds its stages' searches")

    return _measured(store, key, measure, remeasure)


def system_totals(table: pl.DataFrame, system_runs: list, systems: pl.DataFrame | None) -> pl.DataFrame:
    """`table` plus one `system` row per hybrid and reranked system: a hybrid's stages' searches
    plus its fusion, a reranker's first stage plus its scoring (the systems table's added p50/p95
    when the reranker was timed, else unknown). Sums of percentiles: at most a slight overestimate
    of the percentile of the sum. The p95 band of a sum is the sum of the bands."""
    columns = ("search_p50_ms", "search_p95_ms", "search_p95_low", "search_p95_high")
    # A stage as served: a filtered dataset's dense row with its filters (not `dense-unfiltered`).
    known = {(r["provider"], r["index"], r["nprobe"]): r for r in table.iter_rows(named=True)
             if r["kind"] in ("dense", "bm25")}
    fusion = {r["provider"]: r for r in table.iter_rows(named=True) if r["kind"] == "fusion"}
    added = {r["system"]: r for r in systems.iter_rows(named=True)} if systems is not None else {}
    rows = []
    for s in system_runs:  # in dependency order: a system reading another finds its total
        if s.kind == "hybrid":
            parts, own, what = [known.get(i) for i in s.inputs], fusion.get(s.system), "stages' searches + fusion"
        elif s.kind == "rerank":
            scored = added.get(s.system) or {}
            p50, p95 = scored.get("added_p50_ms"), scored.get("added_p95_ms")
            low, high = scored.get("added_p95_ms_low"), scored.get("added_p95_ms_high")
            own = None if p50 is None else {"search_p50_ms": p50, "search_p95_ms": p95,
                                            "search_p95_low": low if low is not None else p95,
                                            "search_p95_high": high if high is not None else p95}
            parts, what = [known.get(i) for i in s.inputs], "first stage's search + rerank scoring"
        else:
            continue
        missing = [f"{i[0]}/{i[1]}" for i, p in zip(s.inputs, parts) if p is None or p["search_p50_ms"] is None]
        if own is None:
            missing.append("fusion" if s.kind == "hybrid" else "rerank scoring (not timed)")
        timed = [p for p in parts if p is not None] + ([own] if own else [])
        total = None if missing else {c: float(sum(p[c] for p in timed)) if all(p[c] is not None for p in timed)
                                      else None for c in columns}
        first = next((p for p in parts if p is not None), None)
        row = {"provider": s.system, "index": s.index, "nprobe": s.nprobe, "kind": "system",
               "queries": None if first is None else first["queries"],
               "query_split": None if first is None else first["query_split"], "warmup": WARMUP,
               **(total or dict.fromkeys(columns)),
               "note": what if not missing else f"unknown: {', '.join(missing)} not measured"}
        known[(s.system, s.index, s.nprobe)] = row
        rows.append(row)
    return pl.concat([table, pl.DataFrame(rows, schema=SCHEMA, orient="row")]) if rows else table
