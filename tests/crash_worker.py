"""The benchmark's stage functions run directly (no Prefect) over the sample data with two
`hashing` providers: the subject of the crash, concurrency and integrity tests.

As a script it prints `STAGE <name>` (flushed) as each stage starts, so a test can kill it
at a chosen moment, and `DONE <json>` at the end with what each embed call embedded:

    python tests/crash_worker.py STORE OUT [--data DIR] [--batch-delay SECONDS]

`run()` is the same pipeline in-process (the tests' reruns and reference runs use it).
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
"""
TABLES = ("summary", "per_query", "runs")


class SlowProvider:
    """The hashing provider with a pause per batch, so a kill can land mid-embed.
    Same kind and fingerprint, hence the same cache folder and keys as the plain provider."""

    def __init__(self, inner, delay: float):
        self.inner, self.delay, self.kind = inner, delay, inner.kind

    def fingerprint(self) -> dict:
        return self.inner.fingerprint()

    def encode(self, texts, role):
        time.sleep(self.delay)
        return self.inner.encode(texts, role)


def write_spec(folder: Path, store: Path, out: Path, data: Path = SAMPLE) -> Path:
    providers = "\n".join(
        f"  - {{name: {name}, kind: hashing, batch_size: {BATCH}, options: {json.dumps(options)}}}"
        for name, options in PROVIDERS.items()
    )
    path = Path(folder) / "crash-spec.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(SPEC.format(data=data, providers=providers, out=out, store=store), encoding="utf-8")
    return path


def run(store: Path, out: Path, data: Path = SAMPLE, batch_delay: float = 0.0,
        announce: Callable[[str], None] = lambda stage: None, spec_dir: Path | None = None) -> dict:
    """The pipeline up to the score tables; returns {"embedded": {provider/role: n}, "tables": {name: path}}."""
    import polars as pl

    from tasks.stages import index as index_mod, retrieve as retrieve_mod

    from tasks.analysis import score as score_mod
    from tasks.stages.dataset import load_saved_dataset
    from tasks.stages.embed import embed_texts
    from tasks.providers import create_provider
    from tasks.config.spec import load_spec
    from tasks.stages.prepare import chunk_dataset, prepare_dataset
    from tasks.store.files import write_parquet

    spec = load_spec(write_spec(spec_dir or Path(out) / ".spec", Path(store), Path(out), Path(data)))
    announce("load-dataset")
    dataset = prepare_dataset(spec)
    announce("chunk")
    chunks = chunk_dataset(dataset, spec)
    announce("embed")
    embedded, sets = {}, {}
    texts = {
        "document": pl.read_parquet(chunks.path, columns=["chunk_id", "text"]),
        "query": pl.read_parquet(dataset.queries_path, columns=["query_id", "text"]),
    }
    for provider in spec.providers:
        model = create_provider(provider.kind, provider.options)
        if batch_delay:
            model = SlowProvider(model, batch_delay)
        for role, frame in texts.items():
            result = embed_texts(model, provider.name, frame[frame.columns[0]].to_list(), frame["text"].to_list(),
                                 role, Path(spec.store_dir), batch_size=provider.batch_size)
            embedded[f"{provider.name}/{role}"] = result.embedded
            sets[provider.name, role] = result
    announce("index")
    built = []
    for provider in spec.providers:
        doc_set = sets[provider.name, "document"]
        ivf = spec.indexes.ivf
        for settings in (index_mod.IndexSettings("flat"), index_mod.resolve_ivf(doc_set.count, ivf.nlist, ivf.train_size, ivf.seed)):
            built.append(index_mod.build_index(doc_set, settings, Path(spec.store_dir)))
    announce("retrieve")
    runs = []
    for index in built:
        probes = [None] if index.settings.kind == "flat" else sorted({min(p, index.settings.nlist) for p in spec.indexes.ivf.nprobe})
        for nprobe in probes:
            runs.append(retrieve_mod.retrieve(index, sets[index.provider, "document"], sets[index.provider, "query"],
                                              chunks.path, spec.depth, nprobe, Path(spec.store_dir)))
    announce("score")
    saved = load_saved_dataset(dataset.path)
    run_table = pl.concat([pl.read_parquet(r.path) for r in runs])
    per_query = score_mod.score_runs(run_table, saved.qrels, saved.queries, score_mod.default_measures(spec.k))
    tables = {"summary": score_mod.summarize(per_query), "per_query": per_query, "runs": run_table}
    paths = {name: str(write_parquet(table, Path(out) / f"{name}.parquet")) for name, table in tables.items()}
    return {"embedded": embedded, "tables": paths}


def needed_keys(store: Path, out: Path, data: Path = SAMPLE) -> dict[str, set[str]]:
    """Cache keys a complete run needs, per provider cache folder name (from a finished run's sets)."""
    import polars as pl

    from tasks.stages.embed import cache_dir_for
    from tasks.providers import create_provider

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
    """(rows, distinct keys) over every shard of one provider folder."""
    import pyarrow.parquet as pq

    rows, keys = 0, set()
    for shard in sorted(Path(folder).glob("shard-*.parquet")):
        column = pq.read_table(shard, columns=["key"]).column("key").to_pylist()
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
