"""`retbench eval QRELS RUN`: score a TREC run file against a qrels file, like trec_eval."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


DEFAULT_MEASURES = ["ndcg@10", "recall@10", "mrr", "map"]
SUMMARY_ID = "all"  # trec_eval's name for the row of means


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "eval",
        help="score a TREC run against qrels (trec_eval conventions)",
        description="Score a TREC run file against a TREC qrels file with trec_eval's "
                    "conventions. Means are over queries in both files unless --complete.",
    )
    p.add_argument("qrels", type=Path, help="qrels file: qid iter docno rel")
    p.add_argument("run", type=Path, help="run file: qid Q0 docno rank score tag")
    p.add_argument("-m", "--measure", dest="measures", action="append", metavar="NAME",
                   help="measure such as ndcg@10, recall@100, mrr, map, p@5, hit_rate@10; "
                        f"repeatable (default: {' '.join(DEFAULT_MEASURES)})")
    p.add_argument("-q", "--per-query", action="store_true",
                   help="also print each query's values (keyed by query id)")
    p.add_argument("-l", "--relevance-level", type=int, default=1, metavar="N",
                   help="lowest grade counted relevant by binary measures (default 1; nDCG "
                        "uses the grades themselves)")
    p.add_argument("-c", "--complete", action="store_true",
                   help="average over every qrels query; queries missing from the run score 0")
    p.add_argument("-t", "--tag", metavar="TAG",
                   help="score only the run with this tag (last column); a file holding several "
                        "runs, like retbench's runs.trec, is otherwise scored run by run")
    p.add_argument("--format", choices=["table", "json", "parquet"], default="table")
    p.add_argument("-o", "--output", type=Path, metavar="PATH",
                   help="write here instead of stdout (required for parquet)")
    p.set_defaults(func=run)
    return p


def score_files(qrels_path: Path, run_path: Path, measures: list[str], *, relevance_level: int = 1,
                complete: bool = False, per_query: bool = False, tag: str | None = None) -> pl.DataFrame:
    """Long table [run,] query_id, measure, value: per-query rows (if asked) then the 'all'
    rows, for each run (tag) in the file; the run column only when the file holds several."""
    # Imported here, not at the top: `retbench --help` must not pay for numpy and polars.
    import polars as pl

    from retbench.tasks.analysis.metrics import DuplicateDocError, parse_measure
    from retbench.tasks.analysis.trec import read_qrels, read_run

    measures = [str(parse_measure(m)) for m in measures]
    qrels = read_qrels(qrels_path)
    # evaluate checks for repeated docs anyway, more cheaply; only then is the file re-read
    # to name the lines.
    runs = read_run(run_path, tags=True, unique=False)
    if tag is not None:
        runs = runs.filter(pl.col("tag") == tag)
        if runs.is_empty():
            raise ValueError(f"{run_path}: no line has the tag {tag!r}")
    # One tag (the usual file) is checked in one comparison, cheaper than collecting the distinct tags.
    one = runs.height and (runs["tag"] == runs["tag"][0]).all()
    tags = [runs["tag"][0]] if one else runs["tag"].unique(maintain_order=True).to_list()
    parts = []
    for name in tags:
        run = runs.filter(pl.col("tag") == name) if len(tags) > 1 else runs
        try:
            table = _scores(run.drop("tag"), qrels, measures, relevance_level, complete, per_query)
        except DuplicateDocError:
            read_run(run_path, tags=True)  # raises, naming the file and both lines
            raise
        parts.append(table.select(pl.lit(name).alias("run"), pl.all()) if len(tags) > 1 else table)
    if not parts:
        raise ValueError(f"{run_path}: no run lines")
    return pl.concat(parts)


def _scores(run: pl.DataFrame, qrels: pl.DataFrame, measures: list[str], relevance_level: int,
            complete: bool, per_query: bool) -> pl.DataFrame:
    import polars as pl

    from retbench.tasks.analysis.metrics import evaluate

    ev = evaluate(run, qrels, measures, relevance_level=relevance_level, complete=complete)
    means = pl.DataFrame(
        {"query_id": SUMMARY_ID, "measure": list(ev.means()), "value": list(ev.means().values())},
        schema={"query_id": pl.String, "measure": pl.String, "value": pl.Float64},
    )
    if not per_query:
        return means
    if (ev.per_query["query_id"] == SUMMARY_ID).any():
        raise ValueError(f"a query is named {SUMMARY_ID!r}, which would be confused with the "
                         "row of means; rename it to use --per-query")
    # Group by query (trec_eval -q layout), keeping the requested measure order inside each.
    order = {m: i for i, m in enumerate(measures)}
    per_query_rows = (
        ev.per_query.with_columns(pl.col("measure").replace_strict(order).alias("_m"))
        .sort(["query_id", "_m"])
        .drop("_m")
    )
    return pl.concat([per_query_rows, means])


def _results(args: argparse.Namespace) -> pl.DataFrame:
    return score_files(args.qrels, args.run, args.measures or DEFAULT_MEASURES,
                       relevance_level=args.relevance_level, complete=args.complete,
                       per_query=args.per_query, tag=args.tag)


def _table(results: pl.DataFrame) -> str:
    width = max(len("measure"), *(len(m) for m in results["measure"]))
    if "run" in results.columns:
        return "".join(f"{r}\t{m:<{width}}\t{q}\t{v:.4f}\n" for r, q, m, v in results.iter_rows())
    return "".join(f"{m:<{width}}\t{q}\t{v:.4f}\n" for q, m, v in results.iter_rows())


def _json(results: pl.DataFrame) -> str:
    if "run" in results.columns:
        nested_runs: dict[str, dict[str, dict[str, float]]] = {}
        for r, q, m, v in results.iter_rows():
            nested_runs.setdefault(r, {}).setdefault(q, {})[m] = v
        return json.dumps(nested_runs, indent=2) + "\n"
    nested: dict[str, dict[str, float]] = {}
    for q, m, v in results.iter_rows():
        nested.setdefault(q, {})[m] = v
    return json.dumps(nested, indent=2) + "\n"


def run(args: argparse.Namespace) -> int:
    from retbench.flows.errors import EXIT_EXPECTED

    if args.format == "parquet" and args.output is None:
        print("retbench: eval --format parquet needs --output PATH (a parquet table is not written to the terminal)",
              file=sys.stderr)
        return EXIT_EXPECTED
    try:
        results = _results(args)
    except (ValueError, OSError) as err:
        # One line, as every other command's expected failures (flows/errors.py); the file is named.
        said = f"{err.filename}: {err.strerror}" if isinstance(err, OSError) and err.filename else str(err)
        print(f"retbench: {' '.join(said.split())}", file=sys.stderr)
        return EXIT_EXPECTED
    if args.format == "parquet":
        results.write_parquet(args.output)
        return 0
    text = _table(results) if args.format == "table" else _json(results)
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="retbench")
    add_parser(parser.add_subparsers(dest="command", required=True))
    parsed = parser.parse_args()
    sys.exit(parsed.func(parsed))
