"""Read and write TREC run files (``qid Q0 docno rank score tag``) and qrels files
(``qid iter docno rel``) as polars frames, with errors that name the file and line.

Ids stay strings ("007" is not 7). Lines are split on any run of whitespace, as trec_eval
does; blank lines are skipped but still counted, so reported line numbers match an editor's.
Files written with single spaces (every writer we know of, this module's included) take a
fast path through polars' CSV reader (10M lines in ~2 s); any other file, and any file the
fast path finds fault with, is read again line by line, which names the first bad line.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

RUN_FIELDS = "qid Q0 docno rank score tag"
QRELS_FIELDS = "qid iter docno rel"
_BOM = b"\xef\xbb\xbf"
# Whitespace other than space and newline, as UTF-8 (Unicode White_Space, what the line-by-line
# path splits on): its presence sends a file to that path, since the CSV reader splits on one
# space only. Runs of spaces need no search: they make empty or extra fields, which fail below.
_ODD_SPACE = [b"\t", b"\x0b", b"\x0c"]
_UNICODE_SPACE = [chr(c).encode() for c in (0x85, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028,
                                             0x2029, 0x202F, 0x205F, 0x3000)]


@dataclass(frozen=True)
class _Layout:
    names: tuple[str, ...]  # one per field, in file order
    text: str               # the layout as error messages spell it
    number: str             # the field that must parse as a number
    dtype: type[pl.DataType]
    what: str               # "score is not a number:" / "grade is not an integer:"
    integer: tuple[str, ...] = ()  # other fields that must be integers
    key: tuple[str, ...] = ("query_id", "doc_id")  # no two lines may share these


_RUN = _Layout(("query_id", "q0", "doc_id", "rank", "score", "tag"), RUN_FIELDS, "score", pl.Float64,
               "score is not a number:", integer=("rank",), key=("tag", "query_id", "doc_id"))
_QRELS = _Layout(("query_id", "iter", "doc_id", "grade"), QRELS_FIELDS, "grade", pl.Int64,
                 "grade is not an integer:")


_BLOCK = 1 << 20  # bytes per numpy pass in _plain: the block's comparisons stay in the cache


def _plain(data: bytes) -> bool:
    """Is every byte printable ASCII, a space or LF? One numpy pass over the file, where each
    search of _single_spaced is one of its own (a 300 MB run file: ~6 searches)."""
    signed = np.frombuffer(data, dtype=np.int8)  # bytes >= 128 are negative
    for start in range(0, len(signed), _BLOCK):
        block = signed[start:start + _BLOCK]
        if np.count_nonzero(block < 32) != np.count_nonzero(block == 10):
            return False
    return True


def _single_spaced(data: bytes) -> bool:
    """Does the file use no whitespace but spaces and line ends (LF or CRLF)?"""
    if _plain(data):
        return True
    if any(c in data for c in _ODD_SPACE):
        return False
    if b"\r" in data and data.count(b"\r") != data.count(b"\r\n"):  # a lone CR
        return False
    return data.isascii() or not any(c in data for c in _UNICODE_SPACE)


def _fast(data: bytes, layout: _Layout, unique: bool = True) -> pl.DataFrame | None:
    """The parsed, validated frame, or None when the file needs the line-by-line path
    (other whitespace, runs of spaces, or any fault: the slow path finds and names it)."""
    if not _single_spaced(data):
        return None
    names = list(layout.names)
    # Numbers parse while reading; whatever the CSV parser refuses, a polars cast (the slow
    # path) refuses too, so both paths accept the same files.
    numeric = {layout.number: layout.dtype, **{c: pl.Int64 for c in layout.integer}}
    try:
        df = pl.read_csv(data, has_header=False, separator=" ", quote_char=None, comment_prefix=None,
                         new_columns=names, schema={n: numeric.get(n, pl.String) for n in names},
                         raise_if_empty=False)
    except (pl.exceptions.PolarsError, ValueError):
        return None  # extra fields, a bad number, invalid UTF-8, ...
    # Null counts come with the columns: a file without blank lines or missing fields (the
    # usual case) skips the row-by-row count.
    if any(df.null_count().row(0)):
        missing = pl.sum_horizontal(pl.col(n).is_null() for n in names)
        df = df.with_columns(_missing=missing)
        if (df["_missing"] % len(names) != 0).any():  # empty or missing fields; not a blank line (all missing)
            return None
        df = df.filter(pl.col("_missing") == 0).drop("_missing")
    df = df.with_columns(
        pl.col(layout.number).alias("_number"), *[pl.col(c).alias(f"_{c}") for c in layout.integer])
    if _faults(df, layout).height or (unique and _duplicates(df, layout).height):
        return None
    return df


def _typed(df: pl.DataFrame, layout: _Layout) -> pl.DataFrame:
    """The slow path's string fields cast to numbers (null where a field does not parse)."""
    return df.with_columns(
        pl.col(layout.number).cast(layout.dtype, strict=False).alias("_number"),
        *[pl.col(c).cast(pl.Int64, strict=False).alias(f"_{c}") for c in layout.integer],
    )


def _faults(df: pl.DataFrame, layout: _Layout) -> pl.DataFrame:
    """Rows with a field that does not parse (or a NaN score)."""
    bad = pl.col("_number").is_null()
    if layout.dtype == pl.Float64:
        # NaN compares false with everything, so it would make the ranking depend on sort internals.
        bad = bad | pl.col("_number").is_nan()
    for c in layout.integer:
        bad = bad | pl.col(f"_{c}").is_null()
    return df.filter(bad)


def _duplicates(df: pl.DataFrame, layout: _Layout) -> pl.DataFrame:
    """Rows whose key an earlier row already has. Hashes first: an exact check on 10M string
    pairs costs more than scoring; only rows whose hash repeats get the exact check."""
    h = np.zeros(df.height, dtype=np.uint64)
    for seed, col in enumerate(layout.key):
        h = h * np.uint64(0x9E3779B97F4A7C15) ^ df[col].hash(seed=seed).to_numpy()
    hashes = pl.Series(h)
    if hashes.n_unique() == len(hashes):
        return df.clear()
    suspects = df.filter(hashes.is_duplicated())
    return suspects.filter(pl.struct(list(layout.key)).is_first_distinct().not_())


def _slow_fields(path: Path, data: bytes, layout: _Layout) -> pl.DataFrame:
    """Split each non-blank line into the layout's string fields with its line number,
    naming the first line that has the wrong number of fields."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise ValueError(f"{path}:{line}: invalid UTF-8; expected UTF-8 text") from None
    text = text.replace("\r\n", "\n")
    lines = pl.DataFrame({"line": text.split("\n")}).with_row_index("lineno", offset=1)
    lines = lines.filter(pl.col("line").str.strip_chars() != "")
    n = len(layout.names)
    token = r"(\S+)"
    pattern = r"^\s*" + r"\s+".join([token] * n) + r"\s*$"
    split = lines.select("lineno", "line", pl.col("line").str.extract_groups(pattern).alias("f"))
    bad = split.filter(pl.col("f").struct.field("1").is_null())
    if bad.height:
        lineno, line = bad.row(0)[:2]
        raise ValueError(f"{path}:{lineno}: expected {n} columns ({layout.text}), "
                         f"found {len(line.split())}: {line.strip()!r}")
    return split.select(
        "lineno", *[pl.col("f").struct.field(str(i + 1)).alias(name) for i, name in enumerate(layout.names)]
    )


def _slow(path: Path, data: bytes, layout: _Layout) -> pl.DataFrame:
    """The line-by-line path: the same checks as the fast one, each naming the first bad line."""
    df = _typed(_slow_fields(path, data, layout), layout)
    faults = _faults(df, layout)
    if faults.height:
        row = faults.row(0, named=True)
        for c in layout.integer:
            if row[f"_{c}"] is None:
                raise ValueError(f"{path}:{row['lineno']}: {c} is not an integer: {row[c]!r}")
        what = layout.what if row["_number"] is None else "score is NaN:"
        raise ValueError(f"{path}:{row['lineno']}: {what} {row[layout.number]!r}")
    dup = _duplicates(df, layout)
    if dup.height:
        row = dup.row(0, named=True)
        first = df.filter(*[pl.col(k) == row[k] for k in layout.key])["lineno"][0]
        verb = "retrieves" if layout is _RUN else "judges"
        where = f" in run {row['tag']!r}" if "tag" in layout.key else ""
        raise ValueError(f"{path}:{row['lineno']}: query {row['query_id']!r} {verb} doc "
                         f"{row['doc_id']!r} again{where} (first at line {first}); "
                         "trec_eval refuses duplicate docs")
    return df


def _read(path: str | Path, layout: _Layout, unique: bool = True) -> pl.DataFrame:
    path = Path(path)
    data = path.read_bytes()
    if data.startswith(_BOM):  # a BOM is tolerated, as by the dataset loaders
        data = data[len(_BOM):]
    df = _fast(data, layout, unique)
    return df if df is not None else _slow(path, data, layout)


def read_run(path: str | Path, *, tags: bool = False, unique: bool = True) -> pl.DataFrame:
    """A TREC run as ``query_id, doc_id, score`` (file order; rank is checked, not kept),
    and ``tag`` too when ``tags``. A (query, doc) pair may repeat only under different tags
    (a file holding several runs, as retbench's runs.trec does); ``tags=False`` refuses
    files holding more than one run, since their rows cannot be told apart.

    ``unique=False`` skips the repeated-pair check when the file is well formed, for a caller
    whose scorer checks again anyway (retbench.tasks.analysis.metrics.evaluate raises
    DuplicateDocError, then a plain read_run names the lines)."""
    df = _read(path, _RUN, unique).select("query_id", "doc_id", pl.col("_number").alias("score"), "tag")
    if tags:
        return df
    names = df["tag"].unique(maintain_order=True)
    if len(names) > 1:
        raise ValueError(f"{path}: holds {len(names)} runs (tags {', '.join(map(repr, names[:5]))}"
                         f"{', ...' if len(names) > 5 else ''}); read it with tags=True and score one tag at a time "
                         "(retbench eval does, or takes --tag)")
    return df.drop("tag")


def read_qrels(path: str | Path) -> pl.DataFrame:
    """TREC qrels as ``query_id, doc_id, grade`` (the iteration column is dropped)."""
    return _read(path, _QRELS).select("query_id", "doc_id", pl.col("_number").alias("grade"))


def check_trec_tokens(df: pl.DataFrame, columns: list[str], what: str) -> None:
    """Refuse id columns that cannot be TREC fields (not text, empty, or with whitespace)."""
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
    check_trec_tokens(df, ["query_id", "doc_id"], "run")
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
    # Imported here: the store's module loads pyarrow, which reading a file (retbench eval) never needs.
    from retbench.tasks.store.files import atomic_write

    atomic_write(path, lambda tmp: out.write_csv(tmp, separator=" ", include_header=False, quote_style="never"))


def write_qrels(df: pl.DataFrame, path: str | Path) -> None:
    """Write ``query_id, doc_id, grade`` as TREC qrels (iteration column 0), sorted by ids."""
    _require(df, ["query_id", "doc_id", "grade"], "qrels")
    check_trec_tokens(df, ["query_id", "doc_id"], "qrels")
    if not df.schema["grade"].is_integer():
        raise ValueError(f"qrels: column grade must be an integer (found {df.schema['grade']})")
    out = df.sort(["query_id", "doc_id"]).select("query_id", pl.lit(0).alias("iter"), "doc_id", "grade")
    # Imported here: the store's module loads pyarrow, which reading a file (retbench eval) never needs.
    from retbench.tasks.store.files import atomic_write

    atomic_write(path, lambda tmp: out.write_csv(tmp, separator=" ", include_header=False, quote_style="never"))
