"""The shipped pipeline (retbench.tasks.pipeline.run_pipeline, without Prefect) over the sample data with
two `hashing` providers: the subject of the crash, concurrency and integrity tests.

As a script it prints `STAGE <name>` (flushed) as each stage starts, so a test can kill it
at a chosen moment, and `DONE <json>` at the end with what each embed call embedded:

    python support/crash_worker.py STORE OUT [--data DIR] [--batch-delay SECONDS]

`run()` is the same call in-process (the tests' reruns and reference runs use it).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SAMPLE = ROOT / "data" / "sample"
PROVIDERS = {"hash64": {"dim": 64}, "hash96": {"dim": 96, "word_ngrams": 1}}
BATCH = 16  # small batches: many shards, and a merge at the end of each embed call
SPEC = """
name: crash
dataset: {{path: "{data}", format: jsonl, split: all}}
chunking: {{strategy: paragraph, max_words: 60}}
providers:
{providers}
indexes: {{ivf: {{nprobe: [1, 4]}}}}
k: [5, 10]
depth: 20
output_dir: "{out}"
store_dir: "{store}"
history: {{enabled: {history}}}
statistics: {{resamples: 50, permutations: 50}}
"""
TABLES = ("summary", "per_query", "runs")


def slow_hashing(delay: float):
    """Providers whose batches pause `delay` seconds, so a kill can land mid-embed; same kind
    and fingerprint as the plain provider, hence the same cache folder and keys."""
    from retbench.tasks.providers.hashing import HashingProvider

    class SlowHashing(HashingProvider):
        def encode(self, texts, role):
            time.sleep(delay)
            return super().encode(texts, role)

    return lambda provider: SlowHashing(**provider.options)


def write_spec(folder: Path, store: Path, out: Path, data: Path = SAMPLE, history: bool = False) -> Path:
    providers = "\n".join(
        f"  - {{name: {name}, kind: hashing, batch_size: {BATCH}, options: {json.dumps(options)}}}"
        for name, options in PROVIDERS.items()
    )
    path = Path(folder) / "crash-spec.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(SPEC.format(data=data, providers=providers, out=out, store=store, history=str(history).lower()),
                    encoding="utf-8")
    return path


def run(store: Path, out: Path, data: Path = SAMPLE, batch_delay: float = 0.0,
        announce: Callable[[str], None] = lambda stage: None, spec_dir: Path | None = None,
        history: bool = False) -> dict:
    """The shipped pipeline up to the report (recording the run in the store's history when
    `history`); returns {"embedded": {provider/role: n}, "tables": {name: path}}."""
    from retbench.tasks.config.spec import load_spec
    from retbench.tasks.pipeline import Runner, default_provider, run_pipeline

    spec = load_spec(write_spec(spec_dir or Path(out) / ".spec", Path(store), Path(out), Path(data), history))
    make_provider = slow_hashing(batch_delay) if batch_delay else default_provider
    result = run_pipeline(spec, runner=Runner(announce), make_provider=make_provider)
    return {"embedded": result.embedded(), "tables": {name: result.tables[name] for name in TABLES}}


def needed_keys(store: Path, out: Path, data: Path = SAMPLE) -> dict[str, set[str]]:
    """Cache keys a complete run needs, per provider cache folder name (from a finished run's sets)."""
    import polars as pl

    from retbench.tasks.stages.embed import cache_dir_for
    from retbench.tasks.providers import create_provider

    needed: dict[str, set[str]] = {}
    for name, options in PROVIDERS.items():
        folder = cache_dir_for(Path(store), create_provider("hashing", options))[0]
        needed[folder.name] = set()
    for set_file in (Path(store) / "sets").glob("*.parquet"):
        keys = pl.read_parquet(set_file, columns=["key"])["key"].to_list()
        for folder in needed:
            # A set belongs to the folder whose shards hold its first key.
            if keys and keys[0] in cache_rows(Path(store) / "embeddings" / folder)[1]:
                needed[folder].update(keys)
    return needed


def cache_rows(folder: Path) -> tuple[int, set[str]]:
    """(rows, distinct keys) over every shard of one provider folder and the journals of its
    unfinished parts (rows a killed run kept, which the next run moves into a shard)."""
    import pyarrow.parquet as pq

    from retbench.tasks.store.shards import journal_batches, pending_paths

    rows, keys = 0, set()
    columns = [pq.read_table(shard, columns=["key"]).column("key").to_pylist()
               for shard in sorted(Path(folder).glob("shard-*.parquet"))]
    columns += [b.column("key").to_pylist() for part in pending_paths(folder) for b in journal_batches(part)]
    for column in columns:
        rows += len(column)
        keys.update(column)
    return rows, keys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("store", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--data", type=Path, default=SAMPLE)
    parser.add_argument("--batch-delay", type=float, default=0.0)
    args = parser.parse_args(argv)
    result = run(args.store, args.out, args.data, args.batch_delay, announce=lambda s: print(f"STAGE {s}", flush=True))
    print("DONE " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
