"""The judging loop on real data: holes punched into Cranfield's judgments, pooled, judged back.

    python benchmarks/bench_judging_loop.py [--data DIR] [--seed 32] [--fraction 0.5] [--keep]

With a fixed seed, the judgments of a random `--fraction` of Cranfield's relevant (grade > 0 after
the loader's mapping) (query, document) pairs are removed: the reduced cran.qrels is written into
a temp dataset folder beside links to the untouched cran.all.1400 and cran.qry. Then, with the CLI
as a user runs it (one process per command, into the temp folder):

1. `retbench run` on the full dataset into an empty store (the first run, timed), then on the
   reduced one: the same spec name and store, so the second run is the spec's next run after half
   its judgments were lost, and its verdict compares each setting's judged@10 with the first's;
2. `retbench judge export --format tsv --depth 10` of the reduced run, judged by an oracle that
   knows only the removed judgments: a pooled pair that was removed gets its original grade; any
   other pooled pair was never judged in Cranfield either, and stays unjudged (not written);
3. `retbench judge import --source oracle`, then `retbench run` again (the rescore, timed).

Prints judged@10 and nDCG@10 per setting (full, reduced, after the overlay), whether the verdict
flags a judged gap or a judged@10 fall since the previous run (its sentences, from the report), the removed relevant documents no setting
ranked in its top 10 (per query and in total: what the pool cannot give back), and the rescore's
wall time against the first run's with what it embedded and searched (from its manifest).
Settings: bm25, minilm flat, hashing flat. The last line is a JSON object of every figure.
"""
from __future__ import annotations

import argparse
import csv
import html
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RETBENCH = [str(Path(sys.executable).parent / "retbench")]
# Cranfield's inverted scale as the loader maps it (tasks/datasets/cranfield.py).
GRADES = {1: 4, 2: 3, 3: 2, 4: 1, -1: 0}
SPEC = """\
name: cranfield-judging
dataset: {{path: {data}, format: cranfield, split: test}}
chunking: {{strategy: none}}
providers:
  - {{name: minilm, kind: sentence-transformers}}
  - {{name: hashing, kind: hashing}}
lexical: [{{name: bm25}}]
indexes: {{flat: true}}
k: [10]
output_dir: {out}
store_dir: {store}
"""


def retbench(*args: str, env: dict, log: Path | None = None) -> float:
    """Run one CLI command; its wall seconds (its output written to `log`). Stops the benchmark
    with its stderr on failure."""
    started = time.perf_counter()
    done = subprocess.run([*RETBENCH, *args], capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - started
    if log is not None:
        log.write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        sys.exit(f"retbench {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return seconds


def reduce_qrels(data: Path, folder: Path, fraction: float, seed: int) -> dict[tuple[str, str], int]:
    """Write `folder` as `data` with a seeded `fraction` of the relevant judgments removed;
    the removed pairs -> their mapped grade (the oracle's knowledge)."""
    folder.mkdir(parents=True)
    for name in ("cran.all.1400", "cran.qry"):
        (folder / name).symlink_to(data / name)
    lines = (data / "cran.qrels").read_text().splitlines()
    relevant = [i for i, line in enumerate(lines) if line.split() and GRADES[int(line.split()[2])] > 0]
    removed_lines = set(random.Random(seed).sample(relevant, round(len(relevant) * fraction)))
    kept = [line for i, line in enumerate(lines) if i not in removed_lines]
    (folder / "cran.qrels").write_text("\n".join(kept) + "\n")
    removed = {}
    for i in sorted(removed_lines):
        query, doc, grade = lines[i].split()
        removed[(query, doc)] = GRADES[int(grade)]
    return removed


def settings_table(out: Path) -> dict[str, dict[str, float]]:
    """setting label -> {measure: mean over the run's queries} for judged@10 and ndcg@10."""
    summary = pl.read_parquet(out / "summary.parquet")
    wanted = summary.filter(pl.col("measure").is_in(["judged@10", "ndcg@10", "ndcg_condensed@10", "bpref"]))
    table: dict[str, dict[str, float]] = {}
    for row in wanted.iter_rows(named=True):
        table.setdefault(label(row), {})[row["measure"]] = row["value"]
    return table


def label(row: dict) -> str:
    return row.get("setting") or f"{row['provider']} {row['index']}"


def holes_sentences(out: Path) -> list[str]:
    """The verdict's and the ladder's judged-gap sentences, as the report prints them."""
    found = []
    for name in ("verdict.parquet", "ladder.parquet"):
        path = out / name
        if path.exists():
            table = pl.read_parquet(path)
            for column in ("holes_sentence",):
                if column in table.columns:
                    found += [s for s in table[column].drop_nulls().unique().to_list() if s]
    report = out / "report.md"
    if report.exists():
        found += [line.strip() for line in report.read_text().splitlines() if "unjudged against" in line]
    return sorted(set(found))


def fall_sentences(out: Path) -> list[str]:
    """The verdict's sentence on judged@k that fell since the spec's previous run."""
    report = out / "report.md"
    text = report.read_text() if report.exists() else ""
    return [html.unescape(s.strip()) + "." for s in text.replace("\n", " ").split(". ")
            if s.strip().startswith("Less of each top")]


def unretrieved(out: Path, removed: dict[tuple[str, str], int], depth: int) -> dict[str, int]:
    """Per query: removed relevant documents that no setting ranked within `depth`."""
    runs = pl.read_parquet(out / "runs.parquet", columns=["query_id", "doc_id", "rank"])
    seen = set(runs.filter(pl.col("rank") <= depth).select("query_id", "doc_id").unique().iter_rows())
    counts: dict[str, int] = {}
    for (query, doc), grade in removed.items():
        if grade > 0 and (query, doc) not in seen:
            counts[query] = counts.get(query, 0) + 1
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path(os.environ.get("RETBENCH_SHARED_DATA", ROOT.parent / "shared" / "data")) / "cranfield")
    parser.add_argument("--seed", type=int, default=32)
    parser.add_argument("--fraction", type=float, default=0.5)
    parser.add_argument("--depth", type=int, default=10)
    parser.add_argument("--keep", action="store_true", help="keep the temp folder and print its path")
    args = parser.parse_args()
    data = args.data.resolve()
    if not (data / "cran.qrels").is_file():
        sys.exit(f"{data}: no cran.qrels; pass --data, the folder of the Cranfield collection")
    scratch = Path(tempfile.mkdtemp(prefix="bench-judging-"))
    env = {**os.environ, "PREFECT_HOME": str(scratch / "prefect")}
    store = scratch / "store"
    removed = reduce_qrels(data, scratch / "cranfield-reduced", args.fraction, args.seed)
    specs, outs = {}, {}
    for which, folder in (("reduced", scratch / "cranfield-reduced"), ("full", data)):
        outs[which] = scratch / f"out-{which}"
        specs[which] = scratch / f"{which}.yaml"
        specs[which].write_text(SPEC.format(which=which, data=folder, out=outs[which], store=store))

    first = retbench("run", str(specs["full"]), env=env)
    retbench("run", str(specs["reduced"]), env=env)
    reduced = settings_table(outs["reduced"])
    full = settings_table(outs["full"])
    flags_reduced, flags_full = holes_sentences(outs["reduced"]), holes_sentences(outs["full"])
    falls = {"full": fall_sentences(outs["full"]), "reduced": fall_sentences(outs["reduced"])}
    missing = unretrieved(outs["reduced"], removed, args.depth)

    pool = scratch / "pool.tsv"
    retbench("judge", "export", str(outs["reduced"]), "--format", "tsv", "--depth", str(args.depth),
             "--out", str(pool), env=env)
    with open(pool, newline="") as f:
        pooled = [(row["query_id"], row["doc_id"]) for row in csv.DictReader(f, delimiter="\t")]
    oracle = scratch / "oracle.qrels"
    graded = [(q, d, removed[(q, d)]) for q, d in pooled if (q, d) in removed]
    oracle.write_text("".join(f"{q} 0 {d} {g}\n" for q, d, g in graded))
    retbench("judge", "import", str(oracle), "--spec", str(specs["reduced"]), "--source", "oracle", env=env)
    rescore = retbench("run", str(specs["reduced"]), env=env, log=scratch / "rescore.log")
    without_prefect = "ran without Prefect" in (scratch / "rescore.log").read_text()
    after = settings_table(outs["reduced"])
    flags_after = holes_sentences(outs["reduced"])
    falls["overlay"] = fall_sentences(outs["reduced"])
    manifest = json.loads((outs["reduced"] / "manifest.json").read_text())
    # Embedding searches are in `retrieval`, BM25 and other systems in `systems`.
    searched = sum(1 for r in [*manifest["retrieval"], *manifest["systems"]] if r.get("computed"))
    built = sum(1 for i in manifest["indexes"] if i.get("computed"))
    # A second rerun, nothing changed: the floor any cached run pays (process start, reading, scoring).
    cached = retbench("run", str(specs["reduced"]), env=env)

    relevant_total = sum(1 for line in (data / "cran.qrels").read_text().splitlines()
                         if line.split() and GRADES[int(line.split()[2])] > 0)
    print(f"Cranfield: {relevant_total} relevant judgments, {len(removed)} removed (seed {args.seed}, "
          f"fraction {args.fraction}); pool at depth {args.depth}: {len(pooled)} pairs, "
          f"{len(graded)} of them removed judgments (graded by the oracle), {len(pooled) - len(graded)} never "
          f"judged in Cranfield (left unjudged)")
    print(f"\n{'setting':<16} {'judged@10':>28} {'nDCG@10':>28}")
    print(f"{'':<16} {'full':>8} {'reduced':>9} {'overlay':>9} {'full':>9} {'reduced':>9} {'overlay':>9}")
    for setting in sorted(full):
        j = [t.get(setting, {}).get("judged@10") for t in (full, reduced, after)]
        n = [t.get(setting, {}).get("ndcg@10") for t in (full, reduced, after)]
        print(f"{setting:<16} {j[0]:>8.4f} {j[1]:>9.4f} {j[2]:>9.4f} {n[0]:>9.4f} {n[1]:>9.4f} {n[2]:>9.4f}")
    print("\njudged-gap sentences (verdict and ladder):")
    for name, flags in (("full", flags_full), ("reduced", flags_reduced), ("overlay", flags_after)):
        print(f"  {name}: " + (" | ".join(flags) if flags else "none"))
    print("judged@10 fall since the previous run (verdict):")
    for name, found in falls.items():
        print(f"  {name}: " + (" | ".join(found) if found else "none"))
    print(f"\nremoved relevant documents no setting ranked in its top {args.depth}: {sum(missing.values())} "
          f"on {len(missing)} queries (most on one query: {max(missing.values(), default=0)})")
    print(f"rescore {rescore:.1f} s against the first run's {first:.1f} s = {rescore / first:.3f}; "
          f"texts embedded {manifest['texts']['embedded']}, indexes built {built}, searches run {searched}; "
          f"{'without' if without_prefect else 'through'} Prefect; in-process {manifest['run']['total_seconds']:.1f} s")
    print(f"a rerun with nothing changed after it: {cached:.1f} s = {cached / first:.3f} of the first run")
    print(f"load: {Path('/proc/loadavg').read_text().strip()}")
    print(json.dumps({
        "relevant": relevant_total, "removed": len(removed), "seed": args.seed, "pool_pairs": len(pooled),
        "oracle_graded": len(graded), "full": full, "reduced": reduced, "overlay": after,
        "flags": {"full": flags_full, "reduced": flags_reduced, "overlay": flags_after}, "falls": falls,
        "unretrieved_per_query": missing, "unretrieved_total": sum(missing.values()),
        "first_seconds": round(first, 2), "rescore_seconds": round(rescore, 2), "texts_embedded": manifest["texts"]["embedded"],
        "indexes_built": built, "searches_run": searched, "rescore_without_prefect": without_prefect,
        "rescore_in_process_seconds": manifest["run"]["total_seconds"], "cached_rerun_seconds": round(cached, 2),
    }))
    if args.keep:
        print(f"kept: {scratch}", file=sys.stderr)
    else:
        import shutil

        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
