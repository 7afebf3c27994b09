"""Report weight and speed at scale: the report of a synthetic 10,000-query run (12 settings,
36,000 failing queries, 50,000 chunks) against a sample-sized one (100 queries), built in the
same process and loaded in headless Chromium at 1280 px. Targets: under 2 MB and under 2 s.

    python -m benchmarks.bench_report [--queries 10000] [--repeats 3]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from retbench.tasks.reporting.html import build_report  # noqa: E402
from retbench.support.headless import Chromium  # noqa: E402

PROVIDERS = ("alpha", "beta", "gamma")
MEASURES = ("recall@5", "recall@10", "recall@20", "mrr", "ndcg@5", "ndcg@10", "ndcg@20")
LANGUAGES = ("en", "hi", "hinglish", "de")
CATEGORIES = ("keyword", "natural", "typo", "vague", "multi_answer", "domain_term", "buried_answer", "hindi")
SETTINGS = [(p, "flat", None) for p in PROVIDERS] + [(p, "ivf", n) for p in PROVIDERS for n in (1, 4, 16)]
SETTING_SCHEMA = {"provider": pl.String, "index": pl.String, "nprobe": pl.Int64}


def synthetic_run(out: Path, queries: int, seed: int = 0) -> pl.DataFrame:
    """Every table a run writes, at `queries` queries; returns the chunk texts for the failures."""
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    query_ids = [f"q{i:06d}" for i in range(queries)]
    language = rng.choice(LANGUAGES, queries)
    category = rng.choice(CATEGORIES, queries)
    quality = {"alpha": 0.72, "beta": 0.66, "gamma": 0.58}
    loss = {None: 0.0, 1: 0.25, 4: 0.06, 16: 0.01}
    frames = []
    for provider, index, nprobe in SETTINGS:
        base = np.clip(rng.normal(quality[provider] - loss[nprobe], 0.25, queries), 0, 1)
        for measure in MEASURES:
            frames.append(pl.DataFrame({
                "provider": provider, "index": index, "nprobe": nprobe, "query_id": query_ids, "measure": measure,
                "value": np.clip(base + rng.normal(0, 0.03, queries), 0, 1), "query_language": language,
                "category": category, "split": "test"}, schema_overrides=SETTING_SCHEMA))
    per_query = pl.concat(frames)
    per_query.write_parquet(out / "per_query.parquet")
    summary = per_query.group_by("provider", "index", "nprobe", "measure", maintain_order=True).agg(
        value=pl.col("value").mean(), queries=pl.len())
    summary.write_parquet(out / "summary.parquet")

    pairs = [f"{lang}->en" for lang in LANGUAGES]
    pair_of = pl.DataFrame({"query_id": query_ids, "pair": [f"{lang}->en" for lang in language]})
    slices = []
    tagged = per_query.join(pair_of, on="query_id")
    for kind, column in (("all", None), ("language_pair", "pair"), ("category", "category")):
        keys = ["provider", "index", "nprobe", "measure"] + ([column] if column else [])
        grouped = tagged.group_by(keys).agg(mean=pl.col("value").mean(), sd=pl.col("value").std(), n=pl.len())
        slices.append(grouped.select(
            "provider", "index", "nprobe", slice_kind=pl.lit(kind), slice=pl.col(column) if column else pl.lit("all"),
            measure="measure", mean="mean", ci_low=pl.col("mean") - 1.96 * pl.col("sd") / pl.col("n").sqrt(),
            ci_high=pl.col("mean") + 1.96 * pl.col("sd") / pl.col("n").sqrt(), n=pl.col("n").cast(pl.Int64)))
    pl.concat(slices).write_parquet(out / "breakdown.parquet")
    assert len(pairs) >= 2

    flat = [s for s in SETTINGS if s[1] == "flat"]
    comparisons = [(*a, *b) for i, a in enumerate(flat) for b in flat[i + 1:]] + [(*s, s[0], "flat", None) for s in SETTINGS if s[1] != "flat"]
    rows = []
    for a_p, a_i, a_n, b_p, b_i, b_n in comparisons:
        for measure in MEASURES:
            diff = float(rng.normal(-0.05, 0.03))
            rows.append((a_p, a_i, a_n, b_p, b_i, b_n, measure, queries, 0.7 + diff, 0.7, diff, diff - 0.01, diff + 0.01, 0.001))
    pl.DataFrame(rows, schema={"a_provider": pl.String, "a_index": pl.String, "a_nprobe": pl.Int64, "b_provider": pl.String,
                               "b_index": pl.String, "b_nprobe": pl.Int64, "measure": pl.String, "n": pl.Int64,
                               "mean_a": pl.Float64, "mean_b": pl.Float64, "diff": pl.Float64, "ci_low": pl.Float64,
                               "ci_high": pl.Float64, "p_value": pl.Float64}, orient="row").write_parquet(out / "comparisons.parquet")

    chunks = 50_000
    texts = pl.DataFrame({"chunk_id": [f"c{i}" for i in range(chunks)], "doc_id": [f"d{i // 3}" for i in range(chunks)],
                          "title": [f"Document {i // 3} about topic {i % 97}" for i in range(chunks)],
                          "text": [f"Paragraph {i} explaining topic {i % 97} in enough words to need a snippet. " * 4 for i in range(chunks)]})
    ndcg = per_query.filter((pl.col("measure") == "ndcg@10") & (pl.col("value") < 0.5))
    n = ndcg.height
    picks = rng.integers(0, chunks, (n, 10))
    top_k = [[{"rank": r + 1, "doc_id": f"d{c // 3}", "chunk_id": f"c{c}", "score": 0.9 - 0.01 * r,
               "grade": None if r % 3 else 1, "relevant": r == 4} for r, c in enumerate(row)] for row in picks.tolist()]
    classes = np.where(ndcg["index"].to_numpy() != "flat", "ann_lost", rng.choice(["absent", "misranked"], n))
    ndcg.select("provider", "index", "nprobe", "query_id").with_columns(
        query_text=pl.lit("a query that failed, long enough to read like a real one"), query_language=pl.lit("en"),
        category=pl.lit("vague"), split=pl.lit("test"), measure=pl.lit("ndcg@10"), value=ndcg["value"],
        relevant_judged=pl.lit(3, pl.Int64), first_relevant_rank=pl.lit(5, pl.Int64),
        exact_first_relevant_rank=pl.lit(None, pl.Int64), failure_class=pl.Series(classes), top_k=pl.Series(top_k),
    ).write_parquet(out / "failures.parquet")

    pl.DataFrame({"provider": list(PROVIDERS), "kind": ["openai", "local", "local"],
                  "usd_per_million_tokens": [0.02, None, None], "usd_per_1000_queries": [0.0003, None, None],
                  "corpus_tokens": [5_000_000] * 3}).write_parquet(out / "cost.parquet")
    pl.DataFrame([(p, b, 1, 3, 3, 1000.0 / (1 + b), 2.0 + b, 4.0 + b, 5.0 + b) for p in PROVIDERS for b in (1, 10, 50, 100)],
                 schema=["provider", "batch_size", "concurrency", "iterations", "calls", "texts_per_second", "p50_ms", "p95_ms", "p99_ms"],
                 orient="row").write_parquet(out / "latency.parquet")
    pl.DataFrame([(p, chunks, 384, chunks * 384 * 4, name, chunks * 384 * 4 + extra, (chunks * 384 * 4 + extra) / chunks)
                  for p in PROVIDERS for name, extra in (("flat", 45), ("ivf_nlist-894_train-50000_seed-0", 1_400_000))],
                 schema=["provider", "vectors", "dim", "raw_vector_bytes", "index", "index_bytes", "index_bytes_per_vector"],
                 orient="row").write_parquet(out / "storage.parquet")
    sweep = []
    for p in PROVIDERS:
        sweep.append((p, "flat", "{}", "{}", 1.0, 900.0, 0.0, 2.1, 2.4, chunks * 1536))
        for nprobe in (1, 2, 4, 8, 16, 32):
            sweep.append((p, "ivf", json.dumps({"nlist": 894, "train_size": 50000, "seed": 0}), json.dumps({"nprobe": nprobe}),
                          1 - 0.5 / nprobe, 60000.0 / nprobe, -0.2 / nprobe, 0.05 * nprobe, 0.08 * nprobe, chunks * 1580))
        for ef in (16, 32, 64, 128):
            sweep.append((p, "hnsw", json.dumps({"M": 32, "ef_construction": 40}), json.dumps({"ef_search": ef}),
                          1 - 1.0 / ef, 40000.0 * 16 / ef, -0.5 / ef, 0.02 * ef / 16, 0.04 * ef / 16, chunks * 1800))
    pl.DataFrame(sweep, schema=["provider", "index_kind", "build_params", "query_params", "neighbour_recall@10", "qps_batch",
                                "delta_ndcg@10", "p50_ms_single_thread", "p95_ms_single_thread", "index_bytes"],
                 orient="row").write_parquet(out / "ann_sweep.parquet")
    (out / "ann_recommendation.json").write_text(json.dumps({"recommendations": {
        p: {"index_kind": "ivf", "build_params": {"nlist": 894, "train_size": 50000, "seed": 0}, "query_params": {"nprobe": 16}}
        for p in PROVIDERS}, "lines": [f"{p}: ivf (nlist=894, nprobe=16)" for p in PROVIDERS]}))
    ann = summary.filter(pl.col("index") != "flat").join(
        summary.filter(pl.col("index") == "flat").select("provider", "measure", exact="value"), on=["provider", "measure"])
    ann.select("provider", "index", "nprobe", "measure", "exact", approximate="value",
               delta=pl.col("value") - pl.col("exact")).write_parquet(out / "ann_vs_exact.parquet")
    return texts


def trend_of(runs: int) -> pl.DataFrame:
    from datetime import datetime, timedelta

    labels = [f"{p}/{i}/{'exact' if n is None else n}" for p, i, n in SETTINGS]
    start = datetime(2026, 11, 1)
    rows = [{"finished_at": start + timedelta(days=d), "run_id": f"run{d}", "git_commit": None,
             **{label: 0.6 + 0.01 * j + 0.002 * d for j, label in enumerate(labels)}} for d in range(runs)]
    return pl.DataFrame(rows)


def measure(out: Path, texts: pl.DataFrame, browser: Chromium, repeats: int) -> dict:
    builds, loads, paints, frames = [], [], [], []
    for attempt in range(repeats + 1):  # the first is a warm-up (imports, font cache, browser start)
        started = time.perf_counter()
        html_path, _ = build_report(out, "retbench: bench", trend=trend_of(8), texts=texts)
        built = time.perf_counter() - started
        page = browser.open(html_path.as_uri(), width=1280)
        frame = page.first_frame_ms() / 1000
        scroll = page.evaluate("document.documentElement.scrollWidth")
        # Rasterising the whole page (a full-page screenshot) forces layout and paint of every image.
        started = time.perf_counter()
        page.screenshot(out / "page.png")
        captured = time.perf_counter() - started
        if attempt:
            builds.append(built)
            loads.append(page.load_ms / 1000)
            paints.append(page.load_ms / 1000 + captured)
            frames.append(frame)
    return {"bytes": html_path.stat().st_size, "build_s": statistics.median(builds), "load_s": statistics.median(loads),
            "paint_s": statistics.median(paints), "frame_s": statistics.median(frames), "scroll_width": scroll}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--queries", type=int, default=10_000)
    parser.add_argument("--baseline-queries", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp, Chromium() as browser:
        results = {}
        for name, queries in (("baseline", args.baseline_queries), ("large", args.queries)):
            out = Path(tmp) / name
            texts = synthetic_run(out, queries)
            results[name] = measure(out, texts, browser, args.repeats)
        base, large = results["baseline"], results["large"]
        print(f"{'':24}{'baseline (' + str(args.baseline_queries) + ' q)':>20}{'large (' + str(args.queries) + ' q)':>20}{'ratio':>10}")
        for key, label, unit in (("bytes", "page weight", "MB"), ("build_s", "build_report (median)", "s"),
                                 ("load_s", "Chromium load event", "s"), ("frame_s", "first frame after load", "s"),
                                 ("paint_s", "+ full-page screenshot", "s")):
            scale = 1e6 if unit == "MB" else 1
            print(f"{label:24}{base[key] / scale:>17.3f} {unit:<2}{large[key] / scale:>17.3f} {unit:<2}{large[key] / base[key]:>10.2f}")
        print(f"{'scrollWidth at 1280 px':24}{base['scroll_width']:>20}{large['scroll_width']:>20}")
        ok = large["bytes"] < 2e6 and large["frame_s"] < 2.0
        print(f"target (< 2 MB, first frame < 2 s in headless Chromium): {'met' if ok else 'NOT met'}  "
              f"(the screenshot line adds rasterising and PNG-encoding the whole page, an upper bound)")


if __name__ == "__main__":
    main()
