"""The store on S3 without a mirror: moto's server on 127.0.0.1 behind a counting proxy, so the
test sees every request a run sends and which objects it lists, fetches and writes."""
import os
import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from retbench.support.paths import ROOT
from retbench.support.counting_proxy import CountingProxy
from retbench.support.moto_s3 import moto_s3

BUCKET = "retbench-objects"

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


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """(proxy, endpoint of the proxy): moto on a free port, the proxy in front of it."""
    pytest.importorskip("moto")
    with moto_s3(tmp_path_factory.mktemp("moto"), BUCKET) as endpoint, CountingProxy(endpoint) as proxy:
        yield proxy

def _uri(proxy, prefix: str) -> str:
    return f"s3://{BUCKET}/{prefix}?endpoint_override={proxy.address}&scheme=http&region=us-east-1"


def _provider(i: int) -> str:
    return f"{{name: h{i}, kind: hashing, options: {{dim: {64 + 16 * i}}}}}"


def _run(tmp_path, name, store, providers, stage="score"):
    from retbench.tasks.config.spec import load_spec
    from retbench.tasks.pipeline import Selection, run_pipeline

    path = tmp_path / f"{name}.yaml"
    path.write_text(SPEC.format(data=ROOT / "data" / "sample", providers=", ".join(providers),
                                out=tmp_path / f"out-{name}", store=store, scratch=tmp_path / f"scratch-{name}"))
    return run_pipeline(load_spec(path), Selection(stage=stage))


def _cache_folder(i: int) -> str:
    from retbench.tasks.providers import create_provider
    from retbench.tasks.stages.embed import cache_dir_for

    return cache_dir_for("", create_provider("hashing", {"dim": 64 + 16 * i}, None))[0].as_posix()


def _key(exchange, prefix: str) -> str:
    """The object key of a request, relative to the store's prefix."""
    return exchange.path.removeprefix(f"/{BUCKET}/{prefix}/")


def _listed(exchanges) -> list[str]:
    return [e.query["prefix"][0] for e in exchanges if e.method == "GET" and "list-type" in e.query]


def _objects(exchanges, method: str, prefix: str) -> set[str]:
    return {_key(e, prefix) for e in exchanges if e.method == method and "list-type" not in e.query
            and e.path.startswith(f"/{BUCKET}/{prefix}/")}


def _methods(exchanges) -> dict[str, int]:
    """Requests by kind (a listing is a GET with list-type) and answer."""
    from collections import Counter

    return dict(Counter(("LIST" if "list-type" in e.query else e.method, e.status) for e in exchanges))


def _stored_things(keys: set[str]) -> list[str]:
    """Keys apart from the history (named by run), shards by kind (their names carry a time), figures
    by count (named by their data, which holds the search latency each store measured itself)."""
    return sorted(re.sub(r"^figures/[0-9a-f]+", "figures/figure", re.sub(r"shard-\d+-[0-9a-f]+", "shard", k))
                  for k in keys if not k.startswith("history/"))


def test_cached_rerun_touches_only_the_objects_it_needs(s3, tmp_path):
    providers = [_provider(i) for i in range(10)]
    # A store holding 10 providers' embeddings, then provider h0's whole run.
    _run(tmp_path, "fill", _uri(s3, "ten"), providers, stage="embed")
    _run(tmp_path, "first", _uri(s3, "ten"), providers[:1])
    s3.take()
    rerun = _run(tmp_path, "rerun", _uri(s3, "ten"), providers[:1])  # a fresh scratch folder: a new worker
    ten = s3.take()

    assert rerun.manifest["texts"]["embedded"] == 0 and not any(i["built"] for i in rerun.manifest["indexes"])
    fetched, written = _objects(ten, "GET", "ten"), _objects(ten, "PUT", "ten")
    mine, others = _cache_folder(0), [_cache_folder(i) for i in range(1, 10)]
    assert any(k.startswith(f"{mine}/shard-") for k in fetched)
    touched = fetched | written | {p.removeprefix("ten/") for p in _listed(ten)}
    assert not [k for k in touched if any(k.startswith(o) for o in others)]
    # Listings are of single folders (this provider's cache, the history tables), never the
    # store, nor all providers' caches.
    # (The cache folder is listed each time its lock is taken: another process may have written.)
    assert set(_listed(ten)) == {f"ten/{mine}/", "ten/history/summary/", "ten/history/per_query/"}
    # The cached rerun writes only its own history record.
    # A cached rerun writes its history record, and the report's figures that changed with it
    # (the trend gains a run); nothing of any provider.
    assert written and all(k.startswith(("history/", "figures/")) for k in written)

    # The same rerun against a store holding this provider alone fetches the same objects.
    _run(tmp_path, "one-first", _uri(s3, "one"), providers[:1])
    s3.take()
    _run(tmp_path, "one-rerun", _uri(s3, "one"), providers[:1])
    one = s3.take()
    assert _stored_things(_objects(one, "GET", "one")) == _stored_things(fetched)
    assert _methods(one) == _methods(ten)  # request for request the same cost

    # What each object costs. pyarrow 26 opens an object by path only (open_input_stream and
    # open_input_file refuse a FileInfo; only dataset scans take one), so a GET follows a HEAD
    # of the same key even where a listing gave the size: 2 requests per object fetched, each
    # fetched once. An absent object is one HEAD answering 404 (no listing behind it).
    gets = [e for e in ten if e.method == "GET" and "list-type" not in e.query]
    heads = [e for e in ten if e.method == "HEAD" and e.path != f"/{BUCKET}"]  # the bucket: check_reachable
    assert [e.path for e in heads if e.status == 200] == [e.path for e in gets]
    assert len({e.path for e in gets}) == len(gets) and all(e.status == 206 for e in gets)
    absent = [e for e in heads if e.status == 404]
    assert all(e.path.endswith((".json", ".sha256")) for e in absent)  # build metadata, a figure not made yet
    assert len(ten) == 1 + 2 * len(gets) + len(absent) + len(_listed(ten)) + len(_objects(ten, "PUT", "ten"))
    print(f"\ncached rerun, store with 10 providers: {len(ten)} requests, {sum(e.received for e in ten)} bytes "
          f"down, {sum(e.sent for e in ten)} up; with 1 provider: {len(one)} requests, "
          f"{sum(e.received for e in one)} bytes down, {sum(e.sent for e in one)} up")


def test_runs_on_s3_give_the_results_of_a_local_store(s3, tmp_path, capsys):
    providers = [_provider(1), _provider(2)]
    tables = {}
    for where, store in (("local", tmp_path / "store"), ("s3", _uri(s3, "same"))):
        for attempt in ("first", "rerun"):
            result = _run(tmp_path, f"{where}-{attempt}", store, providers)
            per_query = pl.read_parquet(f"{result.output_dir}/per_query.parquet")
            tables[where, attempt] = per_query.sort(per_query.columns)
            assert (result.manifest["texts"]["embedded"] == 0) == (attempt == "rerun")
    reference = tables["local", "first"]
    assert reference.height > 0
    for table in tables.values():
        assert table.equals(reference)

    # `retbench history` on the bucket, from a scratch folder of its own: both runs, and the
    # only objects it reads are the history summaries.
    from retbench.flows.cli import main

    s3.take()
    capsys.readouterr()
    spec = tmp_path / "s3-rerun.yaml"
    spec.write_text(spec.read_text().replace("scratch-s3-rerun", "scratch-history"))
    assert main(["history", str(spec)]) == 0
    assert len(re.findall(r"^\d{4}-\d\d-\d\d \d\d:\d\d ", capsys.readouterr().out, re.M)) == 2  # a row per run
    fetched = _objects(s3.take(), "GET", "same")
    assert len(fetched) == 2 and all(k.startswith("history/summary/") for k in fetched)


def _attached(proxy, tmp_path, prefix):
    from retbench.tasks.store.remote import attach

    return attach(_uri(proxy, prefix), tmp_path / f"scratch-{prefix}")


def test_a_damaged_object_is_quarantined_deleted_and_rebuilt(s3, tmp_path):
    from retbench.tasks.store.build import build_once

    def build(tmp):
        calls.append(tmp)
        with open(tmp, "wb") as handle:
            handle.write(b"the artifact")
        return {"made": "here"}

    calls = []
    first = _attached(s3, tmp_path / "a", "damage")
    build_once(first.scratch, first.scratch / "things" / "one.bin", build)
    first.fs.open_output_stream(f"{first.root}/things/one.bin").close()  # the object truncated in the bucket

    second = _attached(s3, tmp_path / "b", "damage")  # a fresh scratch folder: everything from the bucket
    s3.take()
    made = build_once(second.scratch, second.scratch / "things" / "one.bin", build)
    assert made.computed and len(calls) == 2
    with second.fs.open_input_stream(f"{second.root}/things/one.bin") as stored:
        assert stored.read() == b"the artifact"
    assert [p.name for p in (second.scratch / "quarantine" / "things").iterdir()][0].startswith("one.bin.")
    # The damaged pair deleted from the bucket, the rebuilt one uploaded in order (pyarrow also
    # PUTs a zero-byte folder marker after each delete, left out here).
    methods = [(e.method, e.path.rsplit("/", 1)[1]) for e in s3.take()
               if e.method in ("PUT", "DELETE") and not e.path.endswith("/")]
    assert methods == [("DELETE", "one.bin.sha256"), ("DELETE", "one.bin"), ("PUT", "one.bin"),
                       ("PUT", "one.bin.sha256"), ("PUT", "one.bin.json"), ("PUT", "one.bin.json.sha256")]

    third = _attached(s3, tmp_path / "c", "damage")
    again = build_once(third.scratch, third.scratch / "things" / "one.bin", build)
    assert not again.computed and again.metadata == {"made": "here"} and len(calls) == 2


def test_a_failed_upload_stores_nothing(s3, tmp_path):
    from retbench.tasks.store.files import write_text
    from retbench.tasks.store.remote import attach

    scratch = attach(_uri(s3, "x").replace(BUCKET, "no-such-bucket"), tmp_path / "scratch").scratch
    with pytest.raises(OSError, match=r"cannot write a/b.txt to the store s3://no-such-bucket/x"):
        write_text(scratch / "a" / "b.txt", "text")
    assert not (scratch / "a" / "b.txt").exists()


def test_an_unknown_bucket_is_refused_before_any_work(s3, tmp_path):
    from retbench.tasks.config.spec import load_spec
    from retbench.tasks.stages.prepare import check_inputs
    from retbench.tasks.store.integrity import StoreError

    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.format(data=ROOT / "data" / "sample", providers=_provider(0), out=tmp_path / "out",
                                store=_uri(s3, "x").replace(BUCKET, "no-such-bucket"), scratch=tmp_path / "scratch"))
    with pytest.raises(StoreError, match=r"store_dir s3://no-such-bucket/x: bucket 'no-such-bucket' does not exist"):
        check_inputs(load_spec(path))
    check_inputs(load_spec(path).model_copy(update={"store_dir": _uri(s3, "x")}))


def test_a_worker_without_the_scratch_folder_writes_through_from_the_environment(s3, tmp_path):
    """A Dask worker on another machine: no scratch folder, no marker, only the environment."""
    import json

    scratch = tmp_path / "elsewhere" / "scratch"
    env = {**os.environ, "RETBENCH_OBJECT_STORES": json.dumps({str(scratch): _uri(s3, "worker")})}
    code = ("import sys; from retbench.tasks.store.build import build_once; "
            "build_once(sys.argv[1], sys.argv[1] + '/runs/r.parquet', lambda tmp: open(tmp, 'w').write('rows') and None)")
    subprocess.run([sys.executable, "-c", code, str(scratch)], cwd=ROOT, env=env, check=True, timeout=120)
    fresh = _attached(s3, tmp_path, "worker")
    assert fresh.listing(fresh.scratch / "runs") == {"r.parquet": 4, "r.parquet.sha256": 76}


def test_keys_in_the_store_uri_are_refused_and_never_shown(tmp_path):
    from retbench.tasks.store.remote import attach, check_reachable, display_uri

    uri = "s3://AKIDEXAMPLE:wJalrXUtnFEMI@bucket/store?endpoint_override=127.0.0.1:1&scheme=http"
    assert display_uri(uri) == "s3://bucket/store"
    for call in (lambda: check_reachable(uri), lambda: attach(uri, tmp_path / "scratch"),
                 lambda: check_reachable("s3://bucket/store?secret_key=wJalrXUtnFEMI")):
        with pytest.raises(ValueError, match="credentials in the URI are not accepted") as refused:
            call()
        assert "wJalrXUtnFEMI" not in str(refused.value)
    assert not (tmp_path / "scratch").exists()


def test_a_shard_merged_away_elsewhere_leaves_other_scratch_folders(s3, tmp_path):
    import pyarrow as pa

    from retbench.tasks.store import shards

    table = pa.table({"key": ["a", "b"]})
    one, two = _attached(s3, tmp_path / "one", "merged"), _attached(s3, tmp_path / "two", "merged")
    folder = "embeddings/kind-0123"
    with shards.writing(one.scratch / folder):
        merged_away = shards.write_shard(one.scratch / folder, table)
    with shards.folder_lock(two.scratch / folder, shared=True):
        assert [p.name for p in shards.shard_paths(two.scratch / folder)] == [merged_away.name]
    with shards.writing(one.scratch / folder):
        kept = shards.write_shard(one.scratch / folder, table)
        shards.remove_shard(merged_away)
    # In the second folder: the removed pair, aged past the grace period, and a pair a writer in
    # another process has just renamed into place but not uploaded yet.
    old = two.scratch / folder / merged_away.name
    os.utime(f"{old}.sha256", (1, 1))
    in_flight = two.scratch / folder / "shard-00000000000000000001-abcdef12.parquet"
    in_flight.write_bytes(old.read_bytes())
    in_flight.with_name(in_flight.name + ".sha256").write_text(f"{'0' * 64}  {in_flight.name}\n")
    with shards.folder_lock(two.scratch / folder, shared=True):
        assert [p.name for p in shards.shard_paths(two.scratch / folder)] == [in_flight.name, kept.name]


WORKER = """
import dataclasses, json, sys
from retbench.tasks.providers import create_provider
from retbench.tasks.stages.embed_shards import EmbedPlan, embed_part
fields = json.loads(sys.argv[1])
plan = EmbedPlan(**{**fields, "parts": tuple(fields["parts"])})
provider = create_provider("hashing", {"dim": 32})
print(json.dumps([dataclasses.asdict(embed_part(provider, plan, i, 3, 16)) for i in range(3)]))
"""


def test_sharded_embedding_with_a_worker_on_another_scratch_folder(s3, tmp_path):
    """plan -> parts on a worker of another machine -> finish, on an s3:// store. Dask hands the
    worker the plan's paths; on another machine the folder at that path is its own, empty at
    first, found through RETBENCH_OBJECT_STORES alone. Here the planner's folder is moved aside
    while the worker (a subprocess) runs, so the worker sees only its own folder at that path."""
    import dataclasses
    import json
    import math

    import numpy as np
    import pyarrow.parquet as pq

    from retbench.tasks.providers import create_provider
    from retbench.tasks.stages.embed import embed_texts, read_vectors
    from retbench.tasks.stages.embed_shards import PartResult, finish_embedding, plan_embedding
    from retbench.tasks.store.remote import ENVIRONMENT
    from tests.pipeline.test_sharded_embed import IDS, TEXTS

    provider = create_provider("hashing", {"dim": 32})
    single = embed_texts(provider, "h", IDS, TEXTS, "document", tmp_path / "local", batch_size=16)
    scratch = _attached(s3, tmp_path, "sharded").scratch
    plan = plan_embedding(provider, "h", IDS, TEXTS, "document", scratch, 3, 16)
    assert len(plan.parts) == 3 and plan.missing == 199
    planner = scratch.rename(tmp_path / "planner")
    env = {**os.environ, ENVIRONMENT: json.dumps({str(scratch): _uri(s3, "sharded")})}
    s3.take()
    done = subprocess.run([sys.executable, "-c", WORKER, json.dumps(dataclasses.asdict(plan))], cwd=ROOT, env=env,
                          check=True, timeout=300, capture_output=True, text=True)
    worker = s3.take()
    parts = [PartResult(**r) for r in json.loads(done.stdout.splitlines()[-1])]
    assert sum(p.embedded for p in parts) == 199
    # The worker fetched each pending part (and nothing of it stays in the bucket once done);
    # its locks stayed in its own folder. Each journal batch was uploaded (a retry on another
    # machine picks them up) and deleted with the part.
    pending = {Path(p).relative_to(scratch).as_posix() for p in plan.parts}
    assert pending <= _objects(worker, "GET", "sharded") and pending <= _objects(worker, "DELETE", "sharded")
    put = _objects(worker, "PUT", "sharded")
    assert not [k for k in put if k.endswith(".lock")]
    batches = {k for k in put if k.endswith(".arrows")}
    # One object a batch of 16: each of the 3 parts ends in a short batch.
    assert math.ceil(199 / 16) <= len(batches) <= math.ceil(199 / 16) + 2 and all(".journal/" in k for k in batches)
    assert batches <= _objects(worker, "DELETE", "sharded")

    # Back on the planner's machine: finish, then read the cache from a third, empty folder.
    scratch.rename(tmp_path / "worker")
    planner.rename(scratch)
    result = finish_embedding(plan, parts)
    assert (result.embedded, result.from_cache, result.repeated) == (single.embedded, single.from_cache, single.repeated)
    reader = _attached(s3, tmp_path / "reader", "sharded")
    cache = Path(plan.cache_dir).relative_to(scratch)
    stored = reader.listing(reader.scratch / cache, recursive=True)
    assert not [name for name in stored if name.startswith("pending/")]
    shards = sorted(name for name in stored if name.startswith("shard-") and name.endswith(".parquet"))
    assert len(shards) == 3  # one per part
    keys = []
    for name in shards:
        assert reader.fetch(reader.scratch / cache / name)
        keys += pq.read_table(reader.scratch / cache / name, columns=["key"]).column("key").to_pylist()
    assert len(keys) == len(set(keys)) == 199  # every vector once
    again = embed_texts(provider, "h", IDS, TEXTS, "document", reader.scratch, batch_size=16)
    assert again.embedded == 0
    ids_a, a = read_vectors(single)[:2]
    ids_b, b = read_vectors(again)[:2]
    assert ids_a == ids_b == IDS and np.array_equal(a, b)

    # The planner's folder still holds its copies of the parts the worker finished: a forced
    # re-embed plans new parts rather than handing out those (no longer in the bucket).
    assert len(list((Path(plan.cache_dir) / "pending").glob("*.parquet"))) == 3
    forced = plan_embedding(provider, "h", IDS, TEXTS, "document", scratch, 3, 16, force=True)
    assert len(forced.parts) == 3 and not set(forced.parts) & set(plan.parts)
    assert sorted(p.name for p in (Path(plan.cache_dir) / "pending").glob("*.parquet")) == \
        sorted(Path(p).name for p in forced.parts)
