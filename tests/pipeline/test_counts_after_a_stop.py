"""After a stop, the counts tell the truth: `retbench check` and the rerun's plan line count the
batches the stopped run kept as kept (not as texts to embed), and the rerun's progress total is
what is left, fixed when the stage starts. A small `kind: python` model that stops its own run
(SIGINT to itself, as Ctrl-C) after two batches keeps this to seconds."""
import json
import re
import signal
from pathlib import Path

from tests.pipeline.test_cli_errors import retbench

DOCS, QUERIES, BATCH = 60, 3, 8
STOPPED = re.compile(r"retbench: interrupted during embed mine documents: (\d+) of (\d+) texts kept; rerun to continue")

# The model: word-hash vectors. With STOP_AFTER set it sends its own process SIGINT during that
# batch (the run stops after it, keeping it); the code, and so the cache identity, is the same.
MODEL = '''
import os, signal, time, zlib
import numpy as np

calls = [0]


def embed(texts):
    calls[0] += 1
    if os.environ.get("STOP_AFTER") and calls[0] == int(os.environ["STOP_AFTER"]):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1)  # the stop request reaches the run (a watcher thread) before this batch ends
    out = np.zeros((len(texts), 16), dtype=np.float32)
    for row, text in enumerate(texts):
        for word in text.split():
            out[row, zlib.crc32(word.encode()) % 16] += 1.0
    return out + 0.01
'''


def collection(folder: Path) -> None:
    folder.mkdir(parents=True)
    words = "orbit signal engine cache vector index query answer ranking model batch journal shard".split()
    (folder / "corpus.jsonl").write_text("".join(
        json.dumps({"id": f"d{i}", "text": f"document {i} " + " ".join(words[(i + k) % len(words)] for k in range(5))})
        + "\n" for i in range(DOCS)))
    (folder / "queries.jsonl").write_text("".join(
        json.dumps({"id": f"q{i}", "text": f"{words[i]} {words[i + 1]}", "split": "dev"}) + "\n" for i in range(QUERIES)))
    (folder / "qrels.jsonl").write_text("".join(
        json.dumps({"query_id": f"q{i}", "doc_id": f"d{i}", "grade": 1}) + "\n" for i in range(QUERIES)))


def test_check_plan_and_progress_count_kept_batches_as_kept_after_a_stop(tmp_path, monkeypatch):
    collection(tmp_path / "data")
    (tmp_path / "mine_model.py").write_text(MODEL)
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"""name: counts
dataset: {{path: {tmp_path / 'data'}, format: jsonl, split: all}}
providers: [{{name: mine, kind: python, batch_size: {BATCH}, options: {{callable: "mine_model:embed"}}}}]
indexes: {{flat: true}}
output_dir: {tmp_path / 'out'}
store_dir: {tmp_path / 'store'}
""")
    monkeypatch.setenv("RETBENCH_PROGRESS_EVERY", "0")
    monkeypatch.setenv("STOP_AFTER", "2")
    stopped = retbench("run", spec, "--stage", "embed", cwd=tmp_path, prefect_home=tmp_path / "prefect")
    assert stopped.returncode == 128 + signal.SIGINT, stopped.stderr[-3000:]
    found = STOPPED.search(stopped.stderr)
    assert found, stopped.stderr[-3000:]
    kept, total = int(found[1]), int(found[2])
    # Whole batches only, from the second on (on a loaded machine the stop may land a batch later).
    assert total == DOCS and kept % BATCH == 0 and 2 * BATCH <= kept < DOCS, (kept, total)
    left = DOCS + QUERIES - kept

    monkeypatch.delenv("STOP_AFTER")
    check = retbench("check", spec, cwd=tmp_path, prefect_home=tmp_path / "prefect")
    assert check.returncode == 0, check.stderr
    said = " ".join(check.stdout.split())
    assert f"mine {left} texts to embed ({kept} kept by a stopped run; none in the cache yet)" in said, said
    assert f"({left} texts to embed;" in said  # the estimate is of the texts left, not of all of them

    rerun = retbench("run", spec, "--stage", "embed", cwd=tmp_path, prefect_home=tmp_path / "prefect")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    log = rerun.stdout + rerun.stderr
    assert f"mine document texts: {DOCS - kept} of {DOCS} to embed, {kept} kept by a stopped run" in log, log[-3000:]
    # Progress counts what is left, its total fixed at the start: never "16/60" growing to "60/60".
    lines = re.findall(r"embed mine documents: ([\d,]+)/([\d,]+) texts", log)
    assert lines, log[-3000:]
    assert {int(t) for _, t in lines} == {DOCS - kept}, lines
    assert int(lines[-1][0]) == DOCS - kept
