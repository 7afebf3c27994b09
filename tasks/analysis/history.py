"""Run history and regression alerts.

Every full run appends its summary and per-query values to a Parquet dataset in
the store, partitioned by date:
    history/summary/date=YYYY-MM-DD/<run id>.parquet
    history/per_query/date=YYYY-MM-DD/<run id>.parquet
A run is compared only with runs on the same data (the dataset content key): the previous
run of the spec, unless the data changed since (a new series starts), and an optional
pinned baseline run. Settings are paired by their setting key, queries by id. A setting x
measure is a regression when it has at least `min_queries` paired queries, its p value
survives Holm's correction over every test of the run, and the paired bootstrap interval
of (current - reference) lies wholly below zero.
"""
from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import polars as pl

from retbench.tasks.analysis.breakdown import paired_comparison
from retbench.tasks.analysis.stats import holm_adjusted
from retbench.tasks.store.files import stable_hash as fingerprint_hash  # the embedding cache hashes fingerprints so
from retbench.tasks.analysis.score import SETTING
from retbench.tasks.store.files import write_parquet
from retbench.tasks.store.remote import fetch_history

RUN_COLUMNS = ["run_id", "finished_at", "spec_name", "spec_hash", "dataset_hash", "git_commit"]
STAMP_TYPES = {"run_id": pl.String, "spec_name": pl.String, "spec_hash": pl.String, "dataset_hash": pl.String,
               "git_commit": pl.String}
# What names a setting in the history; files written before setting keys were kept lack the
# first three (read as null: such runs pair with nothing).
KEY_TYPES = {"setting_key": pl.String, "setting": pl.String, "params": pl.String}
PAIR_COLUMNS = [*KEY_TYPES, *SETTING]
TREND_KEYS = ["finished_at", "run_id", "git_commit", "series", "dataset"]
# Why a series starts: the key of the dataset as read from its files, and the judgments overlays
# merged into it (JSON). Runs recorded before they were kept read as null (the reason is then
# "the dataset changed").
JUDGMENT_COLUMNS = {"dataset_base": pl.String, "judgments": pl.String}
TESTED = "tested"
CORRECTION = "holm"
# Sign flips enough that the smallest attainable p (1 / (permutations + 1)) times the number of
# tests stays a tenth of alpha: with too few, Holm could never reject however large the drop.
_FLOOR_SHARE = 10
# Every setting is first tested with this many flips; only those Holm's step-down could still
# reject are tested again with the full count (compare_runs).
_SCREEN = 1000
REGRESSION_SCHEMA = {
    "against": pl.String, "reference_run_id": pl.String,
    "setting_key": pl.String, "setting": pl.String, "params": pl.String,
    "provider": pl.String, "index": pl.String, "nprobe": pl.Int64,
    "measure": pl.String, "n": pl.Int64, "reference": pl.Float64, "current": pl.Float64, "diff": pl.Float64,
    "ci_low": pl.Float64, "ci_high": pl.Float64, "p_value": pl.Float64, "p_adjusted": pl.Float64,
    "correction": pl.String, "tests": pl.Int64, "permutations": pl.Int64, "alpha": pl.Float64,
    "regression": pl.Boolean, "status": pl.String,
}


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
    judged = stamp_of(manifest)
    summary = summary.with_columns(*columns, *[pl.lit(v, dtype=pl.String).alias(k) for k, v in judged.items()],
                                   fingerprint=pl.col("provider").replace_strict(fingerprints, default=None))
    # Per-query values make the next run's paired comparison possible; the setting key pairs them.
    keys = [c for c in KEY_TYPES if c in per_query.columns]
    per_query = per_query.select(*keys, *SETTING, "query_id", "measure", "value").with_columns(*columns)
    write_parquet(summary, history_dir(store) / "summary" / f"date={date}" / f"{run_id}.parquet")
    write_parquet(per_query, history_dir(store) / "per_query" / f"date={date}" / f"{run_id}.parquet")


def withdraw_run(store: str | Path, run_id: str, manifest: dict) -> None:
    """Take back what `append_run` recorded for a run that then did not publish (stopped or failed
    in the report or before its outputs were swapped in): the history lists only runs whose
    outputs a reader can find. A no-op when nothing was recorded."""
    from retbench.tasks.store.remote import removed

    date = datetime.fromisoformat(manifest["run"]["finished_at"]).astimezone(timezone.utc).date().isoformat()
    for table in ("summary", "per_query"):
        path = history_dir(store) / table / f"date={date}" / f"{run_id}.parquet"
        path.unlink(missing_ok=True)
        removed(path)  # on an object store: the uploaded copy too (written where the report ran)


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
    # written before the `setting`, `params` and `setting_key` columns lack them (null there).
    return pl.concat([pl.scan_parquet(f).with_columns(pl.col(c).cast(t) for c, t in STAMP_TYPES.items())
                      for f in files], how="diagonal_relaxed")


def load_summary_history(store: str | Path, spec_name: str) -> pl.DataFrame:
    scan = _scan(store, "summary")
    if scan is None:
        return pl.DataFrame()
    return scan.filter(pl.col("spec_name") == spec_name).collect().sort("finished_at")


def runs_of(store: str | Path, spec_name: str) -> pl.DataFrame:
    """One row per recorded run of the spec, oldest first; `series` counts from 1 and grows by
    one whenever the dataset content key differs from the run before (a new series starts)."""
    history = load_summary_history(store, spec_name)
    if history.is_empty():
        return pl.DataFrame(schema={**{c: pl.String for c in RUN_COLUMNS}, "series": pl.Int64})
    history = history.with_columns(pl.lit(None, dtype=t).alias(c) for c, t in JUDGMENT_COLUMNS.items()
                                   if c not in history.columns)
    runs = history.select(*RUN_COLUMNS, *JUDGMENT_COLUMNS).unique("run_id").sort("finished_at", "run_id")
    changed = pl.col("dataset_hash").ne_missing(pl.col("dataset_hash").shift(1))
    return runs.with_columns(series=changed.cum_sum().cast(pl.Int64))


def judgments_stamp(overlays: list[dict]) -> str:
    """The overlays a run scored with (the manifest's dataset.overlays), as the history keeps them."""
    return json.dumps([{k: o[k] for k in ("file", "sha256", "source", "judgments")} for o in overlays])


def series_reason(before: dict, after: dict) -> str:
    """Why the run `after` starts a new series after the run `before` (rows of runs_of): the
    judgments overlays added or left out when the files' dataset is the same, else the key change."""
    if _same_files(before, after):
        had, has = (json.loads(row.get("judgments") or "[]") for row in (before, after))
        had_sums, has_sums = {o["sha256"] for o in had}, {o["sha256"] for o in has}
        told = [f"judgments overlay {_overlay(o)} added" for o in has if o["sha256"] not in had_sums]
        told += [f"judgments overlay {_overlay(o)} no longer used" for o in had if o["sha256"] not in has_sums]
        return "; ".join(told) or "the judgments overlays changed"
    return f"dataset changed ({short_key(before.get('dataset_hash'))} -> {short_key(after.get('dataset_hash'))})"


def _same_files(before: dict, after: dict) -> bool:
    """Did both runs read the same dataset from its files (their judgments overlays aside)?"""
    return bool(before.get("dataset_base")) and before.get("dataset_base") == after.get("dataset_base")


def _overlay(o: dict) -> str:
    return f"{o['file']} (source {o['source']}, {o['judgments']} judgments, sha256 {o['sha256'][:12]})"


def series_starts(store: str | Path, spec_name: str) -> list[tuple[int, str, str]]:
    """(series, first run id, why) for every series after the first."""
    runs = runs_of(store, spec_name).to_dicts()
    return [(after["series"], after["run_id"], series_reason(before, after))
            for before, after in zip(runs, runs[1:]) if after["series"] != before["series"]]


def per_query_of(store: str | Path, run_id: str) -> pl.DataFrame:
    """The per-query values a run recorded: setting key and names, query_id, measure, value."""
    scan = _scan(store, "per_query", run_id)
    if scan is None:
        return pl.DataFrame()
    frame = scan.filter(pl.col("run_id") == run_id).collect()
    frame = frame.with_columns(pl.lit(None, dtype=t).alias(c) for c, t in KEY_TYPES.items() if c not in frame.columns)
    return frame.select(*PAIR_COLUMNS, "query_id", "measure", "value")


def dataset_of(store: str | Path, run_id: str) -> str | None:
    """The dataset content key a recorded run ran on (None when the run is not recorded)."""
    scan = _scan(store, "summary", run_id)
    if scan is None:
        return None
    keys = scan.filter(pl.col("run_id") == run_id).select("dataset_hash").unique().collect()["dataset_hash"]
    return keys[0] if len(keys) else None


def _latest_before(store: str | Path, spec_name: str, current_run_id: str) -> dict | None:
    """The newest recorded run of the spec other than `current_run_id` (a runs_of row), or None."""
    earlier = runs_of(store, spec_name).filter(pl.col("run_id") != current_run_id)
    return earlier.row(-1, named=True) if earlier.height else None


def previous_run_id(store: str | Path, spec_name: str, current_run_id: str) -> str | None:
    """The newest earlier run of the spec, whatever data it ran on."""
    before = _latest_before(store, spec_name, current_run_id)
    return None if before is None else before["run_id"]


def previous_in_series(store: str | Path, spec_name: str, current_run_id: str,
                       dataset_key: str, current: dict | None = None) -> tuple[str | None, str | None]:
    """(run to compare with, note): the newest earlier run of the spec when it ran on the same
    data; (None, why not) when the data changed since; (None, None) when there is no earlier run.
    `current`: this run's dataset_base and judgments (JUDGMENT_COLUMNS), to say why."""
    before = _latest_before(store, spec_name, current_run_id)
    if before is None:
        return None, None
    run_id, key = before["run_id"], before["dataset_hash"]
    if key == dataset_key:
        return run_id, None
    after = {**(current or {}), "dataset_hash": dataset_key}
    if not _same_files(before, after):
        return None, (f"dataset changed since run {run_id} ({short_key(key)} -> {short_key(dataset_key)}): "
                      f"a new series starts; no regressions computed")
    return None, (f"judgments changed since run {run_id} ({series_reason(before, after)}): a new series starts; "
                  f"no regressions computed")


def previous_with_reason(store: str | Path, spec_name: str, current_run_id: str, dataset_key: str,
                         current: dict | None = None) -> tuple[str, str | None] | None:
    """(the newest earlier run of the spec, what changed since: None when it ran on the same data,
    else the new series' reason); None when there is no earlier run. `current` as in
    previous_in_series."""
    before = _latest_before(store, spec_name, current_run_id)
    if before is None:
        return None
    if before["dataset_hash"] == dataset_key:
        return before["run_id"], None
    return before["run_id"], series_reason(before, {**(current or {}), "dataset_hash": dataset_key})


def stamp_of(manifest: dict) -> dict:
    """A manifest's JUDGMENT_COLUMNS values."""
    dataset = manifest["dataset"]
    return {"dataset_base": dataset.get("base_key") or dataset["content_hash"],
            "judgments": judgments_stamp(dataset.get("overlays") or [])}


def short_key(key: str | None) -> str:
    return "unknown" if key is None else key[:12]


def note(against: str, reference_run_id: str, status: str) -> pl.DataFrame:
    """A regressions-table row that says why nothing was compared against a run."""
    row = {c: None for c in REGRESSION_SCHEMA} | {"against": against, "reference_run_id": reference_run_id,
                                                  "regression": False, "status": status}
    return pl.DataFrame([row], schema=REGRESSION_SCHEMA)


def regression_check(store: str | Path, spec_name: str, run_id: str, dataset_key: str, per_query: pl.DataFrame,
                     measures: list[str], previous: bool = True, baseline: str | None = None, min_queries: int = 20,
                     alpha: float = 0.05, resamples: int = 1000, permutations: int = 10000, seed: int = 0,
                     level: float = 0.95, current: dict | None = None) -> pl.DataFrame | None:
    """The regressions table of run `run_id` (not yet recorded, or recorded: it is skipped): its
    per-query values against the previous run of the spec (when `previous`) and the `baseline`
    run, each only when it ran on the same data (`dataset_key`); a run it is not compared with
    gets a note row (measure null, `status` says why). None when there is no earlier run at all."""
    references, notes = [], []
    if previous:
        earlier, changed = previous_in_series(store, spec_name, run_id, dataset_key, current)
        if changed:
            notes.append(note("previous", previous_run_id(store, spec_name, run_id), changed))
        if earlier:
            references.append(("previous", earlier, per_query_of(store, earlier)))
    if baseline:
        reference = per_query_of(store, baseline)
        if reference.is_empty():
            raise ValueError(f"history.baseline_run {baseline!r} is not in the history under {history_dir(store)}")
        its_data = dataset_of(store, baseline)
        if its_data == dataset_key:
            references.append(("baseline", baseline, reference))
        else:
            notes.append(note("baseline", baseline, f"baseline run {baseline} ran on other data "
                              f"({short_key(its_data)} -> {short_key(dataset_key)}): not compared"))
    if not references and not notes:
        return None
    compared = compare_runs(per_query, references, measures, min_queries=min_queries, alpha=alpha,
                            resamples=resamples, permutations=permutations, seed=seed, level=level)
    for against, reference_run, _ in references:
        if compared.filter(pl.col("reference_run_id") == reference_run).is_empty():
            notes.append(note(against, reference_run, f"no setting of this run has the setting key of one in run "
                              f"{reference_run} (runs recorded before setting keys were kept match none): nothing compared"))
    return pl.concat([*notes, compared])


def compared_with(regressions: pl.DataFrame | None, against: str) -> str | None:
    """The run id a regressions table compared settings with as `against` (None: not compared)."""
    if regressions is None:
        return None
    ids = regressions.filter((pl.col("against") == against) & pl.col("measure").is_not_null())["reference_run_id"]
    return ids[0] if len(ids) else None


def permutations_for(tests: int, alpha: float, at_least: int) -> int:
    """Sign flips enough that `tests` x the smallest attainable p is at most alpha / 10."""
    return max(at_least, math.ceil(_FLOOR_SHARE * tests / alpha) - 1)


def compare_runs(current: pl.DataFrame, references: list[tuple[str, str, pl.DataFrame]], measures: list[str],
                 min_queries: int = 20, alpha: float = 0.05, resamples: int = 1000, permutations: int = 10000,
                 seed: int = 0, level: float = 0.95, screen: int = _SCREEN) -> pl.DataFrame:
    """Every setting x measure of `current` against each reference, given as (against, run id,
    per-query table); settings pair by `setting_key`, queries by `query_id`.

    Fewer than `min_queries` paired queries: status "too few paired queries (n < min)", never a
    regression. The others are one family of `tests`: `p_adjusted` is Holm's over all of them
    (every reference, setting and measure), and `regression` is p_adjusted < alpha with the
    whole `level` interval of (current - reference) below zero. `permutations`: the sign flips
    behind each p; `screen` for a setting Holm could not reject anyway, else `permutations` or
    more where that floor is too coarse for the number of tests (permutations_for).
    """
    if min_queries < 1:
        raise ValueError(f"min_queries must be >= 1 (got {min_queries})")
    pairs = [(against, run_id, *pair) for against, run_id, reference in references
             for pair in _paired_settings(current, reference, measures)]
    tested = [pair for pair in pairs if pair[-2] >= min_queries]
    tests = sum(len(shared) for *_, shared in tested)
    full = permutations_for(tests, alpha, permutations)
    screen = min(screen, full)

    def run(i: int, flips: int) -> tuple[pl.DataFrame, int]:
        _, _, names, cur, ref, _, _ = tested[i]
        return _paired(cur, ref, names["setting_key"], resamples, flips, seed, level), flips

    results = [run(i, screen) for i in range(len(tested))]
    if full > screen:
        while (i := _to_refine(results, full, tests, alpha)) is not None:
            results[i] = run(i, full)
    rows = []
    for against, run_id, names, cur, ref, n, shared in pairs:
        if n < min_queries:
            means = _means(cur, ref, shared)
            rows += [{"against": against, "reference_run_id": run_id, **names, "measure": m, "n": n, **means[m],
                      "status": f"too few paired queries (n < {min_queries})"} for m in shared]
    for (against, run_id, names, *_), (compared, flips) in zip(tested, results):
        rows += [{"against": against, "reference_run_id": run_id, **names, "measure": r["measure"], "n": r["n"],
                  "reference": r["mean_b"], "current": r["mean_a"], "diff": r["diff"], "ci_low": r["ci_low"],
                  "ci_high": r["ci_high"], "p_value": r["p_value"], "permutations": flips, "status": TESTED}
                 for r in compared.iter_rows(named=True)]
    table = pl.DataFrame([{c: row.get(c) for c in REGRESSION_SCHEMA} for row in rows], schema=REGRESSION_SCHEMA)
    return _corrected(table, alpha, tests, full)


def _to_refine(results: list[tuple[pl.DataFrame, int]], full: int, tests: int, alpha: float) -> int | None:
    """The setting to test again with `full` flips, or None when Holm's outcome no longer depends
    on a screened p. Walks Holm's step-down over the p values, taking a screened p at its
    optimistic bound (3 standard errors below the estimate): at the first test that fails its
    threshold Holm stops, and every test before it must have a full-count p."""
    bounds = []
    for i, (compared, flips) in enumerate(results):
        for p in compared["p_value"].to_list():
            bounds.append((p if flips == full else _optimistic(p, flips), i))
    for rank, (bound, i) in enumerate(sorted(bounds)):
        if bound >= alpha / (tests - rank):
            return None
        if results[i][1] != full:
            return i
    return None


def _optimistic(p: float, flips: int) -> float:
    """A lower bound of the p a randomization test estimated as `p` from `flips` sign flips."""
    hits = p * (flips + 1)  # (sign flips as far from 0 as observed) + 1
    return max(0.0, hits - 3 * math.sqrt(hits)) / (flips + 1)


def _paired(cur: pl.DataFrame, ref: pl.DataFrame, key: str, resamples: int, permutations: int, seed: int,
            level: float) -> pl.DataFrame:
    """paired_comparison of one setting's current rows (a) against its reference rows (b)."""
    tagged = pl.concat([cur.with_columns(provider=pl.lit("current")), ref.with_columns(provider=pl.lit("reference"))])
    tagged = tagged.with_columns(index=pl.lit(key), nprobe=pl.lit(None, dtype=pl.Int64))
    return paired_comparison(tagged, ("current", key, None), ("reference", key, None),
                             resamples=resamples, permutations=permutations, seed=seed, level=level)


def _corrected(table: pl.DataFrame, alpha: float, tests: int, full: int) -> pl.DataFrame:
    tested = (table["status"] == TESTED).to_numpy()
    adjusted = np.full(table.height, np.nan)
    adjusted[tested] = holm_adjusted(table["p_value"].to_numpy()[tested])
    table = table.with_columns(
        p_adjusted=pl.Series(adjusted, dtype=pl.Float64).fill_nan(None), correction=pl.lit(CORRECTION),
        tests=pl.lit(tests, dtype=pl.Int64), alpha=pl.lit(alpha))
    # A screened p is never the ground for a regression (_to_refine retests every one Holm reaches).
    significant = ((pl.col("status") == TESTED) & (pl.col("p_adjusted") < alpha) & (pl.col("ci_high") < 0)
                   & (pl.col("permutations") == full))
    return table.with_columns(regression=significant.fill_null(False))


def _paired_settings(current: pl.DataFrame, reference: pl.DataFrame, measures: list[str]):
    """(names, current rows, reference rows, paired queries, shared measures) per setting key in
    both tables; the rows are those of queries scored on every shared measure in both."""
    current, reference = _keyed(current, measures), _keyed(reference, measures)
    # Two labels of one computation share a key (and its values): the first label stands for it.
    names = current.select(PAIR_COLUMNS).unique().sort("setting", "params", nulls_last=True).unique(
        "setting_key", keep="first", maintain_order=True)
    for row in names.filter(pl.col("setting_key").is_in(reference["setting_key"].implode())).iter_rows(named=True):
        cur = current.filter(pl.col("setting_key") == row["setting_key"])
        ref = reference.filter(pl.col("setting_key") == row["setting_key"])
        shared = [m for m in measures if m in set(cur["measure"]) and m in set(ref["measure"])]
        complete = _complete_queries(cur, shared).join(_complete_queries(ref, shared), on="query_id")
        cur, ref = (f.filter(pl.col("measure").is_in(shared)).join(complete, on="query_id") for f in (cur, ref))
        yield row, cur, ref, complete.height, shared


def _keyed(frame: pl.DataFrame, measures: list[str]) -> pl.DataFrame:
    frame = frame.with_columns(pl.lit(None, dtype=t).alias(c) for c, t in KEY_TYPES.items() if c not in frame.columns)
    frame = frame.filter(pl.col("measure").is_in(measures) & pl.col("setting_key").is_not_null())
    return frame.select(*PAIR_COLUMNS, "query_id", "measure", "value").unique(
        ["setting_key", "query_id", "measure"], keep="first", maintain_order=True)


def _complete_queries(frame: pl.DataFrame, measures: list[str]) -> pl.DataFrame:
    scored = frame.filter(pl.col("measure").is_in(measures) & pl.col("value").is_not_null())
    return scored.group_by("query_id").agg(pl.col("measure").n_unique().alias("m")).filter(
        pl.col("m") == len(measures)).select("query_id")


def _means(cur: pl.DataFrame, ref: pl.DataFrame, measures: list[str]) -> dict[str, dict]:
    """Per measure: the means over the paired queries (null when there is none) and their difference."""
    out = {}
    for m in measures:
        a = cur.filter(pl.col("measure") == m)["value"].mean()
        b = ref.filter(pl.col("measure") == m)["value"].mean()
        out[m] = {"current": a, "reference": b, "diff": None if a is None or b is None else a - b}
    return out


def recorded_measures(store: str | Path, spec_name: str) -> list[str]:
    history = load_summary_history(store, spec_name)
    return [] if history.is_empty() else sorted(history["measure"].unique().to_list())


def trend_table(store: str | Path, spec_name: str, measure: str = "ndcg@10") -> pl.DataFrame:
    """One row per run, one column per provider/index/nprobe: the measure's mean over time; `series`
    and `dataset` (the first 12 characters of the dataset content key) tell the series apart."""
    history = load_summary_history(store, spec_name)
    if history.is_empty():
        return history
    history = history.filter(pl.col("measure") == measure).with_columns(
        setting=pl.concat_str([pl.col("provider"), pl.col("index"), pl.col("nprobe").cast(pl.String).fill_null("exact")], separator="/"))
    series = runs_of(store, spec_name).select("run_id", "series", dataset=pl.col("dataset_hash").str.slice(0, 12))
    trend = history.pivot(on="setting", index=["finished_at", "run_id", "git_commit"], values="value")
    trend = trend.join(series, on="run_id", how="left")
    return trend.select(*TREND_KEYS, *[c for c in trend.columns if c not in TREND_KEYS]).sort("finished_at")
