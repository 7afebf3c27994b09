"""A `retbench run` with every stage's output in the store runs without Prefect (flows/fast_path.py);
one with work to do runs the flow, printing nothing of the attempt twice; `--prefect` forces the flow."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from retbench.tasks.store.build import WorkNeeded, build_once, cached_only, need_work
from tests.pipeline.test_cli_errors import prefect_home, retbench, tiny_collection, write_spec  # noqa: F401  (a fixture)

FLOW = "Beginning flow run"
SKIPPED = "nothing to compute: every stage's output was in the store, so this run ran without Prefect"


def test_cached_only_refuses_a_build_but_not_a_reuse_a_rewrite_or_a_figure(tmp_path):
    store, path = tmp_path / "store", tmp_path / "store" / "thing.txt"
    store.mkdir()
    write = lambda tmp: Path(tmp).write_text("x")  # noqa: E731
    with cached_only():
        with pytest.raises(WorkNeeded, match="thing.txt"):
            build_once(store, path, write)
        assert not path.exists()
        build_once(store, path, write, work=False)  # a figure: part of every report
        assert build_once(store, path, write).computed is False  # now it is there: read, not built
        assert build_once(store, path, write, force=True).computed  # a run's own output, rewritten on purpose
        with pytest.raises(WorkNeeded, match="embed 3"):
            need_work("embed 3 document texts with h")
    need_work("anything")  # outside: no-op


def test_a_rerun_with_nothing_to_compute_skips_prefect_and_writes_the_same_outputs(tmp_path, prefect_home):  # noqa: F811
    tiny_collection(tmp_path / "data")
    spec = write_spec(tmp_path)
    first = retbench("run", spec, "--output-dir", tmp_path / "out1", cwd=tmp_path, prefect_home=prefect_home)
    assert first.returncode == 0, first.stderr
    # It had work: the attempt without Prefect turned back at the first embedding and printed nothing.
    assert FLOW in first.stderr and SKIPPED not in first.stderr
    assert first.stderr.count("dataset data: 6 documents") == 1

    again = retbench("run", spec, "--output-dir", tmp_path / "out2", cwd=tmp_path, prefect_home=prefect_home)
    assert again.returncode == 0, again.stderr
    assert FLOW not in again.stderr and SKIPPED in again.stderr
    assert "0 embedded, 6 served from cache" in again.stderr
    assert (tmp_path / "out2" / "report.html").is_file()
    tables = sorted(p.name for p in (tmp_path / "out1").glob("*.parquet"))
    assert tables and set(tables) < {p.name for p in (tmp_path / "out2").glob("*.parquet")}  # + regressions: a previous run
    runs = [json.loads((tmp_path / out / "manifest.json").read_text())["run"] for out in ("out1", "out2")]
    assert runs[0]["finished_at"] < runs[1]["finished_at"] and runs[1]["stage"] == "score"
    assert [run["orchestrator"] for run in runs] == ["prefect", "in-process"]

    forced = retbench("run", spec, "--output-dir", tmp_path / "out3", "--prefect", cwd=tmp_path, prefect_home=prefect_home)
    assert forced.returncode == 0, forced.stderr
    assert FLOW in forced.stderr and SKIPPED not in forced.stderr
