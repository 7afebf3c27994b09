"""`retbench hard-negatives OUTPUT_DIR --provider NAME --out triples.jsonl`: mine
(anchor, positive, negative) triples for fine-tuning from a finished run's train queries (its dev
queries when it has no train query; --split chooses); test queries are never mined."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "hard-negatives",
        help="export sentence-transformers triplets (anchor, positive, negative) from a run's train (else dev) queries",
        description=__doc__,
    )
    parser.add_argument("output_dir", type=Path, help="a run's output directory (runs.parquet, manifest.json)")
    parser.add_argument("--provider", required=True, help="provider name as in the spec")
    parser.add_argument("--index", default="flat", help="index kind: flat (default) or ivf")
    parser.add_argument("--nprobe", type=int, default=None, help="nprobe of an ivf run")
    parser.add_argument("--max-per-query", type=int, default=5, help="negatives per query (default 5)")
    parser.add_argument("--split", default=None, metavar="{train,dev}",
                        help="the split to mine: train or dev (default: train when the run has train queries, "
                             "else dev); the test split is held out")
    parser.add_argument("--query-id", action="append", dest="query_ids", metavar="ID",
                        help="mine only these queries (repeatable); each must be in the split mined")
    parser.add_argument("--out", required=True, type=Path, help="the JSONL file to write")
    parser.set_defaults(func=run)
    return parser


def run(args) -> int:
    import polars as pl

    from retbench.tasks.datasets.errors import DatasetError
    from retbench.tasks.stages.dataset import load_saved_dataset
    from retbench.tasks.analysis.hard_negatives import hard_negative_pairs, mining_queries, write_triples

    try:
        output_dir = Path(args.output_dir)
        dataset = load_saved_dataset(_dataset_path(output_dir))
        runs_path = output_dir / "runs.parquet"
        if not runs_path.is_file():
            raise FileNotFoundError(f"{runs_path}: missing; expected the runs table of a finished benchmark")
        run_table = pl.read_parquet(runs_path)
        mined = mining_queries(dataset.queries, args.split, args.query_ids)
        pairs = hard_negative_pairs(
            run_table, dataset, args.provider, args.index, nprobe=args.nprobe,
            max_per_query=args.max_per_query, mined=mined,
        )
        write_triples(args.out, pairs.select("anchor", "positive", "negative").to_dicts())
    except (DatasetError, FileNotFoundError, ValueError) as error:
        print(f"retbench hard-negatives: {error}", file=sys.stderr)
        return 2
    label = f"{args.provider}/{args.index}" + (f"/nprobe={args.nprobe}" if args.nprobe is not None else "")
    print(f"wrote {pairs.height} triples from {pairs['query_id'].n_unique()} {mined.split} queries ({label}) to {args.out}")
    if mined.same_text_as_test:
        print(f"left out {len(mined.same_text_as_test)} {mined.split} queries whose text is a test query's "
              f"(first: {mined.same_text_as_test[0]})")
    if not (dataset.queries["split"] == "test").any():
        print("note: the run's dataset holds no test query, so no text could be compared with the test split's")
    return 0


def _dataset_path(output_dir: Path) -> Path:
    manifest_path = output_dir / "manifest.json"
    if not manifest_path.is_file():
        raise FileNotFoundError(f"{manifest_path}: missing; expected the manifest of a finished benchmark")
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        path = Path(manifest["dataset"]["path"])
    except (json.JSONDecodeError, KeyError, TypeError) as error:
        raise ValueError(f"{manifest_path}: expected dataset.path (the saved dataset folder); {error!r}") from None
    # An absolute path is what the flow writes; a relative one is taken from the output folder.
    return path if path.is_absolute() else output_dir / path
