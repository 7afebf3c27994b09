"""Serve the `nightly` and `manual` deployments of the benchmark flow from this process.

    PREFECT_API_URL=http://127.0.0.1:4200/api python deployments/serve.py [--spec specs/sample.yaml] [--cron "0 2 * * *"]

`serve` registers both deployments with the Prefect server and runs their flow
runs here, so no work pool or worker is needed (see prefect.yaml for that route).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import retbench.flows  # noqa: E402,F401  (Prefect environment defaults)


def deployments(spec: str, cron: str, timezone: str = "UTC"):
    from prefect.schedules import Cron

    from retbench.flows.benchmark import benchmark

    spec_path = str((ROOT / spec).resolve()) if not Path(spec).is_absolute() else spec
    nightly = benchmark.to_deployment(
        name="nightly", schedule=Cron(cron, timezone=timezone), parameters={"spec_path": spec_path, "remeasure": True},
        description="Full re-benchmark of the spec every night; latency and the ANN sweep are measured again.", tags=["retbench", "nightly"])
    manual = benchmark.to_deployment(
        name="manual", parameters={"spec_path": spec_path, "stage": "score", "providers": None, "force": False,
                                 "remeasure": False},
        description="The benchmark with parameters: spec_path, providers, stage, force, remeasure.", tags=["retbench", "manual"])
    return nightly, manual


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spec", default="specs/sample.yaml", help="spec file, relative to the project root")
    parser.add_argument("--cron", default="0 2 * * *", help="nightly schedule (default 02:00)")
    parser.add_argument("--timezone", default="UTC")
    args = parser.parse_args(argv)
    from retbench.tasks.allocator import keep_freed_memory

    keep_freed_memory()  # here, and in the flow run processes `serve` starts (tasks/allocator.py says why)
    from prefect import serve

    serve(*deployments(args.spec, args.cron, args.timezone))


if __name__ == "__main__":
    main()
