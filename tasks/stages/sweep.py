"""ANN sweep, the measuring: what each approximate index setting costs in retrieval quality, at
what speed and size, against exact search on the same vectors. The grid comes from
tasks/stages/sweep_grid.py (what the index kinds declare), the pick for a loss budget from
tasks/analysis/ann_recommend.py.

Build-time parameters (IVF nlist and training sample, HNSW M and efConstruction, IVF-PQ nlist,
m, nbits, SQ type) each get one persisted index; query-time parameters (nprobe, efSearch, the
binary index's float re-scoring depth) are swept on the loaded index without rebuilding. Per setting: neighbour recall@k against the flat top-k
(tolerant of exact-score ties at the k-th place), the change in document-level Recall@k, MRR
and nDCG@k after MaxP with a paired bootstrap interval, the relevant documents exact search
found and the setting lost, build/train seconds, bytes, batched QPS and single-query latency
percentiles with one thread and with all. When the queries have a held-out test split, every
quality column is also given for the dev queries (every query not in test) and the test queries
apart (`_dev`, `_test` columns), so the recommendation is chosen on dev and checked on test.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import faiss
import numpy as np
import polars as pl
import pyarrow.parquet as pq

from retbench.tasks.progress import Progress
from retbench.tasks.stages.build_vectors import CachedVectors, FlatFile
from retbench.tasks.stages.embed import EmbeddingSet, read_vectors, store_vectors
from retbench.tasks.store.build import StageResult, build_once
from retbench.tasks.analysis.equivalence import quantile_band
from retbench.tasks.analysis.stats import bootstrap_ci as _bootstrap_ci
from retbench.tasks.config.sweep import SweepSpec  # noqa: F401  (re-exported: tests and benchmarks import it from here)
from retbench.tasks.stages.index import BuiltIndex, build_index, index_path, load_index, set_query_params
from retbench.tasks.stages.sweep_grid import default_pq_m, default_pq_nbits, resolve_grid  # noqa: F401  (re-exported)
from retbench.tasks.analysis.ann_recommend import CHOOSE, HELD_OUT, split_column
from retbench.tasks.analysis.ann_recommend import Recommendation, recommend, relative_loss  # noqa: F401  (re-exported)
from retbench.tasks.stages.vectors import l2_normalized
from retbench.tasks.analysis.metrics import evaluate
from retbench.tasks.analysis.runs import trec_order
from retbench.tasks.stages.maxp import search_documents
from retbench.tasks.store.files import atomic_write, stable_hash, write_json, write_parquet, write_text

# --- fidelity -----------------------------------------------------------------------------


def neighbour_recall(exact_ids: np.ndarray, exact_scores: np.ndarray, approx_ids: np.ndarray,
                     approx_exact_scores: np.ndarray, k: int, tol: float = 1e-6) -> np.ndarray:
    """Per query: the share of the approximate top-k that belongs in the exact top-k.

    A returned id counts when it is in the exact top-k, or when its *exact* score reaches the
    exact k-th score (less `tol`, for float summation order): with a tie at the k-th place,
    either of the tied vectors is a correct answer. `exact_scores` and `approx_exact_scores`
    are exact inner products of the listed ids (-1 ids are padding and never count).
    """
    exact_ids, approx_ids = exact_ids[:, :k], approx_ids[:, :k]
    exact_scores, approx_exact_scores = exact_scores[:, :k], approx_exact_scores[:, :k]
    valid_exact = exact_ids >= 0
    wanted = valid_exact.sum(axis=1)
    kth = np.where(valid_exact, exact_scores, np.inf).min(axis=1)
    member = (approx_ids[:, :, None] == np.where(valid_exact, exact_ids, -2)[:, None, :]).any(axis=2)
    tied = approx_exact_scores >= (kth - tol)[:, None]
    hits = ((approx_ids >= 0) & (member | tied)).sum(axis=1)
    return np.where(wanted > 0, np.minimum(hits, wanted) / np.maximum(wanted, 1), 1.0)


def exact_scores_of(flat: faiss.Index, queries: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Exact inner products of each query with the listed ids (-inf for -1 padding)."""
    safe = np.where(ids >= 0, ids, 0)
    vectors = flat.reconstruct_batch(safe.reshape(-1)).reshape(*ids.shape, -1)
    scores = np.einsum("qd,qkd->qk", queries, vectors)
    return np.where(ids >= 0, scores, -np.inf)


def bootstrap_ci(differences: np.ndarray, resamples: int, seed: int, confidence: float = 0.95) -> tuple[float, float]:
    """Percentile interval of the mean per-query difference. The same seed draws the same
    resamples for every setting of a sweep, so the intervals are paired and comparable."""
    if len(differences) == 0 or resamples == 0:
        return float("nan"), float("nan")
    low, high = _bootstrap_ci(differences, resamples, seed, confidence)
    return float(low[0]), float(high[0])


# --- speed --------------------------------------------------------------------------------


def _percentiles_ms(seconds: list[float]) -> tuple[float, float, float]:
    p50, p95, p99 = np.percentile(np.asarray(seconds) * 1e3, [50, 95, 99])
    return float(p50), float(p95), float(p99)


def measure_speed(index: faiss.Index, queries: np.ndarray, k: int, repeats: int, warmup: int,
                  latency_rows: np.ndarray, all_threads: int) -> tuple[dict, np.ndarray]:
    """Batched QPS (all threads, best of `repeats`) and one-query latency percentiles with one
    thread and with all; returns them with the batched search's ids."""
    speed: dict = {}
    try:
        faiss.omp_set_num_threads(all_threads)
        for _ in range(warmup):
            index.search(queries, k)
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            _, ids = index.search(queries, k)
            times.append(time.perf_counter() - started)
        # Best of the repeats, as ann-benchmarks reports: on a shared machine noise only slows.
        speed["qps_batch"] = len(queries) / max(min(times), 1e-12)
        for label, threads in (("single_thread", 1), ("all_threads", all_threads)):
            faiss.omp_set_num_threads(threads)
            for row in latency_rows[: max(1, min(len(latency_rows), 10))] if warmup else []:
                index.search(queries[row : row + 1], k)
            samples = []
            for _ in range(repeats):
                for row in latency_rows:
                    one = queries[row : row + 1]
                    started = time.perf_counter()
                    index.search(one, k)
                    samples.append(time.perf_counter() - started)
            p50, p95, p99 = _percentiles_ms(samples)
            speed.update({f"p50_ms_{label}": p50, f"p95_ms_{label}": p95, f"p99_ms_{label}": p99})
            if label == "single_thread":  # the p95's noise band, for the verdict's "cheaper" claims
                low, high = quantile_band(np.asarray(samples) * 1e3, 0.95)
                speed.update(p95_ms_single_thread_low=low, p95_ms_single_thread_high=high)
    finally:
        faiss.omp_set_num_threads(all_threads)
    return speed, ids


# --- the sweep ----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class SweepResult(StageResult):
    """One provider's sweep: `path` is its table (output_dir/ann_sweep/<provider>.parquet)."""

    provider: str
    lost_path: str
    plot_path: str | None
    recommendation: Recommendation | None
    built: int  # indexes built by this call (0 on a rerun)
    reused: int
    timings: dict = field(default_factory=dict)  # seconds per step of the sweep
    load_report: dict | None = None  # how the document vectors came out of the cache, when they were read


def _dumps(params: dict) -> str:
    return json.dumps(params, separators=(",", ":"))


def _document_run(index, queries, doc_codes, depth, query_ids: pl.Series, chunk_doc_ids: pl.Series) -> pl.DataFrame:
    hits = search_documents(index, queries, doc_codes, depth)
    return pl.DataFrame({
        "query_id": query_ids.gather(hits["query"]),
        "doc_id": chunk_doc_ids.gather(hits["chunk"]),
        "score": hits["score"],
    })


def _per_query_matrix(run: pl.DataFrame, qrels: pl.DataFrame, measures: list[str], query_order: pl.DataFrame,
                      relevance_level: int) -> dict[str, np.ndarray]:
    """measure -> values aligned with query_order; a query with no hits scores 0."""
    if run.height:
        per_query = evaluate(run, qrels, measures, relevance_level=relevance_level).per_query
    else:
        per_query = pl.DataFrame(schema={"query_id": pl.String, "measure": pl.String, "value": pl.Float64})
    out = {}
    for measure in measures:
        values = per_query.filter(pl.col("measure") == measure).select("query_id", "value")
        aligned = query_order.join(values, on="query_id", how="left", maintain_order="left")
        out[measure] = aligned["value"].fill_null(0.0).to_numpy()
    return out


def split_masks(query_order: pl.DataFrame, splits: pl.DataFrame | str | Path | None) -> dict[str, np.ndarray]:
    """{"dev": mask, "test": mask} over query_order when its queries include test ones and others
    ("dev" is every query not in test, a train split included); {} with only one split."""
    if splits is None:
        return {}
    if not isinstance(splits, pl.DataFrame):
        splits = pl.read_parquet(splits, columns=["query_id", "split"])
    if "split" not in splits.columns:
        raise ValueError(f"query splits: expected columns query_id and split (found {splits.columns})")
    aligned = query_order.join(splits.select("query_id", "split"), on="query_id", how="left", maintain_order="left")
    test = (aligned["split"] == HELD_OUT).fill_null(False).to_numpy()
    if not test.any() or test.all():
        return {}
    return {CHOOSE: ~test, HELD_OUT: test}


def _top_k(run: pl.DataFrame, k: int) -> pl.DataFrame:
    return trec_order(run).filter(pl.col("rank") <= k)


def run_sweep(
    doc_set: EmbeddingSet,
    query_set: EmbeddingSet,
    chunks_path: str | Path,
    qrels: pl.DataFrame | str | Path,
    spec: SweepSpec,
    store: Path,
    output_dir: Path,
    force: bool = False,
    progress: Callable[[str], None] | None = None,
    splits: pl.DataFrame | str | Path | None = None,
) -> SweepResult:
    """Sweep one provider; writes `output_dir/ann_sweep/<provider>.parquet` (the table),
    `<provider>.lost.parquet` and `<provider>.png`. `qrels` is a frame or a Parquet path;
    `splits` (query_id, split: a frame or the dataset's queries.parquet) adds the dev and
    test columns when both splits have judged queries."""
    say = progress or (lambda message: None)
    stages: dict[str, float] = {}
    clock = time.perf_counter()
    all_threads = faiss.omp_get_max_threads()
    provider = doc_set.provider
    grid = resolve_grid(spec, doc_set.count, doc_set.dim)
    measures = spec.measures()

    # 1. Build what is missing. The vectors are read from the cache only if the flat index
    #    (first in the grid) must be built, straight into its storage; later builds page their
    #    rows in from the flat file, so the vectors are in memory once, plus the index being built.
    source = CachedVectors(doc_set, index_path(store, doc_set, grid[0][0]))
    builds: list[BuiltIndex] = []
    # Steps: each index built or reused, the flat reference, each setting measured. The indexes
    # stay in the store; the measurements are written at the end (a stop loses them).
    shown = Progress(f"sweep {provider}", len(grid) + 1 + sum(len(query_grid) for _, query_grid in grid[1:]), "steps",
                     emit=say, keeps=False)
    for settings, _ in grid:
        info = build_index(doc_set, settings, store, force=force, vectors=lambda: source)
        say(f"{provider} {Path(info.path).name}: {'built' if info.computed else 'reused'}")
        builds.append(info)
        shown.advance()
    load_report = asdict(source.report) if source.report else None
    if source.report:
        stages["load_vectors"] = source.load_seconds
    stages["build"] = time.perf_counter() - clock - stages.get("load_vectors", 0.0)

    # 2. Queries, chunk -> document, judgments.
    started = time.perf_counter()
    query_id_list, query_matrix, _ = read_vectors(query_set)
    queries = query_matrix  # unit vectors from the cache
    query_ids = pl.Series("query_id", query_id_list, dtype=pl.String)
    chunk_ids = pl.read_parquet(doc_set.path, columns=["id"])["id"]
    chunks = pl.read_parquet(chunks_path, columns=["chunk_id", "doc_id"])
    chunk_doc = pl.DataFrame({"chunk_id": chunk_ids}).join(chunks, on="chunk_id", how="left", maintain_order="left")
    if chunk_doc["doc_id"].null_count():
        raise RuntimeError(f"embedding set {doc_set.key[:12]} names chunks not in {chunks_path}")
    chunk_doc_ids = chunk_doc["doc_id"]
    # Integer codes: search_documents factorises its chunk -> doc array on every call, and that
    # is cheap on integers but costs seconds on a million Python strings.
    doc_codes = np.unique(chunk_doc_ids.to_numpy(), return_inverse=True)[1].astype(np.int64)
    del chunk_doc, chunks, chunk_ids
    if not isinstance(qrels, pl.DataFrame):
        qrels = pl.read_parquet(qrels)
    qrels = qrels.select("query_id", "doc_id", "grade")
    relevant = qrels.filter(pl.col("grade") >= spec.relevance_level)
    stages["prepare"] = time.perf_counter() - started

    latency_rows = np.arange(len(queries))
    if spec.latency_queries is not None and spec.latency_queries < len(queries):
        latency_rows = np.sort(np.random.default_rng(spec.seed).choice(len(queries), spec.latency_queries, replace=False))

    # 3. The reference: flat search, kept loaded to look up exact scores of approximate hits.
    timers = {"speed": 0.0, "retrieve": 0.0, "score": 0.0}

    def evaluate_setting(index, info: BuiltIndex, params: dict, reference: dict | None) -> tuple[dict, pl.DataFrame | None, dict]:
        started = time.perf_counter()
        set_query_params(index, params, info.settings.kind)
        speed, ids = measure_speed(index, queries, spec.k, spec.repeats, spec.warmup, latency_rows, all_threads)
        timers["speed"] += time.perf_counter() - started
        started = time.perf_counter()
        run = _document_run(index, queries, doc_codes, spec.depth, query_ids, chunk_doc_ids)
        timers["retrieve"] += time.perf_counter() - started
        started = time.perf_counter()
        if reference is None:
            reference = {"ids": ids, "run": run}
            reference["scores"] = exact_scores_of(flat, queries, ids)
            reference["order"] = run.select("query_id").unique().join(qrels.select("query_id").unique(), on="query_id").sort("query_id")
            reference["values"] = _per_query_matrix(run, qrels, measures, reference["order"], spec.relevance_level)
            reference["masks"] = split_masks(reference["order"], splits)
            reference["top"] = _top_k(run, spec.k).join(relevant, on=["query_id", "doc_id"]).select(
                "query_id", "doc_id", "grade", exact_rank="rank")
        recall = neighbour_recall(reference["ids"], reference["scores"], ids, exact_scores_of(flat, queries, ids), spec.k)
        values = _per_query_matrix(run, qrels, measures, reference["order"], spec.relevance_level)
        row = {
            "provider": provider,
            "index_kind": info.settings.kind,
            "build_params": _dumps(info.settings.build_params()),
            "query_params": _dumps(params),
            "k": spec.k,
            "queries": reference["order"].height,
            f"neighbour_recall@{spec.k}": float(recall.mean()) if len(recall) else float("nan"),
        }
        for measure in measures:
            exact, approx = reference["values"][measure], values[measure]
            low, high = bootstrap_ci(approx - exact, spec.bootstrap, spec.seed, spec.confidence)
            row[f"flat_{measure}"] = float(exact.mean()) if len(exact) else float("nan")
            row[f"delta_{measure}"] = float((approx - exact).mean()) if len(exact) else float("nan")
            row[f"delta_{measure}_ci_low"], row[f"delta_{measure}_ci_high"] = low, high
        for split, mask in reference["masks"].items():
            row[split_column("queries", split)] = int(mask.sum())
            for measure in measures:
                exact, approx = reference["values"][measure][mask], values[measure][mask]
                low, high = bootstrap_ci(approx - exact, spec.bootstrap, spec.seed, spec.confidence)
                row[split_column(f"flat_{measure}", split)] = float(exact.mean())
                row[split_column(f"delta_{measure}", split)] = float((approx - exact).mean())
                row[split_column(f"delta_{measure}_ci_low", split)] = low
                row[split_column(f"delta_{measure}_ci_high", split)] = high
        row.update({
            "build_seconds": info.build_seconds,
            "train_seconds": info.train_seconds,
            "index_bytes": info.size_bytes,
            "bytes_per_vector": info.size_bytes / max(info.vectors, 1),
            # Re-scoring binary candidates needs the float vectors too (on disk or in memory).
            "rescore_bytes_per_vector": info.settings.index_kind.search_bytes_per_vector(doc_set.dim, params),
            **speed,
            "threads": all_threads,
            "built": info.computed,
        })
        lost = reference["top"].join(_top_k(run, spec.k).select("query_id", "doc_id"), on=["query_id", "doc_id"], how="anti")
        lost = lost.select(
            pl.lit(provider).alias("provider"), pl.lit(info.settings.kind).alias("index_kind"),
            pl.lit(row["build_params"]).alias("build_params"), pl.lit(row["query_params"]).alias("query_params"),
            "query_id", "doc_id", "grade", "exact_rank")
        timers["score"] += time.perf_counter() - started
        return row, lost, reference

    rows, lost_parts = [], []
    flat_info = builds[0]
    flat = load_index(flat_info.path)
    if flat.d != queries.shape[1]:
        raise ValueError(f"index {flat_info.path} has dimension {flat.d}, but the queries have {queries.shape[1]}; delete it to rebuild")
    row, lost, reference = evaluate_setting(flat, flat_info, {}, None)
    rows.append(row)
    shown.advance()
    # From here the flat index only looks up the exact scores of a few hits: reading just those
    # rows from its file keeps it and an approximate index from being resident together.
    del flat
    flat = FlatFile(flat_info.path)
    for info, (settings, query_grid) in zip(builds[1:], grid[1:]):
        index = load_index(info.path)
        if settings.is_binary:
            index.vectors = flat  # re-scoring reads the float vectors back from the flat index
        for params in query_grid:
            row, lost, _ = evaluate_setting(index, info, params, reference)
            rows.append(row)
            lost_parts.append(lost)
            say(f"{provider} {settings.kind} {row['build_params']} {row['query_params']}: "
                f"recall@{spec.k} {row[f'neighbour_recall@{spec.k}']:.3f}, "
                f"delta {spec.measure} {row[f'delta_{spec.measure}']:+.4f}, {row['qps_batch']:,.0f} q/s")
            shown.advance()
        del index
    shown.finish()
    del flat
    stages.update(timers)

    # 4. Tables, recommendation, plot.
    table = pl.DataFrame(rows)
    table = table.with_columns(relative_loss=relative_loss(table, spec.measure, "mean"),
                               **{split_column("relative_loss", split): relative_loss(table, spec.measure, "mean", split)
                                  for split in reference["masks"]})
    if spec.project_vectors:
        table = table.with_columns(projected_vectors=pl.lit(spec.project_vectors, dtype=pl.Int64),
                                   projected_index_bytes=pl.col("bytes_per_vector") * spec.project_vectors,
                                   projected_rescore_bytes=pl.col("rescore_bytes_per_vector") * spec.project_vectors)
    lost = pl.concat(lost_parts) if lost_parts else _empty_lost()
    directory = Path(output_dir) / "ann_sweep"
    table_path = write_parquet(table, directory / f"{provider}.parquet")
    lost_path = write_parquet(lost, directory / f"{provider}.lost.parquet")
    recommendation = recommend(table, spec.measure, spec.loss_budget, spec.budget_on).get(provider)
    plot_path = plot_sweep(table, directory / f"{provider}.png", spec.k, recommendation)
    stages["total"] = time.perf_counter() - clock
    return SweepResult(
        path=str(table_path),
        key=stable_hash("sweep", doc_set.key, query_set.key, spec.model_dump(mode="json")),
        computed=any(b.computed for b in builds),
        seconds=stages["total"],
        provider=provider,
        lost_path=str(lost_path),
        plot_path=None if plot_path is None else str(plot_path),
        recommendation=recommendation,
        built=sum(b.computed for b in builds),
        reused=sum(not b.computed for b in builds),
        timings={k: round(v, 3) for k, v in stages.items()},
        load_report=load_report,
    )


def _empty_lost() -> pl.DataFrame:
    return pl.DataFrame(schema={
        "provider": pl.String, "index_kind": pl.String, "build_params": pl.String, "query_params": pl.String,
        "query_id": pl.String, "doc_id": pl.String, "grade": pl.Int64, "exact_rank": pl.Int64,
    })


def write_sweep_tables(results: list[SweepResult], output_dir: Path) -> dict[str, str]:
    """All providers in one `ann_sweep.parquet`/`.csv`, `ann_lost.parquet` and
    `ann_recommendation.json` (one line per provider under "lines", each ending in where the
    setting was chosen and, with a held-out split, its loss on the test queries)."""
    output_dir = Path(output_dir)
    table = pl.concat([pl.read_parquet(r.path) for r in results], how="diagonal_relaxed")
    lost = pl.concat([pl.read_parquet(r.lost_path) for r in results], how="diagonal_relaxed")
    paths = {
        "ann_sweep": str(write_parquet(table, output_dir / "ann_sweep.parquet")),
        "ann_lost": str(write_parquet(lost, output_dir / "ann_lost.parquet")),
    }
    paths["ann_sweep_csv"] = str(write_text(output_dir / "ann_sweep.csv", table.write_csv()))
    recommendations = {r.provider: (r.recommendation.to_dict() if r.recommendation else None) for r in results}
    lines = [r.recommendation.line() if r.recommendation else f"{r.provider}: no setting within budget" for r in results]
    paths["ann_recommendation"] = str(write_json(output_dir / "ann_recommendation.json",
                                                 {"recommendations": recommendations, "lines": lines}))
    return paths


# --- plot ---------------------------------------------------------------------------------


def plot_sweep(table: pl.DataFrame, path: Path, k: int, recommendation: Recommendation | None = None) -> Path | None:
    """Neighbour recall@k against batched QPS (log), one line per built index."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    recall = f"neighbour_recall@{k}"
    if table.height == 0:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (kind, build), group in table.group_by(["index_kind", "build_params"], maintain_order=True):
        label = kind if build == "{}" else f"{kind} " + ", ".join(f"{a}={b}" for a, b in json.loads(build).items() if a != "seed")
        marker = "*" if kind == "flat" else "o"
        ax.plot(group[recall].to_list(), group["qps_batch"].to_list(), marker=marker, markersize=10 if kind == "flat" else 4, label=label)
    if recommendation is not None:
        pick = table.filter((pl.col("index_kind") == recommendation.index_kind)
                            & (pl.col("build_params") == _dumps(recommendation.build_params))
                            & (pl.col("query_params") == _dumps(recommendation.query_params)))
        if pick.height:
            ax.scatter(pick[recall].to_list(), pick["qps_batch"].to_list(), s=180, facecolors="none", edgecolors="red",
                       linewidths=1.5, label="recommended", zorder=5)
    ax.set_yscale("log")
    ax.set_xlabel(f"neighbour recall@{k} (vs flat)")
    ax.set_ylabel("queries / second (batched, all threads)")
    ax.set_title(f"{table['provider'][0]}: recall vs speed")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=110))
    plt.close(fig)
    return path


# --- synthetic data (tests and benchmarks/bench_ann_scale.py) -----------------------------


@dataclass(frozen=True)
class SyntheticDataset:
    """Seeded clustered unit vectors: nb document chunks, nq queries near chosen chunks, and
    judgments from exact neighbours (the source chunk's document grade 2, the documents of its
    next `neighbours` exact neighbours grade 1), so flat search is good but not perfect."""

    d: int
    nb: int
    nq: int
    clusters: int = 20
    spread: float = 0.35  # norm of the within-cluster noise (centres are unit vectors)
    query_noise: float = 0.5
    chunks_per_doc: int = 1
    neighbours: int = 4
    seed: int = 0

    def documents(self) -> np.ndarray:
        rng = np.random.default_rng(self.seed)
        centers = l2_normalized(rng.standard_normal((self.clusters, self.d), dtype=np.float32))
        out = np.empty((self.nb, self.d), dtype=np.float32)
        scale = np.float32(self.spread / math.sqrt(self.d))  # noise vector norm ~ spread
        for start in range(0, self.nb, 65_536):
            stop = min(self.nb, start + 65_536)
            batch_rng = np.random.default_rng([self.seed, start])
            assign = batch_rng.integers(0, self.clusters, stop - start)
            block = batch_rng.standard_normal((stop - start, self.d), dtype=np.float32)
            block *= scale
            block += centers[assign]
            out[start:stop] = l2_normalized(block)
        return out

    def sources(self) -> np.ndarray:
        return np.sort(np.random.default_rng([self.seed, 1]).choice(self.nb, self.nq, replace=False))

    def queries(self, documents: np.ndarray) -> np.ndarray:
        rng = np.random.default_rng([self.seed, 2])
        noise = rng.standard_normal((self.nq, self.d), dtype=np.float32) * np.float32(self.query_noise / math.sqrt(self.d))
        return l2_normalized(documents[self.sources()] + noise)

    def chunk_ids(self) -> list[str]:
        return [f"c{i}" for i in range(self.nb)]

    def chunk_doc(self) -> list[str]:
        return [f"d{i // self.chunks_per_doc}" for i in range(self.nb)]

    def qrels(self, documents: np.ndarray) -> pl.DataFrame:
        sources = self.sources()
        index = faiss.IndexFlatIP(self.d)
        for start in range(0, self.nb, 65_536):
            index.add(documents[start : start + 65_536])
        _, ids = index.search(np.ascontiguousarray(documents[sources]), self.neighbours + 1)
        rows = []
        for q, (source, near) in enumerate(zip(sources, ids)):
            seen = {source // self.chunks_per_doc}
            rows.append((f"q{q}", f"d{source // self.chunks_per_doc}", 2))
            for chunk in near:
                doc = int(chunk) // self.chunks_per_doc
                if chunk >= 0 and doc not in seen:
                    seen.add(doc)
                    rows.append((f"q{q}", f"d{doc}", 1))
        return pl.DataFrame(rows, schema={"query_id": pl.String, "doc_id": pl.String, "grade": pl.Int64}, orient="row")

    def write(self, store: Path, provider: str = "synthetic") -> tuple[EmbeddingSet, EmbeddingSet, str, pl.DataFrame]:
        """Document and query sets in the cache format, the chunks file, and the qrels."""
        documents = self.documents()
        queries = self.queries(documents)
        qrels = self.qrels(documents)
        fingerprint = {"kind": "synthetic", **asdict(self)}
        doc_set = write_embedding_set(store, provider, fingerprint, "document", self.chunk_ids(), documents)
        query_set = write_embedding_set(store, provider, fingerprint, "query", [f"q{i}" for i in range(self.nq)], queries)
        chunks_path = Path(store) / "chunks" / f"synthetic-{stable_hash(fingerprint)[:16]}.parquet"
        chunks = pl.DataFrame({"chunk_id": self.chunk_ids(), "doc_id": self.chunk_doc()}).to_arrow()
        build_once(store, chunks_path, lambda tmp: pq.write_table(chunks, tmp, compression="zstd"))
        return doc_set, query_set, str(chunks_path), qrels


def write_embedding_set(store: Path, provider: str, fingerprint: dict, role: str, ids: list[str],
                        vectors: np.ndarray) -> EmbeddingSet:
    """Precomputed vectors into the embedding cache through its real writer (lock, checksum)."""
    return store_vectors(store, provider, fingerprint, role, ids, vectors)
