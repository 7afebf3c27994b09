"""`retbench check SPEC`: the run's pre-flight without the run: exit 0 with one paragraph of what
a run would do and how much of it is cached, or exit 2 with one `retbench: ...` line. No Prefect,
no model: the caches are judged by content keys alone (tasks/stages/preflight.py); only your own
code (kind: python) is imported and tried on two texts. Then an estimate of the first run's
embedding time (from this machine's latency profile in the store) and the store's size; with
--estimate a provider without a profile loads its model and embeds a few texts (tasks/stages/estimate.py)."""
from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "check", help="check a spec and its data like a run would, and say what a run would compute (no Prefect, no model)",
        description=__doc__)
    parser.add_argument("spec", type=Path)
    parser.add_argument("--output-dir", type=Path, help="override the spec's output_dir")
    parser.add_argument("--store-dir", help="override the spec's store_dir (the cache root): a folder or an s3://... URI")
    parser.add_argument("--estimate", action="store_true",
                        help="estimate the embedding time of a provider without a latency profile in the store by "
                             "loading its model and embedding a few texts now (nothing is cached)")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of expected failures")
    parser.set_defaults(func=run)
    return parser


def run(args) -> int:
    import textwrap

    from retbench.tasks.config.spec import load_spec
    from retbench.tasks.stages.preflight import chunk_tables, plan_run, preflight, try_user_code
    from retbench.tasks.store.remote import is_remote

    store_dir = args.store_dir if args.store_dir is None or is_remote(args.store_dir) else str(Path(args.store_dir).resolve())
    spec = load_spec(args.spec, output_dir=str(args.output_dir.resolve()) if args.output_dir else None,
                     store_dir=store_dir)
    dataset, key = preflight(spec, create_folders=False)  # a check leaves the disk as it found it
    chunks = chunk_tables(spec, dataset, key)  # cut once, for the plan and the estimate
    plan = plan_run(spec, dataset, key, chunks)
    print(textwrap.fill(plan.summary(), width=100, break_on_hyphens=False))
    from retbench.tasks.stages.estimate import estimate_first_run, summary

    # From this machine's latency profile when the store has one; --estimate measures the rest now.
    estimates = estimate_first_run(spec, plan, chunks, dataset.queries["text"].to_list(), measure_now=args.estimate)
    print(textwrap.fill(summary(estimates), width=100, break_on_hyphens=False))
    for line in try_user_code(spec, dataset):
        print(textwrap.fill(line, width=100, break_on_hyphens=False))
    return 0
