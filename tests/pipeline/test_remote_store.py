"""The store on an S3-compatible object store: moto's server on 127.0.0.1, started by the test."""
import json

import pytest

from retbench.support.paths import ROOT
from retbench.support.moto_s3 import moto_s3

SPEC = """
name: s3
dataset: {{path: {data}, format: jsonl, split: dev}}
chunking: {{strategy: paragraph, max_words: 120}}
providers: [{{name: lexical, kind: hashing, options: {{dim: 256}}}}]
indexes: {{ivf: {{nprobe: [2]}}}}
output_dir: {out}
store_dir: "{store}"
store_mirror: {mirror}
"""


@pytest.fixture(scope="module")
def s3_endpoint(tmp_path_factory):
    pytest.importorskip("moto")
    with moto_s3(tmp_path_factory.mktemp("moto"), "retbench-test") as endpoint:
        yield endpoint

def test_store_on_s3_is_shared_between_scratch_folders(s3_endpoint, tmp_path, prefect_harness):
    import pyarrow.fs as pafs

    from retbench.flows.benchmark import benchmark

    uri = f"s3://retbench-test/store?endpoint_override={s3_endpoint}&scheme=http&region=us-east-1"
    manifests = []
    for attempt in ("first", "second"):
        spec = tmp_path / f"{attempt}.yaml"
        spec.write_text(SPEC.format(data=ROOT / "data" / "sample", out=tmp_path / attempt, store=uri, mirror=tmp_path / f"mirror-{attempt}"))
        benchmark(str(spec))
        manifests.append(json.loads((tmp_path / attempt / "manifest.json").read_text()))
    first, second = manifests
    assert first["texts"]["embedded"] > 0
    # A fresh scratch folder served everything from the object store.
    assert second["texts"] == {"embedded": 0, "from_cache": first["texts"]["embedded"]}
    assert not any(i["built"] for i in second["indexes"])
    fs, root = pafs.FileSystem.from_uri(uri)
    remote = [i.path[len(root) + 1:] for i in fs.get_file_info(pafs.FileSelector(root, recursive=True))]
    assert any(name.startswith("embeddings/hashing-") for name in remote)
    assert any(name.endswith("flat.faiss") for name in remote)
    assert any(name.startswith("history/summary/date=") for name in remote)
