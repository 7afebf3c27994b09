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
    p.add_argument("--format", choices=["table", "json", "parquet"], default="table")
    p.add_argument("-o", "--output", type=Path, metavar="PATH",
                   help="write here instead of stdout (required for parquet)")
    p.set_defaults(func=run)
    return p


def _results(args: argparse.Namespace):
    """Long table query_id, measure, value: per-query rows (if asked) then the 'all' rows."""
    # Imported here, not at the top: `retbench --help` must not pay for numpy and polars.
    import polars as pl

    from tasks.analysis.metrics import DuplicatePairError, evaluate, parse_measure
    from tasks.analysis.trec import read_qrels, read_run

    measures = [str(parse_measure(m)) for m in (args.measures or DEFAULT_MEASURES)]
    try:
        ev = evaluate(read_run(args.run), read_qrels(args.qrels), measures,
                      relevance_level=args.relevance_level, complete=args.complete)
    except DuplicatePairError as error:
        raise ValueError(_where_duplicate(error, args.run if error.table == "run" else args.qrels)) from None
    means = pl.DataFrame(
        {"query_id": SUMMARY_ID, "measure": list(ev.means()), "value": list(ev.means().values())},
        schema={"query_id": pl.String, "measure": pl.String, "value": pl.Float64},
    )
    if not args.per_query:
        return means
    if (ev.per_query["query_id"] == SUMMARY_ID).any():
        raise ValueError(f"a query is named {SUMMARY_ID!r}, which would be confused with the "
                         "row of means; rename it to use --per-query")
    # Group by query (trec_eval -q layout), keeping the requested measure order inside each.
    order = {m: i for i, m in enumerate(measures)}
    per_query = (
        ev.per_query.with_columns(pl.col("measure").replace_strict(order).alias("_m"))
        .sort(["query_id", "_m"])
        .drop("_m")
    )
    return pl.concat([per_query, means])


def _where_duplicate(error, path: Path) -> str:
    """The duplicate's message with the file and both lines; the file is read again, but only
    on this error path (the readers keep no line numbers)."""
    lines = []
    with open(path, encoding="utf-8-sig", errors="replace") as handle:
        for lineno, line in enumerate(handle, 1):
            fields = line.split()
            if len(fields) >= 3 and fields[0] == error.query_id and fields[2] == error.doc_id:
                lines.append(lineno)
                if len(lines) == 2:
                    break
    if len(lines) < 2:
        return f"{path}: {error}"
    verb = "retrieves" if error.table == "run" else "judges"
    return (f"{path}:{lines[1]}: query {error.query_id!r} {verb} doc {error.doc_id!r} a second time "
            f"(first at line {lines[0]}); expected each doc once per query")


def _table(results) -> str:
    width = max(len("measure"), *(len(m) for m in results["measure"]))
    return "".join(f"{m:<{width}}\t{q}\t{v:.4f}\n" for q, m, v in results.iter_rows())


def _json(results) -> str:
    nested: dict[str, dict[str, float]] = {}
    for q, m, v in results.iter_rows():
        nested.setdefault(q, {})[m] = v
    return json.dumps(nested, indent=2) + "\n"


def run(args: argparse.Namespace) -> int:
    if args.format == "parquet" and args.output is None:
        print("retbench eval: error: --format parquet needs --output PATH", file=sys.stderr)
        return 2
    try:
        results = _results(args)
    except (ValueError, OSError) as err:
        print(f"retbench eval: error: {err}", file=sys.stderr)
        return 1
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
