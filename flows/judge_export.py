"""`retbench judge export OUTPUT_DIR`: the judging pool of a finished run, the union of every
setting's top --depth documents that have no judgment, one row per (query, document), most
settings and highest ranks first (tasks/analysis/pool.py), as a CSV/TSV sheet or an offline
HTML page that grades with the keyboard and downloads TREC qrels."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

FORMATS = {"csv": ".csv", "tsv": ".tsv", "html": ".html"}
SPLITS = ("test", "dev", "train", "all")
DEFAULT_OUT = Path("judging-pool")


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "export", help="write the pool of unjudged top-ranked documents, as a sheet or an offline grading page",
        description=__doc__)
    parser.add_argument("output_dir", type=Path, help="a run's output directory (manifest.json, runs.parquet)")
    parser.add_argument("--depth", type=int, default=10, help="pool each setting's top DEPTH documents (default 10)")
    parser.add_argument("--split", choices=SPLITS, default=None,
                        help="the queries to pool (default: test when the run has test queries, else all)")
    parser.add_argument("--format", choices=(*FORMATS, "all"), default="html",
                        help="html (default): a grading page; csv or tsv: a sheet with an empty grade column; all: the three")
    parser.add_argument("--out", type=Path, default=None,
                        help="the file to write (default: judging-pool.<format> in the current folder); with "
                             "--format all, its suffix is replaced by each format's")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of expected failures")
    parser.set_defaults(func=run)
    return parser


def run(args) -> int:
    from retbench.flows.errors import one_line
    from retbench.tasks.datasets.errors import DatasetError

    try:
        return _export(args)
    except (DatasetError, FileNotFoundError, ValueError) as error:
        if args.debug:
            raise
        print(one_line(error), file=sys.stderr)
        return 2


def _export(args) -> int:
    import polars as pl

    from retbench.tasks.analysis.pool import grade_scale, judged_share, judging_pool, top_ranked, with_texts
    from retbench.tasks.reporting.judging import PoolFacts, judging_page, sheet_text
    from retbench.tasks.reporting.settings_table import label_expr
    from retbench.tasks.stages.dataset import load_saved_dataset
    from retbench.tasks.store.files import write_text

    if args.depth < 1:
        raise ValueError(f"--depth must be at least 1 (got {args.depth})")
    output_dir = Path(args.output_dir)
    manifest = _manifest(output_dir)
    runs_path = output_dir / "runs.parquet"
    if not runs_path.is_file():
        raise FileNotFoundError(f"{runs_path}: missing; expected the runs table of a finished run (retbench run writes "
                                "it at its score stage)")
    dataset = load_saved_dataset(_recorded_path(manifest, output_dir, ("dataset", "path"), "the saved dataset folder"))
    found = pl.read_parquet_schema(runs_path)
    missing = [c for c in ("query_id", "provider", "index", "nprobe", "doc_id", "chunk_id", "score") if c not in found]
    if missing:
        raise ValueError(f"{runs_path}: missing columns {missing} (found {list(found)}); expected the runs table "
                         "of a finished run")
    runs = pl.scan_parquet(runs_path).with_columns(setting=label_expr())
    run_queries = runs.select(pl.col("query_id").unique()).collect()["query_id"]
    splits = dataset.queries.filter(pl.col("query_id").is_in(run_queries.implode()))
    split = args.split or ("test" if (splits["split"] == "test").any() else "all")
    pooled = splits if split == "all" else splits.filter(pl.col("split") == split)
    if pooled.height == 0:
        found = ", ".join(sorted(splits["split"].unique().to_list())) or "none"
        raise ValueError(f"--split {split}: the run has no {split} query (its queries' splits: {found})")

    top = top_ranked(runs, args.depth, pooled["query_id"].to_list())
    settings = top["setting"].n_unique()
    pool = judging_pool(top, dataset.qrels)
    where = f"{pooled.height} {'' if split == 'all' else split + ' '}queries, {settings} settings"
    if pool.height == 0:
        print(f"nothing to judge: every top-{args.depth} document is judged ({where})")
        return 0
    chunks = _chunks(manifest, output_dir)
    pairs = with_texts(pool, dataset.queries, dataset.corpus, chunks)
    judged = judged_share(top, dataset.qrels)
    facts = PoolFacts(run=str(manifest.get("run", {}).get("spec_name") or output_dir.name), depth=args.depth,
                      split=split, queries=pooled.height, max_grade=grade_scale(dataset.qrels),
                      judged=dict(judged.select("setting", "judged").iter_rows()))
    formats = list(FORMATS) if args.format == "all" else [args.format]
    written = []
    for name in formats:
        path = _target(args.out, name, several=len(formats) > 1)
        text = judging_page(pairs, facts) if name == "html" else sheet_text(pairs, "\t" if name == "tsv" else ",")
        written.append(str(write_text(path, text)))
    print(f"wrote {pool.height} unjudged pairs (top {args.depth} of {where}; grades 0-{facts.max_grade}) "
          f"to {', '.join(written)}")
    print(f"judged@{args.depth} now: " + ", ".join(f"{s} {v:.2f}" for s, v in facts.judged.items()))
    if chunks is None:
        print("note: the run's chunk texts were not found (manifest chunks.path); the pool shows whole documents")
    return 0


def _manifest(output_dir: Path) -> dict:
    if not output_dir.is_dir():
        what = "is not a folder" if output_dir.exists() else "does not exist"
        raise FileNotFoundError(f"{output_dir} {what}; expected a run's output folder (manifest.json, runs.parquet)")
    path = output_dir / "manifest.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing; expected the manifest of a finished run (is {output_dir} a run's "
                                "output folder?)")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: not readable JSON ({error})") from None
    if not isinstance(manifest, dict):
        raise ValueError(f"{path}: expected a JSON object, found {type(manifest).__name__}")
    return manifest


def _recorded_path(manifest: dict, output_dir: Path, keys: tuple[str, str], what: str) -> Path:
    try:
        path = Path(manifest[keys[0]][keys[1]])
    except (KeyError, TypeError):
        raise ValueError(f"{output_dir / 'manifest.json'}: expected {'.'.join(keys)} ({what})") from None
    # The flow writes an absolute path; a relative one is taken from the output folder.
    return path if path.is_absolute() else output_dir / path


def _chunks(manifest: dict, output_dir: Path):
    """The run's chunks table, or None when the manifest names none or it is gone from the store."""
    import polars as pl

    try:
        path = _recorded_path(manifest, output_dir, ("chunks", "path"), "the chunks table")
    except ValueError:
        return None
    return pl.read_parquet(path, columns=["chunk_id", "start", "end", "text"]) if path.is_file() else None


def _target(out: Path | None, name: str, several: bool) -> Path:
    if out is None:
        return DEFAULT_OUT.with_suffix(FORMATS[name])
    return out.with_suffix(FORMATS[name]) if several else out
