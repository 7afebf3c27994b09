"""Files the pipeline writes get the permissions a plain open() would: 0666 minus the umask."""
import os
import stat

import polars as pl
import pytest

from retbench.tasks.reporting.tables import write_tables
from retbench.tasks.store.files import write_json, write_parquet


@pytest.mark.parametrize("umask, expected", [(0o022, 0o644), (0o027, 0o640)])
def test_output_tables_and_store_files_honour_the_umask(tmp_path, umask, expected):
    previous = os.umask(umask)
    try:
        paths = write_tables(tmp_path / "out", {"summary": pl.DataFrame({"measure": ["mrr"], "value": [0.5]})})
        written = [paths["summary"], tmp_path / "out" / "summary.csv",
                   write_parquet(pl.DataFrame({"a": [1]}), tmp_path / "store" / "x.parquet"),
                   write_json(tmp_path / "store" / "fingerprint.json", {"kind": "hashing"})]
    finally:
        os.umask(previous)
    assert {str(p): oct(stat.S_IMODE(os.stat(p).st_mode)) for p in written} == {str(p): oct(expected) for p in written}
