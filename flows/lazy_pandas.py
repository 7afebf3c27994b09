"""pyarrow imports pandas, when it is installed, the first time it converts anything (building an
array from a list or a numpy array, reading a Parquet file): to ask whether the object is a
pandas one. A run's own objects never are, and the import cost 1.3 of a cached `retbench run`'s
3 CPU seconds here (pandas comes with the test and fine-tuning extras: datasets, ranx).

`defer_pandas_in_pyarrow()` lets pyarrow's check run once while pandas cannot be imported, so
pyarrow records "no pandas" and stops asking. Nothing is lost: a conversion that needs pandas
(`Table.to_pandas`, `Table.from_pandas`) imports it then, as pyarrow retries its import for those,
and a library that imports pandas itself (sentence-transformers through datasets) gets it.
Called for the `run` and `check` commands only, in their own process: a notebook's pyarrow is
left as it is.
"""
from __future__ import annotations

import importlib.abc
import sys


class _NoPandas(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "pandas":
            raise ImportError("pandas is deferred until a conversion needs it")
        return None


def defer_pandas_in_pyarrow() -> None:
    if "pandas" in sys.modules:  # already paid for
        return
    import pyarrow as pa

    finder = _NoPandas()
    sys.meta_path.insert(0, finder)
    try:
        pa.array([0])  # pyarrow's one check for pandas, which now finds none
    finally:
        sys.meta_path.remove(finder)
