"""Read and write TREC run files (``qid Q0 docno rank score tag``) and qrels files
(``qid iter docno rel``) as polars frames, with errors that name the file and line.

Ids stay strings ("007" is not 7). Lines are split on any run of whitespace, as trec_eval
does; blank lines are skipped but still counted, so reported line numbers match an editor's.
"""
from __future__ import annotations

from pathlib import Path

import polars as pl

from tasks.store.files import atomic_write

RUN_FIELDS = "qid Q0 docno rank score tag"
QRELS_FIELDS = "qid iter docno rel"


def _fields(path: Path, n: int, names: list[str], layout: str) -> pl.DataFrame:
    """Split each non-blank line of ``path`` into ``n`` string columns, vectorised."""
    data = Path(path).read_bytes()
    try:
        text = data.decode("utf-8-sig")  # a BOM is tolerated, as by the dataset loaders
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise ValueError(f"{path}:{line}: invalid UTF-8; expected UTF-8 text") from None
    text = text.replace("\r\n", "\n")
    lines = pl.DataFrame({"line": text.split("\n")}).with_row_index("lineno", offset=1)
    lines = lines.filter(pl.col("line").str.strip_chars() != "")
    token = r"(\S+)"
    pattern = r"^\s*" + r"\s+".join([token] * n) + r"\s*$"
    split = lines.select("lineno", "line", pl.col("line").str.extract_groups(pattern).alias("f"))
    bad = split.filter(pl.col("f").struct.field("1").is_null())
    if bad.height:
        lineno, line = bad.row(0)[:2]
        raise ValueError(f"{path}:{lineno}: expected {n} columns ({layout}), "
                         f"found {len(line.split())}: {line.strip()!r}")
    return split.select(
        "lineno", *[pl.col("f").struct.field(str(i + 1)).alias(name) for i, name in enumerate(names)]
    )


def _first_bad(df: pl.DataFrame, mask: pl.Expr, path: Path, column: str, what: str) -> None:
    bad = df.filter(mask)
    if bad.height:
        lineno, value = bad.select("lineno", column).row(0)
        raise ValueError(f"{path}:{lineno}: {what} {value!r}")


def read_run(path: str | Path) -> pl.DataFrame:
    """A TREC run as ``query_id, doc_id, score`` (file order; rank and tag are not kept)."""
    raw = _fields(path, 6, ["query_id", "q0", "doc_id", "rank", "score_text", "tag"], RUN_FIELDS)
    df = raw.with_columns(score=pl.col("score_text").cast(pl.Float64, strict=False))
    _first_bad(df, pl.col("score").is_null(), path, "score_text", "score is not a number:")
    # NaN compares false with everything, so it would make the ranking depend on sort internals.
    _first_bad(df, pl.col("score").is_nan(), path, "score_text", "score is NaN:")
    return df.select("query_id", "doc_id", "score")


def read_qrels(path: str | Path) -> pl.DataFrame:
    """TREC qrels as ``query_id, doc_id, grade`` (the iteration column is dropped)."""
    raw = _fields(path, 4, ["query_id", "iter", "doc_id", "grade_text"], QRELS_FIELDS)
    df = raw.with_columns(grade=pl.col("grade_text").cast(pl.Int64, strict=False))
    _first_bad(df, pl.col("grade").is_null(), path, "grade_text", "grade is not an integer:")
    return df.select("query_id", "doc_id", "grade")


def _check_tokens(df: pl.DataFrame, columns: list[str], what: str) -> None:
    # A space or an empty id would shift every later column when the file is read back.
    for col in columns:
        if df.schema[col] != pl.String:
            raise ValueError(f"{what}: column {col} must be str (found {df.schema[col]})")
        bad = df.filter(pl.col(col).is_null() | (pl.col(col) == "")
                        | pl.col(col).str.contains(r"\s"))
        if bad.height:
            raise ValueError(f"{what}: {col} {bad[col][0]!r} is empty or contains whitespace")


def _require(df: pl.DataFrame, columns: list[str], what: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{what}: missing columns {missing} (found {df.columns})")


def write_run(df: pl.DataFrame, path: str | Path, tag: str) -> None:
    """Write ``query_id, doc_id, score`` as a TREC run, each query in trec_eval's order
    (score desc, doc id desc) with ranks 1..n; queries in id order."""
    _require(df, ["query_id", "doc_id", "score"], "run")
    if not tag or any(c.isspace() for c in tag):
        raise ValueError(f"run tag {tag!r} is empty or contains whitespace")
    _check_tokens(df, ["query_id", "doc_id"], "run")
    out = (
        df.select("query_id", "doc_id", pl.col("score").cast(pl.Float64))
        .sort(["query_id", "score", "doc_id"], descending=[False, True, True])
        .select(
            "query_id",
            pl.lit("Q0").alias("q0"),
            "doc_id",
            (pl.int_range(pl.len()).over("query_id") + 1).alias("rank"),
            "score",  # polars prints the shortest repr that reads back to the same float
            pl.lit(tag).alias("tag"),
        )
    )
    atomic_write(path, lambda tmp: out.write_csv(tmp, separator=" ", include_header=False, quote_style="never"))


def write_qrels(df: pl.DataFrame, path: str | Path) -> None:
    """Write ``query_id, doc_id, grade`` as TREC qrels (iteration column 0), sorted by ids."""
    _require(df, ["query_id", "doc_id", "grade"], "qrels")
    _check_tokens(df, ["query_id", "doc_id"], "qrels")
    if not df.schema["grade"].is_integer():
        raise ValueError(f"qrels: column grade must be an integer (found {df.schema['grade']})")
    out = df.sort(["query_id", "doc_id"]).select("query_id", pl.lit(0).alias("iter"), "doc_id", "grade")
    atomic_write(path, lambda tmp: out.write_csv(tmp, separator=" ", include_header=False, quote_style="never"))
