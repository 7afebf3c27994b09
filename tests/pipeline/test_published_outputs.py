"""An output folder always describes exactly one run (issue 35, item 2): a run stopped at every
stage boundary, or inside the report, leaves the previous run's outputs whole (every table, the
manifest and the published record carry its run id); the rerun publishes its own whole; a second
live run into the folder is refused in one line naming the first."""
from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from retbench.support import crash_worker
from retbench.support.crash_runs import STAGES
from retbench.tasks.progress import Interrupted, clear_stop, request_stop
from retbench.tasks.store.files import file_sha256
from retbench.tasks.store.output_folder import run_id_of
from tests.pipeline.test_cli_errors import retbench


def folder_run_id(out: Path) -> str:
    """The one run the folder describes; fails if its tables, manifest and record disagree."""
    record = json.loads((out / ".published.json").read_text())
    manifest = json.loads((out / "manifest.json").read_text())
    tables = {str(p.relative_to(out)): run_id_of(p) for p in out.rglob("*.parquet")}
    assert len(tables) > 10 and set(tables.values()) == {manifest["run"]["id"]} == {record["run_id"]}, tables
    for name, entry in record["files"].items():  # every published file is the one that run wrote
        assert file_sha256(out / name) == entry["sha256"], name
    assert set(tables) <= set(record["files"])
    assert not list(out.glob(".staging-*")) and not (out / ".publishing.json").exists()
    return record["run_id"]


def recorded_runs(store: Path) -> set[str]:
    """The run ids the store's history holds (its summary and per-query tables agree)."""
    tables = [{f.stem for f in (store / "history" / t).glob("date=*/*.parquet")} for t in ("summary", "per_query")]
    assert tables[0] == tables[1], tables
    return tables[0]


def stopping_at(target: str):
    def announce(stage: str) -> None:
        if stage == target:
            request_stop(signal.SIGINT)  # what the signal watcher does on Ctrl-C
    return announce


@pytest.fixture
def stops():
    clear_stop()
    yield
    clear_stop()


def test_a_stop_at_every_stage_boundary_and_inside_the_report_leaves_one_run(tmp_path, monkeypatch, stops):
    store, out = tmp_path / "store", tmp_path / "out"
    crash_worker.run(store, out, history=True)
    first = folder_run_id(out)
    tables = {name: pl.read_parquet(out / f"{name}.parquet") for name in crash_worker.TABLES}

    for stage in (*STAGES, "report"):
        with pytest.raises(Interrupted, match=f"^interrupted before {stage}"):
            crash_worker.run(store, out, announce=stopping_at(stage), history=True)
        assert folder_run_id(out) == first, stage
        clear_stop()

    from retbench.tasks.reporting import publish

    real_report = publish.build_report

    def stop_asked_during_the_report(*args, **kwargs):
        request_stop(signal.SIGINT)
        return real_report(*args, **kwargs)

    monkeypatch.setattr(publish, "build_report", stop_asked_during_the_report)
    with pytest.raises(Interrupted) as stopped:
        crash_worker.run(store, out, history=True)
    assert str(stopped.value) == (f"interrupted before publishing into {out} (it keeps the previous run's outputs): "
                                  f"the stages finished so far are kept; rerun to continue")
    assert folder_run_id(out) == first
    # the report stage had recorded the run in the history: a run that did not publish is taken back
    assert recorded_runs(store) == {first}
    clear_stop()

    def raised_inside_the_report(*args, **kwargs):  # the fast path's main thread: the handler raises there
        raise KeyboardInterrupt
    monkeypatch.setattr(publish, "build_report", raised_inside_the_report)
    with pytest.raises(KeyboardInterrupt):
        crash_worker.run(store, out, history=True)
    assert folder_run_id(out) == first
    assert recorded_runs(store) == {first}

    monkeypatch.setattr(publish, "build_report", real_report)
    crash_worker.run(store, out, history=True)
    assert folder_run_id(out) != first
    assert recorded_runs(store) == {first, folder_run_id(out)}
    for name, table in tables.items():
        assert pl.read_parquet(out / f"{name}.parquet").equals(table), name
    import retbench

    assert retbench.load(out).summary.equals(tables["summary"])


def test_a_second_live_run_into_the_output_folder_is_refused_in_one_line(tmp_path):
    out = tmp_path / "out"
    worker = subprocess.Popen([sys.executable, str(crash_worker.__file__), str(tmp_path / "store"), str(out),
                               "--batch-delay", "0.05"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                              cwd=crash_worker.ROOT)
    try:
        for line in worker.stdout:
            if line.strip() == "STAGE embed":
                break
        spec = out / ".spec" / "crash-spec.yaml"
        refused = retbench("run", spec, "--store-dir", tmp_path / "other-store", cwd=tmp_path,
                           prefect_home=tmp_path / "prefect")
        assert worker.poll() is None, "the first run ended before the second was refused: the test proves nothing"
        assert refused.returncode == 2, refused.stderr
        assert re.fullmatch(rf"retbench: {re.escape(str(out))} is being written by another run \(pid {worker.pid}, "
                            r"spec 'crash', started 20\d\d-\d\d-\d\dT[\d:]+\+00:00\); wait for it to end, or give "
                            r"this run another output_dir \(--output-dir\)\n", refused.stderr), refused.stderr
        for line in worker.stdout:
            if line.startswith("DONE"):
                break
        assert worker.wait(timeout=120) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        worker.stdout.close()
    folder_run_id(out)  # the first run's outputs, whole
    assert not list((tmp_path / "other-store").rglob("*.parquet"))  # refused before any stage
