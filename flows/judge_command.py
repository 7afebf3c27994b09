"""`retbench judge ...`: the judging commands. `export` (flows/judge_export.py) writes the pool a
run left unjudged; `import FILE --spec SPEC` adds judgments (a TREC qrels file, as a judging pool
downloads them, or the pool's graded CSV/TSV sheet) to a spec's dataset as an overlay kept in the store, with its provenance; the
dataset's own files are never changed (logic: tasks/stages/judgments.py)."""
from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(subparsers) -> argparse.ArgumentParser:
    from retbench.flows import judge_export

    parser = subparsers.add_parser("judge", help="judge the documents a run's settings ranked that nobody judged, "
                                   "and take the judgments back", description=__doc__)
    commands = parser.add_subparsers(dest="judge_command", required=True)
    judge_export.add_parser(commands)
    imported = commands.add_parser(
        "import", help="add a TREC qrels file's judgments to the spec's dataset as an overlay in the store",
        description="Add the judgments of a TREC qrels file (qid iter docid grade), or of a graded judging-pool "
                    "sheet (`retbench judge export --format csv|tsv`, rows with a grade), to the spec's dataset as an "
                    "overlay kept in the store beside it, with the file's name, sha256, the import time and a "
                    "source label. Refused: an unknown query or document id, a grade off the dataset's scale, a "
                    "conflict with a judgment the dataset or an earlier overlay has (unless --override). "
                    "Importing the same file again changes nothing.")
    imported.add_argument("file", type=Path, help="TREC qrels file (qid iter docid grade) or a graded "
                          "judging-pool sheet (CSV/TSV with its header)")
    imported.add_argument("--spec", required=True, type=Path, help="the spec whose dataset the judgments are for")
    imported.add_argument("--source", default="human", help="who judged, one word (default: human)")
    imported.add_argument("--override", action="store_true",
                          help="let this file's grades replace conflicting ones (default: refuse and list them)")
    imported.add_argument("--store-dir", help="override the spec's store_dir")
    imported.add_argument("--debug", action="store_true", help="show tracebacks of expected failures")
    imported.set_defaults(func=run_import)
    return parser


def run_import(args) -> int:
    from retbench.tasks.config.spec import load_spec
    from retbench.tasks.stages.judgments import check_import, import_overlay, overlay_folder
    from retbench.tasks.stages.preflight import validated_dataset
    from retbench.tasks.store.remote import is_remote

    store_dir = args.store_dir if args.store_dir is None or is_remote(args.store_dir) else str(Path(args.store_dir).resolve())
    spec = load_spec(args.spec, store_dir=store_dir)
    check_import(spec, args.file, args.source)  # before the dataset is read
    dataset, key = validated_dataset(spec)
    result = import_overlay(spec, args.file, dataset, key, source=args.source, override=args.override)
    o = result.overlay
    if not result.added:
        print(f"already imported: {args.file} (sha256 {o.sha256[:12]}) is the overlay {o.file} of dataset "
              f"{result.dataset!r}, source {o.source}, imported {o.imported_at}; nothing changed")
        return 0
    new = o.judgments - result.agreeing - len(result.overridden)
    print(f"imported {o.judgments} judgments from {o.file} (source {o.source}, sha256 {o.sha256[:12]}) as an overlay "
          f"of dataset {result.dataset!r}: {new} new, {result.agreeing} the same as a judgment it had, "
          f"{len(result.overridden)} overriding another grade; kept in {overlay_folder(spec.store_dir, result.base_key)}")
    for conflict in result.overridden[:5]:
        print(f"  overridden: {conflict.described()}")
    if spec.judgments.use == "base":
        print(f"note: {args.spec} has judgments.use: base, so its runs leave the overlay out")
    else:
        print("the next run scores with it, served from the cached runs (a new series starts in the history)")
    return 0
