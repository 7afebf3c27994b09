"""The Python API as a notebook user calls it: `retbench.run` with a model object, inside a running
event loop, from a folder holding its own tasks.py and flows/; `retbench.load`; `retbench.evaluate`
against `retbench eval` and pytrec_eval."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import polars as pl
import pytest

from retbench.support.paths import ROOT

SAMPLE = ROOT / "data" / "sample"

NOTEBOOK = textwrap.dedent(f"""\
    import asyncio, json, sys

    import retbench

    imported_at_start = sorted(m for m in ("torch", "prefect", "numpy", "polars") if m in sys.modules)

    from retbench.tasks.providers.hashing import HashingProvider

    model = HashingProvider(dim=256)


    def my_model(texts, role):  # a notebook's function: role is "query" or "document"
        return model.encode(texts, role)


    spec = {{"name": "notebook", "dataset": {{"path": {str(SAMPLE)!r}}}, "chunking": {{"strategy": "none"}},
            "providers": [{{"name": "hashing", "kind": "hashing", "options": {{"dim": 256}}}}],
            "indexes": {{"flat": True, "ivf": None}}, "output_dir": "out"}}


    async def cell():  # Jupyter runs cells inside its event loop
        first = retbench.run(spec, providers={{"mine": my_model}})
        orchestrated = first.manifest["run"]["orchestrator"]  # read now: the folder holds the last run's
        again = retbench.run(spec, providers={{"mine": my_model}})
        return first, orchestrated, again


    first, orchestrated, again = asyncio.run(cell())
    loaded = retbench.load("out")
    scores = loaded.scores
    print(json.dumps({{
        "imported_at_start": imported_at_start,
        "torch": "torch" in sys.modules,
        "repr": repr(first),
        "best": first.best,
        "mine": scores.filter(scores["setting"] == "mine/flat").drop("setting").to_dicts()[0],
        "hashing": scores.filter(scores["setting"] == "hashing/flat").drop("setting").to_dicts()[0],
        "tables": sorted({{"summary", "per_query", "verdict", "ladder", "failures"}} & set(loaded.tables)),
        "verdict_rows": loaded.verdict.height, "orchestrators": [orchestrated, again.manifest["run"]["orchestrator"]],
        "embedded_again": again.manifest["texts"]["embedded"],
    }}))
    """)


def test_run_from_a_notebook_folder_with_its_own_tasks_and_flows_inside_an_event_loop(tmp_path):
    (tmp_path / "tasks.py").write_text("raise RuntimeError('the notebook folder\\'s tasks.py was imported')\n")
    (tmp_path / "flows").mkdir()
    (tmp_path / "flows" / "__init__.py").write_text("raise RuntimeError('the notebook folder\\'s flows/ was imported')\n")
    (tmp_path / "notebook.py").write_text(NOTEBOOK)
    # As Jupyter does: the notebook's folder first on sys.path.
    env = {**__import__("os").environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run([sys.executable, "notebook.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    said = json.loads(done.stdout.strip().splitlines()[-1])
    assert said["imported_at_start"] == []  # import retbench: no Prefect, torch, numpy or polars
    assert said["torch"] is False  # a run without a model never imports torch
    assert said["mine"] == said["hashing"]  # the function gives the hashing provider's scores, value for value
    assert said["tables"] == ["failures", "ladder", "per_query", "summary", "verdict"] and said["verdict_rows"] == 2
    assert said["orchestrators"] == ["prefect", "in-process"] and said["embedded_again"] == 0
    assert said["best"]["measure"] == "ndcg@10" and said["repr"].startswith(f"Results({tmp_path / 'out'}: best ")


def test_objects_are_refused_on_dask_and_a_spec_name_of_another_kind_is_not_taken(tmp_path):
    import retbench

    spec = {"name": "x", "dataset": {"path": str(SAMPLE)}, "providers": [{"name": "mine", "kind": "hashing"}]}
    with pytest.raises(retbench.SpecError, match=r"providers\['other'\]: Python objects run in this process"):
        retbench.run(spec, providers={"other": lambda texts: texts}, dask="local", log=False)
    with pytest.raises(retbench.SpecError, match="'mine' is of kind 'hashing' in the spec"):
        retbench.run(spec, providers={"mine": lambda texts: texts}, log=False)
    with pytest.raises(FileNotFoundError, match="no manifest.json"):
        retbench.load(tmp_path)


def _trec_files(tmp_path):
    rng = np.random.default_rng(7)
    qrels = [(f"q{q}", f"d{d}", int(rng.integers(0, 4))) for q in range(30) for d in rng.choice(60, 8, replace=False)]
    run = [(f"q{q}", f"d{d}", float(s)) for q in range(32) for d, s in zip(rng.choice(60, 25, replace=False),
                                                                             np.round(rng.random(25), 2))]
    qrels_path, run_path = tmp_path / "qrels.txt", tmp_path / "run.trec"
    qrels_path.write_text("".join(f"{q} 0 {d} {g}\n" for q, d, g in qrels))
    by_query: dict[str, list] = {}
    for q, d, s in run:
        by_query.setdefault(q, []).append((d, s))
    run_path.write_text("".join(f"{q} Q0 {d} {rank} {s} mine\n" for q, rows in by_query.items()
                                for rank, (d, s) in enumerate(sorted(rows, key=lambda r: -r[1]), 1)))
    return qrels, run, qrels_path, run_path


def test_evaluate_equals_retbench_eval_and_pytrec_eval(tmp_path):
    import pytrec_eval

    import retbench

    qrels, run, qrels_path, run_path = _trec_files(tmp_path)
    measures = ["ndcg@10", "recall@20", "map", "mrr"]
    from_files = retbench.evaluate(qrels_path, run_path, measures, per_query=True)
    out = tmp_path / "eval.parquet"
    subprocess.run([sys.executable, "-m", "retbench.flows.cli", "eval", str(qrels_path), str(run_path),
                    *[a for m in measures for a in ("-m", m)], "-q", "--format", "parquet", "-o", str(out)], check=True)
    assert from_files.equals(pl.read_parquet(out))
    # The same scores from frames (with PyTerrier's column names) and from ranx-style dicts.
    qrels_frame = pl.DataFrame(qrels, schema=["qid", "docno", "label"], orient="row")
    run_dict: dict[str, dict[str, float]] = {}
    for q, d, s in run:
        run_dict.setdefault(q, {})[d] = s
    assert retbench.evaluate(qrels_frame, run_dict, measures, per_query=True).equals(from_files)
    assert retbench.evaluate(qrels_path, run_dict, "ndcg@10")["value"][0] == from_files.filter(
        (pl.col("query_id") == "all") & (pl.col("measure") == "ndcg@10"))["value"][0]
    # trec_eval's own C code, per query (its measures over queries in both files).
    qrels_dict: dict[str, dict[str, int]] = {}
    for q, d, g in qrels:
        qrels_dict.setdefault(q, {})[d] = g
    trec = pytrec_eval.RelevanceEvaluator(qrels_dict, {"ndcg_cut.10", "map", "recip_rank"}).evaluate(
        {q: docs for q, docs in run_dict.items() if q in qrels_dict})
    ours = {(r["query_id"], r["measure"]): r["value"] for r in from_files.iter_rows(named=True)}
    for query, values in trec.items():
        assert ours[(query, "ndcg@10")] == pytest.approx(values["ndcg_cut_10"], abs=1e-12)
        assert ours[(query, "map")] == pytest.approx(values["map"], abs=1e-12)
        assert ours[(query, "mrr")] == pytest.approx(values["recip_rank"], abs=1e-12)
