"""pyarrow's check for pandas runs once without it (flows/lazy_pandas.py): the run's conversions
and Parquet reads import no pandas, and a conversion that needs pandas still gets it."""
import subprocess
import sys

SCRIPT = """
import sys
import numpy as np, polars as pl, pyarrow as pa, pyarrow.parquet as pq
from retbench.flows.lazy_pandas import defer_pandas_in_pyarrow
defer_pandas_in_pyarrow()
path = sys.argv[1]
pq.write_table(pa.table({"id": pa.array(["a", "b"]), "x": np.arange(2)}), path)
table = pq.read_table(path)
pl.read_parquet(path)
print("pandas" in sys.modules)
frame = table.to_pandas()
print("pandas" in sys.modules, type(frame).__name__, frame["id"].tolist())
import pandas
print(pa.Table.from_pandas(pandas.DataFrame({"y": [1.5]})).column("y").type)
"""


def test_the_runs_conversions_import_no_pandas_and_to_pandas_still_works(tmp_path):
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "t.parquet")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["False", "True DataFrame ['a', 'b']", "double"]
