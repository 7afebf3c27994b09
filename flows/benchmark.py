"""The benchmark flow: tasks/pipeline.py's `run_pipeline`, with each stage call a Prefect task run.

The wiring lives once, in the plain pipeline function (tests and the crash worker call it
directly); this module only supplies a runner that turns each stage call into a task run,
names the runs after their stage and provider, and publishes the Prefect artifacts. Our
stages cache by content themselves, so Prefect must not hash or persist their inputs.
"""
from __future__ import annotations

import functools
import logging
import uuid

import polars as pl
from prefect import flow, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.exceptions import UnfinishedRun
from prefect.runtime import deployment, flow_run, task_run
from prefect.states import Cancelled
from prefect.task_runners import ThreadPoolTaskRunner

from retbench.flows import interrupts
from retbench.flows.interrupts import refusing_after_stop
from retbench.tasks.config.spec import load_spec, load_spec_data, slug
from retbench.tasks.pipeline import RegressionError, Selection, run_pipeline  # noqa: F401  (RegressionError: part of the flow's API)
from retbench.tasks.progress import Interrupted
from retbench.tasks.reporting.publish import Published, regressions_markdown, verdict_markdown


class StageFuture:
    """A submitted stage call. Prefect leaves a call whose input failed in a pending state and
    `result()` then says only "UnfinishedRun"; this one raises the failed input's own error
    (an HTTP 401 in one embedding part, say), which the command line reports in one line."""

    def __init__(self, future, upstream: list["StageFuture"], wait=None):
        self.future, self.upstream, self.wait = future, upstream, wait

    def result(self):
        try:
            if self.wait is not None:
                self.wait(self.future)  # on Dask: in steps, giving up when a stopped run's worker is gone
            return self.future.result()
        except UnfinishedRun:
            for parent in self.upstream:
                parent.result()  # raises the error that kept this call from running
            raise


def _unwrap(value, found: list[StageFuture]):
    """`value` with our futures replaced by Prefect's (which Prefect resolves), noting them."""
    if isinstance(value, StageFuture):
        found.append(value)
        return value.future
    if isinstance(value, (list, tuple)):
        return type(value)(_unwrap(v, found) for v in value)
    if isinstance(value, dict):
        return {k: _unwrap(v, found) for k, v in value.items()}
    return value


class PrefectRunner:
    """Submits each stage call as a Prefect task run on the flow's task runner."""

    orchestrator = "prefect"

    def __init__(self, wait=None):
        self._tasks: dict = {}
        self.wait = wait  # wait(future) before its result (flows/dask_run.py), or None

    @property
    def default_shards(self) -> int:
        """8 parts per set where task runs run side by side (Dask: over its workers); 1 on
        the default runner, which runs one stage call at a time."""
        from prefect.context import FlowRunContext

        context = FlowRunContext.get()
        runner = context.task_runner if context else None
        return 8 if runner is not None and type(runner).__name__ == "DaskTaskRunner" else 1

    def submit(self, stage: str, fn, *args, label: str = "", **kwargs) -> StageFuture:
        key = (stage, fn)
        if key not in self._tasks:
            call = refusing_after_stop(_with_inputs_fetched(fn), lambda: task_run.name or stage)
            self._tasks[key] = task(call, name=stage, cache_policy=NO_CACHE, persist_result=False)
        upstream: list[StageFuture] = []
        args, kwargs = _unwrap(args, upstream), _unwrap(kwargs, upstream)
        future = self._tasks[key].with_options(task_run_name=label or stage).submit(*args, **kwargs)
        return StageFuture(future, upstream, self.wait)


def _with_inputs_fetched(fn):
    """`fn` (a stage call) that first fetches the store files its arguments name and this
    process's scratch folder lacks: on Dask the call that wrote them may have run on another
    machine (tasks/store/remote.fetch_inputs; nothing to do on a local store)."""

    @functools.wraps(fn)
    def call(*args, **kwargs):
        from retbench.tasks.store.remote import fetch_inputs

        fetch_inputs(args, kwargs)
        return fn(*args, **kwargs)

    return call


def publish_artifacts(spec):
    def publish(published: Published) -> None:
        from pathlib import Path

        summary = pl.read_parquet(Path(spec.output_dir) / "summary.parquet")
        create_table_artifact(key=slug(f"{spec.name}-summary"), table=summary.to_dicts(),
                              description=f"retbench summary of {spec.name}")
        create_markdown_artifact(key=slug(f"{spec.name}-regressions"), markdown=regressions_markdown(published),
                                 description=f"regressions of {spec.name} against the previous and baseline runs")
        create_markdown_artifact(key=slug(f"{spec.name}-verdict"), markdown=verdict_markdown(published),
                                 description=f"verdict of {spec.name} and where its full report is")
    return publish


def _attach_dask():
    """On Dask the stage calls run in the workers' processes: their progress is summed here and a
    stop request is sent to each (flows/dask_run.py). None on the default runner."""
    from prefect.context import FlowRunContext

    context = FlowRunContext.get()
    runner = context.task_runner if context else None
    if runner is None or type(runner).__name__ != "DaskTaskRunner":
        return None
    from prefect import get_run_logger

    from retbench.flows import dask_run

    return dask_run.attach(runner, emit=get_run_logger().info)


# One stage call at a time: the local models already use every core, and two at once would
# fight over CPU and memory. `--dask` spreads the providers' stages over processes instead.
@flow(name="benchmark", task_runner=ThreadPoolTaskRunner(max_workers=1))
def benchmark(spec_path: str, output_dir: str | None = None, store_dir: str | None = None,
              stage: str = "score", providers: list[str] | None = None, force: bool = False,
              remeasure: bool = False, spec_data: dict | None = None) -> str:
    """Run the benchmark described by the spec file up to `stage`; returns the output directory.
    `spec_data`: the spec itself (retbench.run), `spec_path` then the file or folder it stands for."""
    # The stages log progress and the summary at INFO on the "retbench" logger, which Prefect
    # shows as this run's logs (PREFECT_LOGGING_EXTRA_LOGGERS); its default level would hide them.
    retbench_log = logging.getLogger("retbench")
    retbench_log.setLevel(max(logging.INFO, retbench_log.level))  # quieter only if a caller asked (retbench.run)
    # SIGINT/SIGTERM stop the run after the batch in flight (flows/interrupts.py), in place of
    # the SIGTERM handler Prefect's engine has just installed for this flow run: in `retbench run`
    # and in a deployment's flow-run process, not in a Python caller's process (a test's).
    if interrupts.armed() or deployment.id is not None:
        interrupts.install()
    dask = _attach_dask()
    if deployment.id is not None:
        interrupts.quiet_stops()
    if spec_data is not None:
        spec = load_spec_data(spec_data, spec_path, output_dir=output_dir, store_dir=store_dir)
    else:
        spec = load_spec(spec_path, output_dir=output_dir, store_dir=store_dir)
    selection = Selection(stage=stage, providers=tuple(providers or ()), force=force, remeasure=remeasure)
    try:
        result = run_pipeline(spec, selection, spec_path=spec_path, runner=PrefectRunner(dask.wait if dask else None),
                              run_id=str(flow_run.id or uuid.uuid4()), on_published=publish_artifacts(spec))
    except Interrupted as stop:
        if dask is not None:
            dask.settle()  # the other parts' last counts, so the line sums every part's kept texts
        stop = interrupts.current_stop() or stop
        if deployment.id is None:
            raise stop from None  # `retbench run` prints it as its one line, exit 130/143
        # A deployment's run cancelled from Prefect (its worker sent SIGTERM): a Cancelled run
        # that says what was kept, rather than a failure with a traceback.
        return Cancelled(message=f"retbench: {stop}")
    except Exception as error:
        lost = dask.lost(error) if dask is not None else None
        if lost is None:
            raise
        raise lost from error  # one line, exit 2 (flows/errors.py), not the client's traceback
    finally:
        if dask is not None:
            from retbench.flows.dask_run import detach

            detach(dask)
    return result.output_dir


def with_task_runner(dask: str | None, debug: bool = False):
    """The benchmark flow on the default runner, or on Dask: "local" starts a local
    cluster (one process per core), anything else is a scheduler address. Dask's own INFO
    lines are left out of the run's log unless `debug`."""
    if not dask:
        return benchmark
    from retbench.tasks.extras import require

    require("dask")
    from prefect_dask import DaskTaskRunner

    from retbench.flows.dask_run import quiet_dask

    quiet_dask(debug)

    if dask == "local":
        runner = DaskTaskRunner(cluster_kwargs={"n_workers": 2, "threads_per_worker": 1, "processes": True})
    else:
        runner = DaskTaskRunner(address=dask)
    return benchmark.with_options(task_runner=runner)
