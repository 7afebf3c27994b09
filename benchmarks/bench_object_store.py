"""What a cached rerun of one provider costs on an s3:// store holding 1 or N providers: requests and
bytes on the wire, counted by a proxy in front of moto's server on 127.0.0.1.

    python benchmarks/bench_object_store.py [--providers 10] [--work /tmp/retbench-objects]

For each store (one provider; `--providers` providers): the store is filled with the providers'
embeddings (the sample collection, hashing providers of different dimensions), provider h0 runs
once in full (its embeddings already there: the other stages' writes), then h0 runs again from a fresh scratch folder (a new machine or worker: the cold
rerun) and once more from that same scratch folder (the nightly rerun on one machine: the warm
rerun). Printed side by side: requests by method, bytes down and up, and the bytes of the whole
store, which the whole-store mirror this replaced downloaded on a new machine.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from retbench.support.counting_proxy import CountingProxy  # noqa: E402
from retbench.support.moto_s3 import moto_s3  # noqa: E402

BUCKET = "retbench-bench"
SPEC = """
name: objects
dataset: {{path: {data}, format: jsonl, split: dev}}
chunking: {{strategy: paragraph, max_words: 120}}
providers: [{providers}]
indexes: {{ivf: {{nprobe: [2]}}}}
output_dir: {out}
store_dir: "{store}"
store_mirror: {scratch}
"""


def provider(i: int) -> str:
    return f"{{name: h{i}, kind: hashing, options: {{dim: {64 + 16 * i}}}}}"


def run(work: Path, name: str, store: str, providers: list[str], scratch: str, stage: str = "score"):
    from retbench.tasks.config.spec import load_spec
    from retbench.tasks.pipeline import Selection, run_pipeline

    path = work / f"{name}.yaml"
    path.write_text(SPEC.format(data=ROOT / "data" / "sample", providers=", ".join(providers), out=work / f"out-{name}",
                                store=store, scratch=work / scratch))
    return run_pipeline(load_spec(path), Selection(stage=stage))


def store_bytes(uri: str) -> tuple[int, int]:
    import pyarrow.fs as pafs

    fs, root = pafs.FileSystem.from_uri(uri)
    files = [i for i in fs.get_file_info(pafs.FileSelector(root, recursive=True)) if i.type == pafs.FileType.File]
    return len(files), sum(i.size for i in files)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--providers", type=int, default=10)
    parser.add_argument("--work", type=Path, default=Path("/tmp/retbench-objects"))
    args = parser.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    os.environ["RETBENCH_CACHE"] = str(args.work / "cache")
    rows = []
    with moto_s3(args.work, BUCKET) as endpoint:
        with CountingProxy(endpoint) as proxy:
            for count in (1, args.providers):
                store = f"s3://{BUCKET}/p{count}?endpoint_override={proxy.address}&scheme=http&region=us-east-1"
                providers = [provider(i) for i in range(count)]
                run(args.work, f"fill{count}", store, providers, f"scratch-fill{count}", stage="embed")
                proxy.take()
                run(args.work, f"first{count}", store, providers[:1], f"scratch-first{count}")
                rows.append((count, "first", proxy.take()))
                for kind in ("cold", "warm"):
                    result = run(args.work, f"{kind}{count}", store, providers[:1], f"scratch-rerun{count}")
                    seen = proxy.take()
                    assert result.manifest["texts"]["embedded"] == 0
                    rows.append((count, kind, seen))
                objects, total = store_bytes(store)
                proxy.take()
                rows.append((count, "store", (objects, total)))

    print(f"runs of provider h0 (sample collection), store holding 1 vs {args.providers} providers; "
          "first: its first full run, cold: cached rerun from a fresh scratch folder, warm: from the same one")
    print(f"{'store':>10} {'run':>6} {'requests':>9} {'GET':>5} {'HEAD':>5} {'LIST':>5} {'PUT':>5} {'other':>5} "
          f"{'bytes down':>11} {'bytes up':>9}")
    totals = {}
    for count, kind, seen in rows:
        if kind == "store":
            totals[count] = seen
            continue
        methods = Counter("LIST" if e.method == "GET" and "list-type" in e.query else e.method for e in seen)
        other = len(seen) - sum(methods[m] for m in ("GET", "HEAD", "LIST", "PUT"))
        print(f"{count:>4} prov. {kind:>6} {len(seen):>9} {methods['GET']:>5} {methods['HEAD']:>5} {methods['LIST']:>5} "
              f"{methods['PUT']:>5} {other:>5} {sum(e.received for e in seen):>11,} {sum(e.sent for e in seen):>9,}")
    for count, (objects, total) in totals.items():
        cold = next(sum(e.received for e in s) for c, k, s in rows if c == count and k == "cold")
        print(f"store of {count} provider(s): {objects} objects, {total:,} bytes (what the whole-store mirror pulled "
              f"on a new machine); the cold rerun downloaded {cold / total:.1%} of it")


if __name__ == "__main__":
    main()
