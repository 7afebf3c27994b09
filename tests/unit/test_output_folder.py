"""The output folder's publication (tasks/store/output_folder.py): staged files move in together,
a full run removes what only the previous runs wrote, a partial run keeps it, an interrupted
publication is finished by the next start or a reader, and a second live run is refused."""
from __future__ import annotations

import subprocess
import sys

import polars as pl
import pytest

from retbench.tasks.store import output_folder
from retbench.tasks.store.output_folder import (OutputFolderBusy, finish_if_abandoned, live_run, publish, published,
                                                run_id_of)


def stage_files(staging, names):
    for name in names:
        path = staging / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if name.endswith(".parquet"):
            pl.DataFrame({"x": [1, 2]}).write_parquet(path)
        else:
            path.write_text(f"{name} of {staging.name}\n")


def run_into(out, run_id, names, replaces_all=True):
    with live_run(out, "spec", run_id) as staging:
        stage_files(staging, names)
        return publish(staging, out, run_id, replaces_all)


def test_a_full_run_replaces_the_folder_and_a_partial_run_keeps_the_previous_tables(tmp_path):
    out = tmp_path / "out"
    run_into(out, "a", ["summary.parquet", "old_only.parquet", "ann_sweep/p.parquet", "report.md"])
    assert run_id_of(out / "ann_sweep" / "p.parquet") == "a"
    run_into(out, "b", ["summary.parquet", "ann_sweep/p.parquet", "report.md"])
    assert not (out / "old_only.parquet").exists()  # only run a wrote it: gone with run a
    assert {run_id_of(out / n) for n in ("summary.parquet", "ann_sweep/p.parquet")} == {"b"}
    assert (out / "report.md").read_text() == "report.md of .staging-b\n"
    run_into(out, "c", ["manifest.json"], replaces_all=False)
    record = published(out)
    assert record["run_id"] == "c"
    assert {name: entry["run_id"] for name, entry in record["files"].items()} == {
        "summary.parquet": "b", "ann_sweep/p.parquet": "b", "report.md": "b", "manifest.json": "c"}
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == [".published.json", ".run.lock"]


def interrupted_moves(monkeypatch, after: int, again: bool):
    """`_move` raises KeyboardInterrupt after `after` moves: once (a Ctrl-C), or on every later call
    too (`again`: the process is dead, as after a SIGKILL nothing more moves)."""
    real_move, calls = output_folder._move, []

    def move(source, target):
        calls.append(target)
        if len(calls) == after + 1 or (again and len(calls) > after):
            raise KeyboardInterrupt("stopped between two moves")
        real_move(source, target)

    monkeypatch.setattr(output_folder, "_move", move)
    return real_move


NAMES = ("one.parquet", "two.parquet", "three.parquet")


def test_a_ctrl_c_between_two_moves_is_rolled_forward_before_the_run_ends(tmp_path, monkeypatch):
    out = tmp_path / "out"
    run_into(out, "a", NAMES)
    interrupted_moves(monkeypatch, after=1, again=False)
    with pytest.raises(KeyboardInterrupt):
        run_into(out, "b", NAMES)
    assert [run_id_of(out / n) for n in NAMES] == ["b", "b", "b"]
    assert published(out)["run_id"] == "b" and not (out / ".publishing.json").exists()
    assert not list(out.glob(".staging-*"))


def test_a_publication_cut_after_its_commit_point_is_finished_by_a_reader(tmp_path, monkeypatch):
    out = tmp_path / "out"
    run_into(out, "a", NAMES)
    real_move = interrupted_moves(monkeypatch, after=1, again=True)
    with pytest.raises(KeyboardInterrupt):
        run_into(out, "b", NAMES)
    monkeypatch.setattr(output_folder, "_move", real_move)
    # On disk, a mix, with the commit point that says how to finish it and the staged files kept ...
    assert sorted(run_id_of(out / n) for n in NAMES) == ["a", "a", "b"]
    assert (out / ".publishing.json").exists() and (out / ".staging-b").is_dir()
    # ... which a reader (retbench.load) finishes.
    assert finish_if_abandoned(out) is True
    assert [run_id_of(out / n) for n in NAMES] == ["b", "b", "b"]
    assert published(out)["run_id"] == "b" and not (out / ".publishing.json").exists()
    assert not list(out.glob(".staging-*"))


def test_a_second_live_run_is_refused_naming_the_first(tmp_path):
    out = tmp_path / "out"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\n"
        "from retbench.tasks.store.output_folder import live_run\n"
        f"with live_run({str(out)!r}, 'nightly', 'r1'):\n"
        "    print('held', flush=True); sys.stdin.readline()\n")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(OutputFolderBusy) as refused:
            run_into(out, "r2", ["summary.parquet"])
        message = str(refused.value)
        assert message.startswith(f"{out} is being written by another run (pid {holder.pid}, spec 'nightly', started 20")
        assert message.endswith("wait for it to end, or give this run another output_dir (--output-dir)")
        assert not (out / "summary.parquet").exists()
    finally:
        holder.stdin.write("\n")
        holder.stdin.close()
        holder.wait(timeout=30)
    # The lock ended with its holder; a kill would end it the same way.
    assert run_into(out, "r2", ["summary.parquet"]) == ["summary.parquet"]
