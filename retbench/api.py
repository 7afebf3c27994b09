"""The Python API: `run`, `load` and `evaluate`, a thin layer over what `retbench run` and
`retbench eval` do (the same spec checks, cache, fast path and Prefect flow), for a notebook or a
script. Objects handed to `run` become providers or rerankers of kind python in this process."""
from __future__ import annotations

import copy
import logging
import os
import threading
from pathlib import Path
from typing import Any, Mapping, Sequence

from retbench.results import Results

DEFAULT_MEASURES = ("ndcg@10", "recall@10", "mrr", "map")


def run(spec: str | os.PathLike | Mapping[str, Any], *, providers: Mapping[str, Any] | None = None,
        rerankers: Mapping[str, Any] | None = None, output_dir: str | os.PathLike | None = None,
        store_dir: str | os.PathLike | None = None, stage: str = "score", only: Sequence[str] | None = None,
        force: bool = False, remeasure: bool = False, dask: str | None = None, prefect: bool = False,
        log: bool = True) -> Results:
    """Run a benchmark and return its results.

    Args:
        spec: a spec file's path, or the spec itself as a mapping (what the YAML file would hold;
            its relative paths are then relative to the current folder).
        providers: name -> your model: a function `f(texts)` or `f(texts, role)`, a BEIR-style object
            (`encode_queries` / `encode_corpus`), a sentence-transformers or MTEB-style object with
            `encode`, or a "module:attribute" string. A name the spec has, of kind python, takes
            the object; a new name is added as a provider of kind python.
        rerankers: name -> your reranker: a function `score(query, documents)`, a CrossEncoder-style
            object with `predict(pairs)`, or a "module:attribute" string; a system of the spec
            refers to it by name.
        output_dir: overrides the spec's output_dir; store_dir: overrides its store_dir (the cache).
        stage: run up to this stage (`load-dataset`, `chunk`, `finetune`, `embed`, `index`, `retrieve`, `score`).
        only: only these providers (a partial run; `force` applies to them).
        force: recompute `stage` even when its output is in the store.
        remeasure: measure latency and the ANN sweep again.
        dask: "local" (a local cluster) or a scheduler address; objects handed in run in this process
            only, so a run with objects is refused on Dask: name them by import path instead.
        prefect: run as a Prefect flow even when every output is cached (otherwise such a run skips
            Prefect, as `retbench run` does).
        log: print the run's progress lines (the "retbench" logger at INFO); False: its warnings only.

    Returns:
        Results: the output folder's tables as polars frames, the verdict and the report's path.

    Raises:
        SpecError: a refused spec, dataset or vector file (the message names the key, file and line);
            other errors that stop a run are raised as they are.
        UserCodeError: your code raised, or returned something else than one vector per text.
        Interrupted: Ctrl-C stopped the run after the batch in flight, keeping it.
    """
    from retbench.tasks.config.spec import SpecError

    raw, spec_path = _spec_mapping(spec)
    raw = copy.deepcopy(raw)
    live = _bind(raw, "providers", providers or {}) + _bind(raw, "rerankers", rerankers or {})
    if live and dask:
        raise SpecError(f"{', '.join(live)}: Python objects run in this process; on Dask name them by import path "
                        f"(\"module:attribute\"), which every worker imports")
    overrides = {"output_dir": _absolute(output_dir), "store_dir": _absolute_store(store_dir)}
    # The run's lines at INFO, or its warnings only; Prefect prints the "retbench" logger's records
    # in a flow run (PREFECT_LOGGING_EXTRA_LOGGERS), the fast path its own.
    logger = logging.getLogger("retbench")
    level = logger.level
    logger.setLevel(logging.INFO if log else logging.WARNING)
    try:
        output = _in_a_thread(lambda: _run(raw, spec_path, overrides, stage, list(only or ()), force, remeasure, dask,
                                           prefect))
    finally:
        logger.setLevel(level)
    return Results(output)


def load(output_dir: str | os.PathLike) -> Results:
    """The results of a finished run, read from its output folder."""
    return Results(Path(output_dir))


def evaluate(qrels: Any, run: Any, measures: Sequence[str] | str = DEFAULT_MEASURES, *, per_query: bool = False,
             relevance_level: int = 1, complete: bool = False) -> "pl.DataFrame":  # noqa: F821
    """Score a run against judgments with trec_eval's conventions: the numbers `retbench eval`
    prints, as a polars frame [query_id, measure, value] whose rows of means have query_id "all"
    (with per_query, each query's rows come first), as `retbench eval --format parquet` writes.

    Args:
        qrels: a TREC qrels file, a frame (polars or pandas) with query_id, doc_id and grade (or
            the names qid, docno, relevance, label), or a dict {query_id: {doc_id: grade}}.
        run: a TREC run file, a frame with query_id, doc_id and score, or {query_id: {doc_id: score}}.
        measures: names such as "ndcg@10", "recall@100", "mrr", "map", "p@5".
        relevance_level: the lowest grade binary measures count as relevant.
        complete: average over every judged query; queries missing from the run score 0.
    """
    from retbench.flows.eval_command import SUMMARY_ID, score_files

    measures = [measures] if isinstance(measures, str) else list(measures)
    if _is_path(qrels) and _is_path(run):
        return score_files(Path(qrels), Path(run), measures, relevance_level=relevance_level, complete=complete,
                           per_query=per_query)
    import polars as pl

    from retbench.tasks.analysis.metrics import evaluate as scored
    from retbench.tasks.analysis.trec import read_qrels, read_run

    qrels_frame = read_qrels(qrels) if _is_path(qrels) else _frame(qrels, "grade")
    run_frame = read_run(run) if _is_path(run) else _frame(run, "score")
    result = scored(run_frame, qrels_frame, measures, relevance_level=relevance_level, complete=complete)
    means = pl.DataFrame({"query_id": SUMMARY_ID, "measure": list(result.means()), "value": list(result.means().values())},
                         schema={"query_id": pl.String, "measure": pl.String, "value": pl.Float64})
    if not per_query:
        return means
    order = {str(m): i for i, m in enumerate(result.means())}
    rows = (result.per_query.with_columns(pl.col("measure").replace_strict(order).alias("_m"))
            .sort(["query_id", "_m"]).drop("_m"))
    return pl.concat([rows.select("query_id", "measure", "value"), means])


# ---------------------------------------------------------------- the spec and the objects handed in


def _spec_mapping(spec: Any) -> tuple[dict, str]:
    """(the spec as a mapping, the file its relative paths are relative to)."""
    from retbench.tasks.config.spec import SpecError

    if isinstance(spec, Mapping):
        return dict(spec), str(Path.cwd() / "retbench.run")
    path = Path(spec)
    if not path.is_file():
        raise SpecError(f"spec file not found: {path}")
    import yaml

    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        raise SpecError(f"{path}: not valid YAML: {error}") from error
    if not isinstance(raw, dict):
        raise SpecError(f"{path}: expected a mapping at the top level, found {type(raw).__name__}")
    return raw, str(path.resolve())


def _bind(raw: dict, key: str, objects: Mapping[str, Any]) -> list[str]:
    """Put each object into the spec's `key` list as kind python; the names of live objects."""
    from retbench.tasks.config.spec import SpecError
    from retbench.tasks.user_code import keep_live

    entries = raw.setdefault(key, [])
    if not isinstance(entries, list):
        raise SpecError(f"{key}: expected a list")
    live = []
    for name, obj in objects.items():
        target = {"callable": obj} if isinstance(obj, str) else {"object": keep_live(obj, name)}
        existing = next((e for e in entries if isinstance(e, dict) and e.get("name") == name), None)
        if existing is None:
            entries.append({"name": name, "kind": "python", "options": target})
        elif existing.get("kind") != "python":
            raise SpecError(f"{key}: {name!r} is of kind {existing.get('kind')!r} in the spec; pass your object under "
                            f"another name, or give it kind: python")
        else:
            options = {k: v for k, v in (existing.get("options") or {}).items() if k not in ("callable", "object")}
            existing["options"] = {**options, **target}
        if not isinstance(obj, str):
            live.append(f"{key}[{name!r}]")
    return live


def _absolute(path: Any) -> str | None:
    return None if path is None else str(Path(path).resolve())


def _absolute_store(store: Any) -> str | None:
    from retbench.tasks.store.remote import is_remote

    return None if store is None else (str(store) if is_remote(str(store)) else str(Path(store).resolve()))


def _is_path(value: Any) -> bool:
    return isinstance(value, (str, os.PathLike))


_NAMES = {"qid": "query_id", "query": "query_id", "docno": "doc_id", "docid": "doc_id", "doc": "doc_id",
          "relevance": "grade", "label": "grade", "rel": "grade"}


def _frame(value: Any, value_column: str) -> "pl.DataFrame":  # noqa: F821
    """A polars frame [query_id, doc_id, <value_column>] from a frame or a nested dict."""
    import polars as pl

    if isinstance(value, Mapping):
        rows = [(str(q), str(d), v) for q, docs in value.items() for d, v in docs.items()]
        return pl.DataFrame(rows, schema={"query_id": pl.String, "doc_id": pl.String,
                                          value_column: pl.Int64 if value_column == "grade" else pl.Float64},
                            orient="row")
    frame = value if isinstance(value, pl.DataFrame) else pl.from_pandas(value) if hasattr(value, "to_numpy") else None
    if frame is None:
        raise TypeError(f"expected a file path, a polars or pandas frame or a dict of dicts (got {type(value).__name__})")
    renames = {c: _NAMES[c] for c in frame.columns if c in _NAMES and _NAMES[c] not in frame.columns}
    if value_column == "score" and "grade" in renames.values():
        renames = {c: n for c, n in renames.items() if n != "grade"}
    return frame.rename(renames)


# ---------------------------------------------------------------- running it


def _run(raw: dict, spec_path: str, overrides: dict, stage: str, only: list[str], force: bool, remeasure: bool,
         dask: str | None, prefect: bool) -> Path:
    import retbench.flows  # noqa: F401  (Prefect's environment defaults, before Prefect is imported)
    from retbench.flows.environment import check_environment
    from retbench.tasks.config.spec import load_spec_data, select_providers
    from retbench.tasks.progress import clear_stop
    from retbench.tasks.stages.preflight import preflight

    clear_stop()  # a stop of an earlier run in this process is not this run's
    for notice in check_environment():  # a PREFECT_HOME moved to the cache folder
        logging.getLogger("retbench").info(notice)
    spec = load_spec_data(raw, spec_path, **overrides)
    select_providers(spec, only)
    dataset, key = preflight(spec)  # the files, ids and grades, before any work (what `retbench check` checks)
    from retbench.tasks.stages.disk_space import check_free_space

    check_free_space(spec, dataset, key)  # a store too small for what the run would write: refused now
    if not (prefect or force or remeasure or dask):
        from retbench.flows.fast_path import run_if_cached
        from retbench.tasks.pipeline import Selection

        if run_if_cached(spec, Selection(stage=stage, providers=tuple(only)), spec_path):
            return Path(spec.output_dir)
    from retbench.flows.benchmark import with_task_runner

    output = with_task_runner(dask)(spec_path, stage=stage, providers=only or None, force=force, remeasure=remeasure,
                                    spec_data=raw, **overrides)
    return Path(output)


def _in_a_thread(work) -> Any:
    """`work()` in a thread of its own, so that it runs the same inside a running event loop
    (Jupyter's), where Prefect's synchronous flow call would not; Ctrl-C asks it to stop after
    the batch in flight (a second one stops waiting)."""
    from retbench.tasks.progress import Interrupted, first_interruption, request_stop

    outcome: dict[str, Any] = {}

    def target():
        try:
            outcome["value"] = work()
        except BaseException as error:  # noqa: BLE001  handed to the caller's thread
            outcome["error"] = error

    thread = threading.Thread(target=target, name="retbench-run", daemon=True)
    thread.start()
    interrupted = False
    while thread.is_alive():
        try:
            thread.join(0.2)
        except KeyboardInterrupt:
            if interrupted:
                raise
            interrupted = True
            import signal

            request_stop(signal.SIGINT)
    if "error" in outcome:
        error = outcome["error"]
        if isinstance(error, Interrupted):
            raise first_interruption() or error from None
        raise error
    return outcome["value"]
