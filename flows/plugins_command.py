"""`retbench plugins [SPEC]`: every registered provider, reranker, index kind and dataset format,
and where each came from (built in, an installed package's entry point, a spec's plugins)."""
from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "plugins", help="list the registered providers, rerankers, index kinds and dataset formats, and where each comes from",
        description=__doc__)
    parser.add_argument("spec", type=Path, nargs="?", help="also import this spec's plugins (and python_path)")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of expected failures")
    parser.set_defaults(func=run)
    return parser


def registered() -> list[tuple[str, str, str]]:
    """(what, kind, origin) for every registered kind, grouped by registry."""
    from retbench.tasks import datasets, indexes, providers, rerankers

    return [(what, kind, origin) for what, package in (("provider", providers), ("reranker", rerankers),
                                                       ("index kind", indexes), ("dataset format", datasets))
            for kind, origin in package.kind_origins().items()]


def run(args) -> int:
    if args.spec is not None:
        import yaml

        from retbench.tasks.config.spec import SpecError, import_spec_plugins

        if not args.spec.is_file():
            raise SpecError(f"spec file not found: {args.spec}")
        raw = yaml.safe_load(args.spec.read_text(encoding="utf-8"))
        import_spec_plugins(raw if isinstance(raw, dict) else {}, args.spec.parent)
    rows = registered()
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    for what, kind, origin in rows:
        print(f"{what:<{widths[0]}}  {kind:<{widths[1]}}  {origin}")
    return 0
