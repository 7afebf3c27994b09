"""`retbench init PATH`: tell a dataset folder's format, say what it holds (documents, queries and
judgments per split, languages) and write a commented starter spec for it."""
from __future__ import annotations

import argparse
import os
from pathlib import Path


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("init", help="detect a dataset folder's format and write a starter spec for it",
                                   description=__doc__)
    parser.add_argument("path", type=Path, help="the dataset folder")
    parser.add_argument("-o", "--output", type=Path,
                        help="the spec file to write (default: <folder name>.yaml in the current folder)")
    parser.add_argument("--force", action="store_true", help="overwrite the spec file if it exists")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of expected failures")
    parser.set_defaults(func=run)
    return parser


def run(args) -> int:
    from retbench.tasks.config.spec import SpecError
    from retbench.tasks.config.starter import StarterFacts, choose_split, spec_name, starter_spec
    from retbench.tasks.datasets.detect import detect_format

    folder = args.path.resolve()
    detected = detect_format(folder)
    dataset = _read_all(detected)
    judged = _judged_per_split(dataset)
    queries_per_split = {s: q for s, (q, _) in judged.items()}
    split, reason = (detected.fixed_split, "all its queries are test queries") if detected.fixed_split \
        else choose_split(queries_per_split)
    name = spec_name(detected.options.get("collection") or folder.name)
    output = (args.output or Path(f"{name}.yaml")).resolve()
    if output.exists() and not args.force:
        raise SpecError(f"{output}: exists; pass --force to overwrite it, or -o to write elsewhere")
    if output.is_relative_to(folder):
        raise SpecError(f"{output}: inside the dataset folder, whose every file is hashed as the dataset's source; "
                        "write the spec elsewhere (-o)")
    languages = _languages(dataset)
    facts = StarterFacts(name=name, dataset_path=_relative(folder, output.parent), format=detected.format,
                         options=detected.options, split=split, split_reason=reason, judged_splits=queries_per_split,
                         languages=tuple(dict.fromkeys(lang for counts in languages.values() for lang in counts)),
                         trec_qrels=tuple(_relative(p, output.parent) for p in detected.trec_qrels), found=detected.what)
    _write_spec(output, starter_spec(facts))
    print(f"{folder}: {detected.format} ({detected.what})" + "".join(f", {k}={v}" for k, v in detected.options.items()))
    print(f"  {dataset.corpus.height} documents; judged queries and judgments per split: "
          + "; ".join(f"{s} {q} queries, {j} judgments" for s, (q, j) in judged.items())
          + (f"; {len(dataset.unjudged_queries)} queries without judgments" if dataset.unjudged_queries else ""))
    print("  languages: " + "; ".join(f"{role} " + ", ".join(f"{lang} {n}" for lang, n in counts.items())
                                      for role, counts in languages.items()))
    for path in detected.trec_qrels:
        print(f"  TREC qrels {path.name}: a commented `qrels:` line in the spec uses them instead")
    print(f"wrote {output} (split {split}: {reason}); next: retbench check {_shown(output)}")
    return 0


def _write_spec(output: Path, text: str) -> None:
    """Write the spec whole or not at all (a temporary file renamed); a folder that cannot be
    written (read-only, no permission, a file where a folder should be) is one line naming it."""
    import errno

    from retbench.tasks.config.spec import SpecError

    temporary = output.with_name(f".{output.name}.{os.getpid()}.tmp")
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, output)
    except OSError as error:
        if temporary.parent.is_dir():
            temporary.unlink(missing_ok=True)
        existing = next((p for p in output.parents if p.exists()), None)
        if existing is not None and not existing.is_dir():
            reason = f"{existing} is a file, not a folder"
        else:
            reason = {errno.EROFS: "read-only filesystem", errno.EACCES: "permission denied",
                      errno.EPERM: "operation not permitted", errno.ENOSPC: "no space left on device"
                      }.get(error.errno, error.strerror or str(error))
        raise SpecError(f"{output}: cannot write the starter spec ({reason}); run init from a folder you can "
                        "write, or pass -o with a path in one") from error


def _read_all(detected):
    """Every query of every split, validated as a run would (ids, grades); unjudged queries are counted."""
    from retbench.tasks.stages.dataset import load_dataset
    from retbench.tasks.stages.preflight import quiet_dataset_warnings

    with quiet_dataset_warnings():
        return load_dataset(detected.folder, detected.format, "all", **detected.options)


def _judged_per_split(dataset) -> dict[str, tuple[int, int]]:
    """split -> (judged queries, judgments), splits in order dev, test, then any other."""
    import polars as pl

    per = (dataset.qrels.join(dataset.queries.select("query_id", "split"), on="query_id")
           .group_by("split").agg(pl.col("query_id").n_unique().alias("queries"), pl.len().alias("judgments")))
    counts = {s: (q, j) for s, q, j in per.iter_rows()}
    order = [s for s in ("train", "dev", "test") if s in counts] + sorted(set(counts) - {"train", "dev", "test"})
    return {s: counts[s] for s in order}


def _languages(dataset) -> dict[str, dict[str, int]]:
    """"documents" and "queries" -> language -> how many, most frequent first."""
    from collections import Counter

    return {role: dict(Counter(frame["language"].to_list()).most_common())
            for role, frame in (("documents", dataset.corpus), ("queries", dataset.queries))}


def _relative(path: Path, base: Path) -> str:
    """`path` relative to the spec's folder when it is beside or below it, else absolute."""
    try:
        relative = os.path.relpath(path, base)
    except ValueError:  # another drive (Windows)
        return str(path)
    return str(path) if relative.startswith(os.path.join(os.pardir, os.pardir)) else relative


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)
