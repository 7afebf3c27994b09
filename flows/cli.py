"""`retbench` command line: run a benchmark spec, or score a TREC run like trec_eval."""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import traceback
from pathlib import Path

from retbench.tasks.config.stages import STAGES


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("retbench")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


class _VersionAction(argparse.Action):
    """argparse's "version" action, with the version looked up only when asked: the lookup reads
    the installed package's metadata, which every other command would pay for at start-up."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS,
                 help="show program's version number and exit"):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"retbench {_version()}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    """The `retbench` parser with every command (the docs' test parses their command lines with it)."""
    parser = argparse.ArgumentParser(prog="retbench", description=__doc__)
    parser.add_argument("--version", action=_VersionAction)
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run the benchmark flow for a spec (embedded Prefect, no server needed)")
    run.add_argument("spec", type=Path)
    run.add_argument("--output-dir", type=Path, help="override the spec's output_dir")
    run.add_argument("--store-dir", help="override the spec's store_dir (the cache root): a folder or an s3://... URI")
    run.add_argument("--stage", default="score", choices=STAGES,
                     help="run up to this stage (default: all); e.g. --stage embed after a model update")
    run.add_argument("--provider", action="append", dest="providers", metavar="NAME",
                     help="only these providers for a partial run, and the ones --force applies to (repeatable)")
    run.add_argument("--force", action="store_true", help="recompute --stage even when its output is in the store")
    run.add_argument("--remeasure", action="store_true",
                     help="measure the latency profile and the ANN sweep again (default: reuse this machine's figures)")
    run.add_argument("--dask", nargs="?", const="local", metavar="ADDRESS",
                     help="run the providers' stages in parallel on Dask: a local cluster, or the scheduler at ADDRESS")
    run.add_argument("--prefect", action="store_true",
                     help="run as a Prefect flow even when every stage's output is in the store (default: such a "
                          "run skips Prefect and its server; flows/fast_path.py)")
    run.add_argument("--debug", action="store_true", help="show tracebacks (and Prefect's logging) of expected failures")
    run.set_defaults(func=_run)

    history = commands.add_parser("history", help="print the trend of a spec's recorded runs")
    history.add_argument("spec", type=Path)
    history.add_argument("-m", "--measure", default="ndcg@10")
    history.add_argument("--store-dir", help="override the spec's store_dir")
    history.add_argument("--all-settings", action="store_true", help="also the ANN settings (default: exact search only)")
    history.add_argument("--debug", action="store_true", help="show tracebacks of expected failures")
    history.set_defaults(func=_history)

    from retbench.flows import (check_command, eval_command, hard_negatives_command, init_command, judge_command,
                                plugins_command)

    init_command.add_parser(commands)
    check_command.add_parser(commands)
    eval_command.add_parser(commands)
    hard_negatives_command.add_parser(commands)
    judge_command.add_parser(commands)
    plugins_command.add_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    command_itself = argv is None and args.command == "run"  # not a caller in Python, whose process this is not
    if argv is None and args.command == "eval":
        from retbench.tasks.allocator import keep_freed_memory

        # Scoring a large run allocates and frees arrays of the run's length one after the other;
        # kept, each reuses the last one's pages instead of asking the kernel for zeroed ones.
        keep_freed_memory()
    if command_itself:
        from retbench.flows import interrupts
        from retbench.tasks.allocator import keep_freed_memory

        keep_freed_memory()  # before any thread or child process starts (why: tasks/allocator.py)
        interrupts.install(before_flow=True)  # SIGINT/SIGTERM: stop after the batch in flight, exit 130/143
    if argv is None and args.command in ("run", "check"):
        from retbench.flows.lazy_pandas import defer_pandas_in_pyarrow

        defer_pandas_in_pyarrow()  # 1.3 CPU s of every run, for a check no object of ours needs
    code = _dispatch(args)
    if command_itself:
        _end_process(code)
    elif argv is None and args.command == "eval":
        _end_process(code, prefect=False)  # a 10M-line run's frames, freed only to exit: ~0.2 s of CPU
    return code


def _dispatch(args) -> int:
    try:
        return args.func(args)
    except Exception as error:
        from retbench.flows.errors import EXIT_EXPECTED, expected_failure, one_line
        from retbench.flows.interrupts import exit_code
        from retbench.tasks.progress import Interrupted, first_interruption

        failure = expected_failure(error)
        if failure is None:
            raise
        if getattr(args, "debug", False):
            traceback.print_exception(error)
        if isinstance(failure, Interrupted):
            stop = first_interruption() or failure  # the loop stopped in flight, not a stage refused after it
            print(one_line(stop), file=sys.stderr)
            return exit_code(stop.signum)
        print(one_line(failure), file=sys.stderr)
        return EXIT_EXPECTED


def _end_process(code: int, prefect: bool = True) -> None:
    """End a finished `retbench run` (or `retbench eval`, without Prefect) here. The interpreter's own teardown (freeing every module
    of polars, pyarrow, faiss and Prefect) took ~0.5 s of a 6 s cached run and does nothing a
    finished run needs: its files are written and closed, the API server is stopped; Prefect's
    log and event queues are drained (they drain in threading's shutdown, which os._exit skips:
    with your own PREFECT_API_URL their last records would be lost) and the exit handlers run, here."""
    import atexit
    import logging

    if prefect:
        from retbench.flows.prefect_server import drain_prefect_queues

        drain_prefect_queues()
    atexit._run_exitfuncs()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _run(args) -> int:
    import retbench.flows  # noqa: F401  (sets Prefect's environment defaults first)
    from retbench.flows.environment import check_environment
    from retbench.flows.prefect_server import preload_embedded_api

    # PREFECT_HOME, PREFECT_API_URL: refused in a second, before anything starts.
    for notice in check_environment():
        from retbench.flows.fast_path import print_info

        print_info(notice)
    # The API server's process imports Prefect's server (seconds) while this one checks the
    # inputs, and serves only once they pass: a typo, a missing dataset, a bad grade or an
    # output_dir that is a file fails in about a second (on a small dataset), and no server ever started.
    pending = preload_embedded_api()
    try:
        from retbench.tasks.config.spec import load_spec, select_providers
        from retbench.tasks.stages.preflight import preflight

        output_dir = str(args.output_dir.resolve()) if args.output_dir else None
        store_dir = _local_or_uri(args.store_dir)
        spec = load_spec(args.spec, output_dir=output_dir, store_dir=store_dir)
        select_providers(spec, args.providers)
        if args.dask:
            from retbench.tasks.extras import require

            require("dask", "--dask")
        dataset, key = preflight(spec)  # the files, folders, secrets, and every id and grade of the dataset (what `check` checks)
        from retbench.tasks.stages.disk_space import check_free_space

        check_free_space(spec, dataset, key)  # a store too small for what the run would write: refused now
        if not (args.prefect or args.force or args.remeasure):
            from retbench.flows.fast_path import run_if_cached
            from retbench.tasks.pipeline import Selection

            if run_if_cached(spec, Selection(stage=args.stage, providers=tuple(args.providers or ())), str(args.spec)):
                if pending is not None:
                    pending.discard()
                return 0
    except BaseException:
        if pending is not None:
            pending.discard()
        raise
    # It boots (migrations, services) while this process imports the pipeline and Prefect.
    api = pending.start() if pending is not None else None
    if api is not None:
        from retbench.flows.interrupts import end_with_process

        end_with_process(api.process.kill)  # a second Ctrl-C ends the run at once, and the server with it
    try:
        from retbench.flows.benchmark import with_task_runner
        from retbench.flows.errors import quiet_expected_failures

        if not args.debug:
            quiet_expected_failures()
        if api is not None:
            from retbench.tasks.pipeline import Selection, import_first_use_modules

            # Not on Dask: its workers embed, in their own processes.
            import_first_use_modules(spec if not args.dask else None, Selection(
                stage=args.stage, providers=tuple(args.providers or ()), force=args.force))
            api.wait_until_ready()
        with _without_heartbeats(api is not None):
            with_task_runner(args.dask, debug=args.debug)(
                str(args.spec), output_dir=output_dir, store_dir=store_dir,
                stage=args.stage, providers=args.providers, force=args.force, remeasure=args.remeasure,
            )
    finally:
        if api is not None:
            api.stop()  # now, so that an error line printed after this is the last line
    return 0


def _without_heartbeats(embedded: bool):
    """On our own embedded API server, no flow run heartbeats: they let a server mark a run whose
    process died as crashed, but this server dies with the process; and joining the heartbeat
    thread (it sleeps in one-second steps) held up the end of every run by up to a second."""
    if not embedded:
        return contextlib.nullcontext()
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    return temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None})


def _history(args) -> int:
    import polars as pl

    from retbench.tasks.analysis import history
    from retbench.tasks.reporting.tables import text_table
    from retbench.tasks.store.remote import is_remote, scratch_for
    from retbench.tasks.config.spec import load_spec

    spec = load_spec(args.spec, store_dir=_local_or_uri(args.store_dir))
    store = spec.store_dir
    if is_remote(store):
        store = scratch_for(store, spec.store_mirror)  # history/summary/ is fetched, nothing else
    elif not Path(store).is_dir():
        # A mistyped --store-dir is not a spec that never ran: "no recorded runs" would hide the typo.
        what = "is not a folder" if Path(store).exists() else "does not exist"
        print(f"retbench: store folder {store} {what}; expected the store_dir the spec's runs recorded their "
              "history in (the spec's store_dir, or --store-dir)", file=sys.stderr)
        return 2
    measures = history.recorded_measures(store, spec.name)
    if not measures:
        print(f"no recorded runs of spec {spec.name!r} in {store}")
        return 0
    if args.measure not in measures:
        print(f"retbench: measure {args.measure!r} is not recorded in the history of spec {spec.name!r} in {store}; "
              f"pass -m with one of: {', '.join(measures)}", file=sys.stderr)
        return 2
    trend = history.trend_table(store, spec.name, args.measure)
    if not args.all_settings:
        trend = trend.select(*history.TREND_KEYS, *[c for c in trend.columns if c.endswith("/exact")])
    print(f"{args.measure} of spec {spec.name!r}, one row per run (oldest first)")
    print(text_table(trend.with_columns(
        pl.col("finished_at").dt.strftime("%Y-%m-%d %H:%M"), pl.col("run_id").str.slice(0, 8), pl.col("git_commit").str.slice(0, 8),
        pl.col("dataset").str.slice(0, 8))))
    if trend["series"].n_unique() > 1:
        print(f"the data changed between runs: {trend['series'].n_unique()} series (a new one starts when the dataset "
              f"content key changes); regressions are computed only within a series")
        for series, run_id, why in history.series_starts(store, spec.name):
            print(f"series {series} from run {run_id[:8]}: {why}")
    return 0


def _local_or_uri(store: str | None) -> str | None:
    from retbench.tasks.store.remote import is_remote

    if store is None or is_remote(store):
        return store
    return str(Path(store).resolve())


if __name__ == "__main__":
    sys.exit(main())  # `run` ends the process in main (_end_process)
