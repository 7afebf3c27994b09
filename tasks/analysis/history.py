"""Run history and regression alerts.

Every full run appends its summary and per-query values to a Parquet dataset in
the store, partitioned by date:
    history/summary/date=YYYY-MM-DD/<run id>.parquet
    history/per_query/date=YYYY-MM-DD/<run id>.parquet
A run compares itself with the previous run of the same spec (by name) and with
an optional pinned baseline run: a metric whose paired bootstrap interval of the
difference lies wholly below zero is a regression.
"""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import polars as pl

from tasks.analysis.breakdown import paired_comparison
from tasks.store.files import stable_hash as fingerprint_hash  # the embedding cache hashes fingerprints so
from tasks.analysis.score import SETTING
from tasks.store.files import write_parquet
from tasks.store.remote import fetch_history

RUN_COLUMNS = ["run_id", "finished_at", "spec_name", "spec_hash", "dataset_hash", "git_commit"]
STAMP_TYPES = {"run_id": pl.String, "spec_name": pl.String, "spec_hash": pl.String, "dataset_hash": pl.String,
               "git_commit": pl.String}


def history_dir(store: str | Path) -> Path:
    return Path(store) / "history"


def append_run(store: str | Path, run_id: str, manifest: dict, summary: pl.DataFrame, per_query: pl.DataFrame) -> None:
    run = manifest["run"]
    finished = datetime.fromisoformat(run["finished_at"])
    fingerprints = {name: fingerprint_hash(fp) for name, fp in manifest["providers"].items()}
    stamp = {
        "run_id": run_id,
        "finished_at": finished,
        "spec_name": run["spec_name"],
        "spec_hash": run["spec_hash"],
        "dataset_hash": manifest["dataset"]["content_hash"],
        "git_commit": run.get("git_commit"),
    }
    date = finished.astimezone(timezone.utc).date().isoformat()
    # Typed explicitly: a None git_commit (spec outside a git repo) would otherwise be
    # stored as a Null column that cannot be read together with a String one.
    columns = [pl.lit(v, dtype=STAMP_TYPES.get(k)).alias(k) for k, v in stamp.items()]
    summary = summary.with_columns(*columns, fingerprint=pl.col("provider").replace_strict(fingerprints, default=None))
    # Per-query values make the next run's paired comparison possible.
    per_query = per_query.select(*SETTING, "query_id", "measure", "value").with_columns(*columns)
    write_parquet(summary, history_dir(store) / "summary" / f"date={date}" / f"{run_id}.parquet")
    write_parquet(per_query, history_dir(store) / "per_query" / f"date={date}" / f"{run_id}.parquet")


def _scan(store: str | Path, table: str, run_id: str | None = None) -> pl.LazyFrame | None:
    root = history_dir(store) / table
    name = f"{run_id}.parquet" if run_id else "*.parquet"
    # On an object store: the run files under this table's prefix are fetched (only the one
    # run's file when `run_id` is given; the summaries are small, one per run).
    fetch_history(root, run_id)
    files = sorted(root.glob(f"date=*/{name}"))
    if not files:
        return None
    # One scan per run file, cast to the stamp types: files written before the stamp was
    # typed hold git_commit as a Null column, which a single multi-file scan refuses. Files
    # written before the `setting` and `params` columns lack them (null there).
    return pl.concat([pl.scan_parquet(f).with_columns(pl.col(c).cast(t) for c, t in STAMP_TYPES.items())
                      for f in files], how="diagonal_relaxed")


def load_summary_history(store: str | Path, spec_name: str) -> pl.DataFrame:
    scan = _scan(store, "summary")
    if scan is None:
        return pl.DataFrame()
    return scan.filter(pl.col("spec_name") == spec_name).collect().sort("finished_at")


def runs_of(store: str | Path, spec_name: str) -> pl.DataFrame:
    """One row per recorded run of the spec, oldest first."""
    history = load_summary_history(store, spec_name)
    if history.is_empty():
        return pl.DataFrame(schema={c: pl.String for c in RUN_COLUMNS})
    return history.select(RUN_COLUMNS).unique("run_id").sort("finished_at")


def per_query_of(store: str | Path, run_id: str) -> pl.DataFrame:
    scan = _scan(store, "per_query", run_id)
    if scan is None:
        return pl.DataFrame()
    return scan.filter(pl.col("run_id") == run_id).select(*SETTING, "query_id", "measure", "value").collect()


def previous_run_id(store: str | Path, spec_name: str, current_run_id: str) -> str | None:
    earlier = runs_of(store, spec_name).filter(pl.col("run_id") != current_run_id)
    return earlier["run_id"][-1] if earlier.height else None


def regressions(current: pl.DataFrame, reference: pl.DataFrame, against: str, reference_run_id: str,
                measures: list[str], resamples: int = 1000, seed: int = 0) -> pl.DataFrame:
    """Paired comparison of every setting present in both runs, for `measures`.

    `regression` is true when the whole 95% interval of (current - reference) is below zero.
    """
    current = current.filter(pl.col("measure").is_in(measures)).select(*SETTING, "query_id", "measure", "value")
    reference = reference.filter(pl.col("measure").is_in(measures)).select(*SETTING, "query_id", "measure", "value")
    # Provider names cannot contain "@" (spec rule), so the tag cannot collide.
    tagged = pl.concat([current, reference.with_columns(provider=pl.col("provider") + "@reference")])
    shared = current.select(SETTING).unique().join(reference.select(SETTING).unique(), on=SETTING, nulls_equal=True)
    parts = []
    for provider, index, nprobe in shared.sort(SETTING, nulls_last=False).rows():
        compared = paired_comparison(tagged, (provider, index, nprobe), (provider + "@reference", index, nprobe),
                                     resamples=resamples, permutations=1000, seed=seed)
        parts.append(compared.select(
            provider=pl.col("a_provider"), index=pl.col("a_index"), nprobe=pl.col("a_nprobe"), measure="measure", n="n",
            reference=pl.col("mean_b"), current=pl.col("mean_a"), diff="diff", ci_low="ci_low", ci_high="ci_high",
            p_value="p_value"))
    if not parts:
        return pl.DataFrame()
    return pl.concat(parts).with_columns(
        against=pl.lit(against), reference_run_id=pl.lit(reference_run_id), regression=pl.col("ci_high") < 0)


def recorded_measures(store: str | Path, spec_name: str) -> list[str]:
    history = load_summary_history(store, spec_name)
    return [] if history.is_empty() else sorted(history["measure"].unique().to_list())


def trend_table(store: str | Path, spec_name: str, measure: str = "ndcg@10") -> pl.DataFrame:
    """One row per run, one column per provider/index/nprobe: the measure's mean over time."""
    history = load_summary_history(store, spec_name)
    if history.is_empty():
        return history
    history = history.filter(pl.col("measure") == measure).with_columns(
        setting=pl.concat_str([pl.col("provider"), pl.col("index"), pl.col("nprobe").cast(pl.String).fill_null("exact")], separator="/"))
    return (history.pivot(on="setting", index=["finished_at", "run_id", "git_commit"], values="value")
            .sort("finished_at"))
