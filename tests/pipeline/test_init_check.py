"""`retbench init` and `retbench check` on the command line: init's spec for each kind of folder
passes check; check refuses bad data in one line without Prefect or a model, and its counts of
what is cached agree with what a run then does."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from retbench.flows.cli import main
from retbench.support.paths import ROOT, SHARED_DATA

FLAT_ONLY = "indexes: {ivf: null}\n"


def tiny_collection(folder: Path, grade: int = 1) -> Path:
    folder.mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(
        json.dumps({"id": f"d{i}", "text": f"document {i} about topic {i % 3}"}) + "\n" for i in range(6)))
    (folder / "queries.jsonl").write_text("".join(
        json.dumps({"id": f"q{i}", "text": f"topic {i}", "split": "dev" if i else "test"}) + "\n" for i in range(3)))
    (folder / "qrels.jsonl").write_text("".join(
        json.dumps({"query_id": f"q{i}", "doc_id": f"d{i}", "grade": grade if i == 1 else 1}) + "\n" for i in range(3)))
    return folder


def beir_collection(folder: Path) -> Path:
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": f"d{i}", "title": f"title {i}", "text": f"text of document {i}"}) + "\n" for i in range(9)))
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": f"document {i}"}) + "\n"
                                                  for i in range(9)))
    for split, ids in (("train", range(0, 5)), ("dev", range(5, 7)), ("test", range(7, 9))):
        (folder / "qrels" / f"{split}.tsv").write_text(
            "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in ids))
    return folder


def retbench(*args, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PREFECT_HOME": str(cwd / "prefect-home")}
    env.pop("PREFECT_API_URL", None)
    return subprocess.run([sys.executable, "-m", "retbench.flows.cli", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


# What `check` leaves loaded: run in a fresh interpreter, the way the command runs.
PROBE = """import json, sys
from retbench.flows.cli import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "loaded": sorted(m for m in ("prefect", "torch", "sentence_transformers", "transformers")
                                                 if m in sys.modules)}))
"""


def probe(args: list, cwd: Path) -> tuple[dict, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", PROBE, *map(str, args)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.stdout.strip(), done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def write_spec(tmp_path: Path, providers: str, extra: str = FLAT_ONLY) -> Path:
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"name: tiny\ndataset: {{path: data, format: jsonl, split: all}}\nchunking: {{strategy: none}}\n"
                    f"providers: {providers}\n{extra}k: [5, 10]\ndepth: 20\noutput_dir: out\nstore_dir: store\n")
    return spec


def test_check_refuses_a_bad_grade_in_one_line_without_prefect_or_torch(tmp_path):
    tiny_collection(tmp_path / "data", grade=9)
    spec = write_spec(tmp_path, "[{name: minilm, kind: sentence-transformers}, {name: e5, kind: e5-multilingual}]")
    result, stderr = probe(["check", spec], tmp_path)
    assert result == {"code": 2, "loaded": []}
    assert stderr == f"retbench: {tmp_path / 'data' / 'qrels.jsonl'}:2: grade 9 for query 'q1' is outside 0..3\n"


def test_check_of_a_valid_spec_counts_model_providers_without_loading_them(tmp_path):
    tiny_collection(tmp_path / "data")
    spec = write_spec(tmp_path, "[{name: minilm, kind: sentence-transformers}, {name: e5, kind: e5-multilingual}]")
    result, _ = probe(["check", spec], tmp_path)
    assert result == {"code": 0, "loaded": []}
    done = retbench("check", spec, cwd=tmp_path)
    paragraph = " ".join(done.stdout.split())
    assert done.returncode == 0 and done.stderr == ""
    # 6 documents (strategy none: one chunk each) + 3 queries, none cached, all distinct.
    assert ("Embedding: minilm 9 texts to embed (none in the cache yet), e5 9 texts to embed (none in the cache yet)."
            in paragraph) and "Indexes to build: 2 of 2 (flat)" in paragraph


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_check_leaves_the_disk_as_it_found_it(tmp_path):
    """No output folder, no store folder, no .prefect: a check is a look, not a first run."""
    tiny_collection(tmp_path / "data")
    spec = write_spec(tmp_path, "[{name: h, kind: hashing}]")
    before = _listing(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PREFECT_HOME", None)  # the default, .prefect in the current folder
    for extra in ([], ["--estimate"]):  # the estimate embeds texts, and caches none of them
        done = subprocess.run([sys.executable, "-m", "retbench.flows.cli", "check", str(spec), *extra], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        assert _listing(tmp_path) == before and "out" not in before and "store" not in before
    said = " ".join(done.stdout.split())
    # hashing's 1024 dimensions: 6 documents + 3 queries to embed, a flat index of 6 float32 vectors.
    assert "h: <1 s to embed 9 texts [measured now]" in said and "1024-dimensional" in said, said
    assert "indexes flat 24.6 kB" in said
    # Output and store folders given on the command line, deep under folders that do not exist
    # (issue 35: `--output-dir /nonexistent/deep/out`): probed in their nearest existing parent, not made.
    deep_out, deep_store = tmp_path / "nonexistent" / "deep" / "out", tmp_path / "missing" / "deep" / "store"
    for extra in ([], ["--estimate"]):
        done = subprocess.run([sys.executable, "-m", "retbench.flows.cli", "check", str(spec), "--output-dir",
                               str(deep_out), "--store-dir", str(deep_store), *extra], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        assert f"into {deep_out} (store {deep_store})" in " ".join(done.stdout.split())
        assert _listing(tmp_path) == before, _listing(tmp_path)


def test_check_on_a_read_only_parent_still_refuses_in_one_line(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only folders")
    tiny_collection(tmp_path / "data")
    spec = write_spec(tmp_path, "[{name: h, kind: hashing}]")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        done = retbench("check", spec, "--store-dir", locked / "store", cwd=tmp_path)
    finally:
        locked.chmod(0o700)
    assert done.returncode == 2 and done.stderr.startswith(f"retbench: store directory {locked / 'store'} is not writable")


def test_duplicate_texts_are_counted_as_such_not_as_cached(tmp_path):
    data = tiny_collection(tmp_path / "data")
    lines = (data / "corpus.jsonl").read_text().splitlines()
    lines[5] = json.dumps({"id": "d5", "text": json.loads(lines[4])["text"]})  # d5 says what d4 says
    (data / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    done = retbench("check", write_spec(tmp_path, "[{name: h, kind: hashing}]"), cwd=tmp_path)
    paragraph = " ".join(done.stdout.split())
    assert "Embedding: h 8 texts to embed (1 duplicate of other texts; none in the cache yet)." in paragraph


def test_a_missing_secret_is_one_line(tmp_path):
    tiny_collection(tmp_path / "data")
    provider = "[{name: api, kind: openai-compatible, options: {base_url: 'http://127.0.0.1:9/v1', model: m, api_key_env: RETBENCH_NO_SUCH_KEY}}]"
    done = retbench("check", write_spec(tmp_path, provider), cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "environment variable RETBENCH_NO_SUCH_KEY is not set" in done.stderr


def test_run_refuses_a_bad_grade_before_prefect_starts(tmp_path):
    tiny_collection(tmp_path / "data", grade=9)
    done = retbench("run", write_spec(tmp_path, "[{name: h, kind: hashing}]"), cwd=tmp_path)
    assert (done.returncode, done.stderr) == (
        2, f"retbench: {tmp_path / 'data' / 'qrels.jsonl'}:2: grade 9 for query 'q1' is outside 0..3\n")
    assert not (tmp_path / "out" / "manifest.json").exists()
    assert not list((tmp_path / "prefect-home").rglob("*.db"))  # Prefect's database: the API server never started


def test_check_counts_agree_with_what_a_run_embeds_and_builds(tmp_path, capsys):
    from retbench.tasks.config.spec import load_spec
    from retbench.tasks.pipeline import run_pipeline

    tiny_collection(tmp_path / "data")
    spec = write_spec(tmp_path, "[{name: h, kind: hashing}]", "indexes: {ivf: {nlist: 2, nprobe: [1]}}\n")
    assert main(["check", str(spec)]) == 0
    before = " ".join(capsys.readouterr().out.split())
    assert "h 9 texts to embed (none in the cache yet)" in before and "Indexes to build: 2 of 2 (flat, ivf)" in before
    result = run_pipeline(load_spec(spec))
    assert result.manifest["texts"]["embedded"] == 9
    assert main(["check", str(spec)]) == 0
    after = " ".join(capsys.readouterr().out.split())
    assert "already in the store" in after and "h 0 texts to embed (9 already in the cache)" in after
    assert "Indexes to build: 0 of 2 (none)" in after


def _init_then_check(folder: Path, tmp_path: Path, capsys) -> tuple[str, str, Path]:
    spec = tmp_path / "spec" / "starter.yaml"
    assert main(["init", str(folder), "-o", str(spec)]) == 0
    found = capsys.readouterr().out
    assert main(["check", str(spec), "--store-dir", str(tmp_path / "store")]) == 0
    return found, " ".join(capsys.readouterr().out.split()), spec


def test_init_on_a_jsonl_folder_writes_a_spec_check_accepts(tmp_path, capsys):
    found, checked, spec = _init_then_check(tiny_collection(tmp_path / "mine"), tmp_path, capsys)
    assert "jsonl (corpus.jsonl, queries.jsonl, qrels.jsonl)" in found
    assert "6 documents; judged queries and judgments per split: dev 2 queries, 2 judgments; test 1 queries, 1 judgments" in found
    assert "split all" in found and "dataset: {path" not in spec.read_text()
    assert "Dataset mine (jsonl, split all): 6 documents, 3 judged queries (dev 2, test 1)" in checked


def test_init_on_a_beir_folder_with_train_dev_test_scores_all_splits(tmp_path, capsys):
    found, checked, spec = _init_then_check(beir_collection(tmp_path / "scifact"), tmp_path, capsys)
    assert "train 5 queries, 5 judgments; dev 2 queries, 2 judgments; test 2 queries, 2 judgments" in found
    # The 5 train queries are scored too (as `train`), said in the output and in the spec's comment.
    why = "dev and train judged beside test: every query is scored and each split reported apart"
    assert f"(split all: {why}" in found
    assert "split: all" in spec.read_text() and f"# {why}" in spec.read_text()
    assert "Dataset scifact (beir, split all): 9 documents, 9 judged queries (dev 2, test 2, train 5), 9 judgments" in checked


@pytest.mark.skipif(not (SHARED_DATA / "cranfield").is_dir(), reason=f"{SHARED_DATA / 'cranfield'} not present")
def test_init_on_cranfield_names_its_trec_qrels(tmp_path, capsys):
    found, checked, spec = _init_then_check(SHARED_DATA / "cranfield", tmp_path, capsys)
    assert "1400 documents; judged queries and judgments per split: test 225 queries, 1837 judgments" in found
    assert "TREC qrels cran.qrels.trec-format" in found
    assert f"# qrels: {SHARED_DATA / 'cranfield' / 'cran.qrels.trec-format'}" in spec.read_text()
    assert "Dataset cranfield (cranfield, split test): 1400 documents, 225 judged queries" in checked


@pytest.mark.skipif(not (SHARED_DATA / "glasgow").is_dir(), reason=f"{SHARED_DATA / 'glasgow'} not present")
def test_init_on_a_glasgow_collection(tmp_path, capsys):
    found, checked, spec = _init_then_check(SHARED_DATA / "glasgow" / "cisi", tmp_path, capsys)
    assert "collection=cisi" in found and "76 queries" in found and "36 queries without judgments" in found
    assert "Dataset cisi (glasgow, split test): 1460 documents, 76 judged queries" in checked


def test_init_on_a_folder_it_cannot_read_is_one_line(tmp_path):
    (tmp_path / "stuff").mkdir()
    (tmp_path / "stuff" / "notes.txt").write_text("hello")
    done = retbench("init", tmp_path / "stuff", cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == "" and done.stderr.count("\n") == 1
    assert done.stderr.startswith(f"retbench: {tmp_path / 'stuff'}: no dataset format recognised (looked for jsonl:")
    assert not list(tmp_path.glob("*.yaml"))


def test_init_where_it_cannot_write_is_one_line(tmp_path):
    """Tests run as root, whom chmod does not stop: /sys refuses root's new files (EACCES), as a
    read-only folder refuses a user's; and a file where a folder should be refuses everyone."""
    folder = tiny_collection(tmp_path / "mine")
    done = retbench("init", folder, cwd=Path("/sys"))  # the default: <name>.yaml in the current folder
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == ("retbench: /sys/mine.yaml: cannot write the starter spec (permission denied); run init "
                           "from a folder you can write, or pass -o with a path in one\n")
    (tmp_path / "a-file").write_text("x")
    done = retbench("init", folder, "-o", tmp_path / "a-file" / "specs" / "mine.yaml", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"retbench: {tmp_path / 'a-file' / 'specs' / 'mine.yaml'}: cannot write the starter "
                                  f"spec ({tmp_path / 'a-file'} is a file, not a folder)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "mine"]  # no temporary file left


def test_init_does_not_overwrite_a_spec(tmp_path, capsys, monkeypatch):
    folder = tiny_collection(tmp_path / "mine")
    (tmp_path / "mine.yaml").write_text("mine\n")
    monkeypatch.chdir(tmp_path)
    assert main(["init", str(folder)]) == 2
    assert "mine.yaml: exists; pass --force" in capsys.readouterr().err
    assert (tmp_path / "mine.yaml").read_text() == "mine\n"
    assert main(["init", str(folder), "--force"]) == 0 and "name: mine" in (tmp_path / "mine.yaml").read_text()


@pytest.mark.parametrize("break_it, expected", [
    (lambda t: (t / "spec.yaml").write_text((t / "spec.yaml").read_text() + "bogus: 1\n"), r"bogus: unknown key"),
    (lambda t: (t / "data" / "queries.jsonl").unlink(), r"queries\.jsonl: missing; expected queries\.jsonl with id, text"),
    (lambda t: (t / "data" / "qrels.jsonl").write_text('{"query_id": "q0", "doc_id": "d7", "grade": 1}\n'),
     r"qrels\.jsonl:1: doc id 'd7' is not in .*corpus\.jsonl"),
])
def test_check_says_each_kind_of_error_in_one_line(tmp_path, capsys, break_it, expected):
    import re

    tiny_collection(tmp_path / "data")
    spec = write_spec(tmp_path, "[{name: h, kind: hashing}]")
    break_it(tmp_path)
    assert main(["check", str(spec)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and captured.err.startswith("retbench: ")
    assert re.search(expected, captured.err), captured.err
