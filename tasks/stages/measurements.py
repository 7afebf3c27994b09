"""Speed measurements (latency profile, ANN sweep) kept in the store, so a cached rerun does not
spend half a minute measuring again what it measured last night.

A measurement is keyed by what it measured (provider fingerprint, vectors, spec section) and by
the machine it ran on: numbers from another machine are not reused. `--remeasure` (and the
nightly deployment) measure again and replace the stored result.
"""
from __future__ import annotations

import json
import os
import platform
import shutil
from pathlib import Path

import polars as pl

from retbench.tasks.store.build import build_folder_once, build_once
from retbench.tasks.store.files import stable_hash, write_parquet
from retbench.tasks.store.integrity import parquet_readable


def machine_id() -> str:
    """What makes a speed figure comparable: host, processor and core count."""
    cpu = ""
    try:
        cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name")), "")
    except OSError:
        pass
    return stable_hash(platform.node(), platform.machine(), cpu or platform.processor(), os.cpu_count())[:16]


def latency_texts_key(documents: list[str], queries: list[str], spec_section: dict) -> str:
    """What the latency profile embeds: the first `texts` chunks of the baseline chunking and the queries."""
    return stable_hash([documents[: spec_section["texts"]], queries, "query-latency-v1"])


def latency_path(store: str | Path, fingerprint_hash: str, spec_section: dict, texts_key: str) -> Path:
    """Where this provider's latency profile for this spec section, these texts and this machine is kept
    (also read by `retbench check`'s estimate, tasks/stages/estimate.py)."""
    key = stable_hash("latency-v1", fingerprint_hash, spec_section, texts_key, machine_id())
    return Path(store) / "measurements" / "latency" / f"{key[:32]}.parquet"


def latency_table(store: str | Path, fingerprint_hash: str, spec_section: dict, texts_key: str,
                  measure, remeasure: bool = False) -> tuple[pl.DataFrame, bool]:
    """The latency table for this provider, spec and machine: from the store, or `measure()`d
    (and stored). Returns (table, measured now)."""
    path = latency_path(store, fingerprint_hash, spec_section, texts_key)
    made = build_once(store, path, lambda tmp: measure().write_parquet(tmp, compression="zstd"),
                      parse=parquet_readable, force=remeasure)
    return pl.read_parquet(path), made.computed


_SWEEP_FILES = ("table.parquet", "lost.parquet", "sweep.json")


def cached_sweep(doc_set, query_set, chunks_path: str, dataset_key: str, qrels_path: str, spec, store: Path,
                 output_dir: Path, force: bool = False, remeasure: bool = False, progress=None,
                 queries_path: str | None = None):
    """`run_sweep`, unless the same sweep already ran on this machine: then its tables are
    copied to the output folder and the plot and recommendation are made from them.
    `queries_path` (the dataset's queries, with their split) adds the dev/test columns."""
    from retbench.tasks.analysis.ann_recommend import recommend
    from retbench.tasks.stages.sweep import SweepResult, plot_sweep, run_sweep

    # v2: the table has dev and test columns when the queries have a held-out split.
    key = stable_hash("ann-sweep-v2", doc_set.key, query_set.key, Path(chunks_path).name, dataset_key,
                      spec.model_dump(mode="json"), machine_id())
    folder = Path(store) / "measurements" / "ann_sweep" / key[:32]
    fresh: dict = {}

    def build(tmp: Path) -> None:
        result = run_sweep(doc_set, query_set, chunks_path, qrels_path, spec, store, output_dir, force=force,
                           progress=progress, splits=queries_path)
        fresh["result"] = result
        tmp.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(result.path, tmp / "table.parquet")
        shutil.copyfile(result.lost_path, tmp / "lost.parquet")
        facts = {"built": result.built, "reused": result.reused, "timings": result.timings,
                 "load_report": result.load_report, "seconds": result.seconds}
        (tmp / "sweep.json").write_text(json.dumps(facts, indent=2), encoding="utf-8")

    made = build_folder_once(store, folder, _SWEEP_FILES, build, parse=parquet_readable, force=force or remeasure)
    if "result" in fresh:
        return fresh["result"]
    facts = json.loads((folder / "sweep.json").read_text(encoding="utf-8"))
    table = pl.read_parquet(folder / "table.parquet")
    provider = doc_set.provider
    directory = Path(output_dir) / "ann_sweep"
    table_path = write_parquet(table.with_columns(provider=pl.lit(provider)), directory / f"{provider}.parquet")
    lost_path = write_parquet(pl.read_parquet(folder / "lost.parquet").with_columns(provider=pl.lit(provider)),
                              directory / f"{provider}.lost.parquet")
    recommendation = recommend(table.with_columns(provider=pl.lit(provider)), spec.measure, spec.loss_budget,
                               spec.budget_on).get(provider)
    plot_path = _kept_plot(store, folder, table.with_columns(provider=pl.lit(provider)), spec.k, recommendation,
                           directory / f"{provider}.png", plot_sweep)
    if progress:
        progress(f"{provider}: ANN sweep measured on this machine before; reused (--remeasure to measure again)")
    return SweepResult(
        path=str(table_path), key=key, computed=False, seconds=made.seconds, provider=provider,
        lost_path=str(lost_path), plot_path=None if plot_path is None else str(plot_path),
        recommendation=recommendation, built=0, reused=facts["built"] + facts["reused"],
        timings={"measured_before": facts["timings"]}, load_report=None,
    )


def _kept_plot(store: Path, folder: Path, table: pl.DataFrame, k: int, recommendation, path: Path, plot_sweep):
    """The reused sweep's plot at `path`: drawn once per recommendation into the sweep's folder
    and copied from there on every later run (drawing it took ~0.5 s of a cached run, most of
    it matplotlib's import and text layout). None when the table is empty (nothing to plot)."""
    from retbench.tasks.store.files import file_sha256
    from retbench.tasks.stages import sweep

    if table.height == 0:
        return None
    key = stable_hash("sweep-plot-v1", file_sha256(sweep.__file__), table["provider"][0], k,
                      None if recommendation is None else recommendation.to_dict())
    kept = folder / f"plot-{key[:16]}.png"
    build_once(store, kept, lambda tmp: plot_sweep(table, Path(tmp), k, recommendation) and None, work=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(kept, path)
    return path

