"""Are two runs' result tables equal value for value? The check behind a refactor that must not
change behaviour (issue 21): run the shipped sample before and after, then

    python benchmarks/same_tables.py out/sample-before out/sample

compares summary, per_query, comparisons and breakdown (or the tables named with --tables) row
for row. Rows are matched after sorting on every shared column, floats must be equal to the last
bit (the pipeline is deterministic: seeded bootstraps, exact search); columns only in the second
folder (new columns such as `setting` and `params`) are listed, not compared. Exit 1 on any
difference.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import polars as pl

TABLES = ("summary", "per_query", "comparisons", "breakdown")


def compare(before: Path, after: Path, name: str) -> list[str]:
    """Differences between the two folders' `<name>.parquet`, as lines; empty when equal."""
    old_path, new_path = before / f"{name}.parquet", after / f"{name}.parquet"
    if not old_path.exists() or not new_path.exists():
        return [f"{name}: missing in {old_path.parent if not old_path.exists() else new_path.parent}"]
    old, new = pl.read_parquet(old_path), pl.read_parquet(new_path)
    gone = [c for c in old.columns if c not in new.columns]
    if gone:
        return [f"{name}: columns missing after: {gone}"]
    shared = old.columns
    if old.height != new.height:
        return [f"{name}: {old.height} rows before, {new.height} after"]
    old_sorted = old.sort(shared, nulls_last=True)
    new_sorted = new.select(shared).sort(shared, nulls_last=True)
    problems = []
    for column in shared:
        a, b = old_sorted[column], new_sorted[column]
        if a.dtype != b.dtype:
            problems.append(f"{name}.{column}: dtype {a.dtype} before, {b.dtype} after")
            continue
        differs = ~((a == b).fill_null(False) | (a.is_null() & b.is_null()))
        if a.dtype.is_float():
            differs = differs & ~(a.is_nan() & b.is_nan()).fill_null(False)
        count = int(differs.sum())
        if count:
            first = int(differs.arg_true()[0])
            problems.append(f"{name}.{column}: {count} of {old.height} values differ "
                            f"(first: {a[first]!r} before, {b[first]!r} after)")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--tables", nargs="+", default=list(TABLES))
    args = parser.parse_args(argv)
    failed = False
    for name in args.tables:
        problems = compare(args.before, args.after, name)
        if problems:
            failed = True
            print("\n".join(problems))
            continue
        old = pl.read_parquet(args.before / f"{name}.parquet")
        added = [c for c in pl.read_parquet_schema(args.after / f"{name}.parquet") if c not in old.columns]
        print(f"{name}: equal, {old.height} rows x {old.width} columns"
              + (f" (new columns, not compared: {', '.join(added)})" if added else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
