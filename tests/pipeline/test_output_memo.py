"""The score stage's tables are kept in the store by what they are computed from: a cached
rerun copies them (byte for byte, but for the run id each published table carries), a changed
input or damaged copy computes them again."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.pipeline.test_cached_runs import run, write_spec

def content(path: Path):
    """A file's bytes; a Parquet table's rows and metadata, less the run id publishing stamps on it."""
    if path.suffix != ".parquet":
        return path.read_bytes()
    import pyarrow.parquet as pq

    from retbench.tasks.store.output_folder import RUN_ID_KEY

    table = pq.read_table(path)
    assert RUN_ID_KEY in table.schema.metadata
    return {k: v for k, v in table.schema.metadata.items() if k != RUN_ID_KEY}, table.to_pydict()


OUTPUTS = ("summary.parquet", "per_query.parquet", "breakdown.parquet", "comparisons.parquet", "summary.csv", "runs.trec")


def test_a_cached_rerun_copies_the_score_tables_and_a_change_recomputes_them(tmp_path, monkeypatch):
    from retbench.tasks import stage_calls

    run(write_spec(tmp_path, "memo", out="first"))
    computed = {name: content(tmp_path / "first" / name) for name in OUTPUTS}

    monkeypatch.setattr(stage_calls, "_score_tables", lambda *a, **k: pytest.fail("scored again although nothing changed"))
    again = run(write_spec(tmp_path, "memo", out="again"))  # another output folder: the same tables
    assert {name: content(tmp_path / "again" / name) for name in OUTPUTS} == computed
    assert set(again.tables) >= {"summary", "per_query", "breakdown"} and \
        Path(again.tables["summary"]) == tmp_path / "again" / "summary.parquet"

    # Another statistics setting is another key: computed (here: the guard fails).
    changed = write_spec(tmp_path, "memo", out="changed")
    changed.write_text(changed.read_text().replace("resamples: 20", "resamples: 21"))
    with pytest.raises(pytest.fail.Exception, match="scored again"):
        run(changed)


def test_a_damaged_kept_table_is_quarantined_and_computed_again(tmp_path, monkeypatch):
    from retbench.tasks import stage_calls

    run(write_spec(tmp_path, "memo", out="first"))
    (kept,) = [p for p in (tmp_path / "store" / "scores").glob("*/summary.parquet")]
    kept.write_bytes(kept.read_bytes()[:-10])  # truncated
    calls = []
    real = stage_calls._score_tables
    monkeypatch.setattr(stage_calls, "_score_tables", lambda *a, **k: calls.append(1) or real(*a, **k))
    run(write_spec(tmp_path, "memo", out="again"))
    assert calls == [1]
    assert content(tmp_path / "again" / "summary.parquet") == content(tmp_path / "first" / "summary.parquet")
    assert list((tmp_path / "store" / "quarantine").rglob("summary.parquet*"))


def test_code_version_changes_with_any_module_of_the_package(tmp_path, monkeypatch):
    from retbench.tasks.store import output_memo

    package = tmp_path / "tasks"
    (package / "analysis").mkdir(parents=True)
    (package / "analysis" / "score.py").write_text("X = 1\n")
    monkeypatch.setattr(output_memo, "_TASKS", package)
    output_memo.code_version.cache_clear()
    before = output_memo.code_version()
    (package / "analysis" / "score.py").write_text("X = 2\n")
    output_memo.code_version.cache_clear()
    assert output_memo.code_version() != before
    output_memo.code_version.cache_clear()
